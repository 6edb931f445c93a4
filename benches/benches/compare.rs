//! Side-by-side loopback comparison of exon, TCP and QUIC, with the systems run alternately
//! in rounds so that machine drift hits all of them.
//!
//! ```text
//! cargo bench -p exon-benches --bench compare -- one-way --secs 3
//! cargo bench -p exon-benches --bench compare -- rpc --callers 100 --secs 3
//! cargo bench -p exon-benches --bench compare -- one-way --size 65536 --datagram 65507 --secs 2
//! cargo bench -p exon-benches --bench compare -- one-way --size 1048576 --secs 2
//! cargo bench -p exon-benches --bench compare -- rpc --size 1048576 --callers 10 --secs 2
//! ```
//!
//! Systems: exon (sealed, its default) and `exon_plain`; TCP with 4-byte length-prefixed
//! frames read with exact reads; QUIC (quinn) as one long stream of such frames (`quic`) or a
//! new stream per message (`quic_uni` one-way; rpc's `quic` opens a bidirectional stream per
//! request).
//!
//! `--size BYTES` (default 1024, at least 16) sets every message's size: one-way messages,
//! and in rpc both the request and the reply (the server echoes the request). Each message
//! carries its sequence number in its first and last 8 bytes; receivers check the length,
//! both copies and exactly-once delivery. The default batch shrinks with the size so that a
//! batch holds about 64 MiB of payload at most (`--batch` overrides). Rates are reported in
//! messages (requests) per second and in MB/s of payload (10^6 bytes; rpc counts request and
//! reply). Where exon refuses the size (a payload larger than one datagram, until exon carries
//! larger messages in fragments) the run says `exon: size N refused (PayloadTooLarge)` and
//! goes on without it.
//!
//! Exon runs with its own defaults unless told otherwise (`--datagram 0`): path MTU discovery
//! starts at 1200-byte datagrams and reaches 65507 on loopback within a few round trips.
//! `--datagram B` fixes its datagrams at B bytes instead (1472: one 1 KB message per
//! datagram, as on Ethernet, the setting of the figures taken before discovery existed).
//! Where exon refuses a size, the run says so and goes on without it.
//!
//! Scaled one-way (`--pairs P --shards S [--send-batch K]`): P sender endpoints, each on its
//! own thread, send to one receiving endpoint of S driver shards (a runtime with S worker
//! threads, one task per shard taking its messages with `recv_many`); the senders' node ids
//! are picked so that each shard owns as many. Beside exon and exon_plain, `tcp` runs P
//! connections from P threads into one process with P worker threads. Each sender's share
//! of a batch is 10000 messages.
//!
//! `cargo bench -p exon-benches --bench compare -- --help` lists the options. The last line of
//! the output is `key=value` pairs for scripts: each system's rate under its name (messages
//! or requests per second, as before sizes existed), `<name>_mb_s` (MB/s), the ratios
//! (`exon_over_tcp`, `exon_over_quic`, ...: the same for messages and bytes), `size=`, and
//! `refused=` naming the exon systems that refused the size, if any.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser};
use common::{OneWay, OneWayKind, Rpc, RpcKind, MAX_SIZE, MIN_SIZE};

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
    /// Bytes per message (one-way), per request and per reply (rpc).
    #[arg(
        long,
        default_value_t = common::PAYLOAD as u64,
        value_parser = clap::value_parser!(u64).range(MIN_SIZE as u64..=MAX_SIZE as u64)
    )]
    size: u64,
    /// Messages per batch (default 10000 one-way, times `--pairs`, 2000 rpc; fewer for messages above about
    /// 6.5 KiB one-way or 32 KiB rpc, so that a batch holds about 64 MiB of payload).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    batch: Option<u64>,
    /// Exon's datagram size, fixed (`max_datagram_size` with path MTU discovery off); 0
    /// runs exon's default, path MTU discovery (up to 65507 bytes on loopback).
    #[arg(long, default_value_t = 0)]
    datagram: usize,
    /// Runs one system alone, for profiling (ratios then need another run).
    #[arg(long)]
    only: Option<String>,
    /// Worker threads of a multi-thread tokio runtime on each side (0: current-thread).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// One-way, exon only: sender endpoints (each on its own thread), all sending to one
    /// receiving endpoint. With `--pairs`, `--shards` or `--send-batch` the one-way run
    /// measures exon and exon_plain only, this way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pairs: u64,
    /// One-way, exon only: driver shards of the receiving endpoint (its runtime gets as
    /// many worker threads, one task per shard takes its messages).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    shards: u64,
    /// One-way, exon only: messages per `Handle::send_batch` call (0: one `send` each).
    #[arg(long, default_value_t = 0)]
    send_batch: usize,
    /// Exon's flow-control window in slots per destination (`Config::window`; 0: exon's
    /// default).
    #[arg(long, default_value_t = 0)]
    window: u64,
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
    common::EXON_WINDOW.store(args.window, std::sync::atomic::Ordering::Relaxed);
    let scaled = args.pairs > 1 || args.shards > 1 || args.send_batch > 0;
    match args.mode {
        Mode::OneWay if scaled => one_way_scaled(&args),
        Mode::OneWay => one_way(&args),
        Mode::Rpc if scaled => usage("--pairs, --shards and --send-batch are for one-way"),
        Mode::Rpc => rpc(&args),
    }
}

/// The systems to run: all, or the one named by `--only`; less the exon systems that
/// refuse messages of `--size` (each said on a line of its own), returned second.
fn selected<K: Copy, const N: usize>(
    args: &Args,
    all: [K; N],
    name: fn(K) -> &'static str,
) -> (Vec<K>, Vec<&'static str>) {
    let kinds: Vec<K> = all
        .into_iter()
        .filter(|&k| args.only.as_deref().is_none_or(|o| o == name(k)))
        .collect();
    if kinds.is_empty() {
        usage("--only names no system of this mode");
    }
    let mut refused = Vec::new();
    let kinds = kinds
        .into_iter()
        .filter(|&k| {
            let plain = match name(k) {
                "exon" => false,
                "exon_plain" => true,
                _ => return true,
            };
            let config = common::exon_config(args.datagram);
            match common::exon_refusal(config, plain, size(args)) {
                None => true,
                Some(why) => {
                    println!("{}: size {} refused ({why})", name(k), args.size);
                    refused.push(name(k));
                    false
                }
            }
        })
        .collect();
    (kinds, refused)
}

/// The message size of the command line.
fn size(args: &Args) -> usize {
    usize::try_from(args.size).expect("--size fits in memory")
}

/// MB/s (10^6 bytes) of `rate` messages per second carrying `bytes` each.
fn mb_s(rate: f64, bytes: u64) -> f64 {
    rate * bytes as f64 / 1e6
}

/// The "vs exon" column: `rate` over exon's, or `-` without exon.
fn vs_exon(rate: f64, exon: Option<f64>) -> String {
    exon.map_or("-".into(), |e| format!("{:.2}x", rate / e))
}

/// The keys every last line ends with: exon's datagram, threads, size, and the exon systems
/// that refused the size.
fn tail_keys(args: &Args, refused: &[&str]) -> Vec<String> {
    let mut v = vec![
        format!("datagram={}", args.datagram),
        format!("threads={}", args.threads),
        format!("size={}", args.size),
    ];
    if !refused.is_empty() {
        v.push(format!("refused={}", refused.join(",")));
    }
    v
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
    let size = size(args);
    let batch = args
        .batch
        .unwrap_or_else(|| common::batch_for(size, 10_000));
    let slot = Duration::from_secs_f64(args.secs / args.rounds as f64);
    let (kinds, refused) = selected(
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
        "one-way, {size} B messages, exon max_datagram_size {} B, {} rounds of {:.2} s per \
         system, batches of {batch}",
        args.datagram,
        args.rounds,
        slot.as_secs_f64()
    );
    let mut flows: Vec<OneWay> = kinds
        .iter()
        .map(|&k| {
            let mut f = OneWay::new(k, args.datagram, size);
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
    let exon_stats = flows
        .iter()
        .find(|f| f.kind() == OneWayKind::Exon)
        .and_then(|f| f.stats());
    let verified: Vec<u64> = flows.iter().map(|f| f.verified()).collect();
    drop(flows);

    let rate = |i: usize| totals[i].0 as f64 / totals[i].1.as_secs_f64();
    let exon = kinds.iter().position(|&k| k == OneWayKind::Exon).map(rate);
    println!(
        "{:<10} {:>12} {:>10} {:>9} {:>12}  per round (msgs/s)",
        "system", "msgs/s", "MB/s", "vs exon", "verified"
    );
    for (i, k) in kinds.iter().enumerate() {
        let rounds: Vec<String> = per_round[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<10} {:>12.0} {:>10.1} {:>9} {:>12}  {}",
            k.name(),
            rate(i),
            mb_s(rate(i), args.size),
            vs_exon(rate(i), exon),
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
    last.extend(
        kinds
            .iter()
            .enumerate()
            .map(|(i, k)| format!("{}_mb_s={:.1}", k.name(), mb_s(rate(i), args.size))),
    );
    last.extend(tail_keys(args, &refused));
    println!("{}", last.join(" "));
}

/// One-way with several senders into one (possibly sharded) receiving endpoint: exon and
/// exon_plain, alternating in rounds.
fn one_way_scaled(args: &Args) {
    // 10000 messages per sender per batch: each sender's share between two waits for the
    // whole batch's verification is the one-pair run's, whatever the pairs.
    let batch = args.batch.unwrap_or(10_000 * args.pairs);
    let slot = Duration::from_secs_f64(args.secs / args.rounds as f64);
    let names: Vec<&str> = ["exon", "exon_plain", "tcp"]
        .into_iter()
        .filter(|n| args.only.as_deref().is_none_or(|o| o == *n))
        .collect();
    if names.is_empty() {
        usage(
            "--only names no system of this mode (exon, exon_plain or tcp with --pairs/--shards)",
        );
    }
    let (pairs, shards) = (args.pairs as usize, args.shards as usize);
    println!(
        "one-way, {} B messages, {pairs} sender endpoints -> one receiving endpoint of \
         {shards} shard(s), send_batch {}, exon max_datagram_size {} B, {} rounds of {:.2} s \
         per system, batches of {batch}; tcp: {pairs} connections from as many threads to \
         one process with {pairs} worker threads",
        common::PAYLOAD,
        args.send_batch,
        args.datagram,
        args.rounds,
        slot.as_secs_f64()
    );
    let mut flows: Vec<common::ShardedOneWay> = names
        .iter()
        .map(|n| {
            let plain = *n == "exon_plain";
            let mut f = if *n == "tcp" {
                common::ShardedOneWay::new_tcp(pairs)
            } else {
                common::ShardedOneWay::new(plain, pairs, shards, args.datagram, args.send_batch)
            };
            f.run(batch.min(1000)); // warm up
            f
        })
        .collect();
    let mut totals = vec![(0u64, Duration::ZERO); names.len()];
    let mut per_round = vec![Vec::new(); names.len()];
    for _ in 0..args.rounds {
        for (i, f) in flows.iter_mut().enumerate() {
            let (n, t) = timed(slot, || f.run(batch));
            totals[i].0 += n;
            totals[i].1 += t;
            per_round[i].push(n as f64 / t.as_secs_f64());
        }
    }
    let stats: Vec<_> = flows.into_iter().map(|f| f.finish()).collect();
    let rate = |i: usize| totals[i].0 as f64 / totals[i].1.as_secs_f64();
    println!(
        "{:<10} {:>12} {:>14} {:>12}  per round (msgs/s)",
        "system", "msgs/s", "per shard", "verified"
    );
    for (i, n) in names.iter().enumerate() {
        let rounds: Vec<String> = per_round[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<10} {:>12.0} {:>14.0} {:>12}  {}",
            n,
            rate(i),
            rate(i) / shards as f64,
            totals[i].0,
            rounds.join(" ")
        );
        if let Some(s) = &stats[i] {
            println!(
                "  receiver: shards={} delivered={} forwarded={} forward_drops={} recv_calls={}",
                s.shards, s.node.delivered, s.forwarded, s.forward_drops, s.recv_calls
            );
        }
    }
    let mut last: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{n}={:.0}", rate(i)))
        .collect();
    for (i, n) in names.iter().enumerate() {
        last.push(format!("{n}_per_shard={:.0}", rate(i) / shards as f64));
    }
    last.extend(ratios(&names, rate));
    last.push(format!("pairs={pairs}"));
    last.push(format!("shards={shards}"));
    last.push(format!("send_batch={}", args.send_batch));
    last.push(format!("datagram={}", args.datagram));
    println!("{}", last.join(" "));
}

fn rpc(args: &Args) {
    let size = size(args);
    let batch = args
        .batch
        .unwrap_or_else(|| common::batch_for(size, 2_000))
        .max(args.callers);
    let slot = Duration::from_secs_f64(args.secs / args.rounds as f64);
    let (kinds, refused) = selected(
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
        "rpc, {size} B requests and replies, {} concurrent callers, exon max_datagram_size {} \
         B, {} rounds of {:.2} s per system, batches of {batch}",
        args.callers,
        args.datagram,
        args.rounds,
        slot.as_secs_f64()
    );
    let mut rpcs: Vec<Rpc> = kinds
        .iter()
        .map(|&k| {
            let mut r = Rpc::new(k, args.datagram, size);
            r.run((args.callers * 10).min(batch), args.callers); // warm up
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
    // Payload both ways: the request and its reply.
    let bytes = 2 * args.size;
    let exon = kinds.iter().position(|&k| k == RpcKind::Exon).map(rate);
    let mut p = Vec::new();
    for l in &lats {
        p.push((l.quantile_us(0.5), l.quantile_us(0.99)));
    }
    println!(
        "{:<8} {:>12} {:>10} {:>9} {:>10} {:>10} {:>10}  per round (req/s)",
        "system", "req/s", "MB/s", "vs exon", "p50 us", "p99 us", "verified"
    );
    for (i, k) in kinds.iter().enumerate() {
        let rounds: Vec<String> = per_round[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<8} {:>12.0} {:>10.1} {:>9} {:>10.0} {:>10.0} {:>10}  {}",
            k.name(),
            rate(i),
            mb_s(rate(i), bytes),
            vs_exon(rate(i), exon),
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
    for (i, k) in kinds.iter().enumerate() {
        last.push(format!("{}_mb_s={:.1}", k.name(), mb_s(rate(i), bytes)));
    }
    last.push(format!("callers={}", args.callers));
    last.extend(tail_keys(args, &refused));
    println!("{}", last.join(" "));
}
