//! Deliveries handed to the application and not yet taken by it.
//!
//! A TOKEN that fills a slot is delivered ([`Event::Delivered`](crate::proto::Event::Delivered)),
//! but not acknowledged: the embedding may still lose it (a crash with the message in its
//! buffer). The slot moves from the record's free slots to its *held* slots, and the ACK
//! goes out only when the embedding reports the hand-over with
//! [`Node::handle_taken`]. Until then a duplicate TOKEN for that slot gets no answer, and the
//! record stays (so that rule 4, ACK to a token whose record is gone, never acknowledges a
//! message the application has not taken). A node that restarts loses its held slots with
//! its records: their tokens get DOUBT, never ACK.

use crate::proto::wire::ranges::RangeSet;
use crate::proto::NodeId;

/// One delivery awaiting its hand-over to the application: give it back to
/// [`Node::handle_taken`](crate::proto::Node::handle_taken) once the application has the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryId {
    from: NodeId,
    r: u64,
    s: u64,
    /// Bytes charged against `max_untaken_bytes`: what the delivery holds.
    len: usize,
    /// The receive buffer the delivery keeps alive within the node's budget (`pins.rs`),
    /// if [`PINNED`] is among the flags. (Not an `Option`, which would take 16 bytes:
    /// every delivered message carries its id.)
    pin: u64,
    /// [`PINNED`], [`REDELIVERY`].
    flags: u8,
}

/// A flag of [`DeliveryId`]: it keeps a receive buffer alive (its `pin`).
const PINNED: u8 = 1;
/// A flag of [`DeliveryId`]: handed out before a restart of this node and not taken then
/// (durable mode).
const REDELIVERY: u8 = 2;

impl DeliveryId {
    pub(crate) fn new(from: NodeId, r: u64, s: u64, kept: Kept) -> DeliveryId {
        DeliveryId {
            from,
            r,
            s,
            len: kept.charge,
            pin: kept.pin.unwrap_or(0),
            flags: if kept.pin.is_some() { PINNED } else { 0 },
        }
    }

    /// A delivery from `from` in slot `s` of incarnation 1, holding nothing (unit tests of
    /// the layers above the core).
    #[cfg(test)]
    pub(crate) fn for_test(from: NodeId, s: u64) -> DeliveryId {
        DeliveryId::new(
            from,
            1,
            s,
            Kept {
                charge: 0,
                pin: None,
            },
        )
    }

    /// A delivery recovered from the journal after a restart: it may have been handed to
    /// the application before, and not taken.
    pub(crate) fn redelivered(from: NodeId, r: u64, s: u64, kept: Kept) -> DeliveryId {
        let mut id = DeliveryId::new(from, r, s, kept);
        id.flags |= REDELIVERY;
        id
    }

    /// Whether this delivery was handed to the application before a restart of this
    /// (durable) node, which may have processed it without taking it. An application that
    /// commits its effects with [`stable`](Self::stable) in one transaction of its own checks
    /// its store for that key when this is true.
    #[inline]
    pub fn is_redelivery(&self) -> bool {
        self.flags & REDELIVERY != 0
    }

    /// The delivery's identity, the same across restarts of a durable receiver: the
    /// sender, the receiver incarnation and the slot. Never reused by this node.
    #[inline]
    pub fn stable(&self) -> (NodeId, u64, u64) {
        (self.from, self.r, self.s)
    }

    /// The sending node.
    #[inline]
    pub fn from(&self) -> NodeId {
        self.from
    }

    /// The incarnation `r` and slot `s` it was delivered into.
    pub(crate) fn slot(&self) -> (u64, u64) {
        (self.r, self.s)
    }

    /// What the delivery holds, as `Kept` says (bytes charged, buffer pinned).
    pub(crate) fn kept(&self) -> Kept {
        Kept {
            charge: self.len,
            pin: (self.flags & PINNED != 0).then_some(self.pin),
        }
    }
}

/// The slots of one receiver record delivered and not yet taken.
#[derive(Debug, Default)]
pub(crate) struct Held {
    slots: RangeSet,
}

impl Held {
    /// Slot `s` was delivered: held until taken.
    #[inline]
    pub fn hold(&mut self, s: u64) {
        self.slots.insert(s..s + 1);
    }

    /// Slot `s` was taken; false if it was not held.
    #[inline]
    pub fn release(&mut self, s: u64) -> bool {
        self.slots.remove(s)
    }

    /// Whether slot `s` is delivered and not yet taken.
    #[inline]
    pub fn contains(&self, s: u64) -> bool {
        self.slots.contains(s)
    }

    /// Whether no delivery waits for the application.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// How a delivered payload is held: what it is charged against `max_untaken_bytes`, and the
/// receive buffer it keeps alive, if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    pub charge: usize,
    pub pin: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a delivery holds comes back as it went in (a pin of 0 is a pin), and a
    /// redelivery says so; the id stays at six words.
    #[test]
    fn kept_and_redelivery_round_trip_in_six_words() {
        let from = NodeId::from_const(3);
        for pin in [None, Some(0), Some(7), Some(u64::MAX)] {
            let kept = Kept { charge: 42, pin };
            let id = DeliveryId::new(from, 1, 9, kept);
            assert_eq!((id.kept().charge, id.kept().pin), (42, pin));
            assert!(!id.is_redelivery());
            let again = DeliveryId::redelivered(from, 1, 9, kept);
            assert_eq!(again.kept().pin, pin);
            assert!(again.is_redelivery());
            assert_ne!(id, again);
            assert_eq!(again.stable(), (from, 1, 9));
        }
        let none = DeliveryId::new(
            from,
            1,
            9,
            Kept {
                charge: 0,
                pin: None,
            },
        );
        let zero = DeliveryId::new(
            from,
            1,
            9,
            Kept {
                charge: 0,
                pin: Some(0),
            },
        );
        assert_ne!(none, zero, "pinned or not is part of the id");
        assert!(std::mem::size_of::<DeliveryId>() <= 48);
    }

    #[test]
    fn held_slots_are_released_once() {
        let mut h = Held::default();
        assert!(h.is_empty());
        h.hold(7);
        h.hold(9);
        h.hold(8);
        assert!(h.contains(7) && h.contains(9));
        assert!(h.contains(8));
        assert!(h.release(8));
        assert!(!h.release(8), "taken twice");
        assert!(!h.contains(8));
        assert!(h.release(7) && h.release(9));
        assert!(h.is_empty());
        assert!(!h.release(10), "never held");
    }
}
