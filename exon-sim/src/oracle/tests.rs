//! Unit tests of the oracle: each check on hand-made sequences of events.

use super::*;
use crate::workload::write_payload;

fn payload(key: MsgKey) -> Vec<u8> {
    let mut b = Vec::new();
    write_payload(&mut b, key, Kind::Data, 20);
    b
}

fn kinds(o: &Oracle) -> Vec<ViolationKind> {
    o.violations().iter().map(|v| v.kind).collect()
}

#[test]
fn a_clean_exchange_passes() {
    let mut o = Oracle::new(2);
    let k = o.on_submit(0, 1, 0);
    assert!(o.on_delivered(1, 0, &payload(k), 5).is_some());
    assert!(o.on_taken(1, &payload(k), 6).is_some());
    o.on_acked(k, 10);
    o.finish(20);
    assert_eq!(o.violation_count(), 0);
    assert_eq!((o.delivered, o.acked, o.lost), (1, 1, 0));
}

#[test]
fn every_kind_of_violation_is_caught() {
    let mut o = Oracle::new(3);
    let k = o.on_submit(0, 1, 0);
    o.on_delivered(1, 0, &payload(k), 1);
    o.on_taken(1, &payload(k), 1);
    o.on_delivered(1, 0, &payload(k), 2);
    assert_eq!(kinds(&o), [ViolationKind::Duplicate]);
    let never = MsgKey { sender: 0, seq: 9 };
    o.on_delivered(1, 0, &payload(never), 3);
    let k2 = o.on_submit(0, 1, 0);
    o.on_delivered(2, 0, &payload(k2), 3);
    o.on_acked(k2, 4);
    o.on_acked(k, 5);
    o.on_acked(k, 6);
    o.on_in_doubt(k, 7);
    let k3 = o.on_submit(1, 0, 0);
    o.finish(10);
    assert_eq!(
        kinds(&o),
        [
            ViolationKind::Duplicate,
            ViolationKind::NeverSent,
            ViolationKind::Misdelivered,
            ViolationKind::AckWithoutDelivery,
            ViolationKind::DoubleAck,
            ViolationKind::DoubleAck,
            ViolationKind::Lost,
            ViolationKind::Lost,
        ]
    );
    assert!(o.violations()[0].detail.contains("delivered 2x"));
    assert_eq!(o.violations()[7].key, Some(k3));
}

#[test]
fn restarts_excuse_losses_but_report_them() {
    let mut o = Oracle::new(2);
    let a = o.on_submit(0, 1, 0);
    let b = o.on_submit(0, 1, 0);
    let d = o.on_submit(1, 0, 0);
    o.on_restart(1);
    let c = o.on_submit(0, 1, 0);
    o.on_in_doubt(a, 5);
    o.on_delivered(1, 0, &payload(b), 7);
    o.on_taken(1, &payload(b), 7);
    o.on_in_doubt(b, 8);
    o.on_delivered(1, 0, &payload(c), 9);
    o.on_taken(1, &payload(c), 9);
    o.on_acked(c, 9);
    o.finish(10);
    assert_eq!(o.violation_count(), 0, "{:?}", o.violations());
    // a: in doubt, never delivered; d: its sender restarted before it was settled.
    assert_eq!(o.lost_by_restart, 2);
    assert_eq!(o.in_doubt, 2);
    let _ = d;
}

#[test]
fn acknowledged_must_mean_taken() {
    let mut o = Oracle::new(2);
    let a = o.on_submit(0, 1, 0);
    let b = o.on_submit(0, 1, 0);
    o.on_delivered(1, 0, &payload(a), 1);
    o.on_delivered(1, 0, &payload(b), 1);
    // The receiver's application crashed with both in its buffer.
    o.on_restart(1);
    o.on_acked(a, 5);
    o.on_in_doubt(b, 5);
    o.finish(10);
    assert_eq!(
        kinds(&o),
        [ViolationKind::AckWithoutTake, ViolationKind::Lost]
    );
    assert_eq!(o.violations()[0].key, Some(a));
    assert_eq!(o.lost_by_restart, 1);
}

#[test]
fn not_delivered_must_never_arrive() {
    let mut o = Oracle::new(2);
    let a = o.on_submit(0, 1, 0);
    let b = o.on_submit(0, 1, 0);
    o.on_abandoned(a, true, 5);
    o.on_abandoned(b, false, 5);
    o.on_delivered(1, 0, &payload(a), 6);
    o.finish(10);
    assert_eq!(kinds(&o), [ViolationKind::DeliveredAfterNotDelivered]);
    assert_eq!((o.not_delivered, o.expired_in_doubt, o.lost), (1, 1, 0));
}

/// The other order (the deadline-after-resize class): delivered and taken, its ACK lost,
/// then given up and told not delivered. And a message sent again after it was delivered
/// (a RETRY or LOST obeyed wrongly) and delivered a second time.
#[test]
fn not_delivered_after_delivery_and_a_resend_delivered_twice_are_caught() {
    let mut o = Oracle::new(2);
    let a = o.on_submit(0, 1, 0);
    let b = o.on_submit(0, 1, 0);
    for k in [a, b] {
        assert!(o.on_delivered(1, 0, &payload(k), 1).is_some());
        assert!(o.on_taken(1, &payload(k), 2).is_some());
    }
    o.on_abandoned(a, true, 5);
    assert_eq!(kinds(&o), [ViolationKind::DeliveredAfterNotDelivered]);
    assert!(o.on_delivered(1, 0, &payload(b), 6).is_none());
    o.on_acked(b, 7);
    o.finish(10);
    assert_eq!(
        kinds(&o),
        [
            ViolationKind::DeliveredAfterNotDelivered,
            ViolationKind::Duplicate
        ]
    );
    assert_eq!(o.violations()[1].key, Some(b));
}

#[test]
fn restarts_excuse_nothing_else() {
    let mut o = Oracle::new(2);
    let a = o.on_submit(0, 1, 0);
    let b = o.on_submit(0, 1, 0);
    o.on_restart(1);
    let c = o.on_submit(1, 0, 0);
    // Acknowledged without delivery: a violation even after the receiver restarted.
    o.on_acked(a, 5);
    // In doubt although its receiver (node 0) never restarted.
    o.on_in_doubt(c, 6);
    // b: never settled while its sender lives.
    o.finish(10);
    assert_eq!(
        kinds(&o),
        [
            ViolationKind::AckWithoutDelivery,
            ViolationKind::UnexplainedDoubt,
            ViolationKind::Lost,
            ViolationKind::Lost,
        ]
    );
    assert_eq!(o.violations()[2].key, Some(a));
    assert_eq!(o.violations()[3].key, Some(b));
}

#[test]
fn a_doubt_is_explained_by_an_eviction_only_without_a_journal() {
    // Without a journal: after its receiver evicted a record it delivered into, a message
    // may end in doubt (the record's slots it can no longer tell apart).
    let mut o = Oracle::new(2);
    let a = o.on_submit(0, 1, 0);
    o.on_evicted_proven(1, false);
    o.on_in_doubt(a, 5);
    o.finish(10);
    assert_eq!(kinds(&o), []);
    // A node evicting does not explain doubts of messages to another.
    let mut o = Oracle::new(3);
    let b = o.on_submit(0, 2, 0);
    o.on_evicted_proven(1, false);
    o.on_in_doubt(b, 5);
    o.finish(10);
    assert_eq!(kinds(&o), [ViolationKind::UnexplainedDoubt]);
    // A durable receiver answers from its journal: an eviction explains nothing.
    let mut o = Oracle::new(2);
    o.set_durable();
    let c = o.on_submit(0, 1, 0);
    o.on_evicted_proven(1, true);
    o.on_in_doubt(c, 5);
    assert!(kinds(&o).contains(&ViolationKind::UnexplainedDoubt));
    assert!(kinds(&o).contains(&ViolationKind::DurableInDoubt));
    // Durable mode, a receiver still without a journal (switched on only at its restart):
    // its eviction explains a doubt, as without a journal, until that restart.
    let mut o = Oracle::new(2);
    o.set_durable();
    let d = o.on_submit(0, 1, 0);
    o.on_evicted_proven(1, false);
    o.on_in_doubt(d, 5);
    assert_eq!(kinds(&o), []);
    o.on_unvouched_restart(1, 6);
    o.on_restart(1);
    // After it, the eviction explains nothing: a message sent after the first DOUBT since
    // the restart (which drops the old envelopes) and reported in doubt is a violation.
    let e = o.on_submit(0, 1, 7);
    o.on_in_doubt(e, 8);
    assert_eq!(kinds(&o), []);
    let f = o.on_submit(0, 1, 9);
    o.on_in_doubt(f, 10);
    assert_eq!(kinds(&o), [ViolationKind::DurableInDoubt]);
}

/// Campaign 143: a sender holds envelopes of two incarnations its receiver's unvouched
/// restart lost; the first DOUBT, for the older one, drops only that one's, and a message
/// sent after it goes in the newer one's and is told in doubt with the old messages there,
/// later. Excused while sent no later than a report in doubt of a message that may have
/// been in such an envelope; one sent after the last of those is a violation.
#[test]
fn a_message_sent_into_a_newer_lost_incarnation_may_end_in_doubt() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let old = o.on_submit(0, 1, 0);
    let older = o.on_submit(0, 1, 0);
    o.on_restart(1);
    o.on_unvouched_restart(1, 6);
    o.on_in_doubt(older, 8); // the first DOUBT: the older incarnation's
    let x = o.on_submit(0, 1, 9); // into the newer lost incarnation's envelope
    o.on_in_doubt(old, 12); // its DOUBT
    o.on_in_doubt(x, 12);
    assert_eq!(kinds(&o), []);
    let y = o.on_submit(0, 1, 13);
    o.on_in_doubt(y, 14);
    assert_eq!(kinds(&o), [ViolationKind::DurableInDoubt]);
}

fn delivered(o: &mut Oracle, k: MsgKey, redelivery: bool, t: u64) -> bool {
    o.on_handover(1, 0, &payload(k), redelivery, t).is_some()
}

#[test]
fn durable_redeliveries_are_allowed_until_the_sender_is_told() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let a = o.on_submit(0, 1, 0);
    let b = o.on_submit(0, 1, 0);
    o.on_stored(a, 1);
    o.on_stored(b, 1);
    assert!(delivered(&mut o, a, false, 2));
    assert!(delivered(&mut o, b, false, 2));
    assert!(o.on_taken(1, &payload(a), 3).is_some());
    // The receiver crashed before either take was durable: both come back flagged.
    o.on_restart(1);
    assert!(delivered(&mut o, a, true, 4));
    assert!(o.on_taken(1, &payload(a), 5).is_some(), "taken again");
    o.on_acked(a, 6);
    // Flagged again after the acknowledgement: what journal_before_ack prevents.
    assert!(!delivered(&mut o, a, true, 7));
    // A flagged first hand-over is a delivery like any other.
    let c = o.on_submit(0, 1, 0);
    assert!(delivered(&mut o, c, true, 8));
    o.on_taken(1, &payload(c), 8);
    o.on_acked(c, 9);
    // An unflagged second delivery is a duplicate.
    assert!(!delivered(&mut o, b, false, 9));
    o.on_taken(1, &payload(b), 9);
    o.on_acked(b, 10);
    o.finish(20);
    assert_eq!(
        kinds(&o),
        [ViolationKind::RedeliveredAfterAck, ViolationKind::Duplicate]
    );
    assert_eq!((o.redeliveries, o.stored, o.duplicates), (1, 2, 1));
}

#[test]
fn durable_senders_owe_a_verdict_for_stored_messages_and_never_doubt() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let stored = o.on_submit(0, 1, 0);
    let unstored = o.on_submit(0, 1, 0);
    let doubted = o.on_submit(0, 1, 0);
    o.on_stored(stored, 1);
    o.on_stored(doubted, 1);
    // The sender crashes: only the message never reported stored may be lost.
    o.on_restart(0);
    o.on_restart(1);
    o.on_in_doubt(doubted, 5);
    o.finish(10);
    assert_eq!(
        kinds(&o),
        [ViolationKind::DurableInDoubt, ViolationKind::Lost]
    );
    assert_eq!(o.violations()[1].key, Some(stored));
    assert_eq!(o.lost_by_restart, 2, "{unstored} and the doubted one");
}

/// A sender whose journal was damaged reports a message it had seen acknowledged in doubt
/// (its `Resolved` record may be lost): weaker and true. Its journal stores that verdict,
/// and a later restart reports it again: the same verdict, not a changed one. Another
/// sender's journal damage excuses nothing of this.
#[test]
fn a_damaged_senders_doubt_after_an_ack_may_be_reported_again() {
    use exon::proto::journal::Outcome;
    // A durable oracle with node 0's message to node 1 delivered, taken and acknowledged.
    let acked = || {
        let mut o = Oracle::new(2);
        o.set_durable();
        let m = o.on_submit(0, 1, 0);
        o.on_delivered(1, 0, &payload(m), 2);
        o.on_taken(1, &payload(m), 2);
        o.on_acked(m, 3);
        (o, m)
    };
    let (mut o, m) = acked();
    o.on_restart(0);
    o.on_damaged(0);
    o.on_in_doubt(m, 5);
    assert!(o.on_reported_again(m, Outcome::InDoubt, 6));
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
    let (mut o, m) = acked();
    o.on_damaged(1);
    assert!(o.on_reported_again(m, Outcome::InDoubt, 6));
    assert_eq!(kinds(&o), [ViolationKind::VerdictChanged]);
}

#[test]
fn a_damaged_journal_excuses_doubt() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let a = o.on_submit(0, 1, 0);
    o.on_restart(1);
    o.on_damaged(1);
    o.on_in_doubt(a, 5);
    o.finish(10);
    assert_eq!(o.violation_count(), 0, "{:?}", o.violations());
}

/// A restored copy of a receiver's directory taken at 10: a second delivery of a message
/// first delivered after the copy is tolerated (and counted), of one delivered before it
/// is a `Duplicate`; and a message its restored sender had its verdict of after the copy,
/// delivered again, is `ResentByRestoredSender`.
#[test]
fn restored_copies_tolerate_exactly_what_the_copy_cannot_know() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let before = o.on_submit(0, 1, 0);
    let after = o.on_submit(0, 1, 0);
    assert!(o.on_delivered(1, 0, &payload(before), 5).is_some());
    assert!(o.on_delivered(1, 0, &payload(after), 15).is_some());
    o.on_restored(1, 10);
    assert!(o.on_delivered(1, 0, &payload(after), 20).is_some());
    assert!(o.on_delivered(1, 0, &payload(after), 21).is_none());
    assert!(o.on_delivered(1, 0, &payload(before), 22).is_none());
    assert_eq!(o.restore_duplicates, 1);
    assert_eq!(
        kinds(&o),
        [ViolationKind::Duplicate, ViolationKind::Duplicate]
    );
    let mut o = Oracle::new(2);
    o.set_durable();
    let m = o.on_submit(0, 1, 0);
    assert!(o.on_delivered(1, 0, &payload(m), 5).is_some());
    assert!(o.on_taken(1, &payload(m), 6).is_some());
    o.on_acked(m, 15);
    o.on_restored(0, 10);
    assert_eq!(o.restore_reopened, 1);
    o.on_delivered(1, 0, &payload(m), 20);
    assert_eq!(kinds(&o), [ViolationKind::ResentByRestoredSender]);
}

/// A take after the copy a restored receiver came back from is lost with it: the message
/// is handed over again, flagged, after its acknowledgement, and again at each restart of
/// the restored host until its own take is stored (a crash loop after the restore:
/// campaign 134). A take before the copy is not: its redelivery is `RedeliveredAfterAck`.
#[test]
fn a_take_lost_with_a_restored_copy_may_be_handed_over_again_at_each_restart() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let after = o.on_submit(0, 1, 0);
    let before = o.on_submit(0, 1, 0);
    for (m, t) in [(after, 15), (before, 5)] {
        assert!(delivered(&mut o, m, false, t));
        assert!(o.on_taken(1, &payload(m), t).is_some());
        o.on_acked(m, t + 1);
    }
    o.on_restored(1, 10);
    assert!(delivered(&mut o, after, true, 20));
    o.on_restart(1);
    assert!(
        delivered(&mut o, after, true, 21),
        "the restored host restarted again"
    );
    assert!(o.on_taken(1, &payload(after), 22).is_some());
    assert!(!delivered(&mut o, before, true, 23));
    assert_eq!(o.restore_redeliveries, 2);
    assert_eq!(kinds(&o), [ViolationKind::RedeliveredAfterAck]);
}

/// A message given up whose sender crashed before its `Resolved` record was durable (its
/// verdict not yet reported) is recovered: it owes a new verdict, and a restart of its
/// receiver with a new journal since it was sent excuses its doubt. One whose verdict was
/// reported and that is recovered all the same is a revoked verdict.
#[test]
fn a_recovered_message_given_up_owes_a_new_verdict() {
    let mut o = Oracle::new(2);
    o.set_durable();
    let m = o.on_submit(0, 1, 0);
    let n = o.on_submit(0, 1, 0);
    o.on_giving_up(m);
    o.on_abandoned(n, false, 5);
    o.on_restart(1);
    o.on_unvouched_restart(1, 6);
    o.on_recovered(m, 7);
    o.on_in_doubt(m, 8);
    assert_eq!(o.revoked_verdicts, 0);
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
    o.on_recovered(n, 9);
    assert_eq!(o.revoked_verdicts, 1);
    assert_eq!(kinds(&o), [ViolationKind::VerdictRevoked]);
}

/// A verdict reported again after a restart: the same is allowed (counted), another is a
/// violation; a message given up hears its verdict through `on_in_doubt`.
#[test]
fn a_verdict_reported_again_must_be_the_same() {
    use exon::proto::journal::Outcome;
    let mut o = Oracle::new(2);
    o.set_durable();
    let m = o.on_submit(0, 1, 0);
    let n = o.on_submit(0, 1, 0);
    o.on_giving_up(m);
    o.on_in_doubt(m, 5);
    assert_eq!(o.expired_in_doubt, 1);
    assert!(o.on_reported_again(m, Outcome::InDoubt, 6));
    assert_eq!(o.repeated_verdicts, 1);
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
    assert!(
        !o.on_reported_again(n, Outcome::NotDelivered, 6),
        "first report"
    );
    assert!(o.on_reported_again(m, Outcome::NotDelivered, 7));
    assert_eq!(kinds(&o), [ViolationKind::VerdictChanged]);
}
