//! Slots of one destination whose verdicts wait for their records, counted: the lowest one
//! caps the frontier.

use std::collections::VecDeque;

/// A multiset of slots, kept sorted in a ring. Verdict records are written, and made
/// durable, mostly in slot order, so a slot usually joins at the back and leaves from the
/// front: both in constant time (a slot out of order is placed by binary search).
#[derive(Debug, Default)]
pub(crate) struct PendingSlots {
    /// `(slot, how many verdicts of it wait)`, ascending by slot, counts above zero.
    slots: VecDeque<(u64, u32)>,
}

impl PendingSlots {
    /// One more verdict of `slot` waits.
    pub fn add(&mut self, slot: u64) {
        match self.slots.back_mut() {
            Some((s, n)) if *s == slot => *n += 1,
            Some((s, _)) if *s > slot => match self.slots.binary_search_by_key(&slot, |e| e.0) {
                Ok(i) => self.slots[i].1 += 1,
                Err(i) => self.slots.insert(i, (slot, 1)),
            },
            _ => self.slots.push_back((slot, 1)),
        }
    }

    /// A verdict of `slot` is stored (nothing if none waited).
    pub fn remove(&mut self, slot: u64) {
        let i = match self.slots.front() {
            Some((s, _)) if *s == slot => 0,
            _ => match self.slots.binary_search_by_key(&slot, |e| e.0) {
                Ok(i) => i,
                Err(_) => return,
            },
        };
        self.slots[i].1 -= 1;
        if self.slots[i].1 == 0 {
            self.slots.remove(i);
        }
    }

    /// The lowest slot waiting.
    pub fn lowest(&self) -> Option<u64> {
        self.slots.front().map(|e| e.0)
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// The same answers as a sorted map of counts, whatever the order of slots.
        #[test]
        fn counts_as_a_sorted_map_does(ops in prop::collection::vec((any::<bool>(), 0u64..20), 0..200)) {
            let (mut p, mut model) = (PendingSlots::default(), BTreeMap::<u64, u32>::new());
            for (add, slot) in ops {
                if add {
                    p.add(slot);
                    *model.entry(slot).or_default() += 1;
                } else {
                    p.remove(slot);
                    if let Some(n) = model.get_mut(&slot) {
                        *n -= 1;
                        if *n == 0 {
                            model.remove(&slot);
                        }
                    }
                }
                prop_assert_eq!(p.lowest(), model.keys().next().copied());
                prop_assert_eq!(p.is_empty(), model.is_empty());
                let ours: Vec<_> = p.slots.iter().copied().collect();
                let theirs: Vec<_> = model.iter().map(|(s, n)| (*s, *n)).collect();
                prop_assert_eq!(ours, theirs);
            }
        }
    }
}
