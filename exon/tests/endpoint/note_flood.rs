//! A peer whose messages draw notes from this endpoint (here questions about channel runs
//! it never had, each answered "over") while it takes nothing this endpoint sends: the
//! core's queue to it fills, and the answers wait for room. At most 64 wait
//! (`EndpointStats::notes_waiting`); the rest are dropped and counted (`notes_dropped`)
//! instead of piling up without bound. Once the peer takes again, the notes that waited
//! reach it, each once: every answer arrived or was counted dropped.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::endpoint::{Endpoint, EndpointConfig};
use exon::envelope::{Envelope, Flow, Place};
use exon::proto::{Config, Event, Node, NodeId, Security};
use exon_testkit::drain::drain;
use tokio::net::UdpSocket;

use super::common::cfg;

const A: NodeId = NodeId::from_const(1);
const H: NodeId = NodeId::from_const(2);
/// The questions the peer asks.
const QUESTIONS: u32 = 600;
/// The victim's core queue to one destination (messages not sent yet).
const QUEUE: usize = 4;
/// `Sends`' cap on the notes waiting for one destination.
const NOTES_PER_PEER: usize = 64;
const LIMIT: Duration = Duration::from_secs(30);

/// The question number `i` asks: channel 3's run `i + 1` (runs the victim never had).
fn question(i: u32) -> Bytes {
    Envelope::query(Place {
        flow: Flow::Channel(3),
        run: i + 1,
        seq: 0,
    })
    .to_bytes()
}

/// The peer: a bare core node on its own socket, driven by hand.
struct Peer {
    node: Node,
    sock: UdpSocket,
    victim: std::net::SocketAddr,
    /// Deliveries not taken yet (while `taking` is off).
    untaken: Vec<exon::proto::DeliveryId>,
    /// The runs the victim said are over, as delivered (each once).
    overs: Vec<u32>,
    /// Whether the peer takes what it is delivered.
    taking: bool,
    next: u32,
}

impl Peer {
    /// One turn: queue more questions, send what the node has, read the victim's datagrams
    /// for a few milliseconds.
    async fn turn(&mut self) {
        let now = Instant::now();
        while self.next < QUESTIONS && !self.node.is_full(A, 64) {
            self.node.send(now, A, question(self.next)).unwrap();
            self.next += 1;
        }
        if self.taking {
            for id in self.untaken.drain(..) {
                self.node.handle_taken(now, id);
            }
        }
        let outs = drain(&mut self.node, now);
        for (_, d) in &outs.datagrams {
            self.sock.send_to(d, self.victim).await.unwrap();
        }
        for e in outs.events {
            if let Event::Delivered { payload, id, .. } = e {
                match Envelope::open(payload).unwrap() {
                    Envelope::Over(place) => self.overs.push(place.run),
                    other => panic!("a note other than over: {other:?}"),
                }
                self.untaken.push(id);
            }
        }
        let mut buf = vec![0u8; 65_536];
        let until = tokio::time::Instant::now() + Duration::from_millis(5);
        while let Ok(Ok((n, _))) =
            tokio::time::timeout_at(until, self.sock.recv_from(&mut buf)).await
        {
            self.node
                .handle_datagram(Instant::now(), Bytes::copy_from_slice(&buf[..n]));
        }
        if outs.timeout.is_some_and(|t| t <= Instant::now()) {
            self.node.handle_timeout(Instant::now());
        }
    }
}

async fn victim() -> Endpoint {
    let mut c: EndpointConfig = cfg();
    c.protocol.limits.max_queued_per_peer = QUEUE;
    Endpoint::builder(A)
        .security(Security::InsecurePlaintext)
        .config(c)
        .bind("127.0.0.1:0")
        .await
        .unwrap()
}

async fn peer(victim: &Endpoint) -> Peer {
    let mut conf = Config::default();
    conf.timers.initial_rtt = Duration::from_millis(20);
    conf.timers.probe_interval = Duration::from_millis(50);
    Peer {
        node: Node::new(H, Security::InsecurePlaintext, conf, 0).unwrap(),
        sock: UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        victim: victim.local_addr(),
        untaken: Vec::new(),
        overs: Vec::new(),
        taking: false,
        next: 0,
    }
}

#[tokio::test]
async fn a_peer_that_takes_nothing_cannot_grow_the_notes_waiting_for_it() {
    let a = victim().await;
    let mut h = peer(&a).await;
    let start = Instant::now();
    // Every question asked and taken by the victim, each answered: into the core's queue,
    // waiting for room, or dropped.
    let mut most_waiting = 0;
    loop {
        h.turn().await;
        let s = a.stats().await.unwrap();
        most_waiting = most_waiting.max(s.notes_waiting);
        assert!(
            s.notes_waiting <= NOTES_PER_PEER,
            "{} notes wait for a peer that takes nothing",
            s.notes_waiting
        );
        if s.node.taken == u64::from(QUESTIONS) {
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "asked {}, taken {}, waiting {}, dropped {}",
            h.next,
            s.node.taken,
            s.notes_waiting,
            s.notes_dropped
        );
    }
    assert_eq!(most_waiting, NOTES_PER_PEER, "the cap was never reached");

    // The peer takes again: the answers that waited arrive, each once; every question's
    // answer either arrived or was counted as dropped.
    h.taking = true;
    let start = Instant::now();
    let s = loop {
        h.turn().await;
        let s = a.stats().await.unwrap();
        if s.notes_waiting == 0 && h.overs.len() as u64 + s.notes_dropped >= u64::from(QUESTIONS) {
            break s;
        }
        assert!(
            start.elapsed() < LIMIT,
            "{} answers arrived, {} wait, {} dropped",
            h.overs.len(),
            s.notes_waiting,
            s.notes_dropped
        );
    };
    for _ in 0..20 {
        h.turn().await;
    }
    let distinct: HashSet<u32> = h.overs.iter().copied().collect();
    assert_eq!(distinct.len(), h.overs.len(), "an answer arrived twice");
    assert_eq!(h.overs.len() as u64 + s.notes_dropped, u64::from(QUESTIONS));
    assert!(
        s.notes_dropped >= u64::from(QUESTIONS) / 2,
        "{} dropped: the peer gave room after all?",
        s.notes_dropped
    );
    let end = a.stats().await.unwrap();
    assert_eq!((end.notes_waiting, end.notes_dropped), (0, s.notes_dropped));
}
