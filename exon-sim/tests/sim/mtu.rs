//! Path MTU discovery under the simulator: the path's MTU drops below the size in use in the
//! middle of a run (a black hole for the larger datagrams), later rises again. Messages keep
//! flowing after the drop, the oracle finds every message delivered exactly once, and the
//! senders find the larger path again.

use std::time::Duration;

use exon::proto::NodeId;
use exon_sim::{Fault, FaultKind, LinkConfig, Scenario, Sim, Workload};

const DROP_AT: Duration = Duration::from_secs(2);
const RISE_AT: Duration = Duration::from_secs(4);

fn scenario() -> Scenario {
    let mut sc = Scenario {
        seed: 14,
        // Bursts of 128 messages of 200 bytes per node every 25 ms for about 6 s: full
        // datagrams once discovery has found the path.
        workload: Workload {
            messages: 60_000,
            payload_len: 200,
            burst: 128,
            interval: Duration::from_millis(25),
            ..Workload::default()
        },
        link: LinkConfig {
            mtu: 9000,
            loss: 0.01,
            ..LinkConfig::default()
        },
        faults: vec![
            Fault {
                at: DROP_AT,
                kind: FaultKind::Mtu {
                    a: 0,
                    b: 1,
                    mtu: 1300,
                },
            },
            Fault {
                at: RISE_AT,
                kind: FaultKind::Mtu {
                    a: 0,
                    b: 1,
                    mtu: 9000,
                },
            },
        ],
        settle: Duration::from_secs(60),
        ..Scenario::default()
    };
    // Search again soon after settling, to see the path grow within the run.
    sc.config.mtu.raise_interval = Duration::from_secs(1);
    sc
}

fn acknowledged(sim: &Sim) -> u64 {
    sim.node_stats().map(|s| s.acknowledged).sum()
}

fn size_to_peer(sim: &Sim) -> usize {
    sim.node(0).unwrap().send_size(NodeId::from_const(2))
}

#[test]
fn traffic_continues_through_an_mtu_drop_and_the_size_grows_back() {
    let mut sim = Sim::new(scenario());
    while sim.now() < DROP_AT && sim.step() {}
    let before = size_to_peer(&sim);
    assert!(before > 4000, "the search found the large path: {before}");
    let acked_at_drop = acknowledged(&sim);
    while sim.now() < DROP_AT + Duration::from_millis(1500) && sim.step() {}
    let during = size_to_peer(&sim);
    assert!(during <= 1300, "fell back below the new MTU: {during}");
    assert!(
        acknowledged(&sim) > acked_at_drop + 5_000,
        "traffic continued after the drop: {} then {}",
        acked_at_drop,
        acknowledged(&sim)
    );
    let fallbacks: u64 = sim.node_stats().map(|s| s.mtu.black_hole_fallbacks).sum();
    assert!(fallbacks >= 1);
    while sim.now() < RISE_AT + Duration::from_millis(1500) && sim.step() {}
    let after = size_to_peer(&sim);
    assert!(after > 4000, "found the larger path again: {after}");
    while sim.step() {}
    let report = sim.finish();
    assert!(report.ok(), "{}", report.describe_failure());
    assert_eq!(report.delivered, 60_000);
}

/// Three sealed nodes in a ring (each node's successor hears from it, its predecessor
/// hardly at all), 4000-byte messages, the links' MTU dropping from 9000 to 1472 while a
/// node restarts, under loss and duplicates up to 5 s late (late MTU_ACKs of the node's
/// probes from before its restart among them). Every message is delivered: neither a stale
/// answer nor a silent peer keeps a node on a size the path no longer carries.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_restart_behind_a_smaller_mtu_with_late_duplicates_delivers_everything() {
    for seed in 1..=4u64 {
        let mut faults = Vec::new();
        for (a, b) in [(0, 1), (1, 2), (2, 0)] {
            faults.push(Fault {
                at: Duration::from_secs(3),
                kind: FaultKind::Mtu { a, b, mtu: 1472 },
            });
        }
        faults.push(Fault {
            at: Duration::from_secs(3),
            kind: FaultKind::Restart {
                node: (seed % 3) as usize,
                down: Duration::from_millis(200),
                keep_clock: true,
            },
        });
        let mut sc = Scenario {
            seed,
            nodes: 3,
            workload: Workload {
                messages: 15_000,
                payload_len: 4000,
                burst: 8,
                interval: Duration::from_millis(10),
                ..Workload::default()
            },
            link: LinkConfig {
                mtu: 9000,
                loss: 0.1,
                dup: 0.2,
                dup_max_delay: Duration::from_secs(5),
                ..LinkConfig::default()
            },
            faults,
            settle: Duration::from_secs(300),
            ..Scenario::default()
        };
        sc.config.mtu.max_datagram_size = 9000;
        let r = Sim::new(sc).run();
        eprintln!("{r}");
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.delivered + r.lost_by_restart, r.messages);
        assert_eq!(r.lost, 0);
        assert!(r.too_big > 0, "the MTU drop caught datagrams in flight");
    }
}
