//! The verdicts beyond ACK, frame by frame: DOUBT after a receiver restart (its incarnations
//! died with it) and RETRY after an eviction (nothing was delivered into the incarnation).
//! Each test fails if the receiver answered ACK instead, which would acknowledge a message
//! that was never delivered.

use std::time::Instant;

use exon::proto::{Event, Frame, MsgId, NodeId};

mod frames;
use frames::*;

fn ids(evs: &[Event], pick: fn(&Event) -> Option<MsgId>) -> Vec<MsgId> {
    evs.iter().filter_map(pick).collect()
}

fn acked_id(e: &Event) -> Option<MsgId> {
    match e {
        Event::Acknowledged { id, .. } => Some(*id),
        _ => None,
    }
}

fn doubt_id(e: &Event) -> Option<MsgId> {
    match e {
        Event::InDoubt { id, .. } => Some(*id),
        _ => None,
    }
}

fn payloads(evs: &[Event]) -> Vec<Vec<u8>> {
    evs.iter()
        .filter_map(|e| match e {
            Event::Delivered { payload, .. } => Some(payload.to_vec()),
            _ => None,
        })
        .collect()
}

/// A receiver restarts from its stored clock: tokens under its old incarnation get DOUBT
/// (one of them was delivered before the crash, the others not: it cannot tell which).
/// The sender reports exactly those as in doubt, drops the dead envelopes, and the next
/// message goes through a new incarnation.
#[test]
fn restarted_receiver_answers_doubt_and_the_sender_moves_on() {
    let t = Instant::now();
    let c = cfg(8, 2, 64);
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c.clone(), 100, t);
    for m in [b"m0", b"m1", b"m2"] {
        a.send(t, B, bytes::Bytes::from_static(m)).unwrap();
    }
    feed(&mut b, t, &out(&mut a, t));
    feed(&mut a, t, &out(&mut b, t));
    let tokens = out(&mut a, t);
    assert_eq!(frames(&tokens).len(), 3, "{:?}", frames(&tokens));
    // B receives only the first datagram's first token... then crashes before its ACK.
    let first = frames(&tokens)[0].clone();
    let Frame::Token { r: r_old, .. } = first.clone() else {
        panic!("{first:?}")
    };
    feed(&mut b, t, &[packet(A, B, vec![first])]);
    assert_eq!(payloads(&events(&mut b)), [b"m0".to_vec()]);
    let hw = b.clock_high_water();
    drop(b);
    let mut b = node(B, c, hw, t);
    // Every token reaches the restarted B: none is delivered, none acknowledged.
    feed(&mut b, t, &tokens);
    assert!(payloads(&events(&mut b)).is_empty());
    let answer = frames(&out(&mut b, t));
    assert!(
        answer
            .iter()
            .all(|f| matches!(f, Frame::Doubt { r, .. } if *r == r_old)),
        "{answer:?}"
    );
    assert!(!answer.is_empty());
    feed(&mut a, t, &out_packets(answer));
    let evs = events(&mut a);
    assert_eq!(ids(&evs, acked_id), []);
    assert_eq!(ids(&evs, doubt_id), [MsgId(0), MsgId(1), MsgId(2)]);
    assert_eq!(a.stats().in_doubt, 3);
    assert_eq!(a.tokens_in_flight(), 0);
    // The next message does not use a dead envelope: A asks the new B for slots.
    a.send(t, B, bytes::Bytes::from_static(b"m3")).unwrap();
    let p = out(&mut a, t);
    assert!(
        frames(&p).iter().all(|f| !matches!(f, Frame::Token { .. })),
        "a token from a dead envelope: {:?}",
        frames(&p)
    );
    let mut settled = Vec::new();
    let mut got = Vec::new();
    let mut p = p;
    for _ in 0..4 {
        feed(&mut b, t, &p);
        got.extend(payloads(&events(&mut b)));
        feed(&mut a, t, &out(&mut b, t));
        settled.extend(events(&mut a));
        p = out(&mut a, t);
    }
    assert_eq!(got, [b"m3".to_vec()]);
    assert_eq!(ids(&settled, acked_id), [MsgId(3)]);
}

/// Re-wraps decoded frames as one datagram from B to A.
fn out_packets(f: Vec<Frame>) -> Vec<exon::proto::Packet> {
    vec![packet(B, A, f)]
}

/// B is full and evicts A's record before any token reached it (a flood of requests from
/// other sources): A's tokens get RETRY, A makes new tokens from fresh slots, and every
/// message is delivered and acknowledged exactly once, none in doubt.
#[test]
fn evicted_incarnation_answers_retry_and_nothing_is_lost() {
    let t = Instant::now();
    let c = {
        let mut conf = cfg(8, 2, 64);
        conf.max_receiver_records = 1;
        conf
    };
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 100, t);
    for m in [b"m0", b"m1", b"m2"] {
        a.send(t, B, bytes::Bytes::from_static(m)).unwrap();
    }
    feed(&mut b, t, &out(&mut a, t));
    feed(&mut a, t, &out(&mut b, t));
    let tokens = out(&mut a, t);
    // A forged source takes A's place before the tokens arrive.
    let forger = NodeId::new(99).unwrap();
    feed(
        &mut b,
        t,
        &[packet(
            forger,
            B,
            vec![Frame::ReqSlots { s: 0, n: 8, l: 0 }],
        )],
    );
    let _ = out(&mut b, t);
    assert_eq!(b.stats().evictions, 1);
    feed(&mut b, t, &tokens);
    assert!(payloads(&events(&mut b)).is_empty());
    let answer = out(&mut b, t);
    assert!(
        frames(&answer)
            .iter()
            .all(|f| matches!(f, Frame::Retry { .. })),
        "{:?}",
        frames(&answer)
    );
    let mut got = Vec::new();
    let mut settled = Vec::new();
    let mut p = answer;
    for _ in 0..6 {
        feed(&mut a, t, &p);
        settled.extend(events(&mut a));
        let q = out(&mut a, t);
        feed(&mut b, t, &q);
        got.extend(payloads(&events(&mut b)));
        p = out(&mut b, t);
    }
    got.sort();
    assert_eq!(got, [b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]);
    assert_eq!(ids(&settled, acked_id), [MsgId(0), MsgId(1), MsgId(2)]);
    assert_eq!(ids(&settled, doubt_id), []);
    assert_eq!(a.stats().retried, 3);
    assert_eq!(
        b.stats().evictions,
        2,
        "the forger's record made room in turn"
    );
}
