//! Takes reported together (`Node::handle_taken_many`): the same effect as one
//! `handle_taken` per delivery, in order, whatever senders the deliveries came from.

use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, DeliveryId, Event, Node, NodeId, Security};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const C: NodeId = NodeId::from_const(3);

fn node(id: NodeId) -> Node {
    Node::new(id, Security::InsecurePlaintext, Config::default(), 0).unwrap()
}

/// Stores `n`'s clocks and returns its datagrams, by destination.
fn datagrams(n: &mut Node, t: Instant) -> Vec<(NodeId, Bytes)> {
    while let Some(hw) = n.poll_clock_store() {
        n.handle_clock_stored(t, hw);
    }
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(tx) = n.poll_transmit(t, &mut buf) {
        out.push((tx.destination, Bytes::copy_from_slice(&buf)));
        buf.clear();
    }
    out
}

/// A and C each send 300 messages to B, which takes its deliveries one call each (`many`
/// false) or all those of a drain in one call. Returns every datagram B sent, the ids its
/// calls reported taken, and the messages acknowledged to A and C.
fn run(many: bool) -> (Vec<(NodeId, Bytes)>, usize, usize) {
    let t0 = Instant::now();
    let (mut a, mut b, mut c) = (node(A), node(B), node(C));
    for n in [&mut a, &mut b, &mut c] {
        while let Some(hw) = n.poll_clock_store() {
            n.handle_clock_stored(t0, hw);
        }
    }
    for i in 0..300u32 {
        a.send(t0, B, Bytes::from(i.to_be_bytes().to_vec()))
            .unwrap();
        c.send(t0, B, Bytes::from((i + 1000).to_be_bytes().to_vec()))
            .unwrap();
    }
    let (mut from_b, mut taken, mut acked) = (Vec::new(), 0, 0);
    for step in 0..200u64 {
        let t = t0 + Duration::from_millis(step);
        for n in [&mut a, &mut b, &mut c] {
            n.handle_timeout(t);
        }
        // A's and C's datagrams interleaved, so B's deliveries alternate senders in runs.
        let (da, dc) = (datagrams(&mut a, t), datagrams(&mut c, t));
        for i in 0..da.len().max(dc.len()) {
            for d in [da.get(i), dc.get(i)].into_iter().flatten() {
                b.handle_datagram(t, d.1.clone());
            }
        }
        let mut ids: Vec<DeliveryId> = Vec::new();
        while let Some(e) = b.poll_event() {
            if let Event::Delivered { id, .. } = e {
                ids.push(id);
            }
        }
        // Some ids twice: a take reported again is refused either way.
        if let Some(&first) = ids.first() {
            ids.push(first);
        }
        taken += if many {
            b.handle_taken_many(t, ids.iter().copied())
        } else {
            ids.iter().filter(|id| b.handle_taken(t, **id)).count()
        };
        for (to, d) in datagrams(&mut b, t) {
            match to {
                A => a.handle_datagram(t, d.clone()),
                _ => c.handle_datagram(t, d.clone()),
            };
            from_b.push((to, d));
        }
        for n in [&mut a, &mut c] {
            while let Some(e) = n.poll_event() {
                acked += usize::from(matches!(e, Event::Acknowledged { .. }));
            }
        }
    }
    (from_b, taken, acked)
}

#[test]
fn takes_reported_together_are_takes_reported_one_by_one() {
    let (one, taken_one, acked_one) = run(false);
    let (many, taken_many, acked_many) = run(true);
    assert_eq!(
        (taken_one, acked_one),
        (600, 600),
        "every message taken once"
    );
    assert_eq!((taken_many, acked_many), (600, 600));
    assert_eq!(one.len(), many.len(), "as many datagrams from the receiver");
    assert!(one == many, "the receiver's datagrams differ");
}
