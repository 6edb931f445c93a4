//! The syncs on a durable message's critical path, counted: both nodes durable, every
//! record waiting for a sync that the test runs in rounds (each round syncs both journals
//! at once, as two disks would), the network and timers run to rest between rounds. How
//! many rounds pass before each step is what a durable one-way message and a durable call
//! pay in sync latencies, whatever the disk (`docs/durability.md`, "The syncs on the
//! critical path"). The figures are upper bounds: a change that puts another sync in
//! series fails here.

use std::time::Duration;

use bytes::Bytes;
use exon_testkit::pair::{id, test_config, Pair, A, B};

/// A durable pair whose journals sync only when the test says (`Pair::sync`); neither
/// application takes anything by itself.
fn pair() -> Pair {
    let mut p = Pair::durable(test_config());
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

#[test]
fn a_durable_one_way_message_crosses_four_syncs() {
    let mut p = pair();
    let m = p.send(A, Bytes::from_static(b"one way"));
    p.drain(A);
    // A's Accepted (with its slot), then B's Delivered: the hand-over.
    let handed = rounds_until(&mut p, |p| !p.nodes[B].untaken.is_empty());
    assert_eq!(handed, 2, "syncs before B's application has the message");
    let d = p.nodes[B].untaken.pop().expect("delivered");
    let now = p.now;
    assert!(p.nodes[B].node.handle_taken(now, d));
    p.drain(B);
    // B's Taken (the ACK), then A's Resolved (the verdict).
    let acked = rounds_until(&mut p, |p| p.nodes[A].acked.contains(&m));
    assert_eq!(acked, 2, "syncs from the take to A's verdict");
}

#[test]
fn a_durable_call_crosses_four_syncs_before_its_reply_is_handed_over() {
    let mut p = pair();
    let now = p.now;
    let request = p.nodes[A]
        .node
        .send_held(now, id(B), Bytes::from_static(b"request"))
        .expect("sent");
    p.drain(A);
    // A's AcceptedHeld, then B's Delivered: the server's handler has the request.
    let at_server = rounds_until(&mut p, |p| !p.nodes[B].untaken.is_empty());
    assert_eq!(at_server, 2);
    let d = p.nodes[B].untaken.pop().expect("request delivered");
    let now = p.now;
    p.nodes[B]
        .node
        .reply(now, d, Bytes::from_static(b"reply"))
        .expect("replied");
    p.drain(B);
    // B's Replied (the request's take and the reply, one record), then A's Delivered.
    let replied = rounds_until(&mut p, |p| !p.nodes[A].untaken.is_empty());
    assert_eq!(replied, 2);
    assert_eq!(
        at_server + replied,
        4,
        "syncs in series before the caller has its reply"
    );
    let r = p.nodes[A].untaken.pop().expect("reply delivered");
    let now = p.now;
    assert!(p.nodes[A].node.take_reply(now, r, request));
    p.drain(A);
    // The call is done for the caller; its take (TakenReleased) and the server's verdict
    // follow, off the call's path.
    let settled = rounds_until(&mut p, |p| p.nodes[B].acked.len() == 1);
    assert_eq!(settled, 2, "A's TakenReleased (the ACK), then B's Resolved");
}
