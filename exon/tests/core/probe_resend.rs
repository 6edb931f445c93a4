//! A receiver's probe makes its sender send again, at once, the tokens it has not heard
//! (`Rules::probe_prompts_resend`): the path from the sender fails (its TOKENs are lost)
//! while the path back works, and the receiver, hearing nothing, probes. Each probe is
//! answered by the tokens, without waiting for the sender's backed-off timer.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Frame, Rules};
use exon_testkit::pair::{id, test_config, Fate, Pair, Wire, A, B};

/// A sends one message; its TOKENs are lost for `outage`, then the path heals. Returns the
/// TOKEN datagrams A sent during the outage, the probes B sent then, and how long after the
/// heal the message was delivered; with A's rule `probe_prompts_resend` as given.
///
/// The sender's timer backs off up to `max_rto` here, as before `TimerConfig::max_backoff`
/// (which, at its default, tries the tokens again every 400 ms and finds a short outage's
/// end by itself): the rule's effect alone.
fn one_way_outage(rule: bool, outage: Duration) -> (u32, u32, Duration) {
    let mut cfg = test_config();
    cfg.timers.max_backoff = cfg.timers.max_rto;
    let mut p = Pair::new(cfg);
    let mut rules = Rules::ALL;
    rules.probe_prompts_resend = rule;
    p.node(A).set_rules(rules);
    let (tokens, probes) = (Rc::new(Cell::new(0u32)), Rc::new(Cell::new(0u32)));
    let (t, q) = (tokens.clone(), probes.clone());
    p.set_filter(move |w: &Wire| {
        let frames = w.packet().frames;
        if w.from == A && frames.iter().any(|f| matches!(f, Frame::Token { .. })) {
            t.set(t.get() + 1);
            return Fate::Drop;
        }
        if w.from == B
            && frames
                .iter()
                .any(|f| matches!(f, Frame::Slots { n: 0, .. }))
        {
            q.set(q.get() + 1);
        }
        Fate::Deliver
    });
    let now = p.now;
    p.node(A)
        .send(now, id(B), &b"through the outage"[..])
        .unwrap();
    p.drain(A);
    p.run(outage);
    assert!(
        p.nodes[B].delivered.is_empty(),
        "nothing through the outage"
    );
    let during = (tokens.get(), probes.get());
    p.set_filter(|_| Fate::Deliver);
    let healed = p.now;
    while p.nodes[B].delivered.is_empty() {
        assert!(p.step(), "the run goes quiet before the delivery");
        assert!(
            p.now - healed < Duration::from_secs(30),
            "delivered in time"
        );
    }
    (during.0, during.1, p.now - healed)
}

#[test]
fn each_probe_during_a_one_way_outage_draws_the_tokens_again() {
    let (tokens, probes, _) = one_way_outage(true, Duration::from_secs(4));
    let (tokens_off, _, _) = one_way_outage(false, Duration::from_secs(4));
    assert!(probes >= 3, "B probed: {probes}");
    // Off, only A's backed-off timer sends the token; on, a probe draws it too (unless
    // it left less than a round trip before), and nothing more: the timer stays backed off.
    let why = format!("{tokens} tokens with the rule, {tokens_off} without, {probes} probes");
    assert!(tokens + 1 >= tokens_off + probes, "{why}");
    assert!(tokens <= tokens_off + probes, "{why}");
}

/// After the heal the message goes at the next probe (0.34 s here) where the sender's
/// timer, backed off through the outage to `max_rto`, waited 1.5 s (2.5 s when the jitter
/// could stretch a timeout past `max_rto`).
#[test]
fn a_healed_path_delivers_at_the_next_probe() {
    let heal = |rule| one_way_outage(rule, Duration::from_secs(4)).2;
    let (on, off) = (heal(true), heal(false));
    assert!(on < Duration::from_secs(1), "with the rule {on:?}");
    assert!(off > Duration::from_secs(1), "without {off:?}");
}

/// A two-way outage (issue 46's stream case, on virtual time): A has messages in flight
/// when both directions fail for about 3 s; after the heal the first of them is delivered
/// within `TimerConfig::max_backoff` and a round trip, whatever the phase of A's
/// backed-off timer at the heal (twenty heal times, 23 ms apart, over more than one
/// backoff period). The default timers, as the endpoint runs them.
#[test]
fn a_two_way_outage_ends_within_max_backoff_of_the_heal() {
    let timers = exon::proto::Config::default().timers;
    let mut waits = Vec::new();
    for k in 0..20u32 {
        let mut cfg = test_config();
        cfg.timers = timers.clone();
        let mut p = Pair::new(cfg);
        for i in 0..8u32 {
            p.send(A, format!("before {i}").into_bytes());
        }
        p.run(Duration::from_millis(50));
        // A datagram sent before the heal is lost, either way; the filter sees the time
        // through `clock`, set before every step.
        let heal_at = p.now + Duration::from_secs(3) + Duration::from_millis(23) * k;
        let clock = Rc::new(Cell::new(p.now));
        let c = clock.clone();
        p.set_filter(move |_| {
            if c.get() < heal_at {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        let before = p.nodes[B].delivered.len();
        for i in 0..64u32 {
            p.send(A, format!("into the cut {i}").into_bytes());
        }
        while p.nodes[B].delivered.len() == before {
            clock.set(p.now);
            assert!(p.step(), "the run goes quiet before the delivery");
            assert!(
                p.now < heal_at + Duration::from_secs(5),
                "delivered in time"
            );
        }
        assert!(p.now >= heal_at, "nothing through the cut");
        waits.push(p.now - heal_at);
    }
    eprintln!("waits after the heal: {waits:?}");
    let worst = waits.iter().max().copied().unwrap_or_default();
    let bound = timers.max_backoff + Duration::from_millis(20);
    assert!(
        worst <= bound,
        "waits after the heal {waits:?}, bound {bound:?}"
    );
    // The phases do cover the timer's period: some heal comes just after a retry.
    assert!(worst >= timers.max_backoff / 2, "waits {waits:?}");
}

/// Every datagram of B's holding ACKs alone is lost, and nothing else (a path that drops
/// small datagrams, or losses in step with the exchange): A's tokens arrived, and each of
/// B's probes draws them again (duplicates), answered by an ACK lost the same way. With
/// `Rules::probe_repeats_ack` the probe's datagram carries B's last ACK again and the
/// messages are acknowledged; without it they stay in flight, each probe drawing them once
/// more. Returns the messages A saw acknowledged within `wait`, and B's duplicates.
fn acks_alone_lost(rule: bool, wait: Duration) -> (usize, u64) {
    let mut p = Pair::new(test_config());
    let mut rules = Rules::ALL;
    rules.probe_repeats_ack = rule;
    p.node(B).set_rules(rules);
    p.set_filter(|w: &Wire| {
        let frames = w.packet().frames;
        let acks_alone = frames
            .iter()
            .all(|f| matches!(f, Frame::Ack { .. } | Frame::Received { .. }));
        if w.from == B && acks_alone {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    for i in 0..12u32 {
        p.send(A, format!("acked in a probe {i}").into_bytes());
    }
    p.run(wait);
    assert_eq!(p.nodes[B].delivered.len(), 12, "every token arrived");
    let dups = p.nodes[B].node.stats().duplicates_dropped;
    (p.nodes[A].acked.len(), dups)
}

#[test]
fn a_probe_carries_the_last_ack_again() {
    let wait = Duration::from_secs(20);
    let (on, dups_on) = acks_alone_lost(true, wait);
    let (off, dups_off) = acks_alone_lost(false, wait);
    assert_eq!(on, 12, "with the rule every message is acknowledged");
    assert!(off < 12, "without it, {off} acknowledged");
    assert!(
        dups_off > dups_on,
        "duplicates {dups_on} with, {dups_off} without"
    );
}
