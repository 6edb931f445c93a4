//! The paper's grid (Section V): `paper-grid.md`, `results.csv` and its plots.
//!
//! The paper's grid (Section V): loss 0/1/5 % at 100 Mbit/s and 10 ms; 1/10/100 Mbit/s at
//! 10 ms; RTT 6/10/100 ms at 10 Mbit/s; one-way and RPC with 1 to 256 callers.

use std::fmt::Write as _;
use std::path::Path;

use super::{fmt_rate, link_name, put, slug, Cell, Grid, Link};
use crate::testbed::cell::Pattern;
use crate::testbed::netns::Result;
use crate::testbed::roles::System;
use crate::testbed::svg::Chart;
use crate::testbed::Args;

/// Rate (Mbit/s), RTT (ms) and loss of every distinct link of the grid.
const LINKS: [Link; 7] = [
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

/// Runs the grid and writes its reports under `a.out`.
pub fn run_paper(a: &Args) -> Result<()> {
    let timing = super::grid_timing(a, 1.0, GRID_SECS);
    Grid::run(a, "grid", (&LINKS, &CALLERS), timing, write)?;
    Ok(())
}

fn write(g: &Grid, out: &Path, systems: &[System]) -> Result<()> {
    put(out, "paper-grid.md", markdown(g, systems))?;
    put(out, "results.csv", g.csv())?;
    for (key, label, pts) in SERIES {
        let chart = Chart {
            title: format!("One-way goodput against {key}"),
            x_label: label.into(),
            y_label: "messages/s (1 KB, verified)".into(),
            x_ticks: pts.iter().map(|p| p.1.to_string()).collect(),
            series: systems
                .iter()
                .map(|&s| {
                    let v = pts.iter().map(|p| g.rate(p.0, Pattern::OneWay, s));
                    (s.name().to_string(), v.collect())
                })
                .collect(),
            log_y: false,
        };
        put(out, &format!("one-way-{key}.svg"), chart.render())?;
    }
    for (li, l) in LINKS.iter().enumerate() {
        if !g.measured(li) {
            continue;
        }
        for (what, unit) in [("throughput", "requests/s"), ("latency", "p50 latency, ms")] {
            let series = systems
                .iter()
                .map(|&s| {
                    let v = CALLERS.iter().map(|&callers| {
                        let o = g.outcome(li, Pattern::Rpc { callers }, s)?;
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
            put(out, &format!("rpc-{what}-{}.svg", slug(*l)), chart.render())?;
        }
    }
    Ok(())
}

fn markdown(g: &Grid, systems: &[System]) -> String {
    let mut m = String::new();
    let t = &g.timing;
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
        g.started.elapsed().as_secs_f64(),
        t.secs.as_secs_f64(),
        t.warmup.as_secs_f64(),
        g.realtime,
        t.drain.as_secs_f64()
    );
    let _ = writeln!(m, "## Links and exon's tuning\n");
    g.links_table(&mut m);
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
    for c in g.cells.iter().filter(|c| c.pattern == Pattern::OneWay) {
        let _ = writeln!(m, "| {} | {} |", link_name(LINKS[c.link]), row(c, systems));
    }
    for (key, _, _) in SERIES {
        let _ = writeln!(m, "\n![one-way against {key}](one-way-{key}.svg)");
    }
    let _ = writeln!(m, "\n## RPC: requests/s and p50 latency (ms)");
    for (li, l) in LINKS.iter().enumerate() {
        if !g.measured(li) {
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
                cols.push(fmt_rate(g.outcome(li, pattern, s)));
            }
            for &s in systems {
                let p = g.outcome(li, pattern, s).and_then(|o| o.p50_us);
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
    g.counters_table(&mut m);
    m
}

/// A one-way row: rates, exon's ratios to the others, exon's queue drops.
fn row(c: &Cell, systems: &[System]) -> String {
    let get = |s: System| c.outcomes.iter().find(|o| o.system == s);
    let mut cols: Vec<String> = systems.iter().map(|&s| fmt_rate(get(s))).collect();
    let exon = get(System::Exon).and_then(|o| o.rate);
    for &s in &systems[1..] {
        let r = exon.zip(get(s).and_then(|o| o.rate)).map(|(e, r)| e / r);
        cols.push(r.map_or("-".into(), |r| format!("{r:.2}")));
    }
    cols.push(Grid::exon_drops(c));
    cols.join(" | ")
}
