//! Payloads of acknowledged messages handed back to the embedding (`Node::keep_released`):
//! each acknowledged message's payload exactly once, none of a message not acknowledged,
//! and nothing kept unless asked.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;

use exon::proto::{Node, Payload, Security};
use exon_testkit::pair::{id, test_config, Fate, Pair, A, B};

fn payload(i: u32) -> Bytes {
    let mut v = i.to_be_bytes().to_vec();
    v.resize(200, 0x5a);
    Bytes::from(v)
}

/// The payloads `A` handed back, each as one buffer.
fn taken(pair: &mut Pair) -> Vec<Bytes> {
    let mut out: Vec<Payload> = Vec::new();
    pair.node(A).take_released(&mut out);
    out.iter().map(Payload::to_bytes).collect()
}

#[test]
fn every_acknowledged_payload_comes_back_once_under_loss() {
    let mut pair = Pair::new(test_config());
    pair.node(A).keep_released(true);
    // Every fifth datagram from A lost: some messages are acknowledged only after a
    // retransmission, and their payloads still come back once.
    let mut n = 0u32;
    pair.set_filter(move |w| {
        n += 1;
        if w.from == A && n.is_multiple_of(5) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let mut back = Vec::new();
    for i in 0..300 {
        pair.send(A, payload(i));
        if i.is_multiple_of(20) {
            for _ in 0..10 {
                pair.step();
            }
            back.extend(taken(&mut pair));
        }
    }
    pair.run(Duration::from_secs(60));
    back.extend(taken(&mut pair));
    assert_eq!(pair.nodes[A].acked.len(), 300, "every message acknowledged");
    let mut back: Vec<u32> = back
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(back.len(), 300, "one payload back per acknowledged message");
    back.sort_unstable();
    back.dedup();
    assert_eq!(
        back,
        (0..300).collect::<Vec<_>>(),
        "each message's own payload, once"
    );
    assert!(taken(&mut pair).is_empty(), "nothing kept twice");
}

#[test]
fn nothing_is_kept_unless_asked_nor_for_a_message_not_acknowledged() {
    let mut pair = Pair::new(test_config());
    for i in 0..50 {
        pair.send(A, payload(i));
    }
    pair.run(Duration::from_secs(10));
    assert_eq!(pair.nodes[A].acked.len(), 50);
    assert!(
        taken(&mut pair).is_empty(),
        "off by default: dropped at the ACK"
    );

    // On, with B unreachable: nothing is acknowledged, nothing comes back.
    pair.node(A).keep_released(true);
    pair.set_filter(|w| {
        if w.from == A {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    for i in 0..20 {
        pair.send(A, payload(i));
    }
    for _ in 0..200 {
        pair.step();
    }
    assert!(
        taken(&mut pair).is_empty(),
        "no payload of a message not acknowledged"
    );
    // Turned off again: what would have been kept is dropped where it was.
    pair.node(A).keep_released(false);
    pair.set_filter(|_| Fate::Deliver);
    pair.run(Duration::from_secs(60));
    assert_eq!(pair.nodes[A].acked.len(), 70);
    assert!(taken(&mut pair).is_empty());
}

/// The receiver restarts (without a journal) in the middle of the stream: messages sent
/// into its lost incarnation end in doubt, the others are acknowledged. Only the
/// acknowledged ones' payloads come back, each once, and every delivery is the bytes sent.
/// (A message sent again after a RETRY keeps its payload:
/// `verdicts::evicted_incarnation_answers_retry_and_nothing_is_lost`.)
#[test]
fn only_acknowledged_payloads_come_back_across_a_receivers_restart() {
    let mut pair = Pair::new(test_config());
    pair.node(A).keep_released(true);
    let mut sent: HashMap<exon::MsgId, u32> = HashMap::new();
    let mut back = Vec::new();
    for i in 0..200u32 {
        sent.insert(pair.send(A, payload(i)), i);
        if i % 10 == 9 {
            for _ in 0..3 {
                pair.step();
            }
            back.extend(taken(&mut pair));
        }
        if i == 100 {
            let stored = pair.nodes[B].stored;
            pair.nodes[B].node =
                Node::new(id(B), Security::InsecurePlaintext, test_config(), stored).unwrap();
            pair.nodes[B].untaken.clear();
        }
    }
    pair.run(Duration::from_secs(60));
    back.extend(taken(&mut pair));
    let acked: HashSet<u32> = pair.nodes[A].acked.iter().map(|m| sent[m]).collect();
    let doubted: HashSet<u32> = pair.nodes[A].in_doubt.iter().map(|m| sent[m]).collect();
    assert_eq!(
        acked.len() + doubted.len(),
        200,
        "every message has its verdict"
    );
    assert!(!doubted.is_empty(), "the restart left some in doubt");
    let back: Vec<u32> = back
        .iter()
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(
        back.len(),
        acked.len(),
        "one payload back per acknowledged message"
    );
    assert_eq!(
        back.iter().copied().collect::<HashSet<_>>(),
        acked,
        "theirs, no other"
    );
    for d in &pair.nodes[B].delivered {
        let i = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        assert_eq!(d, &payload(i), "a message sent again arrives as sent");
    }
}
