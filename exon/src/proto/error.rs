//! Typed errors of the core: malformed datagrams and refused sends.

use crate::proto::NodeId;

/// Why a datagram could not be decoded. Every variant is a counted reject, never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Shorter than the smallest possible header.
    #[error("datagram shorter than a header")]
    Runt,
    /// A protocol version this implementation does not speak (the high four bits of the
    /// first byte).
    #[error("unsupported version {0}")]
    UnsupportedVersion(u8),
    /// Header flags that go only with a sealed datagram were set on a plaintext one.
    #[error("reserved flags set: {0:#04x}")]
    ReservedFlags(u8),
    /// A field or payload runs past the end of the datagram.
    #[error("truncated")]
    Truncated,
    /// An integer was not in its shortest encoding.
    #[error("non-canonical variable-length integer")]
    NonCanonicalVarint,
    /// A frame type this implementation does not know.
    #[error("unknown frame type {0}")]
    UnknownFrame(u64),
    /// A header with no frame after it.
    #[error("no frames")]
    NoFrames,
    /// A TOKEN payload larger than allowed.
    #[error("payload too large")]
    PayloadTooLarge,
    /// An ACK frame with no range.
    #[error("ACK frame without ranges")]
    EmptyAck,
    /// An ACK range that runs past the largest slot number.
    #[error("value out of range")]
    ValueOutOfRange,
    /// A FRAG frame with no bytes, or bytes past the message's end.
    #[error("fragment empty or beyond its message")]
    BadFragment,
    /// An MTU_PROBE whose padding is not all zero bytes.
    #[error("MTU_PROBE padding not zero")]
    BadPadding,
    /// A TOKEN or FRAG that ends its datagram and writes its `len` (such a frame runs to
    /// the end without one: its type's `TO_END` form).
    #[error("a TOKEN or FRAG ending its datagram gives its length")]
    LengthAtEnd,
}

/// Why [`Node::send`](crate::proto::Node::send) refused a message. The message was not accepted:
/// nothing about it is kept, and the caller still owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The destination's queue holds the configured maximum of messages (or the node its
    /// maximum of queued bytes): wait for acknowledgements, then retry.
    #[error("send queue to {0} is full")]
    QueueFull(NodeId),
    /// The payload is larger than [`Config::limits.max_message_size`](crate::proto::Limits::max_message_size).
    #[error("payload of {len} bytes exceeds the maximum of {max}")]
    PayloadTooLarge {
        /// Size of the refused payload.
        len: usize,
        /// Largest payload accepted by this configuration.
        max: usize,
    },
    /// The node already has the configured maximum of sender records, all busy.
    #[error("too many destinations with messages in flight")]
    TooManyPeers,
    /// A node cannot send to itself.
    #[error("cannot send to self")]
    ToSelf,
    /// Durable mode: message ids are drawn from the stored clock, and the next block of it
    /// is not stored yet (only at start, or at a rate far beyond the disk's): retry once
    /// the embedding reported the clock stored.
    #[error("durable message ids wait for the clock to be stored")]
    ClockNotStored,
    /// A sealed node knows no public key for the destination (add it to the keyring).
    #[error("no public key known for {0}")]
    UnknownKey(NodeId),
    /// [`Node::reply`](crate::proto::Node::reply): the delivery answered is not waiting (it
    /// was taken or answered already, or handed out before a restart of a node that is not
    /// durable).
    #[error("the delivery answered is not waiting to be taken")]
    NotWaiting,
    /// [`Node::send_many`](crate::proto::Node::send_many) was given no payload.
    #[error("no payload to send")]
    NothingToSend,
    /// [`Node::send_keyed`](crate::proto::Node::send_keyed): the key is not above the
    /// highest key accepted for this destination. Either a message with this key was
    /// accepted before (its verdict comes, or came, on its own receipt; after a restart it
    /// is among the recovered messages, with its key, unless it was resolved before the
    /// crash), or the keys were given out of order. Nothing was kept. Within one run, the
    /// earlier message of this key may not be on stable storage yet: its own
    /// `Event::Stored` (the endpoint's `Receipt::stored`) says when; a crash before then
    /// loses it, and the key is accepted again after the restart.
    #[error("key {key} for {to} is not above the highest key accepted for it ({highest}): already accepted, or out of order")]
    KeyNotAbove {
        /// The destination.
        to: NodeId,
        /// The key refused.
        key: u64,
        /// The highest key accepted for `to`.
        highest: u64,
    },
    /// [`Node::send_keyed`](crate::proto::Node::send_keyed): the journal may have forgotten
    /// keys it had accepted for `to` (it was found damaged, or is new for a node that ran
    /// before), so a key it does not know may still be a message sent before: accepting it
    /// could send that message twice. The application settles `to`'s keys first
    /// ([`Node::settle_keys`](crate::proto::Node::settle_keys)), once it knows which of its
    /// rows reached their receiver (or gives them up as in doubt).
    #[error("the journal may have forgotten keys accepted for {to} (damaged, or new for a node that ran before): settle them with settle_keys before sending keyed")]
    KeysForgotten {
        /// The destination.
        to: NodeId,
    },
    /// A keyed batch whose keys would pass `u64::MAX`.
    #[error("the batch's keys would pass the largest key")]
    KeysExhausted,
    /// [`Node::send_keyed`](crate::proto::Node::send_keyed) on a node that is not durable:
    /// keys are kept in the journal.
    #[error("keyed sends need durable mode (the journal keeps the keys)")]
    NotDurable,
    /// [`Node::send_marked`](crate::proto::Node::send_marked): the mark cannot be kept.
    #[error(transparent)]
    Mark(#[from] MarkError),
}

/// Why a [`Mark`](crate::proto::journal::Mark) cannot be kept
/// ([`Node::send_marked`](crate::proto::Node::send_marked),
/// [`Node::handle_taken_marked`](crate::proto::Node::handle_taken_marked),
/// [`Node::set_mark`](crate::proto::Node::set_mark)). Nothing was kept or taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// The node is not durable: marks live in the journal.
    #[error("marks need durable mode (the journal keeps them)")]
    NotDurable,
    /// The value is longer than [`MAX_MARK_BYTES`](crate::proto::journal::MAX_MARK_BYTES).
    #[error("a mark of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The value's length.
        len: usize,
        /// The most a mark may hold.
        max: usize,
    },
    /// The journal holds [`Limits::max_marks`](crate::proto::Limits::max_marks) marks: a
    /// new one waits until one is forgotten.
    #[error("the journal holds its maximum of {0} marks")]
    TooMany(usize),
}
