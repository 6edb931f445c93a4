//! Competing flows: exon against TCP CUBIC, TCP BBR and itself on three links; `fairness-grid.md`.
//!
//! Each pair of one-way flows ([`flows::run_flows`]) runs at once on 10 Mbit/s at RTT
//! 20 ms (the cell), 100 Mbit/s at 10 ms and 100 Mbit/s at 50 ms, no loss, a queue
//! of one bandwidth-delay product (at least 32 KiB). Reports each flow's goodput, its share
//! of what the pair got, the pair's use of the link, Jain's index, and a plot of the flows'
//! rates over time per run. 20 s measured after 2 s of warm-up by default (competing flows
//! take seconds to settle); `--secs` and `--warmup` override both.

use std::fmt::Write as _;
use std::time::Instant;

use super::{put, Link};
use crate::testbed::cell::{self, Timing};
use crate::testbed::emulator::Impairment;
use crate::testbed::flows::{self, Outcome, Tcp};
use crate::testbed::netns::{Result, Testbed};
use crate::testbed::roles::{ExonTuning, System};
use crate::testbed::Args;

/// Rate (Mbit/s), RTT (ms) and loss of every link of the grid.
const LINKS: [Link; 3] = [(10.0, 20.0, 0.0), (100.0, 10.0, 0.0), (100.0, 50.0, 0.0)];
/// The pairs of flows run at once on each link.
const PAIRS: [[System; 2]; 3] = [
    [System::Exon, System::TcpCubic],
    [System::Exon, System::TcpBbr],
    [System::Exon, System::Exon],
];
/// Default measured seconds per run.
pub const SECS: f64 = 20.0;
/// Default warm-up seconds per run.
pub const WARMUP: f64 = 2.0;

/// One run of a pair on a link.
struct Run {
    link: usize,
    pair: usize,
    out: Outcome,
}

/// Everything measured so far.
struct Grid {
    imps: Vec<Impairment>,
    tunings: Vec<ExonTuning>,
    timing: Timing,
    tcp: Tcp,
    realtime: bool,
    runs: Vec<Run>,
    started: Instant,
}

/// `--matrix fairness`: runs the grid, writes its reports and prints the `key=value` line.
pub fn run_fairness(a: &Args) -> Result<()> {
    let kv = measure(a)?;
    println!("{}", kv.join(" "));
    Ok(())
}

/// Runs the grid and writes its reports under `a.out`; the `key=value` pairs of the summary.
pub fn measure(a: &Args) -> Result<Vec<String>> {
    let imps: Vec<Impairment> = LINKS
        .iter()
        .map(|l| crate::testbed::impairment(a, l.0, l.1, l.2))
        .collect();
    let mut g = Grid {
        tunings: imps
            .iter()
            .map(|i| crate::testbed::exon_tuning(a, i))
            .collect(),
        imps,
        timing: super::grid_timing(a, WARMUP, SECS),
        tcp: Tcp {
            pacing: a.tcp_pacing,
            mss: a.tcp_mss,
        },
        realtime: false,
        runs: Vec::new(),
        started: Instant::now(),
    };
    let out_path = super::out_dir(a)?;
    let out = out_path.as_path();
    let mut port = 5000;
    for (li, l) in LINKS.iter().enumerate() {
        let (imp, exon) = (g.imps[li], g.tunings[li]);
        let tb = Testbed::new(imp)?;
        g.realtime = tb.realtime();
        for (pi, pair) in PAIRS.iter().enumerate() {
            println!(
                "\n== {} | flows {} | {:.0} s elapsed",
                super::link_name(*l),
                pair_name(pi, ","),
                g.started.elapsed().as_secs_f64()
            );
            let o = flows::run_flows(&tb, imp, g.timing, exon, pair, g.tcp, &mut port)?;
            flows::print_flows(&imp, exon, g.tcp, g.timing.size, &o);
            let plot = out.join(plot_name(li, pi));
            if let Err(e) = flows::plot(&imp, &o, g.timing.size, &plot) {
                eprintln!("testbed: {e}");
            }
            g.runs.push(Run {
                link: li,
                pair: pi,
                out: o,
            });
        }
        drop(tb);
        put(out, "fairness-grid.md", g.markdown())?;
        put(out, "fairness.csv", g.csv())?;
    }
    println!(
        "\nfairness grid done in {:.0} s; reports in {}",
        g.started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(g.summary())
}

fn pair_name(pi: usize, sep: &str) -> String {
    let names: Vec<&str> = PAIRS[pi].iter().map(|s| s.name()).collect();
    names.join(sep)
}

/// `10mbit-20ms` (with `-`) or `10mbit_20ms` (with `_`).
fn link_slug(l: Link, sep: &str) -> String {
    format!("{}mbit{sep}{}ms", l.0, l.1)
}

/// `fair-exon-tcp_cubic-10mbit-20ms.svg`.
fn plot_name(li: usize, pi: usize) -> String {
    format!(
        "fair-{}-{}.svg",
        pair_name(pi, "-"),
        link_slug(LINKS[li], "-")
    )
}

/// A run's figures: each flow's goodput in msgs/s (0 if it failed), their sum, Jain's index.
fn figures(r: &Run) -> (Vec<f64>, f64, f64) {
    let rates: Vec<f64> = r.out.flows.iter().map(|f| f.rate.unwrap_or(0.0)).collect();
    let total = rates.iter().sum();
    let j = flows::jain(&rates);
    (rates, total, j)
}

fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

impl Grid {
    fn summary(&self) -> Vec<String> {
        let mut kv = Vec::new();
        for r in &self.runs {
            let (rates, total, j) = figures(r);
            // The pair by the second flow's short name: exon_cubic, exon_bbr, exon_exon.
            let other = PAIRS[r.pair][1].name().trim_start_matches("tcp_");
            let k = format!("fair_exon_{other}_{}", link_slug(LINKS[r.link], "_"));
            let share = (total > 0.0).then(|| rates[0] / total);
            kv.push(format!("{k}_share={}", fmt(share, 2)));
            kv.push(format!("{k}_jain={j:.3}"));
        }
        kv
    }

    fn markdown(&self) -> String {
        let mut m = String::new();
        let t = &self.timing;
        let size = t.size;
        let _ = writeln!(m, "# Competing flows on the impaired-link testbed\n");
        let _ = writeln!(
            m,
            "Written by `cargo bench -p exon-benches --bench testbed -- --matrix fairness` ({:.0} s so far). \
             Two one-way flows at once on one link and its one tail-drop queue (one \
             bandwidth-delay product, at least 32 KiB), no loss, each flow its own sender and \
             receiver. Each receiver measures {:.1} s after {:.1} s of warm-up from its first \
             delivery, {size} B messages, verified exactly once; the senders run until the \
             last has measured. Share: the flow's part of what the pair got. Of link: the \
             pair's goodput over the link's rate in {size} B messages. Jain's index: 1 when \
             the flows get the same, 0.5 when one gets everything. TCP paced by the kernel: \
             {}; TCP MSS: {}. Emulator at real-time priority: {}.\n",
            self.started.elapsed().as_secs_f64(),
            t.secs.as_secs_f64(),
            t.warmup.as_secs_f64(),
            self.tcp.pacing,
            self.tcp.mss.map_or("the kernel's".into(), |v| v.to_string()),
            self.realtime,
        );
        let _ = writeln!(
            m,
            "| link | queue (bytes) | pair | flow 0 Mbit/s | flow 1 Mbit/s | flow 0 share | \
             flow 1 share | of link | Jain | queue drops | complete |"
        );
        let _ = writeln!(m, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for r in &self.runs {
            let imp = &self.imps[r.link];
            let (rates, total, j) = figures(r);
            let f = &r.out.flows;
            let mbit = |i: usize| fmt(f[i].rate.map(|x| cell::mbit_s(x, size)), 1);
            let share = |i: usize| fmt((total > 0.0).then(|| rates[i] / total), 2);
            let drops = r.out.link[0].dropped_queue + r.out.link[1].dropped_queue;
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {j:.3} | {drops} | {} |",
                super::link_name(LINKS[r.link]),
                imp.queue_bytes,
                pair_name(r.pair, " vs "),
                mbit(0),
                mbit(1),
                share(0),
                share(1),
                total / flows::link_msgs(imp, size),
                f.iter().all(|x| x.complete)
            );
        }
        let _ = writeln!(m, "\n## Rates over time\n");
        for r in &self.runs {
            let _ = writeln!(
                m,
                "![{} on {}]({})\n",
                pair_name(r.pair, " vs "),
                super::link_name(LINKS[r.link]),
                plot_name(r.link, r.pair)
            );
        }
        let _ = writeln!(m, "## Every flow's notes\n");
        let _ = writeln!(m, "| link | pair | flow | notes |");
        let _ = writeln!(m, "|---|---|---|---|");
        for r in &self.runs {
            for (i, f) in r.out.flows.iter().enumerate() {
                let _ = writeln!(
                    m,
                    "| {} | {} | {i} {} | {} |",
                    super::link_name(LINKS[r.link]),
                    pair_name(r.pair, " vs "),
                    f.system.name(),
                    f.notes.replace('|', "/")
                );
            }
        }
        m
    }

    fn csv(&self) -> String {
        let size = self.timing.size;
        let mut rows = Vec::new();
        for r in &self.runs {
            let (l, imp) = (LINKS[r.link], &self.imps[r.link]);
            let (rates, total, j) = figures(r);
            for (i, f) in r.out.flows.iter().enumerate() {
                let k = &r.out.link;
                let row = CsvRow {
                    rate_mbit: l.0,
                    rtt_ms: l.1,
                    loss: l.2,
                    queue_bytes: imp.queue_bytes,
                    pair: pair_name(r.pair, ","),
                    flow: i,
                    system: f.system.name(),
                    rate: f.rate.map(|x| format!("{x:.1}")),
                    goodput_mbit: f.rate.map(|x| format!("{:.2}", cell::mbit_s(x, size))),
                    share: (total > 0.0).then(|| format!("{:.3}", rates[i] / total)),
                    utilisation: format!("{:.3}", total / flows::link_msgs(imp, size)),
                    jain: format!("{j:.3}"),
                    complete: f.complete,
                    ab_dropped_queue: k[0].dropped_queue,
                    ba_dropped_queue: k[1].dropped_queue,
                    ab_forwarded: k[0].forwarded,
                    ba_forwarded: k[1].forwarded,
                };
                rows.push(row);
            }
        }
        super::csv_of(rows)
    }
}

/// One line of `fairness.csv`: one flow of one run (the link's counters are the run's, all
/// flows).
#[derive(serde::Serialize)]
struct CsvRow {
    rate_mbit: f64,
    rtt_ms: f64,
    loss: f64,
    queue_bytes: usize,
    pair: String,
    flow: usize,
    system: &'static str,
    rate: Option<String>,
    goodput_mbit: Option<String>,
    share: Option<String>,
    utilisation: String,
    jain: String,
    complete: bool,
    ab_dropped_queue: u64,
    ba_dropped_queue: u64,
    ab_forwarded: u64,
    ba_forwarded: u64,
}
