//! Durable mode (`Node::recover`, the journal): exactly-once across crashes of either side,
//! with the journal's records lost when unsynced, and each journal rule shown to matter by
//! switching it off.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use exon::proto::Rules;
use exon_testkit::pair::{test_config, Fate, Pair, A, B};

fn payload(i: usize) -> Bytes {
    // Three to a datagram: a stream spans many datagrams.
    Bytes::from(format!("message {i:<300}"))
}

/// Unflagged deliveries per payload at node `i` (a redelivery is flagged).
fn unflagged(p: &Pair, i: usize) -> HashMap<Bytes, usize> {
    let mut count: HashMap<Bytes, usize> = HashMap::new();
    for d in &p.nodes[i].delivered {
        *count.entry(d.clone()).or_default() += 1;
    }
    for d in &p.nodes[i].redelivered {
        *count.entry(d.clone()).or_default() -= 1;
    }
    count
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
        // Without a journal a restart keeps only the clock.
        let side = &mut p.nodes[B];
        let cfg = side.node.config().clone();
        side.node = exon::proto::Node::new(
            exon_testkit::pair::id(B),
            exon::proto::Security::InsecurePlaintext,
            cfg,
            side.stored,
        )
        .unwrap();
        side.untaken.clear();
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
    // The three not taken come back flagged, with the ids they had.
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
