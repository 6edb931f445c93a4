//! Issue 45, a payload journalled once (`Rules::deliver_from_senders_copy`): a durable
//! receiver journals no payload for a message its durable sender keeps until the ACK
//! (STOKEN), only that it handed the delivery over (`Handed`, before the hand-over); after
//! a restart it delivers the sender's copy of a slot handed over and not taken again,
//! flagged, under its id. Messages their sender may drop (a reported one, a reply, any of a
//! node that is not durable) are journalled whole. Each rule shown to matter by switching
//! it off.

use std::time::Duration;

use bytes::Bytes;
use exon::proto::journal::Entry;
use exon::proto::{DeliveryId, Frame, Rules};
use exon_testkit::frames::{frames, packet};
use exon_testkit::pair::{id, test_config, Pair, A, B};

/// A durable pair (both journals synced at once unless a test says otherwise), B's rules
/// as given; senders ask for slots after every send (the frontier travels with each).
fn pair(b_rules: Rules) -> Pair {
    let mut cfg = test_config();
    cfg.timers.idle_timeout = Duration::from_secs(600);
    cfg.timers.probe_interval = Duration::from_secs(60);
    cfg.timers.max_probe_interval = Duration::from_secs(600);
    cfg.flow.envelope_low = cfg.flow.envelope_target;
    let mut p = Pair::new(cfg);
    p.drain(A);
    p.drain(B);
    p.make_durable(A);
    p.make_durable(B);
    p.node(B).set_rules(b_rules);
    p
}

/// B's deliveries of `m`: (unflagged, flagged).
fn deliveries(p: &Pair, m: &[u8]) -> (usize, usize) {
    let all = p.nodes[B].delivered.iter().filter(|d| &d[..] == m).count();
    let flagged = p.nodes[B]
        .redelivered
        .iter()
        .filter(|d| &d[..] == m)
        .count();
    (all - flagged, flagged)
}

/// B hands M over (its `Handed` record synced first, unless the rule is off), and crashes
/// before its application takes it; A's copy comes again. Returns B's deliveries of M,
/// and whether the one after the crash kept M's id.
fn crash_after_hand_over(rules: Rules) -> ((usize, usize), bool) {
    let mut p = pair(rules);
    // A first message opens B's incarnation, then B syncs nothing more.
    p.send(A, Bytes::from_static(b"first"));
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[A].acked.len(), 1);
    p.nodes[B].auto_sync = false;
    p.nodes[B].auto_take = false;
    let m = Bytes::from_static(b"handed over, not taken");
    p.send(A, m.clone());
    p.run(Duration::from_secs(2));
    if rules.journal_before_delivery {
        assert!(p.nodes[B].untaken.is_empty(), "waits for its record");
        p.sync(B);
        p.run(Duration::from_millis(10));
    }
    let first: DeliveryId = *p.nodes[B].untaken.first().expect("handed over");
    p.crash_and_recover(B);
    p.node(B).set_rules(rules);
    p.nodes[B].auto_sync = true;
    p.sync(B);
    p.run(Duration::from_secs(5));
    let again = p.nodes[B].untaken.first().copied();
    let same = again.is_some_and(|d| d.stable() == first.stable());
    p.take(B, usize::MAX);
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[A].acked.len(), 2, "acknowledged once");
    assert!(p.nodes[A].in_doubt.is_empty());
    (deliveries(&p, &m), same)
}

#[test]
fn a_message_handed_over_and_not_taken_comes_back_flagged_under_its_id_once() {
    assert_eq!(
        crash_after_hand_over(Rules::ALL),
        ((1, 1), true),
        "from A's copy"
    );
    // The hand-over does not wait for `Handed`: after the crash the slot is unknown
    // (LOST), the message comes again unflagged under a new id, and an application that
    // processed it before the crash cannot tell.
    let mut off = Rules::ALL;
    off.journal_before_delivery = false;
    assert_eq!(crash_after_hand_over(off), ((2, 0), false), "unflagged");
    // Nor one copy: no `Delivered` record stored: LOST, and A's retry comes unflagged
    // under a new id.
    off.deliver_from_senders_copy = false;
    let (count, same) = crash_after_hand_over(off);
    assert_eq!(count, (2, 0), "an unflagged duplicate");
    assert!(!same);
}

#[test]
fn a_message_sent_while_its_receiver_was_down_is_delivered_once_unflagged() {
    let mut p = pair(Rules::ALL);
    // A first message opens B's incarnation; A keeps slots of it.
    p.send(A, Bytes::from_static(b"first"));
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[A].acked.len(), 1);
    p.crash_and_recover(B);
    // Sent after the crash, in a slot of B's incarnation of before it: never handed over
    // (LOST), so sent again in a fresh slot and not a redelivery.
    let m = Bytes::from_static(b"after the crash");
    p.send(A, m.clone());
    p.run(Duration::from_secs(5));
    p.take(B, usize::MAX);
    p.run(Duration::from_secs(5));
    assert_eq!(p.nodes[A].acked.len(), 2, "acknowledged");
    assert_eq!(deliveries(&p, &m), (1, 0), "delivered once, unflagged");
}

/// B journals nothing when it grants slots; A's token comes, B would hand it over, its
/// application take it, and B crashes before syncing. Returns B's unflagged deliveries of
/// the message.
fn crash_before_handed_is_stored(handed_first: bool) -> usize {
    let mut rules = Rules::ALL;
    rules.journal_before_delivery = handed_first;
    let mut p = pair(rules);
    p.nodes[B].auto_sync = false;
    let m = Bytes::from_static(b"granted, not journalled");
    p.send(A, m.clone());
    p.run(Duration::from_secs(2));
    assert_eq!(
        p.nodes[B].delivered.len(),
        usize::from(!handed_first),
        "the hand-over waits for `Handed`"
    );
    p.crash_and_recover(B);
    p.node(B).set_rules(rules);
    p.nodes[B].auto_sync = true;
    p.sync(B);
    p.run(Duration::from_secs(10));
    assert_eq!(p.nodes[A].acked.len(), 1);
    deliveries(&p, &m).0
}

#[test]
fn slots_need_no_record_when_the_hand_over_waits_for_its_own() {
    // Nothing was handed over before the crash: the slot is unknown after it, LOST, and the
    // message comes again in a fresh slot, delivered once.
    assert_eq!(crash_before_handed_is_stored(true), 1);
    assert_eq!(
        crash_before_handed_is_stored(false),
        2,
        "handed over before any record was stored: unknown after the crash, delivered twice"
    );
}

/// M is delivered, taken and acknowledged, and A's frontier passes it (a second message's
/// REQSLOTS carries it: B forgets M's take); B restarts (A holds envelopes in its
/// incarnation), and a stale copy of M's token comes. Returns B's deliveries of M.
fn stale_copy_after_a_restart() -> usize {
    let rules = Rules::ALL;
    let mut p = pair(rules);
    p.record = true;
    let m = Bytes::from_static(b"taken and confirmed");
    p.send(A, m.clone());
    p.run(Duration::from_secs(2));
    p.send(A, Bytes::from_static(b"second"));
    p.run(Duration::from_secs(2));
    assert_eq!(p.nodes[A].acked.len(), 2);
    assert_eq!(
        p.nodes[B].node.remembered_deliveries(),
        1,
        "M's take forgotten"
    );
    let token = p
        .log
        .iter()
        .filter(|w| w.from == A)
        .flat_map(|w| frames(&[w.packet()]))
        .find(|f| matches!(f, Frame::Token { payload, .. } if payload == &m))
        .expect("M's token");
    p.crash_and_recover(B);
    p.node(B).set_rules(rules);
    p.inject(B, packet(id(A), id(B), vec![token]).encode());
    p.run(Duration::from_secs(2));
    let (unflagged, flagged) = deliveries(&p, &m);
    unflagged + flagged
}

#[test]
fn a_stale_copy_of_a_token_taken_and_confirmed_is_not_delivered_again() {
    // Its take forgotten, and no `Handed` record left: LOST, which A ignores.
    assert_eq!(stale_copy_after_a_restart(), 1);
}

/// Journal bytes and records both nodes write per one-way 1 KB message, over a stream of
/// `n` (the records as the core asks for them, framing left out), with B's rule as given.
fn journal_per_message(copy: bool, n: usize) -> (f64, f64) {
    let mut rules = Rules::ALL;
    rules.deliver_from_senders_copy = copy;
    let mut p = pair(rules);
    for i in [A, B] {
        p.nodes[i].auto_sync = false;
    }
    let (mut bytes, mut records) = (0usize, 0usize);
    for k in 0..n {
        p.send(A, Bytes::from(vec![k as u8; 1024]));
    }
    for _ in 0..200 {
        p.run(Duration::from_millis(20));
        for i in [A, B] {
            p.drain(i);
            bytes += p.nodes[i]
                .unsynced
                .iter()
                .map(|w| w.entry.encoded_len())
                .sum::<usize>();
            records += p.nodes[i].unsynced.len();
            p.sync(i);
        }
        if p.nodes[A].acked.len() == n {
            break;
        }
    }
    assert_eq!(p.nodes[A].acked.len(), n);
    (bytes as f64 / n as f64, records as f64 / n as f64)
}

#[test]
fn a_one_way_message_journals_its_payload_once() {
    let (bytes, records) = journal_per_message(true, 256);
    let (old_bytes, old_records) = journal_per_message(false, 256);
    eprintln!("journal per 1 KB message: {bytes:.0} bytes in {records:.2} records (rule off: {old_bytes:.0} bytes in {old_records:.2} records)");
    assert!(bytes < 1.3 * 1024.0, "{bytes} bytes per message");
    assert!(old_bytes > 2.0 * 1024.0, "two payloads with the rule off");
}

/// How A sends its message to B.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `send` from a durable node: A keeps its copy until the ACK (STOKEN).
    Plain,
    /// `send_reported` (an ordered flow's message, which the flow may give up).
    Reported,
    /// `send` from a node that is not durable (its copies die with it).
    NotDurable,
}

/// A sends one message of `kind` to durable B (B's application takes it); returns the
/// kinds of record B's journal wrote for it: (`Handed`, `Delivered`), and the frame names
/// A sent it in.
fn records_for(kind: Kind, rules: Rules) -> ((usize, usize), Vec<&'static str>) {
    let mut cfg = test_config();
    cfg.timers.idle_timeout = Duration::from_secs(600);
    let mut p = Pair::new(cfg);
    p.drain(A);
    p.drain(B);
    if !matches!(kind, Kind::NotDurable) {
        p.make_durable(A);
    }
    p.make_durable(B);
    p.node(A).set_rules(rules);
    p.node(B).set_rules(rules);
    p.record = true;
    p.nodes[B].auto_sync = false;
    let m = Bytes::from(vec![7u8; 300]);
    let now = p.now;
    match kind {
        Kind::Reported => {
            p.node(A).send_reported(now, id(B), m.clone()).unwrap();
        }
        _ => {
            p.send(A, m.clone());
        }
    }
    let (mut handed, mut delivered) = (0, 0);
    for _ in 0..100 {
        p.run(Duration::from_millis(20));
        p.drain(B);
        for w in &p.nodes[B].unsynced {
            match &w.entry {
                Entry::Handed { .. } => handed += 1,
                Entry::Delivered { payload, .. } if payload == &m => delivered += 1,
                _ => {}
            }
        }
        p.sync(B);
        if !p.nodes[A].acked.is_empty() {
            break;
        }
    }
    assert_eq!(p.nodes[A].acked.len(), 1, "{kind:?}: acknowledged");
    let names = p
        .log
        .iter()
        .filter(|w| w.from == A)
        .flat_map(|w| frames(&[w.packet()]))
        .filter(|f| matches!(f, Frame::Token { .. } | Frame::Frag { .. }))
        .map(|f| f.name())
        .collect();
    ((handed, delivered), names)
}

#[test]
fn a_receiver_relies_on_its_senders_copy_only_when_the_sender_says_it_keeps_it() {
    let all = Rules::ALL;
    let (plain, frames) = records_for(Kind::Plain, all);
    assert_eq!(plain, (1, 0), "a durable sender's message: `Handed` only");
    assert!(frames.iter().all(|&f| f == "STOKEN"), "{frames:?}");
    let (reported, frames) = records_for(Kind::Reported, all);
    assert_eq!(reported, (0, 1), "a flow's message: its payload journalled");
    assert!(frames.iter().all(|&f| f == "FRAG"), "{frames:?}");
    let (fragile, frames) = records_for(Kind::NotDurable, all);
    assert_eq!(
        fragile,
        (0, 1),
        "a sender without a journal: payload journalled"
    );
    assert!(frames.iter().all(|&f| f == "TOKEN"), "{frames:?}");
    // Rule off: a durable sender says it keeps every message, its flows' too.
    let mut off = Rules::ALL;
    off.senders_copy_only_when_kept = false;
    let (reported, frames) = records_for(Kind::Reported, off);
    assert_eq!(
        reported,
        (1, 0),
        "rule off: the flow's message relies on A's copy"
    );
    assert!(frames.iter().all(|&f| f == "SFRAG"), "{frames:?}");
}
