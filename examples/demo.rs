//! The main job: two endpoints on 127.0.0.1 exchange messages over real UDP with loss,
//! duplication and reordering injected by an in-process [`LossySocket`], then the run is
//! verified: every message delivered exactly once, whole, and acknowledged. Besides the
//! `--count` small messages it sends `--mixed` messages of sizes from 1 KiB to `--max-size`
//! (default 4 MiB), interleaved with the small ones: they travel in fragments.
//!
//! ```sh
//! cargo run --release --example demo -- --count 100000 --loss 0.05 --dup 0.01 --reorder 0.01
//! ```
//! With `--durable` both endpoints keep a journal and the receiver is killed (stopped at once,
//! its buffer lost) and restarted on its directory a third of the way through.
//! Exits non-zero if exactly-once did not hold. `--help` lists the flags; `--json` prints the
//! results as one JSON object on stdout. On a terminal it shows a progress bar; otherwise
//! (a log, CI) it prints a progress line on stderr every second.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use exon::endpoint::{Endpoint, EndpointConfig, Faults, LossySocket};
use exon::NodeId;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::net::UdpSocket;

/// Sends messages between two exon endpoints on 127.0.0.1 through a socket that drops,
/// duplicates and reorders datagrams, then checks that every message was delivered exactly
/// once and acknowledged. Exits 0 if so, 1 if not.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Opts {
    /// Small messages to send (8 bytes each).
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Messages of mixed sizes, from 1 KiB to `--max-size`, sent among the small ones.
    #[arg(long, default_value_t = 48)]
    mixed: u64,
    /// Largest of the mixed-size messages, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_size: usize,
    /// Probability that a datagram is dropped.
    #[arg(long, default_value_t = Faults::default().loss)]
    loss: f64,
    /// Probability that a datagram is sent twice.
    #[arg(long, default_value_t = Faults::default().duplicate)]
    dup: f64,
    /// Probability that a datagram is held back and sent after the next one.
    #[arg(long, default_value_t = Faults::default().reorder)]
    reorder: f64,
    /// Seed of the fault injection (the same seed makes the same choices).
    #[arg(long, default_value_t = Faults::default().seed)]
    seed: u64,
    /// Print the results as one JSON object on stdout (the human-readable lines go to
    /// stderr).
    #[arg(long)]
    json: bool,
    /// Durable endpoints (a journal each, in a temporary directory), and the receiver is
    /// killed and restarted on its directory a third of the way through: exactly-once must
    /// still hold, with nothing in doubt.
    #[arg(long)]
    durable: bool,
}

/// The size of message `i` in a run of `count` small and `mixed` mixed-size messages:
/// log-uniform between 1 KiB and `max` for the mixed ones (spread deterministically).
fn size_of(i: u64, count: u64, mixed: u64, max: usize) -> usize {
    if i < count || mixed == 0 {
        return 8;
    }
    let k = (i - count) as f64 / mixed.max(2).saturating_sub(1) as f64;
    let min = 1024f64.min(max as f64);
    ((min * (max as f64 / min).powf(k)) as usize).clamp(8, max.max(8))
}

/// Message `i`: its number, then its last byte repeated up to its size.
fn message(i: u64, size: usize) -> Vec<u8> {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(size, i as u8);
    v
}

/// Message `i` whole, if `payload` is one of ours.
fn check(payload: &[u8], count: u64, mixed: u64, max: usize) -> Option<u64> {
    let i = u64::from_be_bytes(payload.get(..8)?.try_into().ok()?);
    let whole = i < count + mixed
        && payload.len() == size_of(i, count, mixed, max)
        && payload[8..].iter().all(|b| *b == i as u8);
    whole.then_some(i)
}

impl Opts {
    fn faults(&self) -> Faults {
        let mut f = Faults::default();
        f.loss = self.loss;
        f.duplicate = self.dup;
        f.reorder = self.reorder;
        f.seed = self.seed;
        f
    }
}

/// The outcome of a run, as printed by `--json`.
#[derive(Debug, Serialize)]
struct Results {
    ok: bool,
    count: u64,
    sent: u64,
    delivered: u64,
    duplicates: u64,
    foreign: u64,
    acknowledged: u64,
    unacknowledged: usize,
    retransmissions: u64,
    duplicate_tokens_dropped: u64,
    injected_dropped: u64,
    injected_duplicated: u64,
    injected_reordered: u64,
    elapsed_s: f64,
    msgs_per_s: f64,
}

/// Progress of the delivery: a bar on a terminal, a plain line on stderr every second
/// otherwise (so a log or CI shows the run is alive). The ETA is given only once there is a rate to base it on.
struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    start: Instant,
    last_line: Instant,
}

impl Progress {
    /// Below this, the rate says too little for an estimate.
    const MIN_FOR_ETA: Duration = Duration::from_millis(500);
    const LINE_EVERY: Duration = Duration::from_secs(1);

    fn new(total: u64) -> Result<Progress, indicatif::style::TemplateError> {
        // A bar only where a person watches both outputs; plain lines (on stderr) in a log,
        // a pipe or CI.
        let bar = if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            bar.set_style(ProgressStyle::with_template(
                "{bar:40} {pos}/{len} delivered {per_sec} {msg}",
            )?);
            Some(bar)
        } else {
            None
        };
        let now = Instant::now();
        Ok(Progress {
            bar,
            total,
            start: now,
            last_line: now,
        })
    }

    /// Estimated time left when `done` of `total` are delivered, if the run has gone on long
    /// enough to tell.
    fn eta(&self, done: u64, now: Instant) -> Option<Duration> {
        let elapsed = now.duration_since(self.start);
        if done == 0 || elapsed < Self::MIN_FOR_ETA {
            return None;
        }
        let left = self.total.saturating_sub(done) as f64;
        Some(elapsed.mul_f64(left / done as f64))
    }

    fn eta_text(&self, done: u64, now: Instant) -> String {
        match self.eta(done, now) {
            Some(eta) => format!("eta {:.0} s", eta.as_secs_f64().ceil()),
            None => "eta (measuring)".to_string(),
        }
    }

    /// Records that `done` messages are delivered.
    fn update(&mut self, done: u64) {
        if !done.is_multiple_of(256) && done != self.total {
            return;
        }
        let now = Instant::now();
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(self.eta_text(done, now));
            }
            None if now.duration_since(self.last_line) >= Self::LINE_EVERY => {
                self.last_line = now;
                let secs = now.duration_since(self.start).as_secs_f64();
                eprintln!(
                    "progress: {done}/{} delivered after {secs:.1} s, {:.0} msg/s, {}",
                    self.total,
                    done as f64 / secs,
                    self.eta_text(done, now)
                );
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let opts = Opts::parse();
    match run(opts).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(o: Opts) -> Result<bool, Box<dyn std::error::Error>> {
    // With --json, stdout carries only the JSON object.
    let say = |line: String| {
        if o.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let faults = o.faults();
    let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
    let cfg = EndpointConfig::default();
    let (small, mixed, max) = (o.count, o.mixed, o.max_size);
    if max > cfg.protocol.limits.max_message_size {
        return Err(format!(
            "--max-size {max} is above max_message_size {}",
            cfg.protocol.limits.max_message_size
        )
        .into());
    }
    let sock = |seed| async move {
        let s = UdpSocket::bind("127.0.0.1:0").await?;
        Ok::<_, std::io::Error>(LossySocket::new(s, {
            let mut conf = faults;
            conf.seed = seed;
            conf
        }))
    };
    let a_sock = std::sync::Arc::new(sock(faults.seed).await?);
    let b_sock = std::sync::Arc::new(sock(faults.seed ^ 0xb).await?);
    let [a_ident, b_ident] = exon::keyfile::generate_group(&[a_id, b_id])
        .try_into()
        .expect("two identities");
    let dirs = if o.durable {
        Some((tempfile::tempdir()?, tempfile::tempdir()?))
    } else {
        None
    };
    let a = match &dirs {
        Some((d, _)) => Endpoint::builder(a_id).durable(d.path()),
        None => Endpoint::builder(a_id),
    }
    .identity(a_ident)
    .config(cfg.clone())
    .with_socket(a_sock.clone())?;
    let b_dir = dirs.as_ref().map(|(_, d)| d.path().to_path_buf());
    let start_b = || {
        let b = match &b_dir {
            Some(d) => Endpoint::builder(b_id).durable(d),
            None => Endpoint::builder(b_id),
        };
        b.identity(b_ident.clone())
            .config(cfg.clone())
            .with_socket(b_sock.clone())
    };
    let mut b = start_b()?;
    a.add_peer(b_id, b.local_addr());
    b.add_peer(a_id, a.local_addr());

    say(format!(
        "exon demo: {} messages n1 -> n2 over 127.0.0.1 ({} of them 1 KiB to {} KiB), loss {:.1} %, duplication {:.1} %, reordering {:.1} %",
        o.count + o.mixed,
        o.mixed,
        o.max_size / 1024,
        faults.loss * 100.0,
        faults.duplicate * 100.0,
        faults.reorder * 100.0
    ));
    let count = small + mixed;
    let mut progress = Progress::new(count)?;
    let start = Instant::now();
    let sender = a.handle();
    let send_task = tokio::spawn(async move {
        let mut receipts = Vec::with_capacity(count as usize);
        // The mixed-size messages go out among the small ones.
        let every = (small / mixed.max(1)).max(1);
        let (mut next_small, mut next_mixed) = (0, small);
        while next_small < small || next_mixed < count {
            let i = if next_mixed < count && (next_small % every == 0 || next_small >= small) {
                next_mixed += 1;
                next_mixed - 1
            } else {
                next_small += 1;
                next_small - 1
            };
            let m = message(i, size_of(i, small, mixed, max));
            receipts.push(sender.send(b_id, m).await?);
        }
        let mut acked = 0u64;
        for r in receipts {
            if r.await.is_ok() {
                acked += 1;
            }
        }
        Ok::<u64, exon::endpoint::Error>(acked)
    });

    let mut seen = vec![false; count as usize];
    let (mut delivered, mut duplicates, mut foreign) = (0u64, 0u64, 0u64);
    let (mut restarts, mut redelivered) = (0u64, 0u64);
    while delivered < count {
        if o.durable && restarts == 0 && delivered >= count / 3 {
            // The receiving process dies: no linger, its buffer lost; it comes back on its
            // directory and socket.
            drop(b.close(Duration::ZERO).await);
            b = start_b()?;
            b.add_peer(a_id, a.local_addr());
            restarts += 1;
            say(format!(
                "receiver killed and restarted after {delivered} messages"
            ));
        }
        let m = match tokio::time::timeout(Duration::from_secs(30), b.recv()).await {
            Ok(Some(m)) => m,
            _ => break,
        };
        let Some(i) = check(&m.payload, small, mixed, max) else {
            foreign += 1;
            continue;
        };
        match seen.get_mut(i as usize) {
            // Handed out before the restart and not acknowledged then: flagged, expected.
            Some(s) if *s && m.is_redelivery() => redelivered += 1,
            Some(s) if *s => duplicates += 1,
            Some(s) => {
                *s = true;
                delivered += 1;
                progress.update(delivered);
            }
            None => foreign += 1,
        }
    }
    let acked = tokio::time::timeout(Duration::from_secs(30), send_task)
        .await
        .map_err(|_| "timed out waiting for acknowledgements")???;
    let elapsed = start.elapsed();
    progress.finish();
    let a_report = a.close(Duration::from_secs(5)).await;
    let b_report = b.close(Duration::from_secs(1)).await;
    let s = a_report.stats.node;
    let injected = (
        a_sock.dropped() + b_sock.dropped(),
        a_sock.duplicated() + b_sock.duplicated(),
        a_sock.reordered() + b_sock.reordered(),
    );
    println!(
        "injected: {} datagrams dropped, {} duplicated, {} reordered",
        injected.0, injected.1, injected.2
    );
    println!(
        "sent={} delivered={delivered} duplicates={duplicates} acknowledged={acked} \
         throughput={:.0} msg/s retransmissions={} (lost by ACKs {}, by timeout {}, tail probes {}) \
         elapsed={:.2}s",
        s.sent,
        delivered as f64 / elapsed.as_secs_f64(),
        s.retransmissions,
        s.losses_detected,
        s.timeouts,
        s.tail_probes,
        elapsed.as_secs_f64()
    );
    let dropped_by_receiver = b_report.stats.node.duplicates_dropped;
    println!("receiver dropped {dropped_by_receiver} duplicate tokens before delivery");
    let ok = duplicates == 0
        && foreign == 0
        && delivered == count
        && acked == count
        && a_report.unacknowledged.is_empty();
    let r = Results {
        ok,
        count,
        sent: s.sent,
        delivered,
        duplicates,
        foreign,
        acknowledged: acked,
        unacknowledged: a_report.unacknowledged.len(),
        retransmissions: s.retransmissions,
        duplicate_tokens_dropped: b_report.stats.node.duplicates_dropped,
        injected_dropped: a_sock.dropped() + b_sock.dropped(),
        injected_duplicated: a_sock.duplicated() + b_sock.duplicated(),
        injected_reordered: a_sock.reordered() + b_sock.reordered(),
        elapsed_s: elapsed.as_secs_f64(),
        msgs_per_s: delivered as f64 / elapsed.as_secs_f64(),
    };
    say(format!(
        "injected: {} datagrams dropped, {} duplicated, {} reordered",
        r.injected_dropped, r.injected_duplicated, r.injected_reordered
    ));
    say(format!(
        "sent={} delivered={delivered} duplicates={duplicates} acknowledged={acked} \
         throughput={:.0} msg/s retransmissions={} elapsed={:.2}s",
        r.sent, r.msgs_per_s, r.retransmissions, r.elapsed_s
    ));
    say(format!(
        "receiver dropped {} duplicate tokens before delivery",
        r.duplicate_tokens_dropped
    ));
    if o.durable {
        say(format!(
            "durable: receiver restarted {restarts} times, {redelivered} flagged redeliveries \
             of messages handed out before the restart, {} in doubt",
            count - acked
        ));
    }
    say(if ok {
        "OK: exactly-once held".to_string()
    } else {
        "FAILED: exactly-once did not hold".to_string()
    });
    if o.json {
        println!("{}", serde_json::to_string(&r)?);
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_eta_before_there_is_a_rate() {
        let p = Progress {
            bar: None,
            total: 100,
            start: Instant::now(),
            last_line: Instant::now(),
        };
        assert_eq!(p.eta(0, p.start + Duration::from_secs(5)), None);
        assert_eq!(p.eta(10, p.start + Duration::from_millis(100)), None);
        // 25 of 100 in 2 s: 75 more take 6 s.
        assert_eq!(
            p.eta(25, p.start + Duration::from_secs(2)),
            Some(Duration::from_secs(6))
        );
    }

    #[test]
    fn mixed_sizes_span_the_range_and_are_checked_whole() {
        let (small, mixed, max) = (100, 10, 4 << 20);
        assert_eq!(size_of(5, small, mixed, max), 8);
        assert_eq!(size_of(100, small, mixed, max), 1024);
        assert_eq!(size_of(109, small, mixed, max), max);
        let m = message(104, size_of(104, small, mixed, max));
        assert_eq!(check(&m, small, mixed, max), Some(104));
        let mut cut = m.clone();
        cut.pop();
        assert_eq!(
            check(&cut, small, mixed, max),
            None,
            "a part is not the message"
        );
        let mut bad = m;
        bad[500] ^= 1;
        assert_eq!(check(&bad, small, mixed, max), None, "altered");
    }

    #[test]
    fn the_flags_parse() {
        let o = Opts::try_parse_from(["demo", "--count", "7", "--loss", "0.5", "--json"]).unwrap();
        assert_eq!((o.count, o.loss, o.json), (7, 0.5, true));
        assert_eq!(o.dup, Faults::default().duplicate);
        assert!(Opts::try_parse_from(["demo", "--bogus"]).is_err());
    }
}
