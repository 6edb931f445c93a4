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
        let b = 1 + (k.wrapping_add(seed) % 2) as usize;
        let at = Duration::from_millis(20 + 250 * k + seed.wrapping_mul(37) % 50);
        let len =
            Duration::from_millis(len_ms + (seed.wrapping_mul(131) + k * 277) % len_ms.max(1));
        let (kind, one_way) = match k.wrapping_add(seed) % 3 {
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

/// A shrinkable description of one channel run.
#[derive(Debug, Clone)]
struct Params {
    seed: u64,
    loss: f64,
    dup: f64,
    reorder: f64,
    window: u32,
    /// Deadline of every message in ms (0: none).
    deadline_ms: u64,
    /// Partitions (as in [`partitions`]) and their length in ms.
    partitions: (u64, u64),
}

fn scenario_of(p: &Params) -> Scenario {
    let mut sc = lossy(p.seed);
    sc.workload.messages = 150;
    sc.link.loss = p.loss;
    sc.link.dup = p.dup;
    sc.link.reorder = p.reorder;
    sc.deadline = (p.deadline_ms > 0).then(|| Duration::from_millis(p.deadline_ms));
    sc.faults = partitions(p.seed, p.partitions.0, p.partitions.1);
    if let Some(m) = sc.channels.as_mut() {
        m.window = p.window;
    }
    sc
}

fn params() -> impl Strategy<Value = Params> {
    (
        any::<u64>(),
        0.0..0.3f64,
        0.0..0.3f64,
        0.0..0.5f64,
        1..8u32,
        prop_oneof![Just(0u64), 50..400u64],
        (0..4u64, 50..600u64),
    )
        .prop_map(
            |(seed, loss, dup, reorder, window, deadline_ms, partitions)| Params {
                seed,
                loss,
                dup,
                reorder,
                window,
                deadline_ms,
                partitions,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 12,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Random loss, duplication, reordering, windows, deadlines and partitions: every flow
    /// is released in order and to its end, within the window's bound.
    #[test]
    fn random_channel_runs_keep_every_flow_in_order(p in params()) {
        let p = match seed_from_env() {
            Some(seed) => Params { seed, ..p },
            None => p,
        };
        let r = Sim::new(scenario_of(&p)).run();
        prop_assert!(r.ok(), "{p:?}\n{}", r.describe_failure());
        let c = counts(&r);
        prop_assert_eq!(c.released + c.gaps, c.sent, "{}", r);
        prop_assert!(c.max_held < u64::from(p.window), "{}", r);
    }
}

/// Runs `make(seed)` with a rule of the channel driver off, then with every rule on, over
/// `seeds`: passes at the first seed whose run with the rule off shows `kind` and whose
/// run with every rule on is clean; fails if no seed does.
fn self_test(
    make: fn(u64) -> Scenario,
    seeds: std::ops::Range<u64>,
    off: fn(&mut ChannelModel),
    kind: ViolationKind,
) {
    for seed in seeds.clone() {
        let mut sc = make(seed);
        if let Some(m) = sc.channels.as_mut() {
            off(m);
        }
        let bad = Sim::new(sc).run();
        if !kinds(&bad).contains(&kind) {
            continue;
        }
        let good = Sim::new(make(seed)).run();
        assert!(good.ok(), "{}", good.describe_failure());
        let v = bad.violations.iter().find(|v| v.kind == kind);
        println!("seed {seed}, rule off: {v:?}\n{bad}");
        return;
    }
    panic!("{kind:?} in no seed of {seeds:?}");
}

/// [`with_deadlines`] bounded in events: with gaps off a blocked sender keeps its quota,
/// and the run ends at the limit.
fn bounded_deadlines(seed: u64) -> Scenario {
    let mut sc = with_deadlines(seed);
    sc.max_events = 400_000;
    sc
}

#[test]
fn without_gaps_a_flow_blocks_forever() {
    self_test(
        bounded_deadlines,
        0..6,
        |m| m.gaps = false,
        ViolationKind::ChannelBlocked,
    );
}

#[test]
fn without_the_window_a_receiver_holds_more_than_it_allows() {
    self_test(
        lossy,
        0..6,
        |m| m.window_rule = false,
        ViolationKind::ChannelHeldOverWindow,
    );
}

#[test]
fn without_the_first_message_alone_a_later_one_is_taken_for_an_old_run() {
    // Number 1 of a run overtakes number 0 (reordering): the receiver, not knowing the
    // run, takes it for a late message of an old run and drops it, and its sender is told
    // it was delivered.
    self_test(
        lossy,
        0..6,
        |m| m.first_alone = false,
        ViolationKind::ChannelAckedNotReleased,
    );
}
