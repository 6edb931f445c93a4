//! Early deliveries: ETOKENs held back from the application until their sender says its
//! records of them are on stable storage (`docs/durability.md`, "Syncs that overlap").

use std::ops::Range;
use std::time::Instant;

use crate::proto::recv::unstored::Ready;
use crate::proto::{DeliveryId, Event, Node, NodeId};

/// Dropped early deliveries whose takes are on their way, at most (`Node::unseen_takes`).
const MAX_UNSEEN_TAKES: usize = 4096;

impl Node {
    /// An early delivery may go to the application as far as this node's own journal goes
    /// (its record is stored, it was recovered, or the node is not durable): handed over if its
    /// sender stored it, else parked until it does, or dropped if it never will.
    pub(super) fn early_ready(&mut self, now: Instant, ev: Event) {
        let Event::Delivered { id, .. } = &ev else {
            return;
        };
        let (src, s) = (id.from(), id.slot().1);
        match self.unstored.ready(src, s, ev) {
            Ready::Deliver(ev) => self.events.push_back(ev),
            // Its source's record probes it while the delivery waits (`parked_early_probes`).
            Ready::Parked => self.rearm_receiver(src),
            Ready::Dropped(id) => self.drop_unstored(now, id),
        }
    }

    /// STORED(from, below) from `src`: its early deliveries in those slots go to the
    /// application.
    pub(super) fn on_stored(&mut self, src: NodeId, slots: Range<u64>) {
        let mut out = std::mem::take(&mut self.early_scratch);
        self.unstored.stored(src, slots, &mut out);
        self.events.extend(out.drain(..));
        self.early_scratch = out;
    }

    /// A stored copy (TOKEN, STOKEN) of slot `s` came from `src` while its early delivery
    /// is held: the sender stored it.
    pub(super) fn stored_copy(&mut self, src: NodeId, s: u64) {
        if self.unstored.is_empty() {
            return;
        }
        if let Some(ev) = self.unstored.stored_slot(src, s) {
            self.events.push_back(ev);
        }
    }

    /// `src`'s frontier is `l`: its early deliveries parked below it were never stored
    /// and never will be (a sender that restarted before its sync): dropped unseen.
    pub(super) fn unstored_frontier(&mut self, now: Instant, src: NodeId, l: u64) {
        if self.unstored.is_empty() {
            return;
        }
        let mut dropped = Vec::new();
        self.unstored.passed(src, l, &mut dropped);
        for id in dropped {
            self.drop_unstored(now, id);
        }
    }

    /// An early delivery its sender never stored leaves the node unseen, as if taken: its
    /// slot's take is journalled (so no restart hands it over) and answered DOUBT (the
    /// sender's frontier passed it, so an honest sender holds no token there; a sender
    /// restored from an older copy may, and it was never delivered: `Node::take_verdict`).
    fn drop_unstored(&mut self, now: Instant, id: DeliveryId) {
        self.stats.early_dropped += 1;
        // Never handed over: a token that comes there again (a sender restored from an
        // older copy of its directory sends it) is answered DOUBT, not ACK, and so is the
        // take below.
        if self.rules.dropped_unseen_doubt {
            let (r, s) = id.slot();
            if let Some(rec) = self.receivers.get_mut(&id.from()) {
                if rec.rck() == r {
                    rec.dropped_unseen(s);
                }
            }
            if self.unseen_takes.len() >= MAX_UNSEEN_TAKES {
                // Takes that never completed (a journal that failed): the oldest goes.
                self.unseen_takes.remove(0);
            }
            self.unseen_takes.push(id);
        }
        let taken = if self.journal.is_some() {
            self.journal_take(now, id, None)
        } else {
            self.take_live(now, id)
        };
        if !taken {
            // No record holds it any more (evicted): its charge is given back all the same
            // (never handed over, it cannot be taken by anyone else).
            self.take_verdict(id);
            self.release_taken(id);
        }
    }

    /// Early deliveries held for their senders' word (`Stats` reports them too).
    pub fn early_parked(&self) -> usize {
        self.unstored.parked()
    }
}
