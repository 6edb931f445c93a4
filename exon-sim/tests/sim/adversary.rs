//! An on-path adversary (replays at any delay, bit flips, forgeries in real nodes' names
//! with the frames that would hurt most) against sealed nodes: exactly-once and truthful
//! verdicts hold. Against plaintext nodes the same adversary breaks them, which shows the
//! adversary is real and sealing is what stops it.

use std::time::Duration;

use exon_sim::{Adversary, Attack, Report, Scenario, Sim, ViolationKind, Workload};

fn attacked(seed: u64, plaintext: bool) -> Scenario {
    let mut sc = Scenario {
        seed,
        workload: Workload {
            messages: 1500,
            ..Workload::default()
        },
        adversary: Some(Adversary {
            interval: Duration::from_millis(1),
            actions: 3000,
            max_replay_delay: Duration::from_secs(5),
            attacks: Attack::ALL,
        }),
        plaintext,
        settle: Duration::from_secs(60),
        max_events: 3_000_000,
        ..Scenario::default()
    };
    sc.link.loss = 0.05;
    sc.link.dup = 0.05;
    sc.link.reorder = 0.1;
    sc
}

#[test]
fn sealed_nodes_hold_exactly_once_under_the_adversary() {
    for seed in 0..4 {
        let r: Report = Sim::new(attacked(seed, false)).run();
        assert!(r.ok(), "seed {seed}: {}", r.describe_failure());
        assert_eq!(r.delivered, 1500, "seed {seed}: {r}");
        assert_eq!(r.acked, 1500, "seed {seed}: every receipt resolves: {r}");
        assert!(r.bad_tags > 100, "seed {seed}: forgeries were refused: {r}");
    }
}

#[test]
fn replays_alone_are_harmless_at_any_delay() {
    // Only replays (and late duplicates from the link): long delays, many copies.
    let mut sc = attacked(9, false);
    if let Some(a) = &mut sc.adversary {
        a.attacks = &[Attack::Replay];
    }
    sc.link.dup = 0.3;
    sc.link.dup_max_delay = Duration::from_secs(20);
    let r = Sim::new(sc).run();
    assert!(r.ok(), "{}", r.describe_failure());
    assert_eq!(r.delivered, 1500);
}

#[test]
fn the_same_adversary_breaks_plaintext_nodes() {
    let broken = (0..8).any(|seed| {
        let r = Sim::new(attacked(seed, true)).run();
        r.violations.iter().any(|v| {
            matches!(
                v.kind,
                ViolationKind::Duplicate
                    | ViolationKind::AckWithoutDelivery
                    | ViolationKind::UnexplainedDoubt
                    | ViolationKind::Lost
            )
        }) || !r.ok()
    });
    assert!(broken, "the adversary should break plaintext runs");
}
