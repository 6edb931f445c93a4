//! Mixed message sizes, from 100 bytes to 4 MiB, through the simulator's faults: every
//! message delivered whole and exactly once (the oracle checks each delivery's length and
//! bytes), and no node's reassembly memory beyond what it granted or its cap.

use std::time::Duration;

use exon_sim::{Fault, FaultKind, LinkConfig, Pattern, Scenario, Sim, Workload};

fn mixed(seed: u64, link: LinkConfig, faults: Vec<Fault>) -> Scenario {
    let mut sc = Scenario {
        seed,
        nodes: 3,
        link,
        workload: Workload {
            pattern: Pattern::ManyToMany,
            messages: 24,
            payload_len: 100,
            max_payload_len: 4 << 20,
            burst: 4,
            max_pending: 4,
            interval: Duration::from_millis(5),
        },
        faults,
        settle: Duration::from_secs(300),
        max_events: 20_000_000,
        ..Scenario::default()
    };
    // A receiver that can hold only a few large messages at once: senders must wait.
    sc.config.limits.max_reassembly_bytes = 24 << 20;
    sc
}

fn run(sc: Scenario) {
    let r = Sim::new(sc).run();
    assert!(r.ok(), "{}", r.describe_failure());
}

#[test]
fn mixed_sizes_on_a_clean_link() {
    run(mixed(1, LinkConfig::default(), Vec::new()));
}

#[test]
fn mixed_sizes_under_loss_duplication_and_reordering() {
    let link = LinkConfig {
        loss: 0.05,
        dup: 0.03,
        reorder: 0.1,
        jitter: Duration::from_millis(3),
        dup_max_delay: Duration::from_millis(50),
        ..LinkConfig::default()
    };
    run(mixed(2, link, Vec::new()));
}

#[test]
fn mixed_sizes_through_partitions_and_restarts() {
    let faults = vec![
        Fault {
            at: Duration::from_millis(300),
            kind: FaultKind::Partition {
                a: 0,
                b: 1,
                one_way: false,
            },
        },
        Fault {
            at: Duration::from_millis(1800),
            kind: FaultKind::Heal {
                a: 0,
                b: 1,
                one_way: false,
            },
        },
        Fault {
            at: Duration::from_millis(900),
            kind: FaultKind::Restart {
                node: 2,
                down: Duration::from_millis(400),
                keep_clock: true,
            },
        },
    ];
    let link = LinkConfig {
        loss: 0.02,
        ..LinkConfig::default()
    };
    run(mixed(3, link, faults));
}
