//! One-way outages: a node that hears nothing from a peer sends it only what the deaf
//! schedule allows (the simulator's deaf-path oracle checks every run), and once the path
//! heals every message is delivered once and acknowledged within a few seconds.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
use exon_sim::deafness::{MAX_BYTES, MAX_DATAGRAMS};
use exon_sim::{Fault, FaultKind, LinkConfig, Pattern, Scenario, Sim, ViolationKind, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const OUTAGE_AT: Duration = Duration::from_millis(500);
const OUTAGE: Duration = Duration::from_secs(60);

/// Two nodes streaming to each other (1000-byte messages) over links of `mtu` bytes; the
/// direction 1 -> 0 fails for a minute, the other stays up.
fn outage(seed: u64, mtu: usize, rules: Option<Rules>) -> Scenario {
    let mut sc = Scenario {
        seed,
        nodes: 2,
        link: LinkConfig {
            mtu,
            ..LinkConfig::default()
        },
        workload: Workload {
            pattern: Pattern::Ring,
            messages: 4_000,
            payload_len: 1000,
            burst: 8,
            max_pending: 400,
            interval: Duration::from_millis(5),
            ..Workload::default()
        },
        faults: vec![
            Fault {
                at: OUTAGE_AT,
                kind: FaultKind::Partition {
                    a: 1,
                    b: 0,
                    one_way: true,
                },
            },
            Fault {
                at: OUTAGE_AT + OUTAGE,
                kind: FaultKind::Heal {
                    a: 1,
                    b: 0,
                    one_way: true,
                },
            },
        ],
        ..Scenario::default()
    };
    sc.config.mtu.max_datagram_size = mtu.max(1200);
    if let Some(rules) = rules {
        sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
    }
    sc
}

/// Runs `sc`, returning the report and how long after the heal the last message was
/// acknowledged.
fn run(sc: Scenario) -> (exon_sim::Report, Duration, u64, u64) {
    let heal = OUTAGE_AT + OUTAGE;
    let mut sim = Sim::new(sc);
    let mut acked_at_heal = None;
    let mut last_ack = Duration::ZERO;
    let mut acked = 0;
    while sim.step() {
        if acked_at_heal.is_none() && sim.now() >= heal {
            acked_at_heal = Some(sim.oracle().acked);
        }
        if sim.oracle().acked != acked {
            acked = sim.oracle().acked;
            last_ack = sim.now();
        }
    }
    let deaf = sim.deaf_watch();
    let (worst_d, worst_b) = (deaf.worst_datagrams as u64, deaf.worst_bytes as u64);
    let r = sim.finish();
    assert!(
        acked_at_heal.unwrap_or(0) < r.messages,
        "the outage must leave messages unacknowledged"
    );
    (r, last_ack.saturating_sub(heal), worst_d, worst_b)
}

#[test]
fn a_one_way_outage_is_met_with_the_deaf_schedule_and_heals_fast() {
    for (seed, mtu) in [(1, 65_507), (2, 1472)] {
        let (r, recovery, worst_d, worst_b) = run(outage(seed, mtu, None));
        eprintln!(
            "mtu {mtu}: {r} recovery={recovery:?} worst_window={worst_d} datagrams {worst_b} bytes"
        );
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.delivered, r.messages);
        assert_eq!(r.acked, r.messages);
        assert!(worst_d <= MAX_DATAGRAMS as u64 && worst_b <= MAX_BYTES as u64);
        assert!(
            recovery < Duration::from_secs(3),
            "everything acknowledged {recovery:?} after the heal"
        );
    }
}

#[test]
fn without_the_deaf_schedule_the_oracle_finds_the_flood() {
    let mut rules = Rules::ALL;
    rules.deaf_backoff = false;
    let (r, _, worst_d, worst_b) = run(outage(1, 65_507, Some(rules)));
    eprintln!("rule off: {r} worst_window={worst_d} datagrams {worst_b} bytes");
    assert!(
        r.violations
            .iter()
            .any(|v| v.kind == ViolationKind::DeafFlood),
        "{}",
        r.describe_failure()
    );
}

/// Deadlines across a change of datagram sizes, drawn from `seed`: path MTU discovery grows
/// datagrams to 9 000 bytes, messages of 1 300 to 8 000 bytes leave as whole TOKENs, then
/// the direction 1 -> 0 fails for a few seconds (node 0 hears nothing: the ACKs of messages
/// its peer delivered are lost) and, around then, the path may shrink (a black hole for
/// the large datagrams). Node 0 goes deaf (base-size datagrams) or falls back to the base
/// size, where those messages only go in fragments, some of which never leave before the
/// messages' deadlines pass. Without the outage (one seed in four), heavy loss on both
/// directions loses ACKs and drives the black-hole fallback instead. A message delivered
/// must never be reported not delivered (the oracle's `DeliveredAfterNotDelivered`,
/// whichever came first), nor sent again in a fresh slot and delivered twice
/// (`Duplicate`).
pub(crate) fn deadlines_across_resize(seed: u64, rules: Option<Rules>) -> Scenario {
    let mut rng = SmallRng::seed_from_u64(seed);
    let at = Duration::from_millis(rng.gen_range(600..1400));
    let outage = seed % 4 != 3;
    let mut faults = Vec::new();
    if outage {
        faults.push(Fault {
            at,
            kind: FaultKind::Partition {
                a: 1,
                b: 0,
                one_way: true,
            },
        });
        faults.push(Fault {
            at: at + Duration::from_millis(rng.gen_range(4000..9000)),
            kind: FaultKind::Heal {
                a: 1,
                b: 0,
                one_way: true,
            },
        });
    }
    // The path shrinks some time around the outage's start, or (with the outage) not at
    // all: then only the deaf schedule's base-size datagrams change the sizes.
    if !outage || rng.gen_bool(0.7) {
        faults.push(Fault {
            at: at + Duration::from_millis(rng.gen_range(0..600)),
            kind: FaultKind::Mtu {
                a: 0,
                b: 1,
                mtu: rng.gen_range(1300..=1500),
            },
        });
    }
    faults.sort_by_key(|f| f.at);
    let deadline = if outage {
        rng.gen_range(2500..6000)
    } else {
        rng.gen_range(800..2500)
    };
    let mut sc = Scenario {
        seed,
        nodes: 2,
        link: LinkConfig {
            mtu: 9000,
            loss: if outage { 0.01 } else { 0.3 },
            ..LinkConfig::default()
        },
        workload: Workload {
            pattern: Pattern::Ring,
            messages: 800,
            payload_len: 1300,
            max_payload_len: 8000,
            burst: 2,
            max_pending: 200,
            interval: Duration::from_millis(10),
        },
        deadline: Some(Duration::from_millis(deadline)),
        faults,
        ..Scenario::default()
    };
    sc.config.mtu.max_datagram_size = 9000;
    if let Some(rules) = rules {
        sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
    }
    sc
}

/// Seeds of [`deadlines_across_resize`] each test runs.
const RESIZE_SEEDS: std::ops::Range<u64> = 0..16;

#[test]
fn deadlines_across_a_resize_never_call_a_delivered_message_not_delivered() {
    let (mut deaf, mut fallbacks, mut doubts, mut not_delivered) = (0, 0, 0, 0);
    for seed in RESIZE_SEEDS {
        let mut sim = Sim::new(deadlines_across_resize(seed, None));
        while sim.step() {}
        deaf += sim.node_stats().map(|s| s.deaf_datagrams).sum::<u64>();
        fallbacks += sim
            .node_stats()
            .map(|s| s.mtu.black_hole_fallbacks)
            .sum::<u64>();
        let r = sim.finish();
        assert!(r.ok(), "seed {seed}: {}", r.describe_failure());
        doubts += r.expired_in_doubt;
        not_delivered += r.not_delivered;
    }
    eprintln!(
        "deaf datagrams {deaf}, black-hole fallbacks {fallbacks}, given up: {doubts} in doubt, \
         {not_delivered} not delivered"
    );
    // The runs reach the class: sizes changed under deaf peers and black holes, and
    // deadlines passed with both verdicts.
    assert!(deaf > 0 && fallbacks > 0, "{deaf} {fallbacks}");
    assert!(doubts > 0 && not_delivered > 0, "{doubts} {not_delivered}");
}

/// With `deadline_remembers_whole_copies` off, the oracle sees messages reported not
/// delivered that were delivered (as whole TOKENs before the sizes changed).
#[test]
fn without_the_rule_the_oracle_finds_delivered_messages_reported_not_delivered() {
    let mut rules = Rules::ALL;
    rules.deadline_remembers_whole_copies = false;
    let found = RESIZE_SEEDS
        .filter(|&seed| {
            let r = Sim::new(deadlines_across_resize(seed, Some(rules))).run();
            r.violations
                .iter()
                .any(|v| v.kind == ViolationKind::DeliveredAfterNotDelivered)
        })
        .count();
    eprintln!("rule off: the defect found with {found} seeds");
    assert!(found > 0, "the oracle missed the defect with every seed");
}
