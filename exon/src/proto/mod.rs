//! The sans-IO Exon core: protocol state, wire format and timers, with no sockets, no async
//! runtime and no clock reads (time is always passed in).
//!
//! Start with [`Node`]. The wire format is in [`frame`] and documented byte by byte in
//! `docs/wire.md`.

mod abandon;
mod assembler;
pub mod codec;
mod config;
mod congestion;
pub mod crypto;
mod delivery;
mod error;
mod event;
mod eviction;
mod fragments;
pub mod frame;
#[cfg(feature = "arbitrary")]
mod fuzzing;
mod ids;
mod liveness;
mod loss;
mod mtud;
mod node;
mod outbox;
mod output;
mod pacing;
mod path;
mod pins;
pub mod ranges;
mod reassembly;
mod receiver;
mod rtt;
mod rules;
mod sender;
mod silence;
mod stats;
mod timeouts;
mod timer;
mod tokens;
mod transmit;
mod verdicts;

pub use abandon::Abandoned;
pub use config::{Config, ConfigError, BASE_DATAGRAM_SIZE, MAX_DATAGRAM_SIZE, MIN_DATAGRAM_SIZE};
pub use congestion::{CongestionControl, PathStats};

/// The maps keyed by node id. foldhash instead of SipHash: several times cheaper per lookup,
/// still randomly seeded per map, so forged ids cannot be chosen to collide.
pub(crate) type PeerMap<V> = std::collections::HashMap<NodeId, V, foldhash::fast::RandomState>;
pub use crypto::{Identity, Keyring, PublicKey, SecretKey, Security, Vouch};
pub use delivery::DeliveryId;
pub use error::{DecodeError, SendError};
pub use event::{Event, Transmit};
pub use frame::{AckRanges, Frame, Header, Packet, Verdict};
pub use ids::{InvalidNodeId, MsgId, NodeId};
pub use node::{Accepted, Node};
pub use output::Output;
pub use rtt::Rtt;
pub use rules::Rules;
pub use stats::{FrameCounts, MtuStats, Rejects, Stats};
