//! Checker self-test: with each correction of `docs/algorithm.md` switched off (feature
//! `rule-switches` of `exon`), the simulator finds the resulting violation from a fixed seed
//! within a bounded number of events; with every correction on, the same run is clean.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
use exon_sim::{
    Adversary, Attack, Fault, FaultKind, Hostile, Report, Scenario, Sim, ViolationKind, Workload,
};

/// Events allowed for a self-test run to find its violation.
const MAX_EVENTS: u64 = 200_000;

fn base(seed: u64) -> Scenario {
    Scenario {
        seed,
        workload: Workload {
            messages: 2000,
            ..Workload::default()
        },
        settle: Duration::from_secs(60),
        max_events: MAX_EVENTS,
        ..Scenario::default()
    }
}

/// Loss, duplication with late replays (up to 10 s), reordering.
fn lossy(seed: u64) -> Scenario {
    let mut sc = base(seed);
    sc.link.loss = 0.2;
    sc.link.dup = 0.2;
    sc.link.reorder = 0.2;
    sc.link.dup_max_delay = Duration::from_secs(10);
    sc
}

/// Few envelopes, asked for only when used up, so receiver records empty and are re-created
/// often; heavy loss and duplication with replays up to 2 s late.
fn sparse(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.config.flow.envelope_target = 4;
    sc.config.flow.envelope_low = 0;
    sc.config.flow.autotune = false;
    sc.link.loss = 0.3;
    sc.link.dup = 0.5;
    sc.link.dup_max_delay = Duration::from_secs(2);
    sc.workload.burst = 4;
    sc.workload.interval = Duration::from_millis(30);
    sc.workload.messages = 1000;
    sc
}

fn without(mut sc: Scenario, off: fn(&mut Rules)) -> Scenario {
    let mut rules = Rules::ALL;
    off(&mut rules);
    sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
    sc
}

/// Seeds a self-test may try. Fixed, so every run is reproducible; more than one, so a test
/// does not hang on the schedule of one lucky seed when the core's timing changes (with
/// congestion control, rule 5's defect shows first with a seed in 28..36).
const SEEDS: std::ops::Range<u64> = 0..64;

/// For each seed in turn: runs the scenario with all rules on (must be clean), then with the
/// rule off, until a run shows a violation of one of `kinds`. Fails if no seed does.
fn self_test(make: fn(u64) -> Scenario, off: fn(&mut Rules), kinds: &[ViolationKind]) -> Report {
    self_test_with(make, off, kinds)
}

/// [`self_test`] for any scenario maker.
fn self_test_with(
    make: impl Fn(u64) -> Scenario,
    off: fn(&mut Rules),
    kinds: &[ViolationKind],
) -> Report {
    let mut missed = Vec::new();
    for seed in SEEDS {
        let good = Sim::new(make(seed)).run();
        assert!(good.ok(), "control run failed: {}", good.describe_failure());
        let bad = Sim::new(without(make(seed), off)).run();
        assert!(bad.events <= MAX_EVENTS);
        if bad.violations.iter().any(|v| kinds.contains(&v.kind)) {
            return bad;
        }
        missed.push(format!("{bad}"));
    }
    panic!("the checker missed the defect with every seed: {missed:#?}");
}

#[test]
fn rule1_first_send_requests_slots() {
    // Each node sends a single message: without the rule nobody ever asks for slots.
    self_test(
        |seed| {
            let mut sc = base(seed);
            sc.workload.messages = 2;
            sc
        },
        |r| r.first_send_requests_slots = false,
        &[ViolationKind::Lost],
    );
}

#[test]
fn rule2_token_before_frontier() {
    // The paper's envelope_low == envelope_target, sends spaced out on a perfect network:
    // the REQSLOTS after a dequeue waives the slot of the token being sent. The token was
    // acknowledged, never delivered; now the receiver's record answers DOUBT below a
    // frontier that waived free slots of it (`doubt_below_forgotten`), and the messages
    // end in doubt with no cause: still a violation.
    let bad = self_test(
        |seed| {
            let mut sc = base(seed);
            sc.config.flow.envelope_target = 4;
            sc.config.flow.envelope_low = 4;
            sc.workload.burst = 1;
            sc.workload.interval = Duration::from_millis(50);
            sc.workload.messages = 20;
            sc
        },
        |r| r.token_before_frontier = false,
        &[
            ViolationKind::AckWithoutDelivery,
            ViolationKind::UnexplainedDoubt,
        ],
    );
    assert_eq!(
        bad.link_drops + bad.link_dups,
        0,
        "a loss on a perfect network"
    );
}

#[test]
fn rule3_token_keeps_incarnation() {
    self_test(
        sparse,
        |r| r.token_keeps_incarnation = false,
        &[ViolationKind::Duplicate],
    );
}

/// Sparse envelopes and loss but no duplication: receiver records empty and vanish, and
/// nothing re-creates them behind the sender's back.
fn sparse_no_replay(seed: u64) -> Scenario {
    let mut sc = sparse(seed);
    sc.link.dup = 0.0;
    sc.link.reorder = 0.0;
    sc
}

#[test]
fn rule4_ack_without_record() {
    self_test(
        sparse_no_replay,
        |r| r.ack_without_record = false,
        &[ViolationKind::NotAcknowledged, ViolationKind::NotIdle],
    );
}

// Rule 5 (raise the clock on orphan SLOTS) is shown at the core level in
// `exon/tests/core/rules.rs` (`rule5_switched_off_leaves_orphan_slots`): since a waiver never
// claims a frontier beyond what the receiver granted, the simulator's scenarios no longer
// reach a state where the missing raise is visible end to end.

#[test]
fn rule7_receiver_probe() {
    self_test(
        lossy,
        |r| r.receiver_probe = false,
        &[ViolationKind::NotIdle],
    );
}

fn attacked(n: u64) -> Scenario {
    let mut sc = base(0);
    sc.config.limits.max_receiver_records = 16;
    sc.workload.messages = 200;
    sc.expect_idle = false; // forged records hold slots for senders that never come
                            // The forger claims made-up ids without keys: only plaintext nodes listen to it (sealed
                            // ones drop every such datagram before it reaches the record table).
    sc.plaintext = true;
    sc.hostile = Some(Hostile {
        victim: 1,
        ids: 64,
        n,
        interval: Duration::from_millis(10),
        volleys: 5,
    });
    sc
}

#[test]
fn rule6_bounded_input_huge_requests() {
    // n far above max_slots_request, from 64 forged ids: refused with the rule, and without
    // it the victim holds 64 records and millions of slots.
    self_test(
        |_| attacked(1_000_000),
        |r| r.bounded_input = false,
        &[ViolationKind::Unbounded],
    );
}

#[test]
fn rule6_records_capped_under_forged_ids() {
    // Acceptable n, but more forged ids than the record cap.
    let r = Sim::new(attacked(100)).run();
    assert!(r.ok(), "{}", r.describe_failure());
    assert_eq!(r.delivered, 200);
}

fn restarts(mut sc: Scenario, keep_clock: bool) -> Scenario {
    sc.faults = (0..6)
        .map(|k| Fault {
            at: Duration::from_millis(100 + 150 * k),
            kind: FaultKind::Restart {
                node: (k % 2) as usize,
                down: Duration::from_millis(5),
                keep_clock,
            },
        })
        .collect();
    sc
}

#[test]
fn rule8_restart_keeping_the_clock_is_clean() {
    for seed in [0, 12] {
        let r = Sim::new(restarts(lossy(seed), true)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.restarts, 6);
        assert_eq!(r.messages, r.delivered + r.lost_by_restart);
    }
}

#[test]
fn rule8_restart_losing_the_clock_duplicates() {
    // A duplicate needs a late replay to meet a reused incarnation number: rare, so more
    // seeds than the other self-tests (the first one found is at 71).
    let found = (0..160).find(|&seed| {
        let r = Sim::new(restarts(lossy(seed), false)).run();
        r.violations
            .iter()
            .any(|v| v.kind == ViolationKind::Duplicate)
    });
    assert!(found.is_some(), "no seed showed a duplicate delivery");
}

#[test]
fn restart_doubt_lost_incarnations() {
    // Without DOUBT, a restarted receiver acknowledges tokens for the incarnations it lost
    // (rule 4): messages acknowledged and never delivered.
    self_test(
        |seed| restarts(lossy(seed), true),
        |r| r.doubt_lost_incarnations = false,
        &[ViolationKind::AckWithoutDelivery],
    );
}

/// Plaintext nodes on a clean link, and an on-path adversary that reads the plaintext and
/// forges only `attack` (the attacks the plaintext hardening rules answer).
fn plaintext_attacked(attack: &'static [Attack]) -> impl Fn(u64) -> Scenario {
    move |seed| {
        let mut sc = base(seed);
        sc.plaintext = true;
        sc.workload.messages = 600;
        sc.adversary = Some(Adversary {
            interval: Duration::from_millis(3),
            actions: 400,
            max_replay_delay: Duration::ZERO,
            attacks: attack,
        });
        sc
    }
}

#[test]
fn plausible_input_refuses_a_forged_frontier() {
    // A waiver REQSLOTS in the sender's name with a frontier far above every slot: refused
    // with the rule; without it the receiver drops the slots tokens are in flight for, and
    // acknowledges them undelivered (rule 4).
    self_test_with(
        plaintext_attacked(&[Attack::Frontier]),
        |r| r.plausible_input = false,
        &[ViolationKind::AckWithoutDelivery, ViolationKind::Lost],
    );
}

#[test]
fn plausible_input_refuses_a_retry_after_an_ack() {
    // A RETRY in the receiver's name for an incarnation it acknowledged tokens of: ignored
    // with the rule; without it the sender sends a delivered message again.
    self_test_with(
        plaintext_attacked(&[Attack::Retry]),
        |r| r.plausible_input = false,
        &[ViolationKind::Duplicate],
    );
}

#[test]
fn unproven_probe_limit_lets_forged_records_go() {
    // Records forged ids created and never used: with the rule they are evicted after a few
    // unanswered probes and the victim ends idle; without it they probe forever.
    fn make(seed: u64) -> Scenario {
        let mut sc = attacked(100);
        sc.seed = seed;
        sc.expect_idle = true;
        sc
    }
    self_test(
        make,
        |r| r.unproven_probe_limit = false,
        &[ViolationKind::NotIdle],
    );
}
/// The application crashes with messages still in its buffer: without acknowledging on
/// hand-over, their senders are told "acknowledged" for messages nobody took.
#[test]
fn ack_on_take() {
    self_test(
        |seed| {
            let mut sc = restarts(lossy(seed), true);
            sc.take_delay = Duration::from_millis(30);
            sc
        },
        |r| r.ack_on_take = false,
        &[ViolationKind::AckWithoutTake],
    );
}

/// Every message has a deadline of 150 ms, and the link between the two nodes holds its
/// datagrams from 50 ms to 400 ms, so that many messages are given up.
fn with_deadlines(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.deadline = Some(Duration::from_millis(150));
    sc.faults = vec![
        Fault {
            at: Duration::from_millis(50),
            kind: FaultKind::Hold { a: 0, b: 1 },
        },
        Fault {
            at: Duration::from_millis(400),
            kind: FaultKind::Heal {
                a: 0,
                b: 1,
                one_way: false,
            },
        },
    ];
    sc
}

/// Deadlines over a lossy network: messages given up are reported truthfully, and one
/// reported not delivered never arrives. With the rule off (every message given up reported
/// not delivered), the oracle sees such a message arrive.
#[test]
fn deadline_doubts_sent_tokens() {
    let r = self_test(
        with_deadlines,
        |r| r.deadline_doubts_sent_tokens = false,
        &[ViolationKind::DeliveredAfterNotDelivered],
    );
    assert!(r.not_delivered > 0);
}

/// Deadlines during a one-way outage after datagram sizes changed (`deaf_paths.rs`): a
/// message that left as one whole TOKEN and was delivered is cut into fragments when the
/// sizes shrink (deaf schedule, black-hole fallback). With the rule off, giving it up
/// before every fragment left reports it not delivered, and the oracle sees it delivered.
#[test]
fn deadline_remembers_whole_copies() {
    let r = self_test_with(
        |seed| super::deaf_paths::deadlines_across_resize(seed, None),
        |r| r.deadline_remembers_whole_copies = false,
        &[ViolationKind::DeliveredAfterNotDelivered],
    );
    assert!(r.not_delivered > 0);
}

/// A clean run with deadlines reports both verdicts.
#[test]
fn deadlines_give_both_verdicts() {
    let mut sc = with_deadlines(3);
    // A small window, so that messages also wait in the queue (no copy left) at deadlines.
    sc.config.flow.envelope_target = 16;
    sc.config.flow.envelope_low = 8;
    sc.config.flow.window = 32;
    let r = Sim::new(sc).run();
    assert!(r.ok(), "{}", r.describe_failure());
    assert!(r.not_delivered > 0 && r.expired_in_doubt > 0, "{r:?}");
}

/// Many nodes, room for two sources per receiver, messages now and then: records whose
/// sources went quiet for a while are evicted to make room while their sources still hold
/// envelopes, and tokens sent into them later must get RETRY (never delivered), not ACK.
fn crowded(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.nodes = 8;
    sc.config.limits.max_receiver_records = 2;
    sc.link.dup_max_delay = Duration::from_secs(2);
    sc.workload.pattern = exon_sim::Pattern::ManyToMany;
    sc.workload.burst = 2;
    sc.workload.interval = Duration::from_millis(150);
    sc.workload.messages = 400;
    sc
}

#[test]
fn remember_evicted_slots() {
    let bad = self_test(
        crowded,
        |r| r.remember_evicted_slots = false,
        &[ViolationKind::AckWithoutDelivery],
    );
    assert!(bad.messages > 0);
}

/// 24 restarts with each node's clock on a simulated disk (syncs of 5 ms, torn writes), and
/// a small clock block, so that marks are written often and crashes fall between a write
/// and its sync.
fn on_disk(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.faults = (0..24)
        .map(|k| Fault {
            at: Duration::from_millis(60 + 41 * k + 7 * (seed % 5)),
            kind: FaultKind::Restart {
                node: (k % 2) as usize,
                down: Duration::from_millis(3),
                keep_clock: true,
            },
        })
        .collect();
    sc.config.clock_block = 8;
    sc.disk = Some(exon_sim::DiskModel {
        sync_latency: Duration::from_millis(5),
        torn_writes: true,
    });
    sc
}

/// Crashes between a clock write and its sync, and torn clock records, leave exactly-once
/// intact: the node uses no value before its mark is synced, and recovery reads only whole,
/// checksummed records. (Using values before the sync, `Rules::clock_waits_for_store` off,
/// is shown to duplicate in `exon/tests/core/rules.rs`: here it needs a replay that meets a
/// reused incarnation, which 64 seeds of this scenario did not draw.)
#[test]
fn rule8_clock_on_a_crashing_disk_is_clean() {
    let (mut lost, mut torn) = (0, 0);
    // Seeds until both kinds of crash were drawn (a crash lands between a clock write and
    // its sync in about one seed of ten): every run is checked, and 64 seeds must draw both.
    for seed in 0..64 {
        if lost > 0 && torn > 0 && seed >= 8 {
            break;
        }
        let r = Sim::new(on_disk(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.restarts, 24);
        assert_eq!(r.messages, r.delivered + r.lost_by_restart);
        lost += r.crashes_losing_writes;
        torn += r.torn_tails_cut;
    }
    assert!(lost > 0, "some crash fell between a write and its sync");
    assert!(torn > 0, "some recovery cut a torn record");
}
