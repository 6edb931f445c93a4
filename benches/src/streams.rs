//! Byte streams and ordered channels on loopback: one long transfer over an exon `Stream`, a
//! TCP connection and a QUIC stream (compare's `stream` mode), and request/reply over one
//! ordered exon channel against plain exon messages (compare's `channel` mode).
//!
//! Stream: each transfer is `--mib` MiB written in 1 MiB blocks (a fixed pseudo-random
//! block with its index in its first 8 bytes, so that a lost, repeated or misplaced block
//! changes the checksum), read to the end by the other side, which counts the bytes and
//! computes their CRC-32; a transfer whose length or CRC differs from the sender's panics.
//! Connections are set up before the clock starts (exon: both endpoints bound and the peer
//! added; the stream itself opens with its first chunk, inside the clock); the time runs from
//! the first write to the reader's end of stream. Each side has its own thread and
//! current-thread runtime, as compare's other modes.
//!
//! Channel: `--callers` tasks on the client each send a request (caller id, counter, padding
//! to `--size`) and wait for its reply; `exon_channel` sends every request on ONE ordered
//! channel (channel 1) and the server answers on its own channel back; `exon_plain_msgs`
//! does the same with `Handle::send` both ways (no order). Replies are routed by caller id
//! and checked against the counter.

use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::endpoint::{Channel, Endpoint, Handle, Kind};
use exon::proto::NodeId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::endpoint::exon_bind;
use crate::harness::{runtime, LOCALHOST};
use crate::quic::{connect_local, serve_local};
use crate::stats::Latencies;

/// Bytes per write: one block.
pub const BLOCK: usize = 1 << 20;

/// A stream system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// An exon `Stream`, sealed (exon's default).
    Exon,
    /// The same in plaintext mode.
    ExonPlain,
    /// One TCP connection (`TCP_NODELAY`).
    Tcp,
    /// One TCP connection with TLS 1.3 (rustls, AES-128-GCM as sealed exon uses): the
    /// anchor for a sealed stream.
    TcpTls,
    /// One QUIC (quinn) unidirectional stream.
    Quic,
}

impl StreamKind {
    /// Every system, in report order.
    pub const ALL: [StreamKind; 5] = [
        StreamKind::Exon,
        StreamKind::ExonPlain,
        StreamKind::Tcp,
        StreamKind::TcpTls,
        StreamKind::Quic,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Exon => "exon",
            StreamKind::ExonPlain => "exon_plain",
            StreamKind::Tcp => "tcp",
            StreamKind::TcpTls => "tcp_tls",
            StreamKind::Quic => "quic",
        }
    }
}

/// The block sent as block `i`: a fixed pseudo-random MiB with `i` in its first 8 bytes.
fn fill_block(buf: &mut [u8], i: u64) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
}

/// The fixed pseudo-random block (xorshift).
fn base_block() -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut v = Vec::with_capacity(BLOCK);
    while v.len() < BLOCK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

/// The CRC-32 of a transfer of `blocks` blocks, as the sender computes it.
pub fn expected_crc(blocks: u64) -> u32 {
    let mut b = base_block();
    let mut h = crc32fast::Hasher::new();
    for i in 0..blocks {
        fill_block(&mut b, i);
        h.update(&b);
    }
    h.finalize()
}

/// What one transfer measured.
#[derive(Debug, Clone, Copy)]
pub struct Transfer {
    /// From the first write to the reader's end of stream.
    pub time: Duration,
    /// Bytes read.
    pub bytes: u64,
    /// Their CRC-32.
    pub crc: u32,
}

impl Transfer {
    /// MiB/s.
    pub fn mib_s(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.time.as_secs_f64()
    }
}

async fn write_blocks<W: AsyncWrite + Unpin>(w: &mut W, blocks: u64) -> Instant {
    let mut b = base_block();
    let start = Instant::now();
    for i in 0..blocks {
        fill_block(&mut b, i);
        w.write_all(&b).await.expect("write");
    }
    start
}

/// Reads to the end of stream: (bytes, CRC-32, when the end came).
async fn read_counted<R: AsyncRead + Unpin>(r: &mut R) -> (u64, u32, Instant) {
    let mut buf = vec![0u8; 256 << 10];
    let mut h = crc32fast::Hasher::new();
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).await.expect("read");
        if k == 0 {
            return (n, h.finalize(), Instant::now());
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}

/// One transfer of `blocks` MiB over `kind`, with exon's datagrams at `datagram` bytes (0:
/// its default, path MTU discovery).
pub fn transfer(kind: StreamKind, blocks: u64, datagram: usize) -> Transfer {
    let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
    let receiver = std::thread::spawn(move || {
        runtime(0).block_on(async move {
            match kind {
                StreamKind::Exon | StreamKind::ExonPlain => {
                    let mut ep = exon_bind(2, datagram, kind == StreamKind::ExonPlain);
                    addr_tx.send(ep.local_addr()).unwrap();
                    let mut s = ep.accept_stream().await.expect("a stream");
                    let r = read_counted(&mut s).await;
                    // Shut our side too, so that dropping the stream is a clean close.
                    s.shutdown().await.expect("shutdown");
                    let _ = tokio::time::timeout(Duration::from_secs(5), s.finished()).await;
                    drop(s);
                    ep.close(Duration::from_millis(200)).await;
                    r
                }
                StreamKind::Tcp => {
                    let l = tokio::net::TcpListener::bind(LOCALHOST).await.unwrap();
                    addr_tx.send(l.local_addr().unwrap()).unwrap();
                    let (mut s, _) = l.accept().await.unwrap();
                    s.set_nodelay(true).unwrap();
                    read_counted(&mut s).await
                }
                StreamKind::TcpTls => {
                    let tls = crate::tls::tls_publish();
                    let l = tokio::net::TcpListener::bind(LOCALHOST).await.unwrap();
                    addr_tx.send(l.local_addr().unwrap()).unwrap();
                    let (s, _) = l.accept().await.unwrap();
                    s.set_nodelay(true).unwrap();
                    let mut s = tls.accept(s).await;
                    read_counted(&mut s).await
                }
                StreamKind::Quic => {
                    let ep = serve_local();
                    addr_tx.send(ep.local_addr().unwrap()).unwrap();
                    let conn = ep.accept().await.unwrap().await.unwrap();
                    let mut s = conn.accept_uni().await.unwrap();
                    let r = read_counted(&mut s).await;
                    conn.close(0u32.into(), b"done");
                    ep.wait_idle().await;
                    r
                }
            }
        })
    });
    let to = addr_rx.recv().expect("receiver address");
    let sender =
        std::thread::spawn(move || runtime(0).block_on(write_side(kind, to, blocks, datagram)));
    let start = sender.join().expect("sender");
    let (bytes, crc, end) = receiver.join().expect("receiver");
    Transfer {
        time: end.saturating_duration_since(start),
        bytes,
        crc,
    }
}

/// The writing side of [`transfer`]: connects to `to`, writes `blocks` MiB, closes; returns
/// when the first byte was written.
async fn write_side(kind: StreamKind, to: SocketAddr, blocks: u64, datagram: usize) -> Instant {
    match kind {
        StreamKind::Exon | StreamKind::ExonPlain => {
            let peer = NodeId::from_const(2);
            let ep = exon_bind(1, datagram, kind == StreamKind::ExonPlain);
            ep.add_peer(peer, to);
            let mut s = ep.open_stream(peer).expect("open_stream");
            let start = write_blocks(&mut s, blocks).await;
            s.shutdown().await.expect("shutdown");
            s.finished().await.expect("peer read everything");
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.expect("peer's end");
            drop(s);
            ep.close(Duration::from_secs(1)).await;
            start
        }
        StreamKind::Tcp => {
            let mut s = tokio::net::TcpStream::connect(to).await.unwrap();
            s.set_nodelay(true).unwrap();
            let start = write_blocks(&mut s, blocks).await;
            s.shutdown().await.unwrap();
            start
        }
        StreamKind::TcpTls => {
            let s = tokio::net::TcpStream::connect(to).await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut s = crate::tls::tls_connect(s).await;
            let start = write_blocks(&mut s, blocks).await;
            s.shutdown().await.unwrap();
            // Read until the reader closes: the server's session tickets, never read,
            // would otherwise make the close a reset, which can reach the reader before
            // the last bytes (ConnectionReset, one run in three).
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            start
        }
        StreamKind::Quic => {
            let (ep, conn) = connect_local(to).await;
            let mut s = conn.open_uni().await.unwrap();
            let start = write_blocks(&mut s, blocks).await;
            s.finish().unwrap();
            let _ = s.stopped().await;
            conn.close(0u32.into(), b"done");
            ep.wait_idle().await;
            start
        }
    }
}

/// The median of `v` (sorted here).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A request/reply system over exon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// Requests on one ordered channel, replies on one ordered channel back.
    Channel,
    /// Requests and replies as plain messages (`Handle::send`).
    Plain,
}

impl ChannelKind {
    /// Both, in report order.
    pub const ALL: [ChannelKind; 2] = [ChannelKind::Channel, ChannelKind::Plain];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ChannelKind::Channel => "exon_channel",
            ChannelKind::Plain => "exon_plain_msgs",
        }
    }
}

/// What one request/reply run measured.
pub struct Calls {
    /// Replies received (each matched to its caller and counter).
    pub replies: u64,
    /// Over this time.
    pub time: Duration,
    /// Each call's latency.
    pub latencies: Latencies,
}

/// A request: caller id, counter, padding to `size`.
fn request(caller: u32, counter: u64, size: usize) -> Bytes {
    let mut v = vec![0u8; size.max(12)];
    v[..4].copy_from_slice(&caller.to_le_bytes());
    v[4..12].copy_from_slice(&counter.to_le_bytes());
    v.into()
}

fn parse(p: &[u8]) -> (u32, u64) {
    (
        u32::from_le_bytes(p[..4].try_into().unwrap()),
        u64::from_le_bytes(p[4..12].try_into().unwrap()),
    )
}

/// `callers` concurrent callers for `secs` (after `warmup` untimed) over `kind`, sealed exon
/// endpoints with `datagram`-byte datagrams; `size`-byte requests and replies (the server
/// echoes).
pub fn channel_calls(
    kind: ChannelKind,
    callers: u32,
    size: usize,
    datagram: usize,
    warmup: Duration,
    secs: Duration,
) -> Calls {
    let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        runtime(0).block_on(serve_calls(kind, datagram, addr_tx, stop_rx));
    });
    let to = addr_rx.recv().expect("server address");
    let client = std::thread::spawn(move || {
        runtime(0).block_on(make_calls(kind, callers, size, datagram, to, warmup, secs))
    });
    let (replies, latencies) = client.join().expect("client");
    let _ = stop_tx.send(());
    server.join().expect("server");
    Calls {
        replies,
        time: secs,
        latencies,
    }
}

/// The server of [`channel_calls`]: sends its address to `addr_tx` once bound, then echoes
/// each request (on its own ordered channel back, or as a plain message) until `stop`.
async fn serve_calls(
    kind: ChannelKind,
    datagram: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut ep = exon_bind(2, datagram, false);
    addr_tx.send(ep.local_addr()).unwrap();
    // The channel back, once the client is known (its first request).
    let mut back = None;
    let mut next = 0u64;
    loop {
        let m = tokio::select! {
            m = ep.recv() => m.expect("endpoint running"),
            _ = &mut stop => break,
        };
        match (kind, m.kind()) {
            (ChannelKind::Channel, Kind::Channel { channel: 1, seq }) => {
                assert_eq!(seq, next, "requests in order, each once");
                next += 1;
                let back = back.get_or_insert_with(|| ep.channel(m.from, 1).expect("channel back"));
                drop(back.send(m.payload).await.expect("reply"));
            }
            (ChannelKind::Plain, Kind::Plain) => {
                drop(ep.send(m.from, m.payload).await.expect("reply"));
            }
            (_, k) => panic!("unexpected {k:?}"),
        }
    }
    ep.close(Duration::from_millis(200)).await;
}

/// The client of [`channel_calls`]: `callers` callers over one endpoint to the server at
/// `to`, for `secs` after `warmup`, while the endpoint's replies are routed to them. Returns
/// the calls measured and their latencies.
async fn make_calls(
    kind: ChannelKind,
    callers: u32,
    size: usize,
    datagram: usize,
    to: SocketAddr,
    warmup: Duration,
    secs: Duration,
) -> (u64, Latencies) {
    let server = NodeId::from_const(2);
    let mut ep = exon_bind(1, datagram, false);
    ep.add_peer(server, to);
    let ch = ep.channel(server, 1).expect("channel");
    // One waiter per caller; the receive loop routes replies by caller id.
    let mut waiters: Vec<tokio::sync::mpsc::Sender<(u64, Instant)>> = Vec::new();
    let mut tasks = Vec::new();
    let measuring = Instant::now() + warmup;
    let end = measuring + secs;
    for c in 0..callers {
        let (tx, rx) = tokio::sync::mpsc::channel::<(u64, Instant)>(1);
        waiters.push(tx);
        let (h, ch) = (ep.handle(), ch.clone());
        let caller = Caller {
            id: c,
            kind,
            ch,
            h,
            server,
            replies: rx,
        };
        tasks.push(tokio::spawn(caller.run(size, measuring, end)));
    }
    let router = route_replies(&mut ep, kind, size, &waiters);
    let all = async {
        let (mut n, mut lat) = (0, Latencies::default());
        for t in tasks {
            let (k, l) = t.await.expect("caller");
            n += k;
            lat.merge(&l);
        }
        (n, lat)
    };
    let (n, lat) = tokio::select! {
        r = all => r,
        _ = router => unreachable!(),
    };
    ep.close(Duration::from_millis(200)).await;
    (n, lat)
}

/// Hands each reply `ep` receives to the waiter of its caller (by caller id), checking that
/// the channel's replies come in order, each once, and their length (`size`). Runs as long
/// as the endpoint does.
async fn route_replies(
    ep: &mut Endpoint,
    kind: ChannelKind,
    size: usize,
    waiters: &[tokio::sync::mpsc::Sender<(u64, Instant)>],
) {
    let mut next = 0u64;
    loop {
        let m = ep.recv().await.expect("endpoint running");
        match (kind, m.kind()) {
            (ChannelKind::Channel, Kind::Channel { channel: 1, seq }) => {
                assert_eq!(seq, next, "replies in order, each once");
                next += 1;
            }
            (ChannelKind::Plain, Kind::Plain) => {}
            (_, k) => panic!("unexpected {k:?}"),
        }
        assert_eq!(m.payload.len(), size.max(12), "reply length");
        let (c, counter) = parse(&m.payload);
        let _ = waiters[c as usize].try_send((counter, Instant::now()));
    }
}

/// One caller of [`channel_calls`]: its id, the two ways its requests may go (`kind` says
/// which), and its replies, routed to it by id.
struct Caller {
    id: u32,
    kind: ChannelKind,
    ch: Channel,
    h: Handle,
    server: NodeId,
    replies: tokio::sync::mpsc::Receiver<(u64, Instant)>,
}

impl Caller {
    /// Calls (a `size`-byte request, then its reply) until `end`. Returns the calls made
    /// from `measuring` on, and their latencies.
    async fn run(mut self, size: usize, measuring: Instant, end: Instant) -> (u64, Latencies) {
        let c = self.id;
        let mut lat = Latencies::default();
        let mut n = 0u64;
        let mut counter = 0u64;
        loop {
            let sent = Instant::now();
            if sent >= end {
                break;
            }
            let req = request(c, counter, size);
            let r = match self.kind {
                ChannelKind::Channel => self.ch.send(req).await,
                ChannelKind::Plain => self.h.send(self.server, req).await,
            };
            drop(r.expect("send"));
            let (got, at) = self.replies.recv().await.expect("reply");
            assert_eq!(got, counter, "caller {c}: reply to its own request");
            counter += 1;
            if sent >= measuring {
                lat.record(at - sent);
                n += 1;
            }
        }
        (n, lat)
    }
}
