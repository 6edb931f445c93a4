//! Durable mode (`Node::recover`, the journal): exactly-once across crashes of either side,
//! with the journal's records lost when unsynced, and each journal rule shown to matter by
//! switching it off.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use exon::proto::journal::{Entry, State};
use exon::proto::{Abandoned, MsgId, Rules};
use exon_testkit::pair::{id, test_config, Fate, Pair, A, B};

fn payload(i: usize) -> Bytes {
    // Three to a datagram: a stream spans many datagrams.
    Bytes::from(format!("message {i:<300}"))
}

/// Deliveries per payload at node `i` that the application could not tell apart: its
/// unflagged deliveries, or one if it only ever had flagged ones. A flagged delivery after
/// another is deduplicated by its stable id.
fn unflagged(p: &Pair, i: usize) -> HashMap<Bytes, usize> {
    let mut count: HashMap<Bytes, (usize, usize)> = HashMap::new();
    for d in &p.nodes[i].delivered {
        count.entry(d.clone()).or_default().0 += 1;
    }
    for d in &p.nodes[i].redelivered {
        count.entry(d.clone()).or_default().1 += 1;
    }
    count
        .into_iter()
        .map(|(d, (all, flagged))| (d, (all - flagged).max(usize::from(all > 0))))
        .collect()
}

fn durable_pair(a: bool, b: bool) -> Pair {
    let mut p = Pair::new(test_config());
    p.drain(A);
    p.drain(B);
    if a {
        p.make_durable(A);
    }
    if b {
        p.make_durable(B);
    }
    p
}

/// Steps until `cond` holds (bounded).
fn step_until(p: &mut Pair, cond: impl Fn(&Pair) -> bool) {
    for _ in 0..100_000 {
        if cond(p) || !p.step() {
            return;
        }
    }
    panic!("condition never reached");
}

/// Node `i` restarts from its stored clock and nothing else (no journal).
fn restart_without_journal(p: &mut Pair, i: usize) {
    let side = &mut p.nodes[i];
    let cfg = side.node.config().clone();
    side.node = exon::proto::Node::new(
        exon_testkit::pair::id(i),
        exon::proto::Security::InsecurePlaintext,
        cfg,
        side.stored,
    )
    .unwrap();
    side.untaken.clear();
}

/// A stream of `n` messages from A to B, B crashing once a third has arrived, its journal
/// synced every `sync_every` steps (0: every record at once).
fn receiver_crash(durable: bool, n: usize, sync_every: usize) -> Pair {
    let mut p = durable_pair(false, durable);
    p.nodes[B].auto_sync = sync_every == 0;
    // One datagram in three from A is lost: tokens are still in flight at the crash.
    let mut k = 0;
    p.set_filter(move |w| {
        k += usize::from(w.from == A);
        if w.from == A && k % 3 == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    for i in 0..n {
        p.send(A, payload(i));
    }
    let mut steps = 0;
    while p.nodes[B].delivered.len() < n / 3 {
        assert!(p.step());
        steps += 1;
        if sync_every > 0 && steps % sync_every == 0 {
            p.sync(B);
        }
    }
    if durable {
        p.crash_and_recover(B);
    } else {
        restart_without_journal(&mut p, B);
    }
    p.nodes[B].auto_sync = true;
    p.sync(B);
    p.run(Duration::from_secs(60));
    p
}

#[test]
fn a_restarted_durable_receiver_leaves_nothing_in_doubt() {
    let n = 60;
    // Without the journal the restart leaves messages in doubt: the scenario bites.
    let plain = receiver_crash(false, n, 0);
    assert!(
        !plain.nodes[A].in_doubt.is_empty(),
        "the restart must matter"
    );

    for sync_every in [0, 1, 3, 7] {
        let p = receiver_crash(true, n, sync_every);
        let a = &p.nodes[A];
        assert!(
            a.in_doubt.is_empty(),
            "sync every {sync_every}: {:?}",
            a.in_doubt
        );
        assert_eq!(
            a.acked.len(),
            n,
            "sync every {sync_every}: all acknowledged"
        );
        let counts = unflagged(&p, B);
        for i in 0..n {
            assert_eq!(
                counts.get(&payload(i)),
                Some(&1),
                "message {i}, sync every {sync_every}"
            );
        }
        assert!(p.both_idle(), "sync every {sync_every}: records left");
        assert_eq!(
            p.nodes[B].node.remembered_deliveries(),
            0,
            "the archive empties"
        );
        assert!(
            p.nodes[B].journal.is_empty(),
            "the journal replays to nothing"
        );
    }
}

#[test]
fn a_restarted_durable_sender_sends_again_every_stored_message() {
    let n = 40;
    for sync_every in [1, 4, 9] {
        let mut p = durable_pair(true, true);
        p.nodes[A].auto_sync = false;
        let ids: Vec<_> = (0..n).map(|i| p.send(A, payload(i))).collect();
        let mut steps = 0;
        while p.nodes[B].delivered.len() < n / 2 {
            assert!(p.step());
            steps += 1;
            if steps % sync_every == 0 {
                p.sync(A);
            }
        }
        let stored: Vec<_> = p.nodes[A].stored_msgs.clone();
        p.crash_and_recover(A);
        p.nodes[A].auto_sync = true;
        p.run(Duration::from_secs(60));
        let a = &p.nodes[A];
        assert!(a.in_doubt.is_empty());
        for id in &stored {
            assert_eq!(
                a.acked.iter().filter(|x| *x == id).count(),
                1,
                "stored message {id} acknowledged once (sync every {sync_every})"
            );
        }
        let counts = unflagged(&p, B);
        for (i, id) in ids.iter().enumerate() {
            let c = counts.get(&payload(i)).copied().unwrap_or(0);
            assert!(c <= 1, "message {i} delivered {c} times");
            if a.acked.contains(id) {
                assert_eq!(c, 1, "acknowledged message {i} delivered");
            }
        }
        assert!(stored.len() >= n / 2, "most were stored before the crash");
        assert!(p.both_idle());
        assert!(p.nodes[A].journal.is_empty() && p.nodes[B].journal.is_empty());
    }
}

#[test]
fn untaken_deliveries_come_back_flagged_with_their_stable_id() {
    let mut p = durable_pair(false, true);
    p.nodes[B].auto_take = false;
    for i in 0..5 {
        p.send(A, payload(i));
    }
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[B].untaken.len(), 5);
    let before: Vec<_> = p.nodes[B].untaken.iter().map(|d| d.stable()).collect();
    assert!(p.nodes[B].untaken.iter().all(|d| !d.is_redelivery()));
    p.take(B, 2);
    p.crash_and_recover(B);
    // The three not taken come back flagged, with the ids they had, from A's copies (its
    // retransmissions: B journalled no payload).
    p.run(Duration::from_secs(5));
    let again: Vec<_> = p.nodes[B].untaken.iter().map(|d| d.stable()).collect();
    assert_eq!(again, before[2..]);
    assert!(p.nodes[B].untaken.iter().all(|d| d.is_redelivery()));
    assert_eq!(p.nodes[B].redelivered.len(), 3);
    p.take(B, 3);
    p.run(Duration::from_secs(30));
    assert_eq!(p.nodes[A].acked.len(), 5);
    assert!(p.nodes[A].in_doubt.is_empty());
    assert!(p.both_idle());
}

#[test]
fn without_journal_before_delivery_a_crash_delivers_twice_unflagged() {
    for rule in [true, false] {
        let mut p = durable_pair(false, true);
        let mut rules = Rules::ALL;
        // The receiver journals its deliveries (`Delivered`), as before issue 45.
        rules.deliver_from_senders_copy = false;
        rules.journal_before_delivery = rule;
        p.node(B).set_rules(rules);
        p.nodes[B].auto_sync = false;
        p.send(A, payload(0));
        // Until the token reaches B (delivered at once only with the rule off).
        step_until(&mut p, |p| {
            p.nodes[A].node.stats().frames_out.token > 0 && p.in_flight() == 0
        });
        p.crash_and_recover(B);
        p.nodes[B].auto_sync = true;
        p.run(Duration::from_secs(30));
        assert_eq!(p.nodes[A].acked.len(), 1);
        let c = unflagged(&p, B)[&payload(0)];
        assert_eq!(c, if rule { 1 } else { 2 }, "rule {rule}");
    }
}

#[test]
fn without_journal_before_ack_an_acknowledged_message_is_handed_out_again() {
    for rule in [true, false] {
        let mut p = durable_pair(false, true);
        let mut rules = Rules::ALL;
        // Deliveries journalled (`Delivered`): a restart hands out what the journal holds.
        rules.deliver_from_senders_copy = false;
        rules.journal_before_ack = rule;
        p.node(B).set_rules(rules);
        p.nodes[B].auto_take = false;
        p.send(A, payload(0));
        p.run(Duration::from_secs(2));
        assert_eq!(p.nodes[B].untaken.len(), 1);
        p.nodes[B].auto_sync = false;
        p.take(B, 1);
        p.run(Duration::from_millis(100));
        let acked_before_crash = p.nodes[A].acked.len();
        p.crash_and_recover(B);
        p.nodes[B].auto_sync = true;
        // Acknowledged, then handed to the application again: what the rule prevents.
        let again = p.nodes[B].redelivered.len();
        assert_eq!(acked_before_crash == 1 && again == 1, !rule, "rule {rule}");
        p.take(B, 1);
        p.run(Duration::from_secs(30));
        assert_eq!(p.nodes[A].acked.len(), 1, "rule {rule}");
    }
}

#[test]
fn without_journal_before_token_a_restarted_sender_delivers_twice() {
    for rule in [true, false] {
        let mut p = durable_pair(true, true);
        let mut rules = Rules::ALL;
        rules.journal_before_token = rule;
        p.node(A).set_rules(rules);
        p.nodes[A].auto_sync = false;
        p.send(A, payload(0));
        p.sync(A); // the message is stored; it has no slot yet
                   // Until B took it (with the rule on, the token waits for a sync that never comes).
        let mut steps = 0;
        while p.nodes[B].delivered.is_empty() && steps < 200 {
            if !p.step() {
                break;
            }
            steps += 1;
        }
        p.crash_and_recover(A);
        p.nodes[A].auto_sync = true;
        p.sync(A);
        p.run(Duration::from_secs(30));
        let c = unflagged(&p, B)[&payload(0)];
        assert_eq!(c, if rule { 1 } else { 2 }, "rule {rule}");
    }
}

/// A's token leaves before its records are stored (ETOKEN) and B journals and holds it;
/// A crashes before its sync, so its application was never told the message was stored
/// and sends it again. With the rule, B hands over only the new send (the early copy waits
/// for a STORED that never comes, and is dropped unseen once A's frontier passes it);
/// without, B had handed the early copy over too: twice.
#[test]
fn without_early_token_waits_for_stored_a_sender_crash_delivers_twice() {
    for rule in [true, false] {
        let mut p = durable_pair(true, true);
        let mut rules = Rules::ALL;
        rules.early_token_waits_for_stored = rule;
        p.node(B).set_rules(rules);
        p.nodes[A].auto_sync = false;
        p.send(A, payload(0));
        step_until(&mut p, |p| p.nodes[B].node.stats().frames_in.token > 0);
        p.run(Duration::from_millis(50));
        assert_eq!(
            p.nodes[A].node.stats().frames_out.stored,
            0,
            "A never synced"
        );
        assert_eq!(
            (p.nodes[B].delivered.len(), p.nodes[B].node.early_parked()),
            if rule { (0, 1) } else { (1, 0) },
            "rule {rule}: the early copy is held for A's word"
        );
        p.crash_and_recover(A);
        p.nodes[A].auto_sync = true;
        p.send(A, payload(0));
        p.run(Duration::from_secs(30));
        assert_eq!(unflagged(&p, B)[&payload(0)], if rule { 1 } else { 2 });
        if rule {
            assert_eq!(p.nodes[B].node.stats().early_dropped, 1);
            assert_eq!(p.nodes[B].node.early_parked(), 0);
            assert_eq!(p.nodes[B].node.untaken(), 0, "nothing left held");
        }
    }
}

/// A STORED frame that covers nothing (`from > below`, as a hostile or broken peer may
/// send) releases nothing and panics nothing; A's real word then hands the message over.
#[test]
fn an_inverted_stored_range_releases_nothing() {
    let mut p = durable_pair(true, true);
    p.nodes[A].auto_sync = false;
    p.send(A, payload(0));
    step_until(&mut p, |p| p.nodes[B].node.stats().frames_in.token > 0);
    p.run(Duration::from_millis(50));
    assert_eq!(p.nodes[B].node.early_parked(), 1);
    for (from, below) in [((1 << 62) - 1, 0), (1 << 40, 1), (5, 5)] {
        let stored = exon::proto::Frame::Stored { from, below };
        let d = exon_testkit::frames::packet(id(A), id(B), vec![stored]).encode();
        p.inject(B, d);
    }
    assert_eq!(p.nodes[B].node.early_parked(), 1, "still held");
    assert!(p.nodes[B].delivered.is_empty());
    p.nodes[A].auto_sync = true;
    p.sync(A);
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[B].delivered, [payload(0)]);
    assert_eq!(p.nodes[B].node.early_parked(), 0);
}

/// A's STORED never reaches B, and A's next copy of the message is a FRAG (its datagrams
/// shrank; or the probe of a message B reports held whole): B answers it with GOT, which
/// stops A's retransmissions, so the copy itself must be the word, or the message waits
/// for good. (The FRAG is injected here, standing for one A sends after its sync: A never
/// sends fragments of what it has not stored.)
#[test]
fn a_fragment_of_a_held_early_token_is_its_senders_word() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut p = durable_pair(true, true);
    p.nodes[A].auto_sync = false;
    let seen: Rc<RefCell<Option<(u64, u64, Bytes)>>> = Default::default();
    let keep = seen.clone();
    p.set_filter(move |w| {
        for f in w.packet().frames {
            if let exon::proto::Frame::EarlyToken { s, r, payload, .. } = f {
                keep.borrow_mut().get_or_insert((s, r, payload));
            }
        }
        Fate::Deliver
    });
    p.send(A, payload(0));
    step_until(&mut p, |p| p.nodes[B].node.stats().frames_in.token > 0);
    p.run(Duration::from_millis(50));
    assert_eq!(p.nodes[B].node.early_parked(), 1);
    let (s, r, data) = seen.borrow().clone().expect("an early token left");
    let total = data.len() as u64;
    let frag = exon::proto::Frame::Frag {
        s,
        r,
        total,
        offset: 0,
        data,
        senders_copy: true,
    };
    p.inject(
        B,
        exon_testkit::frames::packet(id(A), id(B), vec![frag]).encode(),
    );
    assert_eq!(
        p.nodes[B].node.early_parked(),
        0,
        "the fragment was the word"
    );
    assert_eq!(p.nodes[B].delivered, [payload(0)]);
}

/// B journals an early token whole (`DeliveredEarly`: B does not rely on A's copy here)
/// and restarts before A's word. The recovered delivery is held, not handed out: if A then
/// stores the message, its word hands it over (flagged: it may have been handed over
/// before); if A crashed before its sync and its application sends the message again, the
/// held one is dropped once A's frontier passes it, and the new send is delivered once.
/// With the rule off, recovery hands the held one out at once: twice.
#[test]
fn a_recovered_early_delivery_waits_for_its_senders_word() {
    for (rule, sender_crashes) in [(true, false), (true, true), (false, true)] {
        let mut p = durable_pair(true, true);
        let mut rules = Rules::ALL;
        rules.deliver_from_senders_copy = false;
        rules.early_token_waits_for_stored = rule;
        p.node(B).set_rules(rules);
        p.nodes[A].auto_sync = false;
        p.send(A, payload(0));
        step_until(&mut p, |p| p.nodes[B].node.stats().frames_in.token > 0);
        p.run(Duration::from_millis(50));
        p.crash_and_recover(B);
        let case = format!("rule {rule}, sender crashes {sender_crashes}");
        let handed = p.nodes[B].delivered.len() + p.nodes[B].redelivered.len();
        assert_eq!(handed, usize::from(!rule), "{case}: held after the restart");
        if sender_crashes {
            p.crash_and_recover(A);
            p.nodes[A].auto_sync = true;
            p.send(A, payload(0));
        } else {
            p.nodes[A].auto_sync = true;
            p.sync(A);
        }
        p.run(Duration::from_secs(30));
        let times = if rule { 1 } else { 2 };
        assert_eq!(unflagged(&p, B)[&payload(0)], times, "{case}");
        if rule {
            assert_eq!(p.nodes[B].node.early_parked(), 0, "{case}");
            assert_eq!(p.nodes[B].node.untaken(), 0, "{case}: nothing left held");
            let dropped = p.nodes[B].node.stats().early_dropped;
            assert_eq!(dropped, u64::from(sender_crashes), "{case}");
            if !sender_crashes {
                assert_eq!(p.nodes[B].redelivered.len(), 1, "{case}: flagged");
            }
        }
    }
}

#[test]
fn without_journal_before_verdict_a_verdict_is_reported_twice() {
    for rule in [true, false] {
        let mut p = durable_pair(true, true);
        let mut rules = Rules::ALL;
        rules.journal_before_verdict = rule;
        p.node(A).set_rules(rules);
        p.nodes[A].auto_sync = false;
        let id = p.send(A, payload(0));
        p.sync(A); // accepted; its slot comes with the SLOTS
        step_until(&mut p, |p| !p.nodes[A].unsynced.is_empty());
        p.sync(A); // its slot: the token goes
        step_until(&mut p, |p| {
            p.nodes[A].node.stats().frames_in.ack > 0 && !p.nodes[A].unsynced.is_empty()
        });
        p.crash_and_recover(A);
        p.nodes[A].auto_sync = true;
        p.sync(A);
        p.run(Duration::from_secs(30));
        let times = p.nodes[A].acked.iter().filter(|x| **x == id).count();
        assert_eq!(times, if rule { 1 } else { 2 }, "rule {rule}");
        assert_eq!(unflagged(&p, B)[&payload(0)], 1);
    }
}

/// A sends M (`payload(0)`); once its token left, every datagram from B is lost, so B
/// delivers M and its ACK never reaches A. Returns M's id and the switch that heals B's
/// side (`set(false)`).
fn delivered_with_its_ack_lost(
    p: &mut Pair,
) -> (exon::proto::MsgId, std::rc::Rc<std::cell::Cell<bool>>) {
    let deaf = std::rc::Rc::new(std::cell::Cell::new(false));
    let d = deaf.clone();
    p.set_filter(move |w| {
        if w.from == B && d.get() {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let m = p.send(A, payload(0));
    step_until(p, |p| p.nodes[A].node.stats().frames_out.token > 0);
    deaf.set(true);
    step_until(p, |p| p.nodes[B].delivered.len() == 1);
    p.run(Duration::from_millis(20));
    assert!(p.nodes[A].acked.is_empty(), "the ACK is lost");
    (m, deaf)
}

/// Issue 42, item 1: B takes message M and its ACK is lost, then B restarts from its stored
/// clock with `journal` (a journal deleted, or durable mode switched on for a node that ran
/// without it: nothing covers M's incarnation). Returns how many times M was delivered
/// unflagged and A's verdicts (acknowledged, in doubt).
fn restart_with_a_journal_that_never_saw_m(
    covers: bool,
    was_durable: bool,
) -> (usize, usize, usize) {
    let mut p = durable_pair(false, was_durable);
    delivered_with_its_ack_lost(&mut p);
    if was_durable {
        p.crash_and_recover_with(B, exon::proto::journal::State::new(), false);
    } else {
        // A node that ran without a journal restarts with durable mode switched on.
        restart_without_journal(&mut p, B);
        p.make_durable(B);
    }
    let mut rules = Rules::ALL;
    rules.journal_covers_incarnations = covers;
    p.node(B).set_rules(rules);
    p.set_filter(|_| Fate::Deliver);
    p.run(Duration::from_secs(60));
    let a = &p.nodes[A];
    (
        unflagged(&p, B)[&payload(0)],
        a.acked.len(),
        a.in_doubt.len(),
    )
}

#[test]
fn a_receiver_restarted_with_a_new_journal_answers_doubt_for_what_it_may_have_delivered() {
    for was_durable in [true, false] {
        // With the rule: M once, and the sender says it does not know.
        assert_eq!(
            restart_with_a_journal_that_never_saw_m(true, was_durable),
            (1, 0, 1),
            "was durable: {was_durable}"
        );
        // Without it: LOST for a slot the new journal never saw, and M delivered twice.
        assert_eq!(
            restart_with_a_journal_that_never_saw_m(false, was_durable),
            (2, 1, 0),
            "rule off, was durable: {was_durable}"
        );
    }
}

#[test]
fn a_journal_covers_from_where_it_started_across_restarts_and_compactions() {
    let mut p = durable_pair(false, true);
    let start = p.nodes[B].journal.covers();
    assert!(start.is_some(), "a new journal records where it starts");
    for i in 0..5 {
        p.send(A, payload(i));
    }
    p.run(Duration::from_secs(10));
    let (from, below) = p.nodes[B].journal.covers().unwrap();
    assert_eq!(from, start.unwrap().0);
    assert!(below > from, "it covers the incarnations made");
    // A compaction keeps it: the live records replay to the same coverage.
    let mut again = exon::proto::journal::State::new();
    for e in p.nodes[B].journal.live_entries() {
        again.apply(&e);
    }
    assert_eq!(again.covers(), Some((from, below)));
    assert!(again.is_empty(), "a quiet journal holds nothing else");
    p.crash_and_recover(B);
    p.sync(B);
    assert_eq!(
        p.nodes[B].journal.covers().unwrap().0,
        from,
        "still from its start"
    );
}

/// Issue 42, item 4: both sides durable. B takes M, its ACK is lost; A gives M up (in
/// doubt), and its next frames carry a frontier past M's slot while the `Resolved` record
/// is not synced; A crashes, B restarts too. A recovers M in its old slot and sends it
/// again: B must still know it delivered M. Returns M's unflagged deliveries, with A's
/// rule `journal_before_verdict` and the restarted B's `doubt_below_forgotten` as given.
fn abandon_then_both_crash(rule: bool, doubt: bool) -> usize {
    let mut p = durable_pair(true, true);
    let mut rules = Rules::ALL;
    rules.journal_before_verdict = rule;
    p.node(A).set_rules(rules);
    let (m, deaf) = delivered_with_its_ack_lost(&mut p);
    // A gives M up; its record of that is not synced.
    p.nodes[A].auto_sync = false;
    let now = p.now;
    let v = p.node(A).abandon(now, exon_testkit::pair::id(B), m);
    assert_eq!(
        v,
        Some(exon::proto::Abandoned::Pending),
        "in doubt, once stored"
    );
    p.drain(A);
    // The path heals; A goes on sending, and B probes: the frontier may move on.
    deaf.set(false);
    p.send(A, payload(1));
    p.run(Duration::from_secs(20));
    p.crash_and_recover(A);
    p.crash_and_recover(B);
    let mut rules = Rules::ALL;
    rules.doubt_below_forgotten = doubt;
    p.node(B).set_rules(rules);
    p.nodes[A].auto_sync = true;
    p.sync(A);
    p.run(Duration::from_secs(60));
    assert!(p.both_idle(), "everything settles");
    unflagged(&p, B)[&payload(0)]
}

#[test]
fn a_message_given_up_keeps_its_slot_below_the_frontier_until_that_is_stored() {
    assert_eq!(abandon_then_both_crash(true, false), 1);
    assert_eq!(
        abandon_then_both_crash(false, false),
        2,
        "without the rule the receiver forgets M's slot and M is delivered twice"
    );
    // The receiver's own rule stands behind it: below the frontier past which it forgot
    // A's deliveries it answers DOUBT, not LOST, and M is not sent again.
    assert_eq!(abandon_then_both_crash(false, true), 1);
    assert_eq!(abandon_then_both_crash(true, true), 1);
}

/// Issue 42, item 6: A waits for reassembly credit under B's incarnation `r` when B
/// restarts with its journal intact. A's REQCREDIT for `r` must get the journal's answer,
/// never DOUBT: LOST (nothing was delivered into that slot), whether B journals payloads
/// or relies on its senders' copies.
#[test]
fn a_reqcredit_for_an_incarnation_lost_in_a_restart_asks_the_journal() {
    for copy in [true, false] {
        let (before, after) = reqcredit_after_a_restart(copy);
        assert_eq!(
            after.doubt, before.doubt,
            "a durable receiver leaves nothing in doubt"
        );
        assert_eq!(
            after.lost,
            before.lost + 1,
            "copy {copy}: the journal answers: never delivered"
        );
    }
}

/// B grants A slots, restarts, and is asked for credit in the old incarnation: B's frames
/// out before and after the REQCREDIT.
fn reqcredit_after_a_restart(copy: bool) -> (exon::proto::FrameCounts, exon::proto::FrameCounts) {
    use exon::proto::Frame;
    use exon_testkit::frames::{frames, packet};
    let mut p = durable_pair(false, true);
    let mut rules = Rules::ALL;
    rules.deliver_from_senders_copy = copy;
    p.node(B).set_rules(rules);
    p.record = true;
    let cut = std::rc::Rc::new(std::cell::Cell::new(false));
    let c = cut.clone();
    p.set_filter(move |_w| if c.get() { Fate::Drop } else { Fate::Deliver });
    p.send(A, payload(0));
    step_until(&mut p, |p| p.nodes[A].node.stats().frames_in.slots > 0);
    cut.set(true);
    let (s, r) = p
        .log
        .iter()
        .filter(|w| w.from == B)
        .flat_map(|w| frames(&[w.packet()]))
        .find_map(|f| match f {
            Frame::Slots { s, r, n } if n > 0 => Some((s, r)),
            _ => None,
        })
        .expect("B granted slots");
    p.crash_and_recover(B);
    p.node(B).set_rules(rules);
    let before = p.nodes[B].node.stats().frames_out;
    let want = 1 << 20;
    let req = packet(
        exon_testkit::pair::id(A),
        exon_testkit::pair::id(B),
        vec![Frame::ReqCredit { r, s, want }],
    );
    p.inject(B, req.encode());
    (before, p.nodes[B].node.stats().frames_out)
}

/// A journal found damaged lost records it covered: from then on it vouches only for what
/// it records afterwards, even at a later restart where the log reads clean. B delivers M
/// (its ACK lost), restarts on a damaged journal that lost M's `Delivered` record, and
/// restarts again before A's token comes back: M must be in doubt, never delivered twice.
#[test]
fn a_journal_damaged_once_never_vouches_for_what_the_damage_may_have_taken() {
    let mut p = durable_pair(false, true);
    // The synced journal before M: it already covers the incarnation M will go into.
    let before_m = p.nodes[B].journal.clone();
    let cut = std::rc::Rc::new(std::cell::Cell::new((false, false)));
    let c = cut.clone();
    p.set_filter(move |w| {
        let (from_b, all) = c.get();
        if all || (from_b && w.from == B) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.send(A, payload(0));
    step_until(&mut p, |p| p.nodes[A].node.stats().frames_out.token > 0);
    cut.set((true, false));
    step_until(&mut p, |p| p.nodes[B].delivered.len() == 1);
    p.run(Duration::from_millis(20));
    cut.set((true, true));
    // The damage took M's record: the log reads up to before it, reported damaged.
    p.crash_and_recover_with(B, before_m, true);
    p.run(Duration::from_millis(20));
    // A second restart: the log now reads clean.
    p.crash_and_recover(B);
    cut.set((false, false));
    p.run(Duration::from_secs(60));
    assert_eq!(unflagged(&p, B)[&payload(0)], 1, "M delivered once");
    assert_eq!(p.nodes[A].in_doubt.len(), 1, "and in doubt");
}

/// Node `i` crashes (its unsynced records lost) and restarts from its synced journal, its
/// new node under `rules` from the start (recovery included).
fn crash_and_recover_under(p: &mut Pair, i: usize, rules: Rules) {
    let side = &mut p.nodes[i];
    side.unsynced.clear();
    side.untaken.clear();
    let cfg = side.node.config().clone();
    let mut node = exon::proto::Node::new(
        exon_testkit::pair::id(i),
        exon::proto::Security::InsecurePlaintext,
        cfg,
        side.stored,
    )
    .unwrap();
    node.set_rules(rules);
    node.recover(p.now, side.journal.recovered(false)).unwrap();
    side.node = node;
    p.drain(i);
}

/// Issue 44, item 4: A gives M up before any copy of it left (not delivered), and crashes
/// before the `Resolved` record is synced. Returns what `abandon` returned, whether A's
/// application was told M was not delivered, and how many times B delivered M.
fn abandon_then_crash_before_the_record(rule: bool) -> (Option<Abandoned>, bool, usize) {
    let mut p = durable_pair(true, true);
    let mut rules = Rules::ALL;
    rules.deadline_verdict_after_record = rule;
    p.node(A).set_rules(rules);
    let m = p.send(A, payload(0));
    p.drain(A);
    assert_eq!(
        p.nodes[A].stored_msgs,
        [m],
        "M is stored, waiting for slots"
    );
    p.nodes[A].auto_sync = false;
    let now = p.now;
    let v = p.node(A).abandon(now, exon_testkit::pair::id(B), m);
    p.drain(A);
    let told = v == Some(Abandoned::NotDelivered) || p.nodes[A].not_delivered.contains(&m);
    crash_and_recover_under(&mut p, A, rules);
    p.nodes[A].auto_sync = true;
    p.run(Duration::from_secs(20));
    let told = told || p.nodes[A].not_delivered.contains(&m);
    (
        v,
        told,
        unflagged(&p, B).get(&payload(0)).copied().unwrap_or(0),
    )
}

#[test]
fn a_deadline_verdict_is_reported_once_its_record_is_stored() {
    // With the rule: nothing reported before the crash; M recovered, delivered once and
    // acknowledged.
    let (v, told, delivered) = abandon_then_crash_before_the_record(true);
    assert_eq!(v, Some(Abandoned::Pending));
    assert!(!told, "never told not delivered");
    assert_eq!(delivered, 1);
    // Without: told not delivered at once, and delivered after the restart.
    let (v, told, delivered) = abandon_then_crash_before_the_record(false);
    assert_eq!(v, Some(Abandoned::NotDelivered));
    assert!(
        told && delivered == 1,
        "without the rule a message reported not delivered is delivered"
    );
}

#[test]
fn a_deadline_verdict_comes_as_an_event_once_stored() {
    let mut p = durable_pair(true, true);
    let m = p.send(A, payload(0));
    p.drain(A);
    p.nodes[A].auto_sync = false;
    let now = p.now;
    let v = p.node(A).abandon(now, exon_testkit::pair::id(B), m);
    assert_eq!(v, Some(Abandoned::Pending));
    p.drain(A);
    assert!(p.nodes[A].not_delivered.is_empty(), "not before the record");
    p.nodes[A].auto_sync = true;
    p.sync(A);
    assert_eq!(p.nodes[A].not_delivered, [m]);
    p.run(Duration::from_secs(20));
    assert!(p.nodes[B].delivered.is_empty());
    assert!(
        p.nodes[A].journal.is_empty(),
        "the verdict is reported: forgotten"
    );
}

/// A sends M, B takes it; A's journal stops syncing until the `Resolved` record of M's
/// acknowledgement is written (not synced). Returns M.
fn acknowledged_unsynced(p: &mut Pair) -> exon::proto::MsgId {
    let m = p.send(A, payload(0));
    step_until(p, |p| p.nodes[B].delivered.len() == 1);
    p.nodes[A].auto_sync = false;
    let resolved = |p: &Pair| {
        p.nodes[A]
            .unsynced
            .iter()
            .any(|w| matches!(w.entry, Entry::Resolved { .. }))
    };
    step_until(p, resolved);
    m
}

/// Issue 44, item 4: B takes M; A's `Resolved` record of M's acknowledgement reaches the
/// disk, and A crashes before it is told so (the verdict never handed out). Returns A's
/// acknowledgements after its restart, and whether its journal is empty at the end.
fn verdict_stored_then_crash(rule: bool) -> (Vec<exon::proto::MsgId>, bool) {
    let mut p = durable_pair(true, true);
    let mut rules = Rules::ALL;
    rules.report_stored_verdicts = rule;
    p.node(A).set_rules(rules);
    let m = acknowledged_unsynced(&mut p);
    assert!(p.nodes[A].acked.is_empty(), "not reported yet");
    // The commit reaches the disk; the crash comes before the node is told.
    let side = &mut p.nodes[A];
    for w in side.unsynced.drain(..) {
        side.journal.apply(&w.entry);
    }
    crash_and_recover_under(&mut p, A, rules);
    p.nodes[A].auto_sync = true;
    p.run(Duration::from_secs(20));
    let acked = p.nodes[A].acked.clone();
    assert!(acked.iter().all(|&a| a == m));
    (acked, p.nodes[A].journal.is_empty())
}

#[test]
fn a_verdict_stored_and_not_reported_is_reported_after_a_crash() {
    let (acked, empty) = verdict_stored_then_crash(true);
    assert_eq!(acked.len(), 1, "reported by the restarted node");
    assert!(empty, "and then forgotten");
    let (acked, empty) = verdict_stored_then_crash(false);
    assert!(acked.is_empty(), "without the rule the verdict is lost");
    assert!(empty, "forgotten all the same");
}

/// A verdict handed out whose `Reported` record is lost in a crash is reported again: the
/// same verdict, for the same id (the documented repeat).
#[test]
fn a_verdict_reported_before_its_report_is_stored_is_reported_again_the_same() {
    let mut p = durable_pair(true, true);
    let m = acknowledged_unsynced(&mut p);
    // The `Resolved` record is synced and reported; the `Reported` record is not.
    let side = &mut p.nodes[A];
    let last = side.unsynced.last().map(|w| w.seq).unwrap();
    for w in side.unsynced.drain(..) {
        side.journal.apply(&w.entry);
    }
    let now = p.now;
    p.nodes[A].node.handle_stored(now, last);
    p.drain(A);
    assert_eq!(p.nodes[A].acked, [m]);
    assert!(p.nodes[A]
        .unsynced
        .iter()
        .any(|w| matches!(w.entry, Entry::Reported { .. })));
    crash_and_recover_under(&mut p, A, Rules::ALL);
    p.nodes[A].auto_sync = true;
    p.run(Duration::from_secs(20));
    assert_eq!(p.nodes[A].acked, [m, m], "the same verdict, again");
    assert!(p.nodes[A].in_doubt.is_empty() && p.nodes[A].not_delivered.is_empty());
    assert!(p.nodes[A].journal.is_empty());
}

/// The incarnations of the tokens a datagram carries.
fn token_incarnations(w: &exon_testkit::pair::Wire) -> Vec<u64> {
    let frames = w.packet().frames;
    let r = |f: &exon::proto::Frame| match f {
        exon::proto::Frame::Token { r, .. } => Some(*r),
        _ => None,
    };
    frames.iter().filter_map(r).collect()
}

/// A stream of 301 messages from A to B, whose application takes nothing before the first
/// (as an ordered channel's receiver): the first message's token is lost, B restarts
/// (losing that incarnation), and the first message's tokens stay lost until B holds later
/// messages untaken in its new incarnation; then B answers LOST for them, and A sends them
/// again in fresh slots. Returns B's deliveries and whether the first was among them.
/// `rule`: A's `resend_beyond_slot_window`.
///
/// A's timer backs off up to `max_rto`, as when the channel test found the stall (with
/// `TimerConfig::max_backoff`'s retries every 400 ms the first message gets through in
/// this scenario with the rule off too: the stall needs the longer wait).
fn sent_again_behind_held_tokens(rule: bool) -> (usize, bool) {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut cfg = test_config();
    cfg.timers.max_backoff = cfg.timers.max_rto;
    let mut p = Pair::new(cfg);
    p.drain(A);
    p.drain(B);
    p.make_durable(B);
    let mut rules = Rules::ALL;
    rules.resend_beyond_slot_window = rule;
    p.node(A).set_rules(rules);
    // B answers LOST for the lost incarnation's slots as before issue 45 (with
    // `deliver_from_senders_copy` it delivers them from A's copies instead, flagged: the
    // incarnation is open in its journal).
    let mut b_rules = Rules::ALL;
    b_rules.deliver_from_senders_copy = false;
    p.node(B).set_rules(b_rules);
    p.nodes[B].auto_take = false;
    // Phase 1: A's tokens are lost; 2: those of the first incarnation only; 3: none.
    let phase = Rc::new(Cell::new(1));
    let first = Rc::new(Cell::new(None::<u64>));
    let (ph, fi) = (phase.clone(), first.clone());
    p.set_filter(move |w| {
        if w.from != A {
            return Fate::Deliver;
        }
        let rs = token_incarnations(w);
        let drop = match (ph.get(), rs.first()) {
            (1, Some(&r)) => {
                fi.set(fi.get().or(Some(r)));
                true
            }
            (2, _) => rs.iter().any(|r| Some(*r) == fi.get()),
            _ => false,
        };
        if drop {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let m0 = payload(0);
    p.send(A, m0.clone());
    step_until(&mut p, |_| first.get().is_some());
    p.crash_and_recover(B);
    phase.set(2);
    for i in 1..=300 {
        p.send(A, payload(i));
    }
    p.run(Duration::from_secs(5));
    phase.set(3);
    p.run(Duration::from_secs(60));
    if p.nodes[B].delivered.contains(&m0) {
        // The first is there: B takes everything from now on.
        p.nodes[B].auto_take = true;
        p.take(B, usize::MAX);
        p.run(Duration::from_secs(60));
    }
    let b = &p.nodes[B];
    (b.delivered.len(), b.delivered.contains(&m0))
}

/// Messages sent again in fresh slots ask for them beyond the slot window, which shrank
/// below the tokens the receiver holds untaken while waiting for them. Found by the
/// channel SIGKILL test (`exon-outbox/tests/channel_kill.rs`): with the rule off, a
/// durable channel stalled for good, its sender asking for no slot and its receiver taking
/// nothing before the first message.
#[test]
fn a_message_sent_again_gets_a_slot_while_later_ones_are_held_untaken() {
    assert_eq!(sent_again_behind_held_tokens(true), (301, true));
    let (delivered, first) = sent_again_behind_held_tokens(false);
    assert!(
        !first && delivered < 301,
        "rule off: {delivered} delivered, the first {first}"
    );
}

/// A message recovered from the journal without a slot goes in a fresh one as a flow's
/// message goes, never as an early token (ETOKEN): whether it was a flow's is not in the
/// journal, and an early copy of a flow's message is held by a receiver that restarts
/// until its sender's word, which a sender that gave the message up may never send again,
/// after the receiver had handed it over (the simulator's durable channels with deadlines
/// and abandon-crashes released its gap as a new number: `ChannelOrder`).
#[test]
fn a_recovered_message_is_never_sent_early() {
    let mut cfg = test_config();
    cfg.flow.early_tokens = true;
    let mut p = Pair::new(cfg);
    p.drain(A);
    p.drain(B);
    p.make_durable(A);
    p.make_durable(B);
    p.nodes[A].auto_sync = false;
    p.send(A, payload(0));
    p.sync(A); // the message is stored; it has no slot yet
    p.crash_and_recover(A);
    let early = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let seen = early.clone();
    p.set_filter(move |w| {
        let is_early = |f: &exon::proto::Frame| matches!(f, exon::proto::Frame::EarlyToken { .. });
        if w.from == A && w.packet().frames.iter().any(is_early) {
            seen.set(seen.get() + 1);
        }
        Fate::Deliver
    });
    // A's slot records are not synced yet: an early token would go now.
    p.run(Duration::from_millis(200));
    p.nodes[A].auto_sync = true;
    p.sync(A);
    p.run(Duration::from_secs(10));
    assert_eq!(unflagged(&p, B)[&payload(0)], 1, "delivered once");
    assert_eq!(early.get(), 0, "the recovered message went early");
}

/// Campaign 129: A's first messages have slots at B, their tokens never arrive, and A
/// gives them up: its frontier passes their slots, which B's record (kept by a delivery
/// its application holds: the first of the later ones, so that B forgot nothing below
/// the frontier, or the last) waives unfilled. A is then restored from a copy of its
/// directory taken before, which still has the messages in those slots, and sends them
/// again; with `b_crash`, B (durable) crashed and restarted before that, so no record
/// knows the slots and its journal answers. Returns how many of them A heard acknowledged
/// and how many B delivered then, with B durable or not and B's rule
/// `doubt_below_forgotten` as given.
fn restored_sender_in_waived_slots(
    b_durable: bool,
    hold_first: bool,
    b_crash: bool,
    rule: bool,
) -> (usize, usize) {
    use exon::proto::Frame;
    let mut p = durable_pair(true, b_durable);
    let mut rules = Rules::ALL;
    rules.doubt_below_forgotten = rule;
    p.node(B).set_rules(rules);
    let deaf = std::rc::Rc::new(std::cell::Cell::new(true));
    let d = deaf.clone();
    p.set_filter(move |w| {
        let token = |f: &Frame| matches!(f, Frame::Token { .. } | Frame::Frag { .. });
        if w.from == A && d.get() && w.packet().frames.iter().any(token) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let lost: Vec<_> = (0..4).map(|i| p.send(A, payload(i))).collect();
    step_until(&mut p, |p| p.nodes[A].node.stats().frames_out.token >= 4);
    p.sync(A);
    let copy = p.nodes[A].journal.clone();
    let now = p.now;
    for &m in &lost {
        assert!(p.node(A).abandon(now, id(B), m).is_some(), "given up");
    }
    p.drain(A);
    // The path heals; more messages than the grant left room for go, so A asks for
    // slots with a frontier past those given up.
    deaf.set(false);
    p.nodes[B].auto_take = false;
    let later = 200;
    for i in 10..10 + later {
        p.send(A, payload(i));
    }
    let delivered = loop {
        p.run(Duration::from_millis(50));
        let n = p.nodes[B].untaken.len();
        let all = p.nodes[B].delivered.len() == later;
        if hold_first {
            // B holds the first of them: A's frontier stays at its slot.
            let now = p.now;
            let rest = if n > 0 {
                p.nodes[B].untaken.split_off(1)
            } else {
                vec![]
            };
            for d in rest {
                assert!(p.node(B).handle_taken(now, d));
            }
            p.drain(B);
        } else {
            p.take(B, n - usize::from(all));
        }
        if all {
            break p.nodes[B].delivered.clone();
        }
    };
    p.run(Duration::from_secs(1));
    assert_eq!(
        p.nodes[A].acked.len(),
        later - 1,
        "one held, so not acknowledged"
    );
    if b_crash {
        p.sync(B);
        p.crash_and_recover(B);
        p.node(B).set_rules(rules);
    }
    // A is restored from the copy: the given-up messages are in their old slots again.
    p.crash_and_recover_with(A, copy, false);
    p.run(Duration::from_secs(30));
    let again = p.nodes[B].delivered.len() - delivered.len();
    let acked = lost.iter().filter(|m| p.nodes[A].acked.contains(m));
    (acked.count(), again)
}

#[test]
fn a_restored_sender_in_slots_its_frontier_waived_is_not_told_delivered() {
    for (b_durable, hold_first) in [(true, true), (true, false), (false, false)] {
        let case = format!("durable receiver {b_durable}, first held {hold_first}");
        assert_eq!(
            restored_sender_in_waived_slots(b_durable, hold_first, false, true),
            (0, 0),
            "{case}: in doubt, not acknowledged, not delivered"
        );
        assert_eq!(
            restored_sender_in_waived_slots(b_durable, hold_first, false, false),
            (4, 0),
            "{case}: without the rule, ACKs of slots never filled"
        );
    }
}

/// The same with B restarted in between (nothing below the frontier was taken, so only
/// the frontier itself tells B's journal that A holds nothing there): B's journal keeps
/// the frontier it heard (a `Confirmed` record), and the restored A's messages end in
/// doubt. With the rule off B answers LOST and they are delivered after all: had A's
/// lost run moved them to later slots and had them delivered there, a second time.
#[test]
fn a_durable_receiver_keeps_the_frontiers_it_heard_across_its_restart() {
    assert_eq!(
        restored_sender_in_waived_slots(true, true, true, true),
        (0, 0)
    );
    assert_eq!(
        restored_sender_in_waived_slots(true, true, true, false),
        (0, 4)
    );
}

/// A durable receiver journals the frontiers of its sources (above), but a source with no
/// record there only raises its frontier in memory: a plaintext forger sending frontiers
/// in the names of many ids cannot make the journal write a record per datagram.
#[test]
fn frontiers_from_sources_without_a_record_write_nothing() {
    use exon::proto::frame::Header;
    use exon::proto::{Frame, Packet};
    let mut p = durable_pair(false, true);
    p.nodes[B].auto_sync = false;
    p.sync(B);
    let before = p.nodes[B].unsynced.len();
    for k in 0..200u64 {
        let forged = Packet {
            header: Header::new(id(10 + k as usize), id(B)),
            frames: vec![Frame::ReqSlots {
                s: 5000 + k,
                n: 0,
                l: 5000 + k,
            }],
        };
        p.inject(B, forged.encode());
    }
    let confirmed = p.nodes[B].unsynced[before..]
        .iter()
        .filter(|w| matches!(w.entry, Entry::Confirmed { .. }))
        .count();
    assert_eq!(confirmed, 0);
}

/// A durable A's tokens leave before its records are stored (ETOKEN) and B holds them for
/// A's word (STORED), which never reaches B; A stores the messages (the copy of its
/// directory is taken then) and gives them up. B durable as given, its rule
/// `dropped_unseen_doubt` as given. Returns the pair, the four messages and A's copy: A's
/// next frontier will pass their slots, so B drops the early deliveries unseen.
fn early_deliveries_of_a_copied_sender(b_durable: bool, rule: bool) -> (Pair, Vec<MsgId>, State) {
    use exon::proto::Frame;
    let mut p = durable_pair(true, b_durable);
    let mut rules = Rules::ALL;
    rules.dropped_unseen_doubt = rule;
    p.node(B).set_rules(rules);
    let deaf = std::rc::Rc::new(std::cell::Cell::new(false));
    let d = deaf.clone();
    p.set_filter(move |w| {
        // A's word is lost, and so is every copy of a token after the first.
        let word = |f: &Frame| {
            matches!(
                f,
                Frame::Stored { .. } | Frame::Token { .. } | Frame::Frag { .. }
            ) || (d.get() && matches!(f, Frame::EarlyToken { .. }))
        };
        if w.from == A && w.packet().frames.iter().any(word) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.nodes[A].auto_sync = false;
    let lost: Vec<_> = (0..4).map(|i| p.send(A, payload(i))).collect();
    p.sync(A); // accepted; their slots come with the SLOTS
    step_until(&mut p, |p| p.nodes[B].node.early_parked() == 4);
    deaf.set(true);
    p.nodes[A].auto_sync = true;
    p.sync(A); // stored: the word is lost
    let copy = p.nodes[A].journal.clone();
    let now = p.now;
    for &m in &lost {
        assert!(p.node(A).abandon(now, id(B), m).is_some(), "given up");
    }
    p.run(Duration::from_millis(50));
    (p, lost, copy)
}

/// A, restored from `copy`, sends the four `lost` messages again in their slots. Returns
/// how many of them A heard acknowledged, and how many B handed over again.
fn restore_and_count(mut p: Pair, lost: &[MsgId], copy: State) -> (usize, usize) {
    let handed = p.nodes[B].delivered.len();
    p.crash_and_recover_with(A, copy, false);
    p.run(Duration::from_secs(5));
    let acked = lost.iter().filter(|m| p.nodes[A].acked.contains(m)).count();
    let lost_payloads: Vec<_> = (0..4).map(payload).collect();
    let again = p.nodes[B].delivered[handed..]
        .iter()
        .filter(|d| lost_payloads.contains(d))
        .count();
    (acked, again)
}

/// `early_deliveries_of_a_copied_sender`, B not durable (a durable one answers DOUBT there
/// from its forgotten frontier anyway): B drops the early deliveries unseen, and A restored
/// from the copy sends them again in the same slots while B's record of A lives on.
/// Returns how many A heard acknowledged and how many B handed over.
fn restored_sender_in_dropped_early_slots(rule: bool) -> (usize, usize) {
    let (mut p, lost, copy) = early_deliveries_of_a_copied_sender(false, rule);
    // More messages, filling the grant: A's next request carries a frontier past the four.
    p.set_filter(|_| Fate::Deliver);
    p.nodes[B].auto_take = false;
    for i in 10..210 {
        p.send(A, payload(i));
    }
    step_until(&mut p, |p| p.nodes[B].node.stats().early_dropped == 4);
    // B holds one of the later messages untaken: its record of A lives on.
    assert!(p.nodes[B].node.receiver_records() > 0, "B's record lives");
    restore_and_count(p, &lost, copy)
}

/// `exon-sim/tests/cli.rs::early_deliveries_dropped_unseen_end_in_doubt_for_a_restored_sender`
/// in the core: B answered the restored A's tokens in slots whose early deliveries it had
/// dropped unseen as duplicates of deliveries, ACK. With the rule the slots count as
/// waived: DOUBT, and none of the four is reported delivered.
#[test]
fn a_restored_sender_is_not_told_delivered_what_was_dropped_unseen() {
    assert_eq!(restored_sender_in_dropped_early_slots(true), (0, 0));
    assert_eq!(restored_sender_in_dropped_early_slots(false), (4, 0));
}

/// The archive's half of `dropped_unseen_doubt`: as above, but B is durable and its record
/// of A is gone by the time the restored A sends again. B dropped the four early
/// deliveries unseen at A's frontier and stored their takes after the frontier's
/// `Confirmed`, so its journal's archive still holds them (until a probe brings A's
/// frontier again: every probe is lost here). The restored A's tokens in those slots are
/// answered from the archive. Returns how many of the four A heard acknowledged, how many
/// B handed over again, and whether B's record of A was gone when A came back.
fn restored_sender_answered_from_the_archive(rule: bool) -> (usize, usize, bool) {
    use exon::proto::Frame;
    let (mut p, lost, copy) = early_deliveries_of_a_copied_sender(true, rule);
    // More messages, filling the grant: A's next request carries a frontier past the four.
    // Once B dropped them, no later frontier of A reaches B (every request for slots is
    // lost), nor does any probe of B's archive (SLOTS granting nothing).
    let frozen = std::rc::Rc::new(std::cell::Cell::new(false));
    let f = frozen.clone();
    p.set_filter(move |w| {
        let lost = |fr: &Frame| match fr {
            Frame::Slots { n: 0, .. } => w.from == B,
            Frame::ReqSlots { .. } => w.from == A && f.get(),
            _ => false,
        };
        if w.packet().frames.iter().any(lost) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    for i in 10..210 {
        p.send(A, payload(i));
    }
    step_until(&mut p, |p| p.nodes[B].node.stats().early_dropped == 4);
    frozen.set(true);
    // Everything settles, and B, idle, forgets its record of A.
    p.run(Duration::from_secs(120));
    let record_gone = p.nodes[B].node.receiver_records() == 0;
    let (acked, again) = restore_and_count(p, &lost, copy);
    (acked, again, record_gone)
}

/// A durable receiver whose record of the sender is gone answers a restored sender's
/// tokens in slots whose early deliveries it dropped unseen from its journal's archive:
/// the take stored after the frontier that passed them answered ACK; with the rule,
/// DOUBT (`Rules::dropped_unseen_doubt`, `journal_verdict`).
#[test]
fn a_restored_sender_is_not_told_delivered_from_the_archive() {
    assert_eq!(
        restored_sender_answered_from_the_archive(true),
        (0, 0, true)
    );
    assert_eq!(
        restored_sender_answered_from_the_archive(false),
        (4, 0, true)
    );
}
