//! The sans-IO Exon core: protocol state, wire format and timers, with no sockets, no async
//! runtime and no clock reads (time is always passed in).
//!
//! Start with [`Node`]. The wire format is in [`frame`] and documented byte by byte in
//! `docs/wire.md`.

mod config;
pub mod crypto;
mod error;
mod event;
#[cfg(feature = "arbitrary")]
mod fuzzing;
mod ids;
pub mod journal;
mod node;
mod payload;
mod recv;
mod rules;
mod send;
mod stats;
mod wire;

pub use wire::{clocks, codec, frame, ranges};

pub use config::{
    payload_room_each, AckConfig, Config, ConfigError, FlowConfig, KeyConfig, Limits, MtuConfig,
    TimerConfig, BASE_DATAGRAM_SIZE, MAX_DATAGRAM_SIZE, MAX_WINDOW, MIN_DATAGRAM_SIZE,
};
pub use send::congestion::{CongestionControl, PathStats};

/// The maps keyed by node id. foldhash instead of SipHash: several times cheaper per lookup,
/// still randomly seeded per map, so forged ids cannot be chosen to collide.
pub(crate) type PeerMap<V> = std::collections::HashMap<NodeId, V, foldhash::fast::RandomState>;
pub use crypto::{Identity, Keyring, PublicKey, SecretKey, Security, Vouch};
pub use error::{DecodeError, MarkError, SendError};
pub use event::{Abandoned, Event, Transmit, TransmitRun};
pub use frame::{AckRanges, Frame, Header, Packet, Verdict};
pub use ids::{InvalidNodeId, MsgId, MsgIds, NodeId};
pub use node::journal::RecoverError;
pub use node::output::Output;
pub use node::{Accepted, Node};
pub use payload::{Payload, HEAD_MAX};
pub use recv::delivery::DeliveryId;
pub use rules::Rules;
pub use send::rtt::Rtt;
pub use stats::{FrameCounts, MtuStats, Rejects, Stats};
