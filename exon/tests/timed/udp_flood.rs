//! A flood of forgeries over real UDP on loopback: a flooder at 127.0.0.3 sends b 10 000
//! forged datagrams a second, first in the names of b's keyring members, then from fresh
//! self-certifying ids (each announcing a key that matches its id, each with a bad tag),
//! while a dozen new honest peers at 127.0.0.2, one after another, send b one message
//! each. Every one must be delivered while the flood runs, within 1 s of being sent
//! (`docs/security.md`, "Floods of forgeries"). With the rules off (`pin_member_keys`,
//! `address_cookies`), the same run locks the new peers out.

use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::crypto::{insecure_test_secret, Seq};
use exon::proto::frame::{put_reqslots, Header, SealHeader};
use exon::proto::{Identity, Keyring, PublicKey, Rules, SecretKey, Security};
use exon::NodeId;
use tokio::time::timeout;

use crate::serially;

const B: NodeId = NodeId::from_const(2);
/// b's keyring: ids 1 ..= MEMBERS. The new members are 3 ..= 14.
const MEMBERS: u64 = 64;
const NEWCOMERS: usize = 12;
/// Forged datagrams a second, sent in bursts of `BURST` every `BURST` / `RATE` seconds.
const RATE: u64 = 10_000;
const BURST: u64 = 5;
/// Between two new peers' first messages.
const GAP: Duration = Duration::from_millis(150);
/// How long after the last new peer the flood goes on.
const TAIL: Duration = Duration::from_millis(1200);
const DEADLINE: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Claim {
    /// Forgeries in the names of keyring members; the new peers are members.
    Members,
    /// Forgeries from fresh self-certifying ids; the new peers have self-certifying ids.
    SelfCertifying,
}

fn cfg(rules: Rules) -> EndpointConfig {
    EndpointConfig::default().with_rules(rules)
}

fn rules(on: bool) -> Rules {
    let mut r = Rules::ALL;
    r.pin_member_keys = on;
    r.address_cookies = on;
    r
}

/// A sealed-looking datagram (a REQSLOTS) from `src` to b with a made-up tag, announcing
/// `key` if given.
fn forgery(src: NodeId, key: Option<[u8; 32]>, counter: u32) -> Vec<u8> {
    let mut h = Header::new(src, B);
    h.seal = Some(SealHeader {
        seq: Seq {
            epoch: (1 << 40) + u64::from(counter >> 8),
            counter: counter as u8,
        },
        key: key.map(PublicKey::from_bytes),
        cookie: None,
    });
    let mut v = Vec::new();
    h.encode(&mut v);
    put_reqslots(&mut v, 1000, 16, 1000);
    v.extend_from_slice(&[0x42; 16]);
    v
}

/// The flooder's datagrams: 4096 of them, sent round and round.
fn forgeries(claim: Claim) -> Vec<Vec<u8>> {
    (0..4096u64)
        .map(|i| match claim {
            Claim::Members => {
                let id = NodeId::from_const(1 + i % MEMBERS);
                let id = if id == B { NodeId::from_const(1) } else { id };
                forgery(id, None, i as u32)
            }
            Claim::SelfCertifying => {
                let mut k = [0u8; 32];
                k[..8].copy_from_slice(&(i + 1).to_be_bytes());
                k[31] = 0x40;
                let key = PublicKey::from_bytes(k);
                forgery(key.self_certifying_id(), Some(k), i as u32)
            }
        })
        .collect()
}

/// `RATE`, or `FLOOD_RATE` from the environment (to compare runs by hand).
fn rate() -> u64 {
    std::env::var("FLOOD_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RATE)
}

/// Sends `RATE` forgeries a second from 127.0.0.3 to `to` until `stop`; returns how many.
fn flood(to: SocketAddr, claim: Claim, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let all = forgeries(claim);
    std::thread::spawn(move || {
        let sock = StdUdpSocket::bind("127.0.0.3:0").expect("127.0.0.3 is loopback on Linux");
        let start = Instant::now();
        let mut sent = 0u64;
        let rate = rate();
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..BURST {
                let _ = sock.send_to(&all[(sent % all.len() as u64) as usize], to);
                sent += 1;
            }
            let due = start + Duration::from_micros(sent * 1_000_000 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        sent
    })
}

/// A new peer: its id and identity.
fn newcomer(claim: Claim, i: usize) -> (NodeId, Security) {
    let mut ring = Keyring::new();
    ring.insert(B, insecure_test_secret(B).public_key());
    match claim {
        Claim::Members => {
            let id = NodeId::from_const(3 + i as u64);
            let ident = Identity::new(insecure_test_secret(id)).with_keyring(ring);
            (id, Security::Sealed(ident))
        }
        Claim::SelfCertifying => {
            let mut k = [0x77u8; 32];
            k[1] = i as u8; // not k[0]: X25519 clamps its low three bits
            let secret = SecretKey::from_bytes(k);
            let id = secret.public_key().self_certifying_id();
            (
                id,
                Security::Sealed(Identity::new(secret).with_keyring(ring)),
            )
        }
    }
}

/// What one flood run saw.
struct Run {
    /// Per new peer: time from its send to b's delivery, if delivered while the flood ran.
    during: Vec<Option<Duration>>,
    /// Per new peer: time from its send to b's delivery, if at all (within 3 s of the
    /// flood's end).
    at_all: Vec<Option<Duration>>,
    forged: u64,
    flood_secs: f64,
    budget_refusals: u64,
    cookie_replies: u64,
    vouched: u64,
}

async fn run(claim: Claim, on: bool) -> Run {
    let b_ident = {
        let mut ring = Keyring::new();
        for i in 1..=MEMBERS {
            let id = NodeId::from_const(i);
            ring.insert(id, insecure_test_secret(id).public_key());
        }
        Identity::new(insecure_test_secret(B))
            .with_keyring(ring)
            .allow_self_certifying(true)
    };
    let mut b = Endpoint::bind("127.0.0.1:0", B, Security::Sealed(b_ident), cfg(rules(on)))
        .await
        .unwrap();
    let b_addr = b.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let flood_start = Instant::now();
    let flooder = flood(b_addr, claim, stop.clone());
    // Let the flood spend whatever budget b starts with.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent_at = Arc::new(Mutex::new(vec![None; NEWCOMERS]));
    let senders = {
        let sent_at = sent_at.clone();
        let rules = rules(on);
        tokio::spawn(async move {
            let mut peers = Vec::new();
            for i in 0..NEWCOMERS {
                let (id, security) = newcomer(claim, i);
                let p = Endpoint::bind("127.0.0.2:0", id, security, cfg(rules))
                    .await
                    .expect("127.0.0.2 is loopback on Linux");
                p.add_peer(B, b_addr);
                sent_at.lock().unwrap()[i] = Some(Instant::now());
                let r = p.send(B, Bytes::from(vec![i as u8])).await.unwrap();
                peers.push((p, r));
                tokio::time::sleep(GAP).await;
            }
            peers
        })
    };
    let flood_end = flood_start + Duration::from_millis(300) + GAP * NEWCOMERS as u32 + TAIL;
    let mut got_at = [None; NEWCOMERS];
    let until = tokio::time::Instant::from_std(flood_end + Duration::from_secs(3));
    let mut stopped = false;
    while got_at.iter().any(Option::is_none) {
        let now = tokio::time::Instant::now();
        if now >= until {
            break;
        }
        let next = if stopped {
            until
        } else {
            tokio::time::Instant::from_std(flood_end)
        };
        match timeout(next - now, b.recv()).await {
            Ok(Some(m)) => {
                let i = m.payload[0] as usize;
                assert!(got_at[i].is_none(), "delivered twice");
                got_at[i] = Some(Instant::now());
            }
            Ok(None) => panic!("b stopped"),
            Err(_) => {
                if !stopped {
                    stop.store(true, Ordering::Relaxed);
                    stopped = true;
                }
            }
        }
        if !stopped && Instant::now() >= flood_end {
            stop.store(true, Ordering::Relaxed);
            stopped = true;
        }
    }
    let stopped_at = if stopped { flood_end } else { Instant::now() };
    stop.store(true, Ordering::Relaxed);
    let forged = flooder.join().unwrap();
    let flood_secs = (Instant::now().min(stopped_at.max(flood_end)) - flood_start).as_secs_f64();
    let peers = senders.await.unwrap();
    let sent_at = sent_at.lock().unwrap().clone();
    let lat = |i: usize| Some(got_at[i]? - sent_at[i]?);
    let during = (0..NEWCOMERS)
        .map(|i| lat(i).filter(|_| got_at[i].is_some_and(|g| g <= stopped_at)))
        .collect();
    let at_all = (0..NEWCOMERS).map(lat).collect();
    let s = b.stats().await.unwrap();
    drop(peers);
    Run {
        during,
        at_all,
        forged,
        flood_secs,
        budget_refusals: s.node.rejects.key_budget,
        cookie_replies: s.cookies.replies_sent,
        vouched: s.cookies.vouched,
    }
}

fn report(label: &str, r: &Run) {
    let ms = |v: &[Option<Duration>]| {
        v.iter()
            .map(|d| d.map_or("-".to_string(), |d| d.as_millis().to_string()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    eprintln!(
        "{label}: {} forgeries in {:.1} s; ms to delivery during the flood: [{}]; at all: [{}]; \
         refused for budget {}, cookie replies {}, vouched {}",
        r.forged,
        r.flood_secs,
        ms(&r.during),
        ms(&r.at_all),
        r.budget_refusals,
        r.cookie_replies,
        r.vouched
    );
}

fn within_deadline(r: &Run) -> usize {
    r.during
        .iter()
        .filter(|d| d.is_some_and(|d| d <= DEADLINE))
        .count()
}

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_flood_of_forgeries_does_not_lock_out_new_peers() {
    serially(a_flood_of_forgeries_does_not_lock_out_new_peers_run());
}

/// Each flood is tried up to twice: on a loaded 2-core machine (other builds running) the
/// debug-built receiver can fall behind the flood, its socket buffer overflows and a
/// newcomer's datagram is lost with the forgeries (seen once: 1.6 s for the first
/// newcomer); on a quiet one every newcomer is in within 13 ms. A defect fails both tries.
async fn a_flood_of_forgeries_does_not_lock_out_new_peers_run() {
    for claim in [Claim::Members, Claim::SelfCertifying] {
        let mut tries = Vec::new();
        for _ in 0..2 {
            let r = run(claim, true).await;
            report(&format!("{claim:?}, rules on"), &r);
            assert!(
                r.forged as f64 >= 0.8 * rate() as f64 * r.flood_secs,
                "the flood fell short"
            );
            tries.push(within_deadline(&r));
            if within_deadline(&r) == NEWCOMERS {
                break;
            }
        }
        assert_eq!(
            tries.last().copied(),
            Some(NEWCOMERS),
            "{claim:?}: every new peer delivered within 1 s, during the flood (tries: {tries:?})"
        );
    }
}

/// The same floods with the rules off: new peers draw lots for the budget the flood leaves,
/// and one whose first datagram loses waits for its retransmission (at least 200 ms), or
/// for the flood to end. How many lose varies a great deal over loopback (0 to 10 of the 12
/// per flood in runs so far; with the rules on none ever waited past 13 ms), so this asserts
/// the defect in its weakest form, a newcomer kept waiting at least 150 ms in one of the two
/// floods, and tries up to three times; `exon/tests/core/hostile.rs` shows the members' defect
/// exactly, on the core.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn without_the_rules_a_flood_locks_new_peers_out() {
    serially(without_the_rules_run());
}

/// Newcomers kept waiting at least 150 ms, or not delivered during the flood.
fn kept_waiting(r: &Run) -> usize {
    r.during
        .iter()
        .filter(|d| d.is_none_or(|d| d >= Duration::from_millis(150)))
        .count()
}

async fn without_the_rules_run() {
    let mut waited = Vec::new();
    for _ in 0..3 {
        let members = run(Claim::Members, false).await;
        report("Members, rules off", &members);
        let open = run(Claim::SelfCertifying, false).await;
        report("SelfCertifying, rules off", &open);
        assert!(members.budget_refusals > 0 && open.budget_refusals > 0);
        waited.push((kept_waiting(&members), kept_waiting(&open)));
        if kept_waiting(&members) + kept_waiting(&open) > 0 {
            return;
        }
    }
    panic!("the defect the rules prevent did not show: newcomers kept waiting {waited:?}");
}
