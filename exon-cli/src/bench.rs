//! `exon bench`: one-way messages or request/reply between two processes or machines,
//! iperf-style: `exon bench server` on one side, `exon bench client` on the other.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use exon::rpc::{Failure, Request, Response};
use exon::{Handle, NodeId};

use crate::node::{self, NodeOpts};

/// Which side of the benchmark.
#[derive(Debug, Subcommand)]
pub enum Role {
    /// Counts one-way messages and answers requests (each reply echoes its request) until
    /// interrupted (Ctrl-C, SIGTERM); prints a line a second on stderr while traffic comes.
    Server(ServerOpts),
    /// Sends to a server for --secs and prints the rate: a table, then one `key=value`
    /// line (`mode=... msgs_per_s=... mb_per_s=... p50_us=... p99_us=...`). A line a second
    /// on stderr shows progress.
    Client(ClientOpts),
}

/// `exon bench server`.
#[derive(Debug, Args)]
pub struct ServerOpts {
    #[command(flatten)]
    node: NodeOpts,
}

/// What the client measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Messages one way, as fast as the server takes them; the rate is of messages
    /// acknowledged, the latency from send to acknowledgement (every 64th message).
    OneWay,
    /// Requests answered by the server (the reply echoes the request), from --callers
    /// concurrent callers; the latency is each call's.
    Rpc,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::OneWay => "one-way",
            Mode::Rpc => "rpc",
        }
    }
}

/// `exon bench client`.
#[derive(Debug, Args)]
pub struct ClientOpts {
    #[command(flatten)]
    node: NodeOpts,
    /// The server's node id (default: the only --peer).
    #[arg(long, value_name = "ID")]
    to: Option<u64>,
    /// What to measure.
    #[arg(long, value_enum, default_value = "one-way")]
    mode: Mode,
    /// Measured seconds (after a short warm-up).
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Bytes per message (one-way), per request and per reply (rpc); at least 16.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(16..=16 << 20))]
    size: u64,
    /// Concurrent callers (rpc).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    callers: u64,
}

/// Runs `exon bench server` or `exon bench client`.
pub async fn run(role: Role) -> anyhow::Result<ExitCode> {
    match role {
        Role::Server(o) => server(o).await,
        Role::Client(o) => client(o).await,
    }
}

/// A payload of `size` bytes carrying `seq` at both ends, a fresh buffer each (as `compare`
/// makes them).
fn payload(seq: u64, size: usize) -> Bytes {
    let mut v = vec![0xA5u8; size];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    v[size - 8..].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

async fn server(o: ServerOpts) -> anyhow::Result<ExitCode> {
    let n = o.node.resolve("127.0.0.1:7000")?;
    let mut ep = node::bind(&n).await?;
    eprintln!("listening on {} node {}", ep.local_addr(), n.id.get());
    let calls = Arc::new(AtomicU64::new(0));
    let served = calls.clone();
    let h = ep.handle();
    tokio::spawn(async move {
        let echo = |req: Request| {
            served.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Ok::<_, Failure>(Response::new(req.into_body())))
        };
        let _ = h.serve(echo).await;
    });
    let received = Arc::new(AtomicU64::new(0));
    tokio::spawn(report_each_second(
        "server",
        vec![("msgs/s", received.clone()), ("calls/s", calls)],
    ));
    let mut buf = Vec::with_capacity(1024);
    let mut interrupted = std::pin::pin!(crate::listen::interrupted());
    loop {
        buf.clear();
        tokio::select! {
            n = ep.recv_many(&mut buf, 1024) => {
                if n == 0 {
                    break;
                }
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            _ = &mut interrupted => break,
        }
    }
    ep.close(Duration::from_millis(200)).await;
    Ok(ExitCode::SUCCESS)
}

/// Prints, every second on stderr, the rate of each counter that moved.
async fn report_each_second(who: &'static str, counters: Vec<(&'static str, Arc<AtomicU64>)>) {
    let start = Instant::now();
    let mut last: Vec<u64> = vec![0; counters.len()];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut parts = Vec::new();
        for (i, (what, c)) in counters.iter().enumerate() {
            let now = c.load(Ordering::Relaxed);
            if now > last[i] {
                parts.push(format!("{} {what}", now - last[i]));
            }
            last[i] = now;
        }
        if !parts.is_empty() {
            let t = start.elapsed().as_secs();
            eprintln!("{who} {t:>4}s: {}", parts.join(", "));
        }
    }
}

/// What a client run measured.
struct Measured {
    /// Messages acknowledged, or calls answered, in the measured time.
    count: u64,
    /// The measured time.
    elapsed: Duration,
    /// Latencies sampled, in microseconds.
    latencies: Vec<u64>,
    /// Calls that failed, messages not acknowledged.
    failures: u64,
}

async fn client(o: ClientOpts) -> anyhow::Result<ExitCode> {
    // Positive, finite, and a duration the clock can hold (`from_secs_f64` panics past it).
    let secs = match Duration::try_from_secs_f64(o.secs) {
        Ok(d) if o.secs > 0.0 && d <= Duration::from_secs(1 << 30) => d,
        _ => bail!("--secs must be positive and at most 2^30 (about 34 years)"),
    };
    let mut n = o.node.resolve("")?;
    if n.bind.is_empty() {
        n.bind = node::any_addr_for(&n.peers).to_string();
    }
    let to = node::target(&n, o.to)?;
    let ep = node::bind(&n).await?;
    let size = o.size as usize;
    let h = ep.handle();
    // Warm-up: slots, windows, keys and the path's datagram size, before the clock starts.
    warm_up(&h, to, size, o.mode).await.with_context(|| {
        format!(
            "no answer from node {} (is `exon bench server` running there, with this node's key?)",
            to.get()
        )
    })?;
    let m = match o.mode {
        Mode::OneWay => one_way(&h, to, size, secs).await?,
        Mode::Rpc => rpc(&h, to, size, secs, o.callers).await,
    };
    ep.close(Duration::from_millis(500)).await;
    print_result(&o, &m);
    Ok(if m.failures == 0 && m.count > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The bound on the warm-up.
const WARM_UP_DEADLINE: Duration = Duration::from_secs(5);

async fn warm_up(h: &Handle, to: NodeId, size: usize, mode: Mode) -> anyhow::Result<()> {
    match mode {
        Mode::OneWay => {
            let mut receipts = Vec::new();
            for seq in 0..1000 {
                receipts.push(
                    h.send_within(to, payload(seq, size), WARM_UP_DEADLINE)
                        .await?,
                );
            }
            for r in receipts {
                r.await?;
            }
        }
        Mode::Rpc => {
            for seq in 0..100 {
                h.call_within(to, payload(seq, size), WARM_UP_DEADLINE)
                    .await?;
            }
        }
    }
    Ok(())
}

/// Every how many messages a one-way run samples a latency.
const SAMPLE_EVERY: u64 = 64;
/// How long a run waits past its measured time for the last verdicts.
const DRAIN_DEADLINE: Duration = Duration::from_secs(30);

async fn one_way(h: &Handle, to: NodeId, size: usize, secs: Duration) -> anyhow::Result<Measured> {
    let base = h.stats().await.context("endpoint stopped")?.node;
    let acked = Arc::new(AtomicU64::new(0));
    let progress = tokio::spawn(report_each_second(
        "client",
        vec![("msgs/s acknowledged", acked.clone())],
    ));
    let poll = {
        let (h, acked) = (h.clone(), acked.clone());
        tokio::spawn(async move {
            while let Some(s) = h.stats().await {
                acked.store(s.node.acknowledged - base.acknowledged, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < secs {
        // A batch between clock reads.
        for _ in 0..64 {
            let seq = 1_000 + sent;
            let r = h.send(to, payload(seq, size)).await?;
            if sent.is_multiple_of(SAMPLE_EVERY) {
                let (lat, t) = (latencies.clone(), Instant::now());
                tokio::spawn(async move {
                    if r.await.is_ok() {
                        let us = t.elapsed().as_micros() as u64;
                        lat.lock().unwrap_or_else(|p| p.into_inner()).push(us);
                    }
                });
            }
            // Other receipts are dropped: the acknowledged counter counts them, and
            // dropping a receipt never cancels its message.
            sent += 1;
        }
    }
    let drain = Instant::now();
    while acked.load(Ordering::Relaxed) < sent && drain.elapsed() < DRAIN_DEADLINE {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = start.elapsed();
    let count = acked.load(Ordering::Relaxed).min(sent);
    poll.abort();
    progress.abort();
    let latencies = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Measured {
        count,
        elapsed,
        latencies,
        failures: sent - count,
    })
}

async fn rpc(h: &Handle, to: NodeId, size: usize, secs: Duration, callers: u64) -> Measured {
    let done = Arc::new(AtomicU64::new(0));
    let progress = tokio::spawn(report_each_second(
        "client",
        vec![("calls/s", done.clone())],
    ));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(callers as usize);
    for c in 0..callers {
        let (h, done) = (h.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let (mut lat, mut failures) = (Vec::new(), 0u64);
            let mut seq = 1_000_000 * (c + 1);
            while start.elapsed() < secs {
                let t = Instant::now();
                match h.call_within(to, payload(seq, size), DRAIN_DEADLINE).await {
                    Ok(reply) if reply.len() == size => {
                        lat.push(t.elapsed().as_micros() as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => failures += 1,
                }
                seq += 1;
            }
            (lat, failures)
        }));
    }
    let (mut latencies, mut failures) = (Vec::new(), 0);
    for t in tasks {
        match t.await {
            Ok((l, f)) => {
                latencies.extend(l);
                failures += f;
            }
            Err(_) => failures += 1,
        }
    }
    progress.abort();
    Measured {
        count: latencies.len() as u64,
        elapsed: start.elapsed(),
        latencies,
        failures,
    }
}

/// The `q` quantile of sorted values.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn print_result(o: &ClientOpts, m: &Measured) {
    let mut lat = m.latencies.clone();
    lat.sort_unstable();
    let rate = m.count as f64 / m.elapsed.as_secs_f64().max(1e-9);
    // Payload bytes: one way, or the request and its reply.
    let bytes = match o.mode {
        Mode::OneWay => o.size,
        Mode::Rpc => 2 * o.size,
    };
    let mb = rate * bytes as f64 / 1e6;
    let (p50, p99) = (quantile(&lat, 0.5), quantile(&lat, 0.99));
    let unit = match o.mode {
        Mode::OneWay => "msgs/s",
        Mode::Rpc => "calls/s",
    };
    println!(
        "{:<8} {:>12} {:>10} {:>8} {:>8} {:>10} {:>8} {:>8}",
        "mode", unit, "MB/s", "p50 us", "p99 us", "count", "secs", "failed"
    );
    println!(
        "{:<8} {:>12.0} {:>10.1} {:>8} {:>8} {:>10} {:>8.2} {:>8}",
        o.mode.name(),
        rate,
        mb,
        p50,
        p99,
        m.count,
        m.elapsed.as_secs_f64(),
        m.failures
    );
    let key = match o.mode {
        Mode::OneWay => "msgs_per_s",
        Mode::Rpc => "calls_per_s",
    };
    println!(
        "mode={} {key}={rate:.0} mb_per_s={mb:.1} p50_us={p50} p99_us={p99} count={} secs={:.2} \
         failed={} size={} callers={}",
        o.mode.name(),
        m.count,
        m.elapsed.as_secs_f64(),
        m.failures,
        o.size,
        match o.mode {
            Mode::OneWay => 1,
            Mode::Rpc => o.callers,
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_sorted_values() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 51);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&[], 0.5), 0);
        let p = payload(7, 32);
        assert_eq!(
            (&p[..8], &p[24..]),
            (&7u64.to_be_bytes()[..], &7u64.to_be_bytes()[..])
        );
    }
}
