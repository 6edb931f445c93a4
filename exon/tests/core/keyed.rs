//! Keyed sends (`Node::send_keyed`): the journal keeps the highest application key accepted
//! per destination, so an application that sends its unconfirmed outbox rows again after a
//! crash never makes a duplicate, whatever moment the crash hit: before the message's record
//! was synced (accepted again), after (refused, the message recovered), or after its verdict
//! (refused, the message settled: the sender's gap that unkeyed sends fall into).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use exon::proto::SendError;
use exon_testkit::pair::{id, test_config, Pair, A, B};

fn row(key: u64) -> Bytes {
    Bytes::from(format!("outbox row {key}"))
}

fn durable_pair() -> Pair {
    let mut p = Pair::new(test_config());
    p.drain(A);
    p.drain(B);
    p.make_durable(A);
    p.make_durable(B);
    p
}

/// A's application sends outbox rows `keys` to B with their keys; returns the refusals.
fn send_rows(p: &mut Pair, keys: impl IntoIterator<Item = u64>) -> Vec<SendError> {
    let now = p.now;
    let mut refused = Vec::new();
    for key in keys {
        match p.nodes[A].node.send_keyed(now, id(B), key, row(key)) {
            Ok(_) => {}
            Err(e) => refused.push(e),
        }
    }
    p.drain(A);
    refused
}

/// How many times B's application was handed each row (redeliveries not counted).
fn deliveries(p: &Pair) -> HashMap<Bytes, i64> {
    let mut n: HashMap<Bytes, i64> = HashMap::new();
    for d in &p.nodes[B].delivered {
        *n.entry(d.clone()).or_default() += 1;
    }
    for d in &p.nodes[B].redelivered {
        *n.entry(d.clone()).or_default() -= 1;
    }
    n
}

fn assert_each_once(p: &Pair, keys: std::ops::RangeInclusive<u64>) {
    let n = deliveries(p);
    for k in keys.clone() {
        assert_eq!(n.get(&row(k)), Some(&1), "row {k}: {n:?}");
    }
    assert_eq!(n.len(), keys.count(), "{n:?}");
}

fn not_above(key: u64, highest: u64) -> SendError {
    SendError::KeyNotAbove {
        to: id(B),
        key,
        highest,
    }
}

#[test]
fn a_row_sent_again_after_its_verdict_and_a_crash_is_refused_not_duplicated() {
    let mut p = durable_pair();
    assert!(send_rows(&mut p, 1..=10).is_empty());
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[A].acked.len(), 10, "every row acknowledged");
    // The application crashes before it noted the verdicts: it sends every row again.
    p.crash_and_recover(A);
    let refused = send_rows(&mut p, 1..=10);
    assert_eq!(
        refused,
        (1..=10).map(|k| not_above(k, 10)).collect::<Vec<_>>()
    );
    assert!(send_rows(&mut p, [11]).is_empty(), "the next row goes");
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 1..=11);
}

#[test]
fn a_row_stored_and_not_yet_acknowledged_is_recovered_and_refused() {
    let mut p = durable_pair();
    // B hears nothing before A crashes: the rows are stored, not sent.
    p.set_filter(|_| exon_testkit::pair::Fate::Drop);
    assert!(send_rows(&mut p, 1..=5).is_empty());
    p.crash_and_recover(A);
    p.set_filter(|_| exon_testkit::pair::Fate::Deliver);
    let refused = send_rows(&mut p, 1..=5);
    assert_eq!(refused.len(), 5, "{refused:?}");
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 1..=5);
}

#[test]
fn a_row_whose_record_was_not_synced_is_accepted_again() {
    let mut p = durable_pair();
    p.nodes[A].auto_sync = false;
    p.set_filter(|_| exon_testkit::pair::Fate::Drop);
    assert!(send_rows(&mut p, 1..=5).is_empty());
    // The crash loses the unsynced records: nothing was stored, nothing may be refused.
    p.crash_and_recover(A);
    p.nodes[A].auto_sync = true;
    p.set_filter(|_| exon_testkit::pair::Fate::Deliver);
    assert!(send_rows(&mut p, 1..=5).is_empty());
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 1..=5);
}

#[test]
fn keys_out_of_order_are_refused_and_keys_are_per_destination() {
    let mut p = durable_pair();
    assert!(send_rows(&mut p, [7]).is_empty());
    assert_eq!(
        send_rows(&mut p, [5, 7]),
        vec![not_above(5, 7), not_above(7, 7)]
    );
    assert!(send_rows(&mut p, [8]).is_empty());
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 7..=8);
}

#[test]
fn keyed_sends_need_durable_mode() {
    let mut p = Pair::new(test_config());
    let now = p.now;
    let r = p.nodes[A].node.send_keyed(now, id(B), 1, row(1));
    assert_eq!(r, Err(SendError::NotDurable));
}

#[test]
fn keys_outlive_compaction_and_many_restarts() {
    let mut p = durable_pair();
    for round in 0..5u64 {
        let keys = round * 10 + 1..=round * 10 + 10;
        assert!(send_rows(&mut p, keys.clone()).is_empty());
        p.run(Duration::from_secs(5));
        // A compaction keeps what is live: the journal's state rebuilt from its own live
        // records (a checkpoint) holds the keys, though every message is resolved.
        let live: Vec<_> = p.nodes[A].journal.live_entries().collect();
        let mut compacted = exon::proto::journal::State::new();
        for e in &live {
            compacted.apply(e);
        }
        assert!(compacted.is_empty(), "only the coverage and the keys stay");
        p.crash_and_recover_with(A, compacted, false);
        let refused = send_rows(&mut p, keys.clone());
        assert_eq!(refused.len(), 10, "round {round}: {refused:?}");
    }
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 1..=50);
}

fn forgotten() -> SendError {
    SendError::KeysForgotten { to: id(B) }
}

/// A journal rebuilt from the live records of `p`'s node A (a compaction's checkpoint).
fn compacted(p: &Pair) -> exon::proto::journal::State {
    let mut c = exon::proto::journal::State::new();
    for e in p.nodes[A].journal.live_entries() {
        c.apply(&e);
    }
    c
}

/// Rows 1..=10 sent and acknowledged; then A restarts with its journal's records lost as
/// `lose` says (damaged, or replaced by a new one), and its application sends every row
/// again, as an outbox does after a crash. Returns the refusals.
fn rows_after_journal_loss(p: &mut Pair, lose: impl FnOnce(&mut Pair)) -> Vec<SendError> {
    assert!(send_rows(p, 1..=10).is_empty());
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[A].acked.len(), 10);
    lose(p);
    send_rows(p, 1..=10)
}

/// Rule `forgotten_keys_refused`: a damaged journal may have lost the records of keys it
/// had accepted, so it cannot tell a row it sent from a new one. Keyed sends are refused
/// (`KeysForgotten`), across later restarts and compactions too, until the application
/// settles the destination's keys; then the keys up to the floor count as accepted and the
/// next row goes. Every row is delivered once.
#[test]
fn a_damaged_journal_refuses_keyed_sends_until_their_keys_are_settled() {
    let mut p = durable_pair();
    let refused = rows_after_journal_loss(&mut p, |p| {
        // The damage took every record: only the clock is left.
        p.crash_and_recover_with(A, exon::proto::journal::State::new(), true);
    });
    assert_eq!(refused, vec![forgotten(); 10]);
    assert!(p.nodes[A].node.keys_forgotten(id(B)));
    // Another restart, and one from a checkpoint: still refused (the journal says so).
    p.crash_and_recover(A);
    assert_eq!(send_rows(&mut p, [3]), vec![forgotten()]);
    let c = compacted(&p);
    p.crash_and_recover_with(A, c, false);
    assert_eq!(send_rows(&mut p, [3]), vec![forgotten()]);
    // The application learns that its receiver has rows up to 10, and settles.
    p.nodes[A].node.settle_keys(id(B), 10).unwrap();
    assert!(!p.nodes[A].node.keys_forgotten(id(B)));
    assert_eq!(
        send_rows(&mut p, [4, 10]),
        vec![not_above(4, 10), not_above(10, 10)]
    );
    assert!(send_rows(&mut p, [11]).is_empty(), "the next row goes");
    // The settlement outlives a restart and a compaction.
    p.run(Duration::from_secs(5));
    p.crash_and_recover(A);
    assert_eq!(send_rows(&mut p, [11]), vec![not_above(11, 11)]);
    let c = compacted(&p);
    p.crash_and_recover_with(A, c, false);
    assert_eq!(send_rows(&mut p, [11]), vec![not_above(11, 11)]);
    assert!(send_rows(&mut p, [12]).is_empty());
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 1..=12);
}

/// A journal deleted or replaced while the clock was kept (the storage says so,
/// `Recovered::replaced`): the same refusal, per destination, and a destination settled
/// is not settled for another.
#[test]
fn a_new_journal_for_a_node_that_ran_before_refuses_keyed_sends_until_settled() {
    let mut p = durable_pair();
    let refused = rows_after_journal_loss(&mut p, |p| p.crash_with_new_journal(A));
    assert_eq!(refused, vec![forgotten(); 10]);
    p.nodes[A].node.settle_keys(id(B), 10).unwrap();
    let now = p.now;
    let other = exon::proto::NodeId::from_const(77);
    assert_eq!(
        p.nodes[A].node.send_keyed(now, other, 1, row(1)),
        Err(SendError::KeysForgotten { to: other }),
        "settled per destination"
    );
    assert!(send_rows(&mut p, [11]).is_empty());
    p.run(Duration::from_secs(5));
    assert_each_once(&p, 1..=11);
    // A journal that forgot nothing refuses nothing: a first start is not a replacement.
    let fresh = durable_pair();
    assert!(!fresh.nodes[A].node.keys_forgotten(id(B)));
}

/// The rule switched off: the journal that forgot its keys accepts every row again as a
/// new message, and the receiver gets each twice (what the rule exists to prevent).
#[test]
fn without_the_rule_a_forgotten_key_is_a_second_delivery() {
    for replaced in [false, true] {
        let mut p = durable_pair();
        let refused = rows_after_journal_loss(&mut p, |p| {
            if replaced {
                p.crash_with_new_journal(A);
            } else {
                p.crash_and_recover_with(A, exon::proto::journal::State::new(), true);
            }
            let mut rules = exon::proto::Rules::default();
            rules.forgotten_keys_refused = false;
            p.node(A).set_rules(rules);
        });
        assert!(refused.is_empty());
        p.run(Duration::from_secs(5));
        let n = deliveries(&p);
        assert!(
            (1..=10).all(|k| n.get(&row(k)) == Some(&2)),
            "replaced {replaced}: {n:?}"
        );
    }
}
