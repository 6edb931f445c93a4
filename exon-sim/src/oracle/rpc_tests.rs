//! Unit tests of the oracle's RPC checks: each claim, true and false, on hand-made calls.

use bytes::Bytes;
use exon::call::Ended;
use exon::envelope::Outcome;

use super::*;

fn kinds(o: &Oracle) -> Vec<ViolationKind> {
    o.violations().iter().map(|v| v.kind).collect()
}

fn answer() -> (Outcome, Vec<u8>) {
    (Outcome::Answered, b"answer".to_vec())
}

/// Node 1 calls node 0: the call's id.
fn call(o: &mut Oracle) -> u64 {
    let key = o.on_submit(1, 0, 0);
    o.on_call(1, 0, key)
}

fn exec(o: &mut Oracle, call: u64, stable: Stable, redelivery: bool) -> bool {
    let e = Execution {
        server: 0,
        caller: 1,
        call,
        stable,
        redelivery,
    };
    o.on_executed(e, answer(), 5)
}

/// The request `key` delivered and taken (as the message oracle would record it), then
/// acknowledged at `at`.
fn acknowledge(o: &mut Oracle, key: MsgKey, at: u64) {
    if let Some(r) = rec_in(&mut o.msgs, key) {
        r.deliveries = 1;
        r.taken = true;
    }
    o.on_acked(key, at);
}

#[test]
fn a_clean_call_passes() {
    let mut o = Oracle::new(2);
    let c = call(&mut o);
    assert!(exec(&mut o, c, (2, 1, 1), false));
    assert_eq!(o.on_reply(1, 0, c, (1, 1, 1), false, 6), ReplyFate::Fresh);
    o.on_call_ended(
        1,
        c,
        &Ended::Reply(Outcome::Answered, Bytes::from_static(b"answer")),
        6,
    );
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
    assert_eq!(o.rpc_counts().replies, 1);
}

#[test]
fn a_flagged_rerun_of_the_same_delivery_is_absorbed_any_other_is_not() {
    let mut o = Oracle::new(2);
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 1), false);
    exec(&mut o, c, (2, 1, 1), true);
    assert!(kinds(&o).is_empty());
    assert_eq!(o.rpc_counts().reruns, 1);
    exec(&mut o, c, (2, 1, 1), false);
    exec(&mut o, c, (2, 9, 1), true);
    assert_eq!(kinds(&o), [ViolationKind::ExecutedTwice; 2]);
}

#[test]
fn every_false_claim_is_caught() {
    let mut o = Oracle::new(2);
    // A reply that is not the server's answer.
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 1), false);
    o.on_call_ended(
        1,
        c,
        &Ended::Reply(Outcome::Answered, Bytes::from_static(b"other")),
        6,
    );
    // Not executed, then executed.
    let c = call(&mut o);
    o.on_call_ended(1, c, &Ended::NotExecuted, 6);
    exec(&mut o, c, (2, 1, 2), false);
    // Executed, then not executed.
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 3), false);
    o.on_call_ended(1, c, &Ended::NotExecuted, 6);
    // No reply, never executed.
    let c = call(&mut o);
    o.on_call_ended(1, c, &Ended::NoReply, 6);
    // Two replies; a reply to a call never made; one from the wrong server.
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 4), false);
    o.on_reply(1, 0, c, (1, 1, 1), false, 6);
    assert_eq!(o.on_reply(1, 0, c, (1, 1, 2), false, 7), ReplyFate::Refused);
    assert_eq!(
        o.on_reply(1, 0, 99, (1, 1, 3), false, 7),
        ReplyFate::Refused
    );
    let c = call(&mut o);
    assert_eq!(o.on_reply(1, 2, c, (3, 1, 1), false, 7), ReplyFate::Refused);
    assert_eq!(
        kinds(&o),
        [
            ViolationKind::WrongReply,
            ViolationKind::ExecutedAfterNotExecuted,
            ViolationKind::ExecutedAfterNotExecuted,
            ViolationKind::NoReplyNotExecuted,
            ViolationKind::ReplyTwice,
            ViolationKind::UnknownCall,
            ViolationKind::UnknownCall,
        ]
    );
}

#[test]
fn at_the_end_every_call_ended_and_every_acknowledged_reply_came() {
    let mut o = Oracle::new(2);
    let open = call(&mut o);
    let acked = call(&mut o);
    exec(&mut o, acked, (2, 1, 1), false);
    acknowledge(&mut o, MsgKey { sender: 1, seq: 1 }, 5);
    o.on_call_ended(1, acked, &Ended::NoReply, 9);
    // A reply after the call ended is discarded, and counts as come.
    let late = call(&mut o);
    exec(&mut o, late, (2, 1, 2), false);
    o.on_call_ended(1, late, &Ended::InDoubt, 9);
    assert_eq!(
        o.on_reply(1, 0, late, (1, 1, 1), false, 10),
        ReplyFate::Discarded
    );
    let before = o.violation_count();
    o.finish_rpc(20);
    let end = kinds_since(&o, before);
    assert_eq!(end, [ViolationKind::CallNotEnded, ViolationKind::ReplyLost]);
    assert!(o
        .violations()
        .iter()
        .any(|v| v.detail.contains(&format!("call {open} never ended"))));
}

#[test]
fn a_crashed_caller_forgets_its_calls_and_a_restart_without_journal_excuses_a_lost_reply() {
    let mut o = Oracle::new(2);
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 1), false);
    o.on_restart(1);
    o.on_caller_crashed(1);
    assert_eq!(o.rpc_counts().forgotten, 1);
    o.finish_rpc(20);
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
}

/// Durable mode: a reply is excused only by a restart that could not vouch for it (durable
/// mode switched on, the journal lost, the directory restored) after its request was
/// acknowledged; one before the acknowledgement excuses nothing (the server stored the
/// reply afterwards).
#[test]
fn durable_a_reply_lost_is_excused_by_an_unvouched_restart_after_its_acknowledgement() {
    for (restart_at, excused) in [(10, true), (3, false)] {
        let mut o = Oracle::new(2);
        o.set_durable();
        let c = call(&mut o);
        exec(&mut o, c, (2, 1, 1), false);
        acknowledge(&mut o, MsgKey { sender: 1, seq: 0 }, 5);
        o.on_unvouched_restart(0, restart_at);
        let end = end_no_reply(&mut o, c);
        assert_eq!(
            end,
            lost_unless(excused),
            "unvouched restart at {restart_at}"
        );
    }
}

/// Durable mode: a caller restarted unvouched (durable mode switched on) makes a call
/// after its restart; its server's reply goes in an envelope of the caller's incarnation
/// from before it and is told in doubt (campaign 141, `exon-sim --nodes 2 --messages 4000
/// --loss 0.2 --dup 0.1 --burst 0.05 --partitions 1 --restarts 1 --jitter-ms 2 --durable
/// --journal-loss 1 --durable-at-restart --rpc --link-mtu 9000 --no-mtu-discovery
/// --max-datagram 9000 --seed 424771944`: 52 `ReplyLost`). Lost truthfully at both ends:
/// the call ends executed without its reply. A reply never sent, or one not in doubt,
/// excuses nothing.
#[test]
fn durable_a_reply_told_in_doubt_is_lost_truthfully() {
    for (doubted, excused) in [(true, true), (false, false)] {
        let mut o = Oracle::new(2);
        o.set_durable();
        o.on_restart(1);
        o.on_unvouched_restart(1, 1);
        // The call is made after the restart.
        let request = o.on_submit(1, 0, 2);
        let c = o.on_call(1, 0, request);
        exec(&mut o, c, (2, 1, 1), false);
        acknowledge(&mut o, MsgKey { sender: 1, seq: 0 }, 5);
        let reply = o.on_submit(0, 1, 5);
        o.on_reply_sent(1, c, reply);
        if doubted {
            o.on_in_doubt(reply, 7);
        }
        let end = end_no_reply(&mut o, c);
        assert_eq!(end, lost_unless(excused), "reply in doubt: {doubted}");
        if doubted {
            assert!(
                kinds(&o).is_empty(),
                "the doubt itself is excused: {:?}",
                o.violations()
            );
        }
    }
}

/// Call `c` of node 1 ends executed without a reply; the kinds of the violations the
/// end-of-run checks then find.
fn end_no_reply(o: &mut Oracle, c: u64) -> Vec<ViolationKind> {
    o.on_call_ended(1, c, &Ended::NoReply, 12);
    let before = o.violation_count();
    o.finish_rpc(20);
    kinds_since(o, before)
}

/// None if `excused`, else a reply lost.
fn lost_unless(excused: bool) -> &'static [ViolationKind] {
    if excused {
        &[]
    } else {
        &[ViolationKind::ReplyLost]
    }
}

/// The kinds of the violations found after the first `before`.
fn kinds_since(o: &Oracle, before: u64) -> Vec<ViolationKind> {
    o.violations()[before as usize..]
        .iter()
        .map(|v| v.kind)
        .collect()
}

/// Call `c` of node 1 ended with its server's answer.
fn end_with_reply(o: &mut Oracle, c: u64) {
    let end = Ended::Reply(Outcome::Answered, Bytes::from_static(b"answer"));
    o.on_call_ended(1, c, &end, 6);
}

/// A new call answered, ended, then replied to again with nothing to excuse it: one more
/// `ReplyTwice` (after the one the test caused already).
fn a_second_reply_is_refused(o: &mut Oracle) {
    let c = call(o);
    exec(o, c, (2, 1, 4), false);
    o.on_reply(1, 0, c, (1, 1, 4), false, 9);
    end_with_reply(o, c);
    assert_eq!(o.on_reply(1, 0, c, (1, 1, 5), false, 9), ReplyFate::Refused);
    assert_eq!(kinds(o), [ViolationKind::ReplyTwice; 2]);
}

/// A server whose journal was found damaged may lose the record of a reply it sent, run the
/// flagged request again and answer again: the second reply, to a call its first ended, is
/// discarded, one per such re-run. Without the damage, or without the re-run, or to a call
/// still open, a second reply is a violation.
#[test]
fn a_damaged_servers_rerun_may_reply_again_to_an_ended_call() {
    let mut o = Oracle::new(2);
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 1), false);
    assert_eq!(o.on_reply(1, 0, c, (1, 1, 1), false, 6), ReplyFate::Fresh);
    end_with_reply(&mut o, c);
    // A flagged re-run before the damage was found answers nothing new.
    exec(&mut o, c, (2, 1, 1), true);
    o.on_damaged(0);
    exec(&mut o, c, (2, 1, 1), true);
    assert_eq!(
        o.on_reply(1, 0, c, (1, 1, 2), false, 7),
        ReplyFate::Discarded
    );
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
    assert_eq!(o.rpc_counts().damage_replies, 1);
    // One re-run, one reply more: a third is a violation.
    assert_eq!(o.on_reply(1, 0, c, (1, 1, 3), false, 8), ReplyFate::Refused);
    assert_eq!(kinds(&o), [ViolationKind::ReplyTwice]);
    // Damage without a re-run excuses nothing.
    a_second_reply_is_refused(&mut o);
}

/// A reply told in doubt and sent once more (rule `resend_doubted_replies`) that had reached
/// its caller after all: the second copy, to a call the first ended, is discarded, one per
/// copy sent again; a third reply is a violation, as is a second without a resend.
#[test]
fn a_reply_sent_again_after_a_doubt_is_discarded_by_its_ended_call() {
    let mut o = Oracle::new(2);
    let c = call(&mut o);
    exec(&mut o, c, (2, 1, 1), false);
    let first = o.on_submit(0, 1, 5);
    o.on_reply_sent(1, c, first);
    assert_eq!(o.on_reply(1, 0, c, (1, 1, 1), false, 6), ReplyFate::Fresh);
    end_with_reply(&mut o, c);
    let again = o.on_submit(0, 1, 7);
    o.on_reply_resent(1, c, again);
    assert_eq!(
        o.on_reply(1, 0, c, (1, 2, 1), false, 8),
        ReplyFate::Discarded
    );
    assert!(kinds(&o).is_empty(), "{:?}", o.violations());
    assert_eq!(o.rpc_counts().resent_replies, 1);
    assert_eq!(o.on_reply(1, 0, c, (1, 2, 2), false, 9), ReplyFate::Refused);
    assert_eq!(kinds(&o), [ViolationKind::ReplyTwice]);
    // No resend: a second reply is a violation.
    a_second_reply_is_refused(&mut o);
}
