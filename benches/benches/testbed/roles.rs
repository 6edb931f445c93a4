//! The endpoint processes, each started by the harness inside a namespace: one-way sender
//! and receiver, RPC client and server, for exon, TCP (CUBIC or BBR) and QUIC.
//!
//! They talk to the harness in lines: on stdout one JSON object per report, its `event`
//! `READY`, `MEASURED`, `SENT` or `DONE` and its other fields strings (serde_json); on stdin
//! `STOP`, `EXPECT <n>`, and end of input to exit.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exon::proto::{CongestionControl, NodeId};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::common::{self, Caller, Pending, Seen};
use crate::netns::{ADDR_A, MTU};
use crate::sys;

/// A measured system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// Exon endpoints over UDP.
    Exon,
    /// TCP with CUBIC congestion control (set per socket).
    TcpCubic,
    /// TCP with BBR congestion control (set per socket).
    TcpBbr,
    /// QUIC (quinn, its default congestion control).
    Quic,
}

impl System {
    /// Every system, in report order.
    pub const ALL: [System; 4] = [System::Exon, System::TcpCubic, System::TcpBbr, System::Quic];

    /// The name in reports and `key=value` lines.
    pub fn name(self) -> &'static str {
        match self {
            System::Exon => "exon",
            System::TcpCubic => "tcp_cubic",
            System::TcpBbr => "tcp_bbr",
            System::Quic => "quic",
        }
    }

    /// The system called `s`.
    pub fn parse(s: &str) -> Option<System> {
        System::ALL.into_iter().find(|k| k.name() == s)
    }

    fn congestion(self) -> &'static str {
        match self {
            System::TcpBbr => "bbr",
            _ => "cubic",
        }
    }
}

/// What an endpoint process is told on its command line.
#[derive(Debug, Clone)]
pub struct RoleArgs {
    /// `recv`, `send`, `server` or `client`.
    pub role: String,
    /// The system.
    pub system: System,
    /// The receiver's or server's address.
    pub addr: SocketAddr,
    /// The QUIC server's certificate (hex DER), for the client side.
    pub cert: Option<String>,
    /// Time from the first delivery to the start of the measurement.
    pub warmup: Duration,
    /// Measured time.
    pub secs: Duration,
    /// Concurrent RPC callers.
    pub callers: u64,
    /// Bytes per message (one-way), per request and per reply (RPC).
    pub size: usize,
    /// Exon's window and envelopes.
    pub exon: ExonTuning,
    /// How long the end may take: outstanding messages or replies after the measurement.
    pub drain: Duration,
    /// One-way receiver only: sample the count of delivered messages this often and report
    /// the samples with `DONE` (the rate of each flow over time, for several flows).
    pub series: Option<Duration>,
    /// TCP sockets have the kernel pace them ([`sys::set_tcp_pacing`]).
    pub tcp_pacing: bool,
    /// TCP's largest segment, if not the path's.
    pub tcp_mss: Option<u32>,
}

/// Exon's flow-control settings ([`Default`]: exon's own defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExonTuning {
    /// Slots held per destination (envelopes plus unacknowledged messages).
    pub window: u64,
    /// Envelopes kept ready (`envelope_target`; the low watermark is half).
    pub envelopes: u64,
    /// The congestion controller.
    pub congestion: CongestionControl,
}

impl Default for ExonTuning {
    fn default() -> Self {
        let d = exon::Config::default();
        ExonTuning {
            window: d.flow.window,
            envelopes: d.flow.envelope_target,
            congestion: d.flow.congestion,
        }
    }
}

/// The name of a congestion controller on the command line and in reports.
pub fn congestion_name(c: CongestionControl) -> &'static str {
    match c {
        CongestionControl::Bbr => "bbr",
        CongestionControl::NewReno => "newreno",
        CongestionControl::Off => "off",
    }
}

/// The congestion controller called `s`.
pub fn congestion_parse(s: &str) -> Option<CongestionControl> {
    [
        CongestionControl::Bbr,
        CongestionControl::NewReno,
        CongestionControl::Off,
    ]
    .into_iter()
    .find(|c| congestion_name(*c) == s)
}

impl ExonTuning {
    /// The endpoint configuration: datagrams that fit the TUN MTU (less IPv4 and UDP
    /// headers), the window and envelopes, and a queue per peer of one window (at least 512,
    /// so that 256 RPC callers do not wait).
    pub fn config(&self) -> exon::EndpointConfig {
        let mut cfg = common::exon_config(MTU - 28);
        let p = &mut cfg.protocol;
        p.flow.window = self.window;
        p.flow.envelope_target = self.envelopes.min(self.window);
        p.flow.envelope_low = (p.flow.envelope_target / 2).max(1);
        p.limits.max_queued_per_peer = (self.window as usize).max(512);
        p.flow.congestion = self.congestion;
        cfg
    }
}

/// Runs the role in a current-thread runtime and exits.
pub fn run(args: RoleArgs) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let ctl = Control::from_stdin();
        match args.role.as_str() {
            "recv" => recv(&args, ctl).await,
            "send" => send(&args, ctl).await,
            "server" => server(&args, ctl).await,
            "client" => client(&args, ctl).await,
            r => panic!("unknown role {r}"),
        }
    });
}

/// The harness's commands: `stop` is set by `STOP` or the end of input; other lines go to
/// `lines`, which ends with the input.
struct Control {
    stop: Arc<AtomicBool>,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Control {
    fn from_stdin() -> Control {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, lines) = mpsc::unbounded_channel();
        let s = stop.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if line.trim() == "STOP" {
                    s.store(true, Ordering::SeqCst);
                } else if tx.send(line).is_err() {
                    break;
                }
            }
            s.store(true, Ordering::SeqCst);
        });
        Control { stop, lines }
    }

    /// Resolves at the end of input (the harness is done with this process).
    async fn until_eof(&mut self) {
        while self.lines.recv().await.is_some() {}
    }

    /// A oneshot that fires at the end of input (to stop a server loop).
    fn eof_signal(mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            self.until_eof().await;
            let _ = tx.send(());
        });
        rx
    }
}

/// Reports `tag` with `pairs` to the harness: one JSON line (see [`crate::netns::report`]).
fn say(tag: &str, pairs: &[(&str, String)]) {
    let mut line = serde_json::Map::new();
    line.insert("event".into(), tag.into());
    for (k, v) in pairs {
        line.insert((*k).into(), v.as_str().into());
    }
    println!("{}", serde_json::Value::Object(line));
}

/// Sleeps in small steps until `f` holds or `deadline` passes; true if it held.
async fn wait_for(deadline: Instant, f: impl Fn() -> bool) -> bool {
    while !f() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

fn exon_peer() -> NodeId {
    NodeId::from_const(2)
}

fn local_a() -> SocketAddr {
    format!("{ADDR_A}:0").parse().unwrap()
}

async fn tcp_listen(a: &RoleArgs) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sock.set_reuseaddr(true).unwrap();
    sys::set_congestion(sock.as_raw_fd(), a.system.congestion()).expect("TCP_CONGESTION");
    if let Some(mss) = a.tcp_mss {
        sys::set_tcp_mss(sock.as_raw_fd(), mss).expect("TCP_MAXSEG");
    }
    sock.bind(a.addr).unwrap();
    let l = sock.listen(16).unwrap();
    say("READY", &[]);
    let (s, _) = l.accept().await.unwrap();
    tcp_tune(&s, a);
    s
}

async fn tcp_connect(a: &RoleArgs) -> TcpStream {
    let sock = TcpSocket::new_v4().unwrap();
    sys::set_congestion(sock.as_raw_fd(), a.system.congestion()).expect("TCP_CONGESTION");
    if let Some(mss) = a.tcp_mss {
        sys::set_tcp_mss(sock.as_raw_fd(), mss).expect("TCP_MAXSEG");
    }
    let s = sock.connect(a.addr).await.unwrap();
    tcp_tune(&s, a);
    s
}

/// No Nagle; the congestion control asked for, checked and reported on stderr.
fn tcp_tune(s: &TcpStream, a: &RoleArgs) {
    let system = a.system;
    s.set_nodelay(true).unwrap();
    let cc = sys::set_congestion(s.as_raw_fd(), system.congestion()).expect("TCP_CONGESTION");
    assert_eq!(cc, system.congestion(), "congestion control not applied");
    if a.tcp_pacing {
        sys::set_tcp_pacing(s.as_raw_fd()).expect("SO_MAX_PACING_RATE");
    }
}

fn quic_cert(a: &RoleArgs) -> rustls::pki_types::CertificateDer<'static> {
    let hex = a.cert.as_deref().expect("--cert");
    let der: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex certificate"))
        .collect();
    der.into()
}

fn quic_server(a: &RoleArgs) -> quinn::Endpoint {
    let (ep, cert) = common::quic_server(a.addr);
    let hex: String = cert.iter().map(|b| format!("{b:02x}")).collect();
    say("READY", &[("cert", hex)]);
    ep
}

// ------------------------------------------------------------------------------------------
// One-way
// ------------------------------------------------------------------------------------------

/// What a one-way receiver task shares: distinct messages verified, highest sequence.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    max_seq: AtomicU64,
}

impl Tally {
    fn record(&self, seen: &mut Seen, p: &[u8], size: usize) {
        let seq = common::seq_of(p, size);
        seen.record(seq);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
        self.count.store(seen.count(), Ordering::Release);
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }
}

async fn read_all<R: AsyncRead + Unpin>(r: R, tally: Arc<Tally>, size: usize) {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let (mut seen, mut buf) = (Seen::default(), Vec::new());
    while common::read_frame(&mut r, &mut buf, size).await {
        tally.record(&mut seen, &buf, size);
    }
}

/// One-way receiver: verifies every message, measures goodput over `secs` after `warmup`
/// from the first delivery, then checks that all `EXPECT`ed messages arrived.
async fn recv(a: &RoleArgs, mut ctl: Control) {
    let tally = Arc::new(Tally::default());
    let t = tally.clone();
    let size = a.size;
    let mut keep = None; // the QUIC endpoint, alive until the end
    match a.system {
        System::Exon => {
            let mut ep = common::exon_endpoint(a.addr, 2, a.exon.config());
            say("READY", &[]);
            tokio::spawn(async move {
                let mut seen = Seen::default();
                while let Some(m) = ep.recv().await {
                    t.record(&mut seen, &m.payload, size);
                }
            });
        }
        System::TcpCubic | System::TcpBbr => {
            let s = tcp_listen(a).await;
            tokio::spawn(read_all(s, t, size));
        }
        System::Quic => {
            let ep = quic_server(a);
            let conn = ep.accept().await.unwrap().await.unwrap();
            keep = Some((ep, conn.clone()));
            tokio::spawn(async move { read_all(conn.accept_uni().await.unwrap(), t, size).await });
        }
    }
    let series = a.series.map(|every| sample(&tally, every));
    let far = Instant::now() + Duration::from_secs(3600);
    wait_for(far, || tally.count() > 0).await;
    tokio::time::sleep(a.warmup).await;
    let (c0, t0) = (tally.count(), Instant::now());
    tokio::time::sleep(a.secs).await;
    let (c1, t1) = (tally.count(), Instant::now());
    let rate = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
    say(
        "MEASURED",
        &[
            ("rate", format!("{rate:.1}")),
            ("in_window", (c1 - c0).to_string()),
        ],
    );

    // The end: every message the sender wrote must arrive, exactly once.
    let expected: u64 = loop {
        let line = ctl.lines.recv().await.expect("EXPECT from the harness");
        if let Some(n) = line.strip_prefix("EXPECT ") {
            break n.trim().parse().expect("EXPECT count");
        }
    };
    let complete = wait_for(Instant::now() + a.drain, || tally.count() >= expected).await;
    let max_seq = tally.max_seq.load(Ordering::Relaxed);
    assert!(
        tally.count() == 0 || max_seq < expected,
        "message {max_seq} never sent"
    );
    let mut done = vec![
        ("rate", format!("{rate:.1}")),
        ("delivered", tally.count().to_string()),
        ("expected", expected.to_string()),
        ("complete", complete.to_string()),
    ];
    if let (Some((t0_ms, samples)), Some(every)) = (series, a.series) {
        let samples = samples.lock().unwrap();
        let list: Vec<String> = samples.iter().map(u64::to_string).collect();
        done.push(("series_t0_ms", t0_ms.to_string()));
        done.push(("series_ms", every.as_millis().to_string()));
        done.push(("series", list.join(",")));
    }
    say("DONE", &done);
    ctl.until_eof().await;
    if let Some((ep, conn)) = keep {
        conn.close(0u32.into(), b"done");
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
    }
}

/// Milliseconds since the Unix epoch: the one clock that the receivers of several flows
/// (separate processes) and the harness share.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Samples `tally`'s count every `every` from now on (the first sample at once); returns
/// the wall-clock time of the first sample and the samples so far.
fn sample(tally: &Arc<Tally>, every: Duration) -> (u64, Arc<Mutex<Vec<u64>>>) {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let (t, s) = (tally.clone(), samples.clone());
    let t0 = unix_ms();
    tokio::spawn(async move {
        // Late ticks fire in a burst, so sample k stays at about t0 + k * every.
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            s.lock().unwrap().push(t.count());
        }
    });
    (t0, samples)
}

/// Writes frames of `size`-byte messages with sequence numbers from 0 until `stop`; returns
/// the count and `w`.
async fn write_until<W: AsyncWrite + Unpin>(w: W, stop: &AtomicBool, size: usize) -> (u64, W) {
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        common::write_frame(&mut w, &common::payload(seq, size)).await;
        seq += 1;
    }
    w.flush().await.unwrap();
    (seq, w.into_inner())
}

/// One-way sender: sends as fast as the system lets it until `STOP`, says how many it
/// sent, and keeps its side open (retransmitting) until the end of input.
async fn send(a: &RoleArgs, mut ctl: Control) {
    let stop = ctl.stop.clone();
    match a.system {
        System::Exon => {
            let ep = common::exon_endpoint(local_a(), 1, a.exon.config());
            ep.add_peer(exon_peer(), a.addr);
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                drop(
                    ep.send(exon_peer(), common::payload(seq, a.size))
                        .await
                        .expect("send"),
                );
                seq += 1;
            }
            let s = ep.stats().await.expect("endpoint running");
            say(
                "SENT",
                &[
                    ("n", seq.to_string()),
                    ("retransmissions", s.node.retransmissions.to_string()),
                    (
                        "spurious_found",
                        s.node.spurious_retransmissions.to_string(),
                    ),
                    ("losses_detected", s.node.losses_detected.to_string()),
                    ("timeouts", s.node.timeouts.to_string()),
                    ("datagrams_out", s.node.datagrams_out.to_string()),
                ],
            );
            ctl.until_eof().await;
            ep.close(Duration::from_millis(200)).await;
        }
        System::TcpCubic | System::TcpBbr => {
            let s = tcp_connect(a).await;
            let (n, mut s) = write_until(s, &stop, a.size).await;
            s.shutdown().await.ok();
            say("SENT", &[("n", n.to_string())]);
            ctl.until_eof().await;
        }
        System::Quic => {
            let (ep, conn) = common::quic_connect(local_a(), a.addr, quic_cert(a)).await;
            let s = conn.open_uni().await.unwrap();
            let (n, mut s) = write_until(s, &stop, a.size).await;
            s.finish().unwrap();
            let st = conn.stats();
            say(
                "SENT",
                &[
                    ("n", n.to_string()),
                    ("lost_packets", st.path.lost_packets.to_string()),
                ],
            );
            ctl.until_eof().await;
            conn.close(0u32.into(), b"done");
            let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
        }
    }
}

// ------------------------------------------------------------------------------------------
// RPC
// ------------------------------------------------------------------------------------------

/// RPC server: echoes every request (verified exactly once) until the end of input.
async fn server(a: &RoleArgs, ctl: Control) {
    let served = match a.system {
        System::Exon => {
            let ep = common::exon_endpoint(a.addr, 1, a.exon.config());
            say("READY", &[]);
            common::serve_exon(ep, ctl.eof_signal(), a.size).await
        }
        System::TcpCubic | System::TcpBbr => {
            let s = tcp_listen(a).await;
            common::serve_tcp(s, ctl.eof_signal(), a.size).await
        }
        System::Quic => {
            let ep = quic_server(a);
            let conn = ep.accept().await.unwrap().await.unwrap();
            let n = common::serve_quic(&conn, ctl.eof_signal(), a.size).await;
            conn.close(0u32.into(), b"done");
            n
        }
    };
    say("DONE", &[("served", served.to_string())]);
}

/// What the callers share: requests issued, answers counted in the window, latencies.
#[derive(Default)]
struct Calls {
    next: AtomicU64,
    measuring: AtomicBool,
    stopped: AtomicBool,
    outstanding: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
}

/// RPC client: `callers` concurrent callers in a loop; measures requests answered and their
/// latency over `secs` after `warmup`, then lets outstanding calls finish (up to `drain`).
async fn client(a: &RoleArgs, ctl: Control) {
    let pending = Pending::default();
    let mut tasks = Vec::new();
    let mut quic_ep = None;
    let caller = match a.system {
        System::Exon => {
            let ep = common::exon_endpoint(local_a(), 2, a.exon.config());
            ep.add_peer(NodeId::from_const(1), a.addr);
            common::exon_caller(ep, &pending, &mut tasks, a.size)
        }
        System::TcpCubic | System::TcpBbr => {
            common::tcp_caller(tcp_connect(a).await, &pending, &mut tasks, a.size)
        }
        System::Quic => {
            let (ep, conn) = common::quic_connect(local_a(), a.addr, quic_cert(a)).await;
            quic_ep = Some(ep);
            Caller::Quic(conn)
        }
    };
    let caller = Arc::new(caller);
    let calls = Arc::new(Calls::default());
    let size = a.size;
    for _ in 0..a.callers {
        let (caller, pending, calls) = (caller.clone(), pending.clone(), calls.clone());
        tokio::spawn(async move {
            while !calls.stopped.load(Ordering::Relaxed) {
                let seq = calls.next.fetch_add(1, Ordering::Relaxed);
                calls.outstanding.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let server = NodeId::from_const(1);
                let reply = common::call(&caller, server, &pending, seq, size).await;
                assert_eq!(
                    common::seq_of(&reply, size),
                    seq,
                    "reply to another request"
                );
                if calls.measuring.load(Ordering::Relaxed) {
                    calls.latencies.lock().unwrap().push(t.elapsed());
                }
                calls.outstanding.fetch_sub(1, Ordering::Relaxed);
            }
        });
    }
    tokio::time::sleep(a.warmup).await;
    calls.measuring.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    tokio::time::sleep(a.secs).await;
    calls.measuring.store(false, Ordering::SeqCst);
    let elapsed = t0.elapsed();
    calls.stopped.store(true, Ordering::SeqCst);
    let lat: common::Latencies = std::mem::take(&mut *calls.latencies.lock().unwrap())
        .into_iter()
        .collect();
    let drained = wait_for(Instant::now() + a.drain, || {
        calls.outstanding.load(Ordering::Relaxed) == 0
    })
    .await;
    let rate = lat.len() as f64 / elapsed.as_secs_f64();
    say(
        "DONE",
        &[
            ("rate", format!("{rate:.1}")),
            ("answered", lat.len().to_string()),
            ("p50_us", format!("{:.0}", lat.quantile_us(0.5))),
            ("p99_us", format!("{:.0}", lat.quantile_us(0.99))),
            ("issued", calls.next.load(Ordering::Relaxed).to_string()),
            (
                "unanswered",
                calls.outstanding.load(Ordering::Relaxed).to_string(),
            ),
            ("drained", drained.to_string()),
        ],
    );
    if let Caller::Quic(conn) = &*caller {
        conn.close(0u32.into(), b"done");
    }
    if let Some(ep) = quic_ep {
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
    }
    for t in tasks {
        t.abort();
    }
    drop(ctl);
}
