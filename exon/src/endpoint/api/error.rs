//! Errors of the endpoint API.

use std::io;
use std::net::SocketAddr;

use crate::endpoint::io::family::Reach;

use crate::proto::{ConfigError, NodeId, SendError};

/// Why a send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The core refused the message (queue full on `try_send`, payload too large, too many
    /// peers, or a send to self). Nothing about the message was kept.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The endpoint is closing or closed: it accepts no new messages.
    #[error("endpoint closed")]
    Closed,
    /// No address is known for this node id: add it with
    /// [`Handle::add_peer`](crate::endpoint::Handle::add_peer) (or let the peer speak first: addresses
    /// are learned from its datagrams). Nothing about the message was kept.
    #[error("no address known for node {0}")]
    UnknownPeer(NodeId),
    /// [`Handle::add_peer_key`](crate::endpoint::Handle::add_peer_key): the keyring holds `max` peers
    /// already ([`Config::keys.max_keyring_size`](crate::proto::KeyConfig::max_keyring_size)).
    #[error("the keyring is full ({max} peers)")]
    KeyringFull {
        /// The bound.
        max: usize,
    },
    /// Durable mode: the journal failed (a full or failing disk): the endpoint stores
    /// nothing more, so it accepts no message. Restart it once the disk is fixed: what was
    /// stored is recovered.
    #[error("the journal failed: the endpoint stores nothing more")]
    Storage,
    /// [`Receipt::stored`](crate::endpoint::Receipt::stored) on an endpoint that is not durable.
    #[error("the endpoint is not durable")]
    NotDurable,
    /// [`Handle::try_add_peer`](crate::endpoint::Handle::try_add_peer): the endpoint's socket cannot
    /// send to an address of this family (an IPv6 peer of an IPv4 socket, an IPv4 peer of
    /// an IPv6-only one). Bind the endpoint to `[::]` to serve both families.
    #[error("{addr} is out of reach of this endpoint's {reach} socket")]
    OutOfReach {
        /// The address refused.
        addr: SocketAddr,
        /// What the socket reaches.
        reach: Reach,
    },
    /// Durable mode ([`Handle::channel`](crate::endpoint::Handle::channel),
    /// [`Handle::open_stream`](crate::endpoint::Handle::open_stream)): the journal keeps
    /// the positions of as many durable flows as it may already
    /// ([`Limits::max_marks`](crate::proto::Limits::max_marks) marks: one per channel and
    /// direction, two per stream, all shards together). A flow never goes on without its
    /// position, so the new one is refused; room comes back when a stream is dropped.
    #[error("the journal keeps the positions of {max} durable flow sides already")]
    TooManyFlows {
        /// The bound (`Limits::max_marks`).
        max: usize,
    },
}

/// Why a [`Receipt`](crate::endpoint::Receipt) resolved without an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The endpoint stopped (closed, or its deadline passed) before the receiver acknowledged
    /// the message. It may or may not have been delivered (or taken); it was never
    /// delivered twice.
    #[error("endpoint stopped before the message was acknowledged")]
    Unacknowledged,
    /// The endpoint refused the message after [`send`](crate::endpoint::Handle::send) had returned
    /// (too many destinations, or the endpoint closed meanwhile): it was never sent.
    #[error("message refused: {0}")]
    Refused(Error),
    /// The message's deadline passed before any whole copy of it left this endpoint (it was
    /// never sent, or only in fragments some bytes of which never left): it was certainly
    /// not delivered, and never will be.
    #[error("deadline passed before the message was sent: not delivered")]
    NotDelivered,
    /// The receiver lost the incarnation the message was sent under (it restarted, or
    /// forgot it under a flood of requests) before acknowledging it: the message was
    /// delivered at most once, maybe not at all (or delivered and lost in the receiver's
    /// buffer before its application took it), and will not be sent again. Also the verdict
    /// on a message whose deadline passed after a whole copy of it was sent.
    #[error("receiver restarted before acknowledging: message in doubt")]
    InDoubt,
}

/// Why an endpoint could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Binding the socket failed.
    #[error("bind failed: {0}")]
    Io(#[from] io::Error),
    /// The protocol configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The clock store could not be read.
    #[error("clock store: {0}")]
    Store(io::Error),
    /// No security was chosen: give the builder an identity (sealed datagrams), or say
    /// `insecure_plaintext()` explicitly.
    #[error("no identity: call `identity(..)` on the builder, or `insecure_plaintext()`")]
    NoSecurity,
    /// Durable mode: the journal could not be opened (or read back).
    #[error("journal: {0}")]
    Journal(#[from] crate::durable::JournalError),
    /// Durable mode: the directory was used with another number of driver shards. Each
    /// shard keeps the state of the peers it owns in a journal of its own, and which shard
    /// owns a peer depends on the number of shards
    /// ([`shard_of`](crate::endpoint::shard_of)): bind the directory with the number it was
    /// used with (`docs/durability.md`, "Shards").
    #[error("durable directory used with {recorded} driver shard(s), bound with {asked}")]
    DurableShardsChanged {
        /// The number of shards the directory was used with.
        recorded: usize,
        /// The number of shards asked for now.
        asked: usize,
    },
}
