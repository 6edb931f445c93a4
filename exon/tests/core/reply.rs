//! `Node::reply`: a request answered and taken in one step; in durable mode one journal
//! record, so that a crash keeps the take and the reply together (each rule shown to matter
//! by switching it off).

use std::time::Duration;

use bytes::Bytes;
use exon::proto::{Rules, SendError};
use exon_testkit::pair::{test_config, Pair, A, B};

const REQUEST: &[u8] = b"request";
const REPLY: &[u8] = b"reply";

/// Replies A got.
fn replies(p: &Pair) -> usize {
    p.nodes[A]
        .delivered
        .iter()
        .filter(|d| &d[..] == REPLY)
        .count()
}

/// A sends one request to B, whose application holds it (not taken).
fn requested(durable: bool) -> Pair {
    let mut p = Pair::new(test_config());
    p.drain(A);
    p.drain(B);
    if durable {
        p.make_durable(B);
    }
    p.nodes[B].auto_take = false;
    p.send(A, REQUEST);
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[B].untaken.len(), 1);
    p
}

/// B answers every request it holds.
fn answer(p: &mut Pair) {
    let now = p.now;
    for d in std::mem::take(&mut p.nodes[B].untaken) {
        p.nodes[B]
            .node
            .reply(now, d, Bytes::from_static(REPLY))
            .expect("the request waits");
    }
    p.drain(B);
}

#[test]
fn a_reply_takes_its_request_once_and_reaches_the_caller() {
    let mut p = requested(false);
    let d = p.nodes[B].untaken[0];
    answer(&mut p);
    let now = p.now;
    assert_eq!(
        p.nodes[B].node.reply(now, d, Bytes::from_static(REPLY)),
        Err(SendError::NotWaiting),
        "a request is answered once"
    );
    assert!(!p.nodes[B].node.handle_taken(now, d), "and taken with it");
    p.run(Duration::from_secs(10));
    assert_eq!(p.nodes[A].acked.len(), 1, "the request is acknowledged");
    assert_eq!(replies(&p), 1);
    assert_eq!(p.nodes[B].acked.len(), 1, "the reply is acknowledged");
}

#[test]
fn a_refused_reply_leaves_the_request_waiting() {
    let mut p = requested(false);
    let d = p.nodes[B].untaken[0];
    let now = p.now;
    let max = p.nodes[B].node.config().limits.max_message_size;
    let big = Bytes::from(vec![0; max + 1]);
    assert!(matches!(
        p.nodes[B].node.reply(now, d, big),
        Err(SendError::PayloadTooLarge { .. })
    ));
    // Neither taken nor acknowledged: it can still be answered.
    p.run(Duration::from_secs(1));
    assert!(p.nodes[A].acked.is_empty());
    answer(&mut p);
    p.run(Duration::from_secs(10));
    assert_eq!((p.nodes[A].acked.len(), replies(&p)), (1, 1));
}

/// B answers its request with its journal unsynced, then syncs only the first `synced`
/// records of the answer, crashes and restarts, and answers whatever it is handed again.
fn crash_after_reply(rules: Rules, synced: usize) -> Pair {
    let mut p = requested(true);
    p.node(B).set_rules(rules);
    p.nodes[B].auto_sync = false;
    answer(&mut p);
    let now = p.now;
    let side = &mut p.nodes[B];
    let keep: Vec<_> = side.unsynced.drain(..).take(synced).collect();
    if let Some(last) = keep.last().map(|w| w.seq) {
        for w in &keep {
            side.journal.apply(&w.entry);
        }
        side.node.handle_stored(now, last);
    }
    p.drain(B);
    p.run(Duration::from_millis(50));
    p.crash_and_recover(B);
    p.nodes[B].auto_sync = true;
    // A request handed out again (its take was lost) is answered again.
    answer(&mut p);
    p.run(Duration::from_secs(30));
    answer(&mut p);
    p.run(Duration::from_secs(30));
    p
}

#[test]
fn a_durable_server_crashing_around_its_reply_answers_exactly_once() {
    // Nothing synced: the request comes back (flagged), is answered again, once.
    let p = crash_after_reply(Rules::ALL, 0);
    assert_eq!(p.nodes[B].redelivered.len(), 1);
    assert_eq!((p.nodes[A].acked.len(), replies(&p)), (1, 1));
    // The one record synced: the request stays answered, the reply is sent again.
    let p = crash_after_reply(Rules::ALL, 1);
    assert!(p.nodes[B].redelivered.is_empty());
    assert_eq!((p.nodes[A].acked.len(), replies(&p)), (1, 1));
}

#[test]
fn without_reply_in_one_record_a_crash_loses_the_reply_of_an_executed_request() {
    for rule in [true, false] {
        let mut rules = Rules::ALL;
        rules.reply_in_one_record = rule;
        // The first record of the answer synced: with the rule, the whole answer; without,
        // the take alone.
        let p = crash_after_reply(rules, 1);
        assert_eq!(
            p.nodes[A].acked.len(),
            1,
            "rule {rule}: the request is acknowledged"
        );
        assert_eq!(replies(&p), usize::from(rule), "rule {rule}");
    }
}

/// The datagrams B sent A after it answered A's request, until A had the answer's ACK:
/// `(with a TOKEN, ACK frames alone)` among those carrying an ACK. B is busy sending A a
/// stream its pacer spaces out, and answers while the pacer holds its tokens back.
fn acks_after_a_paced_reply(ride: bool) -> (usize, usize) {
    let mut cfg = test_config();
    cfg.acks.ride_paced_tokens = ride;
    let mut p = Pair::new(cfg);
    p.nodes[B].auto_take = false;
    p.send(A, REQUEST);
    for i in 0..300u32 {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(1000, 0);
        p.send(B, v);
    }
    // Until B holds the request and its pacer holds its tokens to A back.
    let a = exon_testkit::pair::id(A);
    let paced = |p: &mut Pair| {
        let now = p.now;
        let b = &mut p.nodes[B].node;
        let held = b.path(a).is_some_and(|s| s.in_flight + 1300 <= s.window);
        held && b.pending_to(a) > 0 && b.poll_timeout().is_some_and(|t| t > now)
    };
    let start = p.now;
    while !(p.nodes[B].untaken.len() == 1 && paced(&mut p)) {
        assert!(
            p.step() && p.now - start < Duration::from_secs(5),
            "never paced"
        );
    }
    p.record = true;
    let from = p.log.len();
    answer(&mut p);
    let acked = p.nodes[A].acked.len();
    while p.nodes[A].acked.len() == acked {
        assert!(
            p.step() && p.now - start < Duration::from_secs(10),
            "never acked"
        );
    }
    let acks: Vec<_> = p.log[from..]
        .iter()
        .filter(|w| w.from == B)
        .map(|w| w.packet().frames)
        .filter(|f| {
            f.iter()
                .any(|f| matches!(f, exon::proto::Frame::Ack { .. }))
        })
        .collect();
    let with_token = acks
        .iter()
        .filter(|f| {
            f.iter()
                .any(|f| matches!(f, exon::proto::Frame::Token { .. }))
        })
        .count();
    (with_token, acks.len() - with_token)
}

/// A request's ACK, owed at once (its datagram asked for an ACK now), does not leave in a
/// datagram of its own while the pacer is about to let tokens go to the same peer: it rides
/// in theirs (`AckConfig::ride_paced_tokens`; switched off, it goes alone).
#[test]
fn a_requests_ack_rides_with_the_paced_tokens_to_its_sender() {
    let (with_token, alone) = acks_after_a_paced_reply(true);
    assert_eq!(alone, 0, "an ACK went alone");
    assert!(with_token >= 1);
    let (_, alone) = acks_after_a_paced_reply(false);
    assert!(alone >= 1, "switched off, the ACK goes at once, alone");
}

/// A stream of 1 KB messages from A to B on a 1 Mbit/s path (5 ms each way), B answering
/// each with 1 KB as it arrives (a caller with requests queued, and its server), each
/// side's pacer spacing its datagrams about 9 ms apart: longer than the ACK delay and an
/// eighth of the round trip. Returns `(datagrams, ACK frames alone)` of the run's second
/// half (start-up left out).
fn echoes_on_a_slow_path(rule: bool) -> (usize, usize) {
    let mut p = Pair::new(test_config());
    p.rate = Some(125_000);
    p.latency = Duration::from_millis(5);
    let mut rules = Rules::ALL;
    rules.acks_wait_for_a_paced_datagram = rule;
    p.node(A).set_rules(rules);
    p.node(B).set_rules(rules);
    p.record = true;
    const N: usize = 300;
    let message = |i: usize| {
        let mut v = (i as u32).to_be_bytes().to_vec();
        v.resize(1000, 0);
        v
    };
    for i in 0..N {
        p.send(A, message(i));
    }
    let (start, mut answered) = (p.now, 0);
    while p.nodes[A].acked.len() < N || p.nodes[B].acked.len() < N {
        while answered < p.nodes[B].delivered.len() {
            p.send(B, message(answered));
            answered += 1;
        }
        assert!(
            p.step() && p.now - start < Duration::from_secs(60),
            "stalled"
        );
    }
    assert_eq!(p.nodes[A].delivered.len(), N);
    let n = p.log.len();
    let steady = &p.log[n / 2..];
    let alone = steady
        .iter()
        .map(|w| w.packet().frames)
        .filter(|f| {
            f.iter().all(|f| {
                matches!(
                    f,
                    exon::proto::Frame::Ack { .. } | exon::proto::Frame::Received { .. }
                )
            })
        })
        .count();
    (steady.len(), alone)
}

/// On a path where one datagram at the pacing rate takes longer than the ACK delay, ACKs
/// that would leave alone wait for the next datagram the pacer lets go to their peer
/// (`Rules::acks_wait_for_a_paced_datagram`): 22 ACK-only datagrams of 381 in the second
/// half of the run. Switched off, 85 of 436: the ACKs the pacer's next datagram did not
/// come for within the ACK delay went alone, between two of the stream's.
#[test]
fn on_a_slow_path_acks_wait_for_the_next_paced_datagram() {
    let (with, alone_with) = echoes_on_a_slow_path(true);
    let (without, alone_without) = echoes_on_a_slow_path(false);
    assert!(
        alone_with * 10 <= with,
        "{alone_with} ACKs alone of {with} datagrams"
    );
    assert!(
        alone_without * 7 >= without,
        "switched off: {alone_without} ACKs alone of {without} datagrams"
    );
}
