//! The endpoint processes the testbed starts inside its namespaces.
//!
//! The endpoint processes, each started by the harness inside a namespace: one-way sender
//! and receiver, RPC client and server, for exon, TCP (CUBIC or BBR) and QUIC.
//!
//! They talk to the harness in lines: on stdout one JSON object per report, its `event`
//! `READY`, `MEASURED`, `SENT` or `DONE` and its other fields strings (serde_json); on stdin
//! `STOP`, `EXPECT <n>`, and end of input to exit.

mod one_way;
mod rpc;

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use exon::proto::{CongestionControl, NodeId};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};

pub use one_way::unix_ms;

use crate::testbed::netns::{ADDR_A, MTU};
use crate::testbed::sys;

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
    /// Exon, one-way only: the frames over one exon byte stream (`Handle::open_stream`)
    /// instead of one message each. Not in [`System::ALL`]: named with `--systems`.
    ExonStream,
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
            System::ExonStream => "exon_stream",
        }
    }

    /// The system called `s`.
    pub fn parse(s: &str) -> Option<System> {
        System::ALL
            .into_iter()
            .chain([System::ExonStream])
            .find(|k| k.name() == s)
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
    /// headers), the window and envelopes, and a queue per peer of 1024 messages waiting for
    /// a slot (so 256 RPC callers do not wait, and what is queued at the end drains in about
    /// 10 s on a 1 Mbit/s link; tokens in flight are not queued).
    pub fn config(&self) -> exon::EndpointConfig {
        let mut cfg = crate::endpoint::exon_config(MTU - 28);
        let p = &mut cfg.protocol;
        p.flow.window = self.window;
        p.flow.envelope_target = self.envelopes.min(self.window);
        p.flow.envelope_low = (p.flow.envelope_target / 2).max(1);
        p.limits.max_queued_per_peer = 1024;
        p.flow.congestion = self.congestion;
        if let Some(c) = std::env::var("EXON_STREAM_CHUNK")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            cfg.flows.stream_chunk = c;
        }
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
            "recv" => one_way::recv(&args, ctl).await,
            "send" => one_way::send(&args, ctl).await,
            "server" => rpc::server(&args, ctl).await,
            "client" => rpc::client(&args, ctl).await,
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

/// Reports `tag` with `pairs` to the harness: one JSON line (see [`crate::testbed::netns::report`]).
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
    let (ep, cert) = crate::quic::quic_server(a.addr);
    let hex: String = cert.iter().map(|b| format!("{b:02x}")).collect();
    say("READY", &[("cert", hex)]);
    ep
}
