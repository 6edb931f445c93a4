//! One-way outages: a node that hears nothing from a peer sends it only what the deaf
//! schedule allows (the simulator's deaf-path oracle checks every run), and once the path
//! heals every message is delivered once and acknowledged within a few seconds.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
use exon_sim::deafness::{MAX_BYTES, MAX_DATAGRAMS};
use exon_sim::{Fault, FaultKind, LinkConfig, Pattern, Scenario, Sim, ViolationKind, Workload};

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
