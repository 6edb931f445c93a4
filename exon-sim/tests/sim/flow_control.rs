//! Flow control that follows the path, in virtual time: on a long fat path the slot window
//! grows to the bandwidth-delay product and the link fills; peers whose limits differ
//! degrade to what both allow instead of stalling; a slow application holds its senders to
//! its pace.

use std::time::Duration;

use exon::proto::{Config, NodeId};
use exon_sim::{sim_config, LinkConfig, Pattern, Scenario, Sim, Workload};

/// Nodes in the ring.
const NODES: usize = 3;

/// Payload bytes of every message.
const PAYLOAD: usize = 1000;

/// What one run shows.
#[derive(Debug)]
struct Run {
    /// Virtual time until every message was acknowledged.
    done_at: Duration,
    /// The most slots the first sender held at its destination, and its largest slot window.
    peak_slots: u64,
    peak_window: u64,
    /// Its largest slot window once half its messages were acknowledged (start-up over).
    late_window: u64,
    /// The most deliveries waiting for the second node's application.
    peak_untaken: u64,
    /// REQSLOTS granted in part, over all nodes.
    trimmed: u64,
    ok: bool,
}

/// Three nodes in a ring (0 to 1, 1 to 2, 2 to 0: each flow on its own links, its
/// acknowledgements on links that carry no data), each streaming `messages` messages over
/// links of `rate` bytes/s with `latency` each way and a queue of one bandwidth-delay
/// product. `slow`: the receiving applications take so many deliveries so often.
fn run(
    config: Config,
    rate: u64,
    latency: Duration,
    messages: u64,
    slow: Option<(Duration, usize)>,
) -> Run {
    let bdp = (rate as f64 * 2.0 * latency.as_secs_f64()) as usize;
    let (take_delay, take_batch) = slow.unwrap_or((Duration::ZERO, 0));
    let sc = Scenario {
        seed: 11,
        nodes: NODES,
        config,
        link: LinkConfig {
            latency,
            rate: Some(rate),
            queue_bytes: bdp.max(64 * 1024),
            ..LinkConfig::default()
        },
        workload: Workload {
            pattern: Pattern::Ring,
            messages: NODES as u64 * messages,
            payload_len: PAYLOAD,
            interval: Duration::from_micros(100),
            burst: 512,
            max_pending: 8192,
            max_payload_len: 0,
        },
        take_delay,
        take_batch,
        settle: Duration::from_secs(120),
        ..Scenario::default()
    };
    let mut sim = Sim::new(sc);
    let to = NodeId::new(2).expect("node 1's id");
    let (mut done_at, mut peak_slots, mut peak_window) = (None, 0, 0);
    let (mut peak_untaken, mut late_window) = (0, 0);
    while sim.step() {
        if let Some((n, p)) = sim.node(0).and_then(|n| Some((n, n.path(to)?))) {
            peak_slots = peak_slots.max(p.slots);
            peak_window = peak_window.max(p.slot_window);
            if n.stats().acknowledged * 2 >= messages {
                late_window = late_window.max(p.slot_window);
            }
        }
        if let Some(n) = sim.node(1) {
            peak_untaken = peak_untaken.max(n.untaken() as u64);
        }
        if done_at.is_none() {
            let acked: u64 = (0..NODES)
                .filter_map(|i| sim.node(i))
                .map(|n| n.stats().acknowledged)
                .sum();
            if acked >= NODES as u64 * messages {
                done_at = Some(sim.now());
            }
        }
    }
    let trimmed = sim.node_stats().map(|s| s.slots_trimmed).sum();
    let report = sim.finish();
    Run {
        done_at: done_at.unwrap_or(Duration::MAX),
        peak_slots,
        peak_window,
        late_window,
        peak_untaken,
        trimmed,
        ok: report.ok(),
    }
}

/// Seconds the link needs for `messages` messages of ~1010 bytes on the wire.
fn ideal(messages: u64, rate: u64) -> Duration {
    Duration::from_secs_f64(messages as f64 * 1010.0 / rate as f64)
}

/// 40 Mbit/s, RTT 200 ms: a bandwidth-delay product of ~1000 messages, far beyond the
/// `N = 128` envelopes and what one REQSLOTS per round trip of them could carry. The window
/// grows to the product (the slots held bounded: a few times it), and the link fills; a sender whose window
/// is held at a fifth of the product takes longer for a quarter of the messages.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn on_a_long_fat_path_the_window_grows_to_the_product_and_the_link_fills() {
    let (rate, latency) = (5_000_000, Duration::from_millis(100));
    let n = 12_000;
    let bdp_msgs = rate as f64 * 0.2 / 1010.0;
    let r = run(sim_config(), rate, latency, n, None);
    println!("default: {r:?}, product {bdp_msgs:.0} messages");
    assert!(r.ok);
    // Start-up (BBR doubles its rate each round trip from ten datagrams: ~7 round trips)
    // and the last round trip come on top of the link's time.
    let limit = ideal(n, rate) * 5 / 4 + Duration::from_millis(2000);
    assert!(
        r.done_at < limit,
        "done at {:?}, limit {limit:?}",
        r.done_at
    );
    assert!(
        r.peak_slots as f64 > 1.5 * bdp_msgs,
        "the window never covered the path: {r:?}"
    );
    // The slots held stay a few times the product. (The window's ceiling goes higher in
    // start-up, four times the congestion window, since slots asked for then arrive when
    // that has doubled; after start-up it is twice the congestion window again.)
    assert!(
        (r.peak_slots as f64) < 8.0 * bdp_msgs + 128.0,
        "the sender held slots far past the path: {r:?}"
    );
    assert!(
        (r.late_window as f64) < 8.0 * bdp_msgs + 128.0,
        "the window grew far past the path: {r:?}"
    );
    assert!(
        (r.peak_window as f64) < 16.0 * bdp_msgs + 128.0,
        "the window grew far past the path in start-up: {r:?}"
    );
    let mut capped = sim_config();
    capped.flow.window = 200;
    let c = run(capped, rate, latency, n / 4, None);
    println!("window 200, a quarter of the messages: {c:?}");
    assert!(c.ok);
    assert!(c.done_at > r.done_at, "{c:?} against {r:?}");
}

/// A sender whose window (8192) and envelopes (2048) exceed what its receiver grants per
/// request (1000) and per sender (1500) used to ask in vain forever (the receiver refused
/// the request outright). Now the receiver grants what it allows, the sender learns it,
/// and the transfer runs at the link's pace.
#[test]
fn peers_whose_limits_differ_degrade_to_what_both_allow() {
    let (rate, latency) = (2_500_000, Duration::from_millis(20));
    let n = 6_000;
    let mut c = sim_config();
    c.flow.window = 8192;
    c.flow.envelope_target = 2048;
    c.flow.envelope_low = 1024;
    c.limits.max_slots_request = 1000;
    c.limits.max_slots_per_record = 1500;
    c.validate().expect("a valid configuration");
    let r = run(c, rate, latency, n, None);
    println!("{r:?}");
    assert!(r.ok);
    assert!(r.trimmed > 0, "no request was trimmed: {r:?}");
    assert!(r.peak_slots <= 1500, "{r:?}");
    let limit = ideal(n, rate) * 3 / 2 + Duration::from_millis(1000);
    assert!(
        r.done_at < limit,
        "done at {:?}, limit {limit:?}",
        r.done_at
    );
}

/// The receiving application takes 20 messages every 10 ms (2000 a second) from a link
/// that carries ~10 000: acknowledgements wait for it, so the sender measures its pace, and
/// the window stays near what it consumes in a round trip (~100 messages at RTT 50 ms),
/// well below what the same link gives a fast application (its product is ~500 messages);
/// deliveries waiting for the application stay bounded the same way.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_slow_application_holds_the_window_to_its_pace() {
    let (rate, latency) = (10_000_000, Duration::from_millis(25));
    let n = 3_000;
    let pace = 2000.0; // messages a second
    let slow = run(
        sim_config(),
        rate,
        latency,
        n,
        Some((Duration::from_millis(10), 20)),
    );
    println!("slow: {slow:?}");
    assert!(slow.ok);
    // Consumed at its pace: no faster than it takes.
    assert!(slow.done_at.as_secs_f64() >= n as f64 / pace, "{slow:?}");
    let fast = run(sim_config(), rate, latency, 4 * n, None);
    println!("fast: {fast:?}");
    assert!(fast.ok);
    assert!(
        slow.late_window * 2 < fast.late_window,
        "the window outgrew the consumer: {slow:?} against {fast:?}"
    );
    // A few round trips of what it consumes (cwnd, in tokens, is about two), not the link's.
    let per_rtt = pace * 2.0 * latency.as_secs_f64();
    assert!(
        (slow.peak_untaken as f64) < 4.0 * per_rtt + 128.0,
        "deliveries piled up: {slow:?}"
    );
}
