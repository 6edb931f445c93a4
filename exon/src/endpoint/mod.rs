//! The tokio driver: an [`Endpoint`] bound to a UDP socket that sends and receives messages
//! exactly once, addressed by node id.
//!
//! One task owns the protocol [`Node`](crate::proto::Node) and the socket; handles talk to it
//! over a channel. See the crate documentation for an example.
//!
//! # How the driver spends a turn
//! It waits for any input, then takes every other input that is ready without waiting
//! (queued commands up to a budget, one batch of datagrams, a due timer), then drains the
//! node's outputs: consecutive datagrams to one address leave in one segmented send (UDP
//! GSO, up to [`DatagramSocket::max_send_segments`]), at most
//! [`EndpointConfig::transmit_budget`] datagrams per turn. [`Endpoint::bind`] uses a
//! [`BatchSocket`], which also receives several buffers per system call (`recvmmsg`), each
//! holding up to 64 datagrams coalesced by the kernel (GRO). Other [`DatagramSocket`]s work one datagram
//! per call through the trait's default methods. [`EndpointStats::send_calls`] and
//! [`EndpointStats::recv_calls`] against the core's datagram counters show the batching.
//!
//! A [`Handle::send`] to a destination with room does not wait for the driver: it takes a
//! send credit ([`EndpointConfig::send_buffer`]) and returns its receipt at once, so that
//! one sending task can hand over thousands of messages per driver turn. A send to a
//! destination the driver published as full waits, still without a round trip, until the
//! driver publishes room again; [`Handle::try_send`] waits for the driver's answer.
//!
//! [`Handle::send_batch`] hands many messages to one destination in one command, with one
//! [`BatchReceipt`] for all of them (one allocation, one wake-up); [`Endpoint::recv_many`]
//! (and [`Deliveries::recv_many`]) takes every message already delivered in one call.
//!
//! # Shards
//! With [`EndpointConfig::shards`] above 1, [`Endpoint::bind`] starts that many driver
//! tasks, each with its own protocol [`Node`](crate::proto::Node) (same node id and identity), its own socket (an
//! `SO_REUSEPORT` group on one address) and the peers whose node id hashes to it: on a
//! multi-thread runtime they run on different cores. On Linux a small kernel program on the
//! socket group hands each datagram to the socket of the shard that owns its source
//! ([`BatchSocket::bind_reuseport`]); a datagram that still lands on another shard's socket
//! is passed to the owning shard. Each peer is served by one shard only, so
//! the core stays single-threaded and exactly-once per peer is unchanged; the shards share
//! the clock store (the highest mark any shard asked for is what is stored), the unreachable
//! set, message ids, and close; [`Handle::stats`] sums their counters.
//! [`Endpoint::into_deliveries`] gives one delivery stream per shard.
//!
//! # Runtime layout
//! Prefer a **current-thread** runtime per endpoint (one OS thread per endpoint, or per
//! group of endpoints and the tasks that use them), and scale out with threads or
//! processes. The driver is one task: a multi-thread runtime does not make it faster, and
//! it puts the application's tasks and the driver on different threads, so every hand-over
//! becomes a cross-thread wake-up. Measured on the 2-core development machine (loopback,
//! 1 KB messages, `cargo bench -p exon-benches --bench compare -- --only exon --threads N`): one-way,
//! current-thread 430-580 k msgs/s against 270-290 k with one worker and 240-260 k with
//! two; RPC with 100 callers, 130-180 k requests/s (p50 0.46-0.56 ms) against 40-96 k (p50
//! 0.9-1.7 ms). The endpoint works on either runtime.
//!
//! # Datagram size
//! Path MTU discovery ([`Config::mtu.discovery`](crate::proto::MtuConfig::discovery), on by
//! default) sizes the datagrams to each peer: from 1200 bytes, safe on the internet, up to
//! what the path carries, found with probes, and back to 1200 if the path shrinks
//! (`docs/wire.md`); the core packs as many frames for one peer as fit. On loopback (MTU
//! 65536) it reaches 65507 bytes, about 60 1 KB messages per datagram, with no
//! configuration. [`BatchSocket`] forbids IP fragmentation, so a datagram above the path MTU
//! is dropped or refused (EMSGSIZE, counted in [`EndpointStats::oversize_drops`] as a lost
//! datagram), never fragmented. [`EndpointConfig::with_max_datagram_size`] fixes the size
//! instead (discovery off).

pub(crate) mod api;
pub(crate) mod driver;
pub(crate) mod flows;
pub(crate) mod io;
pub(crate) mod paths;
pub(crate) mod shards;
pub(crate) mod storage;

pub use crate::rpc::request::Request;
pub use api::builder::Builder;
pub use api::config::{EndpointConfig, DEFAULT_SOCKET_BUFFER};
pub use api::endpoint::{Deliveries, Endpoint};
pub use api::error::{BindError, Error, ReceiptError};
pub use api::handle::Handle;
pub use api::message::{Kind, Message};
#[cfg(feature = "serde")]
pub(crate) use api::payload::encode_after;
#[cfg(feature = "serde")]
pub use api::payload::{decode, encode, PayloadError};
pub use api::receipts::{BatchReceipt, BatchVerdicts, Receipt};
pub use api::stats::{CloseReport, EndpointStats};
pub(crate) use driver::outgoing::Outgoing;
pub use flows::channel::Channel;
pub use flows::config::FlowConfig;
pub use flows::stream::Stream;
pub use io::batch::BatchSocket;
pub use io::family::{canonical, IpFamily, Reach, IPV6_MIN_MTU, UDP_HEADER_LEN};
pub use io::lossy::{Faults, LossySocket};
pub use io::socket::{DatagramSocket, RecvMeta};
pub use paths::cookies::CookieStats;
pub use shards::steering::shard_of;
pub use storage::clock_store::{wall_clock_start, ClockStore, FileStore, MemoryStore};
pub use storage::durable::RecoveredSend;
