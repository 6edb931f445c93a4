//! What a node hands back to its embedding: events and datagrams to transmit.

use bytes::Bytes;

use super::{MsgId, NodeId};

/// Something the application should know about, from [`Node::poll_event`](super::Node::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// A datagram written by [`Node::poll_transmit`](super::Node::poll_transmit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Node the datagram is for; the embedding maps it to a network address.
    pub destination: NodeId,
    /// Number of bytes appended to the buffer.
    pub size: usize,
}
