//! Durable mode: room for the marks of durable flows, reserved before a flow starts
//! (`Rules::reserve_flow_marks`), so that no flow goes on without its marks: a journal
//! refuses a new mark beyond `Limits::max_marks`, and a take without its mark would lose
//! the flow's position at a restart.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::proto::NodeId;

/// A mark: its peer and lane.
pub(crate) type Slot = (NodeId, u64);

/// The marks every shard's journal holds or may soon hold, at most `max` in all (each
/// journal refuses more than `max` of its own: all shards together are kept below that).
#[derive(Debug)]
pub(crate) struct MarkSlots {
    max: usize,
    held: Mutex<HashSet<Slot>>,
}

impl MarkSlots {
    /// Room for `max` marks.
    pub(crate) fn new(max: usize) -> MarkSlots {
        MarkSlots {
            max,
            held: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Slot>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Slots taken whatever the room: marks a journal holds already (recovered), or
    /// reserved before a restart (a recovered stream's two sides).
    pub(crate) fn hold(&self, slots: impl IntoIterator<Item = Slot>) {
        self.lock().extend(slots);
    }

    /// Reserves `slots`, all or none (one held already counts once): false if they would
    /// take more than the room.
    pub(crate) fn reserve(&self, slots: &[Slot]) -> bool {
        let mut held = self.lock();
        let new = slots.iter().filter(|s| !held.contains(s)).count();
        if held.len() + new > self.max {
            return false;
        }
        held.extend(slots.iter().copied());
        true
    }

    /// Gives `slots` back: their marks are forgotten (or were never written).
    pub(crate) fn release(&self, slots: &[Slot]) {
        let mut held = self.lock();
        for s in slots {
            held.remove(s);
        }
    }

    /// The room: most slots held at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: NodeId = NodeId::from_const(4);

    #[test]
    fn slots_are_reserved_all_or_none_within_the_room() {
        let s = MarkSlots::new(3);
        assert!(s.reserve(&[(P, 1), (P, 2)]));
        assert!(
            s.reserve(&[(P, 1), (P, 2)]),
            "held already: no more room taken"
        );
        assert!(!s.reserve(&[(P, 3), (P, 4)]), "one too many: none reserved");
        assert!(s.reserve(&[(P, 3)]));
        assert!(!s.reserve(&[(P, 4)]));
        s.release(&[(P, 1)]);
        assert!(s.reserve(&[(P, 4)]), "room given back");
        s.hold([(P, 9)]);
        assert!(!s.reserve(&[(P, 1)]), "held beyond the room: nothing new");
    }
}
