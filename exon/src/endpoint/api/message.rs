//! A delivered message, and how the application acknowledges it in ack-after-processing
//! mode.

use std::sync::Arc;

use bytes::Bytes;

use crate::endpoint::api::shared::Shared;
use crate::proto::NodeId;

/// A message delivered exactly once, with its sender's node id.
///
/// By default, taking it from [`Endpoint::recv`](crate::endpoint::Endpoint::recv) acknowledges it. With
/// [`EndpointConfig::ack_after_processing`](crate::endpoint::EndpointConfig::ack_after_processing), it is acknowledged only when the application
/// calls [`ack`](Self::ack) (after processing it); one dropped without `ack` is never
/// acknowledged (its sender sees it as unacknowledged or in doubt) and keeps taking one of
/// the receiver's [`Config::limits.max_untaken`](crate::proto::Limits::max_untaken) places.
#[derive(Debug, Clone)]
pub struct Message {
    /// The sending node.
    pub from: NodeId,
    /// The payload.
    pub payload: Bytes,
    /// How to acknowledge it, in ack-after-processing mode.
    acker: Option<Acker>,
    /// Its identity across restarts, and whether it was handed out before one.
    delivery: crate::proto::DeliveryId,
    kind: Kind,
}

/// What a delivered message is: a plain message, or one of an ordered channel
/// ([`Handle::channel`](crate::endpoint::Handle::channel)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// A plain message ([`Handle::send`](crate::endpoint::Handle::send)): no order.
    #[default]
    Plain,
    /// Message `seq` of channel `channel` from its sender, delivered in order: every
    /// number below came before (as a message or a gap), each once. Numbers start at 0 for
    /// each run of the sending endpoint, so a 0 after higher numbers means the sender
    /// restarted.
    Channel {
        /// The channel's number.
        channel: u16,
        /// The message's number in the channel.
        seq: u64,
    },
    /// Message `seq` of channel `channel` was given up by its sender (its deadline passed):
    /// it will never be delivered, and the channel goes on with `seq + 1`. The payload is
    /// empty.
    Gap {
        /// The channel's number.
        channel: u16,
        /// The number skipped.
        seq: u64,
    },
    /// A message of channel `channel` from a run of its sender this endpoint does not
    /// know (this endpoint restarted since the run began, or a newer run replaced it):
    /// delivered exactly once, but outside the channel's order. The sender starts a new run
    /// when it learns of it.
    Unordered {
        /// The channel's number.
        channel: u16,
        /// The message's number in its run.
        seq: u64,
    },
}

impl PartialEq for Message {
    /// Compares sender and payload.
    fn eq(&self, other: &Self) -> bool {
        (self.from, &self.payload) == (other.from, &other.payload)
    }
}

impl Eq for Message {}

impl Message {
    pub(crate) fn new(
        from: NodeId,
        payload: Bytes,
        acker: Option<Acker>,
        delivery: crate::proto::DeliveryId,
    ) -> Message {
        Message {
            from,
            payload,
            acker,
            delivery,
            kind: Kind::Plain,
        }
    }

    /// The same message, of kind `kind`.
    pub(crate) fn with_kind(mut self, kind: Kind) -> Message {
        self.kind = kind;
        self
    }

    /// Whether it is a plain message, or its place in an ordered channel.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The delivery this message is (what its take reports to the node).
    #[inline]
    pub(crate) fn delivery(&self) -> crate::proto::DeliveryId {
        self.delivery
    }

    /// Durable mode: whether this message was handed to the application before a restart
    /// of this endpoint and not acknowledged then (so it may have been processed). An
    /// application that commits its effects together with [`stable_id`](Self::stable_id)
    /// in one transaction of its own store checks that store when this is true
    /// (`docs/durability.md`). Always false on an endpoint that is not durable.
    pub fn is_redelivery(&self) -> bool {
        self.delivery.is_redelivery()
    }

    /// The message's identity at this receiver, the same when it is handed out again after
    /// a restart of a durable endpoint, never reused: the sender, the receiver incarnation
    /// and the slot it was delivered in.
    pub fn stable_id(&self) -> (NodeId, u64, u64) {
        self.delivery.stable()
    }

    /// Acknowledges the message to its sender, whose receipt then resolves `Ok`: call it
    /// once the message is processed. Needed only with
    /// [`EndpointConfig::ack_after_processing`](crate::endpoint::EndpointConfig::ack_after_processing); otherwise (the message was acknowledged
    /// when taken) it does nothing. Acknowledging twice does nothing more.
    pub fn ack(&self) {
        if let Some(a) = &self.acker {
            a.shared.ack(self.delivery);
        }
    }
}

/// The acknowledgement handle of a message in ack-after-processing mode: the endpoint's
/// shared state, told the message's own delivery id (one word: the id is not kept twice).
#[derive(Clone)]
pub(crate) struct Acker {
    shared: Arc<Shared>,
}

impl Acker {
    pub(crate) fn new(shared: Arc<Shared>) -> Acker {
        Acker { shared }
    }
}

impl std::fmt::Debug for Acker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acker").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Message` is moved several times on its way to the application (the driver's
    /// queue, the delivery queue, `recv`), and every delivery carries one: it was 176
    /// bytes while its acknowledgement handle kept a second copy of its delivery id.
    #[test]
    fn a_message_stays_small() {
        let size = std::mem::size_of::<Message>();
        assert!(size <= 128, "Message is {size} bytes");
    }
}
