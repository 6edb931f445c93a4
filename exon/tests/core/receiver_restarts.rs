//! A durable receiver that restarts with deliveries its application has not taken yet (an
//! ordered flow's messages waiting for an earlier one) reports the held ones (GOT), so
//! that they leave their sender's congestion window and the messages it waits for can go.
//! (The other half, a REQCREDIT for a lost incarnation naming every waiting message in
//! turn, `Rules::credit_asks_each_waiting`, is shown in the simulator, where both sides
//! restart with fragments in flight: `exon-sim/tests/cli.rs`,
//! `without_their_rules_fragmented_stream_chunks_stall_after_crashes`, and
//! `exon-sim/tests/sim/streams.rs`.)

use std::time::Duration;

use bytes::Bytes;
use exon::proto::{Frame, Rules};
use exon_testkit::pair::{id, test_config, Fate, Pair, Wire, A, B};

/// A durable pair whose receiver's application takes nothing by itself.
fn pair() -> Pair {
    let mut p = Pair::durable(test_config());
    p.nodes[B].auto_take = false;
    p
}

/// A sends a reported message (sent as FRAGs, as an ordered flow's are) that B holds
/// untaken; B restarts and hands it over again. Returns A's bytes in flight to B after a
/// few of its retransmissions, with B's rule `report_recovered_held` as given. With
/// `senders_copy` false, B journals the delivery (the layout before
/// `deliver_from_senders_copy`, which `report_recovered_held` is for: with the rule on, the
/// message comes back from A's copy, reassembled and answered as a new one is).
fn in_flight_for_a_recovered_held_message(senders_copy: bool, rule: bool) -> u64 {
    let mut p = pair();
    let mut before = Rules::ALL;
    before.deliver_from_senders_copy = senders_copy;
    p.node(B).set_rules(before);
    // B's GOTs and HELDs are lost until it has restarted: A never learns the message is
    // held.
    p.set_filter(|w: &Wire| {
        let got = |f: &Frame| matches!(f, Frame::Got { .. } | Frame::Held { .. });
        if w.from == B && w.packet().frames.iter().any(got) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let now = p.now;
    p.nodes[A]
        .node
        .send_reported(now, id(B), Bytes::from(vec![1u8; 3000]))
        .expect("sent");
    p.drain(A);
    p.run(Duration::from_secs(1));
    assert_eq!(p.nodes[B].untaken.len(), 1, "held at B");
    p.crash_and_recover(B);
    p.set_filter(|_| Fate::Deliver);
    let mut rules = Rules::ALL;
    rules.report_recovered_held = rule;
    p.node(B).set_rules(rules);
    p.run(Duration::from_secs(5));
    assert_eq!(
        p.nodes[B].untaken.len(),
        1,
        "handed over again, still untaken"
    );
    p.node(A).path(id(B)).expect("A's record of B").in_flight
}

#[test]
fn a_recovered_delivery_held_untaken_is_reported_and_leaves_the_flight() {
    // At most a probe (256 bytes and its framing) asking for its verdict now and then.
    assert!(in_flight_for_a_recovered_held_message(false, true) < 300);
}

/// With one copy of the payload: A's retransmitted fragments are reassembled (within credit
/// the restarted B grants as they come) and the message answered GOT.
#[test]
fn a_delivery_held_untaken_comes_back_from_the_senders_copy_and_leaves_the_flight() {
    assert!(in_flight_for_a_recovered_held_message(true, true) < 300);
}

/// The rule off: no answer, and the message stays in A's flight for good.
#[test]
fn without_report_recovered_held_it_stays_in_flight() {
    assert!(in_flight_for_a_recovered_held_message(false, false) >= 3000);
}
