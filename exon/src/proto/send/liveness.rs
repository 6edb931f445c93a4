//! Peer liveness: a destination with work pending (messages queued, tokens or a slot
//! request unanswered) that has not been heard from for [`Config::timers.unreachable_after`](crate::proto::TimerConfig::unreachable_after) is
//! reported unreachable ([`Event::PeerUnreachable`]), and reachable again
//! ([`Event::PeerReachable`]) at the first datagram accepted from it. Nothing is dropped
//! because a peer is unreachable: only a deadline ([`Node::abandon`]) gives a message up.
//!
//! [`Config::timers.unreachable_after`](crate::proto::TimerConfig::unreachable_after): crate::proto::TimerConfig::unreachable_after
//! [`Event::PeerUnreachable`]: crate::proto::Event::PeerUnreachable
//! [`Event::PeerReachable`]: crate::proto::Event::PeerReachable

use std::time::{Duration, Instant};

use crate::proto::{NodeId, PeerMap};

/// What the node knows of one destination's liveness.
#[derive(Debug, Clone, Copy)]
struct Peer {
    /// Since when the peer owes an answer: the later of the last datagram heard from it and
    /// the moment work for it appeared.
    since: Instant,
    /// Reported unreachable (and not heard from since).
    unreachable: bool,
}

/// The liveness of the destinations that have a sender record.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    peers: PeerMap<Peer>,
}

/// A change to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Reachable,
    Unreachable,
}

impl Liveness {
    /// Work for `peer` appeared at `now` (after a quiet spell): it owes an answer from now.
    pub fn work_started(&mut self, now: Instant, peer: NodeId) {
        let p = self.peers.entry(peer).or_insert(Peer {
            since: now,
            unreachable: false,
        });
        if !p.unreachable {
            p.since = now;
        }
    }

    /// A datagram from `peer` was accepted at `now`.
    pub fn heard(&mut self, now: Instant, peer: NodeId) -> Option<Change> {
        let p = self.peers.get_mut(&peer)?;
        p.since = now;
        std::mem::take(&mut p.unreachable).then_some(Change::Reachable)
    }

    /// Checks `peer` at `now`, given whether work for it is pending.
    pub fn check(
        &mut self,
        now: Instant,
        peer: NodeId,
        busy: bool,
        after: Duration,
    ) -> Option<Change> {
        let p = self.peers.get_mut(&peer)?;
        if !busy {
            p.since = now;
            return None;
        }
        if p.unreachable || now.saturating_duration_since(p.since) < after {
            return None;
        }
        p.unreachable = true;
        Some(Change::Unreachable)
    }

    /// Forgets `peer` (its sender record is gone).
    pub fn forget(&mut self, peer: NodeId) -> Option<Change> {
        let p = self.peers.remove(&peer)?;
        p.unreachable.then_some(Change::Reachable)
    }

    /// Whether `peer` is reported unreachable now.
    pub fn is_unreachable(&self, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|p| p.unreachable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_after_silence_while_busy_and_reachable_when_heard() {
        let t0 = crate::test_time::origin();
        let after = Duration::from_secs(2);
        let p = NodeId::from_const(5);
        let mut l = Liveness::default();
        assert_eq!(l.heard(t0, p), None, "unknown peers are not tracked");
        l.work_started(t0, p);
        assert_eq!(l.check(t0 + Duration::from_secs(1), p, true, after), None);
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(l.check(t2, p, true, after), Some(Change::Unreachable));
        assert_eq!(l.check(t2, p, true, after), None, "reported once");
        assert!(l.is_unreachable(p));
        assert_eq!(l.heard(t2, p), Some(Change::Reachable));
        assert!(!l.is_unreachable(p));
        // Idle: silence is not a failure.
        let t9 = t0 + Duration::from_secs(9);
        assert_eq!(l.check(t9, p, false, after), None);
        assert_eq!(l.check(t9, p, true, after), None, "counted from the work");
        assert_eq!(l.forget(p), None);
    }
}
