//! Side-by-side loopback comparison of exon, TCP and QUIC, with the systems run alternately
//! in rounds so that machine drift hits all of them.
//!
//! ```text
//! cargo bench -p exon-benches --bench compare -- one-way --secs 3
//! cargo bench -p exon-benches --bench compare -- rpc --callers 100 --secs 3
//! ```
//!
//! Exon's datagram size stays 1472 bytes by default (one 1 KB message per datagram, as on
//! Ethernet) although loopback would allow 65507: with GSO and GRO the kernel already moves
//! about 35 datagrams per system call at 1472, and `--datagram 65507` (about 60 messages per
//! datagram) measured no clear gain in the same session.
//!
//! `cargo bench -p exon-benches --bench compare -- --help` lists the options. The last line of
//! the output is `key=value` pairs for scripts.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser};
use common::{OneWay, OneWayKind, Rpc, RpcKind, DEFAULT_EXON_DATAGRAM};

/// Which exchange to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Messages one way, each verified delivered exactly once.
    OneWay,
    /// Request/reply with concurrent callers.
    Rpc,
}

/// Side-by-side loopback comparison of exon, TCP and QUIC, run alternately in rounds. The
/// last line of the output is `key=value` pairs for scripts.
#[derive(Debug, Parser)]
#[command(name = "compare")]
struct Args {
    /// What to measure.
    #[arg(value_enum)]
    mode: Mode,
    /// Total measured time per system, in seconds.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Rounds the measured time is split into (systems alternate within each).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Concurrent callers (rpc).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    callers: u64,
    /// Messages per batch (default 10000 one-way, 2000 rpc).
    #[arg(long)]
    batch: Option<u64>,
    /// Exon's datagram size, fixed (`max_datagram_size` with path MTU discovery off); 0
    /// runs exon's default, path MTU discovery (up to 65507 bytes on loopback).
    #[arg(long, default_value_t = DEFAULT_EXON_DATAGRAM)]
    datagram: usize,
    /// Runs one system alone, for profiling (ratios then need another run).
    #[arg(long)]
    only: Option<String>,
    /// Worker threads of a multi-thread tokio runtime on each side (0: current-thread).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn parse_args() -> Args {
    let a = Args::parse();
    if a.secs <= 0.0 || !a.secs.is_finite() {
        usage("--secs must be positive");
    }
    a
}

/// Reports a usage error the way clap does, and exits with status 2.
fn usage(msg: &str) -> ! {
    Args::command()
        .error(clap::error::ErrorKind::ValueValidation, msg)
        .exit()
}

fn main() {
    let args = parse_args();
    common::WORKER_THREADS.store(args.threads, std::sync::atomic::Ordering::Relaxed);
    match args.mode {
        Mode::OneWay => one_way(&args),
        Mode::Rpc => rpc(&args),
    }
}

/// The systems to run: all, or the one named by `--only`.
fn selected<K: Copy, const N: usize>(
    args: &Args,
    all: [K; N],
    name: fn(K) -> &'static str,
) -> Vec<K> {
    let kinds: Vec<K> = all
        .into_iter()
        .filter(|&k| args.only.as_deref().is_none_or(|o| o == name(k)))
        .collect();
    if kinds.is_empty() {
        usage("--only names no system of this mode");
    }
    kinds
}

/// The ratios of the last line, for the systems present: sealed exon over plaintext exon,
/// and each exon mode over TCP and QUIC.
fn ratios(names: &[&str], rate: impl Fn(usize) -> f64) -> Vec<String> {
    let at = |n: &str| names.iter().position(|k| *k == n);
    let mut out = Vec::new();
    for (a, b, key) in [
        ("exon", "exon_plain", "exon_over_plain"),
        ("exon", "tcp", "exon_over_tcp"),
        ("exon", "quic", "exon_over_quic"),
        ("exon_plain", "tcp", "plain_over_tcp"),
        ("exon_plain", "quic", "plain_over_quic"),
    ] {
        if let (Some(i), Some(j)) = (at(a), at(b)) {
            out.push(format!("{key}={:.3}", rate(i) / rate(j)));
        }
    }
    out
}

/// Runs batches until `slot` has passed; returns (messages, time).
fn timed<F: FnMut() -> (u64, Duration)>(slot: Duration, mut batch: F) -> (u64, Duration) {
    let (mut n, mut t) = (0, Duration::ZERO);
    let start = Instant::now();
    while start.elapsed() < slot {
        let (k, d) = batch();
        n += k;
        t += d;
    }
    (n, t)
}

fn one_way(args: &Args) {
    let batch = args.batch.unwrap_or(10_000);
    let slot = Duration::from_secs_f64(args.secs / args.rounds as f64);
    let kinds = selected(
        args,
        [
            OneWayKind::Exon,
            OneWayKind::ExonPlain,
            OneWayKind::Tcp,
            OneWayKind::QuicStream,
            OneWayKind::QuicUni,
        ],
        OneWayKind::name,
    );
    println!(
        "one-way, {} B messages, exon max_datagram_size {} B, {} rounds of {:.2} s per \
         system, batches of {batch}",
        common::PAYLOAD,
        args.datagram,
        args.rounds,
        slot.as_secs_f64()
    );
    let mut flows: Vec<OneWay> = kinds
        .iter()
        .map(|&k| {
            let mut f = OneWay::new(k, args.datagram);
            f.run(batch.min(1000)); // warm up: connections, windows, envelopes
            f
        })
        .collect();
    let mut totals = vec![(0u64, Duration::ZERO); kinds.len()];
    let mut per_round = vec![Vec::new(); kinds.len()];
    for _ in 0..args.rounds {
        for (i, f) in flows.iter_mut().enumerate() {
            let (n, t) = timed(slot, || (batch, f.run(batch)));
            totals[i].0 += n;
            totals[i].1 += t;
            per_round[i].push(n as f64 / t.as_secs_f64());
        }
    }
    let exon_stats = flows[0].stats();
    let verified: Vec<u64> = flows.iter().map(|f| f.verified()).collect();
    drop(flows);

    let rate = |i: usize| totals[i].0 as f64 / totals[i].1.as_secs_f64();
    println!(
        "{:<10} {:>12} {:>9} {:>12}  per round (msgs/s)",
        "system", "msgs/s", "vs exon", "verified"
    );
    for (i, k) in kinds.iter().enumerate() {
        let rounds: Vec<String> = per_round[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<10} {:>12.0} {:>8.2}x {:>12}  {}",
            k.name(),
            rate(i),
            rate(i) / rate(0),
            verified[i],
            rounds.join(" ")
        );
    }
    if let Some(s) = exon_stats {
        println!("exon sender counters: {s}");
    }
    let mut last = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| format!("{}={:.0}", k.name(), rate(i)))
        .collect::<Vec<_>>();
    last.extend(ratios(
        &kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        rate,
    ));
    last.push(format!("datagram={}", args.datagram));
    last.push(format!("threads={}", args.threads));
    println!("{}", last.join(" "));
}

fn rpc(args: &Args) {
    let batch = args.batch.unwrap_or(2_000).max(args.callers);
    let slot = Duration::from_secs_f64(args.secs / args.rounds as f64);
    let kinds = selected(
        args,
        [
            RpcKind::Exon,
            RpcKind::ExonPlain,
            RpcKind::Tcp,
            RpcKind::Quic,
        ],
        RpcKind::name,
    );
    println!(
        "rpc, {} B requests and replies, {} concurrent callers, exon max_datagram_size {} B, \
         {} rounds of {:.2} s per system, batches of {batch}",
        common::PAYLOAD,
        args.callers,
        args.datagram,
        args.rounds,
        slot.as_secs_f64()
    );
    let mut rpcs: Vec<Rpc> = kinds
        .iter()
        .map(|&k| {
            let mut r = Rpc::new(k, args.datagram);
            r.run(args.callers * 10, args.callers); // warm up
            r
        })
        .collect();
    let mut totals = vec![(0u64, Duration::ZERO); kinds.len()];
    let mut lats: Vec<common::Latencies> = vec![common::Latencies::default(); kinds.len()];
    let mut per_round = vec![Vec::new(); kinds.len()];
    for _ in 0..args.rounds {
        for (i, r) in rpcs.iter_mut().enumerate() {
            let (n, t) = timed(slot, || {
                let (d, l) = r.run(batch, args.callers);
                let k = l.len() as u64;
                lats[i].extend(l);
                (k, d)
            });
            totals[i].0 += n;
            totals[i].1 += t;
            per_round[i].push(n as f64 / t.as_secs_f64());
        }
    }
    drop(rpcs);

    let rate = |i: usize| totals[i].0 as f64 / totals[i].1.as_secs_f64();
    let mut p = Vec::new();
    for l in &lats {
        p.push((l.quantile_us(0.5), l.quantile_us(0.99)));
    }
    println!(
        "{:<8} {:>12} {:>9} {:>10} {:>10} {:>10}  per round (req/s)",
        "system", "req/s", "vs exon", "p50 us", "p99 us", "verified"
    );
    for (i, k) in kinds.iter().enumerate() {
        let rounds: Vec<String> = per_round[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<8} {:>12.0} {:>8.2}x {:>10.0} {:>10.0} {:>10}  {}",
            k.name(),
            rate(i),
            rate(i) / rate(0),
            p[i].0,
            p[i].1,
            totals[i].0,
            rounds.join(" ")
        );
    }
    let mut last = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        last.push(format!("{}={:.0}", k.name(), rate(i)));
    }
    for (i, k) in kinds.iter().enumerate() {
        last.push(format!("{}_p50_us={:.0}", k.name(), p[i].0));
        last.push(format!("{}_p99_us={:.0}", k.name(), p[i].1));
    }
    last.extend(ratios(
        &kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        rate,
    ));
    last.push(format!("callers={}", args.callers));
    last.push(format!("datagram={}", args.datagram));
    last.push(format!("threads={}", args.threads));
    println!("{}", last.join(" "));
}
