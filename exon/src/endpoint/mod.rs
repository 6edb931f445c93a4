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
//! becomes a cross-thread wake-up (measured in `BENCHMARKS.md`, "Runtime layout"). The
//! endpoint works on either runtime.
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
//!
//! # Rooms
//! Each folder holds one part of the endpoint; the public paths (`exon::endpoint::X`) are
//! re-exported here.
//!
//! | room | what it holds |
//! |---|---|
//! | `api/` | the public API: [`Endpoint`] and [`Deliveries`] (`endpoint.rs`), [`Builder`] (`builder.rs`), [`Handle`], [`Message`], receipts, errors, [`EndpointConfig`], [`EndpointStats`], typed payloads (`typed.rs` over the codec in `payload.rs`), and the state handles share with the driver (`shared.rs`) |
//! | `driver/` | the driver's turn (`mod.rs`) and what it takes and gives: the handles' commands (`command.rs`), each message handed to the core (`outgoing.rs`), the handles' sends (`sends.rs`), the hand-over of deliveries (`handover.rs`), when a turn yields (`turns.rs`), its share of the node's events (`events.rs`) and of ordered flows (`ordered.rs`), its logging (`trace.rs`), a map keyed by message ids (`seqmap.rs`) |
//! | `io/` | socket I/O: the [`DatagramSocket`] trait (`socket.rs`), [`BatchSocket`] (GSO sends, GRO and `recvmmsg` receives), [`LossySocket`], IP families (`family.rs`), the host's route size to a peer (`route.rs`), the driver's receive side (`inbound.rs`) and transmit side (`outbound.rs`) |
//! | `shards/` | shards and steering: which shard owns a peer and the kernel program that steers datagrams (`steering.rs`), the links between shards (`route.rs`) |
//! | `paths/` | where peers are: the driver's paths (`mod.rs`), the peer book of addresses and their challenges (`book.rs`), cookies against floods (`cookies.rs`) |
//! | `storage/` | storage jobs: the [`ClockStore`]s (`clock_store.rs`) and the driver's jobs storing the clock (`clock_jobs.rs`), the journal's jobs (`journal_jobs.rs`) and the line of their syncs (`sync_line.rs`), durable mode's bind and recovery (`durable.rs`) |
//! | `flows/` | ordered flows: [`Channel`], [`Stream`], a stream's receiving side (`stream_in.rs`), the sending side of one flow (`out.rs`) and a stream's bytes not yet in chunks (`write_buf.rs`), verdicts on their way back (`ack.rs`), why a flow broke (`broken.rs`), [`FlowConfig`], and their share of the driver, the reorder buffers (`at_driver.rs`) |
//!
//! Request/reply's driver side lives in `exon::rpc`: the calls waiting for a reply
//! (`rpc/calls.rs`) and the requests waiting for a server (`rpc/request.rs`).
//!
//! # Words
//! One word per concept, in the code and its documentation:
//! - **Ack**: where the driver sends one message's verdict (a receipt, a batch's slot, a
//!   flow, or nowhere); **Acks**: verdicts of one batch resolved together, one update per
//!   run; **Acker**: the handle an application acknowledges a [`Message`] with in
//!   ack-after-processing mode; **FlowAck**: the verdict of one message of an ordered flow
//!   on its way back to the flow; **AckKind**: what a FlowAck is about (a channel's
//!   message, a gap, a stream's chunk).
//! - **verdict**: how a message ended: acknowledged, or a [`ReceiptError`]
//!   (unacknowledged, in doubt, refused, not delivered); a **receipt** resolves with it.
//! - **send**: a message a handle gives the driver; **Outgoing**: one message handed to the
//!   core; **Sends**: the driver's sends from arrival to verdict.
//! - **delivery**: a message the node delivered; **hand-over** (**Handover**): deliveries on
//!   their way to the application; **take**: the application took a delivery, which is
//!   what acknowledges it.
//! - **store jobs** (**ClockJobs**): the clock's high-water marks, stored by the
//!   [`ClockStore`]; **journal jobs** (**JournalJobs**): durable mode's writes, appended,
//!   written and synced to the journal in groups, a group written while earlier ones sync
//!   (the **sync line**, **SyncLine**, reports them in order). Both run off the driver's
//!   task and report back.
//! - **turn**: one round of the driver (take the ready inputs, drain the node's outputs);
//!   **inbound**/**outbound**: the driver's receive and transmit sides.
//! - **shard**: one driver task with its own node and socket; **steering**: handing each
//!   datagram to the socket of the shard that owns its peer; **route**: a link between shards.
//! - **path**: where a peer is reached; **peer book**: the addresses, validated by
//!   **challenges**; a **candidate** is an address a peer may have moved to; a **cookie**
//!   proves a source address before a key agreement.
//! - **flow**: one ordered channel, or one direction of a stream; **window**: what a
//!   receiver lets a flow send; **run**: one life of a flow's numbering; **gap**: a place a
//!   sender gave up; **reset**: a stream refused or closed.

pub(crate) mod api;
pub(crate) mod deadline;
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
pub use flows::config::{default_stream_chunk, FlowConfig};
pub use flows::stream::Stream;
pub use io::batch::BatchSocket;
pub use io::family::{canonical, IpFamily, Reach, IPV6_MIN_MTU, UDP_HEADER_LEN};
pub use io::lossy::{Faults, LossySocket};
pub use io::socket::{DatagramSocket, RecvMeta};
pub use paths::cookies::CookieStats;
pub use shards::steering::shard_of;
pub use storage::clock_store::{wall_clock_start, ClockStore, FileStore, MemoryStore};
pub use storage::durable::RecoveredSend;
