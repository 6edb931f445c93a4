//! Durable mode (`Scenario::durable`): every node journals its inbox and outbox on a
//! simulated disk that survives its crashes. Crashes of both sides, inside commits and
//! compactions and with torn writes, leave exactly-once intact: nothing in doubt, every
//! message reported stored acknowledged once, redeliveries only of what was never
//! acknowledged, and every journal empty at the end. Each journal rule switched off is
//! caught by the oracle; the same crashes without a journal leave messages in doubt.
//!
//! Then the faults of issue 42 (`docs/testing.md`): a new journal at a restart, durable mode
//! switched on at a restart (with `journal_covers_incarnations` off: a duplicate), a
//! directory restored from an older copy (without the wall-clock floor: messages
//! acknowledged undelivered), and a message given up followed by crashes of both sides
//! (with `journal_before_verdict` off: a duplicate).
//!
//! The runs in durable mode are ignored in debug builds while the core's
//! `State::live_bytes` underflows with overflow checks on (the first `core_bug_` test):
//! run them with `cargo test --release -p exon-sim --test sim durable`. The `core_bug_`
//! tests are the core defects the simulator found, ignored until they are fixed.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
use exon_sim::{
    DiskModel, Fault, FaultKind, JournalModel, Report, RestoreModel, Scenario, Sim, ViolationKind,
    Workload,
};

/// `crashes` crashes, alternating between the two nodes, spread over the first 1.2 s, each
/// down for a few milliseconds.
pub(crate) fn crashes(seed: u64, crashes: u64) -> Vec<Fault> {
    (0..crashes)
        .map(|k| Fault {
            at: Duration::from_millis(40 + 1200 * k / crashes + 3 * (seed % 7)),
            kind: FaultKind::Restart {
                node: ((k + seed) % 2) as usize,
                down: Duration::from_millis(2 + 5 * (k % 3)),
                keep_clock: true,
            },
        })
        .collect()
}

/// Two nodes streaming to each other over a lossy, duplicating, reordering network, the
/// applications taking deliveries 3 ms late (a crash loses what is in their buffer), eight
/// crashes, journals that sync in 3 ms, tear unsynced writes and compact every 4 KiB.
pub(crate) fn durable(seed: u64) -> Scenario {
    let mut sc = Scenario {
        seed,
        workload: Workload {
            messages: 600,
            burst: 16,
            interval: Duration::from_millis(2),
            ..Workload::default()
        },
        faults: crashes(seed, 8),
        settle: Duration::from_secs(60),
        take_delay: Duration::from_millis(3),
        disk: Some(DiskModel {
            sync_latency: Duration::from_millis(3),
            torn_writes: true,
        }),
        durable: Some(JournalModel {
            compact_after: 4096,
            ..JournalModel::default()
        }),
        ..Scenario::default()
    };
    sc.link.loss = 0.1;
    sc.link.dup = 0.1;
    sc.link.reorder = 0.1;
    sc.link.dup_max_delay = Duration::from_secs(2);
    sc
}

fn without(mut sc: Scenario, off: fn(&mut Rules)) -> Scenario {
    let mut rules = Rules::ALL;
    off(&mut rules);
    sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
    sc
}

/// Every kind of violation the run saw (not only among those kept).
fn kinds(r: &Report) -> Vec<ViolationKind> {
    r.violation_kinds.iter().map(|&(k, _)| k).collect()
}

/// Figures summed over a soak.
#[derive(Debug, Default)]
struct Totals {
    runs: u64,
    crashes: u64,
    messages: u64,
    stored: u64,
    redeliveries: u64,
    commits: u64,
    compactions: u64,
    journal_bytes_max: u64,
    mid_commit: u64,
    mid_compaction: u64,
    torn_bytes: u64,
    violations: u64,
}

impl Totals {
    fn add(&mut self, r: &Report) {
        self.runs += 1;
        self.crashes += u64::from(r.restarts);
        self.messages += r.messages;
        self.stored += r.stored;
        self.redeliveries += r.redeliveries;
        self.commits += r.journal_commits;
        self.compactions += r.compactions;
        self.journal_bytes_max = self.journal_bytes_max.max(r.journal_bytes_max);
        self.mid_commit += u64::from(r.crashes_mid_commit);
        self.mid_compaction += u64::from(r.crashes_mid_compaction);
        self.torn_bytes += r.journal_torn_bytes;
        self.violations += r.violation_count;
    }
}

/// Seeds of the soak: enough for crashes inside commits and compactions and torn tails.
const SOAK: std::ops::Range<u64> = 0..24;

#[test]
fn durable_soak_crashes_of_both_sides_are_clean() {
    let mut sum = Totals::default();
    for seed in SOAK {
        let r = Sim::new(durable(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.restarts, 8, "seed {seed}");
        assert_eq!(r.in_doubt, 0);
        // Every message is delivered, or was lost with its sender before it was stored.
        assert_eq!(r.messages, r.delivered + r.lost_by_restart, "seed {seed}");
        assert!(
            r.lost_by_restart <= r.messages - r.stored,
            "seed {seed}: {r}"
        );
        assert!(r.journal_commits > 0);
        sum.add(&r);
    }
    eprintln!("durable soak: {sum:?}");
    assert!(
        sum.redeliveries > 0,
        "some crash lost an application's buffer"
    );
    assert!(sum.compactions > 0 && sum.journal_bytes_max > 0);
    assert!(sum.mid_compaction > 0, "some crash cut a compaction");
    assert!(sum.torn_bytes > 0, "some recovery cut a torn tail");
}

/// The same crashes without journals: messages end in doubt (the durable result above
/// means something).
#[test]
fn without_journals_the_same_crashes_leave_messages_in_doubt() {
    let doubted: u64 = (0..4)
        .map(|seed| {
            let mut sc = durable(seed);
            sc.durable = None;
            let r = Sim::new(sc).run();
            assert!(r.ok(), "{}", r.describe_failure());
            r.in_doubt
        })
        .sum();
    assert!(doubted > 0, "no message ended in doubt");
}

/// Runs `make(seed)` with every rule on (must be clean), then with one journal rule off
/// (must show `kind`), for seeds from `seed` on until one shows it (at most 16: fixed, so
/// every run is reproducible, and more than one, so a change of the core's timing does not
/// hide the defect behind one unlucky schedule).
fn self_test(make: fn(u64) -> Scenario, seed: u64, off: fn(&mut Rules), kind: ViolationKind) {
    let mut missed = Vec::new();
    for seed in seed..seed + 16 {
        let good = Sim::new(make(seed)).run();
        assert!(good.ok(), "control run: {}", good.describe_failure());
        let bad = Sim::new(without(make(seed), off)).run();
        if kinds(&bad).contains(&kind) {
            return;
        }
        missed.push(format!("seed {seed}: {:?}: {bad}", kinds(&bad)));
    }
    panic!("{kind:?} not found: {missed:#?}");
}

/// [`durable`] with syncs slower than a round trip (30 ms): an ACK sent before its `Taken`
/// record is durable reaches the sender before a crash can undo the take.
fn slow_sync(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    sc.disk = Some(DiskModel {
        sync_latency: Duration::from_millis(30),
        torn_writes: true,
    });
    sc
}

#[test]
fn without_journal_before_delivery_a_receiver_crash_delivers_twice() {
    // Delivered before its record was durable: the restarted receiver delivers it again.
    // The layout the rule guards: the receiver journals the payload (`Delivered`).
    self_test(
        durable,
        1,
        |r| {
            r.deliver_from_senders_copy = false;
            r.journal_before_delivery = false;
        },
        ViolationKind::Duplicate,
    );
}

#[test]
fn without_journal_before_ack_an_acknowledged_message_is_redelivered() {
    // The layout the rule guards: the receiver journals the payload (`Delivered`), and a
    // restart hands out again what its lost `Taken` left untaken. (With one copy, a
    // `Handed` slot comes back only from the sender's copy, which the ACK let go.)
    self_test(
        slow_sync,
        0,
        |r| {
            r.journal_before_ack = false;
            r.deliver_from_senders_copy = false;
        },
        ViolationKind::RedeliveredAfterAck,
    );
}

#[test]
fn without_journal_before_token_a_sender_crash_delivers_twice() {
    // A token left before its slot was durable: the restarted sender sends the message in a
    // fresh slot.
    self_test(
        durable,
        20,
        |r| r.journal_before_token = false,
        ViolationKind::Duplicate,
    );
}

#[test]
fn without_early_token_waits_for_stored_a_sender_crash_delivers_twice() {
    // An early token handed over before its sender stored it: the sender crashed before
    // its sync and sends the message again (the application's new send, or a fresh slot).
    self_test(
        durable,
        0,
        |r| r.early_token_waits_for_stored = false,
        ViolationKind::Duplicate,
    );
}

#[test]
fn without_journal_before_verdict_a_verdict_is_reported_twice() {
    self_test(
        durable,
        2,
        |r| r.journal_before_verdict = false,
        ViolationKind::DoubleAck,
    );
}

/// [`durable`] with crashes inside commits of pending writes half of the time.
fn mid_commit(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    if let Some(d) = &mut sc.durable {
        d.crash_mid_commit = 0.5;
    }
    sc
}

/// Crashes inside commits (records durable that the node was never told of, torn tails):
/// at-most-once and the rest hold, and every verdict stored is reported (again, the same,
/// after a crash that came before its report was recorded).
#[test]
fn crashes_inside_commits_keep_at_most_once() {
    let mut sum = Totals::default();
    let mut repeated = 0;
    for seed in 0..8 {
        let r = Sim::new(mid_commit(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        repeated += r.repeated_verdicts;
        sum.add(&r);
    }
    eprintln!("crashes inside commits: {sum:?}, verdicts reported again: {repeated}");
    assert!(sum.mid_commit > 0 && sum.torn_bytes > 0, "{sum:?}");
}

/// Found here, fixed in the core: `State::apply` of a second `Assigned` record for a message
/// (a resend in a fresh slot) does not take the first one's bytes off `live_bytes`, and
/// `Resolved` then takes off the second one's: when its encoding is longer (a slot or
/// incarnation past a varint boundary), `live_bytes` underflows (a panic with overflow
/// checks, as in debug builds; a wrapped, huge count in release, which stops compactions by
/// growth). Seen in the simulator as `exon-sim --durable --messages 200 --restarts 6
/// --loss 0.1 --seed 1` panicking at `exon/src/proto/journal/state.rs:149`.
#[test]
fn state_live_bytes_after_a_reassignment() {
    use bytes::Bytes;
    use exon::proto::journal::{Entry, State};
    use exon::proto::{MsgId, NodeId};
    let id = MsgId(7);
    let mut s = State::new();
    s.apply(&Entry::Accepted {
        id,
        to: NodeId::from_const(2),
        payload: Bytes::from_static(b"payload").into(),
    });
    s.apply(&Entry::Assigned {
        id,
        rck: 1,
        slot: 5,
    });
    s.apply(&Entry::Assigned {
        id,
        rck: 1 << 20,
        slot: 1 << 30,
    });
    s.apply(&Entry::Resolved { id, verdict: None });
    assert!(s.is_empty());
    assert_eq!(s.live_bytes(), 0);
}

/// Seed of [`mid_commit`] that shows the lost verdict.
const SEED_VERDICT_LOST: u64 = 20;

/// Found here, fixed in the core (`Rules::report_stored_verdicts`): a crash after a commit
/// reached the disk and before the node was told (`handle_stored`) left a `Resolved`
/// record durable whose verdict was never reported; the restarted sender did not recover
/// the message, so its application, told it was stored, never heard its verdict
/// (`NotAcknowledged`). `Resolved` now keeps the verdict until a `Reported` record, and
/// the restarted node reports it.
#[test]
fn a_verdict_stored_and_not_reported_before_a_crash() {
    let r = Sim::new(mid_commit(SEED_VERDICT_LOST)).run();
    assert!(r.ok(), "{}", r.describe_failure());
}

/// With `report_stored_verdicts` off, the restarted node forgets the verdicts its journal
/// stored and it did not report: `NotAcknowledged`.
#[test]
fn without_report_stored_verdicts_a_stored_verdict_is_lost() {
    // From seed 0: with one copy of a payload the seed above no longer loses its verdict
    // with the rule off (seeds 4 and 6 do).
    self_test(
        mid_commit,
        0,
        |r| r.report_stored_verdicts = false,
        ViolationKind::NotAcknowledged,
    );
}

/// Found here, fixed in the core (a recovered token counts as sent): after crashes of both
/// sides, a restarted sender moves a recovered message whose slot
/// was delivered and taken to a fresh slot of the receiver's new incarnation, and it is
/// delivered twice, unflagged. Traced in `exon-sim --durable --messages 4000 --restarts 12
/// --loss 0.05 --dup 0.05 --reorder 0.05 --take-delay-ms 3 --disk-sync-us 3000 --seed 16`
/// (release build): node1 journals `Assigned` of its message 668 in slot (1281, 668) at
/// 23 ms and crashes at 49 ms (down 230 ms); node0 delivers it in that slot at 52 ms, takes
/// it (its `Taken` is durable before node0 crashes at 87 ms, down 94 ms); node1, back at
/// 279 ms, journals `Assigned` of 668 in (1048578, 1048774) at 302 ms, although node0 wrote
/// no `Confirmed` before (its archive still held the taken slot); node0 delivers it again at
/// 313 ms. Here: eight crashes, 30 ms syncs, seed 0.
#[test]
fn no_duplicate_after_crashes_of_both_sides() {
    let r = Sim::new(slow_sync(0)).run();
    assert!(r.ok(), "{}", r.describe_failure());
}

/// The soak at length: 200 seeds of [`durable`] (`cargo test --release -p exon-sim --test
/// sim durable_long_soak -- --ignored --nocapture`).
#[test]
#[ignore = "long: 200 seeds"]
fn durable_long_soak() {
    let mut sum = Totals::default();
    let mut failed = Vec::new();
    for seed in 0..200 {
        let r = Sim::new(durable(seed)).run();
        if !r.ok() {
            eprintln!("{}", r.describe_failure());
            failed.push(seed);
        }
        sum.add(&r);
    }
    eprintln!("durable long soak: {sum:?}, failed seeds: {failed:?}");
    assert!(failed.is_empty(), "failed seeds: {failed:?}");
}

/// [`durable`] where each crash also changes a byte of a synced journal record with
/// probability `p` (`JournalModel::damage`).
fn damaged_disks(seed: u64, p: f64) -> Scenario {
    let mut sc = durable(seed);
    if let Some(d) = &mut sc.durable {
        d.damage = p;
    }
    sc
}

/// Issue 42, item 5: synced journal records damaged at crashes (a changed byte in any
/// segment, the newest included, of a record another synced record follows). Every damage
/// is found at the next recovery (the journal reports it damaged: the sim checks each one,
/// `JournalError` otherwise), and no run without damage has a message in doubt.
#[test]
fn damaged_synced_records_are_always_found() {
    let (mut injected, mut found, mut runs_damaged) = (0, 0, 0);
    let mut kinds_seen = std::collections::BTreeMap::new();
    for seed in 0..24 {
        let r = Sim::new(damaged_disks(seed, 0.5)).run();
        for v in &r.violations {
            assert_ne!(v.kind, ViolationKind::JournalError, "seed {seed}: {v}");
            *kinds_seen.entry(format!("{:?}", v.kind)).or_insert(0u64) += 1;
        }
        assert!(
            r.journal_damaged >= r.journal_damage_injected.min(1),
            "seed {seed}: {r}"
        );
        if r.journal_damaged == 0 {
            assert_eq!(r.in_doubt, 0, "seed {seed}: doubt without damage: {r}");
            assert!(r.ok(), "{}", r.describe_failure());
        } else {
            runs_damaged += 1;
        }
        injected += r.journal_damage_injected;
        found += r.journal_damaged;
    }
    eprintln!(
        "damaged disks: {injected} damages injected, {found} recoveries found a journal \
         damaged, in {runs_damaged} runs; violations in those runs by kind: {kinds_seen:?}"
    );
    // Some damage falls in segments a crash or the recovery removed (obsolete ones).
    assert!(injected > 10 && found > injected / 2, "{injected} {found}");
}

/// The same without damage: the check of the test above does not fire on torn writes and
/// cut commits and compactions alone (no recovery reports a journal damaged).
#[test]
fn torn_writes_alone_are_never_damage() {
    for seed in 0..8 {
        let r = Sim::new(mid_commit(seed)).run();
        assert_eq!(r.journal_damaged, 0, "seed {seed}: {r}");
        assert_eq!(r.in_doubt, 0, "seed {seed}: {r}");
    }
}

/// The whole promise with damaged synced records: DOUBT and flagged redeliveries, never a
/// second unflagged delivery nor an acknowledgement of what was not delivered. A damaged
/// receiver answers DOUBT for what its lost records may have covered (and keeps doing so
/// after later restarts); a damaged sender reports every message it recovered in doubt
/// (its records of their newer slots or verdicts may be lost), and the oracle counts the
/// stored messages it never heard of again as in doubt (the application is told the
/// journal was damaged). With the sender's rule off (its recovered messages sent again)
/// this finds unflagged duplicates.
#[test]
fn damaged_synced_records_give_doubt_never_silence() {
    let mut failures = Vec::new();
    for seed in 0..24 {
        let r = Sim::new(damaged_disks(seed, 0.5)).run();
        if !r.ok() {
            failures.push(r.describe_failure());
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

// ----- directories lost, durable mode switched on, copies restored, deadlines -----------

/// [`durable`] where half of the restarts bring the host back with a new, empty journal
/// (its directory lost, its clock kept).
fn journal_loss(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    if let Some(d) = &mut sc.durable {
        d.journal_loss = 0.5;
    }
    sc
}

/// Seeds of the CI runs of the new classes: enough to hit each fault several times.
const NEW_CLASSES: std::ops::Range<u64> = 0..12;

/// Runs `make` over [`NEW_CLASSES`]: every run clean, and the totals.
fn clean_over_seeds(make: fn(u64) -> Scenario) -> (Totals, Vec<Report>) {
    let mut sum = Totals::default();
    let mut reports = Vec::new();
    for seed in NEW_CLASSES {
        let r = Sim::new(make(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.duplicates, 0, "seed {seed}");
        // In doubt only what a restart that could not vouch excused.
        assert!(r.in_doubt <= r.doubt_excused, "seed {seed}: {r}");
        sum.add(&r);
        reports.push(r);
    }
    (sum, reports)
}

/// A new journal at a restart: nothing delivered twice, nothing acknowledged undelivered,
/// and `InDoubt` only for messages to the host that were unsettled at that restart (the
/// oracle flags any other as `DurableInDoubt`).
#[test]
fn a_new_journal_at_a_restart_keeps_exactly_once() {
    let (sum, reports) = clean_over_seeds(journal_loss);
    let lost: u32 = reports.iter().map(|r| r.journals_lost).sum();
    let doubted: u64 = reports.iter().map(|r| r.in_doubt).sum();
    eprintln!("journal loss: {sum:?}, journals lost {lost}, in doubt {doubted}");
    assert!(lost >= NEW_CLASSES.end as u32, "journals lost: {lost}");
    assert!(doubted > 0, "no token of a lost incarnation came back");
}

/// With `journal_covers_incarnations` off, a receiver restarted with a new journal takes
/// the incarnations of its lost run for covered, answers LOST for slots it delivered, and
/// the message is delivered twice.
#[test]
fn without_journal_covers_incarnations_a_new_journal_delivers_twice() {
    self_test(
        journal_loss,
        0,
        |r| r.journal_covers_incarnations = false,
        ViolationKind::Duplicate,
    );
}

/// [`durable`] with durable mode switched on at each host's first restart: each runs
/// without a journal until then, and comes back with a new one, its clock kept.
fn switched_on(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    if let Some(d) = &mut sc.durable {
        d.switch_on = true;
    }
    sc
}

/// Durable mode switched on at a restart: the same expectations as a new journal.
#[test]
fn durable_mode_switched_on_at_a_restart_keeps_exactly_once() {
    let (sum, reports) = clean_over_seeds(switched_on);
    let on: u32 = reports.iter().map(|r| r.switched_on).sum();
    eprintln!("switched on: {sum:?}, hosts switched on {on}");
    assert_eq!(on, 2 * NEW_CLASSES.end as u32, "both hosts of every run");
}

/// With `journal_covers_incarnations` off, a node switched to durable mode takes the
/// incarnations of its run without a journal for covered: a duplicate.
#[test]
fn without_journal_covers_incarnations_switching_on_delivers_twice() {
    self_test(
        switched_on,
        0,
        |r| r.journal_covers_incarnations = false,
        ViolationKind::Duplicate,
    );
}

/// [`durable`] in a crash loop (16 crashes) where half of the restarts put back the copy of
/// the host's directory taken at an earlier restart, with the wall-clock floor at
/// `floor_rate` (0: none).
fn restored(seed: u64, floor_rate: u64) -> Scenario {
    let mut sc = durable(seed);
    sc.faults = crashes(seed, 16);
    if let Some(d) = &mut sc.durable {
        d.restore = Some(RestoreModel {
            probability: 0.5,
            floor_rate,
            forgets_deadlines: false,
        });
    }
    sc
}

/// Restored copies with the floor: no message acknowledged undelivered (silent loss), no
/// duplicate but the documented one (a message first delivered to the restored host after
/// its copy was taken, tolerated and counted in `restore_duplicates`) and the limit of
/// [`a_restored_sender_resends_what_its_copy_knew_no_slot_for`] (`ResentByRestoredSender`,
/// counted).
#[test]
fn restored_copies_with_the_floor_lose_nothing_silently() {
    let mut sum = Totals::default();
    let (mut restores, mut dups, mut redelivered, mut resent) = (0, 0, 0, 0);
    for seed in NEW_CLASSES {
        let r = Sim::new(restored(seed, RestoreModel::default().floor_rate)).run();
        for &(kind, n) in &r.violation_kinds {
            assert_eq!(
                kind,
                ViolationKind::ResentByRestoredSender,
                "{}",
                r.describe_failure()
            );
            resent += n;
        }
        assert!(r.in_doubt <= r.doubt_excused, "seed {seed}: {r}");
        restores += r.restored;
        dups += r.restore_duplicates;
        redelivered += r.restore_redeliveries;
        sum.add(&r);
    }
    eprintln!(
        "restored: {sum:?}, restores {restores}, tolerated duplicates {dups}, \
         tolerated redeliveries after ack {redelivered}, resent by a restored sender {resent}"
    );
    assert!(restores >= NEW_CLASSES.end as u32, "restores: {restores}");
    assert!(dups > 0, "no delivery after a copy was repeated");
}

/// A sender restored from an older copy of its directory sends again, in its old slot, a
/// message whose verdict came after the copy. Its receiver restarted since, so the slot's
/// incarnation is in its journal's coverage, and it forgot the delivery when the sender's
/// frontier passed the slot: it answers DOUBT there, not LOST
/// (`Rules::doubt_below_forgotten`), and the message is not delivered again. Seed 0: with
/// the rule off, `ResentByRestoredSender` at 371 ms, node0#128 (delivered at 31 ms,
/// acknowledged at 45 ms, then node0 restored from a copy of its first restart, before
/// 45 ms).
#[test]
fn a_restored_sender_gets_doubt_below_the_forgotten_frontier() {
    let r = Sim::new(restored(0, RestoreModel::default().floor_rate)).run();
    assert!(r.ok(), "{}", r.describe_failure());
}

/// [`a_restored_sender_gets_doubt_below_the_forgotten_frontier`] with the rule off: LOST,
/// the message goes again in a fresh slot and is delivered twice.
#[test]
fn without_doubt_below_forgotten_a_restored_sender_delivers_twice() {
    let sc = without(restored(0, RestoreModel::default().floor_rate), |r| {
        r.doubt_below_forgotten = false
    });
    let r = Sim::new(sc).run();
    assert!(
        kinds(&r).contains(&ViolationKind::ResentByRestoredSender),
        "{r}"
    );
}

/// Limit of restored copies (all rules on): a message unsettled in the copy and assigned a
/// slot only after it is sent by the restored sender in a fresh slot (the copy knows no
/// other), and its receiver, which cannot tell it from a new message, delivers it a second
/// time. `docs/durability.md` ("Restoring an old copy") says so. CLI: `exon-sim --durable
/// --messages 2000 --restarts 16 --loss 0.1 --dup 0.1 --reorder 0.1 --take-delay-ms 3
/// --disk-sync-us 3000 --restore 0.5 --seed 3` (node1#0 at 754 ms).
#[test]
#[ignore = "limit of restored copies: a message the copy knew no slot for is sent in a fresh one and delivered twice"]
fn a_restored_sender_resends_what_its_copy_knew_no_slot_for() {
    let r = Sim::new(restored(3, RestoreModel::default().floor_rate)).run();
    assert!(r.ok(), "{}", r.describe_failure());
}

/// Without the floor, a node restored from an old copy restarts from the copy's clock and
/// makes incarnations its lost run made: the oracle finds messages acknowledged and never
/// delivered.
#[test]
fn restored_copies_without_the_floor_lose_messages_silently() {
    let mut found = Vec::new();
    for seed in NEW_CLASSES {
        let r = Sim::new(restored(seed, 0)).run();
        let silent = r
            .violation_kinds
            .iter()
            .find(|(k, _)| *k == ViolationKind::AckWithoutDelivery)
            .map_or(0, |&(_, n)| n);
        found.push(silent);
    }
    eprintln!("acknowledged undelivered per seed, without the floor: {found:?}");
    assert!(found.iter().any(|&n| n > 0), "{found:?}");
}

/// [`durable`] with four background crashes, on a slow disk (60 ms syncs: a wide window
/// before a `Resolved` record is durable, in which the frontier moves on), with deadlines
/// of 200 ms and, after a third of the messages given up (16 at most), crashes of both
/// sides (the sender's often before its `Resolved` record is synced, the receiver's often
/// after the frontier reached it).
fn abandon_crashes(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    sc.faults = crashes(seed, 4);
    sc.disk = Some(DiskModel {
        sync_latency: Duration::from_millis(60),
        torn_writes: true,
    });
    sc.deadline = Some(Duration::from_millis(200));
    if let Some(d) = &mut sc.durable {
        d.abandon_crash = 0.3;
    }
    sc
}

/// Messages given up, then crashes of both sides: no message delivered twice, and no
/// verdict revoked (a deadline's verdict is reported once its `Resolved` record is
/// durable; a crash before then recovers the message, and the restarted node decides its
/// verdict).
#[test]
fn abandon_then_crashes_of_both_sides_deliver_once() {
    let mut sum = Totals::default();
    let (mut crashes, mut given_up, mut revoked) = (0, 0, 0);
    for seed in NEW_CLASSES {
        let r = Sim::new(abandon_crashes(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.duplicates, 0);
        crashes += r.abandon_crashes;
        given_up += r.not_delivered + r.expired_in_doubt;
        revoked += r.revoked_verdicts;
        sum.add(&r);
    }
    assert_eq!(revoked, 0);
    eprintln!(
        "abandon crashes: {sum:?}, crash pairs {crashes}, given up {given_up}, verdicts revoked {revoked}"
    );
    // Given up counts the verdicts reported: here the crashes after a message given up
    // mostly come before its record is synced (60 ms syncs), and the message recovered is
    // then delivered and acknowledged (with the rule off, every one was revoked).
    assert!(crashes > 0, "{crashes} {given_up}");
}

/// With `deadline_verdict_after_record` off, a deadline's verdict is reported before its
/// `Resolved` record is durable; a crash then recovers the message and sends it again: the
/// verdict the application heard is revoked.
#[test]
fn without_deadline_verdict_after_record_a_verdict_is_revoked() {
    self_test(
        abandon_crashes,
        0,
        |r| r.deadline_verdict_after_record = false,
        ViolationKind::VerdictRevoked,
    );
}

/// With `journal_before_verdict` off, the frontier passes a slot given up before its
/// `Resolved` record is durable; a sender crash recovers the message in that slot, the
/// receiver has forgotten it, and it is delivered again: twice when the receiver
/// journals payloads (`deliver_from_senders_copy` off), after its `NotDelivered` verdict
/// with one copy (the receiver's record of the first hand-over went with its
/// incarnation). The receiver's `doubt_below_forgotten` is off too: it would answer DOUBT
/// below the frontier past which it forgot, and hide the sender's defect.
#[test]
fn without_journal_before_verdict_abandon_then_crashes_deliver_twice() {
    self_test(
        abandon_crashes,
        0,
        |r| {
            r.journal_before_verdict = false;
            r.doubt_below_forgotten = false;
        },
        ViolationKind::DeliveredAfterNotDelivered,
    );
    self_test(
        abandon_crashes,
        0,
        |r| {
            r.journal_before_verdict = false;
            r.doubt_below_forgotten = false;
            r.deliver_from_senders_copy = false;
        },
        ViolationKind::Duplicate,
    );
}

/// [`durable`] with keyed sends from an outbox (`JournalModel::keyed`): each application
/// sends every message under its sequence number, keeps it until its verdict, and sends
/// again, after each of its restarts, what it holds no verdict for.
fn keyed(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    if let Some(d) = sc.durable.as_mut() {
        d.keyed = true;
    }
    sc
}

/// Issue 44, item 1: with keyed sends from an outbox, crashes of both sides at any moment
/// (torn writes, crashes inside commits) lose nothing and deliver nothing twice: every
/// message is delivered exactly once, none excused by a restart.
#[test]
fn keyed_sends_from_an_outbox_deliver_each_message_once_through_crashes() {
    let (mut resent, mut refused) = (0, 0);
    for seed in SOAK {
        let mut sc = keyed(seed);
        if let Some(d) = sc.durable.as_mut() {
            d.crash_mid_commit = 0.2;
        }
        let r = Sim::new(sc).run();
        assert!(r.ok(), "{}", r.describe_failure());
        assert_eq!(r.restarts, 8, "seed {seed}");
        assert_eq!(r.lost_by_restart, 0, "seed {seed}: nothing excused");
        assert_eq!(r.delivered, r.messages, "seed {seed}: {r}");
        let (a, b) = r.keyed.expect("keyed figures");
        resent += a;
        refused += b;
    }
    eprintln!("keyed soak: {resent} sent again and accepted, {refused} refused as accepted");
    assert!(resent > 0 && refused > 0, "the restarts hit both cases");
}

/// Self-test: the same outbox sent again with plain sends after a restart (the sender's
/// gap) delivers messages twice, and the oracle says so.
#[test]
fn an_outbox_sent_again_without_keys_delivers_twice() {
    let mut found = 0;
    for seed in SOAK {
        let mut sc = keyed(seed);
        if let Some(d) = sc.durable.as_mut() {
            d.resend_unkeyed = true;
        }
        let r = Sim::new(sc).run();
        found += u64::from(kinds(&r).contains(&ViolationKind::Duplicate));
    }
    assert!(found > 0, "no seed showed the sender's gap");
}

#[test]
fn without_journal_before_delivery_one_copy_hands_over_what_a_crash_forgets() {
    // One copy (`deliver_from_senders_copy`): handed over before its `Handed` record was
    // durable; after the crash the slot is unknown (LOST), and the message comes again
    // unflagged in a fresh slot.
    self_test(
        slow_sync,
        0,
        |r| r.journal_before_delivery = false,
        ViolationKind::Duplicate,
    );
}
