//! Deliveries handed to the application and not yet taken by it.
//!
//! A TOKEN that fills a slot is delivered ([`Event::Delivered`](super::Event::Delivered)),
//! but not acknowledged: the embedding may still lose it (a crash with the message in its
//! buffer). The slot moves from the record's free slots to its *held* slots, and the ACK
//! goes out only when the embedding reports the hand-over with
//! [`Node::handle_taken`]. Until then a duplicate TOKEN for that slot gets no answer, and the
//! record stays (so that rule 4, ACK to a token whose record is gone, never acknowledges a
//! message the application has not taken). A node that restarts loses its held slots with
//! its records: their tokens get DOUBT, never ACK.

use std::time::Instant;

use super::frame::Verdict;
use super::pins::Hold;
use super::ranges::RangeSet;
use super::{Node, NodeId};

/// One delivery awaiting its hand-over to the application: give it back to
/// [`Node::handle_taken`] once the application has the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryId {
    from: NodeId,
    r: u64,
    s: u64,
    /// Bytes charged against `max_untaken_bytes`: what the delivery holds.
    len: usize,
    /// The receive buffer the delivery keeps alive within the node's budget (`pins.rs`).
    pin: Option<u64>,
}

impl DeliveryId {
    pub(super) fn new(from: NodeId, r: u64, s: u64, kept: Kept) -> DeliveryId {
        DeliveryId {
            from,
            r,
            s,
            len: kept.charge,
            pin: kept.pin,
        }
    }

    /// The sending node.
    pub fn from(&self) -> NodeId {
        self.from
    }
}

/// The slots of one receiver record delivered and not yet taken.
#[derive(Debug, Default)]
pub(crate) struct Held {
    slots: RangeSet,
}

impl Held {
    /// Slot `s` was delivered: held until taken.
    pub fn hold(&mut self, s: u64) {
        self.slots.insert(s..s + 1);
    }

    /// Slot `s` was taken; false if it was not held.
    pub fn release(&mut self, s: u64) -> bool {
        self.slots.remove(s)
    }

    /// Whether slot `s` is delivered and not yet taken.
    pub fn contains(&self, s: u64) -> bool {
        self.slots.contains(s)
    }

    /// Whether no delivery waits for the application.
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

impl Node {
    /// Input: the datagrams handed over next (to
    /// [`handle_datagram_buf`](Self::handle_datagram_buf)) are parts of the receive buffer
    /// `key`, `size` bytes long (several datagrams received into one buffer, or a datagram
    /// split off a larger one): a delivery handed over as a slice keeps that whole buffer
    /// alive. `key` is the embedding's, unique per buffer while any part of it may be held;
    /// `size` 0 says the datagrams own their bytes (the default). The node then keeps small
    /// slices of a buffer only within a budget of 64 MiB of such buffers and copies them
    /// out beyond, so untaken deliveries hold at most twice what they are charged plus that
    /// budget (`pins.rs`).
    pub fn set_receive_buffer(&mut self, key: u64, size: usize) {
        self.pins.set_buffer(key, size);
    }

    /// Decides how the payload of a delivery is held (`payload` is a slice of the datagram
    /// being handled, or an allocation of its own when put together from fragments):
    /// returns the payload to hand over, a copy when a slice would keep too much alive.
    pub(super) fn keep_payload(&mut self, payload: bytes::Bytes) -> (bytes::Bytes, Kept) {
        match self.pins.hold(payload.len()) {
            Hold::Keep { charge, pin } => {
                self.stats.pinned_deliveries += u64::from(pin.is_some());
                (payload, Kept { charge, pin })
            }
            Hold::Copy { charge } => {
                self.stats.copied_deliveries += 1;
                let copy = bytes::Bytes::copy_from_slice(&payload);
                (copy, Kept { charge, pin: None })
            }
        }
    }

    /// Whether another delivery may be held now.
    pub(super) fn has_room_for_delivery(&self) -> bool {
        self.untaken < self.cfg.max_untaken && self.untaken_bytes < self.cfg.max_untaken_bytes
    }

    /// Input: the application has taken the delivery `id` (it left the embedding's buffer,
    /// for good). Only now is the message acknowledged to its sender, whose
    /// [`Event::Acknowledged`](super::Event::Acknowledged) therefore means "taken by the
    /// receiving application". Returns false (and does nothing) for an id that is not
    /// waiting: already taken, or from before a restart.
    ///
    /// Drain the outputs afterwards, as after any input: the ACK leaves with the next
    /// datagram to the sender, or after [`Config::ack_delay`](super::Config::ack_delay).
    pub fn handle_taken(&mut self, now: Instant, id: DeliveryId) -> bool {
        let Some(rec) = self.receivers.get_mut(&id.from) else {
            return false;
        };
        if rec.rck != id.r || !rec.held.release(id.s) {
            return false;
        }
        self.untaken -= 1;
        self.untaken_bytes = self.untaken_bytes.saturating_sub(id.len);
        if let Some(key) = id.pin {
            self.pins.release(key);
        }
        self.stats.taken += 1;
        // The sender asked for an immediate ACK of deliveries now all taken.
        let urgent = rec.ack_now && rec.held.is_empty();
        if urgent {
            rec.ack_now = false;
        }
        // (The record's probe deadline does not depend on its held slots: no re-arming.)
        if rec.is_spent() {
            self.receivers.remove(&id.from);
        }
        if !self
            .outbox
            .reply(id.from, Verdict::Ack, id.r, id.s, self.outbox_cap())
        {
            // The sender retransmits; the slot is neither free nor held then: ACK.
            self.stats.rejects.outbox_full += 1;
        }
        let (delay, every) = (self.cfg.ack_delay, self.cfg.ack_every);
        self.outbox
            .flush_verdicts(id.from, now, urgent, delay, every);
        true
    }

    /// Input: sends every verdict held back by the ACK delay with the next datagrams, for
    /// an embedding about to stop (so that the last messages taken are acknowledged).
    pub fn release_verdicts(&mut self) {
        self.outbox.release_all();
    }

    /// Deliveries handed to the embedding and not yet reported taken.
    pub fn untaken(&self) -> usize {
        self.untaken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
