//! The tokio endpoint over real loopback UDP: send/receive/acknowledge, backpressure both
//! ways, close, address changes, and restarts on a file clock store; a receipt resolves `Ok`
//! only for a message the receiving application took, what it never took is reported by its
//! `CloseReport`, and `close` returns within its timeout.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::endpoint::{
    DatagramSocket, Endpoint, EndpointConfig, Error, FileStore, Message, Receipt, ReceiptError,
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
        conf.timers.initial_rtt = Duration::from_millis(20);
        conf.timers.probe_interval = Duration::from_millis(50);
        conf.timers.max_probe_interval = Duration::from_millis(200);
        conf.timers.idle_timeout = Duration::from_millis(500);
        conf
    })
}

async fn pair(cfg: EndpointConfig) -> (Endpoint, Endpoint) {
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), cfg.clone())
        .await
        .unwrap();
    let b = Endpoint::bind("127.0.0.1:0", B, test_security(B), cfg)
        .await
        .unwrap();
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

/// `Handle::path` reports what the sender knows of the path to a peer it sends to: the RTT
/// and its variation once acknowledgements came back, the datagram size, the window; and
/// nothing for a peer it never sent to.
#[tokio::test]
async fn the_path_to_a_peer_is_reported_once_messages_went_there() {
    let (a, mut b) = pair(cfg()).await;
    let h = a.handle();
    assert_eq!(h.path(B).await, None, "nothing sent yet");
    let mut receipts = Vec::new();
    for i in 0..20u8 {
        receipts.push(a.send(B, Bytes::from(vec![i; 100])).await.unwrap());
    }
    for _ in 0..20 {
        timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    }
    for r in receipts {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
    let p = h.path(B).await.expect("a sender record for B");
    let srtt = p.srtt.expect("RTT measured");
    assert!(srtt > Duration::ZERO && srtt < LIMIT, "{p:?}");
    assert!(p.rtt_var.is_some(), "{p:?}");
    assert!(p.datagram > 0 && p.window > 0, "{p:?}");
    assert_eq!(p.in_flight, 0, "everything acknowledged: {p:?}");
    assert_eq!(h.path(NodeId::from_const(99)).await, None);
    a.close(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn try_send_fails_fast_and_send_waits_for_room() {
    let mut c = cfg();
    c.protocol.limits.max_queued_per_peer = 4;
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c.clone())
        .await
        .unwrap();
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
    let mut b = Endpoint::bind(b_addr, B, test_security(B), c)
        .await
        .unwrap();
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
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), cfg())
        .await
        .unwrap();
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
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), cfg())
        .await
        .unwrap();
    let sock = Arc::new(Movable {
        current: Mutex::new(Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap())),
        moved: Notify::new(),
    });
    let mut b = Endpoint::builder(B)
        .security(test_security(B))
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
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c.clone())
        .await
        .unwrap();
    let start = || {
        Endpoint::builder(B)
            .security(test_security(B))
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
    // What the application had not taken is lost with the process, and reported.
    assert!(
        b.recv().await.is_none(),
        "handed out after the endpoint stopped"
    );
    // The old B's last ACKs (for what its application took) may still be on their way: A
    // learns peer addresses from datagrams, so let them land before giving A the new one.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stored: u64 = std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        report.stats.node.delivered as usize,
        seen.len() + report.undelivered
    );
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
    let outcomes = match timeout(LIMIT, phase1).await {
        Ok(o) => o.unwrap(),
        Err(_) => panic!("phase 1 receipts unresolved: {:?}", a.stats().await),
    };
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
        doubted_after.len() as u64 <= c.protocol.flow.envelope_target,
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

/// Sealed datagrams with keys derived from the node ids, ids 0-63 and 1000-1063 known.
/// A sender that restarts at another address (a new process on a new port, same id and
/// key) while the receiver still holds the record of its first run is heard: its first
/// request says it restarted (its clock jumped past the record), the receiver learns the
/// new address from it and probes the sender there, the sender's waiver ends the old record,
/// and its messages are delivered. (Before, that request counted as hostile, so the
/// receiver never learnt the address, and probed the old one for ever.)
#[tokio::test]
async fn a_sender_restarted_at_another_address_is_heard() {
    let c = EndpointConfig::default();
    let mut b = Endpoint::bind("127.0.0.1:0", B, test_security(B), c.clone())
        .await
        .unwrap();
    for (run, text) in ["first", "second", "third"].into_iter().enumerate() {
        // A new endpoint each time: a fresh port, the same node id and key.
        let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c.clone())
            .await
            .unwrap();
        a.add_peer(B, b.local_addr());
        let r = a.send(B, text.as_bytes().to_vec()).await.unwrap();
        let m = timeout(Duration::from_secs(5), b.recv())
            .await
            .unwrap_or_else(|_| panic!("run {run}: never delivered"))
            .unwrap();
        assert_eq!(&m.payload[..], text.as_bytes());
        timeout(Duration::from_secs(5), r)
            .await
            .unwrap_or_else(|_| panic!("run {run}: no verdict"))
            .unwrap();
        assert!(a.close(Duration::from_secs(1)).await.is_clean());
    }
    let s = b.stats().await.unwrap();
    assert!(s.node.sender_restarts >= 2, "{}", s.node.sender_restarts);
}

fn test_security(id: exon::NodeId) -> exon::proto::Security {
    exon::proto::crypto::insecure_test_security(
        id,
        (0..64).chain(1000..1064).map(exon::NodeId::from_const),
    )
}

// ----- acknowledged means taken ---------------------------------------------------------

/// Sends `n` small messages from `a` to B.
async fn send_many(a: &Endpoint, n: u32) -> Vec<Receipt> {
    let mut rs = Vec::new();
    for i in 0..n {
        rs.push(
            a.send(B, Bytes::from(i.to_be_bytes().to_vec()))
                .await
                .unwrap(),
        );
    }
    rs
}

/// Waits until `b`'s core delivered `n` messages (into its buffer).
async fn until_delivered(b: &Endpoint, n: u64) {
    timeout(LIMIT, async {
        while b.stats().await.unwrap().node.delivered < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("messages delivered to the receiving endpoint");
}

/// Outcomes of the receipts once `a` closed: (acknowledged, other).
async fn outcomes(a: &Endpoint, receipts: Vec<Receipt>) -> (usize, Vec<ReceiptError>) {
    let report = timeout(LIMIT, a.close(Duration::from_millis(300)))
        .await
        .expect("close returns");
    let mut ok = 0;
    let mut err = Vec::new();
    for r in receipts {
        match timeout(LIMIT, r).await.expect("receipt resolves") {
            Ok(_) => ok += 1,
            Err(e) => err.push(e),
        }
    }
    assert_eq!(report.unacknowledged.len(), err.len());
    (ok, err)
}

/// The order service: the receiver takes 10 of 200 messages and closes. Exactly the
/// 10 taken are acknowledged; the 190 others are reported undelivered by the receiver and
/// unacknowledged at the sender.
#[tokio::test]
async fn only_messages_the_application_took_are_acknowledged() {
    let (a, mut b) = pair(cfg()).await;
    let receipts = send_many(&a, 200).await;
    until_delivered(&b, 200).await;
    for _ in 0..10 {
        timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    }
    let report = timeout(LIMIT, b.close(Duration::ZERO)).await.unwrap();
    assert_eq!(report.undelivered, 190, "{report:?}");
    assert_eq!(report.stats.node.taken, 10);
    assert!(b.recv().await.is_none(), "handed out after the stop");
    let (ok, err) = outcomes(&a, receipts).await;
    assert_eq!(ok, 10, "acknowledged messages the application never took");
    assert!(err.iter().all(|e| *e == ReceiptError::Unacknowledged));
}

/// The same with `recv_many`: a batch of 10 taken in one call (capped by its limit) is
/// acknowledged, the 190 left are not, and nothing is handed out after the stop.
#[tokio::test]
async fn recv_many_acknowledges_exactly_what_it_took() {
    let (a, mut b) = pair(cfg()).await;
    let receipts = send_many(&a, 200).await;
    until_delivered(&b, 200).await;
    let mut buf = Vec::new();
    let mut took = 0;
    while took < 10 {
        let n = timeout(LIMIT, b.recv_many(&mut buf, 10 - took))
            .await
            .unwrap();
        assert!(n > 0 && took + n <= 10, "took {n} after {took}");
        took += n;
    }
    assert_eq!(buf.len(), 10);
    let report = timeout(LIMIT, b.close(Duration::ZERO)).await.unwrap();
    assert_eq!(report.undelivered, 190, "{report:?}");
    assert_eq!(report.stats.node.taken, 10);
    assert_eq!(
        b.recv_many(&mut buf, 100).await,
        0,
        "handed out after the stop"
    );
    assert_eq!(buf.len(), 10);
    let (ok, err) = outcomes(&a, receipts).await;
    assert_eq!(ok, 10, "acknowledged messages the application never took");
    assert!(err.iter().all(|e| *e == ReceiptError::Unacknowledged));
}

/// A receiver dropped mid-stream (its application gone with messages buffered): none of the
/// messages it never handed out is acknowledged.
#[tokio::test]
async fn a_receiver_dropped_mid_stream_acknowledges_only_what_was_taken() {
    let c = cfg().with_delivery_buffer(1);
    let (a, mut b) = pair(c).await;
    let receipts = send_many(&a, 100).await;
    for _ in 0..5 {
        timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(b);
    let (ok, _) = outcomes(&a, receipts).await;
    assert_eq!(ok, 5);
}

/// `close` returns within its timeout whatever is left: untaken deliveries at the receiver,
/// unacknowledged messages at the sender.
#[tokio::test]
async fn close_never_hangs() {
    let (a, b) = pair(cfg()).await;
    let receipts = send_many(&a, 50).await;
    until_delivered(&b, 50).await;
    let t = Instant::now();
    let rb = timeout(Duration::from_secs(2), b.close(Duration::from_millis(100)))
        .await
        .expect("receiver close hung");
    assert_eq!(rb.undelivered, 50);
    assert!(!rb.is_clean());
    let ra = timeout(Duration::from_secs(2), a.close(Duration::from_millis(100)))
        .await
        .expect("sender close hung");
    assert_eq!(ra.unacknowledged.len(), 50);
    assert!(t.elapsed() < Duration::from_secs(3));
    for r in receipts {
        assert_eq!(r.await, Err(ReceiptError::Unacknowledged));
    }
}

// ----- mismatches are errors, not silence ------------------------------------------------

/// A send to a node id with no known address fails at once, with a typed error, and keeps
/// nothing; once the address is known (added, or learned from the peer's datagrams), sends
/// go through.
#[tokio::test]
async fn a_send_to_an_unknown_peer_fails_at_once() {
    let mut a = Endpoint::bind("127.0.0.1:0", A, test_security(A), cfg())
        .await
        .unwrap();
    let mut b = Endpoint::bind("127.0.0.1:0", B, test_security(B), cfg())
        .await
        .unwrap();
    let nobody = NodeId::from_const(9);
    assert_eq!(
        a.send(nobody, Bytes::from_static(b"x")).await.err(),
        Some(Error::UnknownPeer(nobody))
    );
    assert_eq!(
        a.try_send(B, Bytes::from_static(b"x")).await.err(),
        Some(Error::UnknownPeer(B))
    );
    a.add_peer(B, b.local_addr());
    let r = a.send(B, Bytes::from_static(b"hi")).await.unwrap();
    let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    timeout(LIMIT, r).await.unwrap().unwrap();
    // B never added A: it learned A's address from A's datagrams, and can reply.
    let reply = b.send(m.from, Bytes::from_static(b"back")).await.unwrap();
    timeout(LIMIT, a.recv()).await.unwrap().unwrap();
    timeout(LIMIT, reply).await.unwrap().unwrap();
    let report = a.close(Duration::from_secs(1)).await;
    assert_eq!(report.stats.node.sent, 1, "a refused send was kept");
}

/// Endpoints with different datagram sizes understand each other: the sender with large
/// datagrams packs a burst of 100-byte messages into few datagrams, and sends a payload
/// larger than the receiver's own datagrams.
#[tokio::test]
async fn endpoints_with_different_datagram_sizes_understand_each_other() {
    let a = Endpoint::bind(
        "127.0.0.1:0",
        A,
        test_security(A),
        cfg().with_max_datagram_size(8192),
    )
    .await
    .unwrap();
    let mut b = Endpoint::bind(
        "127.0.0.1:0",
        B,
        test_security(B),
        cfg().with_max_datagram_size(1200),
    )
    .await
    .unwrap();
    a.add_peer(B, b.local_addr());
    let mut receipts = Vec::new();
    for i in 0..100u8 {
        receipts.push(a.send(B, Bytes::from(vec![i; 100])).await.unwrap());
    }
    receipts.push(a.send(B, Bytes::from(vec![7u8; 5000])).await.unwrap());
    for _ in 0..101 {
        timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    }
    for r in receipts {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
    let stats = b.stats().await.unwrap();
    assert_eq!(stats.node.rejects.total(), 0);
}

// ----- deadlines ---------------------------------------------------------------------------

/// An address where nothing listens.
async fn dead_addr() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.local_addr().unwrap()
}

/// A peer that never answers: at the deadline the receipt says not delivered (no copy of
/// the message ever left: no slot was granted), and the endpoint forgets the message.
#[tokio::test]
async fn a_deadline_with_a_silent_peer_resolves_not_delivered() {
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), cfg())
        .await
        .unwrap();
    a.add_peer(B, dead_addr().await);
    let t = Instant::now();
    let r = a
        .send_within(B, Bytes::from_static(b"x"), Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(
        timeout(LIMIT, r).await.unwrap(),
        Err(ReceiptError::NotDelivered)
    );
    assert!(t.elapsed() >= Duration::from_millis(100));
    let report = a.close(Duration::ZERO).await;
    assert!(
        report.unacknowledged.is_empty(),
        "not forgotten: {report:?}"
    );
    assert_eq!(report.stats.node.not_delivered, 1);
}

/// The endpoint's default deadline, and a copy that left: a receiver whose application
/// never takes the message makes it in doubt at the deadline, not acknowledged.
#[tokio::test]
async fn a_default_deadline_after_a_copy_left_resolves_in_doubt() {
    let c = cfg().with_default_deadline(Some(Duration::from_millis(200)));
    let (a, b) = pair(c).await;
    let r = a.send(B, Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(timeout(LIMIT, r).await.unwrap(), Err(ReceiptError::InDoubt));
    let sb = b.stats().await.unwrap();
    assert_eq!(sb.node.delivered, 1, "it did arrive, untaken");
    let report = a.close(Duration::ZERO).await;
    assert!(report.unacknowledged.is_empty());
    assert_eq!(report.stats.node.in_doubt, 1);
}

// ----- peer liveness -------------------------------------------------------------------------

/// A peer whose address answers nothing is reported unreachable (a watch and a query on the
/// handle); nothing is dropped, and once a node listens there the message is delivered and
/// the peer is reachable again.
#[tokio::test]
async fn an_unreachable_peer_is_reported_and_recovers() {
    let mut c = cfg();
    c.protocol.timers.unreachable_after = Duration::from_millis(200);
    c.protocol.timers.max_rto = Duration::from_millis(100);
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c.clone())
        .await
        .unwrap();
    let addr = dead_addr().await;
    a.add_peer(B, addr);
    let mut watch = a.unreachable_peers();
    let r = a.send(B, Bytes::from_static(b"x")).await.unwrap();
    assert!(a.is_reachable(B));
    timeout(LIMIT, watch.wait_for(|s| s.contains(&B)))
        .await
        .unwrap()
        .unwrap();
    assert!(!a.is_reachable(B));
    let mut b = Endpoint::bind(addr, B, test_security(B), c).await.unwrap();
    timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    timeout(LIMIT, r).await.unwrap().unwrap();
    timeout(LIMIT, watch.wait_for(|s| s.is_empty()))
        .await
        .unwrap()
        .unwrap();
    assert!(a.is_reachable(B));
}

// ----- acknowledgement after processing ------------------------------------------------------

/// With `ack_after_processing`, a receipt resolves only when the receiving application calls
/// `Message::ack`; taken-but-unacknowledged messages are bounded by `max_untaken`, and hold
/// back the rest at the sender until acknowledged.
#[tokio::test]
async fn ack_after_processing_resolves_receipts_on_ack_only() {
    let mut c = cfg().with_ack_after_processing(true);
    c.protocol.limits.max_untaken = 4;
    let (a, mut b) = pair(c).await;
    let mut receipts = send_many(&a, 12).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(timeout(LIMIT, b.recv()).await.unwrap().unwrap());
    }
    // Taken, not processed: nothing acknowledged, and nothing more comes in.
    assert!(timeout(Duration::from_millis(200), b.recv()).await.is_err());
    let first = receipts.remove(0);
    let mut first = std::pin::pin!(first);
    assert!(timeout(Duration::from_millis(100), &mut first)
        .await
        .is_err());
    let n = |m: &Message| u32::from_be_bytes(m.payload[..].try_into().unwrap());
    let m0 = held.iter().find(|m| n(m) == 0).unwrap();
    m0.ack();
    m0.ack();
    assert!(timeout(LIMIT, first).await.unwrap().is_ok());
    for m in held.drain(..) {
        m.ack();
    }
    for _ in 4..12 {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        m.ack();
    }
    for r in receipts {
        assert!(timeout(LIMIT, r).await.unwrap().is_ok());
    }
}

/// A node with another id at the peer's address: it counts the datagrams meant for someone
/// else and answers nothing; the sender sees the peer unreachable, and a deadline resolves
/// the receipt (not delivered: no slot was ever granted, so no copy left).
#[tokio::test]
async fn another_node_at_the_address_is_counted_and_the_receipt_resolves() {
    let mut c = cfg();
    c.protocol.timers.unreachable_after = Duration::from_millis(200);
    c.protocol.timers.max_rto = Duration::from_millis(100);
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c.clone())
        .await
        .unwrap();
    let other = Endpoint::bind(
        "127.0.0.1:0",
        NodeId::from_const(3),
        test_security(NodeId::from_const(3)),
        c,
    )
    .await
    .unwrap();
    a.add_peer(B, other.local_addr());
    let mut watch = a.unreachable_peers();
    let r = a
        .send_within(B, Bytes::from_static(b"x"), Duration::from_millis(500))
        .await
        .unwrap();
    timeout(LIMIT, watch.wait_for(|s| s.contains(&B)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        timeout(LIMIT, r).await.unwrap(),
        Err(ReceiptError::NotDelivered)
    );
    let s = other.stats().await.unwrap();
    assert!(s.node.rejects.wrong_destination > 0);
}

/// Path MTU discovery on loopback, with no datagram configuration: the socket forbids
/// fragmentation and loopback's MTU is 65536, so the search reaches the largest UDP payload
/// (with one probe: the socket tells the route's size, tried first) and the tokens of a
/// burst travel in datagrams far above the 1200-byte base.
#[tokio::test]
async fn loopback_reaches_the_largest_datagrams_with_no_configuration() {
    let (a, mut b) = pair(cfg()).await;
    let reader = tokio::spawn(async move {
        for _ in 0..10_000 {
            timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        }
        b
    });
    for burst in 0..10u32 {
        let mut receipts = Vec::new();
        for i in 0..1000u32 {
            let n = burst * 1000 + i;
            receipts.push(
                a.send(B, Bytes::from(n.to_be_bytes().repeat(25)))
                    .await
                    .unwrap(),
            );
        }
        for r in receipts {
            timeout(LIMIT, r).await.unwrap().unwrap();
        }
    }
    let _b = reader.await.unwrap();
    let s = a.stats().await.unwrap().node;
    assert_eq!(s.largest_datagram_out, 65_507, "{:?}", s.mtu);
    assert!(s.mtu.probes_acked >= 1, "{:?}", s.mtu);
    assert!(s.mtu.probes_sent <= 2, "the steps took {:?}", s.mtu);
    assert_eq!(s.mtu.black_hole_fallbacks, 0);
    let average = s.bytes_out / s.datagrams_out;
    assert!(average > 2400, "average datagram {average} bytes");
}

/// A socket on an interface whose MTU is `mtu` bytes, fragmentation forbidden: the kernel
/// refuses larger datagrams with EMSGSIZE.
struct SmallMtu {
    inner: UdpSocket,
    mtu: usize,
}

impl DatagramSocket for SmallMtu {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        if buf.len() > self.mtu {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        self.inner.send_to(buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.inner.recv_from(buf).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Sends refused as too large (EMSGSIZE) are lost datagrams, never errors that stop the
/// driver: the search settles below the interface's MTU and every message gets through.
#[tokio::test]
async fn sends_refused_as_too_large_are_lost_datagrams() {
    let sock = SmallMtu {
        inner: UdpSocket::bind("127.0.0.1:0").await.unwrap(),
        mtu: 1500,
    };
    let a = Endpoint::builder(A)
        .security(test_security(A))
        .config(cfg())
        .with_socket(sock)
        .unwrap();
    let mut b = Endpoint::bind("127.0.0.1:0", B, test_security(B), cfg())
        .await
        .unwrap();
    a.add_peer(B, b.local_addr());
    let reader = tokio::spawn(async move {
        for _ in 0..5000 {
            timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        }
        b
    });
    for burst in 0..10u32 {
        let mut receipts = Vec::new();
        for i in 0..500u32 {
            let n = burst * 500 + i;
            receipts.push(
                a.send(B, Bytes::from(n.to_be_bytes().repeat(25)))
                    .await
                    .unwrap(),
            );
        }
        for r in receipts {
            timeout(LIMIT, r).await.unwrap().unwrap();
        }
    }
    let _b = reader.await.unwrap();
    let s = a.stats().await.unwrap();
    // At least one probe was refused (how many depends on how fast the search climbs
    // against the traffic: 2 in a release build, more in a debug one).
    assert!(s.oversize_drops >= 1, "{s:?}");
    assert_eq!(s.send_errors, 0);
    assert_eq!(s.node.mtu.black_hole_fallbacks, 0);
    assert!(s.node.mtu.probes_acked >= 4, "{:?}", s.node.mtu);
}

// ----- large messages -------------------------------------------------------------------

/// Messages of every size up to the default `max_message_size` (16 MiB) over real loopback
/// UDP with default settings, among small ones: each delivered whole, exactly once, and
/// acknowledged; one byte more is refused with a typed error.
#[tokio::test]
async fn messages_up_to_sixteen_mebibytes_arrive_whole() {
    let (a, mut b) = pair(cfg()).await;
    let max = Config::default().limits.max_message_size;
    let sizes = [max, 1 << 20, 100, 70_000, 5, 3 << 20, 1500];
    let msg = |i: usize, len: usize| {
        let mut v = vec![(i as u8).wrapping_mul(37); len];
        if len >= 4 {
            v[..4].copy_from_slice(&(i as u32).to_be_bytes());
        }
        Bytes::from(v)
    };
    let mut receipts = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        receipts.push(a.send(B, msg(i, len)).await.unwrap());
    }
    let mut got = Vec::new();
    while got.len() < sizes.len() {
        let m = timeout(Duration::from_secs(60), b.recv())
            .await
            .unwrap()
            .unwrap();
        got.push(m.payload);
    }
    for (i, &len) in sizes.iter().enumerate() {
        let want = msg(i, len);
        assert_eq!(
            got.iter().filter(|m| **m == want).count(),
            1,
            "message {i} ({len} B)"
        );
    }
    for r in receipts {
        timeout(Duration::from_secs(60), r).await.unwrap().unwrap();
    }
    let too_big = a.send(B, Bytes::from(vec![0u8; max + 1])).await;
    assert!(
        matches!(too_big, Err(Error::Send(SendError::PayloadTooLarge { .. }))),
        "{too_big:?}"
    );
    let s = a.stats().await.unwrap().node;
    assert!(
        s.largest_datagram_out > 1500,
        "path MTU discovery on loopback: {s:?}"
    );
    let report = a.close(Duration::from_secs(2)).await;
    assert!(report.is_clean(), "{report:?}");
}
