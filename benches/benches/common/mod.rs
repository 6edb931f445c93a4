//! Shared loopback runners for the benchmarks: exon (in memory and over UDP), TCP and QUIC,
//! one-way and request/reply. Each runner sets its connections up once, on two OS threads
//! with a tokio runtime each (like two processes; current-thread unless
//! [`WORKER_THREADS`] says otherwise), and is then driven in batches from the calling thread.
//!
//! Every message has the size the run asks for (`--size`, [`PAYLOAD`] bytes by default) and
//! carries its sequence number in its first and its last 8 bytes; receivers check its length,
//! that both copies agree and that each arrives exactly once (a duplicate, a truncated or
//! torn message, or a stranger panics), and only verified messages count.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, Event, Node, NodeId, Security, SendError};
use exon::{Endpoint, EndpointConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// Default size of every message and reply (`--size`).
pub const PAYLOAD: usize = 1024;
/// Smallest message size: room for the sequence number at both ends.
pub const MIN_SIZE: usize = 16;
/// Largest message size the runners accept (TCP frames carry a 32-bit length; exon's
/// default `max_message_size` is 16 MiB).
pub const MAX_SIZE: usize = 1 << 30;
/// Payload bytes a round of messages may hold at once by default: batches are sized so that
/// `batch x size` stays about this (at most the 1 KiB defaults), bounding memory and time.
pub const BATCH_BYTES: u64 = 64 << 20;
/// How long a batch may take before the run is declared broken (messages lost).
pub const BATCH_DEADLINE: Duration = Duration::from_secs(30);
/// The exon datagram size used on loopback unless told otherwise (Ethernet MTU less IP and
/// UDP headers: one 1 KB message per datagram).
pub const DEFAULT_EXON_DATAGRAM: usize = 1472;
const LOCALHOST: &str = "127.0.0.1:0";

/// A payload of `size` bytes (at least [`MIN_SIZE`]) starting and ending with `seq`. Every
/// system gets its payloads from here, one allocation and fill each, as a user handing
/// each message over as a fresh buffer would.
/// Message size of the sharded one-way runs (`--pairs`, `--shards`).
pub const SHARDED_SIZE: usize = 1024;

pub fn payload(seq: u64, size: usize) -> Bytes {
    assert!(size >= MIN_SIZE, "payload smaller than {MIN_SIZE} bytes");
    let mut v = vec![0xA5u8; size];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    v[size - 8..].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

/// The sequence number of a payload that should be `size` bytes long (panics on a
/// malformed one: another length, or first and last 8 bytes that disagree).
pub fn seq_of(p: &[u8], size: usize) -> u64 {
    assert_eq!(p.len(), size, "payload of unexpected size");
    let first = u64::from_be_bytes(p[..8].try_into().unwrap());
    let last = u64::from_be_bytes(p[p.len() - 8..].try_into().unwrap());
    assert_eq!(first, last, "payload torn: first and last 8 bytes differ");
    first
}

/// The default messages per batch for `size`-byte messages: `base` (the 1 KiB default) or
/// fewer, so that a batch holds about [`BATCH_BYTES`] of payload at most (at least 1).
pub fn batch_for(size: usize, base: u64) -> u64 {
    (BATCH_BYTES / size.max(1) as u64).clamp(1, base)
}

/// Exactly-once check: a bitmap of the sequence numbers seen.
#[derive(Default)]
pub struct Seen {
    bits: Vec<u64>,
    count: u64,
}

impl Seen {
    /// Records `seq`; panics if it was seen before.
    pub fn record(&mut self, seq: u64) {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if w >= self.bits.len() {
            self.bits.resize((w + 1).next_power_of_two(), 0);
        }
        assert!(
            self.bits[w] & (1 << b) == 0,
            "message {seq} delivered twice"
        );
        self.bits[w] |= 1 << b;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }
}

/// The receiving side's report channel: it counts verified messages and tells the driving
/// thread when the count reaches the target of the batch in progress.
struct Progress {
    target: AtomicU64,
    done: Mutex<std_mpsc::Sender<u64>>,
}

impl Progress {
    fn new() -> (Arc<Progress>, std_mpsc::Receiver<u64>) {
        let (tx, rx) = std_mpsc::channel();
        let p = Progress {
            target: AtomicU64::new(u64::MAX),
            done: Mutex::new(tx),
        };
        (Arc::new(p), rx)
    }

    fn verified(&self, count: u64) {
        if count == self.target.load(Ordering::Acquire) {
            let _ = self.done.lock().unwrap().send(count);
        }
    }
}

/// Exon's flow-control window (`Config::window`) in the loopback benches; 0 (the default)
/// keeps exon's default.
pub static EXON_WINDOW: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Most messages an exon receiver takes per `recv_many` call.
const RECV_MANY: usize = 256;

/// Worker threads of each side's tokio runtime: 0 (the default) for a current-thread
/// runtime, otherwise a multi-thread runtime with that many workers.
pub static WORKER_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Runs `f` on a new OS thread inside a tokio runtime (see [`WORKER_THREADS`]).
fn spawn_rt<F, Fut>(name: &str, f: F) -> JoinHandle<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let workers = WORKER_THREADS.load(Ordering::Relaxed);
            let mut b = if workers == 0 {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(workers);
                b
            };
            b.enable_all().build().expect("runtime").block_on(f())
        })
        .expect("thread")
}

// ------------------------------------------------------------------------------------------
// One-way
// ------------------------------------------------------------------------------------------

/// The systems compared one-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneWayKind {
    /// Exon endpoints over loopback UDP, every datagram sealed (the default).
    Exon,
    /// Exon endpoints in the explicit plaintext mode.
    ExonPlain,
    /// One TCP connection, 4-byte length-prefixed frames.
    Tcp,
    /// One QUIC connection, one long unidirectional stream of length-prefixed frames.
    QuicStream,
    /// One QUIC connection, one unidirectional stream per message.
    QuicUni,
}

impl OneWayKind {
    pub fn name(self) -> &'static str {
        match self {
            OneWayKind::Exon => "exon",
            OneWayKind::ExonPlain => "exon_plain",
            OneWayKind::Tcp => "tcp",
            OneWayKind::QuicStream => "quic",
            OneWayKind::QuicUni => "quic_uni",
        }
    }
}

/// What the sending thread is asked to do.
enum Cmd {
    /// Send messages `start..start + n`.
    Send { start: u64, n: u64 },
    /// Report counters (exon only) and go on.
    Stats(std_mpsc::Sender<String>),
}

/// A one-way flow between two threads, set up once and driven in batches.
pub struct OneWay {
    kind: OneWayKind,
    cmds: Option<mpsc::UnboundedSender<Cmd>>,
    stop_rx: Option<oneshot::Sender<()>>,
    done: std_mpsc::Receiver<u64>,
    progress: Arc<Progress>,
    next: u64,
    threads: Vec<JoinHandle<()>>,
}

impl OneWay {
    /// Sets the flow up (connection established, nothing sent yet) for `size`-byte messages
    /// (at least [`MIN_SIZE`]).
    pub fn new(kind: OneWayKind, exon_datagram: usize, size: usize) -> OneWay {
        let (progress, done) = Progress::new();
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<Cmd>();
        let p = progress.clone();
        let receiver = spawn_rt("recv", move || async move {
            match kind {
                OneWayKind::Exon | OneWayKind::ExonPlain => {
                    let plain = kind == OneWayKind::ExonPlain;
                    exon_receiver(exon_datagram, plain, size, addr_tx, stop_rx, p).await
                }
                OneWayKind::Tcp => {
                    let l = TcpListener::bind(LOCALHOST).await.unwrap();
                    addr_tx.send(l.local_addr().unwrap()).unwrap();
                    let (s, _) = l.accept().await.unwrap();
                    s.set_nodelay(true).unwrap();
                    read_frames(s, size, stop_rx, p).await;
                }
                OneWayKind::QuicStream | OneWayKind::QuicUni => {
                    quic_oneway_receiver(kind, size, addr_tx, stop_rx, p).await
                }
            }
        });
        let addr = addr_rx.recv().expect("receiver address");
        let sender = spawn_rt("send", move || async move {
            match kind {
                OneWayKind::Exon | OneWayKind::ExonPlain => {
                    let plain = kind == OneWayKind::ExonPlain;
                    exon_sender(exon_datagram, plain, size, addr, cmd_rx).await
                }
                OneWayKind::Tcp => {
                    let s = TcpStream::connect(addr).await.unwrap();
                    s.set_nodelay(true).unwrap();
                    write_frames(s, size, cmd_rx).await;
                }
                OneWayKind::QuicStream | OneWayKind::QuicUni => {
                    quic_oneway_sender(kind, size, addr, cmd_rx).await
                }
            }
        });
        OneWay {
            kind,
            cmds: Some(cmd_tx),
            stop_rx: Some(stop_tx),
            done,
            progress,
            next: 0,
            threads: vec![sender, receiver],
        }
    }

    pub fn kind(&self) -> OneWayKind {
        self.kind
    }

    /// Sends `n` messages and returns once the receiver verified all of them.
    pub fn run(&mut self, n: u64) -> Duration {
        let start = self.next;
        self.next += n;
        self.progress.target.store(self.next, Ordering::Release);
        let t = Instant::now();
        self.cmds
            .as_ref()
            .unwrap()
            .send(Cmd::Send { start, n })
            .expect("sender alive");
        match self.done.recv_timeout(BATCH_DEADLINE) {
            Ok(c) => assert_eq!(c, self.next),
            Err(e) => panic!(
                "{}: batch of {n} not verified within {BATCH_DEADLINE:?} ({e})",
                self.kind.name()
            ),
        }
        t.elapsed()
    }

    /// Messages verified so far.
    pub fn verified(&self) -> u64 {
        self.next
    }

    /// A line of the sender's counters (exon: datagrams and frames per message).
    pub fn stats(&self) -> Option<String> {
        let (tx, rx) = std_mpsc::channel();
        self.cmds.as_ref()?.send(Cmd::Stats(tx)).ok()?;
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }
}

impl Drop for OneWay {
    fn drop(&mut self) {
        // The receiver first (the sender is idle between batches), so that it never sees
        // the sender's connection go away as an error.
        if let Some(s) = self.stop_rx.take() {
            let _ = s.send(());
        }
        if let Some(r) = self.threads.pop() {
            let _ = r.join();
        }
        self.cmds.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Socket buffers of the exon endpoints: the default 208 KiB receive buffer holds only ~100
/// datagrams of 1.5 KB (kernel accounting), far less than exon's default window of 1024
/// messages, and overflows into losses and retransmissions. 4 MiB (the machine's
/// `net.core.rmem_max`) holds a window.
pub const UDP_BUFFER: usize = 4 << 20;

/// Binds an exon endpoint on loopback with `UDP_BUFFER`-sized socket buffers and batched
/// I/O (GSO and GRO), as `Endpoint::bind` does.
async fn exon_bind(id: u64, datagram: usize, plain: bool) -> Endpoint {
    let addr: SocketAddr = LOCALHOST.parse().unwrap();
    exon_endpoint_with(addr, id, exon_config(datagram), plain)
}

/// Binds a sealed exon endpoint with node id `id` at `addr`, with `UDP_BUFFER`-sized socket
/// buffers and the given configuration. Must run inside a tokio runtime.
pub fn exon_endpoint(addr: SocketAddr, id: u64, config: EndpointConfig) -> Endpoint {
    exon_endpoint_with(addr, id, config, false)
}

/// [`exon_endpoint`], sealed or (`plain`) in plaintext mode. Nodes 1 and 2 know each
/// other's keys (derived from their ids: the sealing work is the same as with secret keys).
pub fn exon_endpoint_with(
    addr: SocketAddr,
    id: u64,
    config: EndpointConfig,
    plain: bool,
) -> Endpoint {
    let shards = config.shards.max(1);
    exon_endpoint_sharded(addr, id, config, plain, shards)
}

/// Node ids whose keys every bench endpoint knows: 1 and 2, and the senders of the
/// sharded runs (`FIRST_PEER..FIRST_PEER + ID_POOL`).
fn bench_ids() -> impl Iterator<Item = NodeId> {
    (1..=2)
        .chain(FIRST_PEER..FIRST_PEER + ID_POOL)
        .map(NodeId::from_const)
}

/// Node ids the sharded runs' senders are picked from.
const ID_POOL: u64 = 512;

/// The node ids of `pairs` senders to an endpoint of `shards` shards, from
/// `FIRST_PEER..FIRST_PEER + ID_POOL`: as many owned by each shard, give or take one (the
/// owners of the first `pairs` ids would leave some shards idle and others doubled).
pub fn sender_ids(pairs: usize, shards: usize) -> Vec<u64> {
    let mut free: Vec<u64> = (FIRST_PEER..FIRST_PEER + ID_POOL).collect();
    (0..pairs)
        .map(|j| {
            let at = free
                .iter()
                .position(|&id| {
                    exon::endpoint::shard_of(NodeId::from_const(id), shards) == j % shards
                })
                .expect("the id pool has ids for every shard");
            free.remove(at)
        })
        .collect()
}

/// The first node id of the senders of a run with several pairs.
pub const FIRST_PEER: u64 = 10;
/// Most sender/receiver pairs of one run.
pub const MAX_PAIRS: u64 = 64;

/// [`exon_endpoint_with`] with `shards` driver shards: that many sockets in one
/// `SO_REUSEPORT` group, each with `UDP_BUFFER`-sized buffers.
pub fn exon_endpoint_sharded(
    addr: SocketAddr,
    id: u64,
    config: EndpointConfig,
    plain: bool,
    shards: usize,
) -> Endpoint {
    let id = NodeId::new(id).unwrap();
    let security = if plain {
        Security::InsecurePlaintext
    } else {
        exon::proto::crypto::insecure_test_security(id, bench_ids())
    };
    let mut at = addr;
    let mut socks = Vec::new();
    for _ in 0..shards.max(1) {
        let sock = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        sock.set_recv_buffer_size(UDP_BUFFER).unwrap();
        sock.set_send_buffer_size(UDP_BUFFER).unwrap();
        sock.set_nonblocking(true).unwrap();
        if shards > 1 {
            sock.set_reuse_port(true).unwrap();
        }
        sock.bind(&at.into()).unwrap();
        let sock = tokio::net::UdpSocket::from_std(sock.into()).unwrap();
        at = sock.local_addr().unwrap();
        socks.push(exon::endpoint::BatchSocket::new(sock).unwrap());
    }
    if shards > 1 {
        exon::endpoint::BatchSocket::steer_by_node_id(&socks).expect("steering program");
    }
    Endpoint::builder(id)
        .security(security)
        .config(config)
        .with_sockets(socks)
        .unwrap()
}

/// The loopback benches' exon configuration: fixed `datagram`-byte datagrams (0: path MTU
/// discovery, exon's default), a short linger.
pub fn exon_config(datagram: usize) -> EndpointConfig {
    let mut c = EndpointConfig::default().with_linger(Duration::from_millis(200));
    match EXON_WINDOW.load(Ordering::Relaxed) {
        0 => {}
        w => c.protocol.flow.window = w,
    }
    if datagram == 0 {
        c
    } else {
        c.with_max_datagram_size(datagram)
    }
}

/// Whether exon with `config` refuses `size`-byte messages: `Some(why)` (`PayloadTooLarge`,
/// until exon carries messages larger than a datagram) if it does, `None` if it takes them.
/// Binds a throwaway endpoint on loopback (on its own thread and runtime, so it may be
/// called from anywhere), offers it one message for a peer that never answers, and closes
/// it.
pub fn exon_refusal(config: EndpointConfig, plain: bool, size: usize) -> Option<String> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            // A socket that never reads: the probe's datagrams, if any, go nowhere.
            let sink = std::net::UdpSocket::bind(LOCALHOST).expect("bind");
            let ep = exon_endpoint_with(LOCALHOST.parse().unwrap(), 1, config, plain);
            let peer = NodeId::from_const(2);
            ep.add_peer(peer, sink.local_addr().expect("address"));
            let r = ep.try_send(peer, payload(0, size)).await;
            ep.close(Duration::ZERO).await;
            match r {
                Ok(_) => None,
                Err(exon::endpoint::Error::Send(SendError::PayloadTooLarge { .. })) => {
                    Some("PayloadTooLarge".to_string())
                }
                Err(e) => Some(e.to_string()),
            }
        })
    })
    .join()
    .expect("probe thread")
}

async fn exon_receiver(
    datagram: usize,
    plain: bool,
    size: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    mut stop: oneshot::Receiver<()>,
    progress: Arc<Progress>,
) {
    let mut b = exon_bind(2, datagram, plain).await;
    addr_tx.send(b.local_addr()).unwrap();
    let mut seen = Seen::default();
    let mut buf = Vec::with_capacity(RECV_MANY);
    loop {
        buf.clear();
        tokio::select! {
            n = b.recv_many(&mut buf, RECV_MANY) => {
                assert!(n > 0, "endpoint running");
                for m in &buf {
                    seen.record(seq_of(&m.payload, size));
                }
                progress.verified(seen.count());
            }
            _ = &mut stop => break,
        }
    }
    b.close(Duration::from_millis(100)).await;
}

async fn exon_sender(
    datagram: usize,
    plain: bool,
    size: usize,
    to: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let b_id = NodeId::from_const(2);
    let a = exon_bind(1, datagram, plain).await;
    a.add_peer(b_id, to);
    while let Some(cmd) = cmds.recv().await {
        match cmd {
            Cmd::Send { start, n } => {
                for seq in start..start + n {
                    // Receipts are dropped: the receiver's verified count is what counts,
                    // and dropping a receipt never cancels the message.
                    drop(a.send(b_id, payload(seq, size)).await.expect("send"));
                }
            }
            Cmd::Stats(tx) => {
                let _ = tx.send(exon_stats_line(&a.stats().await.unwrap()));
            }
        }
    }
    a.close(Duration::from_secs(1)).await;
}

/// Datagrams and frames per message, from an endpoint's counters.
pub fn exon_stats_line(s: &exon::endpoint::EndpointStats) -> String {
    let n = &s.node;
    let per = |x: u64| x as f64 / n.sent.max(n.delivered).max(1) as f64;
    format!(
        "sent={} delivered={} datagrams_out={} ({:.3}/msg, {} B average, {} B largest) \
         datagrams_in={} ({:.3}/msg, {} B average) retransmissions={} frames_out={:?} \
         delivery_stalls={} send_calls={} recv_calls={}",
        n.sent,
        n.delivered,
        n.datagrams_out,
        per(n.datagrams_out),
        n.bytes_out / n.datagrams_out.max(1),
        n.largest_datagram_out,
        n.datagrams_in,
        per(n.datagrams_in),
        n.bytes_in / n.datagrams_in.max(1),
        n.retransmissions,
        n.frames_out,
        s.delivery_stalls,
        s.send_calls,
        s.recv_calls
    )
}

/// Writes frames (u32 length, payload) of `size`-byte messages for every `Send` command;
/// flushes after each batch.
async fn write_frames<W: AsyncWrite + Unpin>(
    w: W,
    size: usize,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    while let Some(cmd) = cmds.recv().await {
        if let Cmd::Send { start, n } = cmd {
            for seq in start..start + n {
                write_frame(&mut w, &payload(seq, size)).await;
            }
            w.flush().await.unwrap();
        }
    }
    w.shutdown().await.ok();
}

/// Writes one frame: `p`'s length (4 bytes, big-endian), then `p`.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, p: &[u8]) {
    let len = u32::try_from(p.len()).expect("frame length fits 32 bits");
    w.write_u32(len).await.unwrap();
    w.write_all(p).await.unwrap();
}

/// Reads one frame into `buf` with exact reads (its 4-byte length, then that many bytes);
/// false at a clean end of stream. A frame longer than `max` panics before anything is
/// allocated for it.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> bool {
    let len = match r.read_u32().await {
        Ok(l) => l as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return false,
        Err(e) => panic!("read: {e}"),
    };
    assert!(len <= max, "frame of {len} bytes, more than {max}");
    buf.resize(len, 0);
    r.read_exact(buf).await.unwrap();
    true
}

async fn read_frames<R: AsyncRead + Unpin>(
    r: R,
    size: usize,
    mut stop: oneshot::Receiver<()>,
    progress: Arc<Progress>,
) {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut seen = Seen::default();
    let mut buf = Vec::new();
    loop {
        tokio::select! {
            more = read_frame(&mut r, &mut buf, size) => {
                if !more { break; }
                seen.record(seq_of(&buf, size));
                progress.verified(seen.count());
            }
            _ = &mut stop => break,
        }
    }
}

// ------------------------------------------------------------------------------------------
// QUIC setup
// ------------------------------------------------------------------------------------------

pub fn quic_transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(1024u32.into())
        .max_concurrent_uni_streams(1024u32.into());
    Arc::new(t)
}

/// A QUIC server endpoint at `bind` with a fresh self-signed certificate for "localhost",
/// and the certificate for the client to trust.
pub fn quic_server(
    bind: SocketAddr,
) -> (quinn::Endpoint, rustls::pki_types::CertificateDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der());
    let mut cfg = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.into()).unwrap();
    cfg.transport_config(quic_transport());
    let ep = quinn::Endpoint::server(cfg, bind).unwrap();
    (ep, cert)
}

/// A QUIC client endpoint at `bind` connected to `addr`, trusting only `cert`.
pub async fn quic_connect(
    bind: SocketAddr,
    addr: SocketAddr,
    cert: rustls::pki_types::CertificateDer<'static>,
) -> (quinn::Endpoint, quinn::Connection) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut cfg = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).unwrap();
    cfg.transport_config(quic_transport());
    let mut ep = quinn::Endpoint::client(bind).unwrap();
    ep.set_default_client_config(cfg);
    let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
    (ep, conn)
}

/// The server's certificate, handed to the client thread (runners are set up one at a
/// time: the server publishes it before its address).
static QUIC_CERT: Mutex<Option<rustls::pki_types::CertificateDer<'static>>> = Mutex::new(None);

async fn quic_oneway_receiver(
    kind: OneWayKind,
    size: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    mut stop: oneshot::Receiver<()>,
    progress: Arc<Progress>,
) {
    let (ep, cert) = quic_server(LOCALHOST.parse().unwrap());
    *QUIC_CERT.lock().unwrap() = Some(cert);
    addr_tx.send(ep.local_addr().unwrap()).unwrap();
    let conn = ep.accept().await.unwrap().await.unwrap();
    if kind == OneWayKind::QuicStream {
        let s = conn.accept_uni().await.unwrap();
        read_frames(s, size, stop, progress).await;
    } else {
        let mut seen = Seen::default();
        loop {
            tokio::select! {
                s = conn.accept_uni() => {
                    let Ok(mut s) = s else { break };
                    let p = s.read_to_end(size).await.unwrap();
                    seen.record(seq_of(&p, size));
                    progress.verified(seen.count());
                }
                _ = &mut stop => break,
            }
        }
    }
    conn.close(0u32.into(), b"done");
    ep.wait_idle().await;
}

async fn quic_oneway_sender(
    kind: OneWayKind,
    size: usize,
    addr: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let cert = QUIC_CERT
        .lock()
        .unwrap()
        .clone()
        .expect("server certificate");
    let (ep, conn) = quic_connect(LOCALHOST.parse().unwrap(), addr, cert).await;
    if kind == OneWayKind::QuicStream {
        let s = conn.open_uni().await.unwrap();
        write_frames(s, size, cmds).await;
    } else {
        while let Some(cmd) = cmds.recv().await {
            if let Cmd::Send { start, n } = cmd {
                for seq in start..start + n {
                    let mut s = conn.open_uni().await.unwrap();
                    s.write_all(&payload(seq, size)).await.unwrap();
                    s.finish().unwrap();
                }
            }
        }
    }
    conn.close(0u32.into(), b"done");
    ep.wait_idle().await;
}

// ------------------------------------------------------------------------------------------
// Exon sans-IO pair in memory
// ------------------------------------------------------------------------------------------

/// Two exon nodes passing datagrams directly (no sockets, no threads): the protocol's own
/// cost per message.
pub struct MemPair {
    a: Node,
    b: Node,
    buf: Vec<u8>,
    /// Receive buffer the datagrams are copied into.
    rx: bytes::BytesMut,
    seen: Seen,
    next: u64,
    /// Datagrams moved between the nodes.
    pub datagrams: u64,
    /// Virtual time: it advances only to the next timer when nothing else is left to do.
    now: Instant,
}

impl MemPair {
    /// Two nodes with `datagram`-byte datagrams, sealed or (`plain`) in plaintext mode.
    pub fn new(datagram: usize, plain: bool) -> MemPair {
        let cfg = {
            let mut conf = Config::default();
            conf.mtu.max_datagram_size = datagram;
            conf
        };
        let (ia, ib) = (NodeId::from_const(1), NodeId::from_const(2));
        let security = |id| {
            if plain {
                Security::InsecurePlaintext
            } else {
                exon::proto::crypto::insecure_test_security(id, [ia, ib])
            }
        };
        MemPair {
            a: Node::new(ia, security(ia), cfg.clone(), 1).unwrap(),
            b: Node::new(ib, security(ib), cfg, 1).unwrap(),
            buf: Vec::with_capacity(64 * 1024),
            rx: bytes::BytesMut::new(),
            seen: Seen::default(),
            next: 0,
            datagrams: 0,
            now: Instant::now(),
        }
    }

    /// Sends `n` messages from a to b and runs until b delivered all of them.
    pub fn run(&mut self, n: u64) -> Duration {
        let t = Instant::now();
        let (start, end) = (self.next, self.next + n);
        let target = self.seen.count() + n;
        let to = self.b.id();
        let mut seq = start;
        let mut stuck = 0;
        while self.seen.count() < target {
            let now = self.now;
            while seq < end {
                match self.a.send(now, to, payload(seq, PAYLOAD)) {
                    Ok(_) => seq += 1,
                    Err(SendError::QueueFull(_)) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            if self.pump(now) == 0 {
                // Nothing to move: jump the virtual clock to the next timer.
                let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                match next {
                    Some(t) if t > self.now => self.now = t,
                    _ => stuck += 1,
                }
                assert!(stuck < 100, "in-memory pair stalled");
            }
        }
        self.next = end;
        t.elapsed()
    }

    /// Moves every pending datagram both ways once, handles timers and events. Returns the
    /// datagrams moved.
    fn pump(&mut self, now: Instant) -> u64 {
        let mut moved = 0;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut self.a, &mut self.b)
            } else {
                (&mut self.b, &mut self.a)
            };
            if src.poll_timeout().is_some_and(|t| t <= now) {
                src.handle_timeout(now);
            }
            loop {
                if let Some(hw) = src.poll_clock_store() {
                    src.handle_clock_stored(now, hw);
                    continue;
                }
                self.buf.clear();
                let Some(tx) = src.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                moved += 1;
                // As a driver would: datagrams received into one large shared buffer, so
                // slicing a payload out is a reference count, not an allocation.
                if self.rx.capacity() < tx.size {
                    self.rx = bytes::BytesMut::with_capacity(256 * 1024);
                }
                self.rx.extend_from_slice(&self.buf[..tx.size]);
                dst.handle_datagram_buf(now, self.rx.split());
            }
        }
        for node in [&mut self.a, &mut self.b] {
            while let Some(e) = node.poll_event() {
                if let Event::Delivered { payload, id, .. } = e {
                    self.seen.record(seq_of(&payload, PAYLOAD));
                    node.handle_taken(now, id);
                }
            }
        }
        self.datagrams += moved;
        moved
    }
}

// ------------------------------------------------------------------------------------------
// Several pairs, sharded receiver
// ------------------------------------------------------------------------------------------

/// Builds a runtime on the current thread for `workers == 0`, else a multi-thread one.
fn runtime(workers: usize) -> tokio::runtime::Runtime {
    let mut b = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    b.enable_all().build().expect("runtime")
}

/// What a [`ShardedOneWay`] receiver hands its constructor: the receiving thread, its stop
/// signal, the verification channel, the progress and where its counters land.
type ReceiverParts = (
    JoinHandle<()>,
    oneshot::Sender<()>,
    std_mpsc::Receiver<u64>,
    Arc<Progress>,
    Arc<Mutex<Option<exon::endpoint::EndpointStats>>>,
);

/// One-way with `pairs` senders (each an endpoint on its own thread) and one receiving
/// endpoint of `shards` driver shards (on a runtime of `shards` worker threads when above
/// 1, one task per shard taking its messages); every message is verified exactly once per
/// sender.
pub struct ShardedOneWay {
    cmds: Vec<mpsc::UnboundedSender<Cmd>>,
    stop: Option<oneshot::Sender<()>>,
    done: std_mpsc::Receiver<u64>,
    progress: Arc<Progress>,
    verified: u64,
    next: u64,
    threads: Vec<JoinHandle<()>>,
    stats: Arc<Mutex<Option<exon::endpoint::EndpointStats>>>,
}

impl ShardedOneWay {
    /// Sets the senders and the receiver up; `send_batch` messages per `send_batch` call (0:
    /// one `send` per message).
    pub fn new(
        plain: bool,
        pairs: usize,
        shards: usize,
        datagram: usize,
        send_batch: usize,
    ) -> ShardedOneWay {
        assert!(
            (1..=MAX_PAIRS as usize).contains(&pairs),
            "1 to {MAX_PAIRS} pairs"
        );
        let (progress, done) = Progress::new();
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let p = progress.clone();
        let stats = Arc::new(Mutex::new(None));
        let stats_out = stats.clone();
        let receiver = std::thread::Builder::new()
            .name("recv".into())
            .spawn(move || {
                let workers = if shards > 1 { shards } else { 0 };
                runtime(workers).block_on(async move {
                    let cfg = exon_config(datagram);
                    let local: SocketAddr = LOCALHOST.parse().unwrap();
                    let ep = exon_endpoint_sharded(local, 2, cfg, plain, shards);
                    addr_tx.send(ep.local_addr()).unwrap();
                    let (h, deliveries) = ep.into_deliveries();
                    let total = Arc::new(AtomicU64::new(0));
                    let mut tasks = Vec::new();
                    for mut d in deliveries {
                        let (total, p) = (total.clone(), p.clone());
                        tasks.push(tokio::spawn(async move {
                            let mut seen: HashMap<NodeId, Seen> = HashMap::new();
                            let mut buf = Vec::with_capacity(RECV_MANY);
                            while d.recv_many(&mut buf, RECV_MANY).await > 0 {
                                let n = buf.len() as u64;
                                for m in buf.drain(..) {
                                    seen.entry(m.from)
                                        .or_default()
                                        .record(seq_of(&m.payload, SHARDED_SIZE));
                                }
                                p.verified(total.fetch_add(n, Ordering::AcqRel) + n);
                            }
                        }));
                    }
                    let _ = stop_rx.await;
                    *stats_out.lock().unwrap() = h.stats().await;
                    h.close(Duration::from_millis(100)).await;
                    for t in tasks {
                        let _ = t.await;
                    }
                })
            })
            .expect("thread");
        let addr = addr_rx.recv().expect("receiver address");
        let ids = Arc::new(sender_ids(pairs, shards));
        let parts = (receiver, stop_tx, done, progress, stats);
        ShardedOneWay::with_senders(pairs, parts, move |j, mut cmd_rx| {
            let ids = ids.clone();
            async move {
                let local: SocketAddr = LOCALHOST.parse().unwrap();
                let a = exon_endpoint_with(local, ids[j], exon_config(datagram), plain);
                let b = NodeId::from_const(2);
                a.add_peer(b, addr);
                while let Some(cmd) = cmd_rx.recv().await {
                    if let Cmd::Send { start, n } = cmd {
                        if send_batch == 0 {
                            for seq in start..start + n {
                                drop(a.send(b, payload(seq, SHARDED_SIZE)).await.expect("send"));
                            }
                        } else {
                            let mut seq = start;
                            while seq < start + n {
                                let k = (send_batch as u64).min(start + n - seq);
                                let batch = (seq..seq + k).map(|q| payload(q, SHARDED_SIZE));
                                drop(a.send_batch(b, batch).await.expect("send_batch"));
                                seq += k;
                            }
                        }
                    }
                }
                a.close(Duration::from_secs(1)).await;
            }
        })
    }

    /// Starts `pairs` sender threads, sender `j` running `sender(j, its commands)` on its own
    /// runtime, beside the receiver `parts` describe (its thread, stop signal, progress and
    /// counters).
    fn with_senders<S, Fut>(pairs: usize, parts: ReceiverParts, sender: S) -> ShardedOneWay
    where
        S: Fn(usize, mpsc::UnboundedReceiver<Cmd>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let (receiver, stop, done, progress, stats) = parts;
        let mut cmds = Vec::new();
        let mut threads = Vec::new();
        for j in 0..pairs {
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<Cmd>();
            cmds.push(cmd_tx);
            let sender = sender.clone();
            threads.push(spawn_rt("send", move || sender(j, cmd_rx)));
        }
        threads.push(receiver);
        ShardedOneWay {
            cmds,
            stop: Some(stop),
            done,
            progress,
            verified: 0,
            next: 0,
            threads,
            stats,
        }
    }

    /// The same shape over TCP, for comparison: `pairs` sender threads, each with one
    /// connection writing framed `SHARDED_SIZE`-byte messages, to one receiving process
    /// whose runtime has `pairs` worker threads (one task per connection, each verifying
    /// its connection's messages exactly once).
    pub fn new_tcp(pairs: usize) -> ShardedOneWay {
        assert!(
            (1..=MAX_PAIRS as usize).contains(&pairs),
            "1 to {MAX_PAIRS} pairs"
        );
        let (progress, done) = Progress::new();
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let p = progress.clone();
        let receiver = std::thread::Builder::new()
            .name("recv".into())
            .spawn(move || {
                runtime(if pairs > 1 { pairs } else { 0 }).block_on(async move {
                    let l = TcpListener::bind(LOCALHOST).await.unwrap();
                    addr_tx.send(l.local_addr().unwrap()).unwrap();
                    let total = Arc::new(AtomicU64::new(0));
                    for _ in 0..pairs {
                        let (s, _) = l.accept().await.unwrap();
                        s.set_nodelay(true).unwrap();
                        let (total, p) = (total.clone(), p.clone());
                        // Ends with the runtime, once the receiver stops.
                        tokio::spawn(async move {
                            let mut r = BufReader::with_capacity(64 * 1024, s);
                            let (mut seen, mut buf) = (Seen::default(), Vec::new());
                            let mut reported = 0;
                            while read_frame(&mut r, &mut buf, SHARDED_SIZE).await {
                                seen.record(seq_of(&buf, SHARDED_SIZE));
                                // Counted once per buffered run of frames.
                                if !frame_buffered(r.buffer()) {
                                    let n = seen.count() - reported;
                                    reported = seen.count();
                                    p.verified(total.fetch_add(n, Ordering::AcqRel) + n);
                                }
                            }
                        });
                    }
                    let _ = stop_rx.await;
                })
            })
            .expect("thread");
        let addr = addr_rx.recv().expect("receiver address");
        let parts = (
            receiver,
            stop_tx,
            done,
            progress,
            Arc::new(Mutex::new(None)),
        );
        ShardedOneWay::with_senders(pairs, parts, move |_, cmd_rx| async move {
            let s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            write_frames(s, SHARDED_SIZE, cmd_rx).await;
        })
    }

    /// Sends about `n` messages (an equal share per sender) and returns once the receiver
    /// verified all of them; returns the messages and the time.
    pub fn run(&mut self, n: u64) -> (u64, Duration) {
        let share = (n / self.cmds.len() as u64).max(1);
        let n = share * self.cmds.len() as u64;
        self.verified += n;
        self.progress.target.store(self.verified, Ordering::Release);
        let t = Instant::now();
        for c in &self.cmds {
            c.send(Cmd::Send {
                start: self.next,
                n: share,
            })
            .expect("sender alive");
        }
        self.next += share;
        match self.done.recv_timeout(BATCH_DEADLINE) {
            Ok(c) => assert_eq!(c, self.verified),
            Err(e) => panic!("sharded one-way: batch of {n} not verified ({e})"),
        }
        (n, t.elapsed())
    }

    /// Stops everything; returns the receiver's counters.
    pub fn finish(mut self) -> Option<exon::endpoint::EndpointStats> {
        self.shutdown();
        self.stats.lock().unwrap().take()
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(r) = self.threads.pop() {
            let _ = r.join();
        }
        self.cmds.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ShardedOneWay {
    fn drop(&mut self) {
        self.shutdown();
    }
}

// ------------------------------------------------------------------------------------------
// Request/reply
// ------------------------------------------------------------------------------------------

/// The systems compared for request/reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    /// Exon endpoints: request and reply are exon messages, correlated by sequence number.
    /// (Every system: the reply echoes the request, so both have the run's size.)
    Exon,
    /// The same in the explicit plaintext mode.
    ExonPlain,
    /// One TCP connection, every caller multiplexed over it (request ids, demux map).
    Tcp,
    /// One QUIC connection, one bidirectional stream per request.
    Quic,
}

impl RpcKind {
    pub fn name(self) -> &'static str {
        match self {
            RpcKind::Exon => "exon",
            RpcKind::ExonPlain => "exon_plain",
            RpcKind::Tcp => "tcp",
            RpcKind::Quic => "quic",
        }
    }
}

/// Callers waiting for replies, by request id.
pub type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Bytes>>>>;

/// How a caller sends one request (the reply arrives through `Pending`, or directly).
pub enum Caller {
    Exon(exon::endpoint::Handle),
    Tcp(mpsc::UnboundedSender<Bytes>),
    Quic(quinn::Connection),
}

/// A batch for the client thread: `n` requests from `callers` concurrent callers.
struct RpcCmd {
    start: u64,
    n: u64,
    callers: u64,
    reply: std_mpsc::Sender<Vec<Duration>>,
}

/// A request/reply client and server on two threads, set up once and driven in batches.
pub struct Rpc {
    kind: RpcKind,
    cmds: Option<mpsc::UnboundedSender<RpcCmd>>,
    stop: Option<oneshot::Sender<()>>,
    next: u64,
    threads: Vec<JoinHandle<()>>,
}

impl Rpc {
    /// Sets the client and server up for `size`-byte requests and replies (at least
    /// [`MIN_SIZE`]).
    pub fn new(kind: RpcKind, exon_datagram: usize, size: usize) -> Rpc {
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<RpcCmd>();
        let server = spawn_rt("server", move || async move {
            rpc_server(kind, exon_datagram, size, addr_tx, stop_rx).await
        });
        let addr = addr_rx.recv().expect("server address");
        let client = spawn_rt("client", move || async move {
            rpc_client(kind, exon_datagram, size, addr, cmd_rx).await
        });
        Rpc {
            kind,
            cmds: Some(cmd_tx),
            stop: Some(stop_tx),
            next: 0,
            threads: vec![client, server],
        }
    }

    pub fn kind(&self) -> RpcKind {
        self.kind
    }

    /// Runs `n` requests (rounded down to a multiple of `callers`) from `callers`
    /// concurrent callers; returns the elapsed time and each request's latency.
    pub fn run(&mut self, n: u64, callers: u64) -> (Duration, Vec<Duration>) {
        let n = (n / callers).max(1) * callers;
        let (tx, rx) = std_mpsc::channel();
        let t = Instant::now();
        self.cmds
            .as_ref()
            .unwrap()
            .send(RpcCmd {
                start: self.next,
                n,
                callers,
                reply: tx,
            })
            .expect("client alive");
        self.next += n;
        let lat = rx
            .recv_timeout(BATCH_DEADLINE)
            .unwrap_or_else(|e| panic!("{}: rpc batch failed ({e})", self.kind.name()));
        assert_eq!(lat.len() as u64, n, "every request answered once");
        (t.elapsed(), lat)
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        self.cmds.take();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

async fn rpc_server(
    kind: RpcKind,
    datagram: usize,
    size: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    stop: oneshot::Receiver<()>,
) {
    match kind {
        RpcKind::Exon | RpcKind::ExonPlain => {
            let ep = exon_bind(1, datagram, kind == RpcKind::ExonPlain).await;
            addr_tx.send(ep.local_addr()).unwrap();
            serve_exon(ep, stop, size).await;
        }
        RpcKind::Tcp => {
            let l = TcpListener::bind(LOCALHOST).await.unwrap();
            addr_tx.send(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().await.unwrap();
            s.set_nodelay(true).unwrap();
            serve_tcp(s, stop, size).await;
        }
        RpcKind::Quic => {
            let (ep, cert) = quic_server(LOCALHOST.parse().unwrap());
            *QUIC_CERT.lock().unwrap() = Some(cert);
            addr_tx.send(ep.local_addr().unwrap()).unwrap();
            let conn = ep.accept().await.unwrap().await.unwrap();
            serve_quic(&conn, stop, size).await;
            conn.close(0u32.into(), b"done");
            ep.wait_idle().await;
        }
    }
}

/// Answers every `size`-byte request on an exon endpoint with an echo until `stop`, then
/// closes the endpoint. Returns the requests served (each verified exactly once).
pub async fn serve_exon(mut ep: Endpoint, mut stop: oneshot::Receiver<()>, size: usize) -> u64 {
    let mut seen = Seen::default();
    let h = ep.handle();
    let mut buf = Vec::with_capacity(RECV_MANY);
    loop {
        buf.clear();
        tokio::select! {
            n = ep.recv_many(&mut buf, RECV_MANY) => {
                assert!(n > 0, "endpoint running");
                for m in &buf {
                    seen.record(seq_of(&m.payload, size));
                }
                // The replies echo the requests (same size, same sequence number), one
                // batch per run of requests from the same caller endpoint.
                let mut rest = &buf[..];
                while let Some(first) = rest.first() {
                    let run = rest.iter().take_while(|m| m.from == first.from).count();
                    let replies = rest[..run].iter().map(|m| m.payload.clone());
                    drop(h.send_batch(first.from, replies).await.expect("reply"));
                    rest = &rest[run..];
                }
            }
            _ = &mut stop => break,
        }
    }
    h.close(Duration::from_millis(200)).await;
    seen.count()
}

/// Answers every framed `size`-byte request on a TCP connection with an echo until `stop`
/// or the end of the stream. Returns the requests served (each verified exactly once).
pub async fn serve_tcp(s: TcpStream, mut stop: oneshot::Receiver<()>, size: usize) -> u64 {
    let mut seen = Seen::default();
    let (r, w) = s.into_split();
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let mut buf = Vec::new();
    loop {
        tokio::select! {
            more = read_frame(&mut r, &mut buf, size) => {
                if !more { break; }
                seen.record(seq_of(&buf, size));
                write_frame(&mut w, &buf).await;
                // Flush when the next request is not already buffered whole.
                if !frame_buffered(r.buffer()) {
                    w.flush().await.unwrap();
                }
            }
            _ = &mut stop => break,
        }
    }
    seen.count()
}

/// Answers every `size`-byte request on a QUIC connection (one bidirectional stream each)
/// with an echo until `stop` or the connection's end. Returns the requests served (each
/// verified exactly once).
pub async fn serve_quic(
    conn: &quinn::Connection,
    mut stop: oneshot::Receiver<()>,
    size: usize,
) -> u64 {
    let seen = Arc::new(Mutex::new(Seen::default()));
    loop {
        tokio::select! {
            s = conn.accept_bi() => {
                let Ok((mut send, mut recv)) = s else { break };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let req = recv.read_to_end(size).await.unwrap();
                    seen.lock().unwrap().record(seq_of(&req, size));
                    send.write_all(&req).await.unwrap();
                    send.finish().unwrap();
                });
            }
            _ = &mut stop => break,
        }
    }
    let n = seen.lock().unwrap().count();
    n
}

/// True when `buf` starts with a whole frame.
pub fn frame_buffered(buf: &[u8]) -> bool {
    buf.len() >= 4 && buf.len() >= 4 + u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize
}

async fn rpc_client(
    kind: RpcKind,
    datagram: usize,
    size: usize,
    addr: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<RpcCmd>,
) {
    let pending = Pending::default();
    let server_id = NodeId::from_const(1);
    let mut tasks = Vec::new();
    let mut quic_ep = None;
    let mut exon_handle = None;
    let caller = match kind {
        RpcKind::Exon | RpcKind::ExonPlain => {
            let ep = exon_bind(2, datagram, kind == RpcKind::ExonPlain).await;
            ep.add_peer(server_id, addr);
            exon_handle = Some(ep.handle());
            exon_caller(ep, &pending, &mut tasks, size)
        }
        RpcKind::Tcp => {
            let s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            tcp_caller(s, &pending, &mut tasks, size)
        }
        RpcKind::Quic => {
            let cert = QUIC_CERT
                .lock()
                .unwrap()
                .clone()
                .expect("server certificate");
            let (ep, conn) = quic_connect(LOCALHOST.parse().unwrap(), addr, cert).await;
            quic_ep = Some(ep);
            Caller::Quic(conn)
        }
    };
    let caller = Arc::new(caller);
    while let Some(cmd) = cmds.recv().await {
        let per = cmd.n / cmd.callers;
        let mut joins = Vec::with_capacity(cmd.callers as usize);
        for c in 0..cmd.callers {
            let (caller, pending) = (caller.clone(), pending.clone());
            let first = cmd.start + c * per;
            joins.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per as usize);
                for seq in first..first + per {
                    let t = Instant::now();
                    let reply = call(&caller, server_id, &pending, seq, size).await;
                    assert_eq!(seq_of(&reply, size), seq, "reply to another request");
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        let mut all = Vec::with_capacity(cmd.n as usize);
        for j in joins {
            all.extend(j.await.expect("caller panicked"));
        }
        let _ = cmd.reply.send(all);
    }
    if let Caller::Quic(conn) = &*caller {
        conn.close(0u32.into(), b"done");
    }
    if let Some(ep) = quic_ep {
        ep.wait_idle().await;
    }
    if let Some(h) = exon_handle {
        h.close(Duration::from_millis(200)).await;
    }
    for t in tasks {
        t.abort();
    }
}

/// An exon caller: `size`-byte replies arriving on `ep` are routed to their callers by a
/// task pushed onto `tasks`.
pub fn exon_caller(
    mut ep: Endpoint,
    pending: &Pending,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    size: usize,
) -> Caller {
    let h = ep.handle();
    let router = pending.clone();
    tasks.push(tokio::spawn(async move {
        let mut buf = Vec::with_capacity(RECV_MANY);
        while ep.recv_many(&mut buf, RECV_MANY).await > 0 {
            for m in buf.drain(..) {
                route(&router, m.payload, size);
            }
        }
    }));
    Caller::Exon(h)
}

/// A TCP caller multiplexing every caller over `s`: a writer task and a reader task that
/// routes `size`-byte replies, both pushed onto `tasks`.
pub fn tcp_caller(
    s: TcpStream,
    pending: &Pending,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    size: usize,
) -> Caller {
    let (r, w) = s.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    // Writer: every caller's requests through one buffered writer, flushed when no more
    // requests wait.
    tasks.push(tokio::spawn(async move {
        let mut w = BufWriter::with_capacity(64 * 1024, w);
        while let Some(mut req) = rx.recv().await {
            loop {
                write_frame(&mut w, &req).await;
                match rx.try_recv() {
                    Ok(r) => req = r,
                    Err(_) => break,
                }
            }
            w.flush().await.unwrap();
        }
    }));
    // Reader: demultiplexes replies to their callers.
    let router = pending.clone();
    tasks.push(tokio::spawn(async move {
        let mut r = BufReader::with_capacity(64 * 1024, r);
        let mut buf = Vec::new();
        while read_frame(&mut r, &mut buf, size).await {
            route(&router, Bytes::copy_from_slice(&buf), size);
        }
    }));
    Caller::Tcp(tx)
}

/// Hands a `size`-byte reply to the caller waiting for it; a reply nobody waits for is a
/// duplicate.
pub fn route(pending: &Pending, reply: Bytes, size: usize) {
    let seq = seq_of(&reply, size);
    let tx = pending
        .lock()
        .unwrap()
        .remove(&seq)
        .unwrap_or_else(|| panic!("reply {seq} not awaited (duplicate?)"));
    let _ = tx.send(reply);
}

/// One `size`-byte request `seq` and its reply (panics if no reply within
/// `BATCH_DEADLINE`).
pub async fn call(
    caller: &Caller,
    server: NodeId,
    pending: &Pending,
    seq: u64,
    size: usize,
) -> Bytes {
    let req = payload(seq, size);
    let wait = |rx: oneshot::Receiver<Bytes>| async move {
        tokio::time::timeout(BATCH_DEADLINE, rx)
            .await
            .expect("reply in time")
            .expect("router alive")
    };
    match caller {
        Caller::Exon(h) => {
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap().insert(seq, tx);
            drop(h.send(server, req).await.expect("send"));
            wait(rx).await
        }
        Caller::Tcp(w) => {
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap().insert(seq, tx);
            w.send(req).expect("writer alive");
            wait(rx).await
        }
        Caller::Quic(conn) => {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&req).await.unwrap();
            send.finish().unwrap();
            Bytes::from(recv.read_to_end(size).await.unwrap())
        }
    }
}

/// Latencies in an HDR histogram of microseconds (3 significant digits: memory does not grow
/// with the number of samples, and a quantile is read without sorting).
#[derive(Debug, Clone)]
pub struct Latencies(hdrhistogram::Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        // 1 us to one hour; a longer latency is counted as one hour. (A histogram made with
        // `new` starts tiny, and `saturating_record` does not grow it.)
        Latencies(
            hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid bounds and precision"),
        )
    }
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.0.saturating_record(us);
    }

    /// Number of latencies recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// The `q` quantile (0..=1), in microseconds; NaN if nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.value_at_quantile(q) as f64
    }
}

impl Extend<Duration> for Latencies {
    fn extend<I: IntoIterator<Item = Duration>>(&mut self, iter: I) {
        for d in iter {
            self.record(d);
        }
    }
}

impl FromIterator<Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Self {
        let mut l = Latencies::default();
        l.extend(iter);
        l
    }
}
