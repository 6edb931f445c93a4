//! `exon-sim`: a command-line soak of the Exon protocol in the deterministic simulator.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use exon_sim::{faults, GilbertElliott, LinkConfig, Pattern, Scenario, Sim, Workload};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Traffic patterns.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Traffic {
    /// Node i streams to node i+1.
    Ring,
    /// Every node sends to random other nodes.
    Many,
    /// Request/reply between random pairs (replies come on top of --messages).
    Rpc,
}

/// Soak-tests Exon in a deterministic network simulator and checks exactly-once:
/// no duplicate, no loss after healing, every node idle at the end, bounded state.
/// Exits 0 only if every check held; the last line is a key=value summary.
#[derive(Debug, Parser)]
#[command(name = "exon-sim", version)]
struct Args {
    /// Number of protocol nodes.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Messages the applications submit in total.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Independent loss probability per datagram and link.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Bursty (Gilbert-Elliott) loss: probability of entering the bad state per datagram.
    #[arg(long, default_value_t = 0.0)]
    burst: f64,
    /// Duplication probability per datagram; copies may arrive very late.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Largest extra delay of a duplicate, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    dup_delay_ms: u64,
    /// Reordering probability per datagram.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// One-way latency in milliseconds.
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// Jitter in milliseconds (uniform extra delay).
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Link rate limit in bytes per second (0: unlimited).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Number of partitions or holds (each healed later) during the run.
    #[arg(long, default_value_t = 0)]
    partitions: usize,
    /// Number of node restarts (keeping the stored clock) during the run.
    #[arg(long, default_value_t = 0)]
    restarts: usize,
    /// Restart nodes without their clock (rule 8 broken: expected to violate exactly-once).
    #[arg(long)]
    lose_clock: bool,
    /// Traffic pattern.
    #[arg(long, value_enum, default_value_t = Traffic::Ring)]
    traffic: Traffic,
    /// Payload size in bytes (at least 13).
    #[arg(long, default_value_t = 32)]
    payload: usize,
    /// Largest payload: above `--payload`, sizes vary per message (log-uniformly) up to
    /// this, and the larger ones travel in fragments (0: every payload is `--payload`).
    #[arg(long, default_value_t = 0)]
    max_payload: usize,
    /// Seed of every random choice; the same seed replays the same run.
    #[arg(long, env = "EXON_SIM_SEED", default_value_t = 1)]
    seed: u64,
    /// Number of consecutive seeds to run, from --seed.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Print every node's counters, summed, after each run (to stderr).
    #[arg(long)]
    stats: bool,
}

fn scenario(a: &Args, seed: u64) -> Scenario {
    let link = LinkConfig {
        latency: Duration::from_millis(a.latency_ms),
        jitter: Duration::from_millis(a.jitter_ms),
        loss: a.loss,
        burst: (a.burst > 0.0).then_some(GilbertElliott {
            p_good_to_bad: a.burst,
            p_bad_to_good: 0.3,
            loss_bad: 0.7,
        }),
        dup: a.dup,
        dup_max_delay: Duration::from_millis(a.dup_delay_ms),
        reorder: a.reorder,
        rate: (a.rate > 0).then_some(a.rate),
        ..LinkConfig::default()
    };
    let pattern = match a.traffic {
        Traffic::Ring => Pattern::Ring,
        Traffic::Many => Pattern::ManyToMany,
        Traffic::Rpc => Pattern::Rpc,
    };
    let workload = Workload {
        pattern,
        messages: a.messages,
        payload_len: a.payload.max(exon_sim::workload::ID_LEN),
        max_payload_len: a.max_payload,
        ..Workload::default()
    };
    // Faults spread over roughly the time the traffic takes at the default pace.
    let per_node = a.messages / a.nodes.max(1) as u64;
    let span = Duration::from_millis((per_node / workload.burst as u64).max(200) + 500);
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(31) ^ 0xfa);
    let mut faults = faults::random_schedule(&mut rng, a.nodes, span, a.partitions, a.restarts);
    for f in &mut faults {
        if let exon_sim::FaultKind::Restart { keep_clock, .. } = &mut f.kind {
            *keep_clock = !a.lose_clock;
        }
    }
    Scenario {
        seed,
        nodes: a.nodes,
        link,
        workload,
        faults,
        ..Scenario::default()
    }
}

/// The time left at the average rate so far, once there is a rate to speak of (indicatif's
/// own estimate starts from a near-zero rate and shows days).
fn honest_eta(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let (done, elapsed) = (state.pos(), state.elapsed());
    let left = state.len().map(|len| len.saturating_sub(done));
    match left {
        Some(left) if done > 0 && elapsed >= Duration::from_secs(1) => {
            let secs = elapsed.as_secs_f64() * left as f64 / done as f64;
            let _ = write!(w, "eta {:.0} s", secs.ceil());
        }
        _ => {
            let _ = write!(w, "eta (measuring)");
        }
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    if let Err(e) = scenario(&a, a.seed).validate() {
        eprintln!("exon-sim: {e}");
        return ExitCode::from(2);
    }
    let mut all_ok = true;
    let mut summary = String::new();
    for seed in a.seed..a.seed.saturating_add(a.seeds.max(1)) {
        let wall = Instant::now();
        let mut sim = Sim::new(scenario(&a, seed));
        let bar = ProgressBar::with_draw_target(Some(a.messages), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} seed {msg} [{bar:40}] {pos}/{len} delivered ({per_sec}, {honest_eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("honest_eta", honest_eta)
            .progress_chars("=> "),
        );
        bar.set_message(seed.to_string());
        let mut k = 0u32;
        while sim.step() {
            k = k.wrapping_add(1);
            if k.is_multiple_of(65_536) {
                bar.set_position(sim.oracle().delivered);
            }
        }
        bar.finish_and_clear();
        if a.stats {
            let mut all = exon::proto::Stats::default();
            for s in sim.node_stats() {
                all.merge(s);
            }
            eprintln!("{all:#?}");
        }
        let report = sim.finish();
        let secs = wall.elapsed().as_secs_f64();
        if !report.ok() {
            all_ok = false;
            eprint!("{}", report.describe_failure());
        }
        summary = format!(
            "{report} wall_s={secs:.3} sim_msgs_per_s={:.0}",
            report.delivered as f64 / secs.max(1e-9)
        );
        println!("{summary}");
    }
    if a.seeds > 1 {
        println!("{summary} all_seeds_ok={all_ok}");
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
