//! Hostile input on the core. Whatever the network sends, the node stays within its bounds,
//! counts what it refused by reason, and keeps exactly-once for honest peers. (Sealed
//! datagrams: `sealed.rs`; the same attacks over UDP: `timed/udp_attacks.rs`.)

#![allow(clippy::single_range_in_vec_init)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::codec::VARINT_MAX;
use exon::proto::frame::Header;
use exon::proto::{AckRanges, Config, Frame, Node, NodeId, Packet, Security};
use exon_testkit::{confirm_clock, datagrams, pair};

const ME: NodeId = NodeId::from_const(2);
const PEER: NodeId = NodeId::from_const(1);

fn node(cfg: Config, now: Instant) -> Node {
    let mut n = Node::new(ME, Security::InsecurePlaintext, cfg, 0).unwrap();
    confirm_clock(&mut n, now);
    n
}

fn dgram(src: NodeId, frames: Vec<Frame>) -> Bytes {
    Packet {
        header: Header::new(src, ME),
        frames,
    }
    .encode()
}

/// Takes the datagrams ([`datagrams`]: events stay queued); returns (datagrams, bytes).
fn drain(n: &mut Node, now: Instant) -> (usize, usize) {
    let ds = datagrams(n, now);
    (ds.len(), ds.iter().map(|(t, _)| t.size).sum())
}

#[test]
fn absurd_slot_requests_are_trimmed_or_refused_and_counted() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    let req = |s, n, l| dgram(PEER, vec![Frame::ReqSlots { s, n, l }]);
    n.handle_datagram(t, req(VARINT_MAX - 1, 2, 0)); // s near the top: s + n overflows
    n.handle_datagram(t, req(VARINT_MAX, 1, 0));
    assert_eq!(n.stats().rejects.slots_overflow, 2);
    assert!(n.is_idle(), "no record for refused requests");
    // "u64::MAX" slots (the most a varint holds): granted in part, up to the limit.
    n.handle_datagram(t, req(0, VARINT_MAX, 0));
    assert_eq!(n.stats().slots_trimmed, 1);
    assert_eq!(n.slots_held(), Config::default().limits.max_slots_request);
    let _ = drain(&mut n, t);
    let mut n = node(Config::default(), t);
    // A gap of 2^40 slots: only the n requested are created, as one range.
    n.handle_datagram(t, req(0, 10, 0));
    n.handle_datagram(t, req(1 << 40, 10, 0));
    assert_eq!(n.slots_held(), 20);
    assert_eq!(n.slot_ranges_held(), 2);
    // The node answered what it accepted and nothing else.
    let (d, _) = drain(&mut n, t);
    assert_eq!(d, 1);
}

/// A datagram is accepted (its sender's address may be learnt from it) only when nothing in
/// it was refused: a frame that decodes but is refused (a request whose slots overflow),
/// alone or beside a good one, makes the whole datagram unaccepted, as a frame that does
/// not decode does.
#[test]
fn a_datagram_with_anything_refused_is_not_accepted() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    let good = Frame::ReqSlots { s: 0, n: 1, l: 0 };
    let overflow = Frame::ReqSlots {
        s: VARINT_MAX - 1,
        n: 2,
        l: 0,
    };
    assert_eq!(
        n.handle_datagram(t, dgram(PEER, vec![good.clone()])),
        Some(PEER)
    );
    assert_eq!(
        n.handle_datagram(t, dgram(PEER, vec![overflow.clone()])),
        None
    );
    let both = dgram(PEER, vec![Frame::ReqSlots { s: 5, n: 1, l: 0 }, overflow]);
    assert_eq!(n.handle_datagram(t, both), None);
    assert_eq!(n.stats().rejects.slots_overflow, 2);
    let mut bad = dgram(PEER, vec![good.clone()]).to_vec();
    bad.push(0x3f);
    assert_eq!(n.handle_datagram(t, Bytes::from(bad)), None);
    // Refusals in earlier datagrams do not follow a good one.
    assert_eq!(n.handle_datagram(t, dgram(PEER, vec![good])), Some(PEER));
}

#[test]
fn malformed_datagrams_are_dropped_and_counted_by_reason() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    let good = dgram(PEER, vec![Frame::ReqSlots { s: 0, n: 1, l: 0 }]);
    let mutate = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = good.to_vec();
        f(&mut v);
        Bytes::from(v)
    };
    let cases: Vec<Bytes> = vec![
        Bytes::from_static(b"\x40\x01"),          // runt
        mutate(&|v| v[0] = 0),                    // wrong version (0)
        mutate(&|v| v[0] = 0x90 | (v[0] & 0x0f)), // wrong version (9)
        mutate(&|v| v[0] |= 0x04),                // KEY, not sealed
        mutate(&|v| v.truncate(v.len() - 1)),     // truncated frame
        mutate(&|v| v.push(0x01)),                // trailing garbage
        mutate(&|v| v.push(0x3f)),                // unknown frame type
        mutate(&|v| v.truncate(3)),               // header only
        Bytes::from(vec![0u8; exon::proto::MAX_DATAGRAM_SIZE + 1usize]), // oversized
        Packet {
            header: Header::new(PEER, NodeId::from_const(99)),
            frames: vec![Frame::ReqSlots { s: 0, n: 1, l: 0 }],
        }
        .encode(), // wrong destination
        dgram(ME, vec![Frame::ReqSlots { s: 0, n: 1, l: 0 }]), // claims to be from us
    ];
    for c in cases {
        assert_eq!(
            n.handle_datagram(t, c),
            None,
            "a rejected datagram vouches for nobody"
        );
    }
    let r = n.stats().rejects;
    assert_eq!(
        (
            r.runt,
            r.bad_version,
            r.reserved_flags,
            r.truncated,
            r.unknown_frame
        ),
        (1, 2, 1, 2, 1)
    );
    assert_eq!(
        (r.no_frames, r.oversized, r.wrong_destination, r.from_self),
        (1, 1, 1, 1)
    );
    assert_eq!(r.total(), 11);
    assert!(n.is_idle());
    assert_eq!(drain(&mut n, t), (0, 0), "no reply to anything malformed");
    // A valid datagram names its source; one with a refused frame does not.
    let ok = dgram(PEER, vec![Frame::ReqSlots { s: 0, n: 1, l: 0 }]);
    assert_eq!(n.handle_datagram(t, ok), Some(PEER));
    let refused = dgram(
        PEER,
        vec![Frame::ReqSlots {
            s: VARINT_MAX - 1,
            n: 2,
            l: 0,
        }],
    );
    assert_eq!(n.handle_datagram(t, refused), None);
}

#[test]
fn tokens_and_acks_for_things_that_never_existed() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    // TOKEN for an incarnation this node never issued (at or above its clock): no verdict
    // at all, never delivered.
    n.handle_datagram(
        t,
        dgram(
            PEER,
            vec![Frame::Token {
                s: 12345,
                r: 777,
                payload: Bytes::from_static(b"forged"),
                senders_copy: false,
            }],
        ),
    );
    assert_eq!(n.poll_event(), None);
    assert_eq!(n.stats().rejects.never_issued, 1);
    assert_eq!(
        drain(&mut n, t),
        (0, 0),
        "no verdict for a forged incarnation"
    );
    // ACK for tokens we never sent, with a range of 2^60 slots: no state, no work per slot.
    let huge = AckRanges::from_ranges(&[0..(1 << 60)]).unwrap();
    n.handle_datagram(t, dgram(PEER, vec![Frame::Ack { r: 5, ranges: huge }]));
    assert_eq!(n.poll_event(), None);
    assert_eq!(n.stats().stale_acks, 1);
    assert!(n.is_idle());
    // A live sender record is not disturbed by ACKs of the wrong incarnation.
    n.send(t, PEER, Bytes::from_static(b"real")).unwrap();
    drain(&mut n, t);
    n.handle_datagram(t, dgram(PEER, vec![Frame::Slots { s: 0, r: 3, n: 4 }]));
    drain(&mut n, t);
    assert_eq!(n.tokens_in_flight(), 1);
    let r = AckRanges::from_ranges(&[0..4]).unwrap();
    n.handle_datagram(
        t,
        dgram(
            PEER,
            vec![Frame::Ack {
                r: 4,
                ranges: r.clone(),
            }],
        ),
    );
    assert_eq!(
        n.tokens_in_flight(),
        1,
        "ACK of another incarnation removes nothing"
    );
    assert_eq!(
        n.stats().stale_acks,
        2,
        "one count per range that removed nothing"
    );
    n.handle_datagram(t, dgram(PEER, vec![Frame::Ack { r: 3, ranges: r }]));
    assert_eq!(n.tokens_in_flight(), 0);
}

#[test]
fn slots_nobody_asked_for_are_refused() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    n.send(t, PEER, Bytes::from_static(b"m")).unwrap();
    drain(&mut n, t); // REQSLOTS(0, n, 0) with n = N + 1 = 129
                      // More slots than asked: refused, no envelopes taken.
    n.handle_datagram(
        t,
        dgram(
            PEER,
            vec![Frame::Slots {
                s: 0,
                r: 1,
                n: 10_000,
            }],
        ),
    );
    assert_eq!(n.stats().rejects.unrequested_slots, 1);
    assert_eq!(n.tokens_in_flight(), 0);
    // For another s: stale, ignored.
    n.handle_datagram(t, dgram(PEER, vec![Frame::Slots { s: 5, r: 1, n: 1 }]));
    assert_eq!(n.stats().stale_slots, 1);
    // From a node we never asked: a small waiver at most, and the clock moves only within
    // what was stored.
    let stranger = NodeId::from_const(77);
    let before = n.clock();
    n.handle_datagram(
        t,
        dgram(
            stranger,
            vec![Frame::Slots {
                s: VARINT_MAX - 5,
                r: 1,
                n: 3,
            }],
        ),
    );
    assert_eq!(n.clock(), before);
    assert_eq!(n.stats().rejects.clock_jump, 1);
}

/// Floods `b` with REQSLOTS from `count` distinct forged sender ids, draining its replies
/// as a driver would (they go nowhere).
fn forged_flood(b: &mut Node, now: Instant, count: u64, dst: NodeId) {
    let mut buf = Vec::new();
    for i in 0..count {
        let forged = NodeId::new(1_000_000 + i).unwrap();
        let req = Packet {
            header: Header::new(forged, dst),
            frames: vec![Frame::ReqSlots { s: i, n: 64, l: 0 }],
        };
        b.handle_datagram(now, req.encode());
        if i % 1000 == 0 {
            while b.poll_transmit(now, &mut buf).is_some() {
                buf.clear();
            }
        }
    }
    while b.poll_transmit(now, &mut buf).is_some() {
        buf.clear();
    }
}

/// Memory bounds that hold whatever a flood of forged ids did.
fn assert_flood_bounded(b: &Node, cap: usize) {
    assert!(b.receiver_records() <= cap);
    // Slots are ranges, one per record here; every forged record holds 64 slots.
    assert!(b.slot_ranges_held() <= cap + 4);
    assert!(b.slots_held() <= cap as u64 * 64 + 8192);
}

/// 100 000 forged sender ids each ask for slots at once. Records stay under the cap (the
/// requests beyond it are refused while the forged records are fresh, two round trips, and
/// then the record nothing was delivered into whose grace ran out first is evicted to make
/// room), memory stays
/// bounded, and an honest peer with an established stream keeps getting messages through.
#[test]
fn forged_id_flood_stays_bounded_and_honest_traffic_flows() {
    let cfg = {
        let mut conf = pair::test_config();
        conf.limits.max_receiver_records = 1024;
        conf
    };
    let mut p = pair::Pair::new(cfg);
    // Establish an honest stream a -> b first.
    for i in 0..100u32 {
        p.send(pair::A, i.to_be_bytes().to_vec());
    }
    p.run(Duration::from_millis(100));
    assert_eq!(p.nodes[pair::B].delivered.len(), 100);
    let now = p.now;
    let b = &mut p.nodes[pair::B].node;
    forged_flood(b, now, 100_000, pair::id(pair::B));
    assert_flood_bounded(b, 1024);
    // The honest record was proven (tokens were delivered into it): never evicted. The
    // forged records are fresh: the requests beyond them are refused.
    assert_eq!(b.stats().evictions, 0);
    assert_eq!(b.stats().rejects.too_many_records, 100_000 - 1023);
    // The honest stream continues.
    for i in 100..1100u32 {
        p.send(pair::A, i.to_be_bytes().to_vec());
        if i % 100 == 0 {
            p.run(Duration::from_millis(50));
        }
    }
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[pair::B].delivered.len(), 1100);
    assert_eq!(p.nodes[pair::A].acked.len(), 1100);
    assert!(p.nodes[pair::A].in_doubt.is_empty());
}

/// After a flood that filled every record slot with forged ids, a peer the receiver has
/// never heard from gets all its messages through: its request is refused while the forged
/// records are fresh (two round trips, `fresh_records_kept`), then evicts one.
#[test]
fn new_honest_peer_gets_through_after_a_flood() {
    let cfg = {
        let mut conf = pair::test_config();
        conf.limits.max_receiver_records = 256;
        conf
    };
    let mut p = pair::Pair::new(cfg);
    p.run(Duration::from_millis(1)); // the clock stores confirm
    let now = p.now;
    let b = &mut p.nodes[pair::B].node;
    forged_flood(b, now, 100_000, pair::id(pair::B));
    assert_eq!(
        b.receiver_records(),
        256,
        "the table is full of forged records"
    );
    assert_flood_bounded(b, 256);
    let refused = b.stats().rejects.too_many_records;
    assert_eq!(refused, 100_000 - 256);
    for i in 0..1000u32 {
        p.send(pair::A, i.to_be_bytes().to_vec());
    }
    p.run(Duration::from_secs(2));
    let mut got: Vec<u32> = p.nodes[pair::B]
        .delivered
        .iter()
        .map(|m| u32::from_be_bytes(m[..4].try_into().unwrap()))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..1000).collect::<Vec<_>>(), "exactly once");
    assert_eq!(p.nodes[pair::A].acked.len(), 1000);
    assert!(p.nodes[pair::A].in_doubt.is_empty());
    let honest = p.nodes[pair::B].node.stats().rejects.too_many_records - refused;
    assert!(honest <= 4, "refused {honest} times");
    assert!(p.nodes[pair::B].node.stats().evictions >= 1);
}

/// Amplification: no datagram sent in reply to a peer's datagram is larger than 3 times the
/// datagram received (plus a 32-byte floor for the tiniest inputs).
#[test]
fn replies_are_never_much_larger_than_what_provoked_them() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    let inputs = vec![
        vec![Frame::ReqSlots {
            s: 0,
            n: 4096,
            l: 0,
        }],
        vec![Frame::ReqSlots {
            s: 1 << 40,
            n: 1,
            l: 0,
        }],
        vec![Frame::Slots { s: 3, r: 9, n: 0 }],
        vec![Frame::Token {
            s: 1,
            r: 1 << 50,
            payload: Bytes::new(),
            senders_copy: false,
        }],
        (0..40)
            .map(|i| Frame::Token {
                s: i * 2,
                r: 9,
                payload: Bytes::new(),
                senders_copy: false,
            })
            .collect(),
    ];
    for (i, frames) in inputs.into_iter().enumerate() {
        let src = NodeId::new(500 + i as u64).unwrap();
        let d = dgram(src, frames);
        n.handle_datagram(t, d.clone());
        confirm_clock(&mut n, t);
        let mut buf = Vec::new();
        while let Some(tx) = n.poll_transmit(t, &mut buf) {
            assert!(
                tx.size <= 3 * d.len() + 32,
                "reply {} to input {} bytes",
                tx.size,
                d.len()
            );
        }
    }
}

/// The 17-byte attack: a REQSLOTS in a sender's name whose frontier lies far above every
/// slot its record holds would drop the slots its tokens are in flight for (and rule 4
/// would then acknowledge those tokens undelivered). Refused, with the slots kept.
#[test]
fn a_frontier_beyond_the_grant_is_refused() {
    let t = Instant::now();
    let mut n = node(Config::default(), t);
    n.handle_datagram(
        t,
        dgram(
            PEER,
            vec![Frame::ReqSlots {
                s: 100,
                n: 10,
                l: 100,
            }],
        ),
    );
    assert_eq!(n.slots_held(), 10);
    let huge = 1u64 << 50;
    // Plaintext: what a restarted sender sends (within its `s`, above the grant) cannot be
    // told from a forgery, so it is refused too (sealed, it is accepted:
    // `endpoint/loopback.rs`, `a_sender_restarted_at_another_address_is_heard`).
    for (s, l) in [(huge, huge), (100, 1000), (200, 150)] {
        let f = dgram(PEER, vec![Frame::ReqSlots { s, n: 0, l }]);
        assert_eq!(n.handle_datagram(t, f), None, "s={s} l={l}");
    }
    assert_eq!(n.stats().rejects.frontier_beyond_grant, 3);
    assert_eq!(n.stats().sender_restarts, 0);
    assert_eq!(n.slots_held(), 10, "no slot dropped");
    // An honest waiver (frontier within what was granted) still works.
    n.handle_datagram(
        t,
        dgram(
            PEER,
            vec![Frame::ReqSlots {
                s: 110,
                n: 0,
                l: 105,
            }],
        ),
    );
    assert_eq!(n.slots_held(), 5);
}

/// A record a peer created and never used does not probe forever: after a few unanswered
/// probes it is evicted like an unused record under pressure, and a token for it, should
/// one ever come, gets RETRY (certainly not delivered), never ACK.
#[test]
fn an_unused_record_stops_probing_and_is_evicted() {
    let mut t = Instant::now();
    let mut n = node(Config::default(), t);
    n.handle_datagram(
        t,
        dgram(
            PEER,
            vec![Frame::ReqSlots {
                s: 100,
                n: 10,
                l: 100,
            }],
        ),
    );
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(tx) = n.poll_transmit(t, &mut buf) {
        out.push(Bytes::copy_from_slice(&buf[buf.len() - tx.size..]));
    }
    let r = match Packet::decode(&out[0]).unwrap().frames.as_slice() {
        [Frame::Slots { r, .. }] => *r,
        f => panic!("{f:?}"),
    };
    // Silence from the peer for as long as the timers run.
    for _ in 0..200 {
        let Some(d) = n.poll_timeout() else { break };
        t = t.max(d);
        n.handle_timeout(t);
        drain(&mut n, t);
    }
    assert_eq!(n.receiver_records(), 0, "the unused record is gone");
    assert!(n.is_idle());
    let probes = n.stats().probes;
    assert!((1..=8).contains(&probes), "probed {probes} times");
    assert_eq!(
        n.poll_timeout(),
        None,
        "no timer left: nothing probes forever"
    );
    // A late token for it: RETRY.
    let tok = dgram(
        PEER,
        vec![Frame::Token {
            s: 100,
            r,
            payload: Bytes::from_static(b"late"),
            senders_copy: false,
        }],
    );
    n.handle_datagram(t, tok);
    assert_eq!(n.poll_event(), None);
    let mut buf = Vec::new();
    let tx = n.poll_transmit(t, &mut buf).unwrap();
    let p = Packet::decode(&Bytes::copy_from_slice(&buf[buf.len() - tx.size..])).unwrap();
    assert!(
        matches!(p.frames.as_slice(), [Frame::Retry { .. }]),
        "{p:?}"
    );
}
