//! Issue 29 in the simulator (turmoil runs the real driver over a simulated network; the
//! exon-sim simulator drives nodes without addresses): an observer that reads A's
//! datagrams and races a copy of each to B from its own address, ahead of the original
//! (30 ms late), neither stalls nor steals the conversation, and gets at most three times
//! what it sent.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{cfg, sim, PORT};
use exon::endpoint::{Endpoint, EndpointConfig, MemoryStore};
use exon::NodeId;
use turmoil::net::UdpSocket;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
/// Messages A sends; B answers each with 1000 bytes.
const N: u64 = 200;
/// Where the network mirrors A's datagrams to the observer (its "radio").
const MIRROR: u16 = 9001;

/// A's messages acknowledged, B's replies acknowledged, replies A received, bytes the
/// observer sent B, bytes that reached the observer's address.
#[derive(Default)]
struct Counts([AtomicU64; 5]);

impl Counts {
    fn add(&self, i: usize, n: u64) {
        self.0[i].fetch_add(n, Ordering::Relaxed);
    }

    fn get(&self) -> [u64; 5] {
        self.0.each_ref().map(|c| c.load(Ordering::Relaxed))
    }
}

fn addr(host: &str, port: u16) -> SocketAddr {
    SocketAddr::new(turmoil::lookup(host), port)
}

fn endpoint(id: NodeId, socket: UdpSocket, config: EndpointConfig) -> turmoil::Result<Endpoint> {
    Ok(Endpoint::builder(id)
        .security(exon::proto::crypto::insecure_test_security(id, [A, B]))
        .config(config)
        .clock_store(MemoryStore::starting_at(1))
        .with_socket(socket)?)
}

/// Runs the conversation for at most `secs` simulated seconds, B configured with
/// `b_cfg`; returns the counts and the simulated time it took.
fn converse(b_cfg: EndpointConfig, secs: u64) -> ([u64; 5], Duration) {
    let mut sim = sim(secs + 5, |b| {
        b.min_message_latency(Duration::from_millis(1))
            .max_message_latency(Duration::from_millis(1));
    });
    let counts = Arc::new(Counts::default());

    // The network: A's datagrams go to B 30 ms late (and are mirrored to the observer at
    // once); B's go to A at once.
    sim.host("net", || async {
        let sock = Arc::new(UdpSocket::bind(("0.0.0.0", PORT)).await?);
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, from) = sock.recv_from(&mut buf).await?;
            let d = buf[..n].to_vec();
            if from.ip() != turmoil::lookup("a") {
                sock.send_to(&d, addr("a", PORT)).await?;
                continue;
            }
            sock.send_to(&d, addr("observer", MIRROR)).await?;
            let late = sock.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                let _ = late.send_to(&d, addr("b", PORT)).await;
            });
        }
    });

    // The observer: sends each mirrored datagram to B from its own address; never answers.
    let c = counts.clone();
    sim.host("observer", move || {
        let c = c.clone();
        async move {
            let mirror = UdpSocket::bind(("0.0.0.0", MIRROR)).await?;
            let own = Arc::new(UdpSocket::bind(("0.0.0.0", PORT)).await?);
            let (ear, cc) = (own.clone(), c.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok((n, _)) = ear.recv_from(&mut buf).await {
                    cc.add(4, n as u64);
                }
            });
            let mut buf = vec![0u8; 65536];
            loop {
                let (n, _) = mirror.recv_from(&mut buf).await?;
                own.send_to(&buf[..n], addr("b", PORT)).await?;
                c.add(3, n as u64);
            }
        }
    });

    // B learns A's address from A's datagrams and answers each message with 1000 bytes.
    let c = counts.clone();
    sim.host("b", move || {
        let (c, b_cfg) = (c.clone(), b_cfg.clone());
        async move {
            let mut ep = endpoint(B, UdpSocket::bind(("0.0.0.0", PORT)).await?, b_cfg)?;
            while let Some(m) = ep.recv().await {
                let r = ep.send(A, vec![m.payload[3]; 1000]).await?;
                let c = c.clone();
                tokio::spawn(async move {
                    if r.await.is_ok() {
                        c.add(1, 1);
                    }
                });
            }
            Ok(())
        }
    });

    let c = counts.clone();
    sim.client("a", async move {
        let mut ep = endpoint(A, UdpSocket::bind(("0.0.0.0", PORT)).await?, cfg())?;
        ep.add_peer(B, addr("net", PORT));
        let mut receipts = Vec::new();
        for i in 0..N as u32 {
            receipts.push(ep.send(B, i.to_be_bytes().to_vec()).await?);
        }
        for _ in 0..N {
            let m = ep.recv().await.expect("endpoint open");
            assert_eq!(m.payload.len(), 1000);
            c.add(2, 1);
        }
        for r in receipts {
            r.await?;
            c.add(0, 1);
        }
        Ok(())
    });

    let limit = Duration::from_secs(secs);
    loop {
        let done = sim.step().expect("simulation failed");
        if (done && counts.get()[1] == N) || sim.elapsed() >= limit {
            break;
        }
    }
    (counts.get(), sim.elapsed())
}

#[test]
fn a_racing_observer_neither_stalls_nor_steals_a_conversation() {
    let (c, took) = converse(cfg(), 20);
    eprintln!("counts {c:?} in {took:?}");
    let [acked, replies_acked, replies, sent, received] = c;
    assert_eq!((acked, replies_acked, replies), (N, N, N), "{c:?}");
    assert!(sent > 0);
    assert!(received <= 3 * sent, "amplified: {c:?}");
}

/// With the rule off, the observer takes A's address at B and the conversation stalls.
#[cfg(feature = "rule-switches")]
#[test]
fn without_the_rule_a_racing_observer_stalls_the_conversation() {
    let mut off = cfg();
    off.moves_need_an_answer = false;
    let (c, took) = converse(off, 10);
    eprintln!("rule off: counts {c:?} in {took:?}");
    assert!(c[2] < N, "the defect the rule prevents: {c:?}");
}
