//! Delayed and coalesced acknowledgements, frame by frame: the sender flags the last
//! datagram of a burst ACK-NOW, the receiver acknowledges it at once, and holds the ACK of
//! any other datagram until `ack_every` tokens wait, its ACK delay runs out, or a datagram
//! goes to the sender anyway.

use std::time::{Duration, Instant};

use exon::proto::{Config, CongestionControl, Frame, Node, Packet};

mod frames;
use frames::*;

/// Without congestion control, so that a burst is written at once, all at the same instant
/// (the pacer would spread it out: that is tested in `congestion.rs`).
fn config(ack_every: u32) -> Config {
    let mut conf = cfg(64, 8, 256);
    conf.max_datagram_size = 1200;
    conf.ack_delay = Duration::from_millis(2);
    conf.ack_every = ack_every;
    conf.congestion = CongestionControl::Off;
    conf
}

/// A and B with slots granted: A has `n` messages of 600 bytes waiting as tokens (one per
/// datagram), written but not yet delivered. Returns the nodes and A's datagrams.
fn burst(n: usize, ack_every: u32, t: Instant) -> (Node, Node, Vec<Packet>) {
    let mut a = node(A, config(ack_every), 0, t);
    let mut b = node(B, config(ack_every), 100, t);
    a.send(t, B, bytes::Bytes::from(vec![0u8; 600])).unwrap();
    feed(&mut b, t, &out(&mut a, t));
    feed(&mut a, t, &out(&mut b, t));
    let first = out(&mut a, t);
    feed(&mut b, t, &first);
    feed(&mut a, t, &out(&mut b, t));
    for _ in 0..n {
        a.send(t, B, bytes::Bytes::from(vec![1u8; 600])).unwrap();
    }
    let ps = out(&mut a, t);
    (a, b, ps)
}

fn acks(ps: &[Packet]) -> usize {
    frames(ps)
        .iter()
        .filter(|f| matches!(f, Frame::Ack { .. }))
        .count()
}

#[test]
fn only_the_last_datagram_of_a_burst_asks_for_an_immediate_ack() {
    let t = Instant::now();
    let (_, _, ps) = burst(5, 16, t);
    assert_eq!(ps.len(), 5, "one 600-byte token per datagram");
    let flags: Vec<bool> = ps.iter().map(|p| p.header.ack_now).collect();
    assert_eq!(flags, [false, false, false, false, true]);
}

#[test]
fn acks_wait_for_the_burst_then_cover_it_in_one_frame() {
    let t = Instant::now();
    let (mut a, mut b, ps) = burst(5, 16, t);
    for p in &ps[..4] {
        feed(&mut b, t, std::slice::from_ref(p));
        assert!(out(&mut b, t).is_empty(), "ACK sent before the burst ended");
    }
    // The ACK delay is armed.
    assert_eq!(b.poll_timeout(), Some(t + Duration::from_millis(2)));
    feed(&mut b, t, &ps[4..]);
    let reply = out(&mut b, t);
    assert_eq!(reply.len(), 1);
    assert_eq!(acks(&reply), 1, "one ACK frame for the whole burst");
    feed(&mut a, t, &reply);
    assert_eq!(a.tokens_in_flight(), 0);
}

#[test]
fn the_ack_delay_bounds_the_wait_when_the_last_datagram_is_lost() {
    let t = Instant::now();
    let (_, mut b, ps) = burst(5, 16, t);
    feed(&mut b, t, &ps[..4]); // the ACK-NOW datagram is lost
    assert!(out(&mut b, t).is_empty());
    let at = b.poll_timeout().expect("ACK delay armed");
    assert_eq!(at, t + Duration::from_millis(2));
    b.handle_timeout(at);
    let reply = out(&mut b, at);
    assert_eq!(acks(&reply), 1);
}

#[test]
fn every_k_tokens_are_acknowledged_without_waiting() {
    let t = Instant::now();
    let (_, mut b, ps) = burst(9, 4, t);
    let mut acked_after = Vec::new();
    for (i, p) in ps.iter().enumerate() {
        feed(&mut b, t, std::slice::from_ref(p));
        if acks(&out(&mut b, t)) > 0 {
            acked_after.push(i + 1);
        }
    }
    assert_eq!(
        acked_after,
        [4, 8, 9],
        "every 4 tokens, and the ACK-NOW datagram"
    );
}

#[test]
fn a_delayed_ack_rides_on_a_datagram_going_back_anyway() {
    let t = Instant::now();
    let (_, mut b, ps) = burst(3, 16, t);
    feed(&mut b, t, &ps[..2]);
    assert!(out(&mut b, t).is_empty(), "the ACK is held");
    // B sends a message of its own to A: the pending ACK goes in the same datagram.
    b.send(t, A, bytes::Bytes::from_static(b"reply")).unwrap();
    let reply = out(&mut b, t);
    assert_eq!(reply.len(), 1);
    assert_eq!(acks(&reply), 1);
    assert!(frames(&reply)
        .iter()
        .any(|f| matches!(f, Frame::ReqSlots { .. })));
}

#[test]
fn a_duplicate_token_is_acknowledged_at_once() {
    let t = Instant::now();
    let (_, mut b, ps) = burst(3, 16, t);
    feed(&mut b, t, &ps);
    assert_eq!(acks(&out(&mut b, t)), 1);
    // A retransmission of the first datagram (not flagged): its ACK was lost.
    feed(&mut b, t, &ps[..1]);
    assert_eq!(acks(&out(&mut b, t)), 1);
}

#[test]
fn zero_ack_delay_acknowledges_every_datagram() {
    let t = Instant::now();
    let c = {
        let mut conf = config(16);
        conf.ack_delay = Duration::ZERO;
        conf
    };
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 100, t);
    for _ in 0..3 {
        a.send(t, B, bytes::Bytes::from(vec![0u8; 600])).unwrap();
    }
    feed(&mut b, t, &out(&mut a, t));
    feed(&mut a, t, &out(&mut b, t));
    let ps = out(&mut a, t);
    assert_eq!(ps.len(), 3);
    for p in &ps {
        feed(&mut b, t, std::slice::from_ref(p));
        assert_eq!(acks(&out(&mut b, t)), 1);
    }
}
