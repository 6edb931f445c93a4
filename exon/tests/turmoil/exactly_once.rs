//! Exactly-once through turmoil's simulated network: random loss, reordering latency,
//! held and released links, partitions, and a bounced receiver that keeps its clock store.
//! (turmoil cannot duplicate datagrams; the simulator crate covers duplication.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use exon::endpoint::{EndpointStats, MemoryStore, ReceiptError};
use exon::NodeId;

const A: NodeId = NodeId::from_const(1);

/// One client sending `n` messages to the server under `net`, with `actions` applied as the
/// simulation runs (told the time and how many messages the server has delivered, so that
/// a disruption can come mid-stream whatever the seed's latencies); every message must be
/// delivered once and acknowledged.
fn scenario(
    n: u32,
    net: impl FnOnce(&mut turmoil::Builder),
    mut actions: impl FnMut(Duration, usize, &mut turmoil::Sim<'static>),
) -> EndpointStats {
    let mut sim = sim(300, net);
    let stats = Arc::new(Mutex::new(None));
    let out = stats.clone();
    let log = Log::default();
    server(&mut sim, "b", MemoryStore::starting_at(1), log.clone());
    sim.client("a", async move {
        let ep = client(A, "b").await?;
        send_all(&ep, 0..n).await?;
        let report = ep.close(Duration::from_secs(5)).await;
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.stats.node.acknowledged, u64::from(n));
        *out.lock().unwrap() = Some(report.stats);
        Ok(())
    });
    let delivered = log.clone();
    run(&mut sim, |t, sim| {
        let k = delivered.lock().unwrap().len();
        actions(t, k, sim)
    });
    assert_exactly_once(&log, A, 0..n);
    let stats = stats.lock().unwrap().expect("client finished");
    stats
}

#[test]
fn random_loss() {
    let s = scenario(
        2000,
        |b| {
            b.fail_rate(0.2).repair_rate(0.6);
        },
        |_, _, _| {},
    );
    assert!(s.node.retransmissions > 0, "no loss happened: {s:?}");
}

#[test]
fn latency_spread_reorders() {
    scenario(
        2000,
        |b| {
            b.min_message_latency(Duration::from_millis(1))
                .max_message_latency(Duration::from_millis(80));
        },
        |_, _, _| {},
    );
}

/// The link held (datagrams kept, then all released at once) for 2.8 s once a tenth of the
/// messages were delivered.
#[test]
fn hold_and_release() {
    let mut held = None;
    let mut released = false;
    let s = scenario(
        1000,
        |_| {},
        move |t, delivered, sim| {
            if held.is_none() && delivered >= 100 {
                sim.hold("a", "b");
                held = Some(t);
            }
            if held.is_some_and(|h| t >= h + Duration::from_millis(2800)) && !released {
                sim.release("a", "b");
                released = true;
            }
        },
    );
    assert!(s.node.retransmissions > 0, "{s:?}");
}

/// The link cut (datagrams dropped) for 4.8 s once a tenth of the messages were delivered.
#[test]
fn partition_and_repair() {
    let mut cut = None;
    let mut healed = false;
    let s = scenario(
        1000,
        |_| {},
        move |t, delivered, sim| {
            if cut.is_none() && delivered >= 100 {
                sim.partition("a", "b");
                cut = Some(t);
            }
            if cut.is_some_and(|c| t >= c + Duration::from_millis(4800)) && !healed {
                sim.repair("a", "b");
                healed = true;
            }
        },
    );
    assert!(s.node.retransmissions > 0, "{s:?}");
}

/// The receiver is bounced mid-stream and restarts on the same clock store: nothing is
/// delivered twice, nothing is acknowledged without delivery, and the stream resumes.
/// Messages in flight to the old incarnation may come back in doubt (its slots died with
/// it; it cannot tell whether it delivered them), never as acknowledged.
#[test]
fn bounce_with_clock_store_kept() {
    let mut sim = sim(300, |_| {});
    let log = Log::default();
    let store = MemoryStore::starting_at(1);
    server(&mut sim, "b", store.clone(), log.clone());
    let bounced = Arc::new(AtomicBool::new(false));
    let flag = bounced.clone();
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let record = outcomes.clone();
    sim.client("a", async move {
        let ep = client(A, "b").await?;
        let mut batch = 0u32;
        let mut resumed = false;
        while batch < 100 && !resumed {
            let range = batch * 50..batch * 50 + 50;
            let after_bounce = flag.load(Ordering::SeqCst);
            let mut receipts = Vec::new();
            for i in range.clone() {
                receipts.push((i, ep.send(SERVER, i.to_be_bytes().to_vec()).await?));
            }
            let mut all_acked = true;
            for (i, r) in receipts {
                let r = r.await;
                all_acked &= r.is_ok();
                record.lock().unwrap().push((i, r));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            resumed = after_bounce && all_acked;
            batch += 1;
        }
        assert!(resumed, "the stream never resumed after the bounce");
        Ok(())
    });
    let stored_before = std::cell::Cell::new(0);
    run(&mut sim, |t, sim| {
        if !bounced.load(Ordering::SeqCst) && t >= Duration::from_millis(300) {
            stored_before.set(store.get());
            sim.bounce("b");
            bounced.store(true, Ordering::SeqCst);
        }
    });
    let log = log.lock().unwrap();
    let mut got: Vec<u32> = log.iter().map(|e| e.1).collect();
    assert!(!got.is_empty());
    let total = got.len();
    got.sort_unstable();
    got.dedup();
    assert_eq!(total, got.len(), "duplicate deliveries across the bounce");
    let outcomes = outcomes.lock().unwrap();
    for (i, r) in outcomes.iter() {
        match r {
            Ok(_) => assert!(got.contains(i), "{i} acknowledged, never delivered"),
            Err(e) => assert_eq!(*e, ReceiptError::InDoubt, "{i}"),
        }
    }

    assert!(
        store.get() > stored_before.get(),
        "the restarted node stored a higher mark"
    );
}

/// Messages from 4 bytes to 300 KB, most of them in fragments, through random loss: each
/// delivered once and whole (the server checks every byte) and acknowledged.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn large_messages_under_random_loss() {
    let n = 40;
    let mut sim = sim(300, |b| {
        b.fail_rate(0.1).repair_rate(0.7);
    });
    let log = Log::default();
    server(&mut sim, "b", MemoryStore::starting_at(1), log.clone());
    sim.client("a", async move {
        let ep = client(A, "b").await?;
        send_all_sized(&ep, 0..n, |i| 4 + (i as usize * 7_919) % 300_000).await?;
        let report = ep.close(Duration::from_secs(5)).await;
        assert!(report.is_clean(), "{report:?}");
        assert!(
            report.stats.node.frames_out.frag > 0,
            "{:?}",
            report.stats.node
        );
        Ok(())
    });
    run(&mut sim, |_, _| {});
    assert_exactly_once(&log, A, 0..n);
}
