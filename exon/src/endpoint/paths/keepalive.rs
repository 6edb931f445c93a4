//! Keepalives: a datagram holding PING alone to a peer this endpoint waits for (the reply
//! of a call, the bytes of a stream it reads) while nothing comes from it, so that the peer
//! learns where this endpoint is now (a NAT that rebound it, or dropped its mapping while it
//! was quiet) and can answer.

use std::time::{Duration, Instant};

use crate::proto::{NodeId, PeerMap};

/// Silence from an awaited peer before its first keepalive; each next one waits twice as
/// long, up to [`MAX_WAIT`], until the peer is heard from again.
pub(crate) const FIRST_WAIT: Duration = Duration::from_secs(1);

/// The longest wait between two keepalives to a silent peer: well within the shortest
/// idle timeout NATs keep a UDP mapping for (RFC 4787 asks for two minutes; many keep 30 s).
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(8);

/// How often the awaited peers are looked at while calls are open or streams read.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(250);

/// One awaited peer.
#[derive(Debug, Clone, Copy)]
struct Awaited {
    /// When a datagram from it was last accepted, and one holding more than a keepalive,
    /// as last seen.
    heard: Option<Instant>,
    active: Option<Instant>,
    /// Since when it has been silent, or when the last keepalive went.
    since: Instant,
    /// The silence after `since` that sends the next keepalive.
    wait: Duration,
}

/// The peers waited for, and when each is owed a keepalive.
#[derive(Debug, Default)]
pub(crate) struct Keepalives {
    peers: PeerMap<Awaited>,
    /// When the awaited peers are next looked at (`None`: none awaited when last looked).
    next: Option<Instant>,
}

impl Keepalives {
    /// When the awaited peers are next looked at, if any may be awaited.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.next
    }

    /// Peers may be awaited (`opened`: a call was opened, or streams are read) at `t`: the
    /// peers are looked at from the next check on.
    pub(crate) fn arm(&mut self, t: Instant, opened: bool) {
        if opened && self.next.is_none() {
            self.next = Some(t + CHECK_EVERY);
        }
    }

    /// At `t`, the peers awaited are `awaited` (sorted); `heard` says when a datagram
    /// from a peer was last accepted, and when one holding more than a keepalive was.
    /// Appends to `due` the peers owed a keepalive now: silent for [`FIRST_WAIT`] since they
    /// were last heard from (or first awaited), then for twice as long after each
    /// keepalive. A keepalive of the peer's own starts the silence over but not the
    /// doubling: two endpoints that await each other (the two ends of an idle stream) would
    /// otherwise answer each other's keepalives a second later, for ever. Forgets the peers
    /// no longer awaited; stops looking once none is awaited, until [`arm`](Self::arm) again.
    pub(crate) fn due(
        &mut self,
        t: Instant,
        awaited: &[NodeId],
        heard: impl Fn(NodeId) -> (Option<Instant>, Option<Instant>),
        due: &mut Vec<NodeId>,
    ) {
        self.peers.retain(|p, _| awaited.binary_search(p).is_ok());
        for &p in awaited {
            let (h, active) = heard(p);
            let a = self.peers.entry(p).or_insert(Awaited {
                heard: h,
                active,
                since: t,
                wait: FIRST_WAIT,
            });
            if a.active != active {
                // Heard from since: its silence starts over.
                *a = Awaited {
                    heard: h,
                    active,
                    since: h.map_or(t, |h| h.min(t)),
                    wait: FIRST_WAIT,
                };
            } else if a.heard != h {
                // Only its keepalive: the silence starts over, the waits go on doubling.
                a.heard = h;
                a.since = h.map_or(t, |h| h.min(t));
            }
            if t.saturating_duration_since(a.since) >= a.wait {
                due.push(p);
                a.since = t;
                a.wait = (a.wait * 2).min(MAX_WAIT);
            }
        }
        self.next = (!awaited.is_empty()).then(|| t + CHECK_EVERY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> NodeId {
        NodeId::new(n).unwrap()
    }

    #[test]
    fn a_silent_awaited_peer_gets_keepalives_backing_off_and_a_heard_one_none() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut k = Keepalives::default();
        assert_eq!(k.next_at(), None);
        k.arm(t0, false);
        assert_eq!(k.next_at(), None, "no call opened");
        k.arm(t0, true);
        assert_eq!(k.next_at(), Some(at(250)));
        let (a, b) = (id(1), id(2));
        let awaited = [a, b];
        // b is heard from at 1.5 s, a never.
        let heard = |ms: u64| {
            move |p: NodeId| {
                let h = (p == b && ms >= 1500).then(|| at(1500));
                (h, h)
            }
        };
        let mut sent = Vec::new();
        for ms in (250..=16_500).step_by(250) {
            let mut due = Vec::new();
            k.due(at(ms), &awaited, heard(ms), &mut due);
            sent.extend(due.into_iter().map(|p| (p, ms)));
        }
        let to = |p| {
            sent.iter()
                .filter(|s| s.0 == p)
                .map(|s| s.1)
                .collect::<Vec<_>>()
        };
        // First awaited at 250 ms: 1, 2, 4, then 8 s of silence apart at most.
        assert_eq!(to(a), vec![1250, 3250, 7250, 15250]);
        // b: its first keepalive at 1.25 s, then heard at 1.5 s: silence starts over.
        assert_eq!(to(b), vec![1250, 2500, 4500, 8500, 16500]);
        // No call waits any more: forgotten, and no more looks.
        let mut due = Vec::new();
        k.due(at(16_750), &[], |_| (None, None), &mut due);
        assert!(due.is_empty());
        assert_eq!(k.next_at(), None);
        assert!(k.peers.is_empty());
    }

    /// The two ends of an idle stream await each other and hear nothing but each other's
    /// keepalives: a keepalive heard starts the silence over but the waits go on doubling,
    /// so that each sends one every 8 s once its waits reach that (each keeps its own NAT
    /// mapping), after four in its first 15 s. Taken as activity (`as_active`), each
    /// keepalive would make the other answer a second later, for ever: a datagram a second
    /// each way.
    fn keepalives_of_two_idle_ends(as_active: bool) -> usize {
        let t0 = Instant::now();
        let (a, b) = (id(1), id(2));
        let mut ends = [Keepalives::default(), Keepalives::default()];
        // When each end last heard the other (its keepalives only).
        let mut heard: [Option<Instant>; 2] = [None, None];
        let delay = Duration::from_millis(10);
        let mut in_flight: Vec<(Instant, usize)> = Vec::new();
        let mut sent = 0;
        for tick in 0..(120_000 / 250) {
            let t = t0 + Duration::from_millis(250 * tick);
            in_flight.retain(|&(at, to)| {
                if at <= t {
                    heard[to] = Some(at);
                }
                at > t
            });
            for (i, k) in ends.iter_mut().enumerate() {
                let peer = if i == 0 { b } else { a };
                let h = heard[i];
                let active = if as_active { h } else { None };
                let mut due = Vec::new();
                k.arm(t, true);
                k.due(t, &[peer], |_| (h, active), &mut due);
                for _ in due {
                    sent += 1;
                    in_flight.push((t + delay, 1 - i));
                }
            }
        }
        sent
    }

    #[test]
    fn two_ends_awaiting_each_other_do_not_answer_each_others_keepalives_for_ever() {
        let sent = keepalives_of_two_idle_ends(false);
        // Two ends, four each in the first 15 s, then one each per 8 s.
        assert!(
            (8..=2 * (4 + 105 / 8)).contains(&sent),
            "{sent} keepalives in two minutes"
        );
        let ping_pong = keepalives_of_two_idle_ends(true);
        assert!(ping_pong > 150, "{ping_pong} keepalives in two minutes");
    }
}
