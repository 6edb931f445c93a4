//! Messages larger than one datagram: delivered whole and exactly once under loss,
//! duplication and reordering; small messages not held up behind a large one; reassembly
//! memory never beyond what the receiver granted.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use exon::proto::Rules;
use exon_testkit::pair::{self, test_config, Fate, Pair, A, B};

/// Message `i` of `len` bytes: its number in the first and last 4 bytes, a pattern between.
fn message(i: u32, len: usize) -> Bytes {
    let mut v: Vec<u8> = (0..len)
        .map(|k| (k as u32 ^ i).wrapping_mul(31) as u8)
        .collect();
    let tag = i.to_be_bytes();
    for (k, b) in tag.iter().enumerate() {
        if k < len {
            v[k] = *b;
        }
        if len >= 8 {
            v[len - 4 + k] = *b;
        }
    }
    Bytes::from(v)
}

/// A sender of messages up to 1 MiB, and a receiver that grants 1 MiB of reassembly memory
/// in all: one such message in progress at a time.
fn one_mebibyte_of_reassembly() -> (exon::proto::Config, exon::proto::Config) {
    let mut a = test_config();
    a.limits.max_message_size = 1 << 20;
    let mut b = a.clone();
    b.limits.max_reassembly_per_source = 1 << 20;
    b.limits.max_reassembly_bytes = 1 << 20;
    (a, b)
}

const SIZES: [usize; 8] = [100, 1_500, 9_000, 70_000, 300_000, 1 << 20, 1_000, 4 << 20];

/// Sends every size in `SIZES` `rounds` times from A to B, keeping a bounded number
/// pending, checking the receiver's reassembly memory at every step; then checks whole,
/// exactly-once delivery and that both nodes end idle.
fn mixed(mut pair: Pair, rounds: u32) -> Pair {
    let cfg = pair.nodes[B].node.config().clone();
    let mut expected = HashMap::new();
    let mut next = 0u32;
    let total = rounds * SIZES.len() as u32;
    let mut steps = 0u64;
    while next < total || !pair.nodes[A].node.is_idle() {
        while next < total && pair.nodes[A].node.pending_to(pair::id(B)) < 6 {
            let len = SIZES[next as usize % SIZES.len()];
            let m = message(next, len);
            expected.insert(m.clone(), next);
            pair.send(A, m);
            next += 1;
        }
        if !pair.step() {
            break;
        }
        steps += 1;
        assert!(steps < 2_000_000, "no progress");
        let b = &pair.nodes[B].node;
        assert!(b.reassembly_granted() <= cfg.limits.max_reassembly_bytes);
        assert!(b.reassembly_in_use() <= b.reassembly_granted());
    }
    pair.run(Duration::from_secs(600));
    let got = &pair.nodes[B].delivered;
    let mut seen = vec![false; total as usize];
    for m in got {
        let i = *expected.get(m).expect("delivered whole and unaltered");
        assert!(!seen[i as usize], "message {i} delivered twice");
        seen[i as usize] = true;
    }
    assert!(seen.iter().all(|s| *s), "every message delivered");
    assert_eq!(pair.nodes[A].acked.len(), total as usize);
    assert!(pair.both_idle(), "records forgotten once quiet");
    assert_eq!(pair.nodes[B].node.reassembly_in_use(), 0);
    pair
}

#[test]
fn mixed_sizes_without_loss_are_delivered_whole() {
    let pair = mixed(Pair::new(test_config()), 2);
    let s = pair.nodes[B].node.stats();
    assert!(s.reassembled >= 8, "large messages came in fragments");
    assert_eq!(s.rejects.total(), 0);
    assert_eq!(pair.nodes[A].node.stats().retransmissions, 0);
    // Interleaved messages are answered by several GOTs per datagram: none of their
    // fragments may be taken for lost (judging after the first GOT would).
    assert_eq!(pair.nodes[A].node.stats().losses_detected, 0);
}

#[test]
fn mixed_sizes_with_loss_are_delivered_whole() {
    let mut pair = Pair::new(test_config());
    pair.set_filter(|w| {
        if w.seq % 17 == 5 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let pair = mixed(pair, 2);
    assert!(pair.nodes[A].node.stats().retransmissions > 0);
}

#[test]
fn mixed_sizes_reordered_and_duplicated_are_delivered_once() {
    let mut pair = Pair::new(test_config());
    pair.set_filter(|w| {
        let h = w.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54; // 0..1024
        match h {
            0..=30 => Fate::Drop,
            31..=80 => Fate::Duplicate(Duration::from_millis(1 + h % 300)),
            81..=250 => Fate::Delay(Duration::from_millis(h % 30)),
            _ => Fate::Deliver,
        }
    });
    let pair = mixed(pair, 1);
    assert!(pair.nodes[B].node.stats().duplicates_dropped > 0);
}

#[test]
fn receiver_memory_stays_within_its_grant_and_senders_wait() {
    let (a, b) = one_mebibyte_of_reassembly();
    let mut pair = Pair::with_configs(a, b);
    let msgs: Vec<Bytes> = (0..6).map(|i| message(i, 700_000)).collect();
    for m in &msgs {
        pair.send(A, m.clone());
    }
    let mut most = 0;
    for _ in 0..2_000_000 {
        if !pair.step() {
            break;
        }
        let b = &pair.nodes[B].node;
        assert!(b.reassembly_granted() <= 1 << 20);
        most = most.max(b.reassembly_in_use());
        if pair.nodes[B].delivered.len() == msgs.len() {
            break;
        }
    }
    assert_eq!(pair.nodes[B].delivered.len(), msgs.len());
    assert_eq!(most, 700_000, "one message at a time fits the grant");
    let s = pair.nodes[B].node.stats();
    assert_eq!(
        s.rejects.fragment_refused, 0,
        "senders wait, they are not refused"
    );
}

/// The credit rule switched off: senders start large messages without a grant and the
/// receiver stores them all, so its reassembly memory passes what it granted (nothing).
/// The bound the test above checks comes from the rule.
#[test]
fn without_the_credit_rule_reassembly_memory_exceeds_the_grant() {
    let (a, b) = one_mebibyte_of_reassembly();
    let mut pair = Pair::with_configs(a, b);
    let mut rules = exon::proto::Rules::default();
    rules.fragments_need_credit = false;
    pair.node(A).set_rules(rules);
    pair.node(B).set_rules(rules);
    // Every fourth datagram lost, so messages stay partial for a while.
    pair.set_filter(|w| {
        if w.seq % 4 == 3 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    for i in 0..6 {
        pair.send(A, message(i, 700_000));
    }
    let mut over = false;
    for _ in 0..2_000_000 {
        if !pair.step() {
            break;
        }
        let b = &pair.nodes[B].node;
        over |= b.reassembly_in_use() > b.reassembly_granted().max(1 << 20);
        if pair.nodes[B].delivered.len() == 6 {
            break;
        }
    }
    assert!(
        over,
        "without credit, partial messages pass the receiver's bound"
    );
}

#[test]
fn small_messages_are_not_held_up_by_a_large_one() {
    let mut pair = Pair::new(test_config());
    let big = message(0, 4 << 20);
    pair.send(A, big.clone());
    // Let the large message get going, then send small ones behind it.
    for _ in 0..50 {
        pair.step();
    }
    for i in 1..=100 {
        pair.send(A, message(i, 200));
    }
    pair.run(Duration::from_secs(60));
    let got = &pair.nodes[B].delivered;
    assert_eq!(got.len(), 101);
    let big_at = got.iter().position(|m| *m == big).expect("large delivered");
    let s = pair.nodes[A].node.stats();
    assert_eq!(
        (s.retransmissions, s.losses_detected),
        (0, 0),
        "nothing lost, nothing sent again"
    );
    assert!(
        big_at > 50,
        "most small messages went before the large one finished (it came at {big_at})"
    );
}

#[test]
fn mixed_sizes_in_large_datagrams_with_loss() {
    let mut c = test_config();
    c.mtu.max_datagram_size = 65507;
    let mut pair = Pair::new(c);
    pair.set_filter(|w| {
        if w.seq % 5 == 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    mixed(pair, 2);
}

/// A partition longer than the reassembly timeout: the receiver drops the partial message,
/// the sender (which was told of bytes the receiver no longer holds) learns it from the next
/// GOT and sends them again. Delivered once, acknowledged once.
#[test]
fn a_partial_message_dropped_by_the_receiver_is_sent_again() {
    use std::cell::Cell;
    use std::rc::Rc;
    let mut pair = Pair::new(test_config());
    let cut = Rc::new(Cell::new(false));
    let c = cut.clone();
    pair.set_filter(move |_| if c.get() { Fate::Drop } else { Fate::Deliver });
    // A first message proves the receiver record (an unproven one would be evicted when
    // its probes go unanswered, and the message sent again after RETRY).
    let first = message(1, 100);
    pair.send(A, first.clone());
    while pair.nodes[A].acked.is_empty() {
        assert!(pair.step());
    }
    let big = message(7, 3 << 20);
    pair.send(A, big.clone());
    let mut steps = 0;
    while pair.nodes[B].node.partial_messages() == 0 || pair.nodes[B].node.reassembly_in_use() == 0
    {
        assert!(pair.step());
        steps += 1;
        assert!(steps < 100_000);
    }
    // Let some bytes arrive and be reported, then cut the link past the timeout.
    for _ in 0..5 {
        pair.step();
    }
    assert_eq!(pair.nodes[B].delivered.len(), 1, "still partial");
    cut.set(true);
    pair.run(Duration::from_secs(40));

    assert!(pair.nodes[B].node.stats().partials_expired >= 1);
    assert_eq!(pair.nodes[B].node.reassembly_in_use(), 0);
    cut.set(false);
    pair.run(Duration::from_secs(120));
    assert_eq!(pair.nodes[B].delivered, vec![first, big]);
    assert_eq!(pair.nodes[A].acked.len(), 2);
    assert_eq!(pair.nodes[B].node.stats().evictions, 0);
}

/// A stream of small messages that never lets up does not starve a large message: it
/// completes while the stream still flows.
#[test]
fn a_large_message_is_not_starved_by_a_stream_of_small_ones() {
    let mut pair = Pair::new(test_config());
    let big = message(0, 2 << 20);
    pair.send(A, big.clone());
    let mut next = 1u32;
    let mut steps = 0u64;
    while !pair.nodes[B].delivered.contains(&big) {
        while pair.nodes[A].node.pending_to(pair::id(B)) < 500 {
            pair.send(A, message(next, 300));
            next += 1;
        }
        assert!(pair.step());
        steps += 1;
        assert!(steps < 1_000_000, "the large message never completed");
    }
    let small_before = pair.nodes[B].delivered.len() - 1;
    assert!(
        small_before > 1000,
        "the small stream kept flowing meanwhile ({small_before} delivered)"
    );
}

/// The receiver restarts while large messages wait at the sender for reassembly credit
/// (never sent): they are not stranded under the lost incarnation. The sender's REQCREDIT
/// names the incarnation and a waiting slot, the restarted receiver answers as it would a
/// TOKEN there (DOUBT), and the messages that never left go back to the queue for fresh
/// slots: delivered, not reported in doubt.
#[test]
fn messages_waiting_for_credit_survive_a_receiver_restart() {
    use exon::proto::{Node, Security};
    let (a, b) = one_mebibyte_of_reassembly();
    let mut pair = Pair::with_configs(a, b.clone());
    let msgs: Vec<Bytes> = (0..4).map(|i| message(i, 700_000)).collect();
    for m in &msgs {
        pair.send(A, m.clone());
    }
    // Until the first message is on its way (the others wait for credit).
    while pair.nodes[B].node.reassembly_in_use() == 0 {
        assert!(pair.step());
    }
    let stored = pair.nodes[B].stored;
    pair.nodes[B].node = Node::new(pair::id(B), Security::InsecurePlaintext, b, stored).unwrap();
    pair.run(Duration::from_secs(120));
    let got = &pair.nodes[B].delivered;
    for m in &msgs[1..] {
        assert_eq!(
            got.iter().filter(|g| *g == m).count(),
            1,
            "a waiting message delivered once"
        );
    }
    // The one in flight at the restart may be in doubt; the others are acknowledged.
    let a = &pair.nodes[A];
    assert_eq!(a.acked.len() + a.in_doubt.len(), 4);
    assert!(
        a.acked.len() >= 3,
        "acked {}, in doubt {}",
        a.acked.len(),
        a.in_doubt.len()
    );
    assert!(
        a.node.stats().retried >= 2,
        "the waiting ones went back to the queue"
    );
    assert_eq!(pair.nodes[A].node.pending_to(pair::id(B)), 0);
}

/// A pair whose receiver takes messages of at most 1 MiB (CREDIT's `max`), with 1 MiB of
/// reassembly memory per source and 4 MiB in all.
fn to_a_receiver_of_one_mebibyte() -> Pair {
    let a = test_config();
    let mut b = a.clone();
    b.limits.max_message_size = 1 << 20;
    b.limits.max_reassembly_per_source = 1 << 20;
    b.limits.max_reassembly_bytes = 4 << 20;
    Pair::with_configs(a, b)
}

/// A receiver configured for smaller messages than its sender: the message it would never
/// take is not left waiting for credit forever. Its CREDIT says how large a message it
/// takes, and the sender gives the larger one up as not delivered (never sent), while the
/// others go through.
#[test]
fn a_message_larger_than_the_receiver_takes_ends_not_delivered() {
    let mut pair = to_a_receiver_of_one_mebibyte();
    let fits = message(1, 900_000);
    let big = message(2, 3 << 20);
    let small = message(3, 100);
    pair.send(A, fits.clone());
    let big_id = pair.send(A, big);
    pair.send(A, small.clone());
    pair.run(Duration::from_secs(60));
    assert_eq!(pair.nodes[A].not_delivered, vec![big_id]);
    let mut got = pair.nodes[B].delivered.clone();
    got.sort();
    let mut want = vec![fits, small];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(pair.nodes[A].acked.len(), 2);
    assert_eq!(pair.nodes[A].node.stats().too_large_for_peer, 1);
    assert_eq!(pair.nodes[A].node.pending_to(pair::id(B)), 0);
}

/// Giving up a message sent in fragments: not delivered when some of its bytes never left
/// (its receiver can never make it whole), and indeed never delivered afterwards.
#[test]
fn a_large_message_given_up_part_sent_is_not_delivered() {
    let mut pair = Pair::new(test_config());
    let big = message(5, 4 << 20);
    let id = pair.send(A, big);
    while pair.nodes[B].node.reassembly_in_use() == 0 {
        assert!(pair.step());
    }
    let now = pair.now;
    let verdict = pair.node(A).abandon(now, pair::id(B), id);
    assert_eq!(verdict, Some(exon::proto::Abandoned::NotDelivered));
    pair.run(Duration::from_secs(120));
    assert!(pair.nodes[B].delivered.is_empty());
    assert_eq!(
        pair.nodes[B].node.reassembly_in_use(),
        0,
        "the partial went"
    );
    assert!(pair.both_idle());
}

/// A durable sender restarts while a message larger than its receiver takes waits for
/// credit: the restored message may have left before the crash (its record cannot say), so
/// the receiver's CREDIT (its largest message) ends it in doubt, the truthful verdict,
/// where it used to wait for credit for ever (only never-sent messages were given up).
#[test]
fn a_restored_message_larger_than_the_receiver_takes_ends_with_a_verdict() {
    let mut pair = to_a_receiver_of_one_mebibyte();
    pair.drain(A);
    pair.drain(B);
    pair.make_durable(A);
    pair.make_durable(B);
    // B's CREDIT is lost until A has restarted: A has its slot, never B's limit before.
    let mute = std::rc::Rc::new(std::cell::Cell::new(true));
    let m = mute.clone();
    pair.set_filter(move |w| {
        let credit = |f: &exon::proto::Frame| matches!(f, exon::proto::Frame::Credit { .. });
        if w.from == B && m.get() && w.packet().frames.iter().any(credit) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let big_id = pair.send(A, message(7, 3 << 20));
    pair.drain(A);
    pair.run(Duration::from_millis(300));
    assert!(pair.nodes[A].not_delivered.is_empty() && pair.nodes[A].in_doubt.is_empty());
    pair.crash_and_recover(A);
    mute.set(false);
    pair.run(Duration::from_secs(60));
    assert_eq!(pair.nodes[A].in_doubt, vec![big_id]);
    assert!(pair.nodes[B].delivered.is_empty());
    assert_eq!(pair.nodes[A].node.pending_to(pair::id(B)), 0);
}

/// A fragmented message answered by ACK alone (its receiver took it before its GOTs and
/// HELD left, which are then superseded; here they are lost): the ACK says every fragment
/// arrived, and the sender's RTT estimate, delivery rate and loss detection learn it as
/// from a GOT. Before, an ACK settled the message and fed none of them, and a stream's
/// in-order chunks left the controller without samples.
#[test]
fn an_ack_of_a_fragmented_message_counts_its_fragments_as_arrived() {
    let mut pair = Pair::new(test_config());
    pair.set_filter(|w: &pair::Wire| {
        let frames = &w.packet().frames;
        let held = |f: &exon::proto::Frame| {
            matches!(
                f,
                exon::proto::Frame::Held { .. } | exon::proto::Frame::Got { .. }
            )
        };
        let ack = |f: &exon::proto::Frame| matches!(f, exon::proto::Frame::Ack { .. });
        if w.from == B && frames.iter().any(held) && !frames.iter().any(ack) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    pair.send(A, message(1, 3_000));
    // Until the ACK (the sender record is dropped soon after, once idle).
    while pair.nodes[A].acked.is_empty() && pair.step() {}
    assert_eq!(pair.nodes[B].delivered.len(), 1);
    let s = *pair.nodes[A].node.stats();
    assert_eq!(s.frames_out.frag, 3, "three fragments, sent once");
    assert_eq!(s.frames_in.got + s.frames_in.held, 0, "ACK alone: {s:?}");
    let path = pair.nodes[A]
        .node
        .path(pair::id(B))
        .expect("a sender record");
    assert!(
        path.min_rtt.is_some(),
        "an RTT sample from the ACK: {path:?}"
    );
    assert!(path.bandwidth.is_some(), "delivery-rate samples: {path:?}");
}

/// Messages in fragments queued together go one after the other, each whole before the
/// next (up to `FRAG_BURST`, 64 KiB, of one in a row), not interleaved a fragment each: a
/// stream's chunks complete in order, a few datagrams after each starts, rather than all
/// of them at the end of the window (a lost fragment then held every later chunk at the
/// reader, and the receiver's reassembly memory held them all). A message larger than the
/// burst takes turns with the others.
#[test]
fn fragmented_messages_go_one_after_the_other_up_to_a_burst() {
    let slots: std::rc::Rc<std::cell::RefCell<Vec<u64>>> = Default::default();
    let seen = slots.clone();
    let mut pair = Pair::new(test_config());
    pair.set_filter(move |w: &pair::Wire| {
        for f in &w.packet().frames {
            if let exon::proto::Frame::Frag { s, .. } = f {
                seen.borrow_mut().push(*s);
            }
        }
        Fate::Deliver
    });
    for i in 0..3 {
        pair.send(A, message(i, 5_000));
    }
    let large = pair.send(A, message(3, 200_000));
    // Once the large one is going (it waited for reassembly credit first), a small one.
    let started = |order: &[u64]| order.len() > 15;
    while !started(&slots.borrow()) && pair.step() {}
    pair.send(A, message(4, 5_000));
    pair.run(Duration::from_secs(10));
    assert!(pair.nodes[A].acked.contains(&large));
    assert_eq!(pair.nodes[B].delivered.len(), 5);
    let order = slots.borrow();
    let mut runs: Vec<(u64, usize)> = Vec::new();
    for &s in order.iter() {
        match runs.last_mut() {
            Some((last, n)) if *last == s => *n += 1,
            _ => runs.push((s, 1)),
        }
    }
    // The three small ones whole in turn (five fragments each), then the large one's first
    // burst (about 64 KiB in 1 200-byte datagrams), the last small one whole, and the rest
    // of the large one.
    let lens: Vec<usize> = runs.iter().map(|r| r.1).collect();
    assert_eq!(&lens[..3], [5, 5, 5], "{runs:?}");
    assert!(
        (50..=60).contains(&lens[3]),
        "a burst of the large one: {runs:?}"
    );
    assert_eq!(lens[4], 5, "the last small one, whole: {runs:?}");
    assert_eq!(runs.len(), 6, "then the rest of the large one: {runs:?}");
    assert_eq!(runs[3].0, runs[5].0);
}

/// 256 messages of 32 KiB (27 FRAGs each) over a 100 ms round trip with no rate limit: the
/// congestion window, not the reassembly credit, should set the pace. Returns the
/// REQCREDITs A sent, the most reassembly memory B granted and had in use, and the virtual
/// time until all were acknowledged.
fn credit_ramp(double: bool) -> (usize, (u64, u64), Duration) {
    let asked: std::rc::Rc<std::cell::Cell<usize>> = Default::default();
    let seen = asked.clone();
    let mut pair = Pair::new(test_config());
    pair.latency = Duration::from_millis(50);
    let mut rules = exon::proto::Rules::default();
    rules.credit_doubles = double;
    pair.node(A).set_rules(rules);
    pair.set_filter(move |w: &pair::Wire| {
        let req = |f: &exon::proto::Frame| matches!(f, exon::proto::Frame::ReqCredit { .. });
        if w.from == A && w.packet().frames.iter().any(req) {
            seen.set(seen.get() + 1);
        }
        Fate::Deliver
    });
    let ids: Vec<_> = (0..256)
        .map(|i| pair.send(A, message(i, 32 << 10)))
        .collect();
    let start = pair.now;
    let (mut granted, mut in_use) = (0, 0);
    while pair.nodes[A].acked.len() < ids.len() && pair.now - start < Duration::from_secs(60) {
        assert!(pair.step());
        let b = &pair.nodes[B].node;
        granted = granted.max(b.reassembly_granted());
        in_use = in_use.max(b.reassembly_in_use());
    }
    assert_eq!(pair.nodes[B].delivered.len(), ids.len(), "all delivered");
    (asked.get(), (granted, in_use), pair.now - start)
}

/// Rule `credit_doubles`: a sender out of reassembly credit asks for twice its grant, so
/// its credit grows as its congestion window does (a few round trips), not by one message
/// per round trip. Off, the same messages ask more than twice as often and take more than
/// twice as long (10 asks and 1.5 s against 24 and 3.5 s when written).
#[test]
fn reassembly_credit_keeps_up_with_the_window_on_a_long_path() {
    let (asks, (granted, in_use), took) = credit_ramp(true);
    let (asks_off, _, took_off) = credit_ramp(false);
    assert!(asks <= 12, "about log2 of the messages in flight: {asks}");
    assert!(
        asks_off >= 2 * asks,
        "off, one more message per ask: {asks_off} against {asks}"
    );
    assert!(
        took * 3 < took_off * 2,
        "the credit held the window back: {took:?} against {took_off:?}"
    );
    // The sender's credit comes back a round trip after a message is whole (its GOT), so
    // the grant covers the bytes sent in a round trip (at most 8 MiB here, within the
    // 16 MiB cap) while B holds about one message at a time.
    assert!(in_use <= 2 * (32 << 10), "{in_use}");
    assert!(granted <= 256 * (32 << 10), "{granted}");
}

/// Over a 100 ms round trip, A sends a small message (a stream's opener), then, once it
/// is acknowledged, a 32 KiB one (27 FRAGs). Returns the virtual time from the small
/// message's acknowledgement to the large one's delivery, and A's REQCREDITs.
fn large_after_small(ask_ahead: bool) -> (Duration, usize) {
    let asked: std::rc::Rc<std::cell::Cell<usize>> = Default::default();
    let seen = asked.clone();
    let mut pair = Pair::new(test_config());
    pair.latency = Duration::from_millis(50);
    pair.set_filter(move |w: &pair::Wire| {
        let req = |f: &exon::proto::Frame| matches!(f, exon::proto::Frame::ReqCredit { .. });
        if w.from == A && w.packet().frames.iter().any(req) {
            seen.set(seen.get() + 1);
        }
        Fate::Deliver
    });
    pair.send(A, message(0, 40));
    if ask_ahead {
        pair.node(A).ask_credit(pair::id(B), 4 * (32 << 10));
    }
    while pair.nodes[A].acked.is_empty() {
        assert!(pair.step());
    }
    let start = pair.now;
    pair.send(A, message(1, 32 << 10));
    while pair.nodes[B].delivered.len() < 2 {
        assert!(pair.step());
    }
    (pair.now - start, asked.get())
}

/// `Node::ask_credit`: credit asked for with the first token is there when the first
/// fragmented message comes (a stream's first chunk, once its opener is acknowledged), so
/// that message goes at once instead of waiting a round trip for its REQCREDIT's answer
/// (the rest of its time is the congestion window's slow start).
#[test]
fn credit_asked_ahead_saves_the_first_fragmented_message_a_round_trip() {
    let (ahead, asks) = large_after_small(true);
    let (waited, asks_waited) = large_after_small(false);
    assert_eq!(asks, 1, "asked once, ahead: four such messages cover it");
    assert!(asks_waited >= 1);
    assert!(
        ahead + Duration::from_millis(80) < waited,
        "a round trip saved: {ahead:?} against {waited:?}"
    );
}

/// Rule `abandon_tells_frontier`: a message given up with some of its fragments out owes
/// its receiver the frontier, which only a REQSLOTS carries. With the notice the receiver
/// drops the partial at once and the message waiting for its reassembly memory goes; with
/// the rule off the partial stays until the receiver's reassembly timeout (30 s) and the
/// waiting message with it. Returns the virtual time from the give-up until the waiting
/// message is delivered.
fn waiting_after_give_up(notice: bool) -> Duration {
    let (a, b) = one_mebibyte_of_reassembly();
    let mut pair = Pair::with_configs(a, b);
    pair.latency = Duration::from_millis(20);
    let mut rules = exon::proto::Rules::default();
    rules.abandon_tells_frontier = notice;
    pair.node(A).set_rules(rules);
    let first = pair.send(A, message(1, 1 << 20));
    let waiting = message(2, 1 << 20);
    pair.send(A, waiting.clone());
    // Until the first is on its way (it holds all of B's reassembly memory).
    while pair.nodes[B].node.reassembly_in_use() == 0 {
        assert!(pair.step());
    }
    let now = pair.now;
    let verdict = pair.node(A).abandon(now, pair::id(B), first);
    assert_eq!(verdict, Some(exon::proto::Abandoned::NotDelivered));
    let start = pair.now;
    while !pair.nodes[B].delivered.contains(&waiting) {
        assert!(
            pair.now - start < Duration::from_secs(120),
            "never delivered"
        );
        assert!(
            pair.step(),
            "nothing left to happen, the message not delivered"
        );
    }
    let took = pair.now - start;
    pair.run(Duration::from_secs(120));
    assert_eq!(
        pair.nodes[B].delivered,
        vec![waiting],
        "only the waiting one"
    );
    assert_eq!(pair.nodes[B].node.reassembly_in_use(), 0);
    took
}

#[test]
fn a_message_given_up_in_fragments_frees_its_receivers_memory_at_once() {
    let on = waiting_after_give_up(true);
    let off = waiting_after_give_up(false);
    eprintln!("delivered {on:?} after the give-up; {off:?} with the rule off");
    assert!(
        on < Duration::from_secs(5) && off > Duration::from_secs(20),
        "the partial was not dropped at once: {on:?} (rule off {off:?})"
    );
}

/// Messages of 100 000 bytes sent at once in `held_for_seconds`.
const MESSAGES: u32 = 500;

/// [`MESSAGES`] messages of 100 000 bytes from A to B (default configuration) while half
/// the datagrams, both ways, are held up to 5 s (the 1 ms, 20 MB/s path otherwise clean),
/// with `rules` (BBR's reordering allowance off: it keeps the estimate near what arrives
/// on this path, and the measured budget is there for every estimate that is not;
/// `exon-sim`'s `large_messages_held_for_seconds_are_bounded_by_what_arrives` runs the cell
/// with both on, and checks `progress_measured` with the allowance off). Which datagrams
/// wait follows the wire's sequence numbers shifted by `phase`. Returns the messages
/// delivered within `limit` and the partials B dropped as stale.
fn held_for_seconds(rules: exon::proto::Rules, limit: Duration, phase: u64) -> (usize, u64) {
    let mut pair = Pair::new(exon::proto::Config::default());
    pair.latency = Duration::from_millis(1);
    pair.rate = Some(20_000_000);
    let mut rules = rules;
    rules.reordering_allowance = false;
    pair.node(A).set_rules(rules);
    pair.node(B).set_rules(rules);
    pair.set_filter(move |w| {
        let h = (w.seq + phase).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if h >> 63 == 0 {
            Fate::Deliver
        } else {
            Fate::Delay(Duration::from_millis((h >> 20) % 5_000))
        }
    });
    for i in 0..MESSAGES {
        pair.send(A, message(i, 100_000));
    }
    pair.run(limit);
    let b = &pair.nodes[B];
    let mut seen: Vec<u32> = b
        .delivered
        .iter()
        .map(|m| u32::from_be_bytes(m[..4].try_into().unwrap()))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), b.delivered.len(), "a message delivered twice");
    (b.delivered.len(), b.node.stats().partials_expired)
}

/// Found by the simulator's campaign (seconds of reordering, 100 000-byte messages): most
/// of what moved was sent again, the controller's bandwidth estimate stood far above what
/// the receiver came to hold, dozens of messages were in progress in turn and each partial
/// expired (30 s without a new byte) before its turn came again. The budget of messages in
/// progress now follows what the receiver holds (rule `progress_measured`), and a message
/// all in flight keeps no newer one waiting (rule `progress_past_all_sent`): every message
/// arrives at each of six phases of the held datagrams. (A single phase, 4, ran here
/// before, and passed where phases 1, 3, 5 and 6 let partials expire and phase 5 stalled.
/// Partials may still expire when the budget falls below what was started, and their
/// bytes go again: 30 over phases 0-11, against 97 without `progress_past_all_sent`; 13
/// and 98 before the receipt times of `receipt_times`.)
#[test]
fn large_messages_held_for_seconds_all_arrive() {
    let runs: Vec<_> = (0..6)
        .map(|phase| held_for_seconds(Rules::default(), Duration::from_secs(1_500), phase))
        .collect();
    assert!(
        runs.iter().all(|&(d, _)| d == MESSAGES as usize),
        "{runs:?}"
    );
}

/// Without `progress_measured` the same run stalls: partials expire and messages are still
/// missing long after (phase 1: 250 of 500 delivered, 417 partials expired; 17 of phases
/// 0-39 stall so since wire version 5's last frames without their length, and phase 0, used
/// before, no longer does).
#[test]
fn without_a_measured_budget_partials_held_for_seconds_expire() {
    let mut rules = Rules::default();
    rules.progress_measured = false;
    let (delivered, expired) = held_for_seconds(rules, Duration::from_secs(1_500), 1);
    assert!(
        delivered < MESSAGES as usize && expired > 0,
        "{delivered} {expired}"
    );
}

/// Without `progress_past_all_sent`, phase 36 of the same cell stalls when the bandwidth
/// estimate stands above what arrives (here without the receipt times of `receipt_times`,
/// whose acknowledgements bunched after holds of seconds inflate it): the oldest message in
/// progress, all in flight, held the path for the others until it was whole, the budget
/// measured from what it let through fell, and 420 of 500 messages arrived in 1 500 s, 28
/// partials expired. (`receipt_times` off alone: all 500, none expired.) Which phase meets
/// the defect moves with the datagrams' sizes: phase 5 with wire version 4, phase 36 alone
/// of 0-39 since version 5's last frames without their length.
#[test]
fn without_progress_past_all_sent_held_for_seconds_stalls() {
    let mut rules = Rules::default();
    rules.receipt_times = false;
    let on = held_for_seconds(rules, Duration::from_secs(1_500), 36);
    rules.progress_past_all_sent = false;
    let off = held_for_seconds(rules, Duration::from_secs(1_500), 36);
    assert!(
        on.0 == MESSAGES as usize && off.0 < MESSAGES as usize,
        "{on:?} {off:?}"
    );
}

/// Virtual time for 200 messages of 100 000 bytes from A to B over a clean 2 MB/s path of
/// 50 ms each way (10 s of bytes, past the measure's quarter of the reassembly timeout;
/// two messages' worth in flight), with rule `progress_measured` as given; asserts every
/// message arrived.
fn clean_slow_path(measured: bool) -> Duration {
    let mut pair = Pair::new(exon::proto::Config::default());
    pair.rate = Some(2_000_000);
    pair.latency = Duration::from_millis(50);
    let mut rules = exon::proto::Rules::default();
    rules.progress_measured = measured;
    pair.node(A).set_rules(rules);
    pair.node(B).set_rules(rules);
    for i in 0..200 {
        pair.send(A, message(i, 100_000));
    }
    let start = pair.now;
    while pair.nodes[A].acked.len() < 200 {
        assert!(pair.step(), "quiet before every message was acknowledged");
        assert!(pair.now - start < Duration::from_secs(120));
    }
    assert_eq!(pair.nodes[B].delivered.len(), 200);
    pair.now - start
}

/// The measured budget binds only where the receiver holds less than the path moves: on a
/// clean path whose transfer outlasts the measure's window, the run takes the same virtual
/// time with the rule as without it.
#[test]
fn a_measured_budget_leaves_a_clean_path_at_its_pace() {
    let (with, without) = (clean_slow_path(true), clean_slow_path(false));
    assert!(with >= Duration::from_secs(10), "{with:?}");
    assert!(
        with.as_secs_f64() <= without.as_secs_f64() * 1.02,
        "{with:?} against {without:?}"
    );
}
