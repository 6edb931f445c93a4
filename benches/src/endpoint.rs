//! Exon endpoints over loopback UDP: set-up, one-way and RPC sides, the one-thread cost run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::{Duration, Instant};

use exon::proto::{NodeId, Security, SendError};
use exon::rpc::{Failure, Request, Response};
use exon::{Endpoint, EndpointConfig, Message};
use tokio::sync::{mpsc, oneshot};

use crate::calls::Caller;
use crate::harness::{Cmd, Progress, LOCALHOST, RECV_MANY};
use crate::message::{payload, seq_of, Seen, SHARDED_SIZE};

/// Socket buffers of the exon endpoints: the default 208 KiB receive buffer holds only ~100
/// datagrams of 1.5 KB (kernel accounting), far less than exon's default window of 1024
/// messages, and overflows into losses and retransmissions. 4 MiB (the machine's
/// `net.core.rmem_max`) holds a window.
pub const UDP_BUFFER: usize = 4 << 20;

/// The exon datagram size used on loopback unless told otherwise (Ethernet MTU less IP and
/// UDP headers: one 1 KB message per datagram).
pub const DEFAULT_EXON_DATAGRAM: usize = 1472;

/// Exon's flow-control window (`Config::window`) in the loopback benches; 0 (the default)
/// keeps exon's default.
pub static EXON_WINDOW: AtomicU64 = AtomicU64::new(0);

/// The first node id of the senders of a run with several pairs.
pub const FIRST_PEER: u64 = 10;
/// Most sender/receiver pairs of one run.
pub const MAX_PAIRS: u64 = 64;
/// Node ids the sharded runs' senders are picked from.
const ID_POOL: u64 = 512;

/// Binds an exon endpoint on loopback with `UDP_BUFFER`-sized socket buffers and batched
/// I/O (GSO and GRO), as `Endpoint::bind` does.
pub fn exon_bind(id: u64, datagram: usize, plain: bool) -> Endpoint {
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
        crate::harness::runtime(0).block_on(async move {
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

/// The one-way receiver: node 2, publishing its address, verifying every `size`-byte
/// message into `progress` until `stop`.
pub async fn exon_receiver(
    datagram: usize,
    plain: bool,
    size: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    mut stop: oneshot::Receiver<()>,
    progress: Arc<Progress>,
) {
    let mut b = exon_bind(2, datagram, plain);
    addr_tx.send(b.local_addr()).unwrap();
    let (mut seen, mut buf) = (Seen::default(), Vec::with_capacity(RECV_MANY));
    while recv_verified(&mut b, &mut buf, &mut seen, size, &mut stop).await {
        progress.verified(seen.count());
    }
    b.close(Duration::from_millis(100)).await;
}

/// The one-way sender: node 1, sending `size`-byte messages to node 2 at `to` as `cmds`
/// say, one `send` each.
pub async fn exon_sender(
    datagram: usize,
    plain: bool,
    size: usize,
    to: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let b_id = NodeId::from_const(2);
    let a = exon_bind(1, datagram, plain);
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

/// Takes every delivery of `d` (one shard's, or the whole endpoint's) and verifies
/// `size`-byte messages exactly once per sender; adds their number to `total` and reports
/// it to `progress`.
pub async fn verify_deliveries(
    mut d: exon::endpoint::Deliveries,
    size: usize,
    total: Arc<AtomicU64>,
    progress: Arc<Progress>,
) {
    let mut seen: HashMap<NodeId, Seen> = HashMap::new();
    let mut buf = Vec::with_capacity(RECV_MANY);
    while d.recv_many(&mut buf, RECV_MANY).await > 0 {
        let n = buf.len() as u64;
        for m in buf.drain(..) {
            seen.entry(m.from)
                .or_default()
                .record(seq_of(&m.payload, size));
        }
        progress.verified(total.fetch_add(n, Ordering::AcqRel) + n);
    }
}

/// Takes the next messages of `ep` into `buf` (emptied first, at most [`RECV_MANY`]) and
/// verifies each `size`-byte one exactly once into `seen`; false once `stop` fires.
async fn recv_verified(
    ep: &mut Endpoint,
    buf: &mut Vec<Message>,
    seen: &mut Seen,
    size: usize,
    stop: &mut oneshot::Receiver<()>,
) -> bool {
    buf.clear();
    tokio::select! {
        n = ep.recv_many(buf, RECV_MANY) => {
            assert!(n > 0, "endpoint running");
            for m in buf.iter() {
                seen.record(seq_of(&m.payload, size));
            }
            true
        }
        _ = stop => false,
    }
}

/// Serves `size`-byte requests on an exon endpoint (`Handle::serve`), each reply echoing its
/// request, until `stop`, then closes the endpoint. Returns the requests served (each
/// verified exactly once).
pub async fn serve_exon(ep: Endpoint, stop: oneshot::Receiver<()>, size: usize) -> u64 {
    serve_exon_wire(ep, stop, size).await.0
}

/// [`serve_exon`], also returning what the server's node sent once it stopped serving:
/// datagrams, bytes (UDP payload), TOKEN frames and ACK frames (`None` when the endpoint
/// gave no statistics).
pub async fn serve_exon_wire(
    ep: Endpoint,
    stop: oneshot::Receiver<()>,
    size: usize,
) -> (u64, Option<[u64; 4]>) {
    let h = ep.handle();
    let mut seen = Seen::default();
    let echo = |req: Request| {
        seen.record(seq_of(req.body(), size));
        std::future::ready(Ok::<_, Failure>(Response::new(req.into_body())))
    };
    tokio::select! {
        r = h.serve(echo) => r.expect("serving"),
        _ = stop => {}
    }
    let wire = h.stats().await.map(|s| {
        let (n, f) = (&s.node, &s.node.frames_out);
        [n.datagrams_out, n.bytes_out, f.token, f.ack]
    });
    h.close(Duration::from_millis(200)).await;
    drop(ep);
    (seen.count(), wire)
}

/// An exon caller: calls through `ep`'s handle. A task pushed onto `tasks` holds the endpoint
/// (replies reach their calls without it; a plain message there would be a bench bug).
pub fn exon_caller(mut ep: Endpoint, tasks: &mut Vec<tokio::task::JoinHandle<()>>) -> Caller {
    let h = ep.handle();
    tasks.push(tokio::spawn(async move {
        if let Some(m) = ep.recv().await {
            panic!("unexpected message from {}", m.from);
        }
    }));
    Caller::Exon(h)
}

/// As [`one_thread_cost`], with each endpoint on its own OS thread and one-thread runtime
/// (the sender and its application on the calling thread, the receiver and its reader on
/// a thread of their own), so that callgrind's `--separate-threads=yes` counts each
/// side apart (`scripts/instruction-budget.py`). Returns the time from the `warmup`-th
/// delivery to the last.
///
/// The application keeps at most `LEAD` (2 048) messages ahead of the receiver's deliveries
/// (it waits, its driver running, until the receiver catches up): under
/// callgrind, which runs one thread at a time for long stretches, the sender would
/// otherwise sometimes fill its destination's queue while the receiver stands still, and
/// the counts per message would move by a tenth between runs with the path its sends
/// took (waiting for room, or not).
pub fn two_thread_cost(
    messages: u64,
    warmup: u64,
    batch: usize,
    plain: bool,
    datagram: usize,
) -> Duration {
    let local: SocketAddr = LOCALHOST.parse().unwrap();
    let cfg = exon_config(datagram);
    let total = warmup + messages;
    let marker = warmup.max(1);
    let (addr_tx, addr_rx) = std_mpsc::channel();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    let (all_tx, all_rx) = oneshot::channel::<()>();
    let receiver_cfg = cfg.clone();
    let delivered = Arc::new(Delivered::default());
    let counted = delivered.clone();
    let receiver = std::thread::spawn(move || {
        crate::harness::runtime(0).block_on(async move {
            let mut b = exon_endpoint_with(local, 2, receiver_cfg, plain);
            addr_tx.send(b.local_addr()).expect("sender waiting");
            let took = receive_all(&mut b, total, marker, Some(&counted)).await;
            let _ = all_tx.send(());
            // Answer the sender until it has closed.
            let _ = done_rx.await;
            b.close(Duration::from_millis(100)).await;
            took
        })
    });
    let b_addr = addr_rx.recv().expect("receiver bound");
    crate::harness::runtime(0).block_on(async move {
        let a = exon_endpoint_with(local, 1, cfg, plain);
        let b_id = NodeId::from_const(2);
        a.add_peer(b_id, b_addr);
        send_all(&a, b_id, total, batch, Some(&delivered)).await;
        // Under callgrind the run is slow: close once every message is delivered.
        let _ = all_rx.await;
        a.close(Duration::from_secs(5)).await;
    });
    let _ = done_tx.send(());
    receiver.join().expect("receiver thread")
}

/// Receives and checks `total` messages at `b`, counting them in `delivered` if given;
/// returns the time from the `marker`-th to the last.
async fn receive_all(
    b: &mut Endpoint,
    total: u64,
    marker: u64,
    delivered: Option<&Delivered>,
) -> Duration {
    let mut seen = Seen::default();
    let mut started = None;
    while seen.count() < total {
        let m = b.recv().await.expect("endpoint running");
        seen.record(seq_of(&m.payload, SHARDED_SIZE));
        if let Some(d) = delivered {
            d.count(seen.count());
        }
        if seen.count() == marker {
            started = Some(Instant::now());
        }
    }
    started.map_or(Duration::ZERO, |s| s.elapsed())
}

/// The receiver's deliveries, as the sender of [`two_thread_cost`] waits for them.
#[derive(Default)]
struct Delivered {
    count: AtomicU64,
    /// Told every [`STEP`](Self::STEP) deliveries.
    progress: tokio::sync::Notify,
}

impl Delivered {
    const STEP: u64 = 256;

    /// `n` messages were delivered.
    fn count(&self, n: u64) {
        self.count.store(n, Ordering::Release);
        if n.is_multiple_of(Self::STEP) {
            self.progress.notify_one();
        }
    }

    /// Waits until at least `n` messages were delivered (within [`STEP`](Self::STEP)).
    async fn wait_for(&self, n: u64) {
        while self.count.load(Ordering::Acquire) < n {
            self.progress.notified().await;
        }
    }
}

/// Messages the application of [`two_thread_cost`] keeps at most ahead of the receiver's
/// deliveries: half the destination's default queue (`max_queued_per_peer`), more than
/// the congestion window holds on loopback.
const LEAD: u64 = 2048;

/// Sends messages `0..total` of [`SHARDED_SIZE`] bytes from `a` to `to`, `batch` per
/// `send_batch` call (0: one `send` each), dropping the receipts; with `delivered`, at
/// most [`LEAD`] ahead of it.
async fn send_all(
    a: &Endpoint,
    to: NodeId,
    total: u64,
    batch: usize,
    delivered: Option<&Delivered>,
) {
    let mut seq = 0;
    while seq < total {
        if let Some(d) = delivered {
            d.wait_for(seq.saturating_sub(LEAD - 1)).await;
        }
        if batch == 0 {
            drop(a.send(to, payload(seq, SHARDED_SIZE)).await.expect("send"));
            seq += 1;
        } else {
            let n = (batch as u64).min(total - seq);
            let batch = (seq..seq + n).map(|q| payload(q, SHARDED_SIZE));
            drop(a.send_batch(to, batch).await.expect("send_batch"));
            seq += n;
        }
    }
}

/// The endpoint's own cost per message: a sending and a receiving endpoint (sealed, or
/// `plain`), with `datagram`-byte datagrams, on the current runtime move `warmup + messages`
/// messages of [`SHARDED_SIZE`] bytes one way over loopback, `batch` per `send_batch` call
/// (0: one `send` each). Returns the time from the end of the warm-up to the last delivery.
pub async fn one_thread_cost(
    messages: u64,
    warmup: u64,
    batch: usize,
    plain: bool,
    datagram: usize,
) -> Duration {
    let local: SocketAddr = LOCALHOST.parse().unwrap();
    let cfg = exon_config(datagram);
    let mut b = exon_endpoint_with(local, 2, cfg.clone(), plain);
    let a = exon_endpoint_with(local, 1, cfg, plain);
    let b_id = NodeId::from_const(2);
    a.add_peer(b_id, b.local_addr());
    let total = warmup + messages;
    let marker = warmup.max(1);
    let receiver = tokio::spawn(async move {
        let took = receive_all(&mut b, total, marker, None).await;
        (b, took)
    });
    send_all(&a, b_id, total, batch, None).await;
    let (b, took) = receiver.await.expect("receiver");
    a.close(Duration::from_secs(1)).await;
    b.close(Duration::from_millis(100)).await;
    took
}
