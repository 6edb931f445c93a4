//! What a node hands back to its embedding: events and datagrams to transmit.

use bytes::Bytes;

use super::{MsgId, NodeId};

/// Something the application should know about, from [`Node::poll_event`](super::Node::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A message from `from` was delivered to this node, exactly once.
    Delivered {
        /// The sending node.
        from: NodeId,
        /// The message.
        payload: Bytes,
    },
    /// A message this node sent was delivered by its receiver, which acknowledged it.
    Acknowledged {
        /// The destination of the message.
        to: NodeId,
        /// The id [`Node::send`](super::Node::send) returned for it.
        id: MsgId,
    },
    /// A message this node sent reached a receiver that has since lost the incarnation it
    /// was sent under (the receiver restarted, or evicted it under pressure): it was
    /// delivered at most once, maybe not at all, and will not be sent again. Never silent:
    /// every message ends as exactly one of `Acknowledged` or `InDoubt`.
    InDoubt {
        /// The destination of the message.
        to: NodeId,
        /// The id [`Node::send`](super::Node::send) returned for it.
        id: MsgId,
    },
}

/// A datagram written by [`Node::poll_transmit`](super::Node::poll_transmit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Node the datagram is for; the embedding maps it to a network address.
    pub destination: NodeId,
    /// Number of bytes appended to the buffer.
    pub size: usize,
}
