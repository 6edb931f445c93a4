//! How an endpoint starts ([`Builder`]): its configuration, clock store, security and
//! durable mode, then its sockets, one driver shard each.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tokio::net::ToSocketAddrs;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::durable::JournalConfig;
use crate::endpoint::api::config::EndpointConfig;
use crate::endpoint::api::endpoint::{Deliveries, Endpoint};
use crate::endpoint::api::error::BindError;
use crate::endpoint::api::handle::{Handle, ShardLink};
use crate::endpoint::api::shared::Shared;
use crate::endpoint::driver::delivery_queue::delivery_queue;
use crate::endpoint::driver::outgoing::Submit;
use crate::endpoint::driver::{Channels, Driver};
use crate::endpoint::flows::at_driver::OrderedShared;
use crate::endpoint::io::batch::BatchSocket;
use crate::endpoint::io::family::canonical;
use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::shards::route::Route;
use crate::endpoint::storage::clock_store::{ClockStore, MemoryStore, SharedStore};
use crate::endpoint::storage::durable::{DriverJournal, DurableDir, Recovery};
use crate::proto::{Identity, Node, NodeId, Security};

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
        Builder::new(id)
    }
}

/// Builds an [`Endpoint`]: configuration, clock store, then a socket.
pub struct Builder {
    id: NodeId,
    config: EndpointConfig,
    store: Option<Box<dyn ClockStore>>,
    security: Option<Security>,
    /// Durable mode: the directory and the journal's limits.
    durable: Option<DurableDir>,
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
    /// A builder for node id `id`, with the default configuration and no security chosen.
    pub(crate) fn new(id: NodeId) -> Builder {
        Builder {
            id,
            config: EndpointConfig::default(),
            store: None,
            security: None,
            durable: None,
        }
    }

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

    /// Sets the clock store (default a fresh [`MemoryStore`], or the clock file of the
    /// directory given to [`durable`](Self::durable)). A durable endpoint asks it whether
    /// it ran before ([`ClockStore::stored_before`]), to tell a lost journal from a first
    /// start.
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
    /// blocking read for a [`FileStore`](crate::endpoint::FileStore)) and spawns the driver task on the current tokio
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
    /// Durable mode: each shard has its own journal in the directory, which must be bound
    /// with the number of shards it was used with ([`BindError::DurableShardsChanged`]).
    pub fn with_sockets<S: DatagramSocket>(self, sockets: Vec<S>) -> Result<Endpoint, BindError> {
        let security = self.security.ok_or(BindError::NoSecurity)?;
        if sockets.is_empty() || sockets.len() > MAX_SHARDS {
            return Err(BindError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an endpoint needs between 1 and 256 sockets",
            )));
        }
        enlarge_buffers(&self.config, &sockets);
        let n = sockets.len();
        let mut store = clock_store(self.store, self.durable.as_ref())?;
        let clock = store.load().map_err(BindError::Store)?;
        let ran_before = ran_before(&mut *store, self.durable.as_ref())?;
        let local_addr = canonical(sockets[0].local_addr()?);
        // Read before anything starts: a socket that cannot say what it reaches starts nothing.
        let reaches = sockets
            .iter()
            .map(DatagramSocket::reach)
            .collect::<std::io::Result<Vec<_>>>()?;
        let sealed = matches!(security, Security::Sealed(_));
        // Built first, so that a bad configuration starts nothing.
        let mut nodes = new_nodes(self.id, &security, &self.config, clock, n)?;
        let calls = crate::rpc::calls::Calls::sharded(self.config.call_deadline, n);
        let reopen = (&calls, self.config.rules.recover_calls);
        let mut durable = open_journals(self.durable.as_ref(), &mut nodes, reopen, ran_before)?;
        let public_key = nodes[0].public_key();
        self.config.protocol.validate()?;
        let max_payload = self.config.protocol.limits.max_message_size;
        if !sealed {
            tracing::warn!(id = %self.id, "endpoint runs in INSECURE plaintext mode");
        }
        let mut stores = shard_stores(store, clock, n);
        let mut routes = shard_routes(n);
        let unreachable = Arc::new(tokio::sync::watch::Sender::new(Default::default()));
        let (accept_tx, accept_rx) = mpsc::channel(self.config.flows.max_streams.max(1));
        let ordered = ordered_shared(&self.config, accept_tx, &mut durable);
        let mut links = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        let mut recovered = Recovery::default();
        let mut streams_made = Vec::new();
        let mut journal_damaged = false;
        let sockets = sockets.into_iter().zip(reaches.iter().copied());
        let shards = nodes.into_iter().zip(sockets).zip(durable);
        for (i, ((node, socket), durable)) in shards.enumerate() {
            let shared = Arc::new(Shared::new(
                max_payload,
                self.config.send_buffer,
                self.config.default_deadline,
                unreachable.clone(),
            ));
            let (cmd_tx, cmd_rx) = crate::endpoint::driver::mailbox::mailbox();
            let (tx, rx) = delivery_queue(self.config.delivery_buffer);
            let span = shard_span(self.id, local_addr, n, i);
            span.in_scope(|| tracing::info!(clock, "endpoint bound"));
            let channels = Channels::new(
                cmd_rx,
                cmd_tx.downgrade(),
                tx,
                shared.clone(),
                (calls.clone(), ordered.clone()),
                routes[i].take(),
            );
            let store = stores.remove(0);
            let (journal, mut recovery) = match durable {
                Some((journal, recovery)) => {
                    shared.set_durable();
                    journal_damaged |= journal.damaged;
                    (Some(journal), recovery)
                }
                None => (None, Recovery::default()),
            };
            let cfg = self.config.clone();
            let mut driver = Driver::new(node, socket, cfg, channels, store, journal);
            if self.config.rules.durable_flows {
                // Durable streams go on: made again here, before the driver runs.
                let made = resume_streams(&mut driver, &mut recovery, &ordered, &cmd_tx);
                streams_made.extend(made);
            }
            recovered.sends.append(&mut recovery.sends);
            recovered.calls.append(&mut recovery.calls);
            tokio::spawn(driver.run().instrument(span));
            receivers.push(Deliveries::new(rx, shared.clone()));
            links.push(ShardLink::new(cmd_tx, shared));
        }
        let handle = Handle::new(
            self.id,
            (local_addr, reaches[0]),
            public_key,
            links,
            (calls, ordered),
        );
        handle.resume_channels();
        recovered.streams = handle.streams_of(streams_made);
        Ok(Endpoint::started(
            handle,
            receivers,
            (recovered, journal_damaged),
            accept_rx,
        ))
    }
}

impl Builder {
    /// Makes the endpoint **durable**, keeping its state in directory `dir` (created if
    /// missing): the clock (`dir/clock`, unless a [`clock_store`](Self::clock_store) is
    /// given) and a journal of what it sends and receives (`dir/journal/`; with several
    /// driver shards, one journal per shard: `dir/journal-1/`, ... for the others, and the
    /// number of shards in `dir/shards`). Exactly-once
    /// then survives crashes of this process:
    ///
    /// - a delivery is on disk before it is handed to the application, and a take before it
    ///   is acknowledged; after a restart, messages handed out and not taken come back
    ///   flagged ([`Message::is_redelivery`](crate::endpoint::Message::is_redelivery)), with the same
    ///   [`Message::stable_id`](crate::endpoint::Message::stable_id);
    /// - a sent message is on disk before it leaves ([`Receipt::stored`](crate::endpoint::Receipt::stored) says when); after a
    ///   restart every message not acknowledged is sent again, in the slot it had, and its
    ///   verdict comes through [`Endpoint::take_recovered`](crate::endpoint::Endpoint::take_recovered)
    ///   (a request's call, with its reply to come, through
    ///   [`Endpoint::take_recovered_calls`](crate::endpoint::Endpoint::take_recovered_calls));
    /// - a durable receiver with its journal intact never makes a sender report in doubt
    ///   (evictions under record pressure included); one whose journal is new (deleted,
    ///   replaced, durable mode just switched on) or was found damaged answers DOUBT for
    ///   what it cannot vouch for, never a second delivery
    ///   ([`Endpoint::journal_damaged`](crate::endpoint::Endpoint::journal_damaged)).
    ///
    /// Writes are synced in groups (everything written while one sync runs goes in the
    /// next), and the journal is compacted to what is live, so a quiet endpoint's directory
    /// shrinks back to about its clock. One process at a time per directory; a directory
    /// is bound with the number of shards it was used with (each journal holds the peers
    /// its shard owns: [`BindError::DurableShardsChanged`] otherwise). See
    /// `docs/durability.md`.
    pub fn durable(self, dir: impl AsRef<Path>) -> Self {
        self.durable_with(dir, JournalConfig::default())
    }

    /// As [`durable`](Self::durable), with the journal's limits (disk budget, segment
    /// size, compaction threshold).
    pub fn durable_with(mut self, dir: impl AsRef<Path>, config: JournalConfig) -> Self {
        self.durable = Some(DurableDir {
            dir: dir.as_ref().to_path_buf(),
            config,
        });
        self
    }
}

/// Durable mode: each shard's node recovered from its journal (`durable`: the directory),
/// with what the driver and the application get of it, shard by shard; `None` for each
/// shard of an endpoint that is not durable. The directory must have been used with as
/// many shards ([`DurableDir::check_shards`]).
fn open_journals(
    durable: Option<&DurableDir>,
    nodes: &mut [Node],
    reopen: (&Arc<crate::rpc::calls::Calls>, bool),
    ran_before: bool,
) -> Result<Vec<Option<(DriverJournal, Recovery)>>, BindError> {
    let Some(d) = durable else {
        return Ok(nodes.iter().map(|_| None).collect());
    };
    d.check_shards(nodes.len())?;
    let mut out = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter_mut().enumerate() {
        out.push(Some(d.open(i, node, reopen, ran_before)?));
    }
    Ok(out)
}

/// What every shard shares about ordered flows; durable mode: with the channels
/// recovered from every shard's journal (`durable`; each holds the channels to the peers
/// its shard owns).
fn ordered_shared(
    config: &EndpointConfig,
    accept: mpsc::Sender<crate::endpoint::flows::at_driver::Accepted>,
    durable: &mut [Option<(DriverJournal, Recovery)>],
) -> Arc<OrderedShared> {
    let mut resumed = None;
    for (_, r) in durable.iter_mut().flatten() {
        if config.rules.durable_flows {
            let all: &mut HashMap<_, _> = resumed.get_or_insert_with(HashMap::new);
            all.extend(std::mem::take(&mut r.flows.out));
        }
    }
    let max_marks = config.protocol.limits.max_marks;
    OrderedShared::new_durable(
        accept,
        config.flows.clone(),
        config.rules,
        resumed,
        max_marks,
    )
}

/// Durable mode: the streams `recovered` from the journal, made again and handed to
/// `driver` (whose commands go to `cmds`) before it runs.
fn resume_streams<S: DatagramSocket>(
    driver: &mut Driver<S>,
    recovered: &mut Recovery,
    ordered: &OrderedShared,
    cmds: &crate::endpoint::driver::mailbox::MailboxTx<crate::endpoint::driver::command::Command>,
) -> Vec<crate::endpoint::flows::resume::StreamParts> {
    let streams = std::mem::take(&mut recovered.flows.streams);
    let submit = || -> Box<dyn Submit> { Box::new(cmds.downgrade()) };
    let made = ordered.make_streams(streams, submit, driver.shared());
    driver.resume_streams(&made);
    made
}

/// Whether a durable endpoint's clock store holds a mark stored by a run before this one
/// (its directory's clock file, or the store given to `Builder::clock_store`): a journal
/// found new then was lost or replaced (its keys forgotten). A store that cannot tell
/// ([`ClockStore::stored_before`] `None`) is taken for a first start, with a warning.
fn ran_before(store: &mut dyn ClockStore, durable: Option<&DurableDir>) -> Result<bool, BindError> {
    let Some(dir) = durable else {
        return Ok(false);
    };
    match store.stored_before().map_err(BindError::Store)? {
        Some(ran) => Ok(ran),
        None => {
            tracing::warn!(
                dir = %dir.dir.display(),
                "the clock store cannot say whether it ran before: a lost journal will \
                 look like a first start, and keys it had accepted will not be refused"
            );
            Ok(false)
        }
    }
}

/// The clock store an endpoint starts with: the one given, else a durable endpoint's clock
/// file (its directory created), else a fresh [`MemoryStore`].
fn clock_store(
    store: Option<Box<dyn ClockStore>>,
    durable: Option<&DurableDir>,
) -> Result<Box<dyn ClockStore>, BindError> {
    Ok(match (store, durable) {
        (Some(s), _) => s,
        (None, Some(d)) => {
            std::fs::create_dir_all(&d.dir)?;
            Box::new(d.clock_file())
        }
        (None, None) => Box::new(MemoryStore::new()),
    })
}

/// One protocol node per shard, each with node id `id`, `security` and the clock value
/// `clock` read from the store.
fn new_nodes(
    id: NodeId,
    security: &Security,
    config: &EndpointConfig,
    clock: u64,
    n: usize,
) -> Result<Vec<Node>, BindError> {
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        #[allow(unused_mut)]
        let mut node = Node::new(
            id,
            security.clone(),
            with_envelope_room(&config.protocol),
            clock,
        )?;
        #[cfg(feature = "rule-switches")]
        node.set_rules(config.rules);
        nodes.push(node);
    }
    Ok(nodes)
}

/// Each shard's clock store: `store` itself for one shard, else a share of one
/// [`SharedStore`] over it (the highest mark any shard asked for is what is stored).
fn shard_stores(store: Box<dyn ClockStore>, clock: u64, n: usize) -> Vec<Box<dyn ClockStore>> {
    if n == 1 {
        vec![store]
    } else {
        let shared = SharedStore::new(store, clock);
        (0..n).map(|_| Box::new(shared.clone()) as _).collect()
    }
}

/// Each shard's links to the other shards: none for one shard, else a full mesh.
fn shard_routes(n: usize) -> Vec<Option<Route>> {
    if n == 1 {
        vec![None]
    } else {
        Route::mesh(n).into_iter().map(Some).collect()
    }
}

/// The span of shard `i` of `n`: every event of its driver carries the endpoint's node id
/// and address (and the shard, when there are several).
fn shard_span(id: NodeId, local_addr: std::net::SocketAddr, n: usize, i: usize) -> tracing::Span {
    if n == 1 {
        tracing::info_span!("endpoint", id = %id, addr = %local_addr)
    } else {
        tracing::info_span!("endpoint", id = %id, addr = %local_addr, shard = i)
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
    Ok(sockets)
}

/// Asks for the buffers [`EndpointConfig::socket_buffer`] names on every socket an
/// endpoint starts on (bound here or given).
fn enlarge_buffers<S: DatagramSocket>(config: &EndpointConfig, sockets: &[S]) {
    let Some(bytes) = config.socket_buffer else {
        return;
    };
    for s in sockets {
        // Linux grants what it allows; other systems may refuse a size above their limit
        // (macOS: ENOBUFS): the kernel's default then stays, and binding goes on.
        if let Err(e) = s.set_buffer_sizes(bytes) {
            tracing::warn!(bytes, error = %e, "socket buffers not enlarged");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod socket_buffer_tests {
    use super::*;
    use crate::endpoint::api::config::DEFAULT_SOCKET_BUFFER;

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
            enlarge_buffers(&cfg, &socks);
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

    /// A socket given to `with_socket` gets them too (it used to keep the kernel's
    /// default, and a stream over it crawled once path MTU discovery reached 64 KiB
    /// datagrams: three of them filled its receive buffer).
    #[tokio::test]
    async fn a_given_socket_gets_the_configured_buffers() {
        let asked = 1 << 20;
        let granted = 2 * asked.min(rmem_max());
        let sock = std::sync::Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let before = socket2::SockRef::from(&*sock).recv_buffer_size().unwrap();
        let id = crate::NodeId::from_const(1);
        let ep = crate::endpoint::Endpoint::builder(id)
            .security(crate::proto::crypto::insecure_test_security(id, []))
            .config(EndpointConfig {
                socket_buffer: Some(asked),
                ..EndpointConfig::default()
            })
            .with_socket(sock.clone())
            .unwrap();
        let after = socket2::SockRef::from(&*sock).recv_buffer_size().unwrap();
        if rmem_max() > asked {
            assert!(before < granted, "kernel default {before}");
        }
        assert_eq!(after, granted);
        ep.close(std::time::Duration::ZERO).await;
    }
}
