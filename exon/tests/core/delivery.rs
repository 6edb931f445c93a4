//! Delivery semantics that tell the truth, in the core with the `Pair` harness.
//!
//! Acknowledged means taken: a delivery is acknowledged only once the embedding reports that
//! the application took it (`Node::handle_taken`). Until then its sender retransmits and
//! gets no answer, a receiver that restarts makes it in doubt, and the receiver holds at
//! most `max_untaken` such deliveries. And a receiver understands datagrams larger than its
//! own.

use std::time::Duration;

use bytes::Bytes;
use exon::proto::{Abandoned, Config, Node, Security};

use exon_testkit::pair::*;

const QUIET: Duration = Duration::from_secs(5);

/// A pair whose receiver B delivers without taking (its application is slow).
fn slow_receiver(cfg: Config) -> Pair {
    let mut p = Pair::new(cfg);
    p.nodes[B].auto_take = false;
    p
}

#[test]
fn a_delivery_is_acknowledged_only_once_taken() {
    let mut p = slow_receiver(test_config());
    for i in 0..3u8 {
        p.send(A, Bytes::from(vec![i]));
    }
    p.run(QUIET);
    assert_eq!(p.nodes[B].delivered.len(), 3, "delivered to the embedding");
    assert!(p.nodes[A].acked.is_empty(), "acknowledged before taken");
    assert_eq!(p.node(B).untaken(), 3);
    assert!(
        p.node(A).stats().retransmissions > 0,
        "the sender keeps the tokens"
    );
    assert_eq!(p.node(B).stats().delivered, 3, "duplicates not delivered");
    p.take(B, 1);
    p.run(QUIET);
    assert_eq!(p.nodes[A].acked.len(), 1);
    p.take(B, 2);
    p.run(QUIET);
    assert_eq!(p.nodes[A].acked.len(), 3);
    assert_eq!(p.node(B).stats().taken, 3);
    assert!(p.both_idle(), "records kept after every message was taken");
}

/// Rule 4 answers ACK to a token whose record is gone. A record whose slots are all filled
/// but whose deliveries are not all taken must therefore stay, and a duplicate TOKEN for an
/// untaken delivery gets no answer at all.
#[test]
fn a_duplicate_of_an_untaken_delivery_gets_no_ack() {
    let cfg = {
        let mut c = test_config();
        c.flow.envelope_target = 1;
        c.flow.envelope_low = 0;
        c.flow.window = 1;
        c
    };
    let mut p = slow_receiver(cfg);
    p.send(A, Bytes::from_static(b"only"));
    p.run(QUIET);
    assert_eq!(p.nodes[B].delivered.len(), 1);
    assert_eq!(p.node(B).slots_held(), 0, "its only slot is filled");
    assert_eq!(
        p.node(B).receiver_records(),
        1,
        "the record stays until taken"
    );
    assert!(p.node(B).stats().duplicates_dropped > 0, "retransmitted");
    assert_eq!(p.node(B).stats().frames_out.ack, 0, "a duplicate was acked");
    assert!(p.nodes[A].acked.is_empty());
    p.take(B, 1);
    p.run(QUIET);
    assert_eq!(p.nodes[A].acked.len(), 1);
    assert!(p.both_idle());
}

/// A receiver that dies before the hand-over: its sender hears DOUBT (delivered at most
/// once, maybe lost in the receiver's buffer), never ACK.
#[test]
fn a_receiver_restarting_before_the_hand_over_yields_in_doubt() {
    let mut p = slow_receiver(test_config());
    for i in 0..4u8 {
        p.send(A, Bytes::from(vec![i]));
    }
    p.run(Duration::from_millis(50));
    assert_eq!(p.nodes[B].delivered.len(), 4);
    // B crashes with the four messages in its application's buffer.
    let stored = p.nodes[B].stored;
    p.nodes[B].node = Node::new(id(B), Security::InsecurePlaintext, test_config(), stored).unwrap();
    p.nodes[B].untaken.clear();
    p.run(QUIET);
    assert!(p.nodes[A].acked.is_empty(), "acknowledged, never taken");
    assert_eq!(p.nodes[A].in_doubt.len(), 4);
    assert_eq!(p.node(A).pending_to(id(B)), 0);
}

/// The receiver holds at most `max_untaken` deliveries; further tokens wait at their sender
/// (retransmitted), and go through once the application catches up.
#[test]
fn untaken_deliveries_are_bounded() {
    let cfg = {
        let mut c = test_config();
        c.limits.max_untaken = 2;
        c
    };
    let mut p = slow_receiver(cfg);
    for i in 0..5u8 {
        p.send(A, Bytes::from(vec![i]));
    }
    p.run(Duration::from_millis(200));
    assert_eq!(p.nodes[B].delivered.len(), 2);
    assert_eq!(p.node(B).untaken(), 2);
    assert!(p.node(B).stats().held_back > 0);
    for _ in 0..3 {
        p.take(B, 2);
        p.run(QUIET);
    }
    let mut got: Vec<u8> = p.nodes[B].delivered.iter().map(|b| b[0]).collect();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2, 3, 4]);
    assert_eq!(p.nodes[A].acked.len(), 5);
}

/// Taking an id twice, or one from before a restart, does nothing.
#[test]
fn taking_twice_is_refused() {
    let mut p = slow_receiver(test_config());
    p.send(A, Bytes::from_static(b"x"));
    p.run(QUIET);
    let d = p.nodes[B].untaken[0];
    let now = p.now;
    assert!(p.node(B).handle_taken(now, d));
    assert!(!p.node(B).handle_taken(now, d));
    p.nodes[B].untaken.clear();
    p.run(QUIET);
    assert_eq!(p.nodes[A].acked.len(), 1);
}

/// With the rule off (ACK on delivery, as before), the sender is told "acknowledged" for
/// messages the receiver's application never took.
#[cfg(feature = "rule-switches")]
#[test]
fn without_the_rule_untaken_messages_are_acknowledged() {
    let mut p = slow_receiver(test_config());
    let rules = {
        let mut c = exon::proto::Rules::ALL;
        c.ack_on_take = false;
        c
    };
    p.node(B).set_rules(rules);
    for i in 0..3u8 {
        p.send(A, Bytes::from(vec![i]));
    }
    p.run(QUIET);
    assert_eq!(p.nodes[A].acked.len(), 3, "the defect the rule prevents");
}

/// A receiver takes datagrams up to the UDP maximum whatever its own `max_datagram_size`: a
/// sender configured with larger datagrams packs a burst of small messages into a few large
/// ones, and sends a payload larger than the receiver itself could send; all get through.
#[test]
fn a_receiver_understands_datagrams_larger_than_its_own() {
    let big = {
        let mut c = test_config();
        c.mtu.max_datagram_size = 8192;
        c.mtu.discovery = false;
        c
    };
    let small = {
        let mut c = test_config();
        c.mtu.max_datagram_size = 1200;
        c.mtu.discovery = false;
        c
    };
    let mut p = Pair::with_configs(big, small);
    for i in 0..100u8 {
        p.send(A, Bytes::from(vec![i; 100]));
    }
    p.send(A, Bytes::from(vec![7u8; 5000]));
    p.run(QUIET);
    assert_eq!(p.nodes[B].delivered.len(), 101);
    assert_eq!(p.nodes[A].acked.len(), 101);
    assert_eq!(p.node(B).stats().rejects.total(), 0);
}

// ----- deadlines: giving up tells the truth ----------------------------------------------

fn has_token(w: &Wire) -> bool {
    w.packet()
        .frames
        .iter()
        .any(|f| matches!(f, exon::proto::Frame::Token { .. }))
}

/// Given up before any copy left (the receiver never answered the request for slots): not
/// delivered, for sure; the message is forgotten, and never arrives.
#[test]
fn a_message_given_up_before_it_left_is_not_delivered() {
    let mut p = Pair::new(test_config());
    p.set_filter(|w| {
        if w.from == A {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let m = p.send(A, Bytes::from_static(b"late"));
    p.run(Duration::from_millis(300));
    let now = p.now;
    assert_eq!(
        p.node(A).abandon(now, id(B), m),
        Some(Abandoned::NotDelivered)
    );
    assert_eq!(p.node(A).abandon(now, id(B), m), None, "forgotten");
    p.set_filter(|_| Fate::Deliver);
    p.run(QUIET);
    assert!(p.nodes[B].delivered.is_empty());
    assert!(p.nodes[A].acked.is_empty() && p.nodes[A].in_doubt.is_empty());
    assert!(p.both_idle());
}

/// Given up after a copy left: in doubt (the copy may still arrive); never sent again.
#[test]
fn a_message_given_up_after_it_left_is_in_doubt() {
    let mut p = Pair::new(test_config());
    p.set_filter(|w| {
        if has_token(w) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let m = p.send(A, Bytes::from_static(b"lost"));
    p.run(Duration::from_millis(300));
    assert!(p.node(A).stats().frames_out.token > 0);
    let now = p.now;
    assert_eq!(p.node(A).abandon(now, id(B), m), Some(Abandoned::InDoubt));
    let sent = p.node(A).stats().frames_out.token;
    p.set_filter(|_| Fate::Deliver);
    p.run(QUIET);
    assert_eq!(p.node(A).stats().frames_out.token, sent, "sent again");
    assert!(p.nodes[A].acked.is_empty());
    assert!(p.both_idle(), "the receiver's slot was not released");
}

/// With the rule off, a message whose copy is only late is reported not delivered, and
/// then arrives.
#[cfg(feature = "rule-switches")]
#[test]
fn without_the_rule_a_message_reported_not_delivered_arrives() {
    let mut p = Pair::new(test_config());
    p.node(A).set_rules({
        let mut c = exon::proto::Rules::ALL;
        c.deadline_doubts_sent_tokens = false;
        c
    });
    p.set_filter(|w| {
        if has_token(w) {
            Fate::Delay(Duration::from_millis(500))
        } else {
            Fate::Deliver
        }
    });
    let m = p.send(A, Bytes::from_static(b"slow"));
    p.run(Duration::from_millis(100));
    let now = p.now;
    assert_eq!(
        p.node(A).abandon(now, id(B), m),
        Some(Abandoned::NotDelivered)
    );
    p.run(QUIET);
    assert_eq!(
        p.nodes[B].delivered.len(),
        1,
        "the defect the rule prevents"
    );
}

// ----- peer liveness -------------------------------------------------------------------------

/// A peer that answers nothing while a message waits for it is reported unreachable, once;
/// nothing is dropped; at its first datagram it is reachable again and the message goes
/// through.
#[test]
fn a_silent_peer_is_reported_unreachable_then_reachable() {
    let cfg = {
        let mut c = test_config();
        c.timers.unreachable_after = Duration::from_millis(300);
        c.timers.max_rto = Duration::from_millis(100);
        c
    };
    let mut p = Pair::new(cfg);
    p.set_filter(|w| {
        if w.from == B {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.send(A, Bytes::from_static(b"x"));
    p.run(Duration::from_millis(200));
    assert!(p.nodes[A].liveness.is_empty(), "too early");
    p.run(Duration::from_secs(3));
    assert_eq!(p.nodes[A].liveness, [false]);
    assert!(p.node(A).is_unreachable(id(B)));
    assert_eq!(p.node(A).pending_to(id(B)), 1, "nothing dropped");
    p.set_filter(|_| Fate::Deliver);
    p.run(QUIET);
    assert_eq!(p.nodes[A].liveness, [false, true]);
    assert_eq!(p.nodes[A].acked.len(), 1);
    assert!(!p.node(A).is_unreachable(id(B)));
}

/// Silence with nothing to send is not a failure.
#[test]
fn an_idle_peer_is_never_unreachable() {
    let cfg = {
        let mut c = test_config();
        c.timers.unreachable_after = Duration::from_millis(100);
        c.timers.max_rto = Duration::from_millis(50);
        c
    };
    let mut p = Pair::new(cfg);
    p.send(A, Bytes::from_static(b"x"));
    p.run(QUIET);
    p.set_filter(|_| Fate::Drop);
    p.run(QUIET);
    assert!(p.nodes[A].liveness.is_empty() && p.nodes[B].liveness.is_empty());
}

/// A slow consumer slows its sender: once `max_untaken` deliveries wait, the receiver grants
/// no new slots, so the sender's messages wait at the sender (queued, bounded by its own
/// limits) instead of piling up at the receiver.
#[test]
fn a_slow_consumer_holds_back_new_grants() {
    let cfg = {
        let mut c = test_config();
        c.limits.max_untaken = 4;
        c.flow.envelope_target = 4;
        c.flow.envelope_low = 2;
        c.flow.window = 8;
        c
    };
    let mut p = slow_receiver(cfg);
    for i in 0..40u8 {
        p.send(A, Bytes::from(vec![i]));
    }
    p.run(Duration::from_secs(2));
    assert_eq!(p.node(B).untaken(), 4);
    assert!(p.node(B).slots_held() <= 8, "granted past the bound");
    assert!(
        p.node(A).messages_queued() >= 40 - 8,
        "the sender was not held back"
    );
    while p.nodes[A].acked.len() < 40 {
        p.take(B, 4);
        p.run(Duration::from_secs(2));
    }
    assert_eq!(p.nodes[B].delivered.len(), 40);
}

/// The grant side of the bound, frame by frame: a receiver whose application is
/// `max_untaken` deliveries behind gives a new source no slots at all.
#[test]
fn a_full_receiver_grants_no_new_slots() {
    let cfg = {
        let mut c = test_config();
        c.limits.max_untaken = 1;
        c
    };
    let mut p = slow_receiver(cfg);
    p.send(A, Bytes::from_static(b"x"));
    p.run(QUIET);
    assert_eq!(p.node(B).untaken(), 1);
    let c = exon::proto::NodeId::from_const(3);
    let req = exon::proto::Packet {
        header: exon::proto::Header::new(c, id(B)),
        frames: vec![exon::proto::Frame::ReqSlots { s: 0, n: 4, l: 0 }],
    };
    let now = p.now;
    p.node(B).handle_datagram(now, req.encode());
    assert_eq!(p.node(B).receiver_records(), 1, "a new source got slots");
    assert!(p.node(B).stats().held_back > 0);
    p.take(B, 1);
    p.node(B).handle_datagram(now, req.encode());
    assert_eq!(p.node(B).receiver_records(), 2, "room again: C gets slots");
}

/// One source whose deliveries its receiver's application does not take (an ordered
/// flow's messages far beyond their turn, say) fills at most its share of the untaken room
/// (`max_untaken_per_source`): another source still gets slots and deliveries. Returns
/// whether a third source got slots once A's messages waited untaken, with the rule
/// `untaken_share_per_source` as given.
fn another_source_gets_slots_past_a_hoarder(share: bool) -> bool {
    let cfg = {
        let mut c = test_config();
        c.limits.max_untaken = 4;
        c.limits.max_untaken_per_source = 2;
        c
    };
    let mut p = slow_receiver(cfg);
    let mut rules = exon::proto::Rules::ALL;
    rules.untaken_share_per_source = share;
    p.node(B).set_rules(rules);
    for i in 0..10u8 {
        p.send(A, Bytes::from(vec![i]));
    }
    p.run(Duration::from_secs(2));
    let held = p.node(B).untaken();
    assert_eq!(
        held,
        if share { 2 } else { 4 },
        "A's deliveries held untaken"
    );
    let c = exon::proto::NodeId::from_const(3);
    let req = exon::proto::Packet {
        header: exon::proto::Header::new(c, id(B)),
        frames: vec![exon::proto::Frame::ReqSlots { s: 0, n: 4, l: 0 }],
    };
    let now = p.now;
    let before = p.node(B).receiver_records();
    p.node(B).handle_datagram(now, req.encode());
    p.node(B).receiver_records() > before
}

#[test]
fn a_source_holding_its_share_untaken_leaves_room_to_others() {
    assert!(another_source_gets_slots_past_a_hoarder(true));
}

/// The rule off: A fills the node's room, and no other source gets a slot.
#[test]
fn without_shares_one_source_fills_the_untaken_room_for_all() {
    assert!(!another_source_gets_slots_past_a_hoarder(false));
}

/// A message sent with `Node::send_reported` (an ordered flow's message, which its receiver
/// may hold untaken for its turn) is reported held by HELD as soon as it arrives: its sender
/// never takes it for lost while it waits untaken (it only asks about it now and then), and
/// its verdict
/// still waits for the take. Sent with `send`, the same waiting message is retransmitted and
/// counted lost at every timeout (what stalled streams behind one lost chunk).
#[test]
fn a_reported_message_waiting_untaken_is_reported_held_not_lost() {
    let waiting = |reported: bool| {
        let mut p = slow_receiver(test_config());
        for i in 0..4u8 {
            let now = p.now;
            let payload = Bytes::from(vec![i; 100]);
            if reported {
                p.node(A).send_reported(now, id(B), payload).unwrap();
            } else {
                p.node(A).send(now, id(B), payload).unwrap();
            }
            p.drain(A);
        }
        p.run(QUIET);
        assert_eq!(p.nodes[B].delivered.len(), 4, "delivered once each");
        assert!(p.nodes[A].acked.is_empty(), "acknowledged before taken");
        let stats = *p.node(A).stats();
        let path = p.node(A).path(id(B)).expect("a sender record");
        p.take(B, 4);
        p.run(QUIET);
        assert_eq!(p.nodes[A].acked.len(), 4, "acknowledged once taken");
        assert_eq!(p.node(B).stats().delivered, 4);
        (stats, path)
    };
    let (reported, path) = waiting(true);
    // Asked about at its retransmission timeout (its first bytes again, answered by HELD),
    // never taken for lost; its arrival feeds the RTT and the congestion controller.
    assert_eq!(reported.losses_detected, 0, "{reported:?}");
    assert_eq!(reported.spurious_losses, 0);
    assert!(
        reported.frames_in.held >= 1,
        "the receiver said it holds them: {reported:?}"
    );
    assert_eq!(reported.frames_out.token, 0, "sent as whole FRAGs");
    assert!(
        path.min_rtt.is_some() && path.bandwidth.is_some(),
        "{path:?}"
    );
    // Sent plainly: sent whole again at every timeout, and nothing tells the sender it
    // arrived (no RTT, no delivery rate) until it is taken.
    let (plain, path) = waiting(false);
    assert_eq!(plain.frames_in.got + plain.frames_in.held, 0);
    assert!(plain.retransmissions >= 4, "{plain:?}");
    assert!(
        path.min_rtt.is_none() && path.bandwidth.is_none(),
        "{path:?}"
    );
}

/// A's third reported message is queued behind two that B holds untaken, whose
/// application waits for the third before it takes them (as an ordered channel's receiver
/// waits for the number before theirs), under a slot window of two. Returns whether the
/// third arrived, and whether all three were acknowledged once B took them.
/// `rule`: A's `held_outside_slot_window`.
fn queued_behind_held_tokens(rule: bool) -> (bool, usize) {
    let mut cfg = test_config();
    cfg.flow.window = 2;
    cfg.flow.envelope_target = 2;
    cfg.flow.envelope_low = 1;
    let mut p = slow_receiver(cfg);
    let mut rules = exon::proto::Rules::ALL;
    rules.held_outside_slot_window = rule;
    p.node(A).set_rules(rules);
    for m in [&b"second"[..], b"third"] {
        let now = p.now;
        p.node(A)
            .send_reported(now, id(B), Bytes::copy_from_slice(m))
            .unwrap();
        p.drain(A);
    }
    p.run(QUIET);
    assert_eq!(p.nodes[B].delivered.len(), 2, "both held untaken at B");
    let first = Bytes::from_static(b"first");
    let now = p.now;
    p.node(A).send_reported(now, id(B), first.clone()).unwrap();
    p.drain(A);
    p.run(Duration::from_secs(30));
    let arrived = p.nodes[B].delivered.contains(&first);
    if arrived {
        p.take(B, 3);
        p.run(QUIET);
    }
    (arrived, p.nodes[A].acked.len())
}

/// Tokens their receiver holds whole and untaken leave the slot window once nothing else is
/// in flight: the message queued behind them gets a slot. With
/// `Rules::held_outside_slot_window` off, the held tokens fill the window for good and the
/// queued message never asks for one (the simulator found it: a channel's gap queued behind
/// messages held for it, `exon-sim --channels 16 --window 2 ... --seed 339261265`).
#[test]
fn a_message_queued_behind_tokens_held_untaken_gets_a_slot() {
    assert_eq!(queued_behind_held_tokens(true), (true, 3));
    assert_eq!(queued_behind_held_tokens(false), (false, 0));
}

/// The TOKENs of one datagram are each answered as if it came alone (a run of them shares
/// one lookup of the record, `Node::on_token_run`): a duplicate in the middle of a run,
/// tokens past the untaken room, and the tokens after either.
mod one_datagram {
    use std::time::Instant;

    use bytes::Bytes;
    use exon::proto::{Config, Event, Frame};
    use exon_testkit::frames::{events, feed_untaken, node, out, packet, slots_r, A, B};

    #[test]
    fn the_tokens_of_a_datagram_are_each_answered_as_alone() {
        let t = Instant::now();
        let mut cfg = Config::default();
        cfg.limits.max_untaken = 5;
        let mut b = node(B, cfg, 0, t);
        feed_untaken(
            &mut b,
            t,
            &[packet(
                A,
                B,
                vec![Frame::ReqSlots {
                    s: 100,
                    n: 6,
                    l: 100,
                }],
            )],
        );
        let r = slots_r(&out(&mut b, t));
        let tok = |s: u64| Frame::Token {
            s,
            r,
            payload: Bytes::from(s.to_be_bytes().to_vec()),
            senders_copy: s.is_multiple_of(2),
        };
        let delivered = |b: &mut exon::proto::Node| -> Vec<(u64, exon::proto::DeliveryId)> {
            events(b)
                .into_iter()
                .filter_map(|e| match e {
                    Event::Delivered { payload, id, .. } => {
                        Some((u64::from_be_bytes(payload[..].try_into().unwrap()), id))
                    }
                    _ => None,
                })
                .collect()
        };
        // A duplicate in the middle of a run: dropped (its delivery is untaken, so it gets
        // no answer yet), and the token after it delivered.
        let first = vec![tok(100), tok(101), tok(101), tok(102)];
        feed_untaken(&mut b, t, &[packet(A, B, first)]);
        let got = delivered(&mut b);
        assert_eq!(got.iter().map(|d| d.0).collect::<Vec<_>>(), [100, 101, 102]);
        assert_eq!(b.stats().duplicates_dropped, 1);
        // Room for two more: the third is held back, not delivered, not answered; a token
        // of an incarnation B never had after it is answered as such.
        let stranger = Frame::Token {
            s: 9,
            r: r + 7,
            payload: Bytes::from_static(b"?"),
            senders_copy: false,
        };
        let second = vec![tok(103), tok(104), tok(105), stranger];
        feed_untaken(&mut b, t, &[packet(A, B, second)]);
        let more = delivered(&mut b);
        assert_eq!(more.iter().map(|d| d.0).collect::<Vec<_>>(), [103, 104]);
        assert_eq!(b.stats().held_back, 1);
        assert_eq!(b.stats().delivered, 5);
        assert_eq!(b.untaken(), 5);
        // Taken, the room is back: 105 sent again is delivered.
        for (_, id) in got.into_iter().chain(more) {
            assert!(b.handle_taken(t, id));
        }
        feed_untaken(&mut b, t, &[packet(A, B, vec![tok(105)])]);
        assert_eq!(
            delivered(&mut b).iter().map(|d| d.0).collect::<Vec<_>>(),
            [105]
        );
        assert_eq!(b.stats().delivered, 6);
    }
}

/// Four reported messages held untaken for 30 s (the receiver's application is slow, or
/// waits for another message first), then taken. Returns A's timeouts taken for losses of
/// the path and its probes of the held messages. `rule`: A's `held_probes_back_off`.
fn held_long(rule: bool) -> (u64, u64) {
    let mut p = slow_receiver(test_config());
    let mut rules = exon::proto::Rules::ALL;
    rules.held_probes_back_off = rule;
    p.node(A).set_rules(rules);
    for i in 0..4u8 {
        let now = p.now;
        p.node(A)
            .send_reported(now, id(B), Bytes::from(vec![i; 1000]))
            .unwrap();
        p.drain(A);
    }
    p.run(Duration::from_secs(30));
    let st = *p.node(A).stats();
    assert_eq!(st.losses_detected, 0);
    p.take(B, 4);
    p.run(QUIET);
    assert_eq!(p.nodes[A].acked.len(), 4, "acknowledged once taken");
    (st.timeouts, st.frames_out.frag)
}

/// A retransmission timeout that finds only messages their receiver holds untaken asks
/// about them and tells the congestion controller nothing: the path lost nothing. With
/// `Rules::held_probes_back_off` off, every other probe of them was a timeout of the path
/// and set the window to its floor (12 in 30 s here), while the messages waited for a slow
/// application. With it, their probes back off on their own schedule, answered or not, up
/// to `max_rto`, and the receiver's probes draw them no sooner: 104 probes in 30 s, where
/// they went every timeout or receiver's probe (541 with the rule off).
#[test]
fn messages_held_untaken_long_are_no_loss_of_the_path() {
    let (timeouts, probes) = held_long(true);
    assert_eq!(timeouts, 0);
    let (timeouts_off, probes_off) = held_long(false);
    assert!(timeouts_off >= 4, "{timeouts_off}");
    assert!(probes * 3 < probes_off, "{probes} against {probes_off}");
}
