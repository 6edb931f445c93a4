//! Answers that ride on the datagrams sent on timers: when a path loses every answer and
//! passes every datagram a timer sends (losses in step with the exchange), the answer must
//! travel with the timer's datagram. A restarted sender's REQSLOTS carries the waiver it
//! owes (`Rules::request_carries_waiver`); a receiver's probe carries its last grant while
//! none of its slots was used (`Rules::probe_repeats_grant`), and that grant gives no RTT
//! sample.

use std::time::Duration;

use exon::proto::{Frame, Node, Rules, Security};
use exon_testkit::pair::{id, test_config, Fate, Pair, Wire, A, B};

/// Loses every datagram of node `from` that holds a frame `answer` picks and none that
/// `timer` picks: the answers, not the datagrams its timers send.
fn lose_answers(p: &mut Pair, from: usize, answer: fn(&Frame) -> bool, timer: fn(&Frame) -> bool) {
    p.set_filter(move |w: &Wire| {
        let f = w.packet().frames;
        if w.from == from && f.iter().any(answer) && !f.iter().any(timer) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
}

/// A sends one message while every datagram of B that grants slots without probing is lost
/// (the SLOTS answering A's request; a probe's datagram passes). Returns whether the
/// message was delivered and acknowledged within 20 s, with B's rule `probe_repeats_grant`
/// as given.
fn delivered_with_grants_lost(rule: bool) -> bool {
    let mut p = Pair::new(test_config());
    let mut rules = Rules::ALL;
    rules.probe_repeats_grant = rule;
    p.node(B).set_rules(rules);
    lose_answers(
        &mut p,
        B,
        |f| matches!(f, Frame::Slots { n, .. } if *n > 0),
        |f| matches!(f, Frame::Slots { n: 0, .. }),
    );
    let m = p.send(A, &b"past the lost grants"[..]);
    p.drain(A);
    p.run(Duration::from_secs(20));
    assert!(p.nodes[B].delivered.len() <= 1, "never delivered twice");
    p.nodes[B].delivered.len() == 1 && p.nodes[A].acked.contains(&m)
}

#[test]
fn a_probe_carries_the_grant_its_answer_lost() {
    assert!(delivered_with_grants_lost(true));
}

/// The rule off: each of A's requests is granted, each grant lost, each probe (SLOTS of
/// B's clock, not A's request) stale at A: the message never leaves.
#[test]
fn without_probe_repeats_grant_the_message_never_leaves() {
    assert!(!delivered_with_grants_lost(false));
}

/// A sends a message, and B's record of it keeps the slots A did not use. A restarts (a
/// new node, its clock past the record's slots) and sends another, while every datagram of
/// A that waives without requesting is lost (the waiver answering B's probe; a request's
/// datagram passes). Returns whether the second message was delivered and acknowledged
/// within 20 s, with A's rule `request_carries_waiver` as given.
fn delivered_with_waivers_lost(rule: bool) -> bool {
    let mut p = Pair::new(test_config());
    p.send(A, &b"before the restart"[..]);
    p.drain(A);
    p.run(Duration::from_millis(100));
    assert_eq!(p.nodes[B].delivered.len(), 1);
    let cfg = p.node(A).config().clone();
    let mut restarted = Node::new(id(A), Security::InsecurePlaintext, cfg, 1_000_000).unwrap();
    let mut rules = Rules::ALL;
    rules.request_carries_waiver = rule;
    restarted.set_rules(rules);
    p.nodes[A].node = restarted;
    lose_answers(
        &mut p,
        A,
        |f| matches!(f, Frame::ReqSlots { n: 0, .. }),
        |f| matches!(f, Frame::ReqSlots { n, .. } if *n > 0),
    );
    let m = p.send(A, &b"after the restart"[..]);
    p.drain(A);
    p.run(Duration::from_secs(20));
    assert!(p.nodes[B].delivered.len() <= 2, "never delivered twice");
    p.nodes[B].delivered.len() == 2 && p.nodes[A].acked.contains(&m)
}

#[test]
fn a_restarted_senders_request_carries_the_waiver_it_owes() {
    assert!(delivered_with_waivers_lost(true));
}

/// The rule off: the waiver leaves once per probe, alone, and is lost; each request is
/// refused (its frontier is past the record's free slots): the message never leaves.
#[test]
fn without_request_carries_waiver_the_restarted_sender_never_gets_slots() {
    assert!(!delivered_with_waivers_lost(false));
}

/// A's smoothed RTT once its message is acknowledged, when the first SLOTS answer of B is
/// lost and B's probe repeats the grant (`probe_repeats_grant`) before A's request times
/// out (a request timer longer than the probe interval, as on a long path).
fn srtt_after_a_lost_grant() -> (Duration, bool) {
    let mut cfg = test_config();
    cfg.timers.min_rto = Duration::from_millis(600);
    let mut p = Pair::new(cfg);
    let mut lost = false;
    p.set_filter(move |w: &Wire| {
        let f = w.packet().frames;
        let grant = f
            .iter()
            .any(|f| matches!(f, Frame::Slots { n, .. } if *n > 0));
        let probe = f.iter().any(|f| matches!(f, Frame::Slots { n: 0, .. }));
        if w.from == B && grant && !probe && !lost {
            lost = true;
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let m = p.send(A, &b"one"[..]);
    p.drain(A);
    for _ in 0..500 {
        p.run(Duration::from_millis(5));
        if p.nodes[A].acked.contains(&m) {
            let srtt = p
                .node(A)
                .path(id(B))
                .and_then(|s| s.srtt)
                .unwrap_or_default();
            return (srtt, true);
        }
    }
    (Duration::ZERO, false)
}

/// The grant a probe repeats comes a probe interval after the request, whatever the path:
/// it gives no RTT sample (the probe goes first in the datagram, and a grant behind a probe
/// is not sampled). Before, A took the ~200 ms wait for one round trip: srtt 185 ms on a
/// path of 10 ms.
#[test]
fn a_grant_repeated_by_a_probe_gives_no_rtt_sample() {
    let (srtt, acked) = srtt_after_a_lost_grant();
    assert!(acked);
    assert!(
        srtt < Duration::from_millis(30),
        "srtt {srtt:?} on a 10 ms path"
    );
}
