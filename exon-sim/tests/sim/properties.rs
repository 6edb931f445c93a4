//! Property tests: random link settings, workloads and fault schedules; every run must keep
//! at-most-once, at-least-once after healing, obliviousness and bounded state. Failures
//! shrink to a small reproducer; `EXON_SIM_SEED=<n>` replays the scenario drawn from seed n.

use std::time::Duration;

use exon_sim::{
    seed_from_env, sim_config, Fault, FaultKind, GilbertElliott, LinkConfig, Pattern, Scenario,
    Sim, Workload,
};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A shrinkable description of one run.
#[derive(Debug, Clone)]
struct Params {
    seed: u64,
    nodes: usize,
    messages: u64,
    pattern: Pattern,
    loss: f64,
    burst: bool,
    dup: f64,
    reorder: f64,
    jitter_ms: u64,
    dup_delay_ms: u64,
    /// How long applications leave deliveries in their buffer (lost if their node restarts).
    take_ms: u64,
    /// Deadline of every message in ms (0: none).
    deadline_ms: u64,
    /// (a, b, kind 0..3, start ms, length ms)
    partitions: Vec<(usize, usize, u8, u64, u64)>,
    /// (node, at ms, down ms)
    restarts: Vec<(usize, u64, u64)>,
    /// Packing and delayed ACKs: (payload bytes, max datagram size, ACK delay ms, ack_every).
    packing: (usize, usize, u64, u32),
    /// Largest payload (0: all are `packing.0` bytes): above it, sizes vary per message up
    /// to this, and the larger ones travel in fragments.
    large: usize,
}

/// Datagram sizes drawn: tiny (one small token each), internet, jumbo (dozens per datagram).
const DATAGRAMS: [usize; 3] = [256, 1200, 8192];

impl Params {
    /// Draws parameters from a seed alone (for `EXON_SIM_SEED`).
    fn from_seed(seed: u64) -> Params {
        let mut r = SmallRng::seed_from_u64(seed);
        let nodes = r.gen_range(2..6);
        Params {
            seed,
            nodes,
            messages: r.gen_range(1..600),
            pattern: [Pattern::Ring, Pattern::ManyToMany, Pattern::Rpc][r.gen_range(0..3)],
            loss: r.gen_range(0.0..0.3),
            burst: r.gen_bool(0.3),
            dup: r.gen_range(0.0..0.3),
            reorder: r.gen_range(0.0..0.3),
            jitter_ms: r.gen_range(0..10),
            dup_delay_ms: r.gen_range(1..10_000),
            take_ms: r.gen_range(0..50),
            deadline_ms: [0, r.gen_range(50..2000)][r.gen_range(0..2)],
            partitions: (0..r.gen_range(0..4))
                .map(|_| {
                    (
                        r.gen_range(0..nodes),
                        r.gen_range(0..nodes),
                        r.gen_range(0..3),
                        r.gen_range(0..2000),
                        r.gen_range(1..1000),
                    )
                })
                .collect(),
            restarts: (0..r.gen_range(0..3))
                .map(|_| {
                    (
                        r.gen_range(0..nodes),
                        r.gen_range(0..2000),
                        r.gen_range(1..300),
                    )
                })
                .collect(),
            large: [0, 0, 0, r.gen_range(1500..12_000)][r.gen_range(0..4)],
            packing: (
                r.gen_range(13..200),
                DATAGRAMS[r.gen_range(0..3)],
                r.gen_range(0..5),
                r.gen_range(1..32),
            ),
        }
    }

    fn scenario(&self) -> Scenario {
        let n = self.nodes;
        let mut faults = Vec::new();
        for &(a, b, kind, start, len) in &self.partitions {
            let (a, b) = (a % n, b % n);
            if a == b {
                continue;
            }
            let kind = match kind {
                0 => FaultKind::Partition {
                    a,
                    b,
                    one_way: false,
                },
                1 => FaultKind::Partition {
                    a,
                    b,
                    one_way: true,
                },
                _ => FaultKind::Hold { a, b },
            };
            faults.push(Fault {
                at: Duration::from_millis(start),
                kind,
            });
            faults.push(Fault {
                at: Duration::from_millis(start + len),
                kind: FaultKind::Heal {
                    a,
                    b,
                    // A one-way partition heals its own direction only.
                    one_way: matches!(kind, FaultKind::Partition { one_way: true, .. }),
                },
            });
        }
        for &(node, at, down) in &self.restarts {
            faults.push(Fault {
                at: Duration::from_millis(at),
                kind: FaultKind::Restart {
                    node: node % n,
                    down: Duration::from_millis(down),
                    keep_clock: true,
                },
            });
        }
        faults.sort_by_key(|f| f.at);
        Scenario {
            seed: self.seed,
            nodes: n,
            link: LinkConfig {
                loss: self.loss,
                burst: self.burst.then_some(GilbertElliott {
                    p_good_to_bad: 0.05,
                    p_bad_to_good: 0.3,
                    loss_bad: 0.8,
                }),
                dup: self.dup,
                reorder: self.reorder,
                jitter: Duration::from_millis(self.jitter_ms),
                dup_max_delay: Duration::from_millis(self.dup_delay_ms),
                // The drawn datagram size is fixed (no path MTU discovery): the path carries it.
                mtu: exon::proto::MAX_DATAGRAM_SIZE,
                ..LinkConfig::default()
            },
            workload: Workload {
                pattern: self.pattern,
                // Fewer messages when they are large, to keep a case's run time.
                messages: if self.large > 0 {
                    self.messages.min(120)
                } else {
                    self.messages
                },
                max_payload_len: self.large,
                burst: 64,
                // At most what one sealed datagram of the drawn size carries.
                payload_len: self.packing.0.min({
                    let mut c = sim_config();
                    c.mtu.max_datagram_size = self.packing.1;
                    c.mtu.discovery = false;
                    c.max_payload()
                }),
                ..Workload::default()
            },
            config: {
                let mut conf = sim_config();
                conf.mtu.max_datagram_size = self.packing.1;
                conf.mtu.discovery = false;
                conf.acks.delay = Duration::from_millis(self.packing.2);
                conf.acks.every = self.packing.3;
                conf
            },
            faults,
            take_delay: Duration::from_millis(self.take_ms),
            deadline: (self.deadline_ms > 0).then(|| Duration::from_millis(self.deadline_ms)),
            settle: Duration::from_secs(120),
            max_events: 2_000_000,
            ..Scenario::default()
        }
    }
}

fn check(p: &Params) -> Result<(), String> {
    let r = Sim::new(p.scenario()).run();
    if r.ok() {
        Ok(())
    } else {
        Err(format!("{p:?}\n{}", r.describe_failure()))
    }
}

fn params() -> impl Strategy<Value = Params> {
    (
        any::<u64>(),
        2usize..6,
        1u64..600,
        0usize..3,
        (0.0..0.3f64, any::<bool>(), 0.0..0.3f64, 0.0..0.3f64),
        (
            0u64..10,
            1u64..10_000,
            0u64..50,
            prop_oneof![Just(0u64), 50u64..2000],
        ),
        prop::collection::vec((0usize..6, 0usize..6, 0u8..3, 0u64..2000, 1u64..1000), 0..4),
        prop::collection::vec((0usize..6, 0u64..2000, 1u64..300), 0..3),
        (
            13usize..200,
            0usize..3,
            0u64..5,
            1u32..32,
            prop_oneof![3 => Just(0usize), 1 => 1500usize..12_000],
        ),
    )
        .prop_map(
            |(
                seed,
                nodes,
                messages,
                pat,
                (loss, burst, dup, reorder),
                (jitter_ms, dup_delay_ms, take_ms, deadline_ms),
                partitions,
                restarts,
                (payload, dgram, ack_ms, every, large),
            )| Params {
                seed,
                nodes,
                messages,
                pattern: [Pattern::Ring, Pattern::ManyToMany, Pattern::Rpc][pat],
                loss,
                burst,
                dup,
                reorder,
                jitter_ms,
                dup_delay_ms,
                take_ms,
                deadline_ms,
                partitions,
                restarts,
                packing: (payload, DATAGRAMS[dgram], ack_ms, every),
                large,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn exactly_once_under_random_networks_and_faults(p in params()) {
        check(&p).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn seeded_scenarios() {
    let seeds: Vec<u64> = match seed_from_env() {
        Some(s) => vec![s],
        None => (0..8).collect(),
    };
    for seed in seeds {
        if let Err(e) = check(&Params::from_seed(seed)) {
            panic!("EXON_SIM_SEED={seed}: {e}");
        }
    }
}

/// Found by the property test: a receiver restarts while a message sent in fragments is
/// held whole there; the sender, told of bytes missing, needs credit again under the lost
/// incarnation while its credit is for the new one. It must ask (and get the verdict),
/// not wait without a timer.
#[test]
fn fragments_needing_credit_under_a_lost_incarnation_get_their_verdict() {
    let p = Params {
        seed: 17344108327783677561,
        nodes: 2,
        messages: 84,
        pattern: Pattern::Ring,
        loss: 0.2600026292120297,
        burst: false,
        dup: 0.2472053349265623,
        reorder: 0.12317626414018215,
        jitter_ms: 8,
        dup_delay_ms: 8303,
        take_ms: 33,
        deadline_ms: 0,
        partitions: vec![(2, 1, 1, 876, 895)],
        restarts: vec![(2, 876, 1)],
        packing: (157, 256, 1, 5),
        large: 6502,
    };
    check(&p).unwrap();
}

/// Found by the property test (CI, against a rule tried and reverted: a sender answering
/// a receiver's probe by sending again at once its tokens of that incarnation): three
/// nodes in a ring, 20 % loss, duplicates and reordering, late duplicates after 6 s. With
/// that rule, messages ended in doubt though no receiver restarted, and 45 were lost. Kept
/// so that a later attempt at it meets this case.
#[test]
fn late_duplicates_in_a_lossy_ring_leave_no_doubt_and_lose_nothing() {
    let p = Params {
        seed: 12284116788044649775,
        nodes: 3,
        messages: 445,
        pattern: Pattern::Ring,
        loss: 0.20637652709463555,
        burst: true,
        dup: 0.20610965568117975,
        reorder: 0.20606159020064618,
        jitter_ms: 0,
        dup_delay_ms: 6372,
        take_ms: 23,
        deadline_ms: 0,
        partitions: vec![],
        restarts: vec![],
        packing: (95, 1200, 1, 1),
        large: 0,
    };
    check(&p).unwrap();
}

/// Found by the property test (CI, 2026-12-03): five nodes, 7 % loss, 24 % reordering,
/// messages up to 3 171 bytes (the larger in fragments, 256-byte datagrams), node 2
/// restarting at 36 ms for 145 ms. Node 3's messages to the restarted node 2 went again in
/// its new incarnation, all but one waiting for the messages in progress, among them one of
/// the lost incarnation. That one was settled after its grant had been reset, and giving
/// its credit back to no grant told no waiting message: 8 tokens, no timer, the simulator
/// quiet at 9.3 s with them neither delivered nor given a verdict (`Credit::give_back`).
#[test]
fn tokens_to_a_restarted_receiver_keep_a_timer() {
    let p = Params {
        seed: 728284345684668549,
        nodes: 5,
        messages: 118,
        pattern: Pattern::ManyToMany,
        loss: 0.06999371292285617,
        burst: false,
        dup: 0.0,
        reorder: 0.2420231573486249,
        jitter_ms: 7,
        dup_delay_ms: 1,
        take_ms: 9,
        deadline_ms: 0,
        partitions: vec![],
        restarts: vec![(2, 36, 145)],
        packing: (141, 256, 4, 3),
        large: 3171,
    };
    check(&p).unwrap();
}
