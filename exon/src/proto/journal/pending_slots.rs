//! Slots of one destination whose verdicts wait for their records, counted: the lowest one
//! caps the frontier.

use crate::proto::journal::sorted_ring::SortedRing;

/// A multiset of slots: how many verdicts of each wait. Verdict records are written, and
/// made durable, mostly in slot order, so a slot usually joins at the back and leaves from
/// the front of the [`SortedRing`]; slots in any other order (a receiver's verdicts come in
/// the order it chooses) cost no more than a B-tree.
#[derive(Debug, Default)]
pub(crate) struct PendingSlots {
    /// Slot -> how many verdicts of it wait (above zero).
    slots: SortedRing<u64, u32>,
}

impl PendingSlots {
    /// One more verdict of `slot` waits.
    pub fn add(&mut self, slot: u64) {
        match self.slots.get_mut(&slot) {
            Some(n) => *n += 1,
            None => {
                self.slots.insert(slot, 1);
            }
        }
    }

    /// A verdict of `slot` is stored (nothing if none waited).
    pub fn remove(&mut self, slot: u64) {
        if let Some(n) = self.slots.get_mut(&slot) {
            *n -= 1;
            if *n == 0 {
                self.slots.remove(&slot);
            }
        }
    }

    /// The lowest slot waiting.
    pub fn lowest(&self) -> Option<u64> {
        self.slots.first_key()
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
                let ours: Vec<_> = p.slots.iter().map(|(s, n)| (*s, *n)).collect();
                let theirs: Vec<_> = model.iter().map(|(s, n)| (*s, *n)).collect();
                prop_assert_eq!(ours, theirs);
            }
        }
    }
}
