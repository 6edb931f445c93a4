//! The paper's grid (Section V), written as tables, a CSV and plots.
//!
//! The paper's grid (Section V): loss 0/1/5 % at 100 Mbit/s and 10 ms; 1/10/100 Mbit/s at
//! 10 ms; RTT 6/10/100 ms at 10 Mbit/s; one-way and RPC with 1 to 256 callers. Writes
//! markdown tables, a CSV of every run and SVG plots, after every link (so an interrupted
//! grid keeps what it measured).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Args;
use crate::testbed::cell::{self, Outcome, Pattern, Timing};
use crate::testbed::emulator::Impairment;
use crate::testbed::netns::{Result, Testbed};
use crate::testbed::roles::{ExonTuning, System};
use crate::testbed::svg::Chart;

/// Rate (Mbit/s), RTT (ms) and loss of every distinct link of the grid.
const LINKS: [(f64, f64, f64); 7] = [
    (100.0, 10.0, 0.0),
    (100.0, 10.0, 0.01),
    (100.0, 10.0, 0.05),
    (1.0, 10.0, 0.0),
    (10.0, 10.0, 0.0),
    (10.0, 6.0, 0.0),
    (10.0, 100.0, 0.0),
];
/// RPC callers.
const CALLERS: [u64; 5] = [1, 4, 16, 64, 256];
/// Default measured seconds per run in the grid.
const GRID_SECS: f64 = 4.0;

/// Three points of a series: an index into `LINKS` and its x label.
type Points = [(usize, &'static str); 3];

/// The three series of the paper: key, axis label, points.
const SERIES: [(&str, &str, Points); 3] = [
    (
        "loss",
        "loss each way (100 Mbit/s, RTT 10 ms)",
        [(0, "0 %"), (1, "1 %"), (2, "5 %")],
    ),
    (
        "bandwidth",
        "link rate (RTT 10 ms, no loss)",
        [(3, "1 Mbit/s"), (4, "10 Mbit/s"), (0, "100 Mbit/s")],
    ),
    (
        "rtt",
        "round-trip time (10 Mbit/s, no loss)",
        [(5, "6 ms"), (4, "10 ms"), (6, "100 ms")],
    ),
];

/// One cell's results.
struct Cell {
    link: usize,
    pattern: Pattern,
    outcomes: Vec<Outcome>,
}

/// Everything measured so far.
struct Grid {
    imps: Vec<Impairment>,
    tunings: Vec<ExonTuning>,
    realtime: bool,
    cells: Vec<Cell>,
    timing: Timing,
    started: Instant,
}

fn link_name(l: (f64, f64, f64)) -> String {
    format!("{} Mbit/s, {} ms, {} %", l.0, l.1, l.2 * 100.0)
}

fn slug(l: (f64, f64, f64)) -> String {
    format!("{}mbit-{}ms-loss{}", l.0, l.1, l.2 * 100.0)
}

/// Runs the grid and writes its reports under `a.out`.
pub fn run_paper(a: &Args) -> Result<()> {
    let timing = Timing {
        warmup: Duration::from_secs_f64(a.warmup),
        secs: Duration::from_secs_f64(a.secs.unwrap_or(GRID_SECS)),
        drain: Duration::from_secs_f64(a.drain),
        size: crate::message::PAYLOAD,
    };
    let imps: Vec<Impairment> = LINKS
        .iter()
        .map(|l| super::impairment(a, l.0, l.1, l.2))
        .collect();
    let tunings = imps.iter().map(|i| super::exon_tuning(a, i)).collect();
    let mut g = Grid {
        imps,
        tunings,
        realtime: false,
        cells: Vec::new(),
        timing,
        started: Instant::now(),
    };
    // Relative to the workspace root (cargo runs benches from the package's directory).
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let out_path = root.join(&a.out);
    let out = out_path.as_path();
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut port = 5000;
    for (li, l) in LINKS.iter().enumerate() {
        let (imp, exon) = (g.imps[li], g.tunings[li]);
        let tb = Testbed::new(imp)?;
        g.realtime = tb.realtime();
        let patterns = std::iter::once(Pattern::OneWay)
            .chain(CALLERS.iter().map(|&callers| Pattern::Rpc { callers }));
        for pattern in patterns {
            println!(
                "\n== {} | {pattern:?} | exon window {} envelopes {} | {:.0} s elapsed",
                link_name(*l),
                exon.window,
                exon.envelopes,
                g.started.elapsed().as_secs_f64()
            );
            let outcomes = cell::run_cell(&tb, imp, pattern, timing, exon, &a.systems, &mut port)?;
            cell::print_cell(&imp, pattern, exon, timing.size, &outcomes);
            g.cells.push(Cell {
                link: li,
                pattern,
                outcomes,
            });
        }
        drop(tb);
        g.write(out, &a.systems)?;
    }
    println!(
        "\ngrid done in {:.0} s; reports in {}",
        g.started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

impl Grid {
    fn outcome(&self, link: usize, pattern: Pattern, s: System) -> Option<&Outcome> {
        self.cells
            .iter()
            .find(|c| c.link == link && c.pattern == pattern)?
            .outcomes
            .iter()
            .find(|o| o.system == s)
    }

    fn rate(&self, link: usize, pattern: Pattern, s: System) -> Option<f64> {
        self.outcome(link, pattern, s)?.rate
    }

    fn write(&self, out: &Path, systems: &[System]) -> Result<()> {
        let put = |name: &str, body: String| {
            std::fs::write(out.join(name), body).map_err(|e| format!("{name}: {e}"))
        };
        put("paper-grid.md", self.markdown(systems))?;
        put("results.csv", self.csv())?;
        for (key, label, pts) in SERIES {
            let chart = Chart {
                title: format!("One-way goodput against {key}"),
                x_label: label.into(),
                y_label: "messages/s (1 KB, verified)".into(),
                x_ticks: pts.iter().map(|p| p.1.to_string()).collect(),
                series: systems
                    .iter()
                    .map(|&s| {
                        let v = pts.iter().map(|p| self.rate(p.0, Pattern::OneWay, s));
                        (s.name().to_string(), v.collect())
                    })
                    .collect(),
                log_y: false,
            };
            put(&format!("one-way-{key}.svg"), chart.render())?;
        }
        for (li, l) in LINKS.iter().enumerate() {
            if !self.cells.iter().any(|c| c.link == li) {
                continue;
            }
            for (what, unit) in [("throughput", "requests/s"), ("latency", "p50 latency, ms")] {
                let series = systems
                    .iter()
                    .map(|&s| {
                        let v = CALLERS.iter().map(|&callers| {
                            let o = self.outcome(li, Pattern::Rpc { callers }, s)?;
                            if what == "throughput" {
                                o.rate
                            } else {
                                o.p50_us.map(|u| u / 1e3)
                            }
                        });
                        (s.name().to_string(), v.collect())
                    })
                    .collect();
                let chart = Chart {
                    title: format!("RPC {what}, {}", link_name(*l)),
                    x_label: "concurrent callers".into(),
                    y_label: unit.into(),
                    x_ticks: CALLERS.iter().map(|c| c.to_string()).collect(),
                    series,
                    log_y: true,
                };
                put(&format!("rpc-{what}-{}.svg", slug(*l)), chart.render())?;
            }
        }
        Ok(())
    }

    fn markdown(&self, systems: &[System]) -> String {
        let mut m = String::new();
        let t = &self.timing;
        let _ = writeln!(m, "# The paper's grid on the impaired-link testbed\n");
        let _ = writeln!(
            m,
            "Written by `cargo bench -p exon-benches --bench testbed -- --matrix paper` ({:.0} s so far). \
             Each run: {:.1} s measured after {:.1} s warm-up, 1 KB messages, every message \
             counted verified delivered exactly once at the receiver (RPC: every request at \
             the server, every reply matched to its caller). Loss is random, the same \
             seeded sequence for every system, in both directions. Emulator at real-time \
             priority: {}. `incomplete` marks runs whose sender still had messages (or \
             callers replies) outstanding {:.0} s after the measurement; what they delivered \
             was still verified.\n",
            self.started.elapsed().as_secs_f64(),
            t.secs.as_secs_f64(),
            t.warmup.as_secs_f64(),
            self.realtime,
            t.drain.as_secs_f64()
        );
        let _ = writeln!(m, "## Links and exon's tuning\n");
        let _ = writeln!(m, "| link | queue (bytes) | exon window | exon envelopes |");
        let _ = writeln!(m, "|---|---:|---:|---:|");
        for (li, l) in LINKS.iter().enumerate() {
            let (imp, x) = (&self.imps[li], &self.tunings[li]);
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} |",
                link_name(*l),
                imp.queue_bytes,
                x.window,
                x.envelopes
            );
        }
        let names: Vec<&str> = systems.iter().map(|s| s.name()).collect();
        let _ = writeln!(m, "\n## One-way goodput (messages/s)\n");
        let ratio_cols: Vec<String> = names[1..].iter().map(|n| format!("exon/{n}")).collect();
        let _ = writeln!(
            m,
            "| link | {} | {} | exon queue drops |",
            names.join(" | "),
            ratio_cols.join(" | ")
        );
        let _ = writeln!(m, "|---|{}---:|", "---:|".repeat(names.len() * 2 - 1));
        for c in self.cells.iter().filter(|c| c.pattern == Pattern::OneWay) {
            let _ = writeln!(
                m,
                "| {} | {} |",
                link_name(LINKS[c.link]),
                self.row(c, systems)
            );
        }
        for (key, _, _) in SERIES {
            let _ = writeln!(m, "\n![one-way against {key}](one-way-{key}.svg)");
        }
        let _ = writeln!(m, "\n## RPC: requests/s and p50 latency (ms)");
        for (li, l) in LINKS.iter().enumerate() {
            if !self.cells.iter().any(|c| c.link == li) {
                continue;
            }
            let _ = writeln!(m, "\n### {}\n", link_name(*l));
            let p50: Vec<String> = names.iter().map(|n| format!("{n} p50")).collect();
            let _ = writeln!(
                m,
                "| callers | {} | {} |",
                names.join(" | "),
                p50.join(" | ")
            );
            let _ = writeln!(m, "|---:|{}", "---:|".repeat(names.len() * 2));
            for callers in CALLERS {
                let pattern = Pattern::Rpc { callers };
                let mut cols = Vec::new();
                for &s in systems {
                    let o = self.outcome(li, pattern, s);
                    cols.push(fmt_rate(o));
                }
                for &s in systems {
                    let p = self.outcome(li, pattern, s).and_then(|o| o.p50_us);
                    cols.push(p.map_or("-".into(), |u| format!("{:.1}", u / 1e3)));
                }
                let _ = writeln!(m, "| {callers} | {} |", cols.join(" | "));
            }
            let s = slug(*l);
            let _ = writeln!(
                m,
                "\n![RPC throughput](rpc-throughput-{s}.svg) ![RPC latency](rpc-latency-{s}.svg)"
            );
        }
        let _ = writeln!(m, "\n## Every run: the emulator's counters and notes\n");
        let _ = writeln!(
            m,
            "Per direction: received / dropped at random / dropped by the queue / forwarded.\n"
        );
        let _ = writeln!(m, "| link | pattern | system | a to b | b to a | notes |");
        let _ = writeln!(m, "|---|---|---|---|---|---|");
        for c in &self.cells {
            for o in &c.outcomes {
                let d = |i: usize| {
                    let k = &o.link[i];
                    format!(
                        "{} / {} / {} / {}",
                        k.received, k.dropped_random, k.dropped_queue, k.forwarded
                    )
                };
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} | {} |",
                    link_name(LINKS[c.link]),
                    pattern_name(c.pattern),
                    o.system.name(),
                    d(0),
                    d(1),
                    o.notes.replace('|', "/")
                );
            }
        }
        m
    }

    /// A one-way row: rates, exon's ratios to the others, exon's queue drops.
    fn row(&self, c: &Cell, systems: &[System]) -> String {
        let get = |s: System| c.outcomes.iter().find(|o| o.system == s);
        let mut cols: Vec<String> = systems.iter().map(|&s| fmt_rate(get(s))).collect();
        let exon = get(System::Exon).and_then(|o| o.rate);
        for &s in &systems[1..] {
            let r = exon.zip(get(s).and_then(|o| o.rate)).map(|(e, r)| e / r);
            cols.push(r.map_or("-".into(), |r| format!("{r:.2}")));
        }
        let drops = get(System::Exon).map(|o| o.link[0].dropped_queue + o.link[1].dropped_queue);
        cols.push(drops.map_or("-".into(), |d| d.to_string()));
        cols.join(" | ")
    }

    fn csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let opt = |x: Option<f64>| x.map(|v| format!("{v:.1}"));
        for c in &self.cells {
            let (l, imp, x) = (LINKS[c.link], &self.imps[c.link], &self.tunings[c.link]);
            let callers = match c.pattern {
                Pattern::OneWay => 0,
                Pattern::Rpc { callers } => callers,
            };
            for o in &c.outcomes {
                let k = &o.link;
                let row = CsvRow {
                    rate_mbit: l.0,
                    rtt_ms: l.1,
                    loss: l.2,
                    queue_bytes: imp.queue_bytes,
                    exon_window: x.window,
                    exon_envelopes: x.envelopes,
                    pattern: pattern_name(c.pattern),
                    callers,
                    system: o.system.name(),
                    rate: opt(o.rate),
                    p50_us: opt(o.p50_us),
                    p99_us: opt(o.p99_us),
                    complete: o.complete,
                    ab_received: k[0].received,
                    ab_dropped_random: k[0].dropped_random,
                    ab_dropped_queue: k[0].dropped_queue,
                    ab_forwarded: k[0].forwarded,
                    ba_received: k[1].received,
                    ba_dropped_random: k[1].dropped_random,
                    ba_dropped_queue: k[1].dropped_queue,
                    ba_forwarded: k[1].forwarded,
                };
                w.serialize(row).expect("writing CSV to memory cannot fail");
            }
        }
        let bytes = w.into_inner().expect("writing CSV to memory cannot fail");
        String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
    }
}

/// One line of `results.csv`: one system's run on one cell (the header is the field names).
#[derive(serde::Serialize)]
struct CsvRow {
    rate_mbit: f64,
    rtt_ms: f64,
    loss: f64,
    queue_bytes: usize,
    exon_window: u64,
    exon_envelopes: u64,
    pattern: String,
    callers: u64,
    system: &'static str,
    rate: Option<String>,
    p50_us: Option<String>,
    p99_us: Option<String>,
    complete: bool,
    ab_received: u64,
    ab_dropped_random: u64,
    ab_dropped_queue: u64,
    ab_forwarded: u64,
    ba_received: u64,
    ba_dropped_random: u64,
    ba_dropped_queue: u64,
    ba_forwarded: u64,
}

fn pattern_name(p: Pattern) -> String {
    match p {
        Pattern::OneWay => "one-way".into(),
        Pattern::Rpc { callers } => format!("rpc {callers}"),
    }
}

/// A rate, marked when the run failed or did not complete.
fn fmt_rate(o: Option<&Outcome>) -> String {
    match o {
        None => "-".into(),
        Some(o) => match o.rate {
            None => "failed".into(),
            Some(r) if o.complete => format!("{r:.0}"),
            Some(r) => format!("{r:.0} (incomplete)"),
        },
    }
}
