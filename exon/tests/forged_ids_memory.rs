//! What a flood of slot requests from forged node ids leaves behind at a plaintext node
//! (issue 42, item 8): every table an unauthenticated datagram can add to is bounded by a
//! count, and gives its memory back once the flood is over. The deaf-peer table
//! (`send/silence.rs`: one entry per destination answered, kept `4 * max_rto`) used to hold
//! every forged id answered within that time, and its map never shrank.
//!
//! A core test, alone in its binary: the counting allocator is the process's global
//! allocator and counts every thread (`docs/testing.md`). The two tests take a lock so that
//! one measures while the other waits.
//!
//! Run: `cargo test -p exon --test forged_ids_memory` (200 000 ids); the flood of 1 000 000
//! ids: `cargo test --release -p exon --test forged_ids_memory -- --ignored`.

use exon_testkit::alloc::Counting;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use exon::proto::frame::Header;
use exon::proto::{Config, Frame, Node, NodeId, Packet, Security};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[global_allocator]
static GLOBAL: Counting = Counting;

const VICTIM: NodeId = NodeId::from_const(1);

/// Bytes the bounded tables may hold after any flood, default limits: 4096 receiver records
/// and their remembered evictions, 9216 deaf-peer entries, the outbox. Measured at about
/// 4 MiB; without the deaf-peer table's bound the heap grows with the ids (+28 MB at 200 000
/// ids, +190 MB at 1 000 000 over UDP).
const BOUND: i64 = 12 << 20;

fn heap() -> i64 {
    exon_testkit::alloc::live()
}

/// Floods `node` with one REQSLOTS from each of `ids` forged ids from `first` on, at `now`,
/// draining its answers as a driver would (they go nowhere). Returns the heap's growth
/// over `base` after each tenth of the flood.
fn flood(node: &mut Node, now: Instant, first: u64, ids: u64, base: i64) -> Vec<i64> {
    let mut out = Vec::with_capacity(2048);
    let mut samples = Vec::new();
    for i in 0..ids {
        let forged = NodeId::new(1_000_000 + first + i).expect("id");
        let req = Packet {
            header: Header::new(forged, VICTIM),
            frames: vec![Frame::ReqSlots { s: 0, n: 64, l: 0 }],
        };
        node.handle_datagram(now, req.encode());
        if i % 64 == 63 {
            while node.poll_transmit(now, &mut out).is_some() {
                out.clear();
            }
        }
        if (i + 1) % (ids / 10) == 0 {
            samples.push(heap() - base);
        }
    }
    while node.poll_transmit(now, &mut out).is_some() {
        out.clear();
    }
    samples
}

fn forged_ids_leave_bounded_state(ids: u64) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let cfg = Config::default();
    let max_peers = cfg.limits.max_unanswered_peers;
    let max_records = cfg.limits.max_receiver_records;
    let mut node = Node::new(VICTIM, Security::InsecurePlaintext, cfg, 1 << 20).unwrap();
    exon_testkit::confirm_clock(&mut node, t0);
    let base = heap();
    // Within one instant: nothing expires by time, only the counts bound the tables.
    let samples = flood(&mut node, t0, 0, ids, base);
    let (peers, room) = node.unanswered_peers();
    eprintln!(
        "{ids} forged ids: heap +{} KiB after each tenth {:?}; deaf-peer table {peers} \
         entries (room for {room}), {} receiver records, {} evictions",
        samples.last().unwrap() >> 10,
        samples.iter().map(|s| s >> 10).collect::<Vec<_>>(),
        node.receiver_records(),
        node.stats().evictions
    );
    assert!(peers <= max_peers, "{peers} deaf-peer entries");
    assert!(room <= 4 * max_peers, "room for {room}");
    assert!(node.receiver_records() <= max_records);
    for (k, s) in samples.iter().enumerate() {
        assert!(
            *s <= BOUND,
            "heap +{s} bytes after {}/10 of the flood",
            k + 1
        );
    }
    // Flat: the second half of the flood adds no more than the bounded tables' last
    // capacity steps (at 200 000 ids the deaf-peer table is still filling towards its
    // 9 216 entries: a map's doubling is about 1 MiB; at 1 000 000 it is full and flat).
    let half = samples[4];
    let end = *samples.last().unwrap();
    assert!(
        end - half <= 2 << 20,
        "heap grew {} bytes in the second half",
        end - half
    );

    // The flood is over: time passes (records unused evicted after their probes, deaf-peer
    // entries expired, stale timers run out), and the memory comes back.
    let mut out = Vec::new();
    let mut wakes = 0u64;
    while let Some(t) = node.poll_timeout() {
        let now = t.max(t0);
        if now > t0 + Duration::from_secs(600) {
            break;
        }
        wakes += 1;
        node.handle_timeout(now);
        while node.poll_transmit(now, &mut out).is_some() {
            out.clear();
        }
    }
    let (peers, room) = node.unanswered_peers();
    let after = heap() - base;
    eprintln!(
        "ten minutes later ({wakes} timeouts): heap +{} KiB; deaf-peer table {peers} entries \
         (room for {room}), {} receiver records",
        after >> 10,
        node.receiver_records()
    );
    assert_eq!(peers, 0);
    assert!(room <= 64, "room for {room} deaf-peer entries kept");
    assert_eq!(node.receiver_records(), 0);
    assert!(after <= 1 << 20, "heap +{after} bytes after the flood");
}

/// 200 000 forged ids (debug builds too).
#[test]
fn forged_ids_leave_bounded_state_and_give_it_back() {
    forged_ids_leave_bounded_state(200_000);
}

/// The flood of the issue: 1 000 000 forged ids.
#[test]
#[ignore = "long in debug builds: run with --release -- --ignored"]
fn a_million_forged_ids_leave_bounded_state() {
    forged_ids_leave_bounded_state(1_000_000);
}

/// The measurement, over UDP: a plaintext endpoint on loopback fed one REQSLOTS
/// from each of 1 000 000 forged ids (a raw socket sending as fast as it can; some are
/// dropped by the kernel), the heap sampled after each tenth, and again once the flood is
/// over and its timers ran out. The endpoint's tables (address book, driver) are bounded
/// too. Run: `cargo test --release -p exon --test forged_ids_memory -- --ignored --nocapture`.
#[test]
#[ignore = "a million datagrams over loopback: run with --release -- --ignored"]
fn a_million_forged_ids_over_udp_leave_bounded_state() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut cfg = exon::endpoint::EndpointConfig::default();
        cfg.protocol.timers.probe_interval = Duration::from_millis(200);
        cfg.protocol.timers.max_probe_interval = Duration::from_secs(1);
        let victim = exon::endpoint::Endpoint::builder(VICTIM)
            .security(Security::InsecurePlaintext)
            .config(cfg)
            .bind("127.0.0.1:0")
            .await
            .unwrap();
        let to = victim.local_addr();
        let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let base = heap();
        let ids = 1_000_000u64;
        let mut samples = Vec::new();
        for i in 0..ids {
            let forged = NodeId::new(1_000_000 + i).expect("id");
            let req = Packet {
                header: Header::new(forged, VICTIM),
                frames: vec![Frame::ReqSlots { s: 0, n: 64, l: 0 }],
            };
            let _ = sock.send_to(&req.encode(), to).await;
            if i % 256 == 255 {
                tokio::task::yield_now().await;
            }
            if (i + 1) % (ids / 10) == 0 {
                samples.push(heap() - base);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let during = heap() - base;
        // The records probe, back off and are evicted; deaf-peer entries expire.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let after = heap() - base;
        let stats = victim.stats().await.unwrap();
        eprintln!(
            "UDP flood of {ids} forged ids: heap MiB after each tenth {:?}, {:.1} MiB a second \
             later, {:.1} MiB 20 s later; {} datagrams in, {} records now, {} peer addresses",
            samples
                .iter()
                .map(|s| format!("{:.1}", *s as f64 / f64::from(1 << 20)))
                .collect::<Vec<_>>(),
            during as f64 / f64::from(1 << 20),
            after as f64 / f64::from(1 << 20),
            stats.node.datagrams_in,
            stats.node.incarnations,
            stats.peer_addresses,
        );
        // The endpoint's own buffers (receive batches, pools) come on top of the core's
        // tables: measured flat at +16 MiB during the flood (+193 MiB before the bound),
        // +12 MiB once it is over.
        for s in samples.iter().chain([&during]) {
            assert!(*s <= 2 * BOUND, "heap +{s} bytes during the flood");
        }
        let half = samples[4];
        assert!(
            samples[9] - half <= 1 << 20,
            "the heap grew in the second half of the flood: {samples:?}"
        );
        assert!(after <= 2 * BOUND, "heap +{after} bytes after the flood");
    });
}
