//! Held messages (`Node::send_held`, `release`, `take_reply`): a caller's request stays in
//! its journal past its acknowledgement until the application is done with its call, across
//! crashes and checkpoint compactions, and leaves it once released; the rule
//! `hold_call_requests` shown to matter by switching it off.

use std::time::Duration;

use bytes::Bytes;
use exon::proto::journal::State;
use exon::proto::{Frame, MsgId, Rules};
use exon_testkit::pair::{id, test_config, Fate, Pair, A, B};

const REQUEST: &[u8] = b"request";
const REPLY: &[u8] = b"reply";

/// A durable pair: A the caller, B a server whose application holds what it is handed.
fn pair(hold: bool) -> Pair {
    let mut p = Pair::new(test_config());
    p.drain(A);
    p.drain(B);
    p.make_durable(A);
    p.make_durable(B);
    let mut rules = Rules::ALL;
    rules.hold_call_requests = hold;
    p.node(A).set_rules(rules);
    p.nodes[A].auto_take = false;
    p.nodes[B].auto_take = false;
    p
}

/// A grants no slots to B (its SLOTS frames are lost), so B's reply cannot leave.
fn no_slots_for_b(p: &mut Pair) {
    p.set_filter(|w| {
        let grants = w.from == A
            && w.packet()
                .frames
                .iter()
                .any(|f| matches!(f, Frame::Slots { n, .. } if *n > 0));
        if grants {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
}

/// A sends its request, held.
fn send_request(p: &mut Pair) -> MsgId {
    let now = p.now;
    let m = p.nodes[A]
        .node
        .send_held(now, id(B), Bytes::from_static(REQUEST))
        .unwrap();
    p.drain(A);
    m
}

/// The request reaches B, whose application answers it; A hears the acknowledgement.
fn answer(p: &mut Pair, m: MsgId) {
    p.run(Duration::from_secs(2));
    let d = p.nodes[B].untaken.pop().expect("the request is at B");
    let now = p.now;
    p.nodes[B]
        .node
        .reply(now, d, Bytes::from_static(REPLY))
        .unwrap();
    p.drain(B);
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[A].acked, [m], "the request is acknowledged");
}

/// A sends a request held; B answers it; A hears the acknowledgement, not the reply.
fn acknowledged_without_reply(hold: bool) -> (Pair, MsgId) {
    let mut p = pair(hold);
    no_slots_for_b(&mut p);
    let m = send_request(&mut p);
    answer(&mut p, m);
    assert!(p.nodes[A].delivered.is_empty(), "the reply has not come");
    (p, m)
}

/// The state a checkpoint of `s` rebuilds (a compaction: its live records replayed).
fn compacted(s: &State) -> State {
    let mut c = State::new();
    for e in s.live_entries() {
        c.apply(&e);
    }
    assert_eq!(c.live_bytes(), s.live_bytes());
    c
}

/// How often A's application was handed the reply, and B's the request.
fn counts(p: &Pair) -> (usize, usize) {
    let replies = p.nodes[A].delivered.iter().filter(|d| &d[..] == REPLY);
    let requests = p.nodes[B].delivered.iter().filter(|d| &d[..] == REQUEST);
    (replies.count(), requests.count())
}

#[test]
fn an_acknowledged_request_is_held_until_its_reply_is_taken_across_crashes_and_compactions() {
    for hold in [true, false] {
        let (mut p, m) = acknowledged_without_reply(hold);
        // The verdict is reported (a `Reported` record): only the hold keeps the request.
        let journal = compacted(&p.nodes[A].journal);
        let recovered = journal.recovered(false);
        assert_eq!(recovered.held.len(), usize::from(hold), "hold {hold}");
        assert!(recovered.messages.is_empty() && recovered.verdicts.is_empty());
        if !hold {
            // The defect: the restarted caller has nothing that says a reply is due (its
            // journal holds no message: at most the incarnation it grants B, still open).
            assert_eq!(
                (journal.held(), journal.counts().1, journal.unreported()),
                (0, 0, 0)
            );
            continue;
        }
        assert_eq!((recovered.held[0].id, recovered.held[0].to), (m, id(B)));
        assert_eq!(&recovered.held[0].payload.to_bytes()[..], REQUEST);
        p.crash_and_recover_with(A, journal, false);
        assert_eq!(p.nodes[A].node.held_messages(), 1);
        // The network heals: the reply comes to the restarted caller, once; the request is
        // not sent again.
        p.set_filter(|_| Fate::Deliver);
        p.run(Duration::from_secs(5));
        assert_eq!(counts(&p), (1, 1));
        let d = p.nodes[A].untaken.pop().expect("the reply waits");
        let now = p.now;
        assert!(p.nodes[A].node.take_reply(now, d, m));
        p.drain(A);
        assert_eq!(p.nodes[A].node.held_messages(), 0);
        assert!(!p.nodes[A].node.release(m), "released with the take");
        p.run(Duration::from_secs(5));
        assert_eq!(p.nodes[B].acked.len(), 1, "the reply is acknowledged");
        // Taken and released in one record: a compaction and a restart keep nothing.
        let journal = compacted(&p.nodes[A].journal);
        assert_eq!(journal.held(), 0);
        assert!(journal
            .recovered(false)
            .deliveries
            .iter()
            .all(|d| d.payload.is_none()));
        p.crash_and_recover_with(A, journal, false);
        assert_eq!(p.nodes[A].node.held_messages(), 0);
        p.run(Duration::from_secs(5));
        assert_eq!(counts(&p), (1, 1));
    }
}

#[test]
fn a_reply_received_and_not_taken_comes_back_with_its_held_request() {
    let (mut p, m) = acknowledged_without_reply(true);
    p.set_filter(|_| Fate::Deliver);
    p.run(Duration::from_secs(5));
    assert_eq!(counts(&p), (1, 1), "the reply came");
    // A crashes before its application took the reply (or before the take was stored).
    p.nodes[A].auto_sync = false;
    let d = p.nodes[A].untaken.pop().expect("the reply waits");
    let now = p.now;
    assert!(p.nodes[A].node.take_reply(now, d, m));
    p.drain(A);
    assert!(!p.nodes[A].unsynced.is_empty(), "the take is not stored");
    let journal = compacted(&p.nodes[A].journal);
    p.crash_and_recover_with(A, journal, false);
    p.nodes[A].auto_sync = true;
    p.drain(A);
    // Both come back: the hold, and the reply, flagged (from B's copy, which B sends again
    // until acknowledged); taken, they go together.
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[A].node.held_messages(), 1);
    assert_eq!(p.nodes[A].redelivered.len(), 1);
    let d = p.nodes[A]
        .untaken
        .pop()
        .expect("the reply is handed out again");
    assert!(d.is_redelivery());
    let now = p.now;
    assert!(p.nodes[A].node.take_reply(now, d, m));
    p.drain(A);
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[A].journal.held(), 0);
    assert_eq!(p.nodes[A].node.held_messages(), 0);
    assert_eq!(p.nodes[B].acked.len(), 1);
}

#[test]
fn a_held_request_released_before_its_verdict_is_forgotten_with_it() {
    let mut p = pair(true);
    no_slots_for_b(&mut p);
    let m = send_request(&mut p);
    // The call ends (its future dropped) before any verdict: released, still sent.
    assert!(p.nodes[A].node.release(m));
    assert!(!p.nodes[A].node.release(m), "once");
    assert!(!p.nodes[A].node.release(MsgId(m.0 + 1000)), "never held");
    p.drain(A);
    answer(&mut p, m);
    let journal = compacted(&p.nodes[A].journal);
    assert_eq!(journal.held(), 0);
    let r = journal.recovered(false);
    assert!(
        r.messages.is_empty() && r.verdicts.is_empty() && r.deliveries.is_empty(),
        "{r:?}"
    );
}

#[test]
fn a_held_request_sent_again_after_a_crash_is_still_held() {
    // The crash comes before the acknowledgement: the request is recovered, sent again, and
    // held when it is acknowledged.
    let mut p = pair(true);
    p.set_filter(|_| Fate::Drop);
    let m = send_request(&mut p);
    let journal = compacted(&p.nodes[A].journal);
    let recovered = journal.recovered(false);
    assert!(recovered.messages[0].held);
    p.crash_and_recover_with(A, journal, false);
    assert_eq!(p.nodes[A].node.held_messages(), 1);
    no_slots_for_b(&mut p);
    answer(&mut p, m);
    assert_eq!(compacted(&p.nodes[A].journal).held(), 1);
}
