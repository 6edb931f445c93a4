//! The driver's hand-over of delivered messages to the application: the delivery queue,
//! the messages waiting for room in it, and the takes reported back to the node.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Instant;

use super::delivery_queue::{DeliveryTx, Pushed};
use crate::endpoint::api::message::Message;
use crate::endpoint::api::shared::Shared;
use crate::endpoint::flows::at_driver::Flows;
use crate::proto::{DeliveryId, Node};

/// Delivered messages on their way to the application.
pub(crate) struct Handover {
    deliver: DeliveryTx<Message>,
    /// Delivered messages not yet in the delivery queue (this turn's, or it was full).
    pending: VecDeque<Message>,
    /// The deliveries in the queue, in its order: the first `Shared::taken` of all those
    /// ever put in were taken by the application.
    handed: VecDeque<DeliveryId>,
    /// Takes already reported to the node.
    taken_seen: u64,
    /// The application's count of takes when last read: the driver sleeps only while it
    /// is still the count.
    taken_read: u64,
    /// Deliveries discarded because the receiving end was dropped (never acknowledged).
    discarded: usize,
    /// Reused for the application's acknowledgements (ack-after-processing mode).
    acked_scratch: Vec<DeliveryId>,
    /// The channel is full with messages pending (counted once per stall).
    stalled: bool,
    /// Whether taking a message acknowledges it (else the application's `ack` does).
    ack_on_take: bool,
}

impl Handover {
    pub(crate) fn new(deliver: DeliveryTx<Message>, ack_after_processing: bool) -> Handover {
        Handover {
            deliver,
            pending: VecDeque::new(),
            handed: VecDeque::new(),
            taken_seen: 0,
            taken_read: 0,
            discarded: 0,
            acked_scratch: Vec::new(),
            stalled: false,
            ack_on_take: !ack_after_processing,
        }
    }

    /// Queues a message the node delivered.
    #[inline]
    pub(crate) fn push(&mut self, m: Message) {
        self.pending.push_back(m);
    }

    /// Whether every delivered message is in the queue: the socket is read only then.
    pub(crate) fn is_clear(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether nothing more can be handed over: all of it is in the queue, or nobody
    /// receives.
    pub(crate) fn is_done(&self) -> bool {
        self.pending.is_empty() || self.deliver.is_closed()
    }

    /// Delivered messages the application never took.
    pub(crate) fn undelivered(&self) -> usize {
        self.pending.len() + self.handed.len() + self.discarded
    }

    /// Room for the pending messages, to wait for (`None` when nothing is pending): the
    /// next [`hand_over`](Self::hand_over) moves them.
    pub(crate) fn room(&self) -> Option<impl Future<Output = ()>> {
        (!self.pending.is_empty()).then(|| self.deliver.room())
    }

    /// The application's count of takes when [`on_taken`](Self::on_taken) last read it.
    pub(crate) fn taken_read(&self) -> u64 {
        self.taken_read
    }

    /// Hands pending messages to the application while the channel has room. Returns
    /// whether this turn began a stall (the queue full); calls `discarded` for each
    /// message dropped because nobody receives.
    pub(crate) fn hand_over(&mut self, mut discarded: impl FnMut()) -> bool {
        if self.pending.is_empty() {
            self.stalled = false;
        }
        let handed = &mut self.handed;
        match self
            .deliver
            .push_from(&mut self.pending, |m| handed.push_back(m.delivery()))
        {
            Pushed::All => false,
            Pushed::Full => {
                tracing::trace!("delivery buffer full: socket reads paused");
                !std::mem::replace(&mut self.stalled, true)
            }
            Pushed::Closed => {
                // Never taken, so never acknowledged: their senders do not hear of them
                // as delivered.
                for _ in self.pending.drain(..) {
                    self.discarded += 1;
                    discarded();
                }
                false
            }
        }
    }

    /// Reports to the node the messages the application took since the last call (the
    /// first of `handed`, `taken` in all), or acknowledged in ack-after-processing mode:
    /// their ACKs may leave now.
    /// Durable channels' messages keep their channel's position with their take
    /// ([`Flows::take_mark`]).
    pub(crate) fn on_taken(
        &mut self,
        t: Instant,
        taken: u64,
        (node, flows): (&mut Node, &mut Flows),
        shared: &Shared,
    ) {
        self.taken_read = taken;
        let n = usize::try_from(taken.saturating_sub(self.taken_seen))
            .unwrap_or(usize::MAX)
            .min(self.handed.len());
        self.taken_seen += n as u64;
        let took = self.handed.drain(..n);
        if !self.ack_on_take {
            drop(took);
        } else if flows.has_marks() {
            took.for_each(|id| take_marked(t, id, node, flows));
        } else {
            // In one call: the takes of one sender in a row share its record's lookup.
            node.handle_taken_many(t, took);
        }
        // Application acknowledgements (ack-after-processing mode), and streams' chunks
        // read to their end (any mode).
        {
            let mut acked = std::mem::take(&mut self.acked_scratch);
            shared.take_acked(&mut acked);
            if flows.has_marks() {
                acked
                    .drain(..)
                    .for_each(|id| take_marked(t, id, node, flows));
            } else {
                node.handle_taken_many(t, acked.drain(..));
            }
            self.acked_scratch = acked;
        }
    }
}

/// Takes `id`, keeping its durable channel's position with the take if it has one.
fn take_marked(t: Instant, id: DeliveryId, node: &mut Node, flows: &mut Flows) {
    match flows.take_mark(&id) {
        Some(mark) => {
            if let Err(e) = node.handle_taken_marked(t, id, mark) {
                // No room for the mark: only with `Rules::reserve_flow_marks` off (a flow
                // reserves its room before it starts). Taken all the same: the flow goes
                // on from its older position after a restart.
                tracing::warn!(error = %e, "a durable flow's take without its position");
                node.handle_taken(t, id);
            }
        }
        None => {
            node.handle_taken(t, id);
        }
    }
}
