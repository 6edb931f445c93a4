//! Deliveries a durable receiver must still recognise: taken ones until their sender's
//! frontier passes them, and those recovered untaken after a restart, probed so that a
//! quiet node forgets them.

use std::time::{Duration, Instant};

use crate::proto::frame::Verdict;
use crate::proto::journal::sorted_ring::SortedRing;
use crate::proto::{NodeId, PeerMap};

/// One source's remembered deliveries.
#[derive(Debug, Default)]
struct Source {
    /// (slot, incarnation) -> taken (false: held for the application). Slot first: a
    /// frontier forgets a prefix. Deliveries come mostly in slot order, so one joins at the
    /// back of the ring; a sender's other orders cost no more than a B-tree.
    slots: SortedRing<(u64, u64), bool>,
    /// When to ask the source for its frontier next.
    probe_at: Option<Instant>,
    /// Probes sent since the frontier last moved.
    probes: u32,
    /// Hand-overs of an earlier run not taken (`Rules::deliver_from_senders_copy`): the end
    /// of the highest slot and its incarnation, probed until the frontier passes the end.
    watch: Option<(u64, u64)>,
}

/// The archive of a durable receiver.
#[derive(Debug, Default)]
pub(crate) struct Archive {
    sources: PeerMap<Source>,
    /// Remembered deliveries over all sources.
    len: usize,
}

impl Source {
    /// Forgets the taken deliveries in slots below `below`; returns how many.
    fn forget_taken_below(&mut self, below: u64) -> usize {
        let mut gone = 0;
        self.slots
            .remove_below(Some((below, 0)), |_, taken| *taken, |_, _| gone += 1);
        gone
    }
}

impl Archive {
    /// Remembers the delivery `(from, r, s)`, taken or held.
    pub fn insert(
        &mut self,
        now: Instant,
        from: NodeId,
        r: u64,
        s: u64,
        taken: bool,
        every: Duration,
    ) {
        let src = self.sources.entry(from).or_default();
        if src.slots.insert((s, r), taken).is_none() {
            self.len += 1;
        }
        if src.probe_at.is_none() {
            src.probe_at = Some(now + every);
            src.probes = 0;
        }
    }

    /// Probes `from` until its frontier passes `end`, past a hand-over in its incarnation `r`
    /// (one recovered from the journal: no live record probes for it).
    pub fn watch(&mut self, now: Instant, from: NodeId, r: u64, end: u64, every: Duration) {
        let src = self.sources.entry(from).or_default();
        if src.watch.is_none_or(|(e, _)| e < end) {
            src.watch = Some((end, r));
        }
        if src.probe_at.is_none() {
            src.probe_at = Some(now + every);
            src.probes = 0;
        }
    }

    /// The answer to a token for `(from, r, s)` if the archive knows it: `Some(Some(ACK))`
    /// for a taken delivery, `Some(None)` (no answer yet) for one the application holds.
    pub fn verdict(&self, from: NodeId, r: u64, s: u64) -> Option<Option<Verdict>> {
        let taken = *self.sources.get(&from)?.slots.get(&(s, r))?;
        Some(taken.then_some(Verdict::Ack))
    }

    /// Whether `(from, r, s)` is held for the application.
    pub fn is_held(&self, from: NodeId, r: u64, s: u64) -> bool {
        self.verdict(from, r, s) == Some(None)
    }

    /// The application took the held delivery `(from, r, s)`: returns whether it was held.
    pub fn take(&mut self, from: NodeId, r: u64, s: u64) -> bool {
        match self
            .sources
            .get_mut(&from)
            .and_then(|src| src.slots.get_mut(&(s, r)))
        {
            Some(taken) if !*taken => {
                *taken = true;
                true
            }
            _ => false,
        }
    }

    /// `from`'s frontier is `below`: it holds no token in a slot below it, so taken
    /// deliveries there are forgotten. Returns how many were.
    pub fn confirm(&mut self, from: NodeId, below: u64) -> usize {
        let Some(src) = self.sources.get_mut(&from) else {
            return 0;
        };
        // Only the prefix below the frontier is looked at (deliveries held for the
        // application stay, whatever their slot).
        let gone = src.forget_taken_below(below);
        self.len -= gone;
        if src.watch.is_some_and(|(end, _)| end <= below) {
            src.watch = None;
        }
        if src.slots.is_empty() && src.watch.is_none() {
            self.sources.remove(&from);
        } else if gone > 0 {
            src.probes = 0;
        }
        gone
    }

    /// Remembered deliveries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// When the next probe is due.
    pub fn next_probe(&self) -> Option<Instant> {
        self.sources.values().filter_map(|s| s.probe_at).min()
    }

    /// The probes due at `now`: for each source, SLOTS(s, r, 0) with `s` one past its
    /// highest remembered slot and `r` that slot's incarnation, which a sender answers with
    /// its frontier. Backs off from `every` to `max`.
    pub fn due(&mut self, now: Instant, every: Duration, max: Duration) -> Vec<(NodeId, u64, u64)> {
        let mut out = Vec::new();
        for (&from, src) in &mut self.sources {
            if src.probe_at.is_none_or(|t| t > now) {
                continue;
            }
            let top = src.slots.last_key().map(|(s, r)| (s.saturating_add(1), r));
            let Some((s, r)) = top.max(src.watch) else {
                continue;
            };
            out.push((from, s, r));
            src.probes = src.probes.saturating_add(1);
            let back = every.saturating_mul(1u32 << src.probes.min(16)).min(max);
            src.probe_at = Some(now + back);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId::from_const(3);

    #[test]
    fn taken_deliveries_are_acknowledged_until_the_frontier_passes_them() {
        let t = crate::test_time::origin();
        let every = Duration::from_secs(1);
        let mut a = Archive::default();
        a.insert(t, A, 5, 10, true, every);
        a.insert(t, A, 5, 11, false, every);
        assert_eq!(a.verdict(A, 5, 10), Some(Some(Verdict::Ack)));
        assert_eq!(a.verdict(A, 5, 11), Some(None));
        assert_eq!(a.verdict(A, 6, 10), None, "another incarnation");
        assert_eq!(a.confirm(A, 12), 1, "held deliveries stay");
        assert_eq!(a.verdict(A, 5, 10), None);
        assert!(a.take(A, 5, 11));
        assert!(!a.take(A, 5, 11), "taken twice");
        assert_eq!(a.confirm(A, 11), 0, "the frontier is below it");
        assert_eq!(a.confirm(A, 12), 1);
        assert_eq!(a.len(), 0);
        assert_eq!(a.next_probe(), None, "nothing left to ask about");
    }

    proptest::proptest! {
        /// The same answers as a sorted map of `(slot, incarnation) -> taken`, whatever the
        /// order deliveries, takes and frontiers come in.
        #[test]
        fn answers_as_a_sorted_map_does(
            ops in proptest::collection::vec((0u8..4, 0u64..3, 0u64..24, proptest::bool::ANY), 0..300)
        ) {
            use std::collections::BTreeMap;
            let t = crate::test_time::origin();
            let every = Duration::from_secs(1);
            let mut a = Archive::default();
            let mut model = BTreeMap::<(u64, u64), bool>::new();
            for (op, r, s, taken) in ops {
                match op {
                    0 => {
                        a.insert(t, A, r, s, taken, every);
                        model.insert((s, r), taken);
                    }
                    1 => {
                        let was = model.get(&(s, r)) == Some(&false);
                        if was {
                            model.insert((s, r), true);
                        }
                        proptest::prop_assert_eq!(a.take(A, r, s), was);
                    }
                    2 => {
                        let before = model.len();
                        model.retain(|&(slot, _), taken| slot >= s || !*taken);
                        proptest::prop_assert_eq!(a.confirm(A, s), before - model.len());
                    }
                    _ => {
                        let want = model.get(&(s, r)).map(|&t| t.then_some(Verdict::Ack));
                        proptest::prop_assert_eq!(a.verdict(A, r, s), want);
                    }
                }
                proptest::prop_assert_eq!(a.len(), model.len());
                let top = a.sources.get(&A).and_then(|src| src.slots.last_key());
                proptest::prop_assert_eq!(top, model.keys().next_back().copied());
            }
        }
    }

    #[test]
    fn probes_ask_past_the_highest_slot_and_back_off() {
        let t = crate::test_time::origin();
        let (every, max) = (Duration::from_secs(1), Duration::from_secs(4));
        let mut a = Archive::default();
        a.insert(t, A, 5, 10, true, every);
        a.insert(t, A, 7, 30, true, every);
        assert!(a.due(t, every, max).is_empty());
        let at = a.next_probe().unwrap();
        assert_eq!(a.due(at, every, max), [(A, 31, 7)]);
        let next = a.next_probe().unwrap();
        assert_eq!(next - at, Duration::from_secs(2));
        a.due(next, every, max);
        let last = a.next_probe().unwrap();
        assert_eq!(last - next, max);
    }
}
