//! Runs in alternating rounds, rates per system and round, and the ratios of the last line.

use std::time::{Duration, Instant};

/// One system's messages and time over a run, and its rate in each round.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Messages (requests) verified.
    pub messages: u64,
    /// Time they took.
    pub time: Duration,
    /// CPU time of the whole process (user and system, every thread) over the rounds:
    /// both ends of the system measured, since the others are idle meanwhile.
    pub cpu: Duration,
    rounds: Vec<f64>,
}

impl Tally {
    /// Adds a round of `n` messages in `t`.
    pub fn add(&mut self, n: u64, t: Duration) {
        self.messages += n;
        self.time += t;
        self.rounds.push(n as f64 / t.as_secs_f64());
    }

    /// CPU time spent per message (both ends), in microseconds.
    pub fn cpu_us_per_message(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.messages.max(1) as f64
    }

    /// Messages per second over the run.
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.time.as_secs_f64()
    }

    /// The rate of each round, space-separated (the "per round" column).
    pub fn rounds(&self) -> String {
        let r: Vec<String> = self.rounds.iter().map(|r| format!("{r:.0}")).collect();
        r.join(" ")
    }
}

/// Runs batches until `slot` has passed; returns (messages, time).
pub fn timed<F: FnMut() -> (u64, Duration)>(slot: Duration, mut batch: F) -> (u64, Duration) {
    let (mut n, mut t) = (0, Duration::ZERO);
    let start = Instant::now();
    while start.elapsed() < slot {
        let (k, d) = batch();
        n += k;
        t += d;
    }
    (n, t)
}

/// Runs every system in turn, `slot` each, for `rounds` rounds (so that drift hits all):
/// `batch(i, system)` runs one batch of system `i` and returns its messages and time.
pub fn alternate<S>(
    systems: &mut [S],
    rounds: u32,
    slot: Duration,
    mut batch: impl FnMut(usize, &mut S) -> (u64, Duration),
) -> Vec<Tally> {
    let mut tallies = vec![Tally::default(); systems.len()];
    for _ in 0..rounds {
        for (i, s) in systems.iter_mut().enumerate() {
            let before = process_cpu();
            let (n, t) = timed(slot, || batch(i, s));
            tallies[i].add(n, t);
            tallies[i].cpu += process_cpu().saturating_sub(before);
        }
    }
    tallies
}

/// CPU time this process has used so far, user and system, all threads (zero where the
/// system will not say).
pub fn process_cpu() -> Duration {
    // SAFETY: `getrusage` writes the struct it is given, which is plain data.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// MB/s (10^6 bytes) of `rate` messages per second carrying `bytes` each.
pub fn mb_s(rate: f64, bytes: u64) -> f64 {
    rate * bytes as f64 / 1e6
}

/// The "vs exon" column: `rate` over exon's, or `-` without exon.
pub fn vs_exon(rate: f64, exon: Option<f64>) -> String {
    exon.map_or("-".into(), |e| format!("{:.2}x", rate / e))
}

/// The ratios of the last line, for the systems present: sealed exon over plaintext exon,
/// and each exon mode over TCP and QUIC.
pub fn ratios(names: &[&str], rate: impl Fn(usize) -> f64) -> Vec<String> {
    let at = |n: &str| names.iter().position(|k| *k == n);
    let mut out = Vec::new();
    for (a, b, key) in [
        ("exon", "exon_plain", "exon_over_plain"),
        ("exon", "tcp", "exon_over_tcp"),
        ("exon", "tcp_tls", "exon_over_tcp_tls"),
        ("tcp_tls", "tcp", "tls_over_tcp"),
        ("exon", "quic", "exon_over_quic"),
        ("exon_plain", "tcp", "plain_over_tcp"),
        ("exon_plain", "quic", "plain_over_quic"),
    ] {
        if let (Some(i), Some(j)) = (at(a), at(b)) {
            out.push(format!("{key}={:.3}", rate(i) / rate(j)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_name_the_systems_present() {
        let names = ["exon", "tcp", "quic_uni"];
        let rate = |i: usize| [2.0, 4.0, 1.0][i];
        assert_eq!(ratios(&names, rate), ["exon_over_tcp=0.500"]);
        let names = ["exon", "tcp", "tcp_tls"];
        let rate = |i: usize| [2.0, 4.0, 2.5][i];
        assert_eq!(
            ratios(&names, rate),
            [
                "exon_over_tcp=0.500",
                "exon_over_tcp_tls=0.800",
                "tls_over_tcp=0.625"
            ]
        );
        assert_eq!(vs_exon(3.0, Some(2.0)), "1.50x");
        assert_eq!(vs_exon(3.0, None), "-");
    }

    #[test]
    fn a_tally_keeps_each_rounds_rate() {
        let mut t = Tally::default();
        t.add(100, Duration::from_secs(1));
        t.add(300, Duration::from_secs(1));
        assert_eq!(t.rate(), 200.0);
        assert_eq!(t.rounds(), "100 300");
    }
}

/// Where `scripts/instruction-budget.py` leaves its tables and its `key=value` line.
const BUDGET_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/instruction-budget.txt"
);

/// Prints the last line: `last`, then the instruction budget's totals
/// (`budget_core=... budget_endpoint=... budget_commit=...`) from the last run of
/// `scripts/instruction-budget.py` when there is one (its commit says which code it
/// counted).
pub fn print_last(mut last: Vec<String>) {
    if let Some(line) = std::fs::read_to_string(BUDGET_FILE)
        .ok()
        .and_then(|t| t.lines().last().map(str::to_owned))
    {
        last.extend(
            line.split_whitespace()
                .filter(|kv| kv.starts_with("budget_") && kv.contains('='))
                .map(str::to_owned),
        );
    }
    println!("{}", last.join(" "));
}
