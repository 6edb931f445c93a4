//! The impaired-link testbed: exon, TCP and QUIC over an emulated link.
//!
//! The impaired-link testbed: exon, TCP and QUIC between two network namespaces joined by a
//! userspace link emulator; one cell, a sweep, a grid or several flows at once.

pub mod cell;
pub mod emulator;
pub mod flows;
pub mod matrix;
pub mod netns;
pub mod roles;
pub mod svg;
pub mod sweep;
pub mod sys;

use std::time::Duration;

use cell::{Pattern, Timing};
use emulator::Impairment;
use exon::proto::CongestionControl;
use roles::{ExonTuning, System};

/// Everything the command line says.
pub struct Args {
    /// The role of an endpoint process (`recv`, `send`, `server`, `client`); none for the harness.
    pub role: Option<String>,
    /// Traffic pattern.
    pub pattern: Pattern,
    /// The grid to run instead of one cell (`paper`, `paths`, `fairness`, `all`).
    pub matrix: Option<String>,
    /// Link rate in Mbit/s.
    pub rate_mbit: f64,
    /// Round-trip time in milliseconds.
    pub rtt_ms: f64,
    /// Random loss probability, each way.
    pub loss: f64,
    /// Reordering probability, each way.
    pub reorder: f64,
    /// Measured seconds per system (default 10).
    pub secs: Option<f64>,
    /// Warm-up seconds before measuring (default 1; the grids `paths` and `fairness` have
    /// their own).
    pub warmup: Option<f64>,
    /// Seconds allowed after the measurement for what is outstanding.
    pub drain: f64,
    /// Link queue in bytes (default one bandwidth-delay product).
    pub queue_bytes: Option<usize>,
    /// Seed of the emulator.
    pub seed: u64,
    /// Exon's window, if not its default.
    pub exon_window: Option<u64>,
    /// Exon's envelopes, if not its default.
    pub exon_envelopes: Option<u64>,
    /// Exon's congestion controller, if not its default.
    pub exon_congestion: Option<CongestionControl>,
    /// Systems to run, in turn.
    pub systems: Vec<System>,
    /// One-way flows to run at once on one link (none: the systems in turn).
    pub flows: Vec<System>,
    /// With `flows`: the kernel paces every TCP flow.
    pub tcp_pacing: bool,
    /// With `flows`: TCP's largest segment.
    pub tcp_mss: Option<u32>,
    /// The sweep to run instead of one cell (`loss`).
    pub sweep: Option<String>,
    /// With `flows`: where to write the plot of each flow's rate.
    pub plot: Option<String>,
    /// With `flows`: print each flow's rate over time.
    pub series: bool,
    /// Where the matrix writes its report.
    pub out: String,
    /// Endpoint processes only: the system.
    pub system: Option<System>,
    /// Endpoint processes only: the peer's or own address.
    pub addr: Option<String>,
    /// Endpoint processes only: the QUIC certificate (hex DER).
    pub cert: Option<String>,
    /// Concurrent callers (rpc).
    pub callers: u64,
    /// Endpoint processes only: a one-way receiver samples its count this often.
    pub series_ms: Option<u64>,
    /// Bytes per message (one-way), per request and per reply (rpc).
    pub size: usize,
}

/// The link of the command line.
pub fn impairment(a: &Args, rate_mbit: f64, rtt_ms: f64, loss: f64) -> Impairment {
    let rate_bps = (rate_mbit * 1e6) as u64;
    let rtt = Duration::from_secs_f64(rtt_ms / 1e3);
    Impairment {
        rate_bps,
        rtt,
        loss,
        queue_bytes: a
            .queue_bytes
            .unwrap_or_else(|| Impairment::default_queue(rate_bps, rtt)),
        reorder: a.reorder,
        seed: a.seed,
    }
}

/// Exon's tuning: its defaults (window up to 32768, following the path; 128 envelopes, more
/// on a long fat path) on every link, unless given.
/// Its congestion controller, not a per-link window, keeps the link full and the queue
/// short.
pub fn exon_tuning(a: &Args, _imp: &Impairment) -> ExonTuning {
    let d = exon::Config::default();
    let window = a.exon_window.unwrap_or(d.flow.window);
    ExonTuning {
        window,
        envelopes: a
            .exon_envelopes
            .unwrap_or(d.flow.envelope_target)
            .min(window),
        congestion: a.exon_congestion.unwrap_or(d.flow.congestion),
    }
}

/// The measured and warm-up times of the command line.
pub fn timing(a: &Args) -> Timing {
    Timing {
        warmup: Duration::from_secs_f64(a.warmup.unwrap_or(1.0)),
        secs: Duration::from_secs_f64(a.secs.unwrap_or(10.0)),
        drain: Duration::from_secs_f64(a.drain),
        size: a.size,
    }
}

/// Prints the first line of a run: what runs over which link, for how long.
pub fn header(what: &str, imp: &Impairment, timing: Timing, exon: ExonTuning, realtime: bool) {
    println!(
        "testbed: {what}, {imp}; {} B messages; {:.0} s measured after {:.0} s warm-up; exon \
         window {}, envelopes {}{}, datagrams {} B; emulator real-time: {realtime}",
        timing.size,
        timing.secs.as_secs_f64(),
        timing.warmup.as_secs_f64(),
        exon.window,
        exon.envelopes,
        if exon.congestion == CongestionControl::default() {
            String::new()
        } else {
            format!(", congestion {}", roles::congestion_name(exon.congestion))
        },
        netns::MTU - 28,
    );
}

pub fn one_cell(a: &Args) -> netns::Result<()> {
    let imp = impairment(a, a.rate_mbit, a.rtt_ms, a.loss);
    let exon = exon_tuning(a, &imp);
    let timing = timing(a);
    let tb = netns::Testbed::new(imp)?;
    let what = match a.pattern {
        Pattern::OneWay => "one-way".to_string(),
        Pattern::Rpc { callers } => format!("rpc, {callers} callers"),
    };
    header(&what, &imp, timing, exon, tb.realtime());
    let mut port = 5000;
    let out = cell::run_cell(&tb, imp, a.pattern, timing, exon, &a.systems, &mut port)?;
    drop(tb);
    cell::print_cell(&imp, a.pattern, exon, timing.size, &out);
    Ok(())
}

/// `--flows`: the flows at once on one link.
pub fn several_flows(a: &Args) -> netns::Result<()> {
    let imp = impairment(a, a.rate_mbit, a.rtt_ms, a.loss);
    let exon = exon_tuning(a, &imp);
    let timing = timing(a);
    let tb = netns::Testbed::new(imp)?;
    let names: Vec<&str> = a.flows.iter().map(|s| s.name()).collect();
    let tcp = flows::Tcp {
        pacing: a.tcp_pacing,
        mss: a.tcp_mss,
    };
    let mut paced = String::new();
    if tcp.pacing {
        paced += ", TCP paced by the kernel";
    }
    if let Some(mss) = tcp.mss {
        paced += &format!(", TCP MSS {mss}");
    }
    let what = format!(
        "{} one-way flows at once ({}){paced}",
        names.len(),
        names.join(", ")
    );
    header(&what, &imp, timing, exon, tb.realtime());
    let mut port = 5000;
    let out = flows::run_flows(&tb, imp, timing, exon, &a.flows, tcp, &mut port)?;
    drop(tb);
    if let Some(path) = &a.plot {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(path);
        if let Err(e) = flows::plot(&imp, &out, timing.size, &path) {
            eprintln!("testbed: {e}");
        }
    }
    if a.series {
        flows::print_series(&out, timing.size);
    }
    flows::print_flows(&imp, exon, tcp, timing.size, &out);
    Ok(())
}
