//! The syncs on a durable message's critical path, counted: both nodes durable, every
//! record waiting for a sync that the test runs in rounds (each round syncs both journals
//! at once, as two disks would), the network and timers run to rest between rounds. How
//! many rounds pass before each step is what a durable one-way message and a durable call
//! pay in sync latencies, whatever the disk (`docs/durability.md`, "The syncs on the
//! critical path"). The figures are upper bounds: a change that puts another sync in
//! series fails here. The rounds count syncs, not their order: a sender's sync and its
//! receiver's that overlap (an early token, `FlowConfig::early_tokens`) share a round.

use std::time::Duration;

use bytes::Bytes;
use exon_testkit::pair::{id, test_config, Pair, A, B};

/// A durable pair whose journals sync only when the test says (`Pair::sync`); neither
/// application takes anything by itself.
///
/// Timers are long enough that a sender keeps its envelopes (slots granted ahead) from one
/// message to the next, as in a stream: a quiet sender gives them back (a receiver's probe,
/// the idle timeout), and its next message asks again, a round trip more, as the first
/// message does.
fn pair() -> Pair {
    pair_with(true)
}

/// [`pair`], its senders' tokens leaving before their records are stored
/// (`FlowConfig::early_tokens`) or not.
fn pair_with(early: bool) -> Pair {
    let mut cfg = test_config();
    cfg.flow.early_tokens = early;
    cfg.timers.idle_timeout = Duration::from_secs(600);
    cfg.timers.probe_interval = Duration::from_secs(60);
    cfg.timers.max_probe_interval = Duration::from_secs(600);
    let mut p = Pair::durable(cfg);
    for i in [A, B] {
        p.nodes[i].auto_sync = false;
        p.nodes[i].auto_take = false;
    }
    p
}

/// One sync round: the network and timers run to rest, then both journals sync.
fn round(p: &mut Pair) {
    p.run(Duration::from_millis(100));
    p.sync(A);
    p.sync(B);
    p.run(Duration::from_millis(100));
}

/// Runs rounds until `done`, at most 20; returns how many it took.
fn rounds_until(p: &mut Pair, mut done: impl FnMut(&mut Pair) -> bool) -> usize {
    for n in 0..=20 {
        if done(p) {
            return n;
        }
        round(p);
    }
    panic!("not done after 20 sync rounds");
}

/// A one-way message from A to B: sync rounds before B's application has it, and from its
/// take to A's verdict.
fn one_way(p: &mut Pair, text: &'static [u8]) -> (usize, usize) {
    let m = p.send(A, Bytes::from_static(text));
    p.drain(A);
    let handed = rounds_until(p, |p| !p.nodes[B].untaken.is_empty());
    let d = p.nodes[B].untaken.pop().expect("delivered");
    let now = p.now;
    assert!(p.nodes[B].node.handle_taken(now, d));
    p.drain(B);
    let acked = rounds_until(p, |p| p.nodes[A].acked.contains(&m));
    (handed, acked)
}

#[test]
fn a_durable_one_way_message_crosses_three_syncs() {
    let mut p = pair();
    // The first message: its token leaves at once (ETOKEN), before A's Accepted and
    // Assigned are stored; B's Handed is stored in the same round, and A's STORED follows
    // the round: B hands it over.
    let (handed, acked) = one_way(&mut p, b"first");
    assert_eq!(
        handed, 1,
        "syncs before B's application has the first message"
    );
    assert_eq!(acked, 2, "syncs from the take to A's verdict");
    // The same while A holds slots: A's records and B's `Handed` in one round.
    let (handed, acked) = one_way(&mut p, b"second");
    assert_eq!(handed, 1, "syncs before B's application has the message");
    // B's Taken (the ACK), then A's Resolved (the verdict).
    assert_eq!(acked, 2, "syncs from the take to A's verdict");
}

#[test]
fn without_early_tokens_the_senders_sync_and_the_receivers_run_in_series() {
    let mut p = pair_with(false);
    // A's Accepted and B's Granted in one round (the SLOTS do not wait for it), then A's
    // Assigned (the token waits for it), then B's Handed.
    let (handed, _) = one_way(&mut p, b"first");
    assert_eq!(handed, 2);
    // A's Accepted and Assigned in one sync, then B's Handed.
    let (handed, _) = one_way(&mut p, b"second");
    assert_eq!(handed, 2);
    let (at_server, replied, _) = call(&mut p, b"call");
    assert_eq!((at_server, replied), (2, 2));
}

/// A call from A to B: sync rounds before B's handler has the request, and before A has
/// the reply; then the rounds until B's reply is acknowledged, after A takes it.
fn call(p: &mut Pair, text: &'static [u8]) -> (usize, usize, usize) {
    let now = p.now;
    let request = p.nodes[A]
        .node
        .send_held(now, id(B), Bytes::from_static(text))
        .expect("sent");
    p.drain(A);
    let at_server = rounds_until(p, |p| !p.nodes[B].untaken.is_empty());
    let d = p.nodes[B].untaken.pop().expect("request delivered");
    let acked_before = p.nodes[B].acked.len();
    let now = p.now;
    p.nodes[B]
        .node
        .reply(now, d, Bytes::from_static(b"reply"))
        .expect("replied");
    p.drain(B);
    let replied = rounds_until(p, |p| !p.nodes[A].untaken.is_empty());
    let r = p.nodes[A].untaken.pop().expect("reply delivered");
    let now = p.now;
    assert!(p.nodes[A].node.take_reply(now, r, request));
    p.drain(A);
    // The call is done for the caller; its take (TakenReleased) and the server's verdict
    // follow, off the call's path.
    let settled = rounds_until(p, |p| p.nodes[B].acked.len() == acked_before + 1);
    (at_server, replied, settled)
}

#[test]
fn a_durable_call_crosses_two_syncs_before_its_reply_is_handed_over() {
    let mut p = pair();
    let (at_server, replied, _) = call(&mut p, b"first");
    assert_eq!((at_server, replied), (1, 1), "the first call");
    // A's AcceptedHeld and B's Handed in one round (the request left early): the handler
    // has the request; B's Replied (the request's take and the reply, one record) and A's
    // DeliveredEarly (the reply left early too) in one round.
    let (at_server, replied, settled) = call(&mut p, b"second");
    assert_eq!(
        at_server, 1,
        "syncs before the server's handler has the request"
    );
    assert_eq!(replied, 1, "syncs from the reply to the caller's hand-over");
    assert_eq!(
        at_server + replied,
        2,
        "syncs in series before the caller has its reply"
    );
    assert_eq!(settled, 2, "A's TakenReleased (the ACK), then B's Resolved");
}
