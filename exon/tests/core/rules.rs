//! One test per correction of `docs/algorithm.md` (each fails when its rule is broken),
//! and the paper's Figure 1 walk-through, driven frame by frame.

use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, Frame, Node, NodeId, Packet, Security};

use exon_testkit::frames::*;

/// Figure 1 of the paper: node a sends to node b with N = 5 (`n = N + |msg| - |env|`),
/// requesting again whenever envelopes drop below N, as Algorithm 1 does.
#[test]
fn figure_1_walk_through_with_window_5() {
    let t = Instant::now();
    let c = cfg(5, 5, 64);
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 100, t);
    let (ck_a, ck_b) = (a.clock(), b.clock());

    // Step 1: EOsend(b, m1) creates the S record and requests N + |msg| - |env| = 6 slots.
    a.send(t, B, Bytes::from_static(b"m1")).unwrap();
    let p1 = out(&mut a, t);
    assert_eq!(
        frames(&p1),
        [Frame::ReqSlots {
            s: ck_a,
            n: 6,
            l: ck_a
        }]
    );

    // Step 2: b creates its R record (rck = its clock, which then ticks) and six slots.
    feed(&mut b, t, &p1);
    assert_eq!(b.receiver_records(), 1);
    assert_eq!(b.clock(), ck_b + 1);
    assert_eq!(b.slots_held(), 6);
    let p2 = out(&mut b, t);
    assert_eq!(
        frames(&p2),
        [Frame::Slots {
            s: ck_a,
            r: ck_b,
            n: 6
        }]
    );

    // Step 3: a turns the first envelope into a token for m1; five envelopes remain, which
    // is N, so no new request.
    feed(&mut a, t, &p2);
    let p3 = out(&mut a, t);
    assert_eq!(
        frames(&p3),
        [Frame::Token {
            s: ck_a,
            r: ck_b,
            payload: Bytes::from_static(b"m1"),
            senders_copy: false
        }]
    );

    // Step 4: b delivers m1, consumes its slot and acknowledges.
    feed(&mut b, t, &p3);
    assert_eq!(delivered(&mut b), [Bytes::from_static(b"m1")]);
    assert_eq!(b.slots_held(), 5);
    let p4 = out(&mut b, t);
    assert_eq!(frames(&p4), [ack(ck_b, ck_a..ck_a + 1)]);
    feed(&mut a, t, &p4);
    assert_eq!(acked(&mut a), 1);
    assert_eq!(a.tokens_in_flight(), 0);

    // A second send uses an envelope at once (one trip) and, with N - 1 envelopes left,
    // asks for one more slot; the frontier is the new token, not past it.
    a.send(t, B, Bytes::from_static(b"m2")).unwrap();
    let p5 = frames(&out(&mut a, t));
    assert!(
        p5.contains(&Frame::ReqSlots {
            s: ck_a + 6,
            n: 1,
            l: ck_a + 1
        }),
        "{p5:?}"
    );
    assert!(p5.contains(&Frame::Token {
        s: ck_a + 1,
        r: ck_b,
        payload: Bytes::from_static(b"m2"),
        senders_copy: false
    }));
}

/// Rule 1: the first send to a destination requests slots.
#[test]
fn rule1_first_send_requests_slots() {
    let t = Instant::now();
    let mut a = node(A, Config::default(), 7, t);
    a.send(t, B, Bytes::from_static(b"x")).unwrap();
    let f = frames(&out(&mut a, t));
    assert!(
        matches!(f.as_slice(), [Frame::ReqSlots { s: 7, n, l: 7 }] if *n > 0),
        "first send must emit REQSLOTS, got {f:?}"
    );
}

/// Rule 2: the frontier `l` never passes a token that exists or is about to be sent. With
/// Algorithm 1's printed order, the REQSLOTS triggered by the first send after the slots
/// arrive carries `l = e + 1` and b drops the slot of token e: the message is lost.
#[test]
fn rule2_frontier_never_passes_the_token_being_sent() {
    let t = Instant::now();
    let c = cfg(5, 5, 64);
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 0, t);
    // Get envelopes first without any message: send one, deliver, acknowledge.
    a.send(t, B, Bytes::from_static(b"first")).unwrap();
    for _ in 0..3 {
        let pa = out(&mut a, t);
        feed(&mut b, t, &pa);
        let pb = out(&mut b, t);
        feed(&mut a, t, &pb);
    }
    assert_eq!(delivered(&mut b).len(), 1);
    assert_eq!(a.tokens_in_flight(), 0);
    // Now no token is outstanding; this send dequeues envelope e and triggers REQSLOTS.
    a.send(t, B, Bytes::from_static(b"second")).unwrap();
    let pa = out(&mut a, t);
    let f = frames(&pa);
    let e = f
        .iter()
        .find_map(|f| match f {
            Frame::Token { s, .. } => Some(*s),
            _ => None,
        })
        .expect("token sent");
    let l = f
        .iter()
        .find_map(|f| match f {
            Frame::ReqSlots { l, .. } => Some(*l),
            _ => None,
        })
        .expect("request sent");
    assert!(l <= e, "frontier {l} passes token {e}");
    feed(&mut b, t, &pa);
    assert_eq!(delivered(&mut b), [Bytes::from_static(b"second")]);
}

/// Rule 3: a token keeps the incarnation it was made under. A delivered token whose ACK is
/// lost, a receiver record re-created by a replayed REQSLOTS, and a later SLOTS from the new
/// incarnation must not lead to a second delivery.
#[test]
fn rule3_token_keeps_its_incarnation_across_a_new_receiver_incarnation() {
    let t = Instant::now();
    let c = cfg(1, 0, 2);
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 50, t);
    a.send(t, B, Bytes::from_static(b"m1")).unwrap();
    let req = out(&mut a, t); // REQSLOTS(0, 2, 0): kept to replay much later
    assert_eq!(frames(&req), [Frame::ReqSlots { s: 0, n: 2, l: 0 }]);
    feed(&mut b, t, &req);
    feed(&mut a, t, &out(&mut b, t)); // SLOTS(0, r1, 2)
    let tok1 = out(&mut a, t);
    let r1 = match frames(&tok1).as_slice() {
        [Frame::Token { s: 0, r, .. }] => *r,
        f => panic!("expected token 0, got {f:?}"),
    };
    feed(&mut b, t, &tok1);
    let _lost_ack = out(&mut b, t);
    // m2 uses the second envelope; b delivers it, its record is empty and goes away.
    a.send(t, B, Bytes::from_static(b"m2")).unwrap();
    feed(&mut b, t, &out(&mut a, t));
    assert_eq!(
        delivered(&mut b),
        [Bytes::from_static(b"m1"), Bytes::from_static(b"m2")]
    );
    assert_eq!(
        b.receiver_records(),
        0,
        "record removed once its slots are gone"
    );
    feed(&mut a, t, &out(&mut b, t)); // ACK of m2 arrives; m1's was lost
    assert_eq!(a.tokens_in_flight(), 1);

    // A late duplicate of the first REQSLOTS re-creates b's record: slots 0 and 1 again,
    // under a new incarnation. Its SLOTS is stale for a (a's sck moved on).
    feed(&mut b, t, &req);
    assert_eq!(b.receiver_records(), 1);
    feed(&mut a, t, &out(&mut b, t));
    assert_eq!(a.stats().stale_slots, 1);
    // m3's request reaches the new incarnation, whose SLOTS a adopts.
    a.send(t, B, Bytes::from_static(b"m3")).unwrap();
    feed(&mut b, t, &out(&mut a, t));
    feed(&mut a, t, &out(&mut b, t));
    // m3 goes out; m1 is retransmitted after its timeout.
    let t3 = t + Duration::from_secs(5);
    a.handle_timeout(t3);
    let burst = out(&mut a, t3);
    let retransmitted: Vec<u64> = frames(&burst)
        .iter()
        .filter_map(|f| match f {
            Frame::Token { s: 0, r, .. } => Some(*r),
            _ => None,
        })
        .collect();
    assert_eq!(
        retransmitted,
        [r1],
        "m1 must be retransmitted under its own incarnation"
    );
    feed(&mut b, t3, &burst);
    assert_eq!(
        delivered(&mut b),
        [Bytes::from_static(b"m3")],
        "m1 delivered twice"
    );
    feed(&mut a, t3, &out(&mut b, t3));
    assert_eq!(
        a.tokens_in_flight(),
        0,
        "m1's token is acknowledged (rule 4 path)"
    );
}

/// Rule 4: a token for which no receiver record exists is acknowledged (and not delivered).
#[test]
fn rule4_token_without_record_is_acknowledged() {
    let t = Instant::now();
    let mut b = node(B, Config::default(), 0, t);
    // Incarnation r is issued to A, then every slot of it is waived: the record is gone.
    let req = packet(A, B, vec![Frame::ReqSlots { s: 5, n: 1, l: 5 }]);
    feed(&mut b, t, &[req]);
    let r = match frames(&out(&mut b, t)).as_slice() {
        [Frame::Slots { r, .. }] => *r,
        f => panic!("{f:?}"),
    };
    feed(
        &mut b,
        t,
        &[packet(A, B, vec![Frame::ReqSlots { s: 6, n: 0, l: 6 }])],
    );
    assert!(b.is_idle());
    let p = packet(
        A,
        B,
        vec![Frame::Token {
            s: 5,
            r,
            payload: Bytes::from_static(b"old"),
            senders_copy: false,
        }],
    );
    feed(&mut b, t, &[p]);
    assert!(delivered(&mut b).is_empty());
    assert_eq!(frames(&out(&mut b, t)), [ack(r, 5..6)]);
    assert!(b.is_idle());
}

/// Rule 5: SLOTS for a record we no longer hold raises the clock to `s` before waiving, so
/// orphan slots above our last sck are collected.
#[test]
fn rule5_orphan_slots_raise_the_clock_before_the_waiver() {
    let t = Instant::now();
    let mut a = node(A, Config::default(), 10, t);
    assert_eq!(a.clock(), 10);
    let probe = packet(B, A, vec![Frame::Slots { s: 40, r: 3, n: 0 }]);
    feed(&mut a, t, &[probe]);
    assert_eq!(a.clock(), 40);
    assert_eq!(
        frames(&out(&mut a, t)),
        [Frame::ReqSlots { s: 40, n: 0, l: 40 }]
    );
    // A claim above anything we ever stored is not ours: refused, clock unchanged.
    let forged = packet(
        B,
        A,
        vec![Frame::Slots {
            s: a.clock_high_water() + 1,
            r: 3,
            n: 0,
        }],
    );
    feed(&mut a, t, &[forged]);
    assert_eq!(a.clock(), 40);
    assert_eq!(a.stats().rejects.clock_jump, 1);
}

/// Rule 5 switched off: the clock stays below the orphan slots, so the waiver cannot cover
/// them and slot numbers below them may be asked for again.
#[test]
fn rule5_switched_off_leaves_orphan_slots() {
    let t = Instant::now();
    let mut a = node(A, Config::default(), 10, t);
    let mut rules = exon::proto::Rules::ALL;
    rules.raise_clock_on_orphan_slots = false;
    a.set_rules(rules);
    feed(
        &mut a,
        t,
        &[packet(B, A, vec![Frame::Slots { s: 40, r: 3, n: 0 }])],
    );
    assert!(a.clock() < 40);
    match frames(&out(&mut a, t)).as_slice() {
        [Frame::ReqSlots { l, .. }] => assert!(*l < 40, "the waiver covers nothing: {l}"),
        f => panic!("{f:?}"),
    }
}

/// Rule 5, end to end: a lost SLOTS leaves orphan slots above the sender's final sck; both
/// nodes still end idle.
#[test]
fn rule5_orphan_slots_are_collected_end_to_end() {
    let t = Instant::now();
    let c = {
        let mut conf = cfg(2, 2, 16);
        conf.timers.idle_timeout = Duration::from_millis(100);
        conf.timers.probe_interval = Duration::from_millis(50);
        conf
    };
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 0, t);
    a.send(t, B, Bytes::from_static(b"m")).unwrap();
    feed(&mut b, t, &out(&mut a, t)); // REQSLOTS(0, 3, 0)
    feed(&mut a, t, &out(&mut b, t)); // SLOTS(0, r, 3)
    feed(&mut b, t, &out(&mut a, t)); // TOKEN 0
    feed(&mut a, t, &out(&mut b, t)); // ACK
                                      // a asks for more (watermark); b grants, the grant is lost: orphans above a's sck.
    let mut now = t;
    let _ = out(&mut a, now);
    let mut rounds = 0;
    while !(a.is_idle() && b.is_idle()) && rounds < 200 {
        rounds += 1;
        now += Duration::from_millis(25);
        a.handle_timeout(now);
        b.handle_timeout(now);
        let pa = out(&mut a, now);
        let pb = out(&mut b, now);
        feed(&mut b, now, &pa);
        feed(&mut a, now, &pb);
    }
    assert!(
        a.is_idle() && b.is_idle(),
        "orphan slots kept a record alive"
    );
}

/// Rule 6: everything from the network is bounded.
#[test]
fn rule6_requests_are_bounded() {
    let t = Instant::now();
    let c = {
        let mut conf = Config::default();
        conf.limits.max_receiver_records = 2;
        conf.limits.max_slots_request = 100;
        conf.limits.max_slots_per_record = 150;
        conf
    };
    let mut b = node(B, c.clone(), 0, t);
    let from = |i: u64| NodeId::new(100 + i).unwrap();
    let req = |src, s, n, l| packet(src, B, vec![Frame::ReqSlots { s, n, l }]);
    feed(&mut b, t, &[req(from(0), u64::MAX >> 2, 2, 0)]);
    assert_eq!(b.stats().rejects.slots_overflow, 1);
    assert_eq!(b.receiver_records(), 0);
    // Two records, the cap. from(0) proves itself with a token; from(1) never does.
    feed(&mut b, t, &[req(from(0), 0, 100, 0)]);
    let r0 = slots_r(&out(&mut b, t));
    feed(&mut b, t, &[req(from(1), 0, 10, 0)]);
    let r1 = slots_r(&out(&mut b, t));
    let token = |src, s, r| token(src, B, s, r, b"t");
    feed(&mut b, t, &[token(from(0), 0, r0)]);
    assert_eq!(delivered(&mut b).len(), 1);
    let _ = out(&mut b, t);
    // Its ACK, after the ACK delay.
    let _ = out(&mut b, t + Duration::from_millis(100));
    // A third source evicts the unproven record, never the proven one, once it is no
    // longer fresh (two round trips, `fresh_records_kept`).
    let t2 = t + Duration::from_millis(500);
    feed(&mut b, t2, &[req(from(2), 0, 10, 0)]);
    let r2 = slots_r(&out(&mut b, t2));
    assert_eq!(b.receiver_records(), 2, "no record beyond the cap");
    assert_eq!(b.stats().evictions, 1);
    // The evicted source's token was certainly not delivered: RETRY, not ACK.
    feed(&mut b, t2, &[token(from(1), 3, r1)]);
    assert!(delivered(&mut b).is_empty());
    assert!(matches!(
        frames(&out(&mut b, t2)).as_slice(),
        [Frame::Retry { r, .. }] if *r == r1
    ));
    // Once every record is proven, a new source is refused.
    feed(&mut b, t2, &[token(from(2), 0, r2)]);
    assert_eq!(delivered(&mut b).len(), 1);
    let _ = out(&mut b, t2);
    feed(&mut b, t2, &[req(from(3), 0, 10, 0)]);
    assert_eq!(b.receiver_records(), 2);
    assert_eq!(b.stats().rejects.too_many_records, 1);
    // A gap of 2^40 does not create the slots in between; the slot cap holds: what fits
    // is granted (SLOTS says how many), then nothing more.
    feed(&mut b, t2, &[req(from(0), 1 << 40, 60, 0)]);
    assert_eq!(granted(&out(&mut b, t2)), [51]);
    assert_eq!(b.stats().slots_trimmed, 1);
    feed(&mut b, t2, &[req(from(0), (1 << 40) + 51, 10, 0)]);
    assert!(out(&mut b, t2).is_empty());
    assert_eq!(b.stats().rejects.slots_cap, 1);
    assert_eq!(b.slots_held(), 99 + 9 + 51);
    assert!(b.slot_ranges_held() <= 3);
    // A request beyond `max_slots_request` is granted in part, not refused.
    let mut b = node(B, c, 0, t);
    feed(&mut b, t, &[req(from(0), 0, 101, 0)]);
    assert_eq!(granted(&out(&mut b, t)), [100]);
    assert_eq!(b.slots_held(), 100);
}

/// The `n` of every SLOTS frame in `ps`.
fn granted(ps: &[Packet]) -> Vec<u64> {
    frames(ps)
        .into_iter()
        .filter_map(|f| match f {
            Frame::Slots { n, .. } => Some(n),
            _ => None,
        })
        .collect()
}

/// Rule 7: tokens are retransmitted after an RTO derived from measured RTT, backing off;
/// no RTT sample is taken from a retransmitted token (Karn).
#[test]
fn rule7_retransmission_timer_backs_off_and_follows_karn() {
    let t0 = Instant::now();
    let c = {
        let mut conf = Config::default();
        conf.timers.initial_rtt = Duration::from_millis(10);
        conf.timers.min_rto = Duration::from_millis(1);
        conf.timers.max_rto = Duration::from_secs(1);
        // No ACK delay to add to the timeout (the first expiry sends the token again as a
        // probe, the second as a timeout: the waits are the same).
        conf.acks.delay = Duration::ZERO;
        conf
    };
    let mut a = node(A, c.clone(), 0, t0);
    let mut b = node(B, c, 0, t0);
    let rtt = Duration::from_millis(4);
    a.send(t0, B, Bytes::from_static(b"x")).unwrap();
    let p = out(&mut a, t0);
    feed(&mut b, t0 + rtt / 2, &p);
    feed(&mut a, t0 + rtt, &out(&mut b, t0 + rtt / 2)); // SLOTS: first RTT sample
    let t1 = t0 + rtt;
    let tok = out(&mut a, t1);
    assert_eq!(tok.len(), 1);
    // The token is lost. Retransmission comes after the RTO (srtt 4 ms, var 2 ms: 12 ms
    // plus at most 25 % jitter), and each further loss doubles the wait.
    let first = until_token_sent(&mut a, t1);
    assert!(
        first >= Duration::from_millis(12) && first <= Duration::from_millis(16),
        "{first:?}"
    );
    let mut at = t1 + first;
    let second = until_token_sent(&mut a, at);
    assert!(
        second >= Duration::from_millis(24) && second <= Duration::from_millis(31),
        "backoff doubles: {second:?}"
    );
    at += second;
    assert_eq!(a.stats().retransmissions, 2);
    // The ACK of the retransmitted token comes late; it must give no RTT sample (it may
    // answer the first send). The backoff stays: the next token waits at least 48 ms.
    let late = at + Duration::from_millis(500);
    feed(
        &mut a,
        late,
        &[packet(
            B,
            A,
            vec![ack(r_of(&tok), s_of(&tok)..s_of(&tok) + 1)],
        )],
    );
    assert_eq!(acked(&mut a), 1);
    a.send(late, B, Bytes::from_static(b"y")).unwrap();
    let _ = out(&mut a, late);
    let rto = until_token_sent(&mut a, late);
    assert!(
        rto >= Duration::from_millis(48),
        "no sample from a retransmission: {rto:?}"
    );
}

/// Steps time by 1 ms from `from` until the node sends a TOKEN; returns the wait.
fn until_token_sent(n: &mut Node, from: Instant) -> Duration {
    for ms in 1..10_000 {
        let now = from + Duration::from_millis(ms);
        n.handle_timeout(now);
        if frames(&out(n, now))
            .iter()
            .any(|f| matches!(f, Frame::Token { .. }))
        {
            return now - from;
        }
    }
    panic!("no retransmission within 10 s");
}

fn r_of(p: &[Packet]) -> u64 {
    match frames(p).as_slice() {
        [Frame::Token { r, .. }] => *r,
        f => panic!("{f:?}"),
    }
}

fn s_of(p: &[Packet]) -> u64 {
    match frames(p).as_slice() {
        [Frame::Token { s, .. }] => *s,
        f => panic!("{f:?}"),
    }
}

/// Rule 7: REQSLOTS is re-sent while unanswered; the receiver probes a silent sender; an
/// idle sender record is discarded only after the idle timeout, raising the clock to its sck.
#[test]
fn rule7_reqslots_resend_probe_and_idle_discard() {
    let t = Instant::now();
    let c = {
        let mut conf = cfg(4, 4, 16);
        conf.timers.idle_timeout = Duration::from_secs(3);
        conf.timers.probe_interval = Duration::from_secs(1);
        conf.timers.initial_rtt = Duration::from_millis(100);
        conf
    };
    let mut a = node(A, c.clone(), 0, t);
    let mut b = node(B, c, 0, t);
    a.send(t, B, Bytes::from_static(b"x")).unwrap();
    let first = out(&mut a, t);
    // Lost. The request goes out again after the timeout.
    let at = a.poll_timeout().unwrap();
    a.handle_timeout(at);
    let again = out(&mut a, at);
    assert_eq!(frames(&again), frames(&first));
    assert_eq!(a.stats().reqslots_retransmissions, 1);
    feed(&mut b, at, &again);
    let slots = out(&mut b, at);
    feed(&mut a, at, &slots);
    feed(&mut b, at, &out(&mut a, at));
    feed(&mut a, at, &out(&mut b, at));
    assert_eq!(acked(&mut a), 1);
    // a now holds envelopes and nothing else; it is idle but not discarded at the next tick.
    let sck_envelopes = a.clock();
    assert_eq!(a.sender_records(), 1);
    // b holds slots for a's envelopes: it probes after the probe interval.
    let probe_at = b.poll_timeout().unwrap();
    assert!(probe_at - at >= Duration::from_secs(1));
    b.handle_timeout(probe_at);
    assert!(matches!(
        frames(&out(&mut b, probe_at)).as_slice(),
        [Frame::Slots { n: 0, .. }]
    ));
    let almost = at + Duration::from_millis(2900);
    a.handle_timeout(almost);
    assert_eq!(a.sender_records(), 1, "discarded before the idle timeout");
    let gone = at + Duration::from_millis(3100);
    a.handle_timeout(gone);
    assert_eq!(a.sender_records(), 0);
    assert!(a.clock() > sck_envelopes, "ck := max(ck, sck) on discard");
    let waiver = out(&mut a, gone);
    let sck = a.clock();
    assert_eq!(
        frames(&waiver),
        [Frame::ReqSlots {
            s: sck,
            n: 0,
            l: sck
        }]
    );
    feed(&mut b, gone, &waiver);
    assert!(a.is_idle() && b.is_idle());
    assert_eq!(a.poll_timeout(), None);
    assert_eq!(b.poll_timeout(), None);
}

/// Rule 8: no clock value is handed out before the embedding confirmed it stored; a node
/// restarted from the stored mark never reuses an incarnation or a slot number.
#[test]
fn rule8_clock_values_wait_for_the_store_and_survive_restart() {
    let t = Instant::now();
    let c = {
        let mut conf = Config::default();
        conf.clock_block = 1000;
        conf
    };
    let mut b = Node::new(B, Security::InsecurePlaintext, c.clone(), 500).unwrap();
    let asked = b.poll_clock_store().expect("asks to store a block at once");
    assert!(asked > 500);
    // Not stored yet: a new source cannot get an incarnation.
    let req = packet(A, B, vec![Frame::ReqSlots { s: 0, n: 1, l: 0 }]);
    feed(&mut b, t, std::slice::from_ref(&req));
    assert_eq!(b.receiver_records(), 0);
    assert_eq!(b.stats().rejects.clock_wait, 1);
    b.handle_clock_stored(t, asked);
    feed(&mut b, t, std::slice::from_ref(&req));
    let r_before = match frames(&out(&mut b, t)).as_slice() {
        [Frame::Slots { r, .. }] => *r,
        f => panic!("{f:?}"),
    };
    // Restart from the stored mark: the new incarnation is above every old one.
    let mut b2 = node(B, c.clone(), asked, t);
    feed(&mut b2, t, &[req]);
    let r_after = match frames(&out(&mut b2, t)).as_slice() {
        [Frame::Slots { r, .. }] => *r,
        f => panic!("{f:?}"),
    };
    assert!(r_after >= asked && r_after > r_before);
    // A sender never asks for slot numbers beyond the stored mark.
    let mut a = Node::new(
        A,
        Security::InsecurePlaintext,
        {
            let mut conf = cfg(8, 8, 8);
            conf.clock_block = 4;
            conf
        },
        0,
    )
    .unwrap();
    let hw = a.poll_clock_store().unwrap();
    a.send(t, B, Bytes::from_static(b"x")).unwrap();
    let mut buf = Vec::new();
    assert!(
        a.poll_transmit(t, &mut buf).is_none(),
        "nothing before the store confirms"
    );
    a.handle_clock_stored(t, hw);
    let f = frames(&out(&mut a, t));
    match f.as_slice() {
        [Frame::ReqSlots { s, n, .. }] => assert!(s + n <= hw, "asked past the stored mark"),
        f => panic!("{f:?}"),
    }
}

/// Flow control: a full queue is a typed error, as is an oversized payload.
#[test]
fn send_refuses_with_typed_errors() {
    use exon::proto::SendError;
    let t = Instant::now();
    let c = {
        let mut conf = Config::default();
        conf.limits.max_queued_per_peer = 3;
        conf
    };
    let max = c.limits.max_message_size;
    let mut a = node(A, c, 0, t);
    for _ in 0..3 {
        a.send(t, B, Bytes::from_static(b"q")).unwrap();
    }
    assert_eq!(
        a.send(t, B, Bytes::from_static(b"q")),
        Err(SendError::QueueFull(B))
    );
    assert!(a.is_full(B, 1));
    let big = Bytes::from(vec![0u8; max + 1]);
    assert_eq!(
        a.send(t, B, big),
        Err(SendError::PayloadTooLarge { len: max + 1, max })
    );
    assert_eq!(a.send(t, A, Bytes::new()), Err(SendError::ToSelf));
    assert_eq!(a.stats().sent, 3);
}

/// Rule 8, its timing (`Rules::clock_waits_for_store`): a receiver whose clock store was
/// asked for but not yet synced when it crashed restarts below the values it would have used
/// meanwhile. Waiting for the store, it granted nothing before the crash, and the message
/// is delivered once; counting the mark stored when asked, it granted an incarnation it
/// hands out again after the restart, and a retransmitted token is delivered twice.
#[test]
fn rule8_clock_values_used_before_their_store_are_reused_after_a_crash() {
    fn deliveries(waits: bool) -> usize {
        let t = Instant::now();
        let mut rules = exon::proto::Rules::ALL;
        rules.clock_waits_for_store = waits;
        let mut c = cfg(8, 8, 8);
        c.clock_block = 1000;
        c.mtu.discovery = false;
        c.mtu.max_datagram_size = 1200;
        let boot = |clock: u64| {
            let mut n = Node::new(B, Security::InsecurePlaintext, c.clone(), clock).unwrap();
            n.set_rules(rules);
            n
        };
        let req = packet(A, B, vec![Frame::ReqSlots { s: 0, n: 1, l: 0 }]);
        // The store of the next mark is asked for and never completes: the crash comes first.
        let mut b = boot(500);
        assert!(b.poll_clock_store().is_some());
        feed(&mut b, t, std::slice::from_ref(&req));
        let mut buf = Vec::new();
        let mut granted = None;
        while let Some(tx) = b.poll_transmit(t, &mut buf) {
            let p = Packet::decode(&Bytes::copy_from_slice(&buf[buf.len() - tx.size..])).unwrap();
            for f in p.frames {
                if let Frame::Slots { r, n: 1, .. } = f {
                    granted = Some(r);
                }
            }
        }
        let mut count = 0;
        if let Some(r) = granted {
            feed(&mut b, t, &[token(A, B, 0, r, b"x")]);
            count += delivered(&mut b).len();
        }
        // Restarted from the last mark that reached the disk; this time the store completes.
        let mut b2 = boot(500);
        store(&mut b2, t);
        feed(&mut b2, t, &[req]);
        let r2 = match frames(&out(&mut b2, t)).as_slice() {
            [Frame::Slots { r, .. }] => *r,
            f => panic!("{f:?}"),
        };
        // The sender retransmits its token under the incarnation it was made for.
        feed(&mut b2, t, &[token(A, B, 0, granted.unwrap_or(r2), b"x")]);
        count + delivered(&mut b2).len()
    }
    assert_eq!(deliveries(true), 1, "waiting for the store: delivered once");
    assert_eq!(
        deliveries(false),
        2,
        "rule off: the reused incarnation delivers it again"
    );
}
