//! A one-way outage over real UDP on 127.0.0.1: two sealed endpoints talk through a relay
//! that stops carrying one direction. The side that hears nothing sends the dead direction
//! only what the deaf schedule allows (at most 60 datagrams and 256 KiB in the 30 s from
//! 10 s to 40 s into the outage, at the default `max_rto`), and once the path heals every
//! message is acknowledged within a few seconds.
//!
//! The schedule scales with `max_rto`, so the test that runs with the suite uses a quarter
//! of the default (the same counts in a quarter of the time); the default's full 45 s run
//! is `#[ignore]`d: `cargo test -p exon --test timed -- --ignored --nocapture`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::crypto::insecure_test_security;
use exon::proto::{Config, Rules};
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::time::timeout;

use crate::serially;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

/// What the relay saw go from A to B: (when, bytes).
type Tape = Arc<Mutex<Vec<(Instant, usize)>>>;

/// A relay that forwards A <-> B, dropping B -> A while `cut` is set, and records A -> B.
async fn relay(a: SocketAddr, b: SocketAddr, cut: Arc<AtomicBool>) -> (SocketAddr, Tape) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let tape: Tape = Default::default();
    let t = tape.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            if from == a {
                t.lock().unwrap().push((Instant::now(), n));
                let _ = sock.send_to(&buf[..n], b).await;
            } else if !cut.load(Ordering::Relaxed) {
                let _ = sock.send_to(&buf[..n], a).await;
            }
        }
    });
    (addr, tape)
}

struct Outcome {
    /// Datagrams and bytes A sent B from 10 to 40 `max_rto / 2` into the outage.
    datagrams: usize,
    bytes: usize,
    /// From the heal to the last receipt resolved.
    recovery: Duration,
    delivered: usize,
}

/// Runs the outage with `max_rto` (the default is 2 s), the deaf schedule on or off.
async fn one_way_outage(max_rto: Duration, deaf_backoff: bool) -> Outcome {
    let scale = max_rto.as_secs_f64() / 2.0;
    let at = |s: f64| Duration::from_secs_f64(s * scale);
    let mut rules = Rules::ALL;
    rules.deaf_backoff = deaf_backoff;
    let mut c = Config::default();
    c.timers.initial_rtt = Duration::from_millis(20);
    c.timers.max_rto = max_rto;
    c.timers.unreachable_after = c.timers.unreachable_after.max(max_rto * 2);
    let cfg = EndpointConfig::default().with_protocol(c);
    let bind = |id| {
        Endpoint::builder(id)
            .security(insecure_test_security(id, [A, B]))
            .config(cfg.clone())
            .rules(rules)
            .bind("127.0.0.1:0")
    };
    let (a, mut b) = (bind(A).await.unwrap(), bind(B).await.unwrap());
    let cut = Arc::new(AtomicBool::new(false));
    let (relay_addr, tape) = relay(a.local_addr(), b.local_addr(), cut.clone()).await;
    a.add_peer(B, relay_addr);
    let received = Arc::new(Mutex::new(std::collections::HashSet::new()));
    let r = received.clone();
    let reader = tokio::spawn(async move {
        while let Some(m) = b.recv().await {
            let k = u32::from_be_bytes(m.payload[..4].try_into().unwrap());
            assert!(r.lock().unwrap().insert(k), "message {k} delivered twice");
        }
    });
    // Warm-up: the path is measured, MTU discovery has found loopback's size.
    for k in 0..20u32 {
        let rc = a.send(B, k.to_be_bytes().repeat(250)).await.unwrap();
        timeout(Duration::from_secs(10), rc).await.unwrap().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    cut.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let mut receipts = Vec::new();
    for k in 20..220u32 {
        receipts.push(a.send(B, k.to_be_bytes().repeat(250)).await.unwrap());
    }
    tokio::time::sleep_until((t0 + at(41.0)).into()).await;
    let (datagrams, bytes) = {
        let tape = tape.lock().unwrap();
        let window = tape
            .iter()
            .filter(|(t, _)| *t >= t0 + at(10.0) && *t < t0 + at(40.0));
        window.fold((0, 0), |(d, b), (_, n)| (d + 1, b + n))
    };
    cut.store(false, Ordering::Relaxed);
    let healed = Instant::now();
    for rc in receipts {
        timeout(Duration::from_secs(30), rc)
            .await
            .expect("every message acknowledged after the heal")
            .expect("acknowledged, not in doubt");
    }
    let recovery = healed.elapsed();
    let delivered = received.lock().unwrap().len();
    reader.abort();
    Outcome {
        datagrams,
        bytes,
        recovery,
        delivered,
    }
}

fn check(o: &Outcome, what: &str) {
    eprintln!(
        "{what}: {} datagrams, {} bytes A -> B in the window; all acknowledged {:?} after the heal; {} delivered",
        o.datagrams, o.bytes, o.recovery, o.delivered
    );
    assert_eq!(o.delivered, 220);
    assert!(
        o.datagrams <= 60 && o.bytes <= 256 * 1024,
        "{what}: {} datagrams, {} bytes into the dead path",
        o.datagrams,
        o.bytes
    );
    assert!(
        o.recovery < Duration::from_secs(3),
        "{what}: {:?}",
        o.recovery
    );
}

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_one_way_outage_is_met_with_the_deaf_schedule() {
    serially(async {
        let o = one_way_outage(Duration::from_millis(500), true).await;
        check(&o, "max_rto 500 ms");
    });
}

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn without_the_deaf_schedule_the_dead_path_is_flooded() {
    serially(async {
        let o = one_way_outage(Duration::from_millis(500), false).await;
        eprintln!(
            "rule off: {} datagrams, {} bytes A -> B in the window",
            o.datagrams, o.bytes
        );
        assert!(
            o.datagrams > 60 || o.bytes > 256 * 1024,
            "the test no longer shows the defect: {} datagrams, {} bytes",
            o.datagrams,
            o.bytes
        );
    });
}

#[test]
#[ignore = "45 s: the issue's figures at the default max_rto"]
fn a_one_way_outage_at_the_defaults() {
    serially(async {
        let o = one_way_outage(Duration::from_secs(2), true).await;
        check(&o, "defaults (max_rto 2 s)");
    });
}
