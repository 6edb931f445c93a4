//! A map keyed by the core's message ids, which are handed out in increasing order: recent
//! entries in a ring indexed by id (no hashing, neighbours in memory), the few long-lived
//! ones moved to a hash map so that one stuck message does not make the ring grow.

use std::collections::{HashMap, VecDeque};

use crate::proto::{MsgId, MsgIds};

/// Smallest ring span that never moves entries to the overflow map.
const MIN_SPAN: usize = 4096;

/// Values by [`MsgId`], for ids inserted in increasing order (each larger than every id
/// inserted before; an id not in increasing order goes to the overflow map, still correct).
///
/// The ring covers ids `base .. base + ring.len()`; a removed entry leaves a hole until the
/// holes before it are gone too. An id lives in one place: the ring or `old`. An id in
/// `old` may fall inside the ring's span (the ring emptied and began again lower, as ids
/// recovered out of order can make it): a hole in the ring is looked up in `old` while
/// `old` holds anything. When the span grows past four times the live entries (and
/// [`MIN_SPAN`]), the oldest live entries move to `old`, so memory stays proportional to
/// what is live.
#[derive(Debug)]
pub(crate) struct SeqMap<V> {
    base: u64,
    ring: VecDeque<Option<V>>,
    /// Live entries in `ring`.
    in_ring: usize,
    old: HashMap<u64, V, foldhash::fast::RandomState>,
    /// At least every id in `old` (the largest ever put there): an id above it is none of
    /// them, so the usual insert needs no lookup while one stuck message lives in `old`.
    old_max: u64,
}

impl<V> Default for SeqMap<V> {
    fn default() -> Self {
        SeqMap {
            base: 0,
            ring: VecDeque::new(),
            in_ring: 0,
            old: HashMap::default(),
            old_max: 0,
        }
    }
}

impl<V> SeqMap<V> {
    /// Live entries.
    pub(crate) fn len(&self) -> usize {
        self.in_ring + self.old.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ring position of `id`, if the ring covers it.
    fn at(&self, id: MsgId) -> Option<usize> {
        let i = usize::try_from(id.0.checked_sub(self.base)?).ok()?;
        (i < self.ring.len()).then_some(i)
    }

    /// Inserts `v` under `id` (replacing any value there). Always inline: the usual case
    /// is a comparison and a push, and `v` is built in place.
    #[inline(always)]
    pub(crate) fn insert(&mut self, id: MsgId, v: V) {
        // The usual case first: the id after the ring's last, and no old id it could be.
        if !self.ring.is_empty()
            && (id.0 > self.old_max || self.old.is_empty())
            && Some(id.0) == self.base.checked_add(self.ring.len() as u64)
        {
            self.ring.push_back(Some(v));
            self.in_ring += 1;
            if self.ring.len() > MIN_SPAN.max(4 * self.in_ring) {
                self.bound();
            }
            return;
        }
        self.insert_other(id, v);
    }

    /// [`insert`](Self::insert) of an id not right after the ring's last.
    #[inline(never)]
    fn insert_other(&mut self, id: MsgId, v: V) {
        if !self.old.is_empty() {
            if let Some(slot) = self.old.get_mut(&id.0) {
                // Replaced where it lives.
                *slot = v;
                return;
            }
        }
        if let Some(i) = self.at(id) {
            if self.ring[i].replace(v).is_none() {
                self.in_ring += 1;
            }
            return;
        }
        if self.ring.is_empty() {
            self.base = id.0;
        } else if id.0 < self.base {
            // Below the ring: an old id.
            self.put_old(id.0, v);
            return;
        }
        // At or past the end: holes for the ids skipped, if any (within reason).
        let gap = id.0 - (self.base + self.ring.len() as u64);
        if gap > MIN_SPAN as u64 {
            self.spill_all();
            self.base = id.0;
        } else if gap > 0 {
            // (Tested first: an empty `extend` still costs a call, per message.)
            self.ring.extend((0..gap).map(|_| None));
        }
        self.ring.push_back(Some(v));
        self.in_ring += 1;
        self.bound();
    }

    /// The value under `id`, to change.
    pub(crate) fn get_mut(&mut self, id: MsgId) -> Option<&mut V> {
        match self.at(id) {
            Some(i) if self.ring[i].is_some() || self.old.is_empty() => self.ring[i].as_mut(),
            _ => self.old.get_mut(&id.0),
        }
    }

    /// Removes and returns the value under `id`.
    pub(crate) fn remove(&mut self, id: MsgId) -> Option<V> {
        let Some(i) = self.at(id) else {
            return self.old.remove(&id.0);
        };
        let Some(v) = self.ring[i].take() else {
            return self.old_remove(id);
        };
        self.in_ring -= 1;
        self.trim();
        Some(v)
    }

    /// Removes `id` from `old` (a hole in the ring's span it may fill).
    fn old_remove(&mut self, id: MsgId) -> Option<V> {
        if self.old.is_empty() {
            return None;
        }
        self.old.remove(&id.0)
    }

    /// Removes the values under the run `ids`, handing each found to `found`, in order;
    /// the ring's front is trimmed once, after them all (a run of acknowledged ids settles
    /// at once). While no id lives outside the ring, one pass over the run's entries in it,
    /// without a lookup each.
    #[inline]
    pub(crate) fn remove_run(&mut self, ids: MsgIds, mut found: impl FnMut(V)) {
        if !self.old.is_empty() {
            return self.remove_each(ids, &mut found);
        }
        let (lo, hi) = (self.base, self.base + self.ring.len() as u64);
        // The ring's part of the run, [a, b): empty when the run misses the ring.
        let a = ids.first().0.clamp(lo, hi);
        let b = ids.last().0.saturating_add(1).clamp(lo, hi);
        if a < b {
            let (i, j) = ((a - lo) as usize, (b - lo) as usize);
            let mut removed = 0;
            for entry in self.ring.range_mut(i..j) {
                if let Some(v) = entry.take() {
                    removed += 1;
                    found(v);
                }
            }
            self.in_ring -= removed;
        }
        self.trim();
    }

    /// [`remove_run`](Self::remove_run), an id at a time, each in the ring or among the
    /// old ones.
    #[cold]
    #[inline(never)]
    fn remove_each(&mut self, ids: MsgIds, found: &mut dyn FnMut(V)) {
        for id in ids {
            let v = match self.at(id).map(|i| self.ring[i].take()) {
                Some(Some(v)) => {
                    self.in_ring -= 1;
                    Some(v)
                }
                _ => self.old.remove(&id.0),
            };
            if let Some(v) = v {
                found(v);
            }
        }
        self.trim();
    }

    pub(crate) fn contains_key(&self, id: MsgId) -> bool {
        match self.at(id) {
            Some(i) if self.ring[i].is_some() => true,
            _ => !self.old.is_empty() && self.old.contains_key(&id.0),
        }
    }

    /// Every live value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.ring.iter().flatten().chain(self.old.values())
    }

    /// Drops the holes at the front of the ring.
    fn trim(&mut self) {
        let holes = self.ring.iter().take_while(|v| v.is_none()).count();
        for _ in 0..holes {
            // A hole holds nothing to drop: popped without the drop code a drain runs on
            // every entry (a run of acknowledged ids leaves as many holes as it had ids).
            std::mem::forget(self.ring.pop_front());
        }
        self.base += holes as u64;
        if self.ring.is_empty() {
            self.base = 0;
        }
    }

    /// Moves the oldest live entries to `old` while the ring spans more than four times what
    /// it holds.
    fn bound(&mut self) {
        while self.ring.len() > MIN_SPAN.max(4 * self.in_ring) {
            if let Some(Some(v)) = self.ring.pop_front() {
                self.in_ring -= 1;
                self.put_old(self.base, v);
            }
            self.base += 1;
            self.trim();
        }
    }

    /// Puts `v` in `old` under `id`.
    fn put_old(&mut self, id: u64, v: V) {
        self.old_max = self.old_max.max(id);
        self.old.insert(id, v);
    }

    /// Moves every ring entry to `old`.
    fn spill_all(&mut self) {
        for (i, v) in std::mem::take(&mut self.ring).into_iter().enumerate() {
            if let Some(v) = v {
                self.put_old(self.base + i as u64, v);
            }
        }
        self.in_ring = 0;
        self.base = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert the next id (skipping `skip` ids first).
        Insert { skip: u8 },
        /// Remove the `k`-th oldest live id (modulo the live count).
        Remove { k: usize },
        /// Remove an id never inserted, or already removed.
        RemoveAbsent { back: u16 },
        /// Insert (or replace) an id `back` below the next one: out of order, as a durable
        /// start's recovered ids can come.
        InsertAt { back: u16 },
        /// Remove a run of `n` ids from the `k`-th oldest live one on, some absent.
        RemoveRun { k: usize, n: u8 },
        /// Remove a run of `n` ids from `back` below the next id on (from below, across
        /// or above what lives).
        RemoveRunAt { back: u16, n: u16 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..3).prop_map(|skip| Op::Insert { skip }),
            1 => (0u8..=255).prop_map(|skip| Op::Insert { skip }),
            5 => any::<usize>().prop_map(|k| Op::Remove { k }),
            1 => any::<u16>().prop_map(|back| Op::RemoveAbsent { back }),
            1 => any::<u16>().prop_map(|back| Op::InsertAt { back }),
            1 => (any::<usize>(), 0u8..40).prop_map(|(k, n)| Op::RemoveRun { k, n }),
            1 => (any::<u16>(), 0u16..300).prop_map(|(back, n)| Op::RemoveRunAt { back, n }),
        ]
    }

    proptest! {
        /// Any sequence of inserts (mostly increasing, some out of order) and arbitrary
        /// removes behaves as a hash map.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 0..2000)) {
            let mut m = SeqMap::default();
            let mut model = std::collections::BTreeMap::new();
            let mut next = 0u64;
            let mut peak = 0;
            for o in ops {
                match o {
                    Op::Insert { skip } => {
                        next += u64::from(skip);
                        m.insert(MsgId(next), next * 10);
                        model.insert(next, next * 10);
                        next += 1;
                    }
                    Op::Remove { k } => {
                        if model.is_empty() { continue; }
                        let id = *model.keys().nth(k % model.len()).unwrap();
                        prop_assert_eq!(m.remove(MsgId(id)), model.remove(&id));
                    }
                    Op::RemoveAbsent { back } => {
                        let id = next.saturating_sub(u64::from(back));
                        prop_assert_eq!(m.remove(MsgId(id)), model.remove(&id));
                    }
                    Op::InsertAt { back } => {
                        let id = next.saturating_sub(u64::from(back));
                        m.insert(MsgId(id), id * 10 + 1);
                        model.insert(id, id * 10 + 1);
                        prop_assert_eq!(m.get_mut(MsgId(id)).copied(), Some(id * 10 + 1));
                    }
                    Op::RemoveRun { k, n } => {
                        if model.is_empty() { continue; }
                        let from = *model.keys().nth(k % model.len()).unwrap();
                        let Some(run) = MsgIds::new(MsgId(from), MsgId(from + u64::from(n))) else {
                            continue;
                        };
                        let want: Vec<u64> =
                            run.into_iter().filter_map(|id| model.remove(&id.0)).collect();
                        let mut got = Vec::new();
                        m.remove_run(run, |v| got.push(v));
                        prop_assert_eq!(got, want);
                    }
                    Op::RemoveRunAt { back, n } => {
                        let from = next.saturating_sub(u64::from(back));
                        let run = MsgIds::new(MsgId(from), MsgId(from + u64::from(n))).unwrap();
                        let want: Vec<u64> =
                            run.into_iter().filter_map(|id| model.remove(&id.0)).collect();
                        let mut got = Vec::new();
                        m.remove_run(run, |v| got.push(v));
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(m.len(), model.len());
                peak = peak.max(model.len());
                // Memory follows the most ever live, not the ids' span.
                prop_assert!(m.ring.len() <= MIN_SPAN.max(4 * peak) + 1);
            }
            for (id, v) in &model {
                prop_assert!(m.contains_key(MsgId(*id)));
                prop_assert_eq!(m.remove(MsgId(*id)), Some(*v));
            }
            prop_assert!(m.is_empty());
            prop_assert_eq!(m.values().count(), 0);
        }
    }

    #[test]
    fn one_stuck_entry_does_not_grow_the_ring() {
        let mut m = SeqMap::default();
        m.insert(MsgId(0), 0u64);
        for id in 1..100_000 {
            m.insert(MsgId(id), id);
            assert_eq!(m.remove(MsgId(id)), Some(id));
            assert!(m.ring.len() <= MIN_SPAN, "span {}", m.ring.len());
        }
        assert_eq!(m.len(), 1);
        assert!(m.contains_key(MsgId(0)));
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![0]);
        assert_eq!(m.remove(MsgId(0)), Some(0));
        assert!(m.is_empty());
    }

    /// A run finds the old ids on both sides of the ring's span, and all of them once
    /// the ring is empty (its base back at 0, below them).
    #[test]
    fn a_run_finds_old_ids_below_and_above_the_ring() {
        let mut m = SeqMap::default();
        m.insert(MsgId(5), 'a');
        m.insert(MsgId(1_000_000), 'b'); // a jump: 5 goes among the old ones
        m.insert(MsgId(1_000_001), 'c');
        let mut got = Vec::new();
        m.remove_run(MsgIds::new(MsgId(0), MsgId(1_000_000)).unwrap(), |v| {
            got.push(v)
        });
        assert_eq!(got, ['a', 'b']);
        m.insert(MsgId(2_000_000), 'd'); // a jump: 1 000 001 goes among the old ones
        assert_eq!(m.remove(MsgId(2_000_000)), Some('d'));
        let mut got = Vec::new();
        m.remove_run(
            MsgIds::new(MsgId(1_000_000), MsgId(1_000_010)).unwrap(),
            |v| got.push(v),
        );
        assert_eq!(got, ['c'], "above the empty ring's span");
        assert!(m.is_empty());
    }

    /// An old id that a new ring's span comes to cover (the ring emptied and began again
    /// below it) is still found, once, and an insert under it replaces it.
    #[test]
    fn an_old_id_inside_a_new_rings_span_is_found_once() {
        let mut m = SeqMap::default();
        m.insert(MsgId(5), 'a');
        m.insert(MsgId(1_000_000), 'b'); // a jump: 5 goes among the old ones
        assert_eq!(m.remove(MsgId(1_000_000)), Some('b')); // the ring empties
        m.insert(MsgId(3), 'c'); // a new ring from 3 ...
        m.insert(MsgId(4), 'd');
        m.insert(MsgId(6), 'e'); // ... whose span covers 5
        assert!(m.contains_key(MsgId(5)));
        assert_eq!(m.get_mut(MsgId(5)).copied(), Some('a'));
        m.insert(MsgId(5), 'f');
        assert_eq!(m.len(), 4);
        assert_eq!(m.remove(MsgId(5)), Some('f'));
        assert_eq!(m.remove(MsgId(5)), None);
        let mut got = Vec::new();
        m.remove_run(MsgIds::new(MsgId(0), MsgId(10)).unwrap(), |v| got.push(v));
        assert_eq!(got, ['c', 'd', 'e']);
        assert!(m.is_empty());
    }

    #[test]
    fn a_large_jump_starts_a_new_ring() {
        let mut m = SeqMap::default();
        m.insert(MsgId(5), 'a');
        m.insert(MsgId(1_000_000), 'b');
        assert!(m.ring.len() <= 2);
        assert_eq!(m.remove(MsgId(5)), Some('a'));
        assert_eq!(m.remove(MsgId(1_000_000)), Some('b'));
        // Out of order: below the ring.
        m.insert(MsgId(10), 'c');
        m.insert(MsgId(3), 'd');
        assert_eq!(m.len(), 2);
        assert_eq!(m.remove(MsgId(3)), Some('d'));
        assert_eq!(m.remove(MsgId(10)), Some('c'));
    }
}
