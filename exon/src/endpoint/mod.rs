//! The tokio driver: an [`Endpoint`] bound to a UDP socket that sends and receives messages
//! exactly once, addressed by node id.
//!
//! One task owns the protocol [`Node`] and the socket; handles talk to it
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
//! tasks, each with its own protocol [`Node`] (same node id and identity), its own socket (an
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

pub(crate) mod flows;
pub(crate) mod storage;
pub(crate) mod shards;
pub(crate) mod io;
pub(crate) mod api;
pub(crate) mod driver;
pub(crate) mod paths;

use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::net::ToSocketAddrs;
use tokio::sync::mpsc;
use tracing::Instrument;

pub use io::batch::BatchSocket;
pub use flows::channel::Channel;
pub use api::config::{EndpointConfig, DEFAULT_SOCKET_BUFFER};
pub use paths::cookies::CookieStats;
pub(crate) use driver::outgoing::Outgoing;
pub use storage::durable::RecoveredSend;
pub use api::error::{BindError, Error, ReceiptError};
pub use io::family::{canonical, IpFamily, Reach, IPV6_MIN_MTU, UDP_HEADER_LEN};
pub use flows::config::FlowConfig;
pub use api::handle::Handle;
pub use io::lossy::{Faults, LossySocket};
pub use api::message::{Kind, Message};
pub use api::receipts::{BatchReceipt, BatchVerdicts, Receipt};
pub use crate::rpc::request::Request;
pub use io::socket::{DatagramSocket, RecvMeta};
pub use api::stats::{CloseReport, EndpointStats};
pub use shards::steering::shard_of;
use storage::clock_store::SharedStore;
pub use storage::clock_store::{wall_clock_start, ClockStore, FileStore, MemoryStore};
pub use flows::stream::Stream;
#[cfg(feature = "serde")]
pub(crate) use api::payload::encode_after;
#[cfg(feature = "serde")]
pub use api::payload::{decode, encode, PayloadError};

use crate::proto::{Identity, Node, NodeId, Security};
use api::shared::Shared;

/// An exactly-once messaging endpoint: a node id bound to a datagram socket.
///
/// Build one with [`Endpoint::bind`] or [`Endpoint::builder`]. It dereferences to its
/// [`Handle`] (send, add peers, close); [`recv`](Self::recv) and the
/// [`Stream`](futures_core::Stream) implementation yield delivered messages. Must be created
/// inside a tokio runtime (current-thread or multi-thread), which runs its driver task.
///
/// Dropping every handle and the endpoint lets the driver linger
/// ([`EndpointConfig::linger`]) to get outstanding messages acknowledged, then stop.
#[derive(Debug)]
pub struct Endpoint {
    handle: Handle,
    /// One delivery stream per shard.
    rx: Vec<Deliveries>,
    /// The stream polled first next time (shards take turns).
    next: usize,
    /// Durable mode: the messages recovered from the journal at bind.
    recovered: Vec<RecoveredSend>,
    /// Durable mode: the journal was found damaged at bind.
    journal_damaged: bool,
    /// Streams opened by peers.
    accept: mpsc::Receiver<flows::at_driver::Accepted>,
}

/// The delivered messages of one driver shard: what [`Endpoint::into_deliveries`] splits an
/// endpoint into, so that each shard's messages can be taken by a task of its own (on a
/// multi-thread runtime, one per core). Taking a message acknowledges it as
/// [`Endpoint::recv`] does.
#[derive(Debug)]
pub struct Deliveries {
    rx: mpsc::Receiver<Message>,
    shared: Arc<Shared>,
    done: bool,
}

impl Deliveries {
    /// The next message of this shard, or `None` once it has stopped.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Endpoint::recv`].
    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next message of this shard (taken, as with [`recv`](Self::recv)).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => Poll::Ready(self.take(1).then_some(m)),
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Deliveries {
    /// Takes up to `limit` messages of this shard at once, appending them to `buf`: waits
    /// for the first, then takes what is already there. Returns how many it took; 0 only
    /// once the shard has stopped (or with `limit` 0). Cheaper per message than
    /// [`recv`](Self::recv) (one count of takes and one wake-up of the driver per call),
    /// with the same meaning: each message taken is acknowledged as taken.
    ///
    /// # Cancel safety
    /// Cancel safe: a call dropped before it returns takes nothing.
    pub async fn recv_many(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        std::future::poll_fn(|cx| self.poll_recv_many(cx, buf, limit)).await
    }

    /// Polls for up to `limit` messages (see [`recv_many`](Self::recv_many)).
    pub fn poll_recv_many(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<Message>,
        limit: usize,
    ) -> Poll<usize> {
        if self.done || limit == 0 {
            return Poll::Ready(0);
        }
        let before = buf.len();
        match self.rx.poll_recv_many(cx, buf, limit) {
            Poll::Ready(0) => {
                self.done = true;
                Poll::Ready(0)
            }
            Poll::Ready(n) => {
                if self.take(n as u64) {
                    Poll::Ready(n)
                } else {
                    buf.truncate(before);
                    Poll::Ready(0)
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Counts `n` messages just received from the channel as taken; false if the driver
    /// has stopped (they were reported undelivered: they are not handed out, and nothing
    /// more will be).
    fn take(&mut self, n: u64) -> bool {
        if self.shared.take_many(n) {
            return true;
        }
        self.rx.close();
        self.done = true;
        false
    }
}

impl futures_core::Stream for Deliveries {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Endpoint {
    /// Binds a UDP socket to `addr` with node id `id`, protected as `security` says
    /// (normally [`Security::Sealed`] with the node's [`Identity`]), the given configuration
    /// and an in-memory clock store ([`MemoryStore`]).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: the driver is started only in the step that returns the
    /// endpoint, so a cancelled call leaves nothing running (the socket, if bound, is closed).
    pub async fn bind(
        addr: impl ToSocketAddrs,
        id: NodeId,
        security: Security,
        config: EndpointConfig,
    ) -> Result<Endpoint, BindError> {
        Endpoint::builder(id)
            .security(security)
            .config(config)
            .bind(addr)
            .await
    }

    /// A builder, to choose the identity, the clock store or the socket.
    pub fn builder(id: NodeId) -> Builder {
        Builder {
            id,
            config: EndpointConfig::default(),
            store: None,
            security: None,
            durable: None,
        }
    }

    /// A cloneable handle for sending from other tasks.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// The next delivered message, or `None` once the endpoint has stopped.
    ///
    /// Taking a message is what acknowledges it: its sender's [`Receipt`] resolves only
    /// after the message left `recv` (or the stream). Messages still in the endpoint's
    /// buffer when it stops are never handed out nor acknowledged: the
    /// [`CloseReport::undelivered`] count says how many, and their senders see them as
    /// unacknowledged or in doubt, never as acknowledged.
    ///
    /// # Cancel safety
    /// Cancel safe: a `recv` dropped before it returns takes nothing (the message stays
    /// first in the buffer and is not acknowledged).
    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next delivered message (what the `Stream` implementation does). A
    /// message returned here counts as taken, as with [`recv`](Self::recv).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let n = self.rx.len();
        let mut open = false;
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.rx[i].poll_recv(cx) {
                Poll::Ready(Some(m)) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Some(m));
                }
                Poll::Ready(None) => {}
                Poll::Pending => open = true,
            }
        }
        if open {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    }

    /// Takes up to `limit` delivered messages at once, appending them to `buf` (see
    /// [`Deliveries::recv_many`]): waits for the first, then takes what is already there,
    /// from the shards in turn. Returns how many it took; 0 only once the endpoint has
    /// stopped (or with `limit` 0).
    ///
    /// # Cancel safety
    /// Cancel safe: a call dropped before it returns takes nothing.
    pub async fn recv_many(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        std::future::poll_fn(|cx| {
            let n = self.rx.len();
            let (mut open, mut took) = (false, 0);
            for k in 0..n {
                if took == limit {
                    break;
                }
                let i = (self.next + k) % n;
                match self.rx[i].poll_recv_many(cx, buf, limit - took) {
                    Poll::Ready(0) => {}
                    Poll::Ready(m) => {
                        took += m;
                        self.next = (i + 1) % n;
                        open = true;
                    }
                    Poll::Pending => open = true,
                }
            }
            if took > 0 || !open || limit == 0 {
                Poll::Ready(took)
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Durable mode: the messages recovered from the journal when the endpoint was bound
    /// (accepted before a restart and not acknowledged), each with its payload and a
    /// receipt carrying the stable id ([`Receipt::id`], [`Receipt::stored`]) it had before
    /// the restart: they are being sent again, and each receipt resolves with the message's
    /// verdict. Empty after the first call, and on an endpoint that is not durable.
    pub fn take_recovered(&mut self) -> Vec<RecoveredSend> {
        std::mem::take(&mut self.recovered)
    }

    /// Durable mode: whether the journal was found damaged when the endpoint was bound
    /// (records it had made durable were lost: a bad sector, bit rot). Then every message
    /// recovered from it resolves in doubt ([`ReceiptError::InDoubt`]), tokens of earlier
    /// incarnations are answered DOUBT, and a message the application was told was stored
    /// before the restart that is neither recovered nor resolved is **in doubt**, not
    /// settled: its records may be among those lost. False on an endpoint that is not
    /// durable.
    pub fn journal_damaged(&self) -> bool {
        self.journal_damaged
    }

    /// The next byte stream a peer opened ([`Handle::open_stream`]), or `None` once the
    /// endpoint stopped. Streams opened while nobody accepts wait here (up to
    /// [`FlowConfig::max_streams`]; more are reset).
    ///
    /// # Cancel safety
    /// Cancel safe: a stream is taken only when this returns it.
    pub async fn accept_stream(&mut self) -> Option<Stream> {
        let a = self.accept.recv().await?;
        Some(Stream::new(
            self.handle.clone(),
            a.peer,
            a.id,
            false,
            a.out,
            a.inbox,
        ))
    }

    /// Splits the endpoint into its handle and one stream of deliveries per driver shard
    /// (one stream unless [`EndpointConfig::shards`] is above 1), so that each shard's
    /// messages can be taken by its own task.
    pub fn into_deliveries(self) -> (Handle, Vec<Deliveries>) {
        (self.handle, self.rx)
    }
}

impl Deref for Endpoint {
    type Target = Handle;

    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl futures_core::Stream for Endpoint {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().poll_recv(cx)
    }
}

/// Builds an [`Endpoint`]: configuration, clock store, then a socket.
pub struct Builder {
    id: NodeId,
    config: EndpointConfig,
    store: Option<Box<dyn ClockStore>>,
    security: Option<Security>,
    /// Durable mode: the directory and the journal's limits.
    durable: Option<storage::durable::DurableDir>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("id", &self.id)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// Seals every datagram with `identity`'s secret key; accepts peers from its keyring
    /// (and self-certifying ones if it allows them).
    pub fn identity(self, identity: Identity) -> Self {
        self.security(Security::Sealed(identity))
    }

    /// Sends and accepts plaintext datagrams: no authentication, anyone who can reach the
    /// socket can forge any peer. Only for loopback tests and benchmarks.
    pub fn insecure_plaintext(self) -> Self {
        self.security(Security::InsecurePlaintext)
    }

    /// Sets the security mode (one of the two calls above is required).
    pub fn security(mut self, security: Security) -> Self {
        self.security = Some(security);
        self
    }

    /// Sets the configuration (default [`EndpointConfig::default()`]).
    pub fn config(mut self, config: EndpointConfig) -> Self {
        self.config = config;
        self
    }

    /// Turns corrections of the protocol off in every shard's node, to show a test catching
    /// the defect (see [`Node::set_rules`]). Test builds only.
    #[cfg(feature = "rule-switches")]
    pub fn rules(mut self, rules: crate::proto::Rules) -> Self {
        self.config.rules = rules;
        self
    }

    /// Sets the clock store (default a fresh [`MemoryStore`]).
    pub fn clock_store(mut self, store: impl ClockStore) -> Self {
        self.store = Some(Box::new(store));
        self
    }

    /// Binds a UDP socket with batched I/O ([`BatchSocket`]) to `addr` and starts the
    /// endpoint.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`Endpoint::bind`] is.
    pub async fn bind(self, addr: impl ToSocketAddrs) -> Result<Endpoint, BindError> {
        let sockets = bind_sockets(&self.config, addr).await?;
        self.with_sockets(sockets)
    }

    /// Starts the endpoint on `socket`, with one driver shard. Reads the clock store (a short
    /// blocking read for a [`FileStore`]) and spawns the driver task on the current tokio
    /// runtime.
    pub fn with_socket<S: DatagramSocket>(self, socket: S) -> Result<Endpoint, BindError> {
        self.with_sockets(vec![socket])
    }

    /// Starts the endpoint with one driver shard per socket (at most 256): the sockets must
    /// all receive at the same address (an `SO_REUSEPORT` group, as
    /// [`BatchSocket::bind_reuseport`] makes), the first one's local address is the
    /// endpoint's. Each shard owns the peers whose node id hashes to it, with its own
    /// protocol node; they share the node id, the identity, the clock store (which keeps
    /// the highest mark any shard stored, so a restart starts above every clock value any
    /// shard used) and the delivery order within each shard. An empty list is refused.
    pub fn with_sockets<S: DatagramSocket>(self, sockets: Vec<S>) -> Result<Endpoint, BindError> {
        let security = self.security.ok_or(BindError::NoSecurity)?;
        if sockets.is_empty() || sockets.len() > MAX_SHARDS {
            return Err(BindError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an endpoint needs between 1 and 256 sockets",
            )));
        }
        let n = sockets.len();
        if self.durable.is_some() && n > 1 {
            return Err(BindError::DurableShards);
        }
        let mut store = match (self.store, &self.durable) {
            (Some(s), _) => s,
            (None, Some(d)) => {
                std::fs::create_dir_all(&d.dir)?;
                Box::new(d.clock_file())
            }
            (None, None) => Box::new(MemoryStore::new()),
        };
        let clock = store.load().map_err(BindError::Store)?;
        let local_addr = io::family::canonical(sockets[0].local_addr()?);
        // Read before anything starts: a socket that cannot say what it reaches starts nothing.
        let reaches = sockets
            .iter()
            .map(DatagramSocket::reach)
            .collect::<std::io::Result<Vec<_>>>()?;
        let sealed = matches!(security, Security::Sealed(_));
        // Built first, so that a bad configuration starts nothing.
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            #[allow(unused_mut)]
            let mut node = Node::new(
                self.id,
                security.clone(),
                with_envelope_room(&self.config.protocol),
                clock,
            )?;
            #[cfg(feature = "rule-switches")]
            node.set_rules(self.config.rules);
            nodes.push(node);
        }
        let mut durable = match &self.durable {
            Some(d) => Some(d.open(&mut nodes[0])?),
            None => None,
        };
        let public_key = nodes[0].public_key();
        self.config.protocol.validate()?;
        let max_payload = self.config.protocol.limits.max_message_size;
        if !sealed {
            tracing::warn!(id = %self.id, "endpoint runs in INSECURE plaintext mode");
        }
        let mut stores: Vec<Box<dyn ClockStore>> = if n == 1 {
            vec![store]
        } else {
            let shared = SharedStore::new(store, clock);
            (0..n).map(|_| Box::new(shared.clone()) as _).collect()
        };
        let mut routes: Vec<Option<shards::route::Route>> = if n == 1 {
            vec![None]
        } else {
            shards::route::Route::mesh(n).into_iter().map(Some).collect()
        };
        let unreachable = Arc::new(tokio::sync::watch::Sender::new(Default::default()));
        let calls = crate::rpc::calls::Calls::new(self.config.call_deadline);
        let (accept_tx, accept_rx) = mpsc::channel(self.config.flows.max_streams.max(1));
        let ordered =
            flows::at_driver::OrderedShared::new(accept_tx, self.config.flows.clone(), self.config.rules);
        let mut links = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        let mut recovered = Vec::new();
        let mut journal_damaged = false;
        let sockets = sockets.into_iter().zip(reaches.iter().copied());
        for (i, (node, socket)) in nodes.into_iter().zip(sockets).enumerate() {
            let shared = Arc::new(Shared::new(
                max_payload,
                self.config.send_buffer,
                self.config.default_deadline,
                unreachable.clone(),
            ));
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
            let (tx, rx) = mpsc::channel(self.config.delivery_buffer.max(1));
            // Every event of the driver carries the endpoint's node id and address.
            let span = if n == 1 {
                tracing::info_span!("endpoint", id = %self.id, addr = %local_addr)
            } else {
                tracing::info_span!("endpoint", id = %self.id, addr = %local_addr, shard = i)
            };
            span.in_scope(|| tracing::info!(clock, "endpoint bound"));
            let channels = driver::Channels::new(
                cmd_rx,
                cmd_tx.downgrade(),
                tx,
                shared.clone(),
                (calls.clone(), ordered.clone()),
                routes[i].take(),
            );
            let store = stores.remove(0);
            let journal = durable.take().map(|(journal, receipts)| {
                shared.set_durable();
                recovered = receipts;
                journal_damaged = journal.damaged;
                journal
            });
            let cfg = self.config.clone();
            let driver = driver::Driver::new(node, socket, cfg, channels, store, journal);
            tokio::spawn(driver.run().instrument(span));
            receivers.push(Deliveries {
                rx,
                shared: shared.clone(),
                done: false,
            });
            links.push(api::handle::ShardLink::new(cmd_tx, shared));
        }
        Ok(Endpoint {
            handle: Handle::new(
                self.id,
                (local_addr, reaches[0]),
                public_key,
                links,
                (calls, ordered),
            ),
            rx: receivers,
            next: 0,
            recovered,
            journal_damaged,
            accept: accept_rx,
        })
    }
}

/// The core's configuration for an endpoint configured with `protocol`: room for the
/// message envelope ([`crate::envelope`]) above the largest message the application may
/// send, so that `limits.max_message_size` is what the application sees.
fn with_envelope_room(protocol: &crate::proto::Config) -> crate::proto::Config {
    let mut c = protocol.clone();
    let l = &mut c.limits;
    l.max_message_size = l
        .max_message_size
        .saturating_add(crate::envelope::MAX_OVERHEAD);
    let max = l.max_message_size as u64;
    l.max_reassembly_per_source = l.max_reassembly_per_source.max(max);
    l.max_reassembly_bytes = l.max_reassembly_bytes.max(l.max_reassembly_per_source);
    l.max_queued_bytes = l.max_queued_bytes.max(l.max_message_size);
    c
}

/// Most driver shards of one endpoint.
const MAX_SHARDS: usize = 256;

/// The sockets [`Builder::bind`] starts an endpoint on: one, or an `SO_REUSEPORT` group of
/// one per shard, with the buffers [`EndpointConfig::socket_buffer`] asks for.
async fn bind_sockets(
    config: &EndpointConfig,
    addr: impl ToSocketAddrs,
) -> std::io::Result<Vec<BatchSocket>> {
    let shards = config.shards.clamp(1, MAX_SHARDS);
    let sockets = if shards == 1 {
        vec![BatchSocket::bind(addr).await?]
    } else {
        BatchSocket::bind_reuseport(addr, shards).await?
    };
    if let Some(bytes) = config.socket_buffer {
        for s in &sockets {
            // Linux grants what it allows; other systems may refuse a size above their
            // limit (macOS: ENOBUFS): the kernel's default then stays, and binding goes on.
            if let Err(e) = s.set_buffer_sizes(bytes) {
                tracing::warn!(bytes, error = %e, "socket buffers not enlarged");
            }
        }
    }
    Ok(sockets)
}

#[cfg(all(test, target_os = "linux"))]
mod socket_buffer_tests {
    use super::*;

    fn rmem_max() -> usize {
        std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The endpoint's sockets get the receive buffer the configuration asks for (as much as
    /// the kernel grants: Linux reports twice what it granted), not the kernel's default.
    #[tokio::test]
    async fn bound_sockets_get_the_configured_buffers() {
        let asked = 1 << 20;
        let granted = 2 * asked.min(rmem_max());
        let mut cfg = EndpointConfig {
            socket_buffer: Some(asked),
            ..EndpointConfig::default()
        };
        for shards in [1, 2] {
            cfg.shards = shards;
            let socks = bind_sockets(&cfg, "127.0.0.1:0").await.unwrap();
            assert_eq!(socks.len(), shards);
            for s in &socks {
                assert_eq!(s.recv_buffer_size().unwrap(), granted);
            }
        }
        cfg.shards = 1;
        cfg.socket_buffer = None;
        let socks = bind_sockets(&cfg, "127.0.0.1:0").await.unwrap();
        let default = socks[0].recv_buffer_size().unwrap();
        if rmem_max() > asked {
            assert!(
                default < granted,
                "kernel default {default}, asked {granted}"
            );
        }
        assert_eq!(
            EndpointConfig::default().socket_buffer,
            Some(DEFAULT_SOCKET_BUFFER)
        );
    }
}
