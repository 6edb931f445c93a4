//! Marks (`Node::send_marked`, `Node::handle_taken_marked`, `Node::set_mark`): small values
//! the layers above keep in the journal under a peer and a lane, in the same record as the
//! send or the take they go with. The endpoint's durable channels and streams keep their
//! positions in them, so these are the properties those rely on: the last value survives
//! restarts and compaction, a mark and its message (or take) are kept together at every
//! crash point (the rule `mark_in_one_record`), and marks are bounded.

use std::time::Duration;

use bytes::Bytes;
use exon::proto::journal::{Mark, State, MAX_MARK_BYTES};
use exon::proto::{MarkError, Rules, SendError};
use exon_testkit::pair::{id, test_config, Fate, Pair, A, B};

const LANE: u64 = 9;

fn durable_pair() -> Pair {
    let mut p = Pair::new(test_config());
    p.drain(A);
    p.drain(B);
    p.make_durable(A);
    p.make_durable(B);
    p
}

fn mark(v: &[u8]) -> Mark {
    Mark {
        lane: LANE,
        value: Bytes::copy_from_slice(v),
    }
}

fn value_in(s: &State, peer: exon::NodeId) -> Option<Bytes> {
    s.marks()
        .find(|(p, l, _)| *p == peer && *l == LANE)
        .map(|(_, _, v)| v.clone())
}

#[test]
fn the_last_mark_survives_restarts_and_compaction_and_an_empty_one_forgets() {
    let mut p = durable_pair();
    let now = p.now;
    for k in 1..=5u8 {
        let m = p.nodes[A]
            .node
            .send_marked(now, id(B), vec![k], true, mark(&[k]));
        assert!(m.is_ok(), "{m:?}");
    }
    p.drain(A);
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[A].acked.len(), 5);
    p.crash_and_recover(A);
    let got = |p: &Pair| p.nodes[A].node.mark(id(B), LANE).cloned();
    assert_eq!(got(&p), Some(Bytes::from_static(&[5])));
    // A checkpoint (the state rebuilt from its live records) keeps the mark alone.
    let mut compacted = State::new();
    for e in p.nodes[A].journal.live_entries() {
        compacted.apply(&e);
    }
    assert!(compacted.is_empty(), "every message resolved");
    p.crash_and_recover_with(A, compacted, false);
    assert_eq!(got(&p), Some(Bytes::from_static(&[5])));
    // Forgotten, for good.
    p.nodes[A]
        .node
        .set_mark(id(B), mark(&[]))
        .expect("a durable node");
    p.drain(A);
    assert_eq!(got(&p), None);
    p.crash_and_recover(A);
    assert_eq!(got(&p), None);
    assert_eq!(p.nodes[A].node.marks().count(), 0);
}

/// Node B takes one delivery with a mark, its records unsynced; returns, for every prefix
/// of those records that a crash could keep, whether the take and the mark were kept
/// together (both or neither).
fn take_kept_with_its_mark(rule: bool) -> Vec<bool> {
    let mut p = durable_pair();
    let mut rules = Rules::ALL;
    rules.mark_in_one_record = rule;
    p.node(B).set_rules(rules);
    p.nodes[B].auto_take = false;
    let now = p.now;
    p.nodes[A].node.send(now, id(B), &b"m"[..]).unwrap();
    p.drain(A);
    p.run(Duration::from_secs(1));
    let d = p.nodes[B].untaken.pop().expect("delivered");
    p.nodes[B].auto_sync = false;
    let now = p.now;
    let taken = p.nodes[B].node.handle_taken_marked(now, d, mark(&[1]));
    assert_eq!(taken, Ok(true));
    p.drain(B);
    let writes = p.nodes[B].unsynced.clone();
    assert!(!writes.is_empty());
    (0..=writes.len())
        .map(|k| {
            let mut s = p.nodes[B].journal.clone();
            for w in &writes[..k] {
                s.apply(&w.entry);
            }
            // The take's record (the delivery itself has none: its sender keeps the copy).
            let is_taken = s
                .recovered(false)
                .deliveries
                .iter()
                .any(|d| d.payload.is_none());
            is_taken == value_in(&s, id(A)).is_some()
        })
        .collect()
}

#[test]
fn a_take_and_its_mark_are_kept_together_at_every_crash_point() {
    assert!(take_kept_with_its_mark(true).iter().all(|&ok| ok));
    // The rule off: a crash between the two records keeps the mark without the take.
    assert!(take_kept_with_its_mark(false).contains(&false));
}

/// As `take_kept_with_its_mark`, for a message sent with a mark.
fn send_kept_with_its_mark(rule: bool) -> Vec<bool> {
    let mut p = durable_pair();
    let mut rules = Rules::ALL;
    rules.mark_in_one_record = rule;
    p.node(A).set_rules(rules);
    p.nodes[A].auto_sync = false;
    p.set_filter(|_| Fate::Drop);
    let now = p.now;
    p.nodes[A]
        .node
        .send_marked(now, id(B), &b"m"[..], false, mark(&[1]))
        .unwrap();
    p.drain(A);
    let writes = p.nodes[A].unsynced.clone();
    (0..=writes.len())
        .map(|k| {
            let mut s = p.nodes[A].journal.clone();
            for w in &writes[..k] {
                s.apply(&w.entry);
            }
            let kept = !s.recovered(false).messages.is_empty();
            kept == value_in(&s, id(B)).is_some()
        })
        .collect()
}

#[test]
fn a_message_and_its_mark_are_kept_together_at_every_crash_point() {
    assert!(send_kept_with_its_mark(true).iter().all(|&ok| ok));
    assert!(send_kept_with_its_mark(false).contains(&false));
}

#[test]
fn marks_need_durable_mode_are_small_and_bounded() {
    let mut plain = Pair::new(test_config());
    let now = plain.now;
    let r = plain.nodes[A]
        .node
        .send_marked(now, id(B), vec![1], false, mark(&[1]));
    assert_eq!(r, Err(SendError::Mark(MarkError::NotDurable)));
    assert_eq!(
        plain.nodes[A].node.set_mark(id(B), mark(&[1])),
        Err(MarkError::NotDurable)
    );

    let mut cfg = test_config();
    cfg.limits.max_marks = 2;
    let mut p = Pair::new(cfg);
    p.drain(A);
    p.make_durable(A);
    let n = &mut p.nodes[A].node;
    let long = vec![0; MAX_MARK_BYTES + 1];
    assert_eq!(
        n.set_mark(id(B), mark(&long)),
        Err(MarkError::TooLarge {
            len: MAX_MARK_BYTES + 1,
            max: MAX_MARK_BYTES
        })
    );
    let lane = |lane: u64, v: &[u8]| Mark {
        lane,
        value: Bytes::copy_from_slice(v),
    };
    assert_eq!(n.set_mark(id(B), lane(1, &[1])), Ok(()));
    assert_eq!(n.set_mark(id(B), lane(2, &[1])), Ok(()));
    assert_eq!(n.set_mark(id(B), lane(3, &[1])), Err(MarkError::TooMany(2)));
    assert_eq!(
        n.set_mark(id(B), lane(2, &[2])),
        Ok(()),
        "a mark kept changes"
    );
    assert_eq!(n.set_mark(id(B), lane(1, &[])), Ok(()));
    assert_eq!(
        n.set_mark(id(B), lane(3, &[1])),
        Ok(()),
        "room once one is forgotten"
    );
    assert_eq!(n.marks().count(), 2);
}
