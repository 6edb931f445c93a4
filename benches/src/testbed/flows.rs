//! Several one-way flows on one bottleneck at once, and their fairness.
//!
//! Several one-way flows on one bottleneck at once: each flow its own sender and receiver
//! process (its own port), all through the same emulated link and its one queue. Reports
//! each flow's goodput, its share, Jain's fairness index and, if asked, a plot of each
//! flow's rate over time.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::testbed::cell::{self, Args, Timing};
use crate::testbed::emulator::{DirCounters, Impairment};
use crate::testbed::netns::{Proc, Result, Side, Testbed};
use crate::testbed::roles::{self, ExonTuning, System};
use crate::testbed::svg::Chart;

/// How often each receiver samples its count.
const SAMPLE: Duration = Duration::from_millis(100);
/// Width of one point of the rate-over-time plot, in samples.
const BUCKET: usize = 5;

/// How the TCP flows are set up, where not the kernel's defaults.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tcp {
    /// The kernel paces them ([`crate::testbed::sys::set_tcp_pacing`]).
    pub pacing: bool,
    /// Their largest segment.
    pub mss: Option<u32>,
}

/// One flow's outcome.
#[derive(Debug, Clone)]
pub struct Flow {
    /// The system.
    pub system: System,
    /// Goodput in messages per second over the receiver's measured window (verified
    /// exactly once); `None` if the flow failed.
    pub rate: Option<f64>,
    /// Whether everything sent was delivered before the end.
    pub complete: bool,
    /// Sender and receiver figures, or the failure.
    pub notes: String,
    /// Wall-clock time of the receiver's first sample (ms since the epoch) and its
    /// cumulative counts, one per [`SAMPLE`].
    series: Option<(u64, Vec<u64>)>,
}

/// The outcome of a run of several flows.
pub struct Outcome {
    /// Every flow, in the order asked.
    pub flows: Vec<Flow>,
    /// The emulator's counters during the run (all flows): a to b, b to a.
    pub link: [DirCounters; 2],
    /// Wall-clock time at which the senders were stopped (ms since the epoch).
    stopped_ms: u64,
}

/// One flow's processes while it runs.
struct Running {
    args: Args,
    send: Proc,
    recv: Proc,
}

/// Runs one one-way flow of every system in `systems` at once over `tb` with `imp`.
pub fn run_flows(
    tb: &Testbed,
    imp: Impairment,
    timing: Timing,
    exon: ExonTuning,
    systems: &[System],
    tcp: Tcp,
    port: &mut u16,
) -> Result<Outcome> {
    tb.reset(imp);
    let before = tb.counters();
    // Every receiver first, then the senders back to back, so the flows start together.
    let mut ready = Vec::new();
    for &system in systems {
        if cell::refusal(system, exon, timing.size).is_some() {
            continue; // said, and left out
        }
        *port += 1;
        let args = Args {
            system,
            port: *port,
            timing,
            exon,
            series: Some(SAMPLE),
            tcp_pacing: tcp.pacing,
            tcp_mss: tcp.mss,
        };
        let mut recv = tb.spawn(Side::B, &args.role("recv", 1, None))?;
        let r = recv.expect("READY", Duration::from_secs(10))?;
        ready.push((args, recv, r.get("cert").cloned()));
    }
    let mut running = Vec::new();
    for (args, recv, cert) in ready {
        let send = tb.spawn(Side::A, &args.role("send", 1, cert.as_ref()))?;
        running.push(Running { args, send, recv });
    }
    // Every receiver measures its own window (`secs` after `warmup` from its first
    // delivery); the senders run until the last has measured, so the windows overlap in
    // full but for the flows' start-up.
    let mut measured = Vec::new();
    for r in &mut running {
        let t = r.args.timing;
        measured.push(r.recv.expect("MEASURED", r.args.bound(t.warmup + t.secs)));
    }
    for r in &mut running {
        r.send.tell("STOP");
    }
    let stopped_ms = roles::unix_ms();
    let mut flows = Vec::new();
    for (r, m) in running.into_iter().zip(measured) {
        let system = r.args.system;
        let flow = m.and_then(|_| finish(r));
        flows.push(match flow {
            Ok(f) => f,
            Err(e) if e == "interrupted" => return Err(e),
            Err(e) => {
                eprintln!("testbed: flow of {} failed: {e}", system.name());
                Flow {
                    system,
                    rate: None,
                    complete: false,
                    notes: format!("FAILED: {e}"),
                    series: None,
                }
            }
        });
    }
    let after = tb.counters();
    Ok(Outcome {
        flows,
        link: [after[0].since(&before[0]), after[1].since(&before[1])],
        stopped_ms,
    })
}

/// Collects a stopped flow's end: what it sent, and whether all of it arrived.
fn finish(mut r: Running) -> Result<Flow> {
    let sent = r.send.expect("SENT", r.args.bound(Duration::ZERO))?;
    let n = sent.get("n").ok_or("SENT without n")?;
    r.recv.tell(&format!("EXPECT {n}"));
    let done = r.recv.expect("DONE", r.args.bound(Duration::ZERO))?;
    r.recv.finish(Duration::from_secs(3));
    r.send.finish(Duration::from_secs(3));
    let skip = ["rate", "complete", "series", "series_t0_ms", "series_ms"];
    let notes = format!("{} {}", cell::rest(&sent, &["n"]), cell::rest(&done, &skip));
    Ok(Flow {
        system: r.args.system,
        rate: cell::num(&done, "rate"),
        complete: done.get("complete").map(String::as_str) == Some("true"),
        notes: notes.trim().to_string(),
        series: series(&done),
    })
}

fn series(done: &HashMap<String, String>) -> Option<(u64, Vec<u64>)> {
    let t0 = done.get("series_t0_ms")?.parse().ok()?;
    let counts = done
        .get("series")?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<Vec<u64>>>()?;
    Some((t0, counts))
}

/// Jain's fairness index of `x`: (sum x)^2 / (n * sum x^2); 1 when all are equal, 1/n when
/// one takes everything.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// The link's capacity in `size`-byte messages per second.
pub fn link_msgs(imp: &Impairment, size: usize) -> f64 {
    imp.rate_bps as f64 / (size as f64 * 8.0)
}

/// Prints the flows' table, the emulator's counters and the `key=value` line.
/// `tcp`: how the TCP flows were set up; `size`: bytes per message.
pub fn print_flows(imp: &Impairment, exon: ExonTuning, tcp: Tcp, size: usize, out: &Outcome) {
    let link = link_msgs(imp, size);
    let rates: Vec<f64> = out.flows.iter().map(|f| f.rate.unwrap_or(0.0)).collect();
    let total: f64 = rates.iter().sum();
    let fmt = |x: Option<f64>, p: usize| x.map_or("-".into(), |v| format!("{v:.p$}"));
    // Messages larger than the default come a few per second: a decimal more.
    let rate_digits = usize::from(size > crate::message::PAYLOAD);
    println!(
        "{:<6} {:<10} {:>10} {:>8} {:>8} {:>8} {:>9}",
        "flow", "system", "msgs/s", "Mbit/s", "share", "of link", "complete"
    );
    for (i, f) in out.flows.iter().enumerate() {
        println!(
            "{:<6} {:<10} {:>10} {:>8} {:>8} {:>8} {:>9}",
            i,
            f.system.name(),
            fmt(f.rate, rate_digits),
            fmt(f.rate.map(|r| cell::mbit_s(r, size)), 1),
            fmt(f.rate.filter(|_| total > 0.0).map(|r| r / total), 2),
            fmt(f.rate.map(|r| r / link), 2),
            f.complete
        );
    }
    let j = jain(&rates);
    println!(
        "all {} flows: {total:.0} msgs/s, {:.2} of the link ({link:.0} msgs/s of {size} B); \
         Jain's index {j:.3}",
        rates.len(),
        total / link
    );
    println!("  link a->b: {}", out.link[0]);
    println!("  link b->a: {}", out.link[1]);
    for (i, f) in out.flows.iter().enumerate() {
        if !f.notes.is_empty() {
            println!("  flow{i} {} notes: {}", f.system.name(), f.notes);
        }
    }
    let mut kv = Vec::new();
    let names: Vec<&str> = out.flows.iter().map(|f| f.system.name()).collect();
    kv.push(format!("flows={}", names.join(",")));
    for (i, f) in out.flows.iter().enumerate() {
        kv.push(format!("flow{i}={}", fmt(f.rate, rate_digits)));
    }
    for (i, f) in out.flows.iter().enumerate() {
        let share = f.rate.filter(|_| total > 0.0).map(|r| r / total);
        kv.push(format!("flow{i}_share={}", fmt(share, 3)));
    }
    kv.push(format!("jain={j:.3}"));
    kv.push(format!("utilisation={:.3}", total / link));
    kv.push(format!("size={size}"));
    kv.push(format!("rate_mbit={}", imp.rate_bps as f64 / 1e6));
    kv.push(format!("rtt_ms={}", imp.rtt.as_secs_f64() * 1e3));
    kv.push(format!("loss={}", imp.loss));
    kv.push(format!("queue_bytes={}", imp.queue_bytes));
    kv.push(format!(
        "queue_drops={}",
        out.link[0].dropped_queue + out.link[1].dropped_queue
    ));
    let complete = out.flows.iter().all(|f| f.complete);
    kv.push(format!("complete={complete}"));
    if tcp.pacing {
        kv.push("tcp_pacing=true".into());
    }
    if let Some(mss) = tcp.mss {
        kv.push(format!("tcp_mss={mss}"));
    }
    let d = ExonTuning::default();
    if (exon.window, exon.envelopes) != (d.window, d.envelopes) {
        kv.push(format!("exon_window={}", exon.window));
        kv.push(format!("exon_envelopes={}", exon.envelopes));
    }
    if exon.congestion != d.congestion {
        let name = roles::congestion_name(exon.congestion);
        kv.push(format!("exon_congestion={name}"));
    }
    println!("{}", kv.join(" "));
}

/// Each flow's goodput in Mbit/s (of `size`-byte messages) per [`BUCKET`] of samples, on one
/// time axis from the first receiver's first sample to the senders' stop.
fn rates_over_time(out: &Outcome, size: usize) -> (Vec<f64>, Vec<Vec<Option<f64>>>) {
    let every = SAMPLE.as_millis() as u64;
    let t0 = out
        .flows
        .iter()
        .filter_map(|f| f.series.as_ref().map(|s| s.0))
        .min()
        .unwrap_or(out.stopped_ms);
    let n = (out.stopped_ms.saturating_sub(t0) / every) as usize;
    let buckets = n / BUCKET;
    let secs = BUCKET as f64 * SAMPLE.as_secs_f64();
    let times = (1..=buckets).map(|b| b as f64 * secs).collect();
    let lines = out
        .flows
        .iter()
        .map(|f| {
            // The counts on the common axis: sample k of this flow is at its t0 + k * every.
            let at = |k: usize| -> Option<u64> {
                let (t, counts) = f.series.as_ref()?;
                let shift = ((t - t0 + every / 2) / every) as usize;
                match k.checked_sub(shift) {
                    None => Some(0),
                    Some(i) => counts.get(i).copied(),
                }
            };
            (0..buckets)
                .map(|b| {
                    let (c0, c1) = (at(b * BUCKET)?, at((b + 1) * BUCKET)?);
                    Some(cell::mbit_s(c1.saturating_sub(c0) as f64 / secs, size))
                })
                .collect()
        })
        .collect();
    (times, lines)
}

/// Prints each flow's goodput over time (Mbit/s of `size`-byte messages per point of
/// `BUCKET` samples), one line per point: `series t=SECONDS flow0=.. flow1=..` (`-`: no
/// sample yet).
pub fn print_series(out: &Outcome, size: usize) {
    let (times, lines) = rates_over_time(out, size);
    for (i, t) in times.iter().enumerate() {
        let rates: Vec<String> = lines
            .iter()
            .enumerate()
            .map(|(f, l)| match l.get(i).copied().flatten() {
                Some(r) => format!("flow{f}={r:.1}"),
                None => format!("flow{f}=-"),
            })
            .collect();
        println!("series t={t:.1} {}", rates.join(" "));
    }
}

/// Writes the plot of each flow's rate over time to `path` (SVG); `size`: bytes per message.
pub fn plot(imp: &Impairment, out: &Outcome, size: usize, path: &Path) -> Result<()> {
    let (times, lines) = rates_over_time(out, size);
    let ticks = times
        .iter()
        .map(|t| {
            if (t - t.round()).abs() < 1e-9 && (*t as u64).is_multiple_of(2) {
                format!("{t:.0}")
            } else {
                String::new()
            }
        })
        .collect();
    let series = out
        .flows
        .iter()
        .zip(lines)
        .enumerate()
        .map(|(i, (f, l))| (format!("flow{i} {}", f.system.name()), l))
        .collect();
    let chart = Chart {
        title: format!(
            "{} flows on {} Mbit/s, RTT {} ms, loss {} %",
            out.flows.len(),
            imp.rate_bps as f64 / 1e6,
            imp.rtt.as_secs_f64() * 1e3,
            imp.loss * 100.0
        ),
        x_label: format!(
            "seconds (goodput per {:.1} s)",
            BUCKET as f64 * SAMPLE.as_secs_f64()
        ),
        y_label: format!("goodput (Mbit/s of {size} B messages)"),
        x_ticks: ticks,
        series,
        log_y: false,
    };
    let shown = path.display();
    std::fs::write(path, chart.render()).map_err(|e| format!("write {shown}: {e}"))?;
    println!("testbed: wrote {shown}");
    Ok(())
}
