//! The verdicts, frame by frame. ACK: delayed and coalesced acknowledgements (the sender
//! flags the last datagram of a burst ACK-NOW, the receiver acknowledges it at once, and
//! holds the ACK of any other datagram until `ack_every` tokens wait, its ACK delay runs out,
//! or a datagram goes to the sender anyway). Beyond ACK: DOUBT after a receiver restart (its
//! incarnations died with it) and RETRY after an eviction (nothing was delivered into the
//! incarnation); each of those tests fails if the receiver answered ACK instead, which would
//! acknowledge a message that was never delivered. And the verdict of a message given up at
//! its deadline after its datagrams shrank (`deadline_after_resize`): a whole TOKEN that left
//! before makes it in doubt, never not delivered.

use std::time::{Duration, Instant};

use exon::proto::{Config, CongestionControl, Event, Frame, MsgId, Node, NodeId, Packet};
use exon_testkit::frames::*;

fn ids(evs: &[Event], pick: fn(&Event) -> Vec<MsgId>) -> Vec<MsgId> {
    evs.iter().flat_map(pick).collect()
}

fn acked_id(e: &Event) -> Vec<MsgId> {
    match e {
        Event::Acknowledged { ids, .. } => ids.iter().collect(),
        _ => Vec::new(),
    }
}

fn doubt_id(e: &Event) -> Vec<MsgId> {
    match e {
        Event::InDoubt { id, .. } => vec![*id],
        _ => Vec::new(),
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
/// message is delivered and acknowledged exactly once, none in doubt. A keeps acknowledged
/// payloads for its embedding (`Node::keep_released`): a message sent again after a RETRY
/// keeps its bytes, and its payload comes back once, at its ACK.
#[test]
fn evicted_incarnation_answers_retry_and_nothing_is_lost() {
    let t = Instant::now();
    let c = {
        let mut conf = cfg(8, 2, 64);
        conf.limits.max_receiver_records = 1;
        conf
    };
    let mut a = node(A, c.clone(), 0, t);
    a.keep_released(true);
    let mut b = node(B, c, 100, t);
    for m in [b"m0", b"m1", b"m2"] {
        a.send(t, B, bytes::Bytes::from_static(m)).unwrap();
    }
    feed(&mut b, t, &out(&mut a, t));
    feed(&mut a, t, &out(&mut b, t));
    let tokens = out(&mut a, t);
    // A forged source takes A's place before the tokens arrive (they are late: A's
    // record is no longer fresh, `fresh_records_kept`).
    let (t1, t2) = (t + Duration::from_secs(1), t + Duration::from_secs(2));
    let forger = NodeId::new(99).unwrap();
    feed(
        &mut b,
        t1,
        &[packet(
            forger,
            B,
            vec![Frame::ReqSlots { s: 0, n: 8, l: 0 }],
        )],
    );
    let _ = out(&mut b, t1);
    assert_eq!(b.stats().evictions, 1);
    feed(&mut b, t1, &tokens);
    assert!(payloads(&events(&mut b)).is_empty());
    let answer = out(&mut b, t1);
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
        feed(&mut a, t2, &p);
        settled.extend(events(&mut a));
        let q = out(&mut a, t2);
        feed(&mut b, t2, &q);
        got.extend(payloads(&events(&mut b)));
        p = out(&mut b, t2);
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
    let mut back = Vec::new();
    a.take_released(&mut back);
    let mut back: Vec<Vec<u8>> = back.iter().map(|p| p.to_bytes().to_vec()).collect();
    back.sort();
    assert_eq!(back, got, "each acknowledged payload back once, as sent");
}

// ----- ACK: delayed and coalesced -----------------------------------------------------

/// Without congestion control, so that a burst is written at once, all at the same instant
/// (the pacer would spread it out: that is tested in `congestion.rs`).
fn config(ack_every: u32) -> Config {
    let mut conf = cfg(64, 8, 256);
    conf.mtu.max_datagram_size = 1200;
    conf.acks.delay = Duration::from_millis(2);
    conf.acks.every = ack_every;
    conf.flow.congestion = CongestionControl::Off;
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
        conf.acks.delay = Duration::ZERO;
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

// ----- deadlines after a change of datagram sizes ----------------------------------------

mod deadline_after_resize {
    use std::cell::Cell;
    use std::rc::Rc;
    use std::time::Duration;

    use bytes::Bytes;
    use exon::proto::{Abandoned, Frame, MAX_DATAGRAM_SIZE};
    use exon_testkit::pair::*;

    /// Whether the datagram carries a whole TOKEN with a payload of at least `big` bytes.
    fn has_token(w: &Wire, big: usize) -> bool {
        w.packet()
            .frames
            .iter()
            .any(|f| matches!(f, Frame::Token { payload, .. } if payload.len() >= big))
    }

    /// A path on which B's datagrams stop reaching A (a one-way outage, the ACK path
    /// down) as soon as a datagram of A's carrying a whole TOKEN of a message of at least
    /// `big` bytes went by, and that carries datagrams up to `mtu` (changeable while running).
    fn ack_path_fails_after_big_token(p: &mut Pair, big: usize, mtu: Rc<Cell<usize>>) {
        let down = Rc::new(Cell::new(false));
        p.set_filter(move |w: &Wire| {
            if w.data.len() > mtu.get() || (w.from == B && down.get()) {
                return Fate::Drop;
            }
            if w.from == A && has_token(w, big) {
                down.set(true);
            }
            Fate::Deliver
        });
    }

    /// The first case: a 1 300-byte message in fixed 1 452-byte datagrams (no path
    /// MTU discovery) leaves as one whole TOKEN, is delivered and taken, and then nothing
    /// comes back for 20 s. A, deaf to B, retransmits in base-size (1 200-byte) datagrams, in
    /// which the message only fits as fragments, none of which may leave (no credit comes
    /// back). Given up at its deadline, it is in doubt: a whole copy left, and was in fact
    /// delivered. Reporting it not delivered would have the application send it again.
    fn whole_token_then_deaf_peer(silence: Duration) -> (Pair, Option<Abandoned>) {
        let mut c = test_config();
        c.mtu.max_datagram_size = 1452;
        let mut p = Pair::new(c);
        ack_path_fails_after_big_token(&mut p, 1300, Rc::new(Cell::new(usize::MAX)));
        let m = p.send(A, Bytes::from(vec![7u8; 1300]));
        p.run(silence);
        let now = p.now;
        let verdict = p.node(A).abandon(now, id(B), m);
        (p, verdict)
    }

    #[test]
    fn a_delivered_message_whose_ack_path_failed_is_in_doubt_after_a_long_silence() {
        let (mut p, verdict) = whole_token_then_deaf_peer(Duration::from_secs(20));
        assert_eq!(p.nodes[B].delivered.len(), 1, "M was delivered");
        assert!(
            p.node(A).stats().deaf_datagrams > 0,
            "A never went deaf: the test does not reach the defect"
        );
        assert_eq!(verdict, Some(Abandoned::InDoubt));
    }

    /// The control: a short silence (before A treats B as deaf) gives doubt too.
    #[test]
    fn a_delivered_message_whose_ack_path_failed_is_in_doubt_after_a_short_silence() {
        let (mut p, verdict) = whole_token_then_deaf_peer(Duration::from_millis(200));
        assert_eq!(p.nodes[B].delivered.len(), 1);
        assert_eq!(p.node(A).stats().deaf_datagrams, 0);
        assert_eq!(verdict, Some(Abandoned::InDoubt));
    }

    /// The second case, through the black-hole fallback: path MTU discovery grew
    /// datagrams to 9 000 bytes, and a 5 000-byte message M leaves as one whole TOKEN and is
    /// delivered. Then the path shrinks to 1 500 bytes, and B's answers about messages (ACK,
    /// GOT, CREDIT) stop reaching A, while its other datagrams (MTU_ACK) still do: A hears
    /// B, so it is not deaf, but M's retransmissions (whole, 9 000-byte datagrams) are lost,
    /// black-hole detection falls back to the base size, and M is cut into fragments that
    /// wait for credit that never comes. Given up, M is in doubt: a whole copy left.
    #[test]
    fn a_delivered_message_is_in_doubt_after_the_black_hole_fallback() {
        let mut c = test_config();
        c.mtu.discovery = true;
        c.mtu.max_datagram_size = MAX_DATAGRAM_SIZE;
        let mut p = Pair::new(c);
        let mtu = Rc::new(Cell::new(9000));
        let down = Rc::new(Cell::new(false));
        let (path, cut) = (mtu.clone(), down.clone());
        p.set_filter(move |w: &Wire| {
            if w.data.len() > path.get() {
                return Fate::Drop;
            }
            let answers = |f: &Frame| {
                matches!(
                    f,
                    Frame::Ack { .. } | Frame::Got { .. } | Frame::Credit { .. }
                )
            };
            if w.from == B && cut.get() && w.packet().frames.iter().any(answers) {
                return Fate::Drop;
            }
            if w.from == A && has_token(w, 5000) {
                // M left whole: the path shrinks behind it, and the answers stop.
                cut.set(true);
                path.set(1500);
            }
            Fate::Deliver
        });
        // Small messages first, so that discovery finds the path's size.
        for round in 0..20u32 {
            for i in 0..50u32 {
                p.send(A, Bytes::from((round * 50 + i).to_be_bytes().repeat(25)));
            }
            p.run(Duration::from_millis(20));
        }
        let size = p.node(A).send_size(id(B));
        assert!(size > 5100, "discovery stopped at {size}");
        let m = p.send(A, Bytes::from(vec![9u8; 5000]));
        p.run(Duration::from_secs(20));
        assert!(down.get(), "M never left whole");
        assert_eq!(p.nodes[B].delivered.len(), 1001, "M was delivered, once");
        let s = *p.node(A).stats();
        assert!(
            s.mtu.black_hole_fallbacks > 0,
            "no fallback: the test does not reach the defect ({:?})",
            s.mtu
        );
        assert!(p.node(A).send_size(id(B)) <= 1500);
        let now = p.now;
        assert_eq!(p.node(A).abandon(now, id(B), m), Some(Abandoned::InDoubt));
    }

    /// With the rule off, the defect returns: the delivered message is reported not
    /// delivered.
    #[cfg(feature = "rule-switches")]
    #[test]
    fn without_the_rule_a_delivered_message_is_reported_not_delivered() {
        let mut c = test_config();
        c.mtu.max_datagram_size = 1452;
        let mut p = Pair::new(c);
        p.node(A).set_rules({
            let mut r = exon::proto::Rules::ALL;
            r.deadline_remembers_whole_copies = false;
            r
        });
        ack_path_fails_after_big_token(&mut p, 1300, Rc::new(Cell::new(usize::MAX)));
        let m = p.send(A, Bytes::from(vec![7u8; 1300]));
        p.run(Duration::from_secs(20));
        let now = p.now;
        assert_eq!(p.nodes[B].delivered.len(), 1);
        assert_eq!(
            p.node(A).abandon(now, id(B), m),
            Some(Abandoned::NotDelivered),
            "the defect the rule prevents"
        );
    }
}

/// A late duplicate of a token settled long ago can draw a DOUBT (a durable receiver answers
/// so below the frontier past which it forgot its sender's slots). The sender holds no
/// token there: the verdict is stale and changes nothing (`Rules::stale_verdicts_ignored`).
/// With the rule off the sender drops its envelopes and asks for slots again, and with
/// large messages on a duplicating path it never finished one (exon-sim/tests/cli.rs,
/// `late_duplicates_below_the_frontier_do_not_unsettle_an_honest_sender`).
#[test]
fn a_doubt_below_the_senders_frontier_settles_nothing() {
    for rule in [true, false] {
        let t = Instant::now();
        let c = cfg(8, 2, 64);
        let mut a = node(A, c.clone(), 0, t);
        let mut rules = exon::proto::Rules::ALL;
        rules.stale_verdicts_ignored = rule;
        a.set_rules(rules);
        let mut b = node(B, c, 100, t);
        a.send(t, B, bytes::Bytes::from_static(b"m0")).unwrap();
        feed(&mut b, t, &out(&mut a, t));
        feed(&mut a, t, &out(&mut b, t));
        let tokens = out(&mut a, t);
        let Some(Frame::Token { s, r, .. }) = frames(&tokens).first().cloned() else {
            panic!("{:?}", frames(&tokens))
        };
        feed(&mut b, t, &tokens);
        let t1 = t + Duration::from_millis(50);
        feed(&mut a, t1, &out(&mut b, t1));
        assert_eq!(ids(&events(&mut a), acked_id).len(), 1);
        // The stale DOUBT for the settled slot.
        let ranges =
            exon::proto::AckRanges::from_ranges(std::slice::from_ref(&(s..s + 1))).unwrap();
        feed(
            &mut a,
            t1,
            &[packet(B, A, vec![Frame::Doubt { r, ranges }])],
        );
        assert!(ids(&events(&mut a), doubt_id).is_empty());
        a.send(t1, B, bytes::Bytes::from_static(b"m1")).unwrap();
        let next = frames(&out(&mut a, t1));
        let token = next
            .iter()
            .any(|f| matches!(f, Frame::Token { r: r2, .. } if *r2 == r));
        let asks = next.iter().any(|f| matches!(f, Frame::ReqSlots { .. }));
        if rule {
            assert!(
                token && !asks,
                "the next message goes in a kept envelope: {next:?}"
            );
        } else {
            assert!(!token, "without the rule the envelopes are gone: {next:?}");
        }
    }
}
