//! The attacks of an off-path or on-path sender against endpoints over real UDP on
//! 127.0.0.1: forged frames in a peer's name (plaintext or sealed-looking), forged
//! datagrams from a new address, and authenticated datagrams replayed from another address.
//! Sealed endpoints deliver every message exactly once, resolve every receipt truthfully,
//! and never send to the attacker. Here, run one at a time (`serially`), because the
//! conversations with a racing observer must complete within deadlines that a loaded
//! machine running other tests beside them missed (seen once in the shared `endpoint`
//! binary).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::crypto::{insecure_test_security, Seq};
use exon::proto::frame::{put_reqslots, put_slots, put_verdict, Header, SealHeader, Verdict};
use exon::proto::{Config, Security};
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::time::timeout;

use crate::serially;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(30);

fn cfg() -> EndpointConfig {
    EndpointConfig::default().with_protocol({
        let mut c = Config::default();
        c.timers.initial_rtt = Duration::from_millis(20);
        c.timers.probe_interval = Duration::from_millis(50);
        c.timers.idle_timeout = Duration::from_millis(500);
        c
    })
}

fn sealed(id: NodeId) -> Security {
    insecure_test_security(id, [A, B])
}

/// Every frame an attacker would forge, in `src`'s name to `dst`, around slot and
/// incarnation values near `around` (an attacker can guess clocks, not keys).
fn forgeries(src: NodeId, dst: NodeId, around: u64, seal: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for k in 0..8u64 {
        let (s, r) = (around + k * 97, around + k);
        let rg = std::slice::from_ref(&(s..s + 4096)).to_vec();
        let bodies: Vec<Vec<u8>> = vec![
            {
                let mut b = Vec::new();
                put_reqslots(&mut b, 1 << 60, 0, 1 << 60); // the 17-byte frontier attack
                b
            },
            {
                let mut b = Vec::new();
                put_slots(&mut b, s, r, 64);
                b
            },
            {
                let mut b = Vec::new();
                put_verdict(&mut b, Verdict::Ack, r, &rg, 64);
                b
            },
            {
                let mut b = Vec::new();
                put_verdict(&mut b, Verdict::Retry, r, &rg, 64);
                b
            },
            {
                let mut b = Vec::new();
                put_verdict(&mut b, Verdict::Doubt, r, &rg, 64);
                b
            },
        ];
        for body in bodies {
            let mut h = Header::new(src, dst);
            if seal {
                h.seal = Some(SealHeader {
                    seq: Seq {
                        epoch: (u64::MAX >> 3) + (k >> 8),
                        counter: k as u8,
                    },
                    key: None,
                    cookie: None,
                });
            }
            let mut d = Vec::new();
            h.encode(&mut d);
            d.extend_from_slice(&body);
            if seal {
                d.extend_from_slice(&[0xa5; 16]);
            }
            out.push(d);
        }
    }
    out
}

/// Two sealed endpoints on 127.0.0.1, A and B, that know each other's keys.
async fn sealed_pair() -> (Endpoint, Endpoint) {
    let a = Endpoint::bind("127.0.0.1:0", A, sealed(A), cfg());
    let b = Endpoint::bind("127.0.0.1:0", B, sealed(B), cfg());
    (a.await.unwrap(), b.await.unwrap())
}

/// `from` sends `payload` to `to`'s endpoint, which takes it; the receipt resolves Ok.
async fn reply(from: &Endpoint, to: &mut Endpoint, to_id: NodeId, payload: &'static [u8]) {
    let r = from.send(to_id, Bytes::from_static(payload)).await.unwrap();
    let m = timeout(LIMIT, to.recv()).await.unwrap().unwrap();
    assert_eq!(&m.payload[..], payload);
    timeout(LIMIT, r).await.unwrap().unwrap();
}

async fn stream(a: &Endpoint, b: &mut Endpoint, n: u32) -> HashSet<u32> {
    let h = a.handle();
    let sender = tokio::spawn(async move {
        let mut receipts = Vec::new();
        for i in 0..n {
            let mut payload = vec![0u8; 1000];
            payload[..4].copy_from_slice(&i.to_be_bytes());
            receipts.push(h.send(B, payload).await.unwrap());
        }
        for r in receipts {
            timeout(LIMIT, r)
                .await
                .unwrap()
                .expect("receipt resolves Ok");
        }
    });
    let mut seen = HashSet::new();
    while seen.len() < n as usize {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert_eq!(m.from, A);
        let k = u32::from_be_bytes(m.payload[..4].try_into().unwrap());
        assert!(seen.insert(k), "message {k} delivered twice");
    }
    sender.await.unwrap();
    seen
}

async fn nothing_arrives(sock: &UdpSocket) {
    let mut buf = [0u8; 2048];
    let got = timeout(Duration::from_millis(300), sock.recv_from(&mut buf)).await;
    assert!(got.is_err(), "the endpoint sent to the attacker: {got:?}");
}

#[test]
fn forged_frames_change_nothing_for_sealed_endpoints() {
    serially(async {
        let (a, mut b) = sealed_pair().await;
        a.add_peer(B, b.local_addr());
        let key = |id| exon::proto::crypto::insecure_test_secret(id).public_key();
        assert_eq!(
            (a.public_key(), b.public_key()),
            (Some(key(A)), Some(key(B)))
        );
        let attacker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
        // Keep forging while the stream runs, in both directions, plaintext and sealed-looking.
        let forger = tokio::spawn(async move {
            for round in 0..40u64 {
                for seal in [false, true] {
                    for d in forgeries(A, B, round * 1000, seal) {
                        attacker.send_to(&d, b_addr).await.unwrap();
                    }
                    for d in forgeries(B, A, round * 1000, seal) {
                        attacker.send_to(&d, a_addr).await.unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            attacker
        });
        let seen = stream(&a, &mut b, 3000).await;
        assert_eq!(seen.len(), 3000);
        let attacker = forger.await.unwrap();
        nothing_arrives(&attacker).await;
        let (sa, sb) = (a.stats().await.unwrap(), b.stats().await.unwrap());
        assert_eq!(sa.node.in_doubt, 0);
        assert_eq!(sa.node.acknowledged, 3000);
        assert!(sb.node.rejects.wrong_mode + sb.node.rejects.bad_tag > 0);
        assert!(sa.node.rejects.wrong_mode + sa.node.rejects.bad_tag > 0);
        assert_eq!(sb.node.delivered, 3000);
    });
}

/// A relay between A and B that forwards both ways and records what B sent to A and A
/// sent to B: an on-path attacker.
async fn relay(a: SocketAddr, b: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<(bool, Vec<u8>)>>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let tape = Arc::new(Mutex::new(Vec::new()));
    let t = tape.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            let to_b = from == a;
            t.lock().unwrap().push((to_b, buf[..n].to_vec()));
            let _ = sock.send_to(&buf[..n], if to_b { b } else { a }).await;
        }
    });
    (addr, tape)
}

#[test]
fn replays_from_another_address_do_not_move_a_peer() {
    serially(async {
        let (mut a, mut b) = sealed_pair().await;
        let (relay_addr, tape) = relay(a.local_addr(), b.local_addr()).await;
        // A reaches B through the relay; B learns A's address (the relay's) from A's datagrams.
        a.add_peer(B, relay_addr);
        stream(&a, &mut b, 200).await;
        let moves = b.stats().await.unwrap().address_updates;
        // The attacker replays everything it recorded, from its own address, to both.
        let attacker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let recorded = tape.lock().unwrap().clone();
        assert!(!recorded.is_empty());
        for (to_b, d) in &recorded {
            let to = if *to_b {
                b.local_addr()
            } else {
                a.local_addr()
            };
            attacker.send_to(d, to).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            b.stats().await.unwrap().address_updates,
            moves,
            "a replay moved A's address at B"
        );
        // Traffic both ways still goes through the relay, none to the attacker.
        let before = tape.lock().unwrap().len();
        reply(&b, &mut a, A, b"reply").await;
        assert!(
            tape.lock().unwrap().len() > before,
            "B's reply went around the relay"
        );
        nothing_arrives(&attacker).await;
        let sb = b.stats().await.unwrap();
        assert_eq!(sb.node.delivered, 200, "replays delivered nothing again");
    });
}

#[test]
fn a_forged_datagram_from_a_new_address_does_not_black_hole_a_peer() {
    serially(async {
        let (mut a, mut b) = sealed_pair().await;
        a.add_peer(B, b.local_addr());
        stream(&a, &mut b, 50).await;
        // B learned A's address. The attacker, from elsewhere, claims to be A.
        let attacker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        for seal in [false, true] {
            for d in forgeries(A, B, 0, seal) {
                attacker.send_to(&d, b.local_addr()).await.unwrap();
            }
        }
        reply(&b, &mut a, A, b"to a").await;
        nothing_arrives(&attacker).await;
    });
}

#[test]
fn plaintext_endpoints_refuse_the_frontier_attack() {
    serially(async {
        let plain = || Security::InsecurePlaintext;
        let a = Endpoint::bind("127.0.0.1:0", A, plain(), cfg())
            .await
            .unwrap();
        let mut b = Endpoint::bind("127.0.0.1:0", B, plain(), cfg())
            .await
            .unwrap();
        a.add_peer(B, b.local_addr());
        let attacker = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b_addr = b.local_addr();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        // A thread of its own, so the forgeries interleave with the stream.
        let forger = std::thread::spawn(move || {
            // Only the frontier REQSLOTS: ACKs and RETRYs cannot be told from real ones in
            // plaintext (that is what sealing is for).
            let mut d = Vec::new();
            Header::new(A, B).encode(&mut d);
            put_reqslots(&mut d, 1 << 60, 0, 1 << 60);
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                attacker.send_to(&d, b_addr).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let seen = stream(&a, &mut b, 3000).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        forger.join().unwrap();
        assert_eq!(seen.len(), 3000);
        let sb = b.stats().await.unwrap();
        assert!(
            sb.node.rejects.frontier_beyond_grant > 0,
            "{:?} reqslots_in={} in={} a_out={}",
            sb.node.rejects,
            sb.node.frames_in.reqslots,
            sb.node.datagrams_in,
            a.stats().await.unwrap().node.datagrams_out
        );
        assert_eq!(sb.node.delivered, 3000);
    });
}

/// The address book is pruned with the records: a learned address outlives its peer's
/// records for `learned_address_ttl` (a late reply still finds its way), then is forgotten,
/// and a send to that peer is refused at once rather than left waiting.
#[test]
fn learned_addresses_are_pruned_some_time_after_the_records() {
    serially(async {
        for (ttl, kept) in [
            (Duration::from_secs(60), true),
            (Duration::from_millis(200), false),
        ] {
            let mut a = Endpoint::bind("127.0.0.1:0", A, sealed(A), cfg())
                .await
                .unwrap();
            let mut c = cfg();
            c.learned_address_ttl = ttl;
            let mut b = Endpoint::bind("127.0.0.1:0", B, sealed(B), c)
                .await
                .unwrap();
            a.add_peer(B, b.local_addr());
            stream(&a, &mut b, 5).await;
            // Long enough for both sides' records to go idle and be discarded (A's last waiver
            // included), then for the short TTL to pass.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let want = usize::from(kept);
            timeout(LIMIT, async {
                while b.stats().await.unwrap().peer_addresses != want {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .unwrap();
            let sent = b.send(A, Bytes::from_static(b"late reply")).await;
            if kept {
                let r = sent.expect("the learned address is still known");
                let m = timeout(LIMIT, a.recv()).await.unwrap().unwrap();
                assert_eq!(&m.payload[..], b"late reply");
                timeout(LIMIT, r).await.unwrap().unwrap();
            } else {
                assert!(
                    matches!(sent, Err(exon::endpoint::Error::UnknownPeer(p)) if p == A),
                    "{sent:?}"
                );
            }
        }
    });
}

/// Bytes an observer's socket sent (copies of A's datagrams) and received (what B sent it).
#[derive(Default)]
struct ObserverBytes {
    sent: AtomicU64,
    received: AtomicU64,
}

/// The network between A and B (issue 29; RFC 9000, 9.3.3): A sends to the returned address,
/// a NAT in front of A, whose datagrams reach B from the NAT's outer address; B's datagrams
/// to that address go to A at once.
///
/// With `race_from`, an observer reads A's datagrams as they pass and, from the
/// `race_from`-th on, sends a copy of each to B from its own address at once, while the
/// original reaches B 30 ms late. The observer never answers, and counts and drops what
/// comes to it.
///
/// With `rebind_after`, the NAT's mapping changes after A's `rebind_after`-th datagram: A's
/// datagrams then reach B from a second outer address, and what B sends to the first is
/// dropped (the old mapping is gone).
async fn network(
    a: SocketAddr,
    b: SocketAddr,
    race_from: Option<usize>,
    rebind_after: Option<usize>,
) -> (SocketAddr, Arc<ObserverBytes>) {
    let inner = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let mut outer = Vec::new();
    for _ in 0..2 {
        outer.push(Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap()));
    }
    let observer = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let bytes = Arc::new(ObserverBytes::default());
    let seen = Arc::new(AtomicU64::new(0));
    let rebind_after = rebind_after.map_or(u64::MAX, |n| n as u64);
    let mapping = move |seen: &AtomicU64| usize::from(seen.load(Ordering::Relaxed) > rebind_after);
    for (k, sock) in outer.iter().enumerate() {
        let (sock, inner, seen) = (sock.clone(), inner.clone(), seen.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok((n, _)) = sock.recv_from(&mut buf).await {
                if mapping(&seen) == k {
                    let _ = inner.send_to(&buf[..n], a).await;
                }
            }
        });
    }
    let (obs, counts) = (observer.clone(), bytes.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = obs.recv_from(&mut buf).await {
            counts.received.fetch_add(n as u64, Ordering::Relaxed);
        }
    });
    let (late_tx, mut late_rx) =
        tokio::sync::mpsc::unbounded_channel::<(Instant, usize, Vec<u8>)>();
    let late = outer.clone();
    tokio::spawn(async move {
        while let Some((due, k, d)) = late_rx.recv().await {
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
            let _ = late[k].send_to(&d, b).await;
        }
    });
    let (addr, counts) = (inner.local_addr().unwrap(), bytes.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = inner.recv_from(&mut buf).await {
            let d = &buf[..n];
            let seen_now = seen.fetch_add(1, Ordering::Relaxed) + 1;
            let k = mapping(&seen);
            let Some(from) = race_from else {
                let _ = outer[k].send_to(d, b).await;
                continue;
            };
            if seen_now > from as u64 && observer.send_to(d, b).await.is_ok() {
                counts.sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            let due = Instant::now() + Duration::from_millis(30);
            if late_tx.send((due, k, d.to_vec())).is_err() {
                return;
            }
        }
    });
    (addr, bytes)
}

/// What came of a conversation with a racing observer.
#[derive(Debug)]
struct Raced {
    talk: Talk,
    /// B's address updates for A: learned, then each move.
    b_moves: u64,
    observer_sent: u64,
    observer_received: u64,
}

impl Raced {
    /// Every message and reply acknowledged and received; the observer got at most three
    /// times what it sent.
    fn assert_complete_and_not_amplified(&self) {
        let t = &self.talk;
        let all = (TALK, TALK, TALK);
        assert_eq!((t.acked, t.replies_acked, t.replies), all, "{self:?}");
        let (sent, got) = (self.observer_sent, self.observer_received);
        assert!(got <= 3 * sent, "amplified: {self:?}");
    }
}

/// What came of a conversation: A's messages acknowledged, B's replies acknowledged,
/// replies A received, and how long it took.
#[derive(Debug)]
struct Talk {
    acked: usize,
    replies_acked: usize,
    replies: usize,
    elapsed: Duration,
}

/// Messages A sends in [`converse`].
const TALK: usize = 200;

/// A sends 200 messages to B, which answers each with 1000 bytes, until everything is
/// acknowledged or `within` has passed.
async fn converse(mut a: Endpoint, mut b: Endpoint, within: Duration) -> Talk {
    let start = Instant::now();
    let counts = Arc::new([(); 3].map(|_| AtomicU64::new(0)));
    let (ha, hb) = (a.handle(), b.handle());
    let c = counts.clone();
    let sender = tokio::spawn(async move {
        let mut receipts = Vec::new();
        for i in 0..TALK as u32 {
            receipts.push(ha.send(B, i.to_be_bytes().to_vec()).await.unwrap());
        }
        for r in receipts {
            if r.await.is_ok() {
                c[0].fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let c = counts.clone();
    let answerer = tokio::spawn(async move {
        while let Some(m) = b.recv().await {
            let r = hb.send(A, vec![m.payload[3]; 1000]).await.unwrap();
            let c = c.clone();
            tokio::spawn(async move {
                if r.await.is_ok() {
                    c[1].fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let c = counts.clone();
    let reader = tokio::spawn(async move {
        while let Some(m) = a.recv().await {
            assert_eq!(m.payload.len(), 1000);
            c[2].fetch_add(1, Ordering::Relaxed);
        }
    });
    let all = |c: &[AtomicU64; 3]| c.iter().all(|n| n.load(Ordering::Relaxed) == TALK as u64);
    while !all(&counts) && start.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = start.elapsed();
    for t in [sender, answerer, reader] {
        t.abort();
    }
    let n = |i: usize| counts[i].load(Ordering::Relaxed) as usize;
    Talk {
        acked: n(0),
        replies_acked: n(1),
        replies: n(2),
        elapsed,
    }
}

/// [`converse`] through [`network`]. B learns A's address from A's datagrams (the first copy
/// raced ahead of it when `race_from` is 0).
async fn race(
    b_cfg: EndpointConfig,
    race_from: Option<usize>,
    rebind_after: Option<usize>,
    within: Duration,
) -> Raced {
    let a = Endpoint::bind("127.0.0.1:0", A, sealed(A), cfg());
    let b = Endpoint::bind("127.0.0.1:0", B, sealed(B), b_cfg);
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    let (relay, observer) = network(a_addr, b_addr, race_from, rebind_after).await;
    a.add_peer(B, relay);
    let hb = b.handle();
    let talk = converse(a, b, within).await;
    Raced {
        talk,
        b_moves: hb.stats().await.unwrap().address_updates,
        observer_sent: observer.sent.load(Ordering::Relaxed),
        observer_received: observer.received.load(Ordering::Relaxed),
    }
}

/// Issue 29: an observer that races a copy of each of A's datagrams to B from its own
/// address can neither stall nor steal the conversation: B challenges the observer's
/// address and keeps sending to the address that proved itself, so all 200 messages and
/// 200 replies complete, and the observer gets at most three times what it sent. Both when
/// the observer races from A's first datagram on (B's first address for A is the
/// observer's) and when it starts once B has proven A's address (from A's eighth datagram:
/// the whole conversation takes about twenty since path MTU discovery probes loopback's
/// size first).
#[test]
fn an_observer_racing_copies_neither_stalls_nor_steals_a_conversation() {
    serially(async {
        for race_from in [0, 8] {
            let r = race(cfg(), Some(race_from), None, Duration::from_secs(10)).await;
            eprintln!("racing from datagram {race_from}: {r:?}");
            r.assert_complete_and_not_amplified();
            assert!(r.talk.elapsed < Duration::from_secs(5), "slow: {r:?}");
            assert!(r.observer_sent > 0, "{r:?}");
        }
    });
}

/// With the rule off (a fresher datagram moves the peer at once), the same observer takes
/// A's address at B: B's answers go to the observer, and the conversation stalls.
#[cfg(feature = "rule-switches")]
#[test]
fn without_the_rule_a_racing_observer_stalls_the_conversation() {
    serially(async {
        let mut off = cfg();
        off.moves_need_an_answer = false;
        for race_from in [0, 8] {
            let r = race(off.clone(), Some(race_from), None, Duration::from_secs(2)).await;
            eprintln!("rule off, racing from datagram {race_from}: {r:?}");
            assert!(r.talk.replies < 200, "the defect the rule prevents: {r:?}");
        }
    });
}

/// A peer whose address really changed (a NAT rebinding: the old address stops working) is
/// followed once it answers the challenge at its new address: alone (B learned A's address,
/// then moved it once), and with an observer racing a copy of every datagram ahead of the
/// original (the copies are always the fresher ones: the new address is challenged once the
/// observer's candidate failed and the old address stayed quiet as long).
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_peer_whose_address_changes_is_followed_once_it_answers_there() {
    serially(async {
        for race_from in [None, Some(0)] {
            let r = race(cfg(), race_from, Some(5), Duration::from_secs(10)).await;
            eprintln!("rebinding, racing from {race_from:?}: {r:?}");
            r.assert_complete_and_not_amplified();
            if race_from.is_none() {
                assert_eq!(r.b_moves, 2, "learned, then moved: {r:?}");
            }
        }
    });
}
