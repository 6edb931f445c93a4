//! HTTP/1.1 over exon streams, with hyper's own client and server: a request whose body is
//! in flight while the client's link is cut for seconds and the client moves to a new
//! address, answered exactly; and a large transfer through `tokio::io::copy`, checked byte
//! for byte.
//!
//! The large transfer's size is `EXON_STREAM_MIB` (default 32 MiB); by hand, in release:
//! `EXON_STREAM_MIB=256 cargo test --release -p exon --test endpoint large -- --nocapture`.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::endpoint::{DatagramSocket, Endpoint};
use exon::NodeId;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::timeout;

use super::common::{cfg, security};

const CLIENT: NodeId = NodeId::from_const(1);
const SERVER: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(30);

/// A socket that can be cut (every datagram sent or received is dropped, and counted) and
/// moved to a new port: receives follow the current socket at once, even one already
/// waiting on the old socket.
#[derive(Debug)]
struct Movable {
    current: watch::Sender<Arc<UdpSocket>>,
    cut: AtomicBool,
    dropped_out: AtomicU64,
    dropped_in: AtomicU64,
}

impl Movable {
    async fn bind() -> Arc<Movable> {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        Arc::new(Movable {
            current: watch::Sender::new(Arc::new(sock)),
            cut: AtomicBool::new(false),
            dropped_out: AtomicU64::new(0),
            dropped_in: AtomicU64::new(0),
        })
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }

    /// Moves to a new port (the old socket is closed once nothing uses it); the new address.
    async fn rebind(&self) -> SocketAddr {
        let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = sock.local_addr().unwrap();
        self.current.send_replace(Arc::new(sock));
        addr
    }

    fn dropped(&self) -> (u64, u64) {
        (
            self.dropped_out.load(Ordering::SeqCst),
            self.dropped_in.load(Ordering::SeqCst),
        )
    }
}

impl DatagramSocket for Movable {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        if self.cut.load(Ordering::SeqCst) {
            self.dropped_out.fetch_add(1, Ordering::SeqCst);
            return Ok(buf.len());
        }
        let sock = self.current.borrow().clone();
        sock.send_to(buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            // Subscribed before the socket is read: a move after it wakes `changed`.
            let mut moved = self.current.subscribe();
            let sock = moved.borrow_and_update().clone();
            tokio::select! {
                r = sock.recv_from(&mut *buf) => {
                    let got = r?;
                    if self.cut.load(Ordering::SeqCst) {
                        self.dropped_in.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    return Ok(got);
                }
                _ = moved.changed() => continue,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.current.borrow().local_addr()
    }
}

/// A block of pattern bytes, its length a prime so that a shifted or repeated range of a
/// stream does not match: byte `i` of a stream is `block()[i % BLOCK]`.
const BLOCK: usize = 1_000_003;

fn block() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| {
        (0..BLOCK as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) as u8)
            .collect()
    })
}

/// `len` stream bytes from offset `from`.
fn pattern(from: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let b = block();
    let mut at = from;
    while v.len() < len {
        let i = at % BLOCK;
        let n = (BLOCK - i).min(len - v.len());
        v.extend_from_slice(&b[i..i + n]);
        at += n;
    }
    v
}

/// FNV-1a, 64 bits.
fn checksum(sum: u64, data: &[u8]) -> u64 {
    data.iter().fold(sum, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// A request body fed piece by piece through a channel (no length: chunked encoding).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// The server's answer to a request: its body reversed, with its length and checksum in
/// headers. `progress` follows the bytes of the request body read so far.
async fn answer(
    req: Request<Incoming>,
    progress: watch::Sender<u64>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let mut body = req.into_body();
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            got.extend_from_slice(&data);
            progress.send_replace(got.len() as u64);
        }
    }
    let sum = checksum(FNV_START, &got);
    let len = got.len();
    got.reverse();
    Ok(Response::builder()
        .header("x-len", len.to_string())
        .header("x-sum", sum.to_string())
        .body(Full::new(Bytes::from(got)))
        .unwrap())
}

/// Checks one response against the body sent.
async fn check(resp: Response<Incoming>, sent: &[u8]) {
    assert_eq!(resp.status(), 200);
    let header = |name: &str| -> u64 { resp.headers()[name].to_str().unwrap().parse().unwrap() };
    assert_eq!(header("x-len"), sent.len() as u64);
    assert_eq!(header("x-sum"), checksum(FNV_START, sent));
    let body = timeout(LIMIT, resp.into_body().collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    assert_eq!(body.len(), sent.len());
    assert!(
        body.iter().eq(sent.iter().rev()),
        "response is the request body reversed, exactly"
    );
}

#[tokio::test]
async fn hyper_requests_over_a_stream_are_exact() {
    exchange(1 << 20, false).await;
}

/// The outage found two faults, fixed since: chunks held in the server's reorder buffer
/// behind a lost one were never answered (not taken), so the client took them for lost at
/// every timeout and the stream crawled (now they travel as `Node::send_reported` and the
/// server's GOT reports them held); and with these fast timers the server evicts the silent
/// client's record during the cut, so a chunk comes back in doubt, which broke the stream
/// (now the chunk is sent again: the stream's numbering tells a copy from a first arrival).
#[tokio::test]
async fn hyper_request_survives_an_outage_and_an_address_change() {
    exchange(4 << 20, true).await;
}

/// A POST of `total` pattern bytes, streamed in pieces, and a second request on the same
/// connection; with `outage`, the client's link is cut for 3 s in the middle of the upload
/// and the client moves to a new port during the cut.
async fn exchange(total: usize, outage: bool) {
    const PIECE: usize = 64 << 10;
    const OUTAGE: Duration = Duration::from_secs(3);

    let sock = Movable::bind().await;
    let client = Endpoint::builder(CLIENT)
        .security(security(CLIENT))
        .config(cfg())
        .with_socket(sock.clone())
        .unwrap();
    let mut server = Endpoint::builder(SERVER)
        .security(security(SERVER))
        .config(cfg())
        .with_socket(UdpSocket::bind("127.0.0.1:0").await.unwrap())
        .unwrap();
    client.add_peer(SERVER, server.local_addr());
    let server_handle = server.handle();

    // The server: hyper's HTTP/1.1 connection on each stream accepted.
    let (progress, mut upload) = watch::channel(0u64);
    let (conn_done, server_conn) = oneshot::channel();
    let server_task = tokio::spawn(async move {
        let stream = server.accept_stream().await.unwrap();
        assert_eq!(stream.peer(), CLIENT);
        let svc = service_fn(move |req| answer(req, progress.clone()));
        let r = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), svc)
            .await;
        let _ = conn_done.send(r.map_err(|e| e.to_string()));
        server
    });

    // The client.
    let stream = client.open_stream(SERVER).unwrap();
    let (mut sender, conn) = timeout(
        LIMIT,
        hyper::client::conn::http1::handshake::<_, ChannelBody>(TokioIo::new(stream)),
    )
    .await
    .unwrap()
    .unwrap();
    let client_conn = tokio::spawn(conn);
    let sent = pattern(0, total);
    let (pieces, rx) = mpsc::channel(2);
    let (go_on, resume) = oneshot::channel::<()>();
    // The first half goes at once; the rest once the link is cut (so it waits in the
    // stream's buffers and window through the outage).
    let feeder = tokio::spawn({
        let sent = sent.clone();
        async move {
            let mut resume = Some(resume);
            for (i, piece) in sent.chunks(PIECE).enumerate() {
                if i * PIECE >= total / 2 {
                    if let Some(r) = resume.take() {
                        r.await.unwrap();
                    }
                }
                pieces.send(Bytes::copy_from_slice(piece)).await.unwrap();
            }
        }
    });
    let req = Request::post("/reverse")
        .header("host", "server")
        .body(ChannelBody(rx))
        .unwrap();
    let response = tokio::spawn(sender.send_request(req));

    if !outage {
        go_on.send(()).unwrap();
        let resp = timeout(LIMIT, response).await.unwrap().unwrap().unwrap();
        check(resp, &sent).await;
        timeout(LIMIT, feeder).await.unwrap().unwrap();
        second_and_hang_up(sender, client_conn, server_conn).await;
        let _server = timeout(LIMIT, server_task).await.unwrap().unwrap();
        client.close(Duration::ZERO).await;
        return;
    }
    // Mid-upload: the server has read a quarter of the body.
    timeout(LIMIT, upload.wait_for(|&n| n >= total as u64 / 4))
        .await
        .unwrap()
        .unwrap();
    let before = server_handle.stats().await.unwrap();
    let old_addr = sock.local_addr().unwrap();
    sock.set_cut(true);
    go_on.send(()).unwrap();
    tokio::time::sleep(OUTAGE / 3).await;
    let new_addr = sock.rebind().await;
    assert_ne!(new_addr, old_addr);
    tokio::time::sleep(OUTAGE - OUTAGE / 3).await;
    let read_in_outage = *upload.borrow();
    assert!(
        read_in_outage < total as u64,
        "the upload was still in flight: {read_in_outage}"
    );
    assert!(!response.is_finished());
    sock.set_cut(false);
    let (dropped_out, dropped_in) = sock.dropped();
    assert!(
        dropped_out > 0 && dropped_in > 0,
        "the outage dropped datagrams both ways: {dropped_out} out, {dropped_in} in"
    );

    // The request completes, exact.
    let resp = timeout(LIMIT, response).await.unwrap().unwrap().unwrap();
    check(resp, &sent).await;
    timeout(LIMIT, feeder).await.unwrap().unwrap();

    // The server saw the client at its new address (a challenge, then the move).
    let after = server_handle.stats().await.unwrap();
    assert!(
        after.path_challenges > before.path_challenges,
        "challenges {} -> {}",
        before.path_challenges,
        after.path_challenges
    );
    assert!(
        after.address_updates > before.address_updates,
        "address updates {} -> {}",
        before.address_updates,
        after.address_updates
    );

    second_and_hang_up(sender, client_conn, server_conn).await;
    let _server = timeout(LIMIT, server_task).await.unwrap().unwrap();
    client.close(Duration::ZERO).await;
}

/// A second request on the same connection; then the client hangs up.
async fn second_and_hang_up(
    mut sender: hyper::client::conn::http1::SendRequest<ChannelBody>,
    client_conn: tokio::task::JoinHandle<hyper::Result<()>>,
    server_conn: oneshot::Receiver<Result<(), String>>,
) {
    timeout(LIMIT, sender.ready()).await.unwrap().unwrap();
    let second = pattern(12_345, 300_000);
    let (pieces, rx) = mpsc::channel(1);
    pieces.send(Bytes::from(second.clone())).await.unwrap();
    drop(pieces);
    let req = Request::post("/reverse")
        .header("host", "server")
        .body(ChannelBody(rx))
        .unwrap();
    let resp = timeout(LIMIT, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    check(resp, &second).await;

    // The client hangs up; its connection ends cleanly. The server's connection ends too,
    // cleanly or (hyper may drop the stream without a shutdown) with the stream's reset.
    drop(sender);
    timeout(LIMIT, client_conn).await.unwrap().unwrap().unwrap();
    let server_end = timeout(LIMIT, server_conn).await.unwrap().unwrap();
    if let Err(e) = server_end {
        assert!(
            e.contains("reset") || e.contains("connection"),
            "server connection: {e}"
        );
    }
}

/// Reads `len` pattern bytes from offset 0.
struct PatternReader {
    at: usize,
    len: usize,
}

impl AsyncRead for PatternReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let i = self.at % BLOCK;
        let n = (BLOCK - i).min(self.len - self.at).min(buf.remaining());
        buf.put_slice(&block()[i..i + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// Chunks are lost on loopback too (bursts overflow the socket's receive buffer) and the
/// ones after them held, as in the outage above (this stalled at 16 MiB before chunks were
/// reported held).
#[tokio::test]
async fn large_transfer_is_exact() {
    let mib: usize = std::env::var("EXON_STREAM_MIB")
        .ok()
        .map(|v| v.parse().expect("EXON_STREAM_MIB: a number of MiB"))
        .unwrap_or(32);
    let len = mib << 20;
    let limit = LIMIT.max(Duration::from_secs(mib as u64));
    let start = |id| async move {
        // Default datagram sizes: path MTU discovery grows them to 64 KiB during the
        // transfer. (This test pinned 1 452-byte datagrams while a socket given to
        // `with_socket` kept the kernel's 208 KiB receive buffer: three 64 KiB datagrams
        // filled it, and the transfer crawled at 5-28 MiB/s. The endpoint now gives every
        // socket `EndpointConfig::socket_buffer`.)
        let c = cfg();
        Endpoint::builder(id)
            .security(security(id))
            .config(c)
            .with_socket(UdpSocket::bind("127.0.0.1:0").await.unwrap())
            .unwrap()
    };
    let (a, mut b) = (start(CLIENT).await, start(SERVER).await);
    a.add_peer(SERVER, b.local_addr());
    b.add_peer(CLIENT, a.local_addr());

    let began = Instant::now();
    let writer = tokio::spawn({
        let mut s = a.open_stream(SERVER).unwrap();
        async move {
            let mut src = PatternReader { at: 0, len };
            let n = tokio::io::copy(&mut src, &mut s).await.unwrap();
            s.shutdown().await.unwrap();
            // The reader shuts its side down once it read everything: a clean close.
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty());
            s.finished().await.unwrap();
            assert!(s.is_closed());
            n
        }
    });
    let mut s = timeout(LIMIT, b.accept_stream()).await.unwrap().unwrap();
    let progress = AtomicU64::new(0);
    let reader = async {
        let mut buf = vec![0u8; 256 << 10];
        let mut at = 0usize;
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                return at;
            }
            // Compared against the pattern block by block, no second copy.
            let mut off = 0;
            while off < n {
                let i = (at + off) % BLOCK;
                let m = (BLOCK - i).min(n - off);
                assert!(
                    buf[off..off + m] == block()[i..i + m],
                    "bytes differ in {}..{}",
                    at + off,
                    at + off + m
                );
                off += m;
            }
            at += n;
            progress.store(at as u64, Ordering::Relaxed);
        }
    };
    let Ok(got) = timeout(limit, reader).await else {
        panic!(
            "transfer timed out after {} of {len} bytes\nsender {:?}\nreceiver {:?}",
            progress.load(Ordering::Relaxed),
            a.stats().await,
            b.stats().await
        );
    };
    assert_eq!(got, len);
    timeout(LIMIT, s.shutdown()).await.unwrap().unwrap();
    let wrote = timeout(limit, writer).await.unwrap().unwrap();
    assert_eq!(wrote, len as u64);
    assert!(s.is_closed());
    let secs = began.elapsed().as_secs_f64();
    println!(
        "large transfer: {mib} MiB in {secs:.2} s, {:.1} MiB/s",
        mib as f64 / secs
    );
}
