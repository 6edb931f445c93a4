//! Two senders at one bottleneck, the second joining late: how evenly they share it.
//!
//! The testbed's fairness matrix starts its flows within milliseconds of each other; a
//! flow that joins a link another one already fills sees that flow's queue in its first
//! round trips, and a BBR-style controller takes it for the path's own delay (its minimum
//! RTT stays inflated until both drain at once). These runs hold the second sender's
//! datagrams back for `late` (0 to 300 ms) and take Jain's index of what the two had
//! acknowledged from 2 s to the end, in virtual time, so each figure repeats exactly.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
use exon_sim::{Fault, FaultKind, Sim};

use crate::congestion::incast;

/// When the measured stretch begins.
const WARMUP: Duration = Duration::from_secs(2);

/// Jain's index of the messages nodes 1 and 2 had acknowledged between [`WARMUP`] and
/// `secs`, streaming 1 KB messages to node 0 through one queue (`rate` bytes/s, `latency`
/// each way, a bandwidth-delay product of queue and 32 KiB at least; node 0 streams to
/// node 1 beside them on a link of its own, as in [`incast`]), node 2's datagrams held
/// until `late`, every node under `rules`.
fn late_joiner_jain(rate: u64, latency: Duration, late: Duration, secs: u64, rules: Rules) -> f64 {
    let mut sc = incast(rate * secs / 1000, rate);
    sc.link.latency = latency;
    let bdp = rate as u128 * 2 * latency.as_micros() / 1_000_000;
    sc.link.queue_bytes = (bdp as usize).max(32 * 1024);
    sc.settle = Duration::from_secs(1);
    sc.expect_idle = false;
    sc.max_events = u64::MAX;
    sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
    if !late.is_zero() {
        sc.faults = vec![
            Fault {
                at: Duration::ZERO,
                kind: FaultKind::Hold { a: 2, b: 0 },
            },
            Fault {
                at: late,
                kind: FaultKind::Heal {
                    a: 2,
                    b: 0,
                    one_way: false,
                },
            },
        ];
    }
    let mut sim = Sim::new(sc);
    let acked = |sim: &Sim, i: usize| sim.node(i).map_or(0, |n| n.stats().acknowledged) as f64;
    let end = Duration::from_secs(secs);
    let mut at_warmup = None;
    while sim.step() {
        if at_warmup.is_none() && sim.now() >= WARMUP {
            at_warmup = Some((acked(&sim, 1), acked(&sim, 2)));
        }
        if sim.now() >= end {
            break;
        }
    }
    let (a0, b0) = at_warmup.unwrap_or_default();
    let (a, b) = (acked(&sim, 1) - a0, acked(&sim, 2) - b0);
    assert!(a + b > 0.0, "nothing acknowledged");
    (a + b) * (a + b) / (2.0 * (a * a + b * b))
}

/// The scan behind BENCHMARKS.md's late-joiner table: the fairness matrix's three links,
/// the second sender 0 to 300 ms late in steps of 10 ms (`cargo test --release -p exon-sim
/// --test sim late_joiners -- --ignored --nocapture`; about three minutes). Prints each
/// link's indices and how many fall below 0.95 (the fairness matrix's bound for two exon
/// flows, which starts them together), then a last `key=value` line. Asserts what holds
/// today: flows that start together share each link evenly (Jain >= 0.95); a late joiner
/// does not on every link (BENCHMARKS.md, "Late joiners").
#[test]
#[ignore = "a scan: about three minutes in release"]
fn late_joiners_share_a_bottleneck_scan() {
    let links = [
        ("10mbit_20ms", 1_250_000, 10),
        ("100mbit_10ms", 12_500_000, 5),
        ("100mbit_50ms", 12_500_000, 25),
    ];
    let mut summary = Vec::new();
    for (name, rate, one_way_ms) in links {
        let jains: Vec<f64> = (0..=30)
            .map(|i| {
                let late = Duration::from_millis(10 * i);
                let latency = Duration::from_millis(one_way_ms);
                late_joiner_jain(rate, latency, late, 20, Rules::ALL)
            })
            .collect();
        let mean = jains.iter().sum::<f64>() / jains.len() as f64;
        let min = jains.iter().copied().fold(1.0, f64::min);
        let below = jains.iter().filter(|j| **j < 0.95).count();
        let each: Vec<String> = jains.iter().map(|j| format!("{j:.3}")).collect();
        println!("{name}: {}", each.join(" "));
        println!(
            "{name}: mean {mean:.3}, min {min:.3}, below 0.95 in {below} of {}",
            jains.len()
        );
        assert!(jains[0] >= 0.95, "{name}: started together, {}", jains[0]);
        summary.push(format!(
            "late_{name}_mean={mean:.3} late_{name}_min={min:.3} late_{name}_below={below}"
        ));
    }
    println!("{}", summary.join(" "));
}
