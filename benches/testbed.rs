//! The impaired-link testbed (the paper's Section V on one machine): exon, TCP with CUBIC,
//! TCP with BBR and QUIC between two network namespaces joined by a userspace link emulator
//! (delay, rate, random loss both ways, byte-sized tail-drop queue; seeded).
//!
//! ```text
//! cargo bench --bench testbed -- --pattern one-way --rate-mbit 100 --rtt-ms 10 --loss 0.05 --secs 10
//! cargo bench --bench testbed -- --pattern rpc --callers 16 --rate-mbit 100 --rtt-ms 10 --loss 0.01
//! cargo bench --bench testbed -- --matrix paper
//! ```
//!
//! Options: `--warmup S` (default 1), `--drain S` (default 20), `--queue-bytes B` (default one
//! bandwidth-delay product, at least 32 KiB), `--seed N` (default 1), `--exon-window N`
//! (default: exon's default, 1024), `--systems a,b`
//! (default all: exon,tcp_cubic,tcp_bbr,quic), `--out DIR` (matrix output, default
//! `docs/benchmarks`). Needs root and `/dev/net/tun`; otherwise it says why and exits 0.
//! Every namespace, device and process it creates is removed on exit, error or Ctrl-C.

#[path = "common/mod.rs"]
mod common;

#[path = "testbed/cell.rs"]
mod cell;
#[path = "testbed/emulator.rs"]
mod emulator;
#[path = "testbed/matrix.rs"]
mod matrix;
#[path = "testbed/netns.rs"]
mod netns;
#[path = "testbed/roles.rs"]
mod roles;
#[path = "testbed/svg.rs"]
mod svg;
#[path = "testbed/sys.rs"]
mod sys;

use std::time::Duration;

use cell::{Pattern, Timing};
use emulator::Impairment;
use roles::{ExonTuning, RoleArgs, System};

/// Everything the command line says.
struct Args {
    role: Option<String>,
    pattern: Pattern,
    matrix: Option<String>,
    rate_mbit: f64,
    rtt_ms: f64,
    loss: f64,
    secs: Option<f64>,
    warmup: f64,
    drain: f64,
    queue_bytes: Option<usize>,
    seed: u64,
    exon_window: Option<u64>,
    exon_envelopes: Option<u64>,
    systems: Vec<System>,
    out: String,
    // Endpoint processes only.
    system: Option<System>,
    addr: Option<String>,
    cert: Option<String>,
    callers: u64,
}

fn parse_args() -> Args {
    let mut a = Args {
        role: None,
        pattern: Pattern::OneWay,
        matrix: None,
        rate_mbit: 100.0,
        rtt_ms: 10.0,
        loss: 0.0,
        secs: None,
        warmup: 1.0,
        drain: 20.0,
        queue_bytes: None,
        seed: 1,
        exon_window: None,
        exon_envelopes: None,
        systems: System::ALL.to_vec(),
        out: "docs/benchmarks".into(),
        system: None,
        addr: None,
        cert: None,
        callers: 1,
    };
    let mut pattern = "one-way".to_string();
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            // Passed by `cargo bench` to every bench target.
            "--bench" => {}
            "--pattern" => pattern = val(),
            "--matrix" => a.matrix = Some(val()),
            "--rate-mbit" => a.rate_mbit = num(&val()),
            "--rtt-ms" => a.rtt_ms = num(&val()),
            "--loss" => a.loss = num(&val()),
            "--secs" => a.secs = Some(num(&val())),
            "--warmup" => a.warmup = num(&val()),
            "--drain" => a.drain = num(&val()),
            "--queue-bytes" => a.queue_bytes = Some(num(&val())),
            "--seed" => a.seed = num(&val()),
            "--exon-window" => a.exon_window = Some(num(&val())),
            "--exon-envelopes" => a.exon_envelopes = Some(num(&val())),
            "--callers" => a.callers = num(&val()),
            "--out" => a.out = val(),
            "--systems" => {
                a.systems = val()
                    .split(',')
                    .map(|s| System::parse(s).unwrap_or_else(|| usage(&format!("system {s}?"))))
                    .collect()
            }
            "--role" => a.role = Some(val()),
            "--system" => a.system = System::parse(&val()),
            "--addr" => a.addr = Some(val()),
            "--cert" => a.cert = Some(val()),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    a.pattern = match pattern.as_str() {
        "one-way" => Pattern::OneWay,
        "rpc" => Pattern::Rpc { callers: a.callers },
        p => usage(&format!("unknown pattern {p:?} (one-way or rpc)")),
    };
    if !(0.0..1.0).contains(&a.loss) || a.rate_mbit <= 0.0 || a.rtt_ms < 0.0 || a.callers == 0 {
        usage("need 0 <= loss < 1, rate > 0, rtt >= 0, callers > 0");
    }
    a
}

fn num<T: std::str::FromStr>(s: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| usage(&format!("not a number: {s:?}")))
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "{msg}\nusage: testbed [--pattern one-way|rpc] [--callers N] [--rate-mbit M] \
         [--rtt-ms R] [--loss P] [--secs S] [--warmup S] [--drain S] [--queue-bytes B] \
         [--seed N] [--exon-window N] [--exon-envelopes N] [--systems exon,tcp_cubic,tcp_bbr,quic]\n       \
         testbed --matrix paper [--secs S] [--out DIR]"
    );
    std::process::exit(2)
}

/// The link of the command line.
fn impairment(a: &Args, rate_mbit: f64, rtt_ms: f64, loss: f64) -> Impairment {
    let rate_bps = (rate_mbit * 1e6) as u64;
    let rtt = Duration::from_secs_f64(rtt_ms / 1e3);
    Impairment {
        rate_bps,
        rtt,
        loss,
        queue_bytes: a
            .queue_bytes
            .unwrap_or_else(|| Impairment::default_queue(rate_bps, rtt)),
        seed: a.seed,
    }
}

/// Exon's tuning: its defaults (window 1024, 128 envelopes) on every link, unless given.
/// Its congestion controller, not a per-link window, keeps the link full and the queue
/// short.
fn exon_tuning(a: &Args, _imp: &Impairment) -> ExonTuning {
    let d = exon::Config::default();
    let window = a.exon_window.unwrap_or(d.window);
    ExonTuning {
        window,
        envelopes: a.exon_envelopes.unwrap_or(d.envelope_target).min(window),
    }
}

fn main() {
    let a = parse_args();
    if let Some(role) = a.role.clone() {
        return roles::run(role_args(&a, role));
    }
    if let Some(why) = netns::unsupported() {
        println!("testbed skipped: {why}");
        return;
    }
    sys::catch_interrupts();
    netns::remove_stale();
    let result = match a.matrix.as_deref() {
        Some("paper") => matrix::run_paper(&a),
        Some(m) => usage(&format!("unknown matrix {m:?} (paper)")),
        None => one_cell(&a),
    };
    if let Err(e) = result {
        eprintln!("testbed: {e}");
        std::process::exit(if sys::interrupted() { 130 } else { 1 });
    }
}

fn role_args(a: &Args, role: String) -> RoleArgs {
    let secs = |s: f64| Duration::from_secs_f64(s);
    RoleArgs {
        role,
        system: a.system.unwrap_or_else(|| usage("--system")),
        addr: num(a.addr.as_deref().unwrap_or_else(|| usage("--addr"))),
        cert: a.cert.clone(),
        warmup: secs(a.warmup),
        secs: secs(a.secs.unwrap_or(10.0)),
        callers: a.callers,
        exon: ExonTuning {
            window: a.exon_window.unwrap_or(1024),
            envelopes: a.exon_envelopes.unwrap_or(128),
        },
        drain: secs(a.drain),
    }
}

fn one_cell(a: &Args) -> netns::Result<()> {
    let imp = impairment(a, a.rate_mbit, a.rtt_ms, a.loss);
    let exon = exon_tuning(a, &imp);
    let timing = Timing {
        warmup: Duration::from_secs_f64(a.warmup),
        secs: Duration::from_secs_f64(a.secs.unwrap_or(10.0)),
        drain: Duration::from_secs_f64(a.drain),
    };
    let tb = netns::Testbed::new(imp)?;
    let what = match a.pattern {
        Pattern::OneWay => "one-way".to_string(),
        Pattern::Rpc { callers } => format!("rpc, {callers} callers"),
    };
    println!(
        "testbed: {what}, {imp}; {} B messages; {:.0} s measured after {:.0} s warm-up; exon \
         window {}, envelopes {}, datagrams {} B; emulator real-time: {}",
        common::PAYLOAD,
        timing.secs.as_secs_f64(),
        timing.warmup.as_secs_f64(),
        exon.window,
        exon.envelopes,
        netns::MTU - 28,
        tb.realtime()
    );
    let mut port = 5000;
    let out = cell::run_cell(&tb, imp, a.pattern, timing, exon, &a.systems, &mut port)?;
    drop(tb);
    cell::print_cell(&imp, a.pattern, exon, &out);
    Ok(())
}
