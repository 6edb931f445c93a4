//! Path MTU discovery between two nodes over a path that carries datagrams up to an MTU
//! (larger ones are dropped silently, as a router does with DF set): the search finds the
//! path's size, a black hole (the MTU dropping below the size in use) is detected and
//! traffic recovers, and random loss never makes the size fall back.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::{IpFamily, IPV6_MIN_MTU};
use exon::proto::{Config, MAX_DATAGRAM_SIZE};

use exon_testkit::pair::*;

/// The Pair's test configuration with path MTU discovery on, as by default.
fn config() -> Config {
    let mut c = test_config();
    c.mtu.discovery = true;
    c.mtu.max_datagram_size = MAX_DATAGRAM_SIZE;
    c
}

/// A path of MTU `mtu` (changeable while running) that also loses `loss_pct` % of every
/// datagram, drawn from a seeded generator.
fn path(p: &mut Pair, mtu: Rc<Cell<usize>>, loss_pct: u64) {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    p.set_filter(move |w: &Wire| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if w.data.len() > mtu.get() || rng % 100 < loss_pct {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
}

/// Sends `rounds` bursts of 100 distinct messages of 100 bytes from A, with `gap` of
/// virtual time after each.
fn stream(p: &mut Pair, rounds: u32, gap: Duration) {
    for _ in 0..rounds {
        for _ in 0..100 {
            let n = p.node(A).stats().sent as u32;
            p.send(A, Bytes::from(n.to_be_bytes().repeat(25)));
        }
        p.run(gap);
    }
}

fn send_size(p: &mut Pair) -> usize {
    p.node(A).send_size(id(B))
}

#[test]
fn without_a_limit_the_size_reaches_the_ceiling() {
    let mut p = Pair::new(config());
    assert_eq!(send_size(&mut p), 1200, "the base before any record");
    stream(&mut p, 20, Duration::from_millis(20));
    assert_eq!(send_size(&mut p), MAX_DATAGRAM_SIZE);
    let s = *p.node(A).stats();
    assert_eq!(s.largest_datagram_out, MAX_DATAGRAM_SIZE as u64);
    assert!(s.mtu.probes_acked >= 10, "{:?}", s.mtu);
    assert_eq!(s.mtu.black_hole_fallbacks, 0);
    assert_eq!(p.node(B).stats().frames_out.mtu_ack, s.mtu.probes_acked);
    // Tokens travel in large datagrams too: far fewer datagrams than messages.
    p.run(Duration::from_secs(30));
    assert_eq!(p.nodes[B].delivered.len(), 2000);
    assert!(s.datagrams_out < 500, "{}", s.datagrams_out);
}

#[test]
fn the_routes_size_is_probed_first_and_never_exceeded() {
    // The host says its route to B carries 9000 bytes; the path carries more. One probe
    // takes the size there (the steps from 1200 would take seven), and none goes above.
    let mut p = Pair::new(config());
    assert!(p.node(A).set_route(id(B), Some(9000)));
    stream(&mut p, 20, Duration::from_millis(20));
    assert_eq!(send_size(&mut p), 9000);
    let s = *p.node(A).stats();
    assert_eq!(
        (s.mtu.probes_sent, s.mtu.probes_acked),
        (1, 1),
        "{:?}",
        s.mtu
    );
    assert_eq!(s.largest_datagram_out, 9000);
    // A route larger than the path: the route's size fails, the steps find the path's.
    let mut p = Pair::new(config());
    path(&mut p, Rc::new(Cell::new(1472)), 0);
    p.node(A).set_route(id(B), Some(9000));
    stream(&mut p, 30, Duration::from_millis(20));
    let size = send_size(&mut p);
    assert!((1472 - 16..=1472).contains(&size), "{size}");
    // A route that shrinks below the size in use takes the size down at once.
    p.node(A).set_route(id(B), Some(1300));
    assert_eq!(send_size(&mut p), 1300);
    p.run(Duration::from_secs(30));
    assert_eq!(p.nodes[B].delivered.len(), 3000);
    assert_eq!(p.node(A).stats().retransmissions, 0);
}

#[test]
fn the_search_stops_at_the_path_mtu() {
    let mut p = Pair::new(config());
    path(&mut p, Rc::new(Cell::new(1472)), 0);
    stream(&mut p, 30, Duration::from_millis(20));
    let size = send_size(&mut p);
    assert!((1472 - 16..=1472).contains(&size), "{size}");
    p.run(Duration::from_secs(30));
    assert_eq!(p.nodes[B].delivered.len(), 3000);
    assert_eq!(p.node(A).stats().mtu.black_hole_fallbacks, 0);
    assert_eq!(
        p.node(A).stats().retransmissions,
        0,
        "probes lost are not data lost"
    );
}

/// Streams 3000 messages over a path of MTU `mtu` with no loss: every message arrives,
/// none retransmitted, and the size settles without falling back. Returns the size.
fn settle_on(mtu: usize) -> usize {
    let mut p = Pair::new(config());
    path(&mut p, Rc::new(Cell::new(mtu)), 0);
    stream(&mut p, 30, Duration::from_millis(20));
    let size = send_size(&mut p);
    p.run(Duration::from_secs(30));
    assert_eq!(p.nodes[B].delivered.len(), 3000);
    let s = p.node(A).stats();
    assert_eq!((s.retransmissions, s.mtu.black_hole_fallbacks), (0, 0));
    size
}

/// Over IPv6 a 1500-byte Ethernet link carries 1452 bytes of UDP payload (its header is 40
/// bytes, IPv4's 20): the search stops there exactly (1452 is one of its steps), not at
/// IPv4's 1472, which the path drops.
#[test]
fn over_ipv6_the_search_stops_at_the_ipv6_payload_of_an_ethernet_link() {
    let ipv6 = IpFamily::V6.udp_payload(1500);
    assert_eq!(ipv6, 1452);
    assert_eq!(settle_on(ipv6), ipv6);
}

/// Over IPv4 the same link carries 1472 bytes: the search stops there exactly (a step too),
/// not 8 bytes short of it as a midpoint search would.
#[test]
fn over_ipv4_the_search_stops_at_the_ipv4_payload_of_an_ethernet_link() {
    let ipv4 = IpFamily::V4.udp_payload(1500);
    assert_eq!(ipv4, 1472);
    assert_eq!(settle_on(ipv4), ipv4);
}

/// The base size (1200 bytes) gets through the smallest IPv6 path (MTU 1280, 1232 bytes of
/// UDP payload), and the search stays within what that path carries.
#[test]
fn the_base_size_gets_through_the_smallest_ipv6_path() {
    let smallest = IpFamily::V6.udp_payload(IPV6_MIN_MTU);
    let size = settle_on(smallest);
    assert!((1200..=smallest).contains(&size), "{size}");
}

/// A pair on a 9000-byte path, discovery settled on it after 2 000 messages; the path's
/// MTU can be changed through the cell.
fn settled_at_9000() -> (Pair, Rc<Cell<usize>>) {
    let mut p = Pair::new(config());
    let mtu = Rc::new(Cell::new(9000));
    path(&mut p, mtu.clone(), 0);
    stream(&mut p, 20, Duration::from_millis(20));
    assert_eq!(send_size(&mut p), 9000);
    (p, mtu)
}

#[test]
fn a_black_hole_is_detected_and_traffic_recovers() {
    let (mut p, mtu) = settled_at_9000();
    // The path shrinks under the size in use: every full datagram vanishes.
    mtu.set(1472);
    stream(&mut p, 20, Duration::from_millis(20));
    let s = *p.node(A).stats();
    assert_eq!(s.mtu.black_hole_fallbacks, 1, "{:?}", s.mtu);
    assert!(send_size(&mut p) <= 1472);
    // Every message still arrives, exactly once.
    p.run(Duration::from_secs(60));
    let delivered = &p.nodes[B].delivered;
    assert_eq!(delivered.len(), 4000);
    let unique: std::collections::HashSet<_> = delivered.iter().collect();
    assert_eq!(unique.len(), 4000);
    assert_eq!(p.nodes[A].acked.len(), 4000);
}

/// Pacing rate times smoothed RTT, in datagrams of the size in use: BBR paces at least its
/// minimum window (four datagrams) per round trip.
fn paced_datagrams_per_rtt(p: &mut Pair) -> f64 {
    let ps = p.node(A).path(id(B)).expect("a sender record");
    let rate = ps.pacing_rate.expect("paced") as f64;
    rate * ps.srtt.expect("measured").as_secs_f64() / ps.datagram as f64
}

/// The congestion controller counts in the datagrams discovery finds, not in the base size
/// it was made with: its minimum window, and the pacing floor of that window per round trip,
/// are four datagrams of the size in use. With a floor of four base-size datagrams, a
/// stream of 64 KB datagrams on loopback was paced at its own bandwidth samples, 730 MiB/s
/// against 1 400-1 500 with the floor in datagrams of the size in use (BENCHMARKS.md).
#[test]
fn the_controller_counts_in_the_datagram_size_discovery_finds() {
    let (mut p, _) = settled_at_9000();
    let paced = paced_datagrams_per_rtt(&mut p);
    assert!(paced >= 3.9, "{paced} datagrams of 9000 B per round trip");
}

#[test]
fn random_loss_never_makes_the_size_fall_back() {
    let mut p = Pair::new(config());
    path(&mut p, Rc::new(Cell::new(9000)), 10);
    stream(&mut p, 300, Duration::from_millis(20));
    let s = *p.node(A).stats();
    assert_eq!(s.mtu.black_hole_fallbacks, 0, "{:?}", s.mtu);
    assert!(
        s.losses_detected + s.timeouts > 1000,
        "the loss was real: {s:?}"
    );
    assert!(send_size(&mut p) > 8000, "{}", send_size(&mut p));
    p.run(Duration::from_secs(60));
    assert_eq!(p.nodes[B].delivered.len(), 30_000);
}

#[test]
fn with_discovery_off_the_size_is_fixed() {
    let mut c = config();
    c.mtu.discovery = false;
    c.mtu.max_datagram_size = 1400;
    let mut p = Pair::new(c);
    stream(&mut p, 10, Duration::from_millis(20));
    assert_eq!(send_size(&mut p), 1400);
    let s = *p.node(A).stats();
    assert_eq!(s.mtu.probes_sent, 0);
    assert!((1300..=1400).contains(&s.largest_datagram_out));
}

/// An MTU_ACK answering a probe of an earlier incarnation (a late duplicate, or a replay of
/// one captured before a restart) confirms no probe of the restarted node: probe ids come
/// from the node clock, which a restart never hands out again. With ids that started again
/// from zero, the old answers confirmed the new node's probes of sizes the path no longer
/// carries, and the path turned into a black hole.
#[test]
fn an_mtu_ack_from_before_a_restart_changes_nothing() {
    use exon::proto::{Frame, Node, Security};
    let mut p = Pair::new(config());
    p.record = true;
    stream(&mut p, 20, Duration::from_millis(20));
    assert_eq!(send_size(&mut p), MAX_DATAGRAM_SIZE);
    p.run(Duration::from_secs(30));
    let acks: Vec<Bytes> = p
        .log
        .iter()
        .filter(|w| w.from == B)
        .filter(|w| {
            w.packet()
                .frames
                .iter()
                .any(|f| matches!(f, Frame::MtuAck { .. }))
        })
        .map(|w| w.data.clone())
        .collect();
    assert!(acks.len() >= 10, "{}", acks.len());
    // A restarts from its stored clock; the path now carries 1472 bytes at most.
    let stored = p.nodes[A].stored;
    p.nodes[A].node = Node::new(id(A), Security::InsecurePlaintext, config(), stored).unwrap();
    path(&mut p, Rc::new(Cell::new(1472)), 0);
    for _ in 0..30 {
        stream(&mut p, 1, Duration::from_millis(5));
        // Every old answer, again and again, while A probes.
        for a in &acks {
            p.inject(A, a.clone());
        }
        p.run(Duration::from_millis(15));
        assert!(send_size(&mut p) <= 1472, "{}", send_size(&mut p));
    }
    p.run(Duration::from_secs(60));
    assert_eq!(p.nodes[B].delivered.len(), 5000);
    assert_eq!(p.node(A).stats().mtu.black_hole_fallbacks, 0);
}
