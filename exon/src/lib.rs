//! Exon: oblivious exactly-once messaging over UDP.
//!
//! An implementation of the Exon protocol (Kassam, Almeida, Shoker): every message sent is
//! delivered at most once, and exactly once when the network eventually delivers, with no
//! per-peer state kept once traffic stops (only a node clock).
//!
//! Every message ends with exactly one verdict for its sender:
//!
//! * **acknowledged** ([`Event::Acknowledged`], a receipt's `Ok`): the receiving
//!   *application took* the message, exactly once. A message delivered into the receiver's
//!   buffer is not acknowledged until then (in the core: until the embedding calls
//!   [`Node::handle_taken`]); a receiver that dies with it still buffered never makes it
//!   acknowledged.
//! * **in doubt** ([`Event::InDoubt`], [`endpoint::ReceiptError::InDoubt`]): only if its
//!   receiver restarted (or evicted the slots it was sent under) before acknowledging it:
//!   delivered at most once, maybe not at all; not sent again.
//! * with the endpoint, also **unacknowledged** ([`endpoint::ReceiptError::Unacknowledged`]:
//!   the sending endpoint stopped first) and **refused**
//!   ([`endpoint::ReceiptError::Refused`]: never sent).
//!
//! Nothing is lost or duplicated silently.
//!
//! * [`proto`]: the sans-IO protocol core ([`Node`]): no sockets, no clock reads. Every
//!   datagram is sealed (AES-128-GCM under keys from static X25519 between the two node
//!   ids, see `docs/security.md`) unless plaintext is chosen explicitly.
//! * [`keyfile`]: generating secret keys, and reading key and keyring files.
//! * [`endpoint`] (feature `tokio`, default): an [`Endpoint`] that runs a node on a UDP
//!   socket in a tokio task. Peers are addressed by [`NodeId`]; a peer's address is learned
//!   again when it changes.
//! * [`rpc`] (feature `tokio`): request/reply over the endpoint: `Handle::call` and
//!   `Handle::serve`, errors that say whether a request was executed, crash-safe replies in
//!   durable mode, `tower::Service` on both sides. [`envelope`] and [`call`] are its sans-IO
//!   parts (the message envelope, and how a call's end follows from what its caller learns).
//! * [`durable`]: durable mode's storage (the journal under `Builder::durable`).
//!
//! Features: `tokio` (default) the driver; `serde` typed payloads (`Handle::send_typed`,
//! `Message::decode`) and a deserializable [`EndpointConfig`]; `turmoil` a
//! [`DatagramSocket`] for turmoil's simulated UDP; `metrics` the `metrics` module, which
//! records an endpoint's counters and gauges through the `metrics` facade
//! (`docs/metrics.md`).
//!
//! [`DatagramSocket`]: endpoint::DatagramSocket
//!
//! # Example
//! ```
//! # #[cfg(feature = "tokio")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use exon::{Endpoint, EndpointConfig, NodeId};
//!
//! use exon::keyfile::generate_secret;
//! use exon::proto::{Identity, Keyring, Security};
//!
//! // Each node holds a secret key; each knows the other's public key (a keyring, which
//! // would normally be read from a file with `keyfile::read_keyring`).
//! let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
//! let (a_key, b_key) = (generate_secret(), generate_secret());
//! let mut ring = Keyring::new();
//! ring.insert(a_id, a_key.public_key());
//! ring.insert(b_id, b_key.public_key());
//! let sealed = |key| Security::Sealed(Identity::new(key).with_keyring(ring.clone()));
//!
//! let a = Endpoint::bind("127.0.0.1:0", a_id, sealed(a_key), EndpointConfig::default()).await?;
//! let mut b = Endpoint::bind("127.0.0.1:0", b_id, sealed(b_key), EndpointConfig::default()).await?;
//! a.add_peer(b_id, b.local_addr());
//!
//! // `send` waits while the peer's queue is full, then returns a receipt.
//! let receipt = a.send(b_id, &b"hello"[..]).await?;
//!
//! // The receiver gets the message once, with the sender's authenticated id. (It learns
//! // the sender's address from the datagrams, so it can reply without `add_peer`.)
//! let msg = tokio::time::timeout(Duration::from_secs(5), b.recv()).await?.expect("open");
//! assert_eq!((msg.from, &msg.payload[..]), (a_id, &b"hello"[..]));
//!
//! // The receipt resolves once the receiving application took the message (above).
//! tokio::time::timeout(Duration::from_secs(5), receipt).await??;
//!
//! // Close: wait (bounded) for outstanding messages, and see what was left.
//! let report = a.close(Duration::from_secs(1)).await;
//! assert!(report.is_clean());
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```
#![warn(missing_docs)]

pub mod call;
mod counters;
pub mod durable;
pub mod envelope;
pub mod keyfile;
pub mod ordered;
pub mod proto;

#[cfg(feature = "tokio")]
pub mod endpoint;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "tokio")]
pub mod rpc;

pub use proto::{Config, Event, MsgId, Node, NodeId, SendError};

#[cfg(feature = "tokio")]
pub use endpoint::{Endpoint, EndpointConfig, Handle, Message};

/// The code blocks of the repository's README, compiled as doc tests so that they stay true.
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// Helpers for unit tests of the sans-IO core, which itself never reads the clock.
#[cfg(test)]
pub(crate) mod test_time {
    /// An arbitrary origin for virtual time in tests.
    pub fn origin() -> std::time::Instant {
        std::time::Instant::now()
    }
}
