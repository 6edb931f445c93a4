//! The tokio endpoint over real loopback UDP: send/receive/acknowledge, backpressure both
//! ways, close, address changes, and restarts on a file clock store.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::{
    DatagramSocket, Endpoint, EndpointConfig, Error, FileStore, Message, ReceiptError,
};
use exon::proto::{Config, SendError};
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::sync::Notify;
use tokio::time::timeout;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(20);

fn cfg() -> EndpointConfig {
    EndpointConfig::default().with_protocol({
        let mut conf = Config::default();
        conf.initial_rtt = Duration::from_millis(20);
        conf.probe_interval = Duration::from_millis(50);
        conf.max_probe_interval = Duration::from_millis(200);
        conf.idle_timeout = Duration::from_millis(500);
        conf
    })
}

async fn pair(cfg: EndpointConfig) -> (Endpoint, Endpoint) {
    let a = Endpoint::bind("127.0.0.1:0", A, cfg.clone()).await.unwrap();
    let b = Endpoint::bind("127.0.0.1:0", B, cfg).await.unwrap();
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    (a, b)
}

fn num(m: &Message) -> u32 {
    u32::from_be_bytes(m.payload[..].try_into().unwrap())
}

#[tokio::test]
async fn send_receive_acknowledge() {
    let (a, mut b) = pair(cfg()).await;
    let r = a.send(B, Bytes::from_static(b"hello")).await.unwrap();
    let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    assert_eq!((m.from, &m.payload[..]), (A, &b"hello"[..]));
    assert_eq!(timeout(LIMIT, r).await.unwrap(), Ok(exon::MsgId(0)));
    assert!(matches!(
        a.try_send(A, Bytes::new()).await,
        Err(Error::Send(SendError::ToSelf))
    ));
    let report = a.close(Duration::from_secs(2)).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(
        a.send(B, Bytes::new()).await.is_err(),
        "closed endpoint refuses sends"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_messages_multi_thread_runtime() {
    let (a, mut b) = pair(cfg()).await;
    let n = 2000u32;
    let h = a.handle();
    let sender = tokio::spawn(async move {
        for i in 0..n {
            drop(h.send(B, i.to_be_bytes().to_vec()).await.unwrap());
        }
    });
    let mut seen = HashSet::new();
    while seen.len() < n as usize {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert!(seen.insert(num(&m)), "duplicate");
    }
    sender.await.unwrap();
    // Dropped receipts did not cancel anything: close finds everything acknowledged.
    let report = timeout(LIMIT, a.close(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.stats.node.acknowledged, n as u64);
}

#[tokio::test]
async fn try_send_fails_fast_and_send_waits_for_room() {
    let mut c = cfg();
    c.protocol.max_queued_per_peer = 4;
    let a = Endpoint::bind("127.0.0.1:0", A, c.clone()).await.unwrap();
    // B is not there yet: nothing is acknowledged, the queue fills up.
    let b_sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b_addr = b_sock.local_addr().unwrap();
    a.add_peer(B, b_addr);
    let mut receipts = Vec::new();
    for i in 0..4u32 {
        receipts.push(a.try_send(B, i.to_be_bytes().to_vec()).await.unwrap());
    }
    assert!(matches!(
        a.try_send(B, 9u32.to_be_bytes().to_vec()).await,
        Err(Error::Send(SendError::QueueFull(p))) if p == B
    ));
    let h = a.handle();
    let waiting = tokio::spawn(async move { h.send(B, 4u32.to_be_bytes().to_vec()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "send must wait while the queue is full"
    );
    drop(b_sock);
    let mut b = Endpoint::bind(b_addr, B, c).await.unwrap();
    b.add_peer(A, a.local_addr());
    let r = timeout(LIMIT, waiting).await.unwrap().unwrap().unwrap();
    receipts.push(r);
    let mut got = HashSet::new();
    while got.len() < 5 {
        got.insert(num(&timeout(LIMIT, b.recv()).await.unwrap().unwrap()));
    }
    for r in receipts {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn slow_reader_pauses_socket_instead_of_dropping() {
    let c = cfg().with_delivery_buffer(4);
    let (a, mut b) = pair(c).await;
    let n = 300u32;
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(a.send(B, i.to_be_bytes().to_vec()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = b.stats().await.unwrap();
    assert!(stats.delivery_stalls > 0, "{stats:?}");
    assert!(stats.node.delivered < n as u64, "reading paused: {stats:?}");
    let mut seen = HashSet::new();
    while seen.len() < n as usize {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert!(seen.insert(num(&m)), "duplicate");
    }
    for r in receipts {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn close_reports_unacknowledged_and_never_hangs() {
    let a = Endpoint::bind("127.0.0.1:0", A, cfg()).await.unwrap();
    // A closed port: sends draw ICMP errors, which must not kill the driver.
    let gone = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    a.add_peer(B, gone.local_addr().unwrap());
    drop(gone);
    let r = a.send(B, Bytes::from_static(b"lost")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = timeout(Duration::from_secs(3), a.close(Duration::from_millis(300)))
        .await
        .expect("close must respect its deadline");
    assert_eq!(report.unacknowledged, vec![(B, r.id())]);
    assert!(r.await.is_err());
}

/// A socket that can move to a new local address; the old one is closed.
struct Movable {
    current: Mutex<Arc<UdpSocket>>,
    moved: Notify,
}

impl Movable {
    fn current(&self) -> Arc<UdpSocket> {
        self.current.lock().unwrap().clone()
    }

    async fn move_to_new_port(&self) -> SocketAddr {
        let s = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let addr = s.local_addr().unwrap();
        *self.current.lock().unwrap() = s;
        self.moved.notify_waiters();
        addr
    }
}

impl DatagramSocket for Movable {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        self.current().send_to(buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        loop {
            let s = self.current();
            tokio::select! {
                r = s.recv_from(buf) => return r,
                _ = self.moved.notified() => continue,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.current().local_addr()
    }
}

#[tokio::test]
async fn peer_moving_mid_stream_is_followed() {
    let a = Endpoint::bind("127.0.0.1:0", A, cfg()).await.unwrap();
    let sock = Arc::new(Movable {
        current: Mutex::new(Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap())),
        moved: Notify::new(),
    });
    let mut b = Endpoint::builder(B)
        .config(cfg())
        .with_socket(sock.clone())
        .unwrap();
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let n = 400u32;
    let (mut a_got, mut b_got) = (HashSet::new(), HashSet::new());
    let mut a = a;
    for i in 0..n {
        drop(a.send(B, i.to_be_bytes().to_vec()).await.unwrap());
        drop(b.send(A, i.to_be_bytes().to_vec()).await.unwrap());
        if i == n / 2 {
            // Let some traffic flow, then B changes address: A must learn it from B's
            // datagrams alone.
            let new = sock.move_to_new_port().await;
            assert_ne!(new, b.local_addr());
        }
        while let Ok(Some(m)) = timeout(Duration::from_millis(1), b.recv()).await {
            assert!(b_got.insert(num(&m)), "duplicate at B");
        }
    }
    while a_got.len() < n as usize || b_got.len() < n as usize {
        tokio::select! {
            m = a.recv() => assert!(a_got.insert(num(&m.unwrap())), "duplicate at A"),
            m = b.recv() => assert!(b_got.insert(num(&m.unwrap())), "duplicate at B"),
            _ = tokio::time::sleep(LIMIT) => panic!("stalled: A {} B {}", a_got.len(), b_got.len()),
        }
    }
    let stats = a.stats().await.unwrap();
    assert!(stats.address_updates >= 1, "{stats:?}");
    assert!(timeout(LIMIT, a.close(Duration::from_secs(5)))
        .await
        .unwrap()
        .is_clean());
}

/// A receiver restarted on its clock store never delivers twice, never acknowledges a
/// message it did not deliver, and the stream resumes. Messages whose tokens were in flight
/// to the old incarnation come back to their sender as in doubt (`ReceiptError::InDoubt`):
/// the receiver cannot know whether it delivered them before the crash. Every other
/// message is acknowledged and delivered exactly once.
#[tokio::test]
async fn restart_on_file_store_keeps_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.clock");
    let mut c = cfg();
    c.protocol.clock_block = 64; // many stores during the run
    let a = Endpoint::bind("127.0.0.1:0", A, c.clone()).await.unwrap();
    let start = || {
        Endpoint::builder(B)
            .config(c.clone())
            .clock_store(FileStore::new(path.clone()))
            .bind("127.0.0.1:0")
    };
    let mut b = start().await.unwrap();
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    // Sends a range and returns each message's outcome.
    let send_range = |range: std::ops::Range<u32>| {
        let h = a.handle();
        tokio::spawn(async move {
            let mut rs = Vec::new();
            for i in range {
                rs.push((i, h.send(B, i.to_be_bytes().to_vec()).await.unwrap()));
            }
            let mut out = Vec::new();
            for (i, r) in rs {
                out.push((i, timeout(LIMIT, r).await.unwrap()));
            }
            out
        })
    };
    let phase1 = send_range(0..300);
    let mut seen = HashSet::new();
    while seen.len() < 150 {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert!(seen.insert(num(&m)), "duplicate before restart");
    }
    // Crash-like restart: B stops at once, and comes back on the same store elsewhere.
    let report = b.close(Duration::ZERO).await;
    while let Some(m) = b.recv().await {
        assert!(seen.insert(num(&m)), "duplicate in buffered deliveries");
    }
    let stored: u64 = std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(report.stats.node.delivered as usize, seen.len());
    let mut b = start().await.unwrap();
    b.add_peer(A, a.local_addr());
    a.add_peer(B, b.local_addr());
    let seen = Arc::new(Mutex::new(seen));
    let log = seen.clone();
    let reader = tokio::spawn(async move {
        while let Some(m) = b.recv().await {
            assert!(
                log.lock().unwrap().insert(num(&m)),
                "duplicate after restart"
            );
        }
    });
    let outcomes = timeout(LIMIT, phase1).await.unwrap().unwrap();
    let in_doubt: Vec<u32> = outcomes
        .iter()
        .filter(|(_, r)| *r == Err(ReceiptError::InDoubt))
        .map(|(i, _)| *i)
        .collect();
    assert!(
        outcomes
            .iter()
            .all(|(_, r)| r.is_ok() || *r == Err(ReceiptError::InDoubt)),
        "{outcomes:?}"
    );
    // Envelopes A got before the restart belong to the dead incarnation: tokens made from
    // them come back in doubt too (the receiver cannot tell them from tokens it delivered
    // before the crash). At the first DOUBT A drops them and asks for fresh slots, so within
    // a window of envelopes the stream is acknowledged again.
    let mut phase2 = Vec::new();
    let mut resumed = false;
    for batch in 3..12u32 {
        let out = timeout(LIMIT, send_range(batch * 100..batch * 100 + 100))
            .await
            .unwrap()
            .unwrap();
        resumed = out.iter().all(|(_, r)| r.is_ok());
        phase2.extend(out);
        if resumed {
            break;
        }
    }
    assert!(resumed, "the stream never resumed after the restart");
    let doubted_after: Vec<u32> = phase2
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| *i)
        .collect();
    assert!(
        doubted_after.len() as u64 <= c.protocol.envelope_target,
        "more than the envelopes held at the restart came back in doubt: {}",
        doubted_after.len()
    );
    assert!(phase2
        .iter()
        .all(|(_, r)| r.is_ok() || *r == Err(ReceiptError::InDoubt)));
    let in_doubt: Vec<u32> = in_doubt.into_iter().chain(doubted_after).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = seen.lock().unwrap().clone();
    for (i, r) in outcomes.iter().chain(&phase2) {
        if r.is_ok() {
            assert!(
                seen.contains(i),
                "message {i} acknowledged, never delivered"
            );
        }
    }
    assert!(
        outcomes
            .iter()
            .chain(&phase2)
            .all(|(i, _)| seen.contains(i) || in_doubt.contains(i)),
        "a message neither delivered nor in doubt"
    );
    let stats = a.stats().await.unwrap();
    assert_eq!(stats.node.in_doubt as usize, in_doubt.len());
    assert!(!reader.is_finished(), "reader failed");
    let after: u64 = std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(after > stored, "the restarted node stored a higher mark");
    reader.abort();
}
