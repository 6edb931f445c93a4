//! The grids of `--matrix`: the paper's, long fat paths and fairness, written as reports.
//!
//! `paper` ([`paper`]): the paper's Section V grid. `paths` ([`paths`]): long fat paths,
//! 100 Mbit/s at RTT 50 and 200 ms. `fairness` ([`fairness`]): competing flows on one link.
//! `all`: the three in turn. Each writes markdown, a CSV and SVG plots into `--out` after
//! every link, so an interrupted grid keeps what it measured. What the grids of systems in
//! turn (`paper`, `paths`) share is here: running every pattern of every link, the tables of
//! links and of the emulator's counters, and the CSV.

pub mod fairness;
pub mod paper;
pub mod paths;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Args;
use crate::testbed::cell::{self, Outcome, Pattern, Timing};
use crate::testbed::emulator::Impairment;
use crate::testbed::netns::{Result, Testbed};
use crate::testbed::roles::{ExonTuning, System};

/// Rate (Mbit/s), RTT (ms) and loss (probability each way) of a link.
pub type Link = (f64, f64, f64);

/// `--matrix all`: the paper's grid, the long fat paths and fairness, in turn. Prints the
/// `key=value` lines of paths and fairness together as the last line.
pub fn run_all(a: &Args) -> Result<()> {
    paper::run_paper(a)?;
    let mut kv = paths::measure(a)?;
    kv.extend(fairness::measure(a)?);
    println!("{}", kv.join(" "));
    Ok(())
}

/// The directory of the reports, `--out` from the workspace's root (cargo runs benches from
/// the package's directory), created if missing.
pub(crate) fn out_dir(a: &Args) -> Result<PathBuf> {
    let out = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(&a.out);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}

/// A grid's times: `--warmup` and `--secs` if given, else the grid's own `warmup` and `secs`
/// (seconds); 1 KiB messages.
pub(crate) fn grid_timing(a: &Args, warmup: f64, secs: f64) -> Timing {
    Timing {
        warmup: Duration::from_secs_f64(a.warmup.unwrap_or(warmup)),
        secs: Duration::from_secs_f64(a.secs.unwrap_or(secs)),
        drain: Duration::from_secs_f64(a.drain),
        size: crate::message::PAYLOAD,
    }
}

/// `rows` as CSV, the header from the row type's field names.
pub(crate) fn csv_of<R: serde::Serialize>(rows: impl IntoIterator<Item = R>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in rows {
        w.serialize(row).expect("writing CSV to memory cannot fail");
    }
    let bytes = w.into_inner().expect("writing CSV to memory cannot fail");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

/// Writes `body` to `out/name`.
pub(crate) fn put(out: &Path, name: &str, body: String) -> Result<()> {
    std::fs::write(out.join(name), body).map_err(|e| format!("{name}: {e}"))
}

/// One cell's results.
pub(crate) struct Cell {
    pub link: usize,
    pub pattern: Pattern,
    pub outcomes: Vec<Outcome>,
}

/// Everything measured so far by a grid of systems in turn.
pub(crate) struct Grid {
    pub links: Vec<Link>,
    pub callers: Vec<u64>,
    pub imps: Vec<Impairment>,
    pub tunings: Vec<ExonTuning>,
    pub realtime: bool,
    pub cells: Vec<Cell>,
    pub timing: Timing,
    pub started: Instant,
}

pub(crate) fn link_name(l: Link) -> String {
    format!("{} Mbit/s, {} ms, {} %", l.0, l.1, l.2 * 100.0)
}

pub(crate) fn slug(l: Link) -> String {
    format!("{}mbit-{}ms-loss{}", l.0, l.1, l.2 * 100.0)
}

impl Grid {
    /// A grid of `links`, each run one-way and with each of `callers`, nothing measured yet.
    pub fn new(a: &Args, links: &[Link], callers: &[u64], timing: Timing) -> Grid {
        let imps: Vec<Impairment> = links
            .iter()
            .map(|l| super::impairment(a, l.0, l.1, l.2))
            .collect();
        let tunings = imps.iter().map(|i| super::exon_tuning(a, i)).collect();
        Grid {
            links: links.to_vec(),
            callers: callers.to_vec(),
            imps,
            tunings,
            realtime: false,
            cells: Vec::new(),
            timing,
            started: Instant::now(),
        }
    }

    /// Runs the grid `name` of `links` and `callers` with `a.systems` and writes its reports
    /// with `write` into `a.out` after each link.
    pub fn run(
        a: &Args,
        name: &str,
        (links, callers): (&[Link], &[u64]),
        timing: Timing,
        write: impl Fn(&Grid, &Path, &[System]) -> Result<()>,
    ) -> Result<Grid> {
        let mut g = Grid::new(a, links, callers, timing);
        let out = out_dir(a)?;
        g.measure(&a.systems, |g| write(g, &out, &a.systems))?;
        println!(
            "\n{name} done in {:.0} s; reports in {}",
            g.started.elapsed().as_secs_f64(),
            out.display()
        );
        Ok(g)
    }

    /// Runs every pattern of every link with `systems` in turn, and calls `write` after
    /// each link.
    pub fn measure(
        &mut self,
        systems: &[System],
        mut write: impl FnMut(&Grid) -> Result<()>,
    ) -> Result<()> {
        let mut port = 5000;
        let timing = self.timing;
        for li in 0..self.links.len() {
            let (l, imp, exon) = (self.links[li], self.imps[li], self.tunings[li]);
            let tb = Testbed::new(imp)?;
            self.realtime = tb.realtime();
            let patterns: Vec<Pattern> = std::iter::once(Pattern::OneWay)
                .chain(self.callers.iter().map(|&callers| Pattern::Rpc { callers }))
                .collect();
            for pattern in patterns {
                println!(
                    "\n== {} | {pattern:?} | exon window {} envelopes {} | {:.0} s elapsed",
                    link_name(l),
                    exon.window,
                    exon.envelopes,
                    self.started.elapsed().as_secs_f64()
                );
                let outcomes = cell::run_cell(&tb, imp, pattern, timing, exon, systems, &mut port)?;
                cell::print_cell(&imp, pattern, exon, timing.size, &outcomes);
                self.cells.push(Cell {
                    link: li,
                    pattern,
                    outcomes,
                });
            }
            drop(tb);
            write(self)?;
        }
        Ok(())
    }

    pub fn outcome(&self, link: usize, pattern: Pattern, s: System) -> Option<&Outcome> {
        self.cells
            .iter()
            .find(|c| c.link == link && c.pattern == pattern)?
            .outcomes
            .iter()
            .find(|o| o.system == s)
    }

    pub fn rate(&self, link: usize, pattern: Pattern, s: System) -> Option<f64> {
        self.outcome(link, pattern, s)?.rate
    }

    /// Whether any cell of link `li` was measured.
    pub fn measured(&self, li: usize) -> bool {
        self.cells.iter().any(|c| c.link == li)
    }

    /// The table of the links: queue bytes and exon's tuning.
    pub fn links_table(&self, m: &mut String) {
        let _ = writeln!(m, "| link | queue (bytes) | exon window | exon envelopes |");
        let _ = writeln!(m, "|---|---:|---:|---:|");
        for (li, l) in self.links.iter().enumerate() {
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
    }

    /// The table of every run's emulator counters and notes.
    pub fn counters_table(&self, m: &mut String) {
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
                    link_name(self.links[c.link]),
                    pattern_name(c.pattern),
                    o.system.name(),
                    d(0),
                    d(1),
                    o.notes.replace('|', "/")
                );
            }
        }
    }

    /// Exon's queue drops (both directions) in a cell, or `-`.
    pub fn exon_drops(c: &Cell) -> String {
        let exon = c.outcomes.iter().find(|o| o.system == System::Exon);
        let drops = exon.map(|o| o.link[0].dropped_queue + o.link[1].dropped_queue);
        drops.map_or("-".into(), |d| d.to_string())
    }

    /// Every run as CSV, one line per system and cell.
    pub fn csv(&self) -> String {
        let opt = |x: Option<f64>| x.map(|v| format!("{v:.1}"));
        let mut rows = Vec::new();
        for c in &self.cells {
            let (l, imp, x) = (
                self.links[c.link],
                &self.imps[c.link],
                &self.tunings[c.link],
            );
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
                rows.push(row);
            }
        }
        csv_of(rows)
    }
}

/// One line of a grid's CSV: one system's run on one cell (the header is the field names).
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

pub(crate) fn pattern_name(p: Pattern) -> String {
    match p {
        Pattern::OneWay => "one-way".into(),
        Pattern::Rpc { callers } => format!("rpc {callers}"),
    }
}

/// A rate, marked when the run failed or did not complete.
pub(crate) fn fmt_rate(o: Option<&Outcome>) -> String {
    match o {
        None => "-".into(),
        Some(o) => match o.rate {
            None => "failed".into(),
            Some(r) if o.complete => format!("{r:.0}"),
            Some(r) => format!("{r:.0} (incomplete)"),
        },
    }
}
