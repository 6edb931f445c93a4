//! Long fat paths: 100 Mbit/s at RTT 50 and 200 ms, 0 and 1 % loss; `paths-grid.md`.
//!
//! Every link has a queue of one bandwidth-delay product (625 000 and 2 500 000 bytes, the
//! testbed's default); each runs one-way (1 KiB messages) and RPC with 256 callers, every
//! system in turn. Runs are longer than the paper's by default (8 s measured after 3 s of
//! warm-up: TCP's start-up alone takes 2-3 s on the 200 ms path); `--secs` and `--warmup`
//! override both.

use std::fmt::Write as _;
use std::path::Path;

use super::{fmt_rate, link_name, put, Grid, Link};
use crate::testbed::cell::{Outcome, Pattern};
use crate::testbed::netns::Result;
use crate::testbed::roles::System;
use crate::testbed::svg::Chart;
use crate::testbed::Args;

/// Rate (Mbit/s), RTT (ms) and loss of every link of the grid.
const LINKS: [Link; 4] = [
    (100.0, 50.0, 0.0),
    (100.0, 50.0, 0.01),
    (100.0, 200.0, 0.0),
    (100.0, 200.0, 0.01),
];
/// RPC callers.
const CALLERS: [u64; 1] = [256];
/// Default measured seconds per run.
pub const SECS: f64 = 8.0;
/// Default warm-up seconds per run (15 RTTs of the longer path).
pub const WARMUP: f64 = 3.0;
const RPC: Pattern = Pattern::Rpc {
    callers: CALLERS[0],
};

/// `--matrix paths`: runs the grid, writes its reports and prints the `key=value` line.
pub fn run_paths(a: &Args) -> Result<()> {
    let kv = measure(a)?;
    println!("{}", kv.join(" "));
    Ok(())
}

/// Runs the grid and writes its reports under `a.out`; the `key=value` pairs of the summary.
pub fn measure(a: &Args) -> Result<Vec<String>> {
    let timing = super::grid_timing(a, WARMUP, SECS);
    let g = Grid::run(a, "paths grid", (&LINKS, &CALLERS), timing, write)?;
    Ok(summary(&g))
}

/// `value / tcp_bbr's value` of the same cell.
fn vs_bbr(g: &Grid, li: usize, p: Pattern, s: System) -> Option<f64> {
    let bbr = g.rate(li, p, System::TcpBbr)?;
    Some(g.rate(li, p, s)? / bbr).filter(|r| r.is_finite())
}

fn fmt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn ms(o: Option<&Outcome>, p99: bool) -> Option<f64> {
    let o = o?;
    if p99 { o.p99_us } else { o.p50_us }.map(|u| u / 1e3)
}

/// A short name of a link for keys: `paths_200ms_1` (RTT, loss in %).
fn key(l: Link) -> String {
    format!("paths_{}ms_{}", l.1, l.2 * 100.0)
}

fn summary(g: &Grid) -> Vec<String> {
    let mut kv = Vec::new();
    for (li, l) in g.links.iter().enumerate() {
        if !g.measured(li) {
            continue;
        }
        let k = key(*l);
        let e = System::Exon;
        kv.push(format!(
            "{k}_exon={}",
            fmt(g.rate(li, Pattern::OneWay, e), 0)
        ));
        let r = vs_bbr(g, li, Pattern::OneWay, e);
        kv.push(format!("{k}_exon_vs_bbr={}", fmt(r, 2)));
        kv.push(format!("{k}_rpc_exon={}", fmt(g.rate(li, RPC, e), 0)));
        kv.push(format!(
            "{k}_rpc_exon_vs_bbr={}",
            fmt(vs_bbr(g, li, RPC, e), 2)
        ));
        let p50 = ms(g.outcome(li, RPC, e), false);
        kv.push(format!("{k}_rpc_exon_p50_ms={}", fmt(p50, 1)));
    }
    kv
}

fn write(g: &Grid, out: &Path, systems: &[System]) -> Result<()> {
    put(out, "paths-grid.md", markdown(g, systems))?;
    put(out, "paths.csv", g.csv())?;
    let ticks: Vec<String> = g
        .links
        .iter()
        .map(|l| format!("{} ms, {} %", l.1, l.2 * 100.0))
        .collect();
    let charts = [
        ("one-way", "One-way goodput", "messages/s (1 KB, verified)"),
        ("rpc-throughput", "RPC, 256 callers", "requests/s"),
        ("rpc-latency", "RPC, 256 callers", "p50 latency, ms"),
    ];
    for (name, title, unit) in charts {
        let series = systems
            .iter()
            .map(|&s| {
                let v = (0..g.links.len()).map(|li| match name {
                    "one-way" => g.rate(li, Pattern::OneWay, s),
                    "rpc-throughput" => g.rate(li, RPC, s),
                    _ => ms(g.outcome(li, RPC, s), false),
                });
                (s.name().to_string(), v.collect())
            })
            .collect();
        let chart = Chart {
            title: format!("{title} on long fat paths (100 Mbit/s)"),
            x_label: "round-trip time, loss each way".into(),
            y_label: unit.into(),
            x_ticks: ticks.clone(),
            series,
            log_y: name == "rpc-latency",
        };
        put(out, &format!("paths-{name}.svg"), chart.render())?;
    }
    Ok(())
}

fn markdown(g: &Grid, systems: &[System]) -> String {
    let mut m = String::new();
    let t = &g.timing;
    let _ = writeln!(m, "# Long fat paths on the impaired-link testbed\n");
    let _ = writeln!(
        m,
        "Written by `cargo bench -p exon-benches --bench testbed -- --matrix paths` ({:.0} s so far). \
         100 Mbit/s at RTT 50 and 200 ms, 0 and 1 % random loss each way (the same seeded \
         sequence for every system), a tail-drop queue of one bandwidth-delay product. Each \
         run: {:.1} s measured after {:.1} s warm-up, 1 KB messages, every message counted \
         verified delivered exactly once at the receiver (RPC: every request at the server, \
         every reply matched to its caller). Ratios are against TCP BBR on the same cell. \
         Emulator at real-time priority: {}. `incomplete` marks runs whose sender still had \
         messages (or callers replies) outstanding {:.0} s after the measurement.\n",
        g.started.elapsed().as_secs_f64(),
        t.secs.as_secs_f64(),
        t.warmup.as_secs_f64(),
        g.realtime,
        t.drain.as_secs_f64()
    );
    let _ = writeln!(m, "## Links, queues and exon's tuning\n");
    g.links_table(&mut m);
    let names: Vec<&str> = systems.iter().map(|s| s.name()).collect();
    let others: Vec<System> = systems
        .iter()
        .copied()
        .filter(|&s| s != System::TcpBbr)
        .collect();
    let ratios: Vec<String> = others
        .iter()
        .map(|s| format!("{}/tcp_bbr", s.name()))
        .collect();
    let right = |n: usize| "---:|".repeat(n);

    let _ = writeln!(m, "\n## One-way goodput (messages/s)\n");
    let _ = writeln!(
        m,
        "| link | queue (bytes) | {} | {} | exon queue drops |",
        names.join(" | "),
        ratios.join(" | ")
    );
    let _ = writeln!(m, "|---|---:|{}", right(names.len() + ratios.len() + 1));
    for c in g.cells.iter().filter(|c| c.pattern == Pattern::OneWay) {
        let li = c.link;
        let mut cols: Vec<String> = systems
            .iter()
            .map(|&s| fmt_rate(g.outcome(li, c.pattern, s)))
            .collect();
        cols.extend(others.iter().map(|&s| fmt(vs_bbr(g, li, c.pattern, s), 2)));
        cols.push(Grid::exon_drops(c));
        let _ = writeln!(
            m,
            "| {} | {} | {} |",
            link_name(g.links[li]),
            g.imps[li].queue_bytes,
            cols.join(" | ")
        );
    }
    let _ = writeln!(m, "\n![one-way goodput](paths-one-way.svg)");

    let _ = writeln!(
        m,
        "\n## RPC, {} callers: requests/s, p50 and p99 latency (ms)\n",
        CALLERS[0]
    );
    let p50: Vec<String> = names.iter().map(|n| format!("{n} p50")).collect();
    let p99: Vec<String> = names.iter().map(|n| format!("{n} p99")).collect();
    let _ = writeln!(
        m,
        "| link | queue (bytes) | {} | {} | {} | {} |",
        names.join(" | "),
        ratios.join(" | "),
        p50.join(" | "),
        p99.join(" | ")
    );
    let _ = writeln!(m, "|---|---:|{}", right(names.len() * 3 + ratios.len()));
    for c in g.cells.iter().filter(|c| c.pattern == RPC) {
        let li = c.link;
        let o = |s: System| g.outcome(li, RPC, s);
        let mut cols: Vec<String> = systems.iter().map(|&s| fmt_rate(o(s))).collect();
        cols.extend(others.iter().map(|&s| fmt(vs_bbr(g, li, RPC, s), 2)));
        cols.extend(systems.iter().map(|&s| fmt(ms(o(s), false), 1)));
        cols.extend(systems.iter().map(|&s| fmt(ms(o(s), true), 1)));
        let _ = writeln!(
            m,
            "| {} | {} | {} |",
            link_name(g.links[li]),
            g.imps[li].queue_bytes,
            cols.join(" | ")
        );
    }
    let _ = writeln!(
        m,
        "\n![RPC throughput](paths-rpc-throughput.svg) ![RPC latency](paths-rpc-latency.svg)"
    );
    g.counters_table(&mut m);
    m
}
