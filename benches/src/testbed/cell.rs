//! One cell of the testbed: one link setting, one pattern, every system in turn.
//!
//! One cell of the testbed: one link setting, one pattern, every system in turn over the
//! same emulated link (reset before each, so each sees the same loss sequence).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::testbed::emulator::{DirCounters, Impairment};
use crate::testbed::netns::{Proc, Result, Side, Testbed, ADDR_B};
use crate::testbed::roles::{ExonTuning, System};

/// The pattern measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// The sender sends as fast as it may; goodput at the receiver.
    OneWay,
    /// `callers` concurrent callers, request and reply of the run's size each (the server
    /// echoes the request).
    Rpc {
        /// Concurrent callers.
        callers: u64,
    },
}

/// How long and how hard a cell runs.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Warm-up before the measurement.
    pub warmup: Duration,
    /// Measured time.
    pub secs: Duration,
    /// Longest wait for outstanding messages after the measurement.
    pub drain: Duration,
    /// Bytes per message (one-way), per request and per reply (RPC).
    pub size: usize,
}

/// The outcome of one system in one cell.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The system.
    pub system: System,
    /// Messages (one-way) or requests (RPC) per second, verified exactly once; `None` if the
    /// run failed.
    pub rate: Option<f64>,
    /// Median RPC latency in microseconds.
    pub p50_us: Option<f64>,
    /// 99th percentile RPC latency in microseconds.
    pub p99_us: Option<f64>,
    /// Whether everything sent (one-way) or asked (RPC) was delivered before the end.
    pub complete: bool,
    /// The emulator's counters during the run: a to b, b to a.
    pub link: [DirCounters; 2],
    /// Other figures and notes (sender counters, failure reason).
    pub notes: String,
}

/// Runs `pattern` for every system in `systems` over `tb` with impairment `imp`.
pub fn run_cell(
    tb: &Testbed,
    imp: Impairment,
    pattern: Pattern,
    timing: Timing,
    exon: ExonTuning,
    systems: &[System],
    port: &mut u16,
) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    for &system in systems {
        if let Some(why) = refusal(system, exon, timing.size) {
            out.push(Outcome {
                system,
                rate: None,
                p50_us: None,
                p99_us: None,
                complete: false,
                link: Default::default(),
                notes: format!("REFUSED: size {} ({why})", timing.size),
            });
            continue;
        }
        tb.reset(imp);
        let before = tb.counters();
        *port += 1;
        let args = Args {
            system,
            port: *port,
            timing,
            exon,
            series: None,
            tcp_pacing: false,
            tcp_mss: None,
        };
        let run = match pattern {
            Pattern::OneWay => one_way(tb, &args),
            Pattern::Rpc { callers } => rpc(tb, &args, callers),
        };
        let after = tb.counters();
        let link = [after[0].since(&before[0]), after[1].since(&before[1])];
        let o = match run {
            Ok(mut o) => {
                o.link = link;
                o
            }
            Err(e) if e == "interrupted" => return Err(e),
            Err(e) => {
                eprintln!("testbed: {} failed: {e}", system.name());
                Outcome {
                    system,
                    rate: None,
                    p50_us: None,
                    p99_us: None,
                    complete: false,
                    link,
                    notes: format!("FAILED: {e}"),
                }
            }
        };
        out.push(o);
    }
    Ok(out)
}

/// Why `system` cannot run `size`-byte messages, said on a line of its own
/// (`exon: size N refused (PayloadTooLarge)`), or `None` if it can. Only exon refuses: until it
/// carries messages larger than one datagram in fragments, above about 1.1 KB at the
/// testbed's datagram size.
pub fn refusal(system: System, exon: ExonTuning, size: usize) -> Option<String> {
    if system != System::Exon {
        return None;
    }
    let why = crate::endpoint::exon_refusal(exon.config(), false, size)?;
    println!("exon: size {size} refused ({why})");
    Some(why)
}

/// What the endpoint processes of one run (one flow) are told.
pub struct Args {
    /// The system.
    pub system: System,
    /// The receiver's or server's port.
    pub port: u16,
    /// How long it runs.
    pub timing: Timing,
    /// Exon's tuning.
    pub exon: ExonTuning,
    /// One-way receiver: how often it samples its count for a rate over time.
    pub series: Option<Duration>,
    /// TCP sockets have the kernel pace them.
    pub tcp_pacing: bool,
    /// TCP's largest segment, if not the path's.
    pub tcp_mss: Option<u32>,
}

impl Args {
    /// The command line of the endpoint process playing `role`.
    pub fn role(&self, role: &str, callers: u64, cert: Option<&String>) -> Vec<String> {
        let t = &self.timing;
        let mut v: Vec<String> = [
            "--role",
            role,
            "--system",
            self.system.name(),
            "--addr",
            &format!("{ADDR_B}:{}", self.port),
            "--warmup",
            &t.warmup.as_secs_f64().to_string(),
            "--secs",
            &t.secs.as_secs_f64().to_string(),
            "--drain",
            &t.drain.as_secs_f64().to_string(),
            "--size",
            &t.size.to_string(),
            "--callers",
            &callers.to_string(),
            "--exon-window",
            &self.exon.window.to_string(),
            "--exon-envelopes",
            &self.exon.envelopes.to_string(),
            "--exon-congestion",
            crate::testbed::roles::congestion_name(self.exon.congestion),
        ]
        .map(String::from)
        .to_vec();
        if let Some(c) = cert {
            v.extend(["--cert".to_string(), c.clone()]);
        }
        if self.tcp_pacing {
            v.push("--tcp-pacing".to_string());
        }
        if let Some(mss) = self.tcp_mss {
            v.extend(["--tcp-mss".to_string(), mss.to_string()]);
        }
        if let Some(every) = self.series {
            v.extend(["--series-ms".to_string(), every.as_millis().to_string()]);
        }
        v
    }

    /// Bound on a run's phase that should take about `d`: generous, never endless.
    pub fn bound(&self, d: Duration) -> Duration {
        d + self.timing.drain + Duration::from_secs(20)
    }
}

pub fn num(kv: &HashMap<String, String>, k: &str) -> Option<f64> {
    kv.get(k)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

pub fn rest(kv: &HashMap<String, String>, skip: &[&str]) -> String {
    let mut keys: Vec<&String> = kv.keys().filter(|k| !skip.contains(&k.as_str())).collect();
    keys.sort();
    let mut s = String::new();
    for k in keys {
        let _ = write!(s, "{k}={} ", kv[k]);
    }
    s.trim_end().to_string()
}

/// Starts the receiving side (b) and then the sending side (a) with the certificate the
/// receiver announced.
fn start_pair(tb: &Testbed, a: &Args, roles: [&str; 2], callers: u64) -> Result<(Proc, Proc)> {
    let mut b = tb.spawn(Side::B, &a.role(roles[1], callers, None))?;
    let ready = b.expect("READY", Duration::from_secs(10))?;
    let s = tb.spawn(Side::A, &a.role(roles[0], callers, ready.get("cert")))?;
    Ok((s, b))
}

fn one_way(tb: &Testbed, a: &Args) -> Result<Outcome> {
    let t = a.timing;
    let (mut s, mut r) = start_pair(tb, a, ["send", "recv"], 1)?;
    r.expect("MEASURED", a.bound(t.warmup + t.secs))?;
    s.tell("STOP");
    let sent = s.expect("SENT", a.bound(Duration::ZERO))?;
    let n = sent.get("n").ok_or("SENT without n")?;
    r.tell(&format!("EXPECT {n}"));
    let done = r.expect("DONE", a.bound(Duration::ZERO))?;
    r.finish(Duration::from_secs(3));
    s.finish(Duration::from_secs(3));
    let mut notes = rest(&sent, &["n"]);
    notes = format!("{notes} {}", rest(&done, &["rate", "complete"]));
    Ok(Outcome {
        system: a.system,
        rate: num(&done, "rate"),
        p50_us: None,
        p99_us: None,
        complete: done.get("complete").map(String::as_str) == Some("true"),
        link: Default::default(),
        notes: notes.trim().to_string(),
    })
}

fn rpc(tb: &Testbed, a: &Args, callers: u64) -> Result<Outcome> {
    let t = a.timing;
    let (mut c, mut srv) = start_pair(tb, a, ["client", "server"], callers)?;
    let done = c.expect("DONE", a.bound(t.warmup + t.secs))?;
    c.finish(Duration::from_secs(3));
    // The server stops at the end of its input and says what its node sent (exon's).
    srv.close_input();
    let served = srv
        .expect("DONE", Duration::from_secs(3))
        .unwrap_or_default();
    srv.finish(Duration::from_secs(3));
    let mut notes = rest(&done, &["rate", "p50_us", "p99_us", "drained"]);
    let wire = rest(&served, &["served"]);
    if !wire.is_empty() {
        notes = format!("{notes} {wire}");
    }
    Ok(Outcome {
        system: a.system,
        rate: num(&done, "rate"),
        p50_us: num(&done, "p50_us"),
        p99_us: num(&done, "p99_us"),
        complete: done.get("drained").map(String::as_str) == Some("true"),
        link: Default::default(),
        notes: notes.trim().to_string(),
    })
}

/// Prints a cell's table, the emulator's counters, and the `key=value` line; `size`: bytes
/// per message (the Mbit/s column is payload one way: messages, or requests, x size).
pub fn print_cell(
    imp: &Impairment,
    pattern: Pattern,
    exon: ExonTuning,
    size: usize,
    out: &[Outcome],
) {
    let rpc = matches!(pattern, Pattern::Rpc { .. });
    let exon_rate = out
        .iter()
        .find(|o| o.system == System::Exon)
        .and_then(|o| o.rate);
    println!(
        "{:<10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "system",
        if rpc { "req/s" } else { "msgs/s" },
        "Mbit/s",
        "vs exon",
        "p50 us",
        "p99 us",
        "complete"
    );
    let fmt = |x: Option<f64>, p: usize| x.map_or("-".into(), |v| format!("{v:.p$}"));
    // Messages larger than the default come a few per second: a decimal more.
    let rate_digits = usize::from(size > crate::message::PAYLOAD);
    for o in out {
        let mbit = o.rate.map(|r| mbit_s(r, size));
        let ratio = o.rate.zip(exon_rate).map(|(r, e)| r / e);
        println!(
            "{:<10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9}",
            o.system.name(),
            fmt(o.rate, rate_digits),
            fmt(mbit, 1),
            ratio.map_or("-".into(), |r| format!("{r:.2}x")),
            fmt(o.p50_us, 0),
            fmt(o.p99_us, 0),
            o.complete
        );
    }
    for o in out {
        if !o.notes.starts_with("REFUSED") {
            println!("  {} link a->b: {}", o.system.name(), o.link[0]);
            println!("  {} link b->a: {}", o.system.name(), o.link[1]);
        }
        if !o.notes.is_empty() {
            println!("  {} notes: {}", o.system.name(), o.notes);
        }
    }
    let mut kv = Vec::new();
    for o in out {
        kv.push(format!("{}={}", o.system.name(), fmt(o.rate, rate_digits)));
    }
    if rpc {
        for o in out {
            kv.push(format!("{}_p50_us={}", o.system.name(), fmt(o.p50_us, 0)));
        }
    }
    if let Pattern::Rpc { callers } = pattern {
        kv.push(format!("callers={callers}"));
    }
    for o in out {
        let mbit = o.rate.map(|r| mbit_s(r, size));
        kv.push(format!("{}_mbit={}", o.system.name(), fmt(mbit, 1)));
    }
    kv.push(format!("size={size}"));
    kv.push(format!("rate_mbit={}", imp.rate_bps as f64 / 1e6));
    kv.push(format!("rtt_ms={}", imp.rtt.as_secs_f64() * 1e3));
    kv.push(format!("loss={}", imp.loss));
    kv.push(format!("reorder={}", imp.reorder));
    kv.push(format!("queue_bytes={}", imp.queue_bytes));
    if let Some(o) = out.iter().find(|o| o.system == System::Exon) {
        let field = |k: &str| {
            o.notes
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                .unwrap_or("-")
                .to_string()
        };
        kv.push(format!("exon_datagrams_out={}", o.link[0].received));
        kv.push(format!(
            "exon_queue_drops={}",
            o.link[0].dropped_queue + o.link[1].dropped_queue
        ));
        kv.push(format!("exon_retransmissions={}", field("retransmissions")));
        kv.push(format!("exon_spurious_found={}", field("spurious_found")));
        kv.push(format!("exon_complete={}", o.complete));
    }
    let d = ExonTuning::default();
    if (exon.window, exon.envelopes) != (d.window, d.envelopes) {
        kv.push(format!("exon_window={}", exon.window));
        kv.push(format!("exon_envelopes={}", exon.envelopes));
    }
    if exon.congestion != d.congestion {
        let name = crate::testbed::roles::congestion_name(exon.congestion);
        kv.push(format!("exon_congestion={name}"));
    }
    println!("{}", kv.join(" "));
}

/// Mbit/s of payload at `rate` messages of `size` bytes per second.
pub fn mbit_s(rate: f64, size: usize) -> f64 {
    rate * size as f64 * 8.0 / 1e6
}
