//! The impaired-link testbed (the paper's Section V on one machine): exon, TCP with CUBIC,
//! TCP with BBR and QUIC between two network namespaces joined by a userspace link emulator
//! (delay, rate, random loss and reordering both ways, byte-sized tail-drop queue; seeded).
//!
//! ```text
//! cargo bench -p exon-benches --bench testbed -- --pattern one-way --rate-mbit 100 --rtt-ms 10 --loss 0.05 --secs 10
//! cargo bench -p exon-benches --bench testbed -- --pattern rpc --callers 16 --rate-mbit 100 --rtt-ms 10 --loss 0.01
//! cargo bench -p exon-benches --bench testbed -- --matrix paper
//! cargo bench -p exon-benches --bench testbed -- --matrix paths      # 100 Mbit/s, RTT 50/200 ms, 0/1 % loss
//! cargo bench -p exon-benches --bench testbed -- --matrix fairness   # exon vs CUBIC, BBR, exon at once
//! cargo bench -p exon-benches --bench testbed -- --matrix all        # paper, paths, fairness in turn
//! cargo bench -p exon-benches --bench testbed -- --flows exon,tcp_cubic --rate-mbit 10 --rtt-ms 20 --plot flows.svg
//! cargo bench -p exon-benches --bench testbed -- --pattern one-way --rate-mbit 100 --rtt-ms 10 --reorder 0.5 --secs 12
//! cargo bench -p exon-benches --bench testbed -- --sweep loss --systems exon
//! cargo bench -p exon-benches --bench testbed -- --size 1048576 --loss 0.05 --systems exon,tcp_cubic,tcp_bbr
//! ```
//!
//! `--size BYTES` (default 1024, at least 16) sets the size of every message (one-way) and
//! of every request and reply (rpc) for every system, in one cell, the loss sweep and
//! `--flows` (the paper's grid stays at 1 KiB). Rates stay in messages (requests) per second;
//! the Mbit/s columns and `<system>_mbit` keys are payload bytes. Exon is left out, with the
//! line `exon: size N refused (PayloadTooLarge)`, where it refuses the size (until it
//! carries messages larger than a datagram).
//!
//! `cargo bench -p exon-benches --bench testbed -- --help` lists the options. Needs root and `/dev/net/tun`; otherwise it says why and exits 0.
//! Every namespace, device and process it creates is removed on exit, error or Ctrl-C.

use std::time::Duration;

use clap::{CommandFactory, Parser};
use exon_benches::message::{MAX_SIZE, MIN_SIZE, PAYLOAD};
use exon_benches::testbed::cell::Pattern;
use exon_benches::testbed::roles::{self, ExonTuning, RoleArgs, System};
use exon_benches::testbed::{self, matrix, netns, sweep, sys, Args};

/// The impaired-link testbed: exon, TCP CUBIC, TCP BBR and QUIC between two network
/// namespaces joined by a userspace link emulator (delay, rate, random loss both ways,
/// tail-drop queue; seeded). Needs root and /dev/net/tun; otherwise it says why and exits 0.
#[derive(Debug, Parser)]
#[command(name = "testbed")]
struct Cli {
    /// Traffic pattern.
    #[arg(long, default_value = "one-way", value_parser = ["one-way", "rpc"])]
    pattern: String,
    /// Runs a whole grid instead of one cell: `paper` (the paper's Section V grid), `paths`
    /// (long fat paths: 100 Mbit/s at RTT 50 and 200 ms, 0 and 1 % loss; 8 s measured after
    /// 3 s warm-up unless given), `fairness` (exon against TCP CUBIC, TCP BBR and exon, two
    /// flows at once on three links; 20 s after 2 s unless given) or `all` (the three in
    /// turn). Reports go to --out.
    #[arg(long, value_parser = ["paper", "paths", "fairness", "all"])]
    matrix: Option<String>,
    /// Link rate in Mbit/s.
    #[arg(long, default_value_t = 100.0)]
    rate_mbit: f64,
    /// Round-trip time in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    rtt_ms: f64,
    /// Random loss probability, each way.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Reordering probability, each way: a packet is held back by an extra 0-20 ms
    /// (uniform) and later packets overtake it; nothing is dropped for it.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Measured seconds per system (default 10; the matrix has its own).
    #[arg(long)]
    secs: Option<f64>,
    /// Warm-up seconds before measuring (default 1; the grids paths and fairness have their
    /// own).
    #[arg(long)]
    warmup: Option<f64>,
    /// Seconds allowed after the measurement for what is outstanding (exon's send queue
    /// holds about 10 s of a 1 Mbit/s link).
    #[arg(long, default_value_t = 20.0)]
    drain: f64,
    /// Link queue in bytes (default one bandwidth-delay product, at least 32 KiB).
    #[arg(long)]
    queue_bytes: Option<usize>,
    /// Seed of the emulator's loss.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Exon's window ceiling (default: exon's default, 32768; within it, the window follows
    /// the congestion window, which sizes the flight to the link).
    #[arg(long)]
    exon_window: Option<u64>,
    /// Exon's envelopes (default 128, at most the window).
    #[arg(long)]
    exon_envelopes: Option<u64>,
    /// Exon's congestion controller (default: exon's default, bbr).
    #[arg(long, value_parser = ["bbr", "newreno", "off"])]
    exon_congestion: Option<String>,
    /// Concurrent callers (rpc).
    #[arg(long, default_value_t = 1)]
    callers: u64,
    /// Bytes per message (one-way), per request and per reply (rpc), for every system (not
    /// with --matrix, which runs the paper's 1 KiB messages).
    #[arg(
        long,
        default_value_t = PAYLOAD as u64,
        value_parser = clap::value_parser!(u64).range(MIN_SIZE as u64..=MAX_SIZE as u64)
    )]
    size: u64,
    /// Systems to run, comma-separated (default all: exon,tcp_cubic,tcp_bbr,quic).
    #[arg(long, value_delimiter = ',', value_parser = system)]
    systems: Vec<System>,
    /// Runs these one-way flows at once on one link instead of each system in turn, one
    /// flow per name (e.g. exon,exon or exon,tcp_cubic): each flow's goodput, its share and
    /// Jain's fairness index.
    #[arg(long, value_delimiter = ',', value_parser = system)]
    flows: Vec<System>,
    /// With --flows or --matrix fairness: the kernel paces every TCP flow at its congestion
    /// control's rate (CUBIC too; without it only BBR paces itself), as the fq qdisc would.
    #[arg(long)]
    tcp_pacing: bool,
    /// With --flows or --matrix fairness: TCP's largest segment (TCP_MAXSEG), e.g. 1017 for
    /// packets of exon's size (1069 bytes with timestamps).
    #[arg(long)]
    tcp_mss: Option<u32>,
    /// Runs a sweep instead of one cell: `loss` runs one-way at 0, 1, 2, 5, 10 and 20 %
    /// loss each way (--loss is ignored).
    #[arg(long, value_parser = ["loss"])]
    sweep: Option<String>,
    /// With --flows: writes a plot of each flow's rate over time to this SVG file (a
    /// relative path is taken from the workspace's root, not from `benches/`, where cargo
    /// runs the bench).
    #[arg(long)]
    plot: Option<String>,
    /// With --flows: prints each flow's goodput over time (Mbit/s per half second), one
    /// line per point, before the summary.
    #[arg(long)]
    series: bool,
    /// Where the matrix writes its report.
    #[arg(long, default_value = "docs/benchmarks")]
    out: String,
    /// Endpoint processes only: the role this process plays.
    #[arg(long, hide = true)]
    role: Option<String>,
    /// Endpoint processes only: the system.
    #[arg(long, hide = true, value_parser = system)]
    system: Option<System>,
    /// Endpoint processes only: the peer's or own address.
    #[arg(long, hide = true)]
    addr: Option<String>,
    /// Endpoint processes only: the QUIC certificate.
    #[arg(long, hide = true)]
    cert: Option<String>,
    /// Endpoint processes only: a one-way receiver samples its count this often.
    #[arg(long, hide = true)]
    series_ms: Option<u64>,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The system called `s`, for clap.
fn system(s: &str) -> Result<System, String> {
    System::parse(s)
        .ok_or_else(|| format!("no system {s:?} (exon, tcp_cubic, tcp_bbr, quic, exon_stream)"))
}

fn parse_args() -> Args {
    let c = Cli::parse();
    if !(0.0..1.0).contains(&c.loss) || c.rate_mbit <= 0.0 || c.rtt_ms < 0.0 || c.callers == 0 {
        usage("need 0 <= loss < 1, rate > 0, rtt >= 0, callers > 0");
    }
    if !(0.0..=1.0).contains(&c.reorder) {
        usage("need 0 <= reorder <= 1");
    }
    let several = [c.matrix.is_some(), c.sweep.is_some(), !c.flows.is_empty()];
    if several.iter().filter(|x| **x).count() > 1 {
        usage("at most one of --matrix, --sweep and --flows");
    }
    if c.matrix.is_some() && c.size != PAYLOAD as u64 {
        usage(
            "--matrix runs the paper's 1 KiB messages: --size is for one cell, --sweep and --flows",
        );
    }
    if (c.sweep.is_some() || !c.flows.is_empty()) && c.pattern != "one-way" {
        usage("--sweep and --flows run the one-way pattern");
    }
    if c.role.is_none() && c.plot.is_some() && c.flows.is_empty() {
        usage("--plot needs --flows");
    }
    let fairness = matches!(c.matrix.as_deref(), Some("fairness" | "all"));
    if c.role.is_none() && (c.tcp_pacing || c.tcp_mss.is_some()) && c.flows.is_empty() && !fairness
    {
        usage("--tcp-pacing and --tcp-mss need --flows or --matrix fairness");
    }
    Args {
        role: c.role,
        pattern: match c.pattern.as_str() {
            "rpc" => Pattern::Rpc { callers: c.callers },
            _ => Pattern::OneWay,
        },
        matrix: c.matrix,
        rate_mbit: c.rate_mbit,
        rtt_ms: c.rtt_ms,
        loss: c.loss,
        reorder: c.reorder,
        secs: c.secs,
        warmup: c.warmup,
        drain: c.drain,
        queue_bytes: c.queue_bytes,
        seed: c.seed,
        exon_window: c.exon_window,
        exon_envelopes: c.exon_envelopes,
        exon_congestion: c
            .exon_congestion
            .as_deref()
            .and_then(roles::congestion_parse),
        systems: if c.systems.is_empty() {
            System::ALL.to_vec()
        } else {
            c.systems
        },
        flows: c.flows,
        tcp_pacing: c.tcp_pacing,
        tcp_mss: c.tcp_mss,
        sweep: c.sweep,
        plot: c.plot,
        series: c.series,
        out: c.out,
        system: c.system,
        addr: c.addr,
        cert: c.cert,
        callers: c.callers,
        series_ms: c.series_ms,
        size: usize::try_from(c.size).unwrap_or_else(|_| usage("--size too large")),
    }
}

fn num<T: std::str::FromStr>(s: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| usage(&format!("not a number: {s:?}")))
}

/// Reports a usage error the way clap does, and exits with status 2.
fn usage(msg: &str) -> ! {
    Cli::command()
        .error(clap::error::ErrorKind::ValueValidation, msg)
        .exit()
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
        Some("paper") => matrix::paper::run_paper(&a),
        Some("paths") => matrix::paths::run_paths(&a),
        Some("fairness") => matrix::fairness::run_fairness(&a),
        Some("all") => matrix::run_all(&a),
        Some(m) => usage(&format!(
            "unknown matrix {m:?} (paper, paths, fairness, all)"
        )),
        None if a.sweep.is_some() => sweep::run_loss(&a),
        None if !a.flows.is_empty() => testbed::several_flows(&a),
        None => testbed::one_cell(&a),
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
        warmup: secs(a.warmup.unwrap_or(1.0)),
        secs: secs(a.secs.unwrap_or(10.0)),
        callers: a.callers,
        size: a.size,
        exon: ExonTuning {
            window: a.exon_window.unwrap_or(1024),
            envelopes: a.exon_envelopes.unwrap_or(128),
            congestion: a.exon_congestion.unwrap_or_default(),
        },
        drain: secs(a.drain),
        series: a.series_ms.map(Duration::from_millis),
        tcp_pacing: a.tcp_pacing,
        tcp_mss: a.tcp_mss,
    }
}
