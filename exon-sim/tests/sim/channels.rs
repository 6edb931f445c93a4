//! Ordered channels (`Scenario::channels`): senders number each channel's messages with
//! `exon::ordered::Sequencer` and replace those given up by gaps; receivers reorder with
//! `exon::ordered::Reorder`, leaving messages that arrive ahead of their turn untaken. The
//! oracle checks that each flow's numbers reach the application strictly in order, once,
//! as the message or its gap; that a message told not delivered is never released and an
//! acknowledged one was released as itself; that a receiver never holds a window's worth
//! out of order; that no flow stays blocked after healing; and that plain messages mixed
//! in keep exactly-once. With each rule of the ordered flows switched off in the channel
//! driver, the oracle catches the breach.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
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
        sum.add(&c);
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

/// [`lossy`] with nodes whose windows differ: node 0 receives with a window of 2, node 1
/// with 16, node 2 with 64 (and each sends with its own), so most flows join a sender's
/// larger window to a receiver's smaller one, as in issue 42 (item 3). More messages, so
/// that flows run long past their first window.
fn unequal_windows(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.workload.messages = 400;
    if let Some(m) = sc.channels.as_mut() {
        m.windows = vec![2, 16, 64];
    }
    sc
}

/// Unequal windows over many seeds: every acknowledged message is released to its
/// receiver's application in order (the oracle's `ChannelAckedNotReleased` and
/// `ChannelOrder`), every number is released, and each receiver holds less than its own
/// window (`ChannelHeldOverWindow`, checked against the receiver's window).
#[test]
fn unequal_windows_release_every_acknowledged_message_in_order() {
    let c = soak(unequal_windows, 0..12);
    assert!(c.held > 0, "nothing ever arrived out of order: {c:?}");
    assert!(c.max_held < 64, "{c:?}");
}

/// [`unequal_windows`] with deadlines in partitions: gaps too.
fn unequal_windows_with_deadlines(seed: u64) -> Scenario {
    let mut sc = with_deadlines(seed);
    if let Some(m) = sc.channels.as_mut() {
        m.windows = vec![2, 16, 64];
    }
    sc
}

#[test]
fn unequal_windows_with_deadlines_keep_every_flow_in_order() {
    let c = soak(unequal_windows_with_deadlines, 0..6);
    assert!(c.gaps > 0, "no message was given up: {c:?}");
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

/// The defect of issue 42 (item 3): no window advertised, and a receiver that takes and
/// drops what lies four of its windows ahead. A sender with a larger window has messages
/// acknowledged that never reach the application.
#[test]
fn without_advertised_windows_and_holding_acknowledged_messages_are_dropped() {
    self_test(
        unequal_windows,
        0..6,
        |m| {
            m.advertise = false;
            m.hold_beyond_window = false;
        },
        ViolationKind::ChannelAckedNotReleased,
    );
}

/// Without the advertisement alone, nothing acknowledged is lost (the receiver holds what
/// is beyond its window untaken), but a receiver holds more than its own window allows.
#[test]
fn without_advertised_windows_a_receiver_holds_beyond_its_window() {
    self_test(
        unequal_windows,
        0..6,
        |m| m.advertise = false,
        ViolationKind::ChannelHeldOverWindow,
    );
    for seed in 0..3 {
        let mut sc = unequal_windows(seed);
        if let Some(m) = sc.channels.as_mut() {
            m.advertise = false;
        }
        let r = Sim::new(sc).run();
        assert!(
            !kinds(&r).contains(&ViolationKind::ChannelAckedNotReleased),
            "{}",
            r.describe_failure()
        );
    }
}

/// Without holding alone, the advertised windows keep senders within their receivers'
/// windows: nothing comes four windows ahead, and the run is clean.
#[test]
fn advertised_windows_alone_keep_senders_within_the_receivers_window() {
    for seed in 0..3 {
        let mut sc = unequal_windows(seed);
        if let Some(m) = sc.channels.as_mut() {
            m.hold_beyond_window = false;
        }
        let r = Sim::new(sc).run();
        assert!(r.ok(), "{}", r.describe_failure());
    }
}

#[test]
fn without_the_first_message_alone_a_later_one_is_taken_for_an_old_run() {
    // Number 1 of a run overtakes number 0 (reordering): the receiver, not knowing the
    // run, takes it for a late message of an old run and hands it over out of the order
    // (as the endpoint does, `Kind::Unordered`), though neither end restarted.
    self_test(
        lossy,
        0..6,
        |m| m.first_alone = false,
        ViolationKind::ChannelOrder,
    );
}

/// Durable channels (issue 44): the durable soak's scenario (two nodes journaling on disks
/// that sync in 3 ms and tear unsynced writes, eight crashes alternating between them, a
/// lossy, duplicating, reordering network) with crashes inside one commit in five, the
/// applications sending to each other on four channels. Their flows keep their positions
/// in the journal's marks and go on across the crashes.
fn durable_channels(seed: u64) -> Scenario {
    let mut sc = crate::durable::durable(seed);
    sc.max_events = 3_000_000;
    if let Some(d) = sc.durable.as_mut() {
        d.crash_mid_commit = 0.2;
    }
    sc.channels = Some(ChannelModel {
        channels: 4,
        ..ChannelModel::default()
    });
    sc
}

/// [`durable_channels`] with deadlines (200 ms) in partitions, each message given up
/// followed with probability 0.3 by crashes of both sides (often before the verdict's
/// record, or the gap that replaces it, is synced).
fn durable_channels_given_up(seed: u64) -> Scenario {
    let mut sc = durable_channels(seed);
    // The partitions of three nodes, between the two.
    let two = |x: usize| x.min(1);
    sc.faults
        .extend(partitions(seed, 3, 250).into_iter().map(|f| {
            let kind = match f.kind {
                FaultKind::Partition { a, b, one_way } => FaultKind::Partition {
                    a: two(a),
                    b: two(b),
                    one_way,
                },
                FaultKind::Hold { a, b } => FaultKind::Hold {
                    a: two(a),
                    b: two(b),
                },
                FaultKind::Heal { a, b, one_way } => FaultKind::Heal {
                    a: two(a),
                    b: two(b),
                    one_way,
                },
                k => k,
            };
            Fault { kind, ..f }
        }));
    sc.faults.sort_by_key(|f| f.at);
    sc.deadline = Some(Duration::from_millis(200));
    if let Some(d) = sc.durable.as_mut() {
        d.abandon_crash = 0.3;
    }
    sc
}

/// Runs `make` over `seeds` in durable mode, each clean and every number of every flow
/// released (as its message or its gap) or lost with its sender before it was sent;
/// returns the counters summed and the crashes.
fn durable_soak(make: fn(u64) -> Scenario, seeds: std::ops::Range<u64>) -> (ChannelCounts, u64) {
    let mut sum = ChannelCounts::default();
    let mut crashes = 0;
    for seed in seeds {
        let r = Sim::new(make(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.in_doubt, 0, "seed {seed}");
        let c = counts(&r);
        assert_eq!(
            c.released + c.gaps + c.lost_with_sender,
            c.sent,
            "every number released: {r}"
        );
        crashes += u64::from(r.restarts);
        sum.add(&c);
    }
    println!("{crashes} crashes, {sum:?}");
    (sum, crashes)
}

/// Crashes of both sides, torn writes and crashes inside commits: every flow is released
/// in order to its end, each number's effect once (numbers released before a receiver's
/// crash and not taken come again flagged, and change nothing), and a sender's numbers
/// lost with its crash before they were sent are given out again.
#[test]
fn durable_channels_go_on_across_crashes_of_both_sides() {
    let (c, crashes) = durable_soak(durable_channels, 0..16);
    assert!(crashes >= 16 * 6, "{crashes} crashes");
    assert!(c.held > 0, "nothing ever arrived out of order: {c:?}");
    assert!(
        c.repeated > 0,
        "no receiver crashed with numbers not taken: {c:?}"
    );
    assert!(c.lost_with_sender > 0, "no sender lost a number: {c:?}");
}

/// The same with messages given up and crashes right after: gaps, and gaps a restarted
/// sender sends for the numbers it no longer knows the fate of.
#[test]
fn durable_channels_fill_the_numbers_given_up_across_crashes() {
    let (c, _) = durable_soak(durable_channels_given_up, 0..12);
    assert!(c.gaps > 0, "no message was given up: {c:?}");
    assert!(c.owed_gaps > 0, "no restarted sender owed a gap: {c:?}");
}

/// [`durable_channels`] whose receivers ask about stalled runs often (every 150 ms), over
/// a link that loses one datagram in five: questions given up at the next look, whose
/// durable verdicts wait for their records, are the channel application's own notes, no
/// message of the workload's (the simulator once took them for messages never sent).
fn durable_channels_asking(seed: u64) -> Scenario {
    let mut sc = durable_channels(seed);
    sc.link.loss = 0.2;
    if let Some(m) = sc.channels.as_mut() {
        m.stall_query_after = Some(Duration::from_millis(150));
    }
    sc
}

#[test]
fn durable_questions_given_up_are_no_messages_of_the_workload() {
    let (c, _) = durable_soak(durable_channels_asking, 0..8);
    assert!(c.held > 0, "nothing ever arrived out of order: {c:?}");
}

/// [`durable_channels_given_up`] with every crash inside a commit when one is pending
/// (the disk fails part way through it, tearing what it wrote), at times off the
/// millisecond grid of the workload.
fn torn_commits(seed: u64) -> Scenario {
    let mut sc = durable_channels_given_up(seed);
    if let Some(d) = sc.durable.as_mut() {
        d.crash_mid_commit = 1.0;
    }
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for f in &mut sc.faults {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f.at += Duration::from_micros(x % 1000);
    }
    sc.faults.sort_by_key(|f| f.at);
    sc
}

/// Every crash inside a commit, tearing what it wrote: a sender's position is never kept
/// without its message, nor a receiver's without its take.
#[test]
fn durable_channels_keep_their_positions_through_torn_commits() {
    let (c, crashes) = durable_soak(torn_commits, 0..24);
    assert!(crashes >= 24 * 10, "{crashes} crashes");
    assert!(c.lost_with_sender > 0, "no sender lost a number: {c:?}");
    assert!(c.owed_gaps > 0, "no restarted sender owed a gap: {c:?}");
}

/// The node rules to switch off, and the channel rules.
type Off = (fn(&mut Rules), fn(&mut ChannelModel));

/// Runs `make` over `seeds` with the node rules `off` and the channel rules `model_off`
/// until one shows a violation of one of `kinds` (the same seed clean with every rule
/// on); fails if none does.
fn durable_self_test(
    make: fn(u64) -> Scenario,
    seeds: std::ops::Range<u64>,
    (off, model_off): Off,
    kinds: &[ViolationKind],
) {
    let change = |sc: &mut Scenario| {
        if let Some(m) = sc.channels.as_mut() {
            model_off(m);
        }
    };
    rules_off_self_test(make, seeds, off, &change, kinds);
}

/// Runs `make` over `seeds` with the node rules `off` and the scenario changed by `change`
/// until one shows a violation of one of `kinds` (the same seed clean with every rule on
/// and unchanged); fails if none does.
pub(crate) fn rules_off_self_test(
    make: fn(u64) -> Scenario,
    seeds: std::ops::Range<u64>,
    off: fn(&mut Rules),
    change: &dyn Fn(&mut Scenario),
    kinds: &[ViolationKind],
) {
    for seed in seeds.clone() {
        let mut sc = make(seed);
        let mut rules = Rules::ALL;
        off(&mut rules);
        sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
        sc.max_events = 1_000_000;
        change(&mut sc);
        let bad = Sim::new(sc).run();
        let seen: Vec<_> = bad.violation_kinds.iter().map(|&(k, _)| k).collect();
        if !seen.iter().any(|k| kinds.contains(k)) {
            continue;
        }
        let good = Sim::new(make(seed)).run();
        assert!(good.ok(), "{}", good.describe_failure());
        println!("seed {seed}, rule off: {:?}\n{bad}", bad.violations.first());
        return;
    }
    panic!("none of {kinds:?} in any seed of {seeds:?}");
}

/// `Rules::mark_in_one_record` off: the mark is written in a record of its own before
/// the message's, and a crash between them keeps a sender's position without its
/// message: its next message skips the number (or a gap fills a number no message was
/// sent under).
#[test]
fn without_mark_in_one_record_a_restarted_sender_skips_a_number() {
    durable_self_test(
        torn_commits,
        0..200,
        (|r| r.mark_in_one_record = false, |_| {}),
        &[ViolationKind::ChannelOrder, ViolationKind::ChannelBlocked],
    );
}

/// `Rules::durable_flows` off: the hosts keep no positions and start their flows over
/// after a restart (a new run for a restarted sender; a restarted receiver releases its
/// senders' runs out of order): flows stop short, or have messages acknowledged that were
/// never released in order.
#[test]
fn without_durable_flows_a_restart_breaks_the_order() {
    durable_self_test(
        durable_channels_given_up,
        0..8,
        (|r| r.durable_flows = false, |_| {}),
        &[
            ViolationKind::ChannelBlocked,
            ViolationKind::ChannelAckedNotReleased,
        ],
    );
}

/// Without the gaps a restarted sender owes (as the endpoint resumes its channels at
/// 2b21b29): a message given up whose gap a crash lost is taken as settled, and its
/// receiver waits for it forever (or, for number 0, releases the rest of the run out of
/// order).
#[test]
fn without_owed_gaps_a_number_given_up_before_a_crash_is_never_filled() {
    durable_self_test(
        durable_channels_given_up,
        0..8,
        (|_| {}, |m| m.owed_gaps = false),
        &[
            ViolationKind::ChannelBlocked,
            ViolationKind::ChannelAckedNotReleased,
            ViolationKind::ChannelHeldOverWindow,
        ],
    );
}

/// The owed gaps sent only when the application sends on the channel again (as the
/// endpoint at 468cc46: `OrderedShared::channel` calls `FlowOut::send_owed_gaps`): a
/// sender that restarts after its last message on a channel never sends them, and its
/// receiver waits forever (seed 22 before wire version 4's smaller headers; none of 0 to 79
/// since, seed 104 the first of 80 on).
#[test]
fn owed_gaps_sent_when_the_channel_is_used_again_leave_a_receiver_waiting() {
    durable_self_test(
        durable_channels_given_up,
        104..105,
        (|_| {}, |m| m.owed_gaps_at_restart = false),
        &[ViolationKind::ChannelBlocked],
    );
}

/// `Rules::senders_copy_only_when_kept` off: a durable sender says it keeps every message
/// until the ACK, its channels' too, so its receiver journals no payload for them. A channel
/// message handed over and not taken before the receiver crashed, and given up by its
/// sender at its deadline, is gone; the gap sent in its place is released after the message
/// was (`ChannelOrder`; found with `exon-sim --durable --channels 4 --deadline-ms 300
/// --abandon-crash 0.2 --seed 24`).
#[test]
fn without_receivers_copies_of_flow_messages_a_given_up_message_is_released_twice() {
    durable_self_test(
        durable_channels_given_up,
        0..40,
        (|r| r.senders_copy_only_when_kept = false, |_| {}),
        &[ViolationKind::ChannelOrder],
    );
}
