//! `Node::reply_many`: requests answered together, each as `Node::reply` would answer it
//! alone (taken once, answered once), plaintext in one call and durable one by one.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use exon::proto::{DeliveryId, Payload, SendError};
use exon_testkit::pair::{test_config, Pair, A, B};

/// A sends `n` requests to B, whose application holds them (not taken).
fn requested(n: usize, durable: bool) -> Pair {
    let mut p = Pair::new(test_config());
    if durable {
        p.make_durable(B);
    }
    p.nodes[B].auto_take = false;
    for i in 0..n as u32 {
        p.send(A, i.to_be_bytes().to_vec());
    }
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[B].untaken.len(), n);
    p
}

/// The reply to request `d`: its own bytes, reversed.
fn reply_to(p: &Pair, i: usize) -> Payload {
    let mut v = p.nodes[B].delivered[i].to_vec();
    v.reverse();
    Bytes::from(v).into()
}

/// The replies A got, sorted.
fn replies(p: &Pair) -> Vec<Bytes> {
    let mut r: Vec<Bytes> = p.nodes[A].delivered.clone();
    r.sort();
    r
}

/// Every reply A should get for requests `0..n`, sorted.
fn expected(n: usize) -> Vec<Bytes> {
    let mut r: Vec<Bytes> = (0..n as u32)
        .map(|i| {
            let mut v = i.to_be_bytes().to_vec();
            v.reverse();
            Bytes::from(v)
        })
        .collect();
    r.sort();
    r
}

/// Requests answered together, in an order other than their arrival's: each taken once
/// and answered once, with consecutive ids, and a request answered again is refused.
#[test]
fn replies_answered_together_take_each_request_once() {
    for durable in [false, true] {
        let n = 12;
        let mut p = requested(n, durable);
        let ids: Vec<DeliveryId> = p.nodes[B].untaken.clone();
        // Out of order: the last half first.
        let order: Vec<usize> = (n / 2..n).chain(0..n / 2).collect();
        let reqs: Vec<DeliveryId> = order.iter().map(|&i| ids[i]).collect();
        let mut q: VecDeque<Payload> = order.iter().map(|&i| reply_to(&p, i)).collect();
        let now = p.now;
        let first = p.nodes[B].node.reply_many(now, &reqs, &mut q).unwrap();
        assert!(q.is_empty(), "durable {durable}: all answered");
        let again = p.nodes[B].node.reply(now, ids[3], reply_to(&p, 3));
        assert_eq!(again, Err(SendError::NotWaiting), "durable {durable}");
        let mut q: VecDeque<Payload> = [reply_to(&p, 0)].into();
        assert_eq!(
            p.nodes[B].node.reply_many(now, &ids[..1], &mut q),
            Err(SendError::NotWaiting),
            "durable {durable}: answered already"
        );
        assert_eq!(q.len(), 1, "a refused reply's payload stays");
        p.nodes[B].untaken.clear();
        p.drain(B);
        p.run(Duration::from_secs(20));
        assert_eq!(
            p.nodes[A].acked.len(),
            n,
            "durable {durable}: requests acked"
        );
        assert_eq!(replies(&p), expected(n), "durable {durable}");
        let acked = &p.nodes[B].acked;
        assert_eq!(acked.len(), n, "durable {durable}: replies acked");
        assert!(
            (0..n as u64).all(|i| acked.contains(&exon::proto::MsgId(first.0 + i))),
            "durable {durable}: consecutive ids from the first"
        );
    }
}

/// A request named twice in one run, or one not waiting in the middle of it: the run
/// stops before it, so no request is ever answered twice, and what is left is answered or
/// refused as alone.
#[test]
fn a_request_named_twice_or_not_waiting_ends_the_run_before_it() {
    for durable in [false, true] {
        let mut p = requested(4, durable);
        let ids: Vec<DeliveryId> = p.nodes[B].untaken.clone();
        let now = p.now;
        // 2, 0, 2, 1: out of order, 2 twice.
        let reqs = [ids[2], ids[0], ids[2], ids[1]];
        let mut q: VecDeque<Payload> = [2, 0, 2, 1].iter().map(|&i| reply_to(&p, i)).collect();
        p.nodes[B].node.reply_many(now, &reqs, &mut q).unwrap();
        let mut answered = 4 - q.len();
        assert!(answered >= 1, "durable {durable}");
        // The rest, as the driver does: again from where the run stopped.
        while !q.is_empty() {
            let at = 4 - q.len();
            match p.nodes[B].node.reply_many(now, &reqs[at..], &mut q) {
                Ok(_) => answered = 4 - q.len(),
                Err(e) => {
                    assert_eq!(e, SendError::NotWaiting, "durable {durable}");
                    assert_eq!(reqs[at], ids[2], "only the second 2 is refused");
                    q.pop_front();
                }
            }
        }
        assert_eq!(answered, 4);
        p.nodes[B].untaken.clear();
        p.drain(B);
        p.run(Duration::from_secs(20));
        assert_eq!(
            replies(&p),
            expected(3),
            "durable {durable}: one reply each"
        );
        assert_eq!(p.nodes[A].acked.len(), 3);
        // Request 3 still waits: a run whose first request is not waiting answers nothing,
        // and its payloads stay.
        let mut q: VecDeque<Payload> = [reply_to(&p, 0), reply_to(&p, 3)].into();
        let now = p.now;
        assert_eq!(
            p.nodes[B].node.reply_many(now, &[ids[0], ids[3]], &mut q),
            Err(SendError::NotWaiting)
        );
        assert_eq!(q.len(), 2);
        // A request not waiting after a waiting one: the run stops before it, and its
        // payload stays.
        let mut q: VecDeque<Payload> = [reply_to(&p, 3), reply_to(&p, 0)].into();
        p.nodes[B]
            .node
            .reply_many(now, &[ids[3], ids[0]], &mut q)
            .unwrap();
        assert_eq!(
            q.len(),
            1,
            "durable {durable}: request 0 was answered before"
        );
        p.drain(B);
        p.run(Duration::from_secs(20));
        assert_eq!(
            replies(&p),
            expected(4),
            "durable {durable}: one reply each"
        );
        assert_eq!(p.nodes[A].acked.len(), 4);
    }
}

/// Replies the destination's queue has no room for are left with their requests waiting
/// (not taken): answered later, once there is room, exactly once.
#[test]
fn replies_without_room_leave_their_requests_waiting() {
    // B's queue to A holds three messages.
    let mut cfg = test_config();
    cfg.limits.max_queued_per_peer = 3;
    let mut p = Pair::with_configs(test_config(), cfg);
    p.nodes[B].auto_take = false;
    for i in 0..6u8 {
        p.send(A, vec![i]);
    }
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[B].untaken.len(), 6);
    let ids: Vec<DeliveryId> = p.nodes[B].untaken.clone();
    let big = |i: u8| -> Payload { Bytes::from(vec![i; 100]).into() };
    let mut q: VecDeque<Payload> = (0..6).map(big).collect();
    let now = p.now;
    p.nodes[B].node.reply_many(now, &ids, &mut q).unwrap();
    assert_eq!(q.len(), 3, "three found room");
    // The fourth's request still waits: taken here, by hand, and never answered.
    assert!(p.nodes[B].node.handle_taken(now, ids[3]));
    q.pop_front();
    p.nodes[B].untaken.clear();
    p.drain(B);
    p.run(Duration::from_secs(10));
    let now = p.now;
    p.nodes[B].node.reply_many(now, &ids[4..], &mut q).unwrap();
    assert!(q.is_empty());
    p.drain(B);
    p.run(Duration::from_secs(10));
    let mut got: Vec<u8> = p.nodes[A].delivered.iter().map(|d| d[0]).collect();
    got.sort();
    assert_eq!(
        got,
        [0, 1, 2, 4, 5],
        "one reply each, none for the request taken alone"
    );
    assert_eq!(p.nodes[A].acked.len(), 6);
}

/// Replies told in doubt (their caller restarted without its journal, losing the
/// incarnation whose slots they went in) come back with the verdict, each with its own
/// payload, whether answered by `reply` or `reply_many`, durable or not: the embedding
/// sends them once more without keeping a copy of every reply. A plain message's doubt
/// brings nothing back.
#[test]
fn replies_told_in_doubt_hand_their_payloads_back() {
    for durable in [false, true] {
        let n = 6;
        let mut p = requested(n, durable);
        p.nodes[A].auto_take = false;
        let ids: Vec<DeliveryId> = p.nodes[B].untaken.clone();
        let now = p.now;
        let mut sent = Vec::new();
        for (i, &d) in ids.iter().enumerate().take(2) {
            let m = p.nodes[B].node.reply(now, d, reply_to(&p, i)).unwrap();
            sent.push((m, reply_to(&p, i).to_bytes()));
        }
        let mut q: VecDeque<Payload> = (2..n).map(|i| reply_to(&p, i)).collect();
        let first = p.nodes[B].node.reply_many(now, &ids[2..], &mut q).unwrap();
        assert!(q.is_empty(), "durable {durable}");
        for i in 2..n {
            let m = exon::proto::MsgId(first.0 + (i - 2) as u64);
            sent.push((m, reply_to(&p, i).to_bytes()));
        }
        p.nodes[B].untaken.clear();
        p.drain(B);
        let plain = p.send(B, &b"not a reply"[..]);
        p.run(Duration::from_secs(2));
        assert_eq!(p.nodes[A].delivered.len(), n + 1, "durable {durable}");
        assert!(p.nodes[B].acked.is_empty(), "nothing taken at A yet");
        p.crash_with_new_journal(A);
        p.run(Duration::from_secs(30));
        let side = &p.nodes[B];
        let mut doubted = side.in_doubt.clone();
        doubted.sort();
        let mut all: Vec<_> = sent.iter().map(|(m, _)| *m).chain([plain]).collect();
        all.sort();
        assert_eq!(doubted, all, "durable {durable}: every message in doubt");
        let mut handed = side.doubted_replies.clone();
        handed.sort();
        sent.sort();
        assert_eq!(
            handed, sent,
            "durable {durable}: each reply's own payload, once"
        );
    }
}
