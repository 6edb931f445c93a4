//! The side-by-side loopback comparison: systems in alternating rounds, a table, a last line.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::durable;

use crate::endpoint::{exon_config, exon_refusal, EXON_WINDOW};
use crate::harness::WORKER_THREADS;
use crate::message::{batch_for, MAX_SIZE, MIN_SIZE, PAYLOAD};
use crate::one_way::OneWay;
use crate::report::{alternate, mb_s, ratios, vs_exon, Tally};
use crate::rpc::Rpc;
use crate::sharded::ShardedOneWay;
use crate::stats::Latencies;
use crate::systems::{OneWayKind, RpcKind};

/// Which exchange to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Messages one way, each verified delivered exactly once.
    OneWay,
    /// Request/reply with concurrent callers.
    Rpc,
    /// One long transfer of `--mib` MiB over a byte stream: exon `Stream`, TCP, QUIC.
    Stream,
    /// Request/reply of `--callers` callers over one ordered exon channel, against plain
    /// exon messages.
    Channel,
}

/// What to compare, as the command line says.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// What to measure.
    #[arg(value_enum)]
    pub mode: Mode,
    /// Total measured time per system, in seconds.
    #[arg(long, default_value_t = 3.0)]
    pub secs: f64,
    /// Rounds the measured time is split into (systems alternate within each).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Concurrent callers (rpc).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub callers: u64,
    /// Bytes per message (one-way), per request and per reply (rpc).
    #[arg(
        long,
        default_value_t = PAYLOAD as u64,
        value_parser = clap::value_parser!(u64).range(MIN_SIZE as u64..=MAX_SIZE as u64)
    )]
    pub size: u64,
    /// Messages per batch (default 10000 one-way, times `--pairs`, 2000 rpc; fewer for messages above about
    /// 6.5 KiB one-way or 32 KiB rpc, so that a batch holds about 64 MiB of payload).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// Exon's datagram size, fixed (`max_datagram_size` with path MTU discovery off); 0
    /// runs exon's default, path MTU discovery (up to 65507 bytes on loopback).
    #[arg(long, default_value_t = 0)]
    pub datagram: usize,
    /// Runs one system alone, for profiling (ratios then need another run); `durable` runs
    /// the durable section alone (the disk's sync latency and NATS JetStream).
    #[arg(long)]
    pub only: Option<String>,
    /// A smoke run: `--secs 0.3 --rounds 1`, the sync probe 100 times, NATS skipped.
    #[arg(long)]
    pub quick: bool,
    /// Skips NATS JetStream in the durable section (the sync probe still runs).
    #[arg(long)]
    pub no_nats: bool,
    /// Directory under which the durable section makes its temporary directory (default: the
    /// system's temporary directory; it must be on the disk to measure, not a tmpfs).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Worker threads of a multi-thread tokio runtime on each side (0: current-thread).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// One-way, exon only: sender endpoints (each on its own thread), all sending to one
    /// receiving endpoint. With `--pairs`, `--shards` or `--send-batch` the one-way run
    /// measures exon and exon_plain only, this way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub pairs: u64,
    /// One-way, exon only: driver shards of the receiving endpoint (its runtime gets as
    /// many worker threads, one task per shard takes its messages).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub shards: u64,
    /// One-way, exon only: messages per `Handle::send_batch` call (0: one `send` each).
    #[arg(long, default_value_t = 0)]
    pub send_batch: usize,
    /// Stream: MiB per transfer (one transfer per system per round; the median is reported).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub mib: u64,
    /// Exon's flow-control window in slots per destination (`Config::window`; 0: exon's
    /// default).
    #[arg(long, default_value_t = 0)]
    pub window: u64,
}

/// Runs the comparison the options ask for. `Err` is a usage error, found before anything
/// is printed.
pub fn run(args: &Options) -> Result<(), String> {
    if args.secs <= 0.0 || !args.secs.is_finite() {
        return Err("--secs must be positive".into());
    }
    let quick;
    let args = if args.quick {
        quick = Options {
            secs: 0.3,
            rounds: 1,
            ..args.clone()
        };
        &quick
    } else {
        args
    };
    WORKER_THREADS.store(args.threads, Ordering::Relaxed);
    EXON_WINDOW.store(args.window, Ordering::Relaxed);
    let scaled = args.pairs > 1 || args.shards > 1 || args.send_batch > 0;
    if args.only.as_deref() == Some(DURABLE) {
        if scaled {
            return Err(
                "--pairs, --shards and --send-batch are not for the durable section".into(),
            );
        }
        let mut last = durable::run(&durable_settings(args));
        last.push(format!("size={}", args.size));
        crate::report::print_last(last);
        return Ok(());
    }
    match args.mode {
        Mode::OneWay if scaled => one_way_scaled(args),
        Mode::OneWay => one_way(args),
        Mode::Rpc if scaled => Err("--pairs, --shards and --send-batch are for one-way".into()),
        Mode::Rpc => rpc(args),
        Mode::Stream => stream(args),
        Mode::Channel => channel(args),
    }
}

/// What `--only` names to run the durable section alone.
pub const DURABLE: &str = "durable";

/// The durable section's settings from the command line.
fn durable_settings(args: &Options) -> durable::Settings {
    let skip_nats = if args.quick {
        Some("--quick".to_string())
    } else if args.no_nats {
        Some("--no-nats".to_string())
    } else {
        None
    };
    durable::Settings {
        size: size(args),
        secs: args.secs,
        rounds: args.rounds,
        callers: args.callers,
        threads: args.threads,
        sync_samples: if args.quick { 100 } else { 1000 },
        skip_nats,
        dir: args.dir.clone(),
    }
}

/// The keys of the durable section, which runs after the other systems, the same in both
/// modes, unless `--only` names one of them.
fn durable_keys(args: &Options) -> Vec<String> {
    if args.only.is_some() {
        return Vec::new();
    }
    durable::run(&durable_settings(args))
}

/// The systems to run: all, or the one named by `--only`; less the exon systems that
/// refuse messages of `--size` (each said on a line of its own), returned second.
fn selected<K: Copy, const N: usize>(
    args: &Options,
    all: [K; N],
    name: fn(K) -> &'static str,
) -> Result<(Vec<K>, Vec<&'static str>), String> {
    let kinds: Vec<K> = all
        .into_iter()
        .filter(|&k| args.only.as_deref().is_none_or(|o| o == name(k)))
        .collect();
    if kinds.is_empty() {
        return Err("--only names no system of this mode".into());
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
            match exon_refusal(exon_config(args.datagram), plain, size(args)) {
                None => true,
                Some(why) => {
                    println!("{}: size {} refused ({why})", name(k), args.size);
                    refused.push(name(k));
                    false
                }
            }
        })
        .collect();
    Ok((kinds, refused))
}

/// The message size of the command line.
fn size(args: &Options) -> usize {
    usize::try_from(args.size).expect("--size fits in memory")
}

/// The measured time of one system in one round.
fn slot(args: &Options) -> Duration {
    Duration::from_secs_f64(args.secs / args.rounds as f64)
}

/// `{system}_cpu_us=`: the CPU time per message (request) of each system, both ends.
fn cpu_keys(names: &[&str], totals: &[Tally]) -> Vec<String> {
    names
        .iter()
        .zip(totals)
        .map(|(n, t)| format!("{n}_cpu_us={:.2}", t.cpu_us_per_message()))
        .collect()
}

/// The keys every last line ends with: exon's datagram, threads, size, and the exon systems
/// that refused the size.
fn tail_keys(args: &Options, refused: &[&str]) -> Vec<String> {
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

fn one_way(args: &Options) -> Result<(), String> {
    let size = size(args);
    let batch = args.batch.unwrap_or_else(|| batch_for(size, 10_000));
    let slot = slot(args);
    let (kinds, refused) = selected(args, OneWayKind::ALL, OneWayKind::name)?;
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
    let totals = alternate(&mut flows, args.rounds, slot, |_, f| (batch, f.run(batch)));
    let exon_stats: Vec<_> = flows
        .iter()
        .filter(|f| matches!(f.kind(), OneWayKind::Exon | OneWayKind::ExonPlain))
        .filter_map(|f| Some((f.kind().name(), f.stats()?)))
        .collect();
    let verified: Vec<u64> = flows.iter().map(|f| f.verified()).collect();
    drop(flows);

    let rate = |i: usize| totals[i].rate();
    let exon = kinds.iter().position(|&k| k == OneWayKind::Exon).map(rate);
    println!(
        "{:<10} {:>12} {:>10} {:>9} {:>12} {:>11}  per round (msgs/s)",
        "system", "msgs/s", "MB/s", "vs exon", "verified", "cpu us/msg"
    );
    for (i, k) in kinds.iter().enumerate() {
        println!(
            "{:<10} {:>12.0} {:>10.1} {:>9} {:>12} {:>11.2}  {}",
            k.name(),
            rate(i),
            mb_s(rate(i), args.size),
            vs_exon(rate(i), exon),
            verified[i],
            totals[i].cpu_us_per_message(),
            totals[i].rounds()
        );
    }
    for (name, s) in exon_stats {
        println!("{name} sender counters: {s}");
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let mut last: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{n}={:.0}", rate(i)))
        .collect();
    last.extend(ratios(&names, rate));
    last.extend(
        names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n}_mb_s={:.1}", mb_s(rate(i), args.size))),
    );
    last.extend(cpu_keys(&names, &totals));
    last.extend(tail_keys(args, &refused));
    last.extend(durable_keys(args));
    crate::report::print_last(last);
    Ok(())
}

/// One-way with several senders into one (possibly sharded) receiving endpoint: exon and
/// exon_plain, alternating in rounds.
fn one_way_scaled(args: &Options) -> Result<(), String> {
    // 10000 messages per sender per batch: each sender's share between two waits for the
    // whole batch's verification is the one-pair run's, whatever the pairs.
    let batch = args.batch.unwrap_or(10_000 * args.pairs);
    let slot = slot(args);
    let names: Vec<&str> = ["exon", "exon_plain", "tcp"]
        .into_iter()
        .filter(|n| args.only.as_deref().is_none_or(|o| o == *n))
        .collect();
    if names.is_empty() {
        return Err(
            "--only names no system of this mode (exon, exon_plain or tcp with --pairs/--shards)"
                .into(),
        );
    }
    let (pairs, shards) = (args.pairs as usize, args.shards as usize);
    println!(
        "one-way, {} B messages, {pairs} sender endpoints -> one receiving endpoint of \
         {shards} shard(s), send_batch {}, exon max_datagram_size {} B, {} rounds of {:.2} s \
         per system, batches of {batch}; tcp: {pairs} connections from as many threads to \
         one process with {pairs} worker threads",
        PAYLOAD,
        args.send_batch,
        args.datagram,
        args.rounds,
        slot.as_secs_f64()
    );
    let mut flows: Vec<ShardedOneWay> = names
        .iter()
        .map(|n| {
            let plain = *n == "exon_plain";
            let mut f = if *n == "tcp" {
                ShardedOneWay::new_tcp(pairs)
            } else {
                ShardedOneWay::new(plain, pairs, shards, args.datagram, args.send_batch)
            };
            f.run(batch.min(1000)); // warm up
            f
        })
        .collect();
    let totals = alternate(&mut flows, args.rounds, slot, |_, f| f.run(batch));
    let stats: Vec<_> = flows.into_iter().map(|f| f.finish()).collect();
    let rate = |i: usize| totals[i].rate();
    println!(
        "{:<10} {:>12} {:>14} {:>12}  per round (msgs/s)",
        "system", "msgs/s", "per shard", "verified"
    );
    for (i, n) in names.iter().enumerate() {
        println!(
            "{:<10} {:>12.0} {:>14.0} {:>12}  {}",
            n,
            rate(i),
            rate(i) / shards as f64,
            totals[i].messages,
            totals[i].rounds()
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
    crate::report::print_last(last);
    Ok(())
}

fn rpc(args: &Options) -> Result<(), String> {
    let size = size(args);
    let batch = args
        .batch
        .unwrap_or_else(|| batch_for(size, 2_000))
        .max(args.callers);
    let slot = slot(args);
    let (kinds, refused) = selected(args, RpcKind::ALL, RpcKind::name)?;
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
    let mut lats: Vec<Latencies> = vec![Latencies::default(); kinds.len()];
    let totals = alternate(&mut rpcs, args.rounds, slot, |i, r| {
        let (d, l) = r.run(batch, args.callers);
        let k = l.len() as u64;
        lats[i].extend(l);
        (k, d)
    });
    drop(rpcs);

    let rate = |i: usize| totals[i].rate();
    // Payload both ways: the request and its reply.
    let bytes = 2 * args.size;
    let exon = kinds.iter().position(|&k| k == RpcKind::Exon).map(rate);
    let p: Vec<(f64, f64)> = lats
        .iter()
        .map(|l| (l.quantile_us(0.5), l.quantile_us(0.99)))
        .collect();
    println!(
        "{:<8} {:>12} {:>10} {:>9} {:>10} {:>10} {:>10} {:>11}  per round (req/s)",
        "system", "req/s", "MB/s", "vs exon", "p50 us", "p99 us", "verified", "cpu us/req"
    );
    for (i, k) in kinds.iter().enumerate() {
        println!(
            "{:<8} {:>12.0} {:>10.1} {:>9} {:>10.0} {:>10.0} {:>10} {:>11.2}  {}",
            k.name(),
            rate(i),
            mb_s(rate(i), bytes),
            vs_exon(rate(i), exon),
            p[i].0,
            p[i].1,
            totals[i].messages,
            totals[i].cpu_us_per_message(),
            totals[i].rounds()
        );
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let mut last = Vec::new();
    for (i, n) in names.iter().enumerate() {
        last.push(format!("{n}={:.0}", rate(i)));
    }
    for (i, n) in names.iter().enumerate() {
        last.push(format!("{n}_p50_us={:.0}", p[i].0));
        last.push(format!("{n}_p99_us={:.0}", p[i].1));
    }
    last.extend(ratios(&names, rate));
    for (i, n) in names.iter().enumerate() {
        last.push(format!("{n}_mb_s={:.1}", mb_s(rate(i), bytes)));
    }
    last.extend(cpu_keys(&names, &totals));
    last.push(format!("callers={}", args.callers));
    last.extend(tail_keys(args, &refused));
    last.extend(durable_keys(args));
    crate::report::print_last(last);
    Ok(())
}

/// One long transfer per system per round, systems alternating; medians of the rounds.
fn stream(args: &Options) -> Result<(), String> {
    use crate::streams::{expected_crc, median, transfer, StreamKind};
    let kinds: Vec<StreamKind> = StreamKind::ALL
        .into_iter()
        .filter(|k| args.only.as_deref().is_none_or(|o| o == k.name()))
        .collect();
    if kinds.is_empty() {
        return Err(
            "--only names no system of this mode (exon, exon_plain, tcp, tcp_tls, quic)".into(),
        );
    }
    let blocks = args.mib;
    println!(
        "stream, one transfer of {blocks} MiB per system per round (1 MiB writes), {} rounds, \
         exon max_datagram_size {} B (0: path MTU discovery), chunks of {} B",
        args.rounds,
        args.datagram,
        exon::endpoint::FlowConfig::default().stream_chunk
    );
    let crc = expected_crc(blocks);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for _ in 0..args.rounds {
        for (i, &k) in kinds.iter().enumerate() {
            let t = transfer(k, blocks, args.datagram);
            assert_eq!(t.bytes, blocks << 20, "{}: bytes read", k.name());
            assert_eq!(t.crc, crc, "{}: CRC-32 of the bytes read", k.name());
            rates[i].push(t.mib_s());
        }
    }
    let med: Vec<f64> = rates.iter().map(|r| median(&mut r.clone())).collect();
    let exon = kinds
        .iter()
        .position(|&k| k == StreamKind::Exon)
        .map(|i| med[i]);
    println!(
        "{:<10} {:>10} {:>9}  verified (bytes, crc32)  per round (MiB/s)",
        "system", "MiB/s", "vs exon"
    );
    for (i, k) in kinds.iter().enumerate() {
        let per: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "{:<10} {:>10.1} {:>9}  {} x {} B, {crc:08x}  {}",
            k.name(),
            med[i],
            vs_exon(med[i], exon),
            args.rounds,
            blocks << 20,
            per.join(" ")
        );
    }
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let mut last: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{n}_mib_s={:.1}", med[i]))
        .collect();
    last.extend(ratios(&names, |i| med[i]));
    last.push(format!("mib={blocks}"));
    last.push(format!("rounds={}", args.rounds));
    last.push(format!("datagram={}", args.datagram));
    crate::report::print_last(last);
    Ok(())
}

/// Request/reply over one ordered channel against plain messages, alternating in rounds.
fn channel(args: &Options) -> Result<(), String> {
    use crate::streams::{channel_calls, ChannelKind};
    let kinds: Vec<ChannelKind> = ChannelKind::ALL
        .into_iter()
        .filter(|k| args.only.as_deref().is_none_or(|o| o == k.name()))
        .collect();
    if kinds.is_empty() {
        return Err("--only names no system of this mode (exon_channel, exon_plain_msgs)".into());
    }
    let callers = u32::try_from(args.callers).map_err(|_| "--callers too large")?;
    let slot = slot(args);
    let warmup = Duration::from_millis(200);
    println!(
        "channel, {} B requests and replies, {callers} concurrent callers, sealed, exon \
         max_datagram_size {} B, {} rounds of {:.2} s per system (after {} ms of warm-up each)",
        args.size,
        args.datagram,
        args.rounds,
        slot.as_secs_f64(),
        warmup.as_millis()
    );
    let mut lats = vec![Latencies::default(); kinds.len()];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    let mut totals = vec![0u64; kinds.len()];
    for _ in 0..args.rounds {
        for (i, &k) in kinds.iter().enumerate() {
            let c = channel_calls(k, callers, size(args), args.datagram, warmup, slot);
            rates[i].push(c.replies as f64 / c.time.as_secs_f64());
            totals[i] += c.replies;
            lats[i].merge(&c.latencies);
        }
    }
    let rate = |i: usize| totals[i] as f64 / (slot.as_secs_f64() * args.rounds as f64);
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>10}  per round (req/s)",
        "system", "req/s", "p50 us", "p99 us", "verified"
    );
    let mut last = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let per: Vec<String> = rates[i].iter().map(|r| format!("{r:.0}")).collect();
        let (p50, p99) = (lats[i].quantile_us(0.5), lats[i].quantile_us(0.99));
        println!(
            "{:<16} {:>10.0} {:>10.0} {:>10.0} {:>10}  {}",
            k.name(),
            rate(i),
            p50,
            p99,
            totals[i],
            per.join(" ")
        );
        last.push(format!("{}={:.0}", k.name(), rate(i)));
        last.push(format!("{}_p50_us={p50:.0}", k.name()));
        last.push(format!("{}_p99_us={p99:.0}", k.name()));
    }
    if kinds.len() == 2 {
        last.push(format!("channel_over_plain={:.3}", rate(0) / rate(1)));
    }
    last.push(format!("callers={callers}"));
    last.push(format!("size={}", args.size));
    last.push(format!("datagram={}", args.datagram));
    crate::report::print_last(last);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        options: Options,
    }

    fn options(args: &[&str]) -> Options {
        Cli::parse_from(std::iter::once("compare").chain(args.iter().copied())).options
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let o = options(&["one-way"]);
        assert_eq!(o.mode, Mode::OneWay);
        assert_eq!((o.secs, o.rounds, o.callers, o.size), (3.0, 3, 100, 1024));
        assert_eq!((o.datagram, o.threads, o.send_batch), (0, 0, 0));
        assert_eq!((o.pairs, o.shards, o.window), (1, 1, 0));
        assert!(o.batch.is_none() && o.only.is_none());
        assert!(!o.quick && !o.no_nats && o.dir.is_none());
    }

    #[test]
    fn usage_errors_come_back_before_anything_runs() {
        let err = run(&options(&["rpc", "--pairs", "2"])).unwrap_err();
        assert_eq!(err, "--pairs, --shards and --send-batch are for one-way");
        let err = run(&options(&["one-way", "--secs", "0"])).unwrap_err();
        assert_eq!(err, "--secs must be positive");
    }
}
