//! Congestion control, pacing and fast loss recovery seen from the wire, in virtual time
//! (the two-node `Pair`).

use std::time::Duration;

use exon::proto::{CongestionControl, Frame, NodeId};
use exon_testkit::pair::{self, test_config, Fate, Pair, Wire, A, B};

/// Whether a datagram carries a TOKEN whose payload starts with `tag`.
fn carries(w: &Wire, tag: u8) -> bool {
    w.packet()
        .frames
        .iter()
        .any(|f| matches!(f, Frame::Token { payload, .. } if payload.first() == Some(&tag)))
}

fn tokens(w: &Wire) -> usize {
    w.packet()
        .frames
        .iter()
        .filter(|f| matches!(f, Frame::Token { .. }))
        .count()
}

/// One lost token among twenty is repaired as soon as the acknowledgements of the tokens
/// sent after it arrive: about one round trip, where the retransmission timer (at least one
/// second here) would wait far longer.
#[test]
fn fast_loss_recovery_repairs_a_single_loss_without_waiting_for_the_timer() {
    let cfg = {
        let mut c = test_config();
        c.timers.min_rto = Duration::from_secs(1);
        c.timers.max_rto = Duration::from_secs(2);
        c
    };
    let mut pair = Pair::new(cfg);
    let mut dropped = false;
    pair.set_filter(move |w| {
        if !dropped && w.from == A && carries(w, 3) {
            dropped = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    let start = pair.now;
    for i in 0..20u8 {
        pair.send(A, vec![i; 1000]);
    }
    while pair.nodes[A].acked.len() < 20 && pair.now - start < Duration::from_secs(10) {
        assert!(pair.step());
    }
    let took = pair.now - start;
    let s = *pair.nodes[A].node.stats();
    assert_eq!(pair.nodes[B].delivered.len(), 20);
    assert_eq!(s.losses_detected, 1, "{s:?}");
    assert_eq!((s.timeouts, s.tail_probes), (0, 0));
    assert_eq!(s.retransmissions, 1);
    // Slots (one round trip), tokens and their ACKs (one), the repair (one): 5 ms each way.
    assert!(took < Duration::from_millis(60), "took {took:?}");
}

/// Ten tokens that share a datagram are acknowledged in one verdict frame: one RTT sample,
/// not ten. The first sample sets RTTVAR to half the RTT (RFC 6298); ten identical samples
/// would shrink it to 0.075 of that, and the retransmission timeout with it.
#[test]
fn a_verdict_frame_is_one_rtt_sample_however_many_tokens_it_settles() {
    let mut pair = Pair::new(test_config());
    for i in 0..10u8 {
        pair.send(A, vec![i; 50]);
    }
    let start = pair.now;
    while pair.nodes[A].acked.len() < 10 && pair.now - start < Duration::from_secs(10) {
        assert!(pair.step());
    }
    assert_eq!(pair.nodes[A].acked.len(), 10);
    let p = pair.nodes[A]
        .node
        .path(pair::id(B))
        .expect("a sender record");
    let (srtt, var) = (p.srtt.expect("measured"), p.rtt_var.expect("measured"));
    assert!(
        var >= srtt / 4,
        "RTTVAR {var:?} against SRTT {srtt:?}: one sample per token?"
    );
}

/// The first flight is bounded by the initial congestion window and leaves in bursts of
/// the pacing quantum, while the pacer's next send time is what `poll_timeout` reports.
/// Without a controller the whole batch of envelopes goes at once.
#[test]
fn the_first_flight_is_bounded_by_the_window_and_paced() {
    let first_flight = |cc: CongestionControl| {
        let cfg = {
            let mut c = test_config();
            c.flow.congestion = cc;
            c
        };
        let mut pair = Pair::new(cfg);
        pair.record = true;
        for i in 0..200u32 {
            let mut v = i.to_be_bytes().to_vec();
            v.resize(1000, 0);
            pair.send(A, v);
        }
        // Until B sends its first ACK: what A sent before any acknowledgement could reach it.
        let mut blocked_on_pacer = false;
        let acked = |log: &[Wire]| {
            log.iter().any(|w| {
                w.from == B
                    && w.packet()
                        .frames
                        .iter()
                        .any(|f| matches!(f, Frame::Ack { .. }))
            })
        };
        while !acked(&pair.log) {
            assert!(pair.step());
            let a = &mut pair.nodes[A].node;
            let b = NodeId::new(2).unwrap();
            let p = a.path(b).unwrap();
            if a.pending_to(b) > 0 && p.in_flight + 1100 <= p.window {
                // Not window-limited with tokens waiting: the pacer holds them, and its
                // next send time is armed, well before any retransmission timeout.
                let at = a.poll_timeout().unwrap();
                blocked_on_pacer |= at < pair.now + Duration::from_millis(5);
            }
        }
        let log = std::mem::take(&mut pair.log);
        let from_a: Vec<&Wire> = log.iter().filter(|w| w.from == A).collect();
        let sent: usize = from_a.iter().map(|w| tokens(w)).sum();
        (sent, blocked_on_pacer)
    };
    let (off, _) = first_flight(CongestionControl::Off);
    assert!(
        off >= 128,
        "without a controller: every envelope at once ({off})"
    );
    let (bbr, paced) = first_flight(CongestionControl::Bbr);
    // The initial window: ten 1200-byte datagrams, about eleven 1 KB tokens.
    assert!((8..=12).contains(&bbr), "first flight {bbr}");
    assert!(paced, "the pacer never held a token back");
    let (reno, _) = first_flight(CongestionControl::NewReno);
    assert!((8..=12).contains(&reno), "first flight {reno}");
}

/// A sender held back by its congestion window still answers its peer at once: SLOTS for
/// the peer's request and ACKs for the peer's tokens are never held back.
#[test]
fn replies_are_never_held_back_by_congestion_control() {
    let mut pair = Pair::new(test_config());
    for i in 0..500u32 {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(1000, 0);
        pair.send(A, v);
    }
    for _ in 0..50 {
        pair.step();
    }
    let b = NodeId::new(2).unwrap();
    let p = pair.nodes[A].node.path(b).unwrap();
    assert!(pair.nodes[A].node.pending_to(b) > 100, "A is still busy");
    assert!(p.window < u64::MAX);
    // B sends one message to A now: REQSLOTS, SLOTS, TOKEN, ACK take two round trips.
    let start = pair.now;
    pair.send(B, &b"reply"[..]);
    while pair.nodes[B].acked.is_empty() {
        assert!(pair.step());
    }
    assert!(
        pair.now - start <= Duration::from_millis(25),
        "B's message took {:?}",
        pair.now - start
    );
}

/// Forged acknowledgements (every slot of every incarnation) settle only tokens that
/// exist: the controller's counters stay sane and the node keeps working.
#[test]
fn forged_ack_ranges_do_not_upset_the_controller() {
    use exon::proto::{AckRanges, Header, Packet};
    let mut pair = Pair::new(test_config());
    for i in 0..50u8 {
        pair.send(A, vec![i; 500]);
    }
    for _ in 0..6 {
        pair.step();
    }
    let max = (1u64 << 62) - 1;
    for r in [0, 1, 1000, 2000, max - 1] {
        let p = Packet {
            header: Header::new(pair::id(B), pair::id(A)),
            frames: vec![Frame::Ack {
                r,
                ranges: AckRanges::from_ranges(&[0..1, 5..max]).unwrap(),
            }],
        };
        pair.inject(A, p.encode());
    }
    let b = NodeId::new(2).unwrap();
    if let Some(p) = pair.nodes[A].node.path(b) {
        assert!(p.in_flight <= 50 * 600, "{p:?}");
        assert!(p.window >= 4 * 1200, "{p:?}");
    }
    pair.run(Duration::from_secs(30));
    assert!(pair.both_idle());
}

/// A lost ACK datagram costs nothing: the next ACK frame repeats the slots the lost one
/// acknowledged, so the sender declares nothing lost and resends nothing.
#[test]
fn a_lost_ack_is_repeated_in_the_next_one() {
    let mut pair = Pair::new(test_config());
    let mut acks_seen = 0;
    pair.set_filter(move |w| {
        let is_ack = w.from == B
            && w.packet()
                .frames
                .iter()
                .any(|f| matches!(f, Frame::Ack { .. }));
        if is_ack {
            acks_seen += 1;
            if acks_seen == 3 {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    for i in 0..300u32 {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(1000, 0);
        pair.send(A, v);
    }
    pair.run(Duration::from_secs(30));
    assert_eq!(pair.nodes[A].acked.len(), 300);
    let s = pair.nodes[A].node.stats();
    assert_eq!((s.losses_detected, s.retransmissions), (0, 0), "{s:?}");
}

/// A lost SLOTS (or REQSLOTS) is found like a lost token: tokens sent after the request
/// were acknowledged and no answer came, so the request goes again at once instead of after
/// the retransmission timeout (one second here).
#[test]
fn a_lost_slot_request_is_repeated_without_waiting_for_the_timer() {
    let cfg = {
        let mut c = test_config();
        c.timers.min_rto = Duration::from_secs(1);
        c.timers.max_rto = Duration::from_secs(2);
        c
    };
    let mut pair = Pair::new(cfg);
    let mut grants = 0;
    pair.set_filter(move |w| {
        let grant = w.from == B
            && w.packet()
                .frames
                .iter()
                .any(|f| matches!(f, Frame::Slots { n, .. } if *n > 0));
        if grant {
            grants += 1;
            if grants == 2 {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    let start = pair.now;
    for i in 0..2000u32 {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(100, 0);
        pair.send(A, v);
    }
    while pair.nodes[A].acked.len() < 2000 && pair.now - start < Duration::from_secs(10) {
        assert!(pair.step());
    }
    let took = pair.now - start;
    let s = pair.nodes[A].node.stats();
    assert!(s.reqslots_retransmissions >= 1, "{s:?}");
    assert!(took < Duration::from_millis(300), "took {took:?}");
}

/// Startup grows as fast as its window, not as fast as slots come: while the window doubles
/// each round trip, the sender asks for the slots the next round will need (its slot window
/// counts the window's growth), so a 100 ms path with no bottleneck carries 4 000 messages
/// in 1.16 s. Slots for twice the present window only (as for a sender that is not
/// growing) held each round to little more than the last: 1.41 s. (The pair is simulated:
/// the times are exact.)
#[test]
fn startup_is_held_back_by_its_window_not_by_slots() {
    let mut cfg = test_config();
    cfg.timers.initial_rtt = Duration::from_millis(100);
    let mut pair = Pair::new(cfg);
    pair.latency = Duration::from_millis(50);
    let start = pair.now;
    for i in 0..4_000u32 {
        pair.send(A, i.to_be_bytes().repeat(250));
    }
    while pair.nodes[A].acked.len() < 4_000 && pair.now - start < Duration::from_secs(5) {
        assert!(pair.step());
    }
    let took = pair.now - start;
    assert_eq!(pair.nodes[B].delivered.len(), 4_000);
    assert!(took < Duration::from_millis(1_300), "took {took:?}");
}
