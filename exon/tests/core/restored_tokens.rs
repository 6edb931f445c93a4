//! A restarted durable sender's restored tokens: each one is sent, or waits for its verdict
//! under the retransmission timer, until it has one, whatever late copies of old answers
//! reach it first.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use exon::proto::{Frame, Rules};
use exon_testkit::pair::{test_config, Fate, Pair, Wire, A, B};

/// One message, in fragments (the pair's datagrams are 1 200 bytes).
const LEN: usize = 3_000;

fn has_whole_got(w: &Wire) -> bool {
    w.packet()
        .frames
        .iter()
        .any(|f| matches!(f, Frame::Got { ranges, .. } if ranges.iter().flatten().any(|r| r.end == LEN as u64)))
}

/// A sends one fragmented message to B, whose application holds it; B's GOT (the
/// message held whole) is kept as a late copy. B's application takes it while its
/// answers to A are lost, so its one ACK is lost. A crashes and restarts from its
/// journal; its first tries reach nobody, and the late copy of the GOT reaches it before
/// it sent any of the restored message. Then the network heals. Returns whether A had the
/// message acknowledged, with the rule `whole_awaits_verdict` as given.
fn acknowledged_after_a_late_got(rule: bool) -> bool {
    let mut p = Pair::new(test_config());
    p.drain(A);
    p.drain(B);
    p.make_durable(A);
    p.make_durable(B);
    p.nodes[B].auto_take = false;
    let late: Rc<Cell<Option<Bytes>>> = Rc::default();
    let cut = Rc::new(Cell::new(false));
    let (copy, down) = (late.clone(), cut.clone());
    p.set_filter(move |w: &Wire| {
        if w.from == B && has_whole_got(w) {
            copy.set(Some(w.data.clone()));
        }
        if down.get() {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let m = p.send(A, vec![7u8; LEN]);
    p.drain(A);
    p.run(Duration::from_secs(1));
    assert_eq!(p.nodes[B].untaken.len(), 1, "held whole at B");
    let got = late.take().expect("B reported the message held whole");
    cut.set(true);
    p.take(B, 1);
    p.run(Duration::from_millis(300));
    assert!(p.nodes[A].acked.is_empty(), "B's ACK was lost");
    p.crash_and_recover(A);
    let mut rules = Rules::ALL;
    rules.whole_awaits_verdict = rule;
    p.node(A).set_rules(rules);
    p.run(Duration::from_millis(50));
    p.inject(A, got);
    cut.set(false);
    p.run(Duration::from_secs(30));
    assert_eq!(p.nodes[B].delivered.len(), 1, "delivered once");
    p.nodes[A].acked.contains(&m)
}

#[test]
fn a_restored_message_held_whole_before_it_left_again_still_gets_its_verdict() {
    assert!(acknowledged_after_a_late_got(true));
}

/// The rule switched off: the message, held whole as the late GOT says, is never sent
/// again nor probed, and its lost ACK is never asked for again.
#[test]
fn without_whole_awaits_verdict_the_restored_message_stays_in_flight() {
    assert!(!acknowledged_after_a_late_got(false));
}
