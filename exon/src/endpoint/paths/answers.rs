//! Answers to path challenges, sent again: the side whose address is being validated
//! repeats its RESPONSE on a timer of its own, so that one lost answer does not leave the
//! challenger unable to send to it past the anti-amplification limit while it is quiet.

use std::time::{Duration, Instant};

use crate::proto::NodeId;

/// How many times an answer goes again after the first (the node's own, in its next
/// datagram to the challenger): the waits double from the first, so with the default
/// first wait (three initial RTT estimates, 300 ms) the repeats go 0.3, 0.9, 2.1, 4.5 and
/// 9.3 s after the challenge came. The challenger's own repeat of the challenge (it has no
/// answer yet) starts them over.
pub(crate) const REPEATS: u32 = 5;

/// Most answers owed at once. Each comes from a datagram the node took whole (sealed: from
/// the peer itself), one per peer; past this the one owed longest is dropped (its repeats
/// are a help, not a promise).
pub(crate) const MAX_OWED: usize = 1024;

/// One answer owed: RESPONSE(`token`) to `peer`, next at `at`.
#[derive(Debug, Clone, Copy)]
struct Owed {
    peer: NodeId,
    token: u64,
    /// Repeats sent so far.
    sent: u32,
    at: Instant,
}

/// The answers to send again, and when.
#[derive(Debug)]
pub(crate) struct Answers {
    owed: Vec<Owed>,
    /// The wait before the first repeat (then twice the last).
    first_wait: Duration,
    /// The earliest `at` of `owed`.
    next: Option<Instant>,
}

impl Answers {
    pub(crate) fn new(first_wait: Duration) -> Answers {
        Answers {
            owed: Vec::new(),
            first_wait,
            next: None,
        }
    }

    /// The node answered `peer`'s CHALLENGE `token` at `now` (in its next datagram to it):
    /// the answer goes again [`REPEATS`] times, unless a newer challenge of the peer
    /// replaces it; the same challenge again (the peer's repeat: no answer reached it)
    /// starts the repeats over.
    pub(crate) fn answered(&mut self, peer: NodeId, token: u64, now: Instant) {
        let owed = Owed {
            peer,
            token,
            sent: 0,
            at: now + self.first_wait,
        };
        match self.owed.iter_mut().find(|o| o.peer == peer) {
            Some(o) => *o = owed,
            None => {
                if self.owed.len() >= MAX_OWED {
                    self.owed.remove(0);
                }
                self.owed.push(owed);
            }
        }
        self.next = self.owed.iter().map(|o| o.at).min();
    }

    /// When the next answer is due, if any is owed.
    pub(crate) fn next_at(&self) -> Option<Instant> {
        self.next
    }

    /// Moves the answers due at `now` into `due` (peer and token), each rescheduled after
    /// twice its last wait, or forgotten after its last repeat.
    pub(crate) fn take_due(&mut self, now: Instant, due: &mut Vec<(NodeId, u64)>) {
        if self.next.is_none_or(|n| n > now) {
            return;
        }
        let first = self.first_wait;
        self.owed.retain_mut(|o| {
            if o.at > now {
                return true;
            }
            due.push((o.peer, o.token));
            o.sent += 1;
            o.at = now + first.saturating_mul(1 << o.sent.min(16));
            o.sent < REPEATS
        });
        self.next = self.owed.iter().map(|o| o.at).min();
    }

    /// Answers owed now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.owed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(i: u64) -> NodeId {
        NodeId::from_const(i)
    }

    #[test]
    fn an_answer_goes_again_after_doubling_waits_then_stops() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut a = Answers::new(Duration::from_millis(100));
        assert_eq!(a.next_at(), None);
        a.answered(peer(2), 77, t0);
        assert_eq!(a.next_at(), Some(at(100)));
        let mut due = Vec::new();
        a.take_due(at(99), &mut due);
        assert!(due.is_empty());
        // Repeats at 100, 300, 700, 1500 and 3100 ms, then none.
        let mut when = Vec::new();
        for ms in (0..10_000).step_by(10) {
            a.take_due(at(ms), &mut due);
            if !due.is_empty() {
                assert_eq!(std::mem::take(&mut due), vec![(peer(2), 77)]);
                when.push(ms);
            }
        }
        assert_eq!(when, vec![100, 300, 700, 1500, 3100]);
        assert_eq!(when.len() as u32, REPEATS);
        assert_eq!(a.len(), 0);
        assert_eq!(a.next_at(), None);
    }

    #[test]
    fn a_newer_challenge_replaces_the_answer_and_a_repeated_one_starts_it_over() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut a = Answers::new(Duration::from_millis(100));
        a.answered(peer(2), 77, t0);
        a.answered(peer(3), 5, at(50));
        let mut due = Vec::new();
        a.take_due(at(100), &mut due);
        assert_eq!(due, vec![(peer(2), 77)]);
        // The peer's own repeat of the challenge: the repeats start over (next at 220,
        // not 300).
        a.answered(peer(2), 77, at(120));
        assert_eq!(a.next_at(), Some(at(150)));
        due.clear();
        a.take_due(at(219), &mut due);
        assert_eq!(due, vec![(peer(3), 5)]);
        due.clear();
        a.take_due(at(220), &mut due);
        assert_eq!(due, vec![(peer(2), 77)]);
        due.clear();
        a.take_due(at(418), &mut due);
        assert!(
            !due.contains(&(peer(2), 77)),
            "next after twice the first wait: 420"
        );
        a.take_due(at(420), &mut due);
        assert!(due.contains(&(peer(2), 77)));
        // A new challenge: its own schedule, from the first wait.
        a.answered(peer(2), 78, at(500));
        due.clear();
        a.take_due(at(599), &mut due);
        assert!(!due.iter().any(|(p, _)| *p == peer(2)));
        a.take_due(at(600), &mut due);
        assert!(due.contains(&(peer(2), 78)));
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn answers_owed_are_bounded() {
        let t0 = Instant::now();
        let mut a = Answers::new(Duration::from_millis(100));
        for i in 0..(MAX_OWED as u64 + 10) {
            a.answered(peer(i + 1), i, t0);
        }
        assert_eq!(a.len(), MAX_OWED);
        let mut due = Vec::new();
        a.take_due(t0 + Duration::from_millis(100), &mut due);
        assert_eq!(due.len(), MAX_OWED);
        assert_eq!(due[0], (peer(11), 10), "the oldest went first");
    }
}
