//! Sharded endpoints (`EndpointConfig::shards`) and batched sends (`Handle::send_batch`) on
//! loopback: many peers sending concurrently to (and being answered by) one endpoint of
//! several driver shards, every message delivered exactly once and every receipt true, with
//! and without injected faults; the counters and the close report are the shards' sums.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::{
    BatchSocket, Endpoint, EndpointConfig, Error, Faults, LossySocket, ReceiptError,
};
use exon::proto::Security;
use exon::NodeId;
use tokio::time::timeout;

const SERVER: NodeId = NodeId::from_const(1);
const LIMIT: Duration = Duration::from_secs(30);

fn security(id: NodeId) -> Security {
    exon::proto::crypto::insecure_test_security(id, (1..200).map(NodeId::from_const))
}

/// A payload naming its sender and its sequence number.
fn payload(from: NodeId, seq: u32) -> Bytes {
    let mut v = vec![0x33; 200];
    v[..8].copy_from_slice(&from.get().to_be_bytes());
    v[8..12].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

fn parse(p: &[u8]) -> (u64, u32) {
    (
        u64::from_be_bytes(p[..8].try_into().unwrap()),
        u32::from_be_bytes(p[8..12].try_into().unwrap()),
    )
}

/// `peers` clients send `per_peer` messages each to a server of `shards` shards (half with
/// `send`, half with `send_batch`), concurrently; the server answers each message once. Every
/// message and every answer must arrive exactly once, and every receipt resolve `Ok`.
/// `faults` are injected on the server's sends.
async fn many_peers(shards: usize, peers: u64, per_peer: u32, faults: Option<Faults>) {
    let cfg = EndpointConfig::default().with_linger(Duration::from_millis(100));
    let server = if let Some(f) = faults {
        let socks = BatchSocket::bind_reuseport("127.0.0.1:0", shards)
            .await
            .unwrap()
            .into_iter()
            .map(|s| LossySocket::new(s, f))
            .collect();
        Endpoint::builder(SERVER)
            .security(security(SERVER))
            .config(cfg.clone())
            .with_sockets(socks)
            .unwrap()
    } else {
        Endpoint::bind(
            "127.0.0.1:0",
            SERVER,
            security(SERVER),
            cfg.clone().with_shards(shards),
        )
        .await
        .unwrap()
    };
    assert_eq!(server.shards(), shards);
    let server_addr = server.local_addr();
    let total = peers * per_peer as u64;

    // The server: takes every message on one task per shard, answers it.
    let (handle, deliveries) = server.into_deliveries();
    assert_eq!(deliveries.len(), shards);
    let mut shard_tasks = Vec::new();
    for mut d in deliveries {
        let h = handle.clone();
        shard_tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut receipts = Vec::new();
            while let Some(m) = d.recv().await {
                got.push(parse(&m.payload));
                receipts.push(h.send(m.from, m.payload).await.unwrap());
            }
            (got, receipts)
        }));
    }

    // The clients: each on its own task, sending and checking its answers.
    let mut clients = Vec::new();
    for p in 0..peers {
        let id = NodeId::from_const(10 + p);
        let mut ep = Endpoint::bind("127.0.0.1:0", id, security(id), cfg.clone())
            .await
            .unwrap();
        ep.add_peer(SERVER, server_addr);
        clients.push(tokio::spawn(async move {
            let half = per_peer / 2;
            let mut receipts = Vec::new();
            for seq in 0..half {
                receipts.push(ep.send(SERVER, payload(id, seq)).await.unwrap());
            }
            let batch = ep
                .send_batch(SERVER, (half..per_peer).map(|s| payload(id, s)))
                .await
                .unwrap();
            assert_eq!(batch.len(), (per_peer - half) as usize);
            let mut answers = HashSet::new();
            while answers.len() < per_peer as usize {
                let m = timeout(LIMIT, ep.recv()).await.unwrap().unwrap();
                assert_eq!(m.from, SERVER);
                let (from, seq) = parse(&m.payload);
                assert_eq!(from, id.get(), "an answer meant for another peer");
                assert!(answers.insert(seq), "answer {seq} delivered twice");
            }
            for r in receipts {
                timeout(LIMIT, r).await.unwrap().unwrap();
            }
            let verdicts = timeout(LIMIT, batch).await.unwrap();
            assert!(verdicts.all_acknowledged(), "{verdicts:?}");
            let report = timeout(LIMIT, ep.close(Duration::from_secs(10)))
                .await
                .unwrap();
            assert!(report.is_clean(), "{report:?}");
        }));
    }
    for c in clients {
        timeout(LIMIT * 2, c).await.unwrap().unwrap();
    }

    // Every message once at the server, each peer's messages on one shard only.
    // The clients' last acknowledgements may still be on their way: wait for them.
    let stats = timeout(LIMIT, async {
        loop {
            let s = handle.stats().await.unwrap();
            if s.node.acknowledged >= total {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every answer acknowledged");
    assert_eq!(stats.shards, shards);
    assert_eq!(stats.node.delivered, total);
    assert_eq!(stats.node.acknowledged, total);
    let report = timeout(LIMIT, handle.close(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.stats.shards, shards);
    let mut seen = HashSet::new();
    let mut shard_of_peer: HashMap<u64, usize> = HashMap::new();
    for (i, t) in shard_tasks.into_iter().enumerate() {
        let (got, receipts) = timeout(LIMIT, t).await.unwrap().unwrap();
        for r in receipts {
            assert!(timeout(LIMIT, r).await.unwrap().is_ok());
        }
        for (from, seq) in got {
            assert!(seen.insert((from, seq)), "{from}/{seq} delivered twice");
            assert_eq!(
                *shard_of_peer.entry(from).or_insert(i),
                i,
                "peer on two shards"
            );
        }
    }
    assert_eq!(seen.len() as u64, total);
    if shards > 1 {
        assert!(
            shard_of_peer.values().collect::<HashSet<_>>().len() > 1,
            "peers spread over the shards"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_shards_many_peers_exactly_once() {
    many_peers(4, 12, 300, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_endpoint_with_faults_exactly_once() {
    let mut f = Faults::default();
    f.loss = 0.05;
    f.duplicate = 0.02;
    f.reorder = 0.02;
    many_peers(3, 8, 200, Some(f)).await;
}

#[tokio::test]
async fn one_shard_is_the_plain_endpoint() {
    many_peers(1, 4, 200, None).await;
}

/// 16 clients send 20 messages each to a server of two shards; every message is delivered
/// exactly once and acknowledged. Returns the server's counters.
async fn sixteen_clients_to(server: Endpoint) -> exon::endpoint::EndpointStats {
    let mut server = server;
    let cfg = EndpointConfig::default().with_linger(Duration::from_millis(100));
    let mut clients = Vec::new();
    for p in 0..16 {
        let id = NodeId::from_const(50 + p);
        let ep = Endpoint::bind("127.0.0.1:0", id, security(id), cfg.clone())
            .await
            .unwrap();
        ep.add_peer(SERVER, server.local_addr());
        clients.push((id, ep));
    }
    let mut batches = Vec::new();
    for (id, ep) in &clients {
        batches.push(
            ep.send_batch(SERVER, (0..20).map(|s| payload(*id, s)))
                .await
                .unwrap(),
        );
    }
    let mut seen = HashSet::new();
    while seen.len() < 16 * 20 {
        let m = timeout(LIMIT, server.recv()).await.unwrap().unwrap();
        assert!(seen.insert(parse(&m.payload)), "delivered twice");
    }
    for b in batches {
        assert!(timeout(LIMIT, b).await.unwrap().all_acknowledged());
    }
    let stats = server.stats().await.unwrap();
    assert_eq!(stats.forward_drops, 0);
    assert_eq!(stats.node.delivered, 16 * 20);
    stats
}

/// A batch larger than the destination's queue: the core takes what fits in one call
/// (`Node::send_many`), the rest waits in the driver for room, and every message is
/// delivered once and acknowledged, with a deadline that does not pass.
#[tokio::test]
async fn a_batch_larger_than_the_queue_is_sent_whole_and_once() {
    let mut cfg = EndpointConfig::default().with_linger(Duration::from_millis(100));
    cfg.protocol.limits.max_queued_per_peer = 100;
    let mut server = Endpoint::bind("127.0.0.1:0", SERVER, security(SERVER), cfg.clone())
        .await
        .unwrap();
    let id = NodeId::from_const(7);
    let ep = Endpoint::bind("127.0.0.1:0", id, security(id), cfg)
        .await
        .unwrap();
    ep.add_peer(SERVER, server.local_addr());
    // The sends wait for room while the queue is full: the server reads meanwhile.
    let h = ep.handle();
    let sends = tokio::spawn(async move {
        let mut batches = Vec::new();
        for round in 0..3u32 {
            let range = round * 1000..(round + 1) * 1000;
            batches.push(
                h.send_batch(SERVER, range.map(|s| payload(id, s)))
                    .await
                    .unwrap(),
            );
        }
        batches
    });
    let mut seen = HashSet::new();
    while seen.len() < 3000 {
        let m = timeout(LIMIT, server.recv()).await.unwrap().unwrap();
        assert!(seen.insert(parse(&m.payload)), "delivered twice");
    }
    for b in timeout(LIMIT, sends).await.unwrap().unwrap() {
        assert!(timeout(LIMIT, b).await.unwrap().all_acknowledged());
    }
    let s = ep.stats().await.unwrap();
    assert_eq!(s.node.sent, 3000);
}

fn server_builder() -> exon::endpoint::Builder {
    Endpoint::builder(SERVER)
        .security(security(SERVER))
        .config(EndpointConfig::default().with_linger(Duration::from_millis(100)))
}

/// Without the kernel's steering program, datagrams the kernel hands to a shard that does
/// not own their source are passed to the owner: with many peers on a few sockets, some
/// must be (the kernel's hash and the owners' are unrelated), and none is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_reach_the_owning_shard() {
    let socks = BatchSocket::bind_reuseport_unsteered("127.0.0.1:0", 2)
        .await
        .unwrap();
    let stats = sixteen_clients_to(server_builder().with_sockets(socks).unwrap()).await;
    assert!(
        stats.forwarded > 0,
        "no datagram needed its owner: {stats:?}"
    );
}

/// With the steering program (what `Endpoint::bind` sets up on Linux) the kernel hands
/// every datagram to the socket of the shard that owns its source: none is passed on.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_steers_datagrams_to_their_owner() {
    let socks = BatchSocket::bind_reuseport_unsteered("127.0.0.1:0", 2)
        .await
        .unwrap();
    if let Err(e) = BatchSocket::steer_by_node_id(&socks) {
        // A kernel without SO_ATTACH_REUSEPORT_CBPF (before 4.5) or a sandbox refusing it:
        // the shards pass datagrams on instead (`datagrams_reach_the_owning_shard`).
        eprintln!("skipped: the kernel refuses the steering program ({e})");
        return;
    }
    let stats = sixteen_clients_to(server_builder().with_sockets(socks).unwrap()).await;
    assert_eq!(stats.forwarded, 0, "{stats:?}");
    // Through `Endpoint::bind` too.
    let cfg = EndpointConfig::default()
        .with_linger(Duration::from_millis(100))
        .with_shards(3);
    let server = Endpoint::bind("127.0.0.1:0", SERVER, security(SERVER), cfg)
        .await
        .unwrap();
    assert_eq!(sixteen_clients_to(server).await.forwarded, 0);
}

/// `recv_many` on a sharded endpoint and on one shard's stream: every message once, no
/// call above its limit, every receipt acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_many_takes_every_message_once() {
    let cfg = EndpointConfig::default()
        .with_linger(Duration::from_millis(100))
        .with_shards(3);
    let mut server = Endpoint::bind("127.0.0.1:0", SERVER, security(SERVER), cfg.clone())
        .await
        .unwrap();
    let mut batches = Vec::new();
    let mut clients = Vec::new();
    for p in 0..6 {
        let id = NodeId::from_const(70 + p);
        let ep = Endpoint::bind("127.0.0.1:0", id, security(id), cfg.clone().with_shards(1))
            .await
            .unwrap();
        ep.add_peer(SERVER, server.local_addr());
        batches.push(
            ep.send_batch(SERVER, (0..300).map(|s| payload(id, s)))
                .await
                .unwrap(),
        );
        clients.push(ep);
    }
    let mut seen = HashSet::new();
    let mut buf = Vec::new();
    while seen.len() < 6 * 300 {
        buf.clear();
        let n = timeout(LIMIT, server.recv_many(&mut buf, 64))
            .await
            .unwrap();
        assert!((1..=64).contains(&n) && n == buf.len(), "{n}");
        for m in &buf {
            assert!(seen.insert(parse(&m.payload)), "delivered twice");
        }
    }
    for b in batches {
        assert!(timeout(LIMIT, b).await.unwrap().all_acknowledged());
    }
    let (_, mut streams) = server.into_deliveries();
    assert_eq!(streams[0].recv_many(&mut buf, 0).await, 0);
}

#[tokio::test]
async fn a_batch_is_refused_whole_up_front() {
    let cfg = EndpointConfig::default().with_linger(Duration::from_millis(50));
    let a = Endpoint::bind(
        "127.0.0.1:0",
        NodeId::from_const(2),
        security(NodeId::from_const(2)),
        cfg,
    )
    .await
    .unwrap();
    let b = NodeId::from_const(3);
    // Unknown destination: nothing sent.
    let e = a
        .send_batch(b, [Bytes::from_static(b"x")])
        .await
        .unwrap_err();
    assert_eq!(e, Error::UnknownPeer(b));
    a.add_peer(b, "127.0.0.1:9".parse().unwrap());
    // One payload too large: the whole batch is refused.
    let big = Bytes::from(vec![
        0;
        exon::proto::Config::default().limits.max_message_size
            + 1
    ]);
    let e = a
        .send_batch(b, [Bytes::from_static(b"ok"), big])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Send(_)), "{e:?}");
    // Accepted, then the endpoint closes before any acknowledgement: every message of the
    // batch resolves, as unacknowledged (never as acknowledged).
    let r = a
        .send_batch(b, (0..5).map(|i| Bytes::from(vec![i; 10])))
        .await
        .unwrap();
    assert_eq!(
        r.id(1).unwrap().0,
        r.id(0).unwrap().0 + 1,
        "consecutive ids"
    );
    let report = a.close(Duration::from_millis(200)).await;
    assert_eq!(report.unacknowledged.len(), 5);
    let v = timeout(LIMIT, r).await.unwrap();
    assert_eq!(v.len(), 5);
    assert!(
        v.iter().all(|x| x == Err(ReceiptError::Unacknowledged)),
        "{v:?}"
    );
}

/// A server of four shards answers calls from many callers: each request runs once, on the
/// shard that owns its caller, and its reply (sent in batches that span shards) reaches it.
#[tokio::test]
async fn a_sharded_server_answers_every_caller_once() {
    let cfg = EndpointConfig::default().with_linger(Duration::from_millis(100));
    let server = Endpoint::bind(
        "127.0.0.1:0",
        SERVER,
        security(SERVER),
        cfg.clone().with_shards(4),
    )
    .await
    .unwrap();
    assert_eq!(server.shards(), 4);
    let runs = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
    let (h, r2) = (server.handle(), runs.clone());
    tokio::spawn(async move {
        h.serve(move |req: exon::rpc::Request| {
            let runs = r2.clone();
            async move {
                let (from, seq) = parse(req.body());
                assert_eq!(from, req.from().get());
                assert!(runs.lock().unwrap().insert((from, seq)), "ran twice");
                Ok::<_, exon::rpc::Failure>(exon::rpc::Response::new(req.into_body()))
            }
        })
        .await
    });
    let mut tasks = Vec::new();
    for p in 2..18u64 {
        let id = NodeId::new(p).unwrap();
        let client = Endpoint::bind("127.0.0.1:0", id, security(id), cfg.clone())
            .await
            .unwrap();
        client.add_peer(SERVER, server.local_addr());
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            for seq in 0..40 {
                let h = client.handle();
                calls.push(tokio::spawn(async move {
                    let r = h.call(SERVER, payload(id, seq)).await.unwrap();
                    assert_eq!(r, payload(id, seq));
                }));
            }
            for c in calls {
                c.await.unwrap();
            }
        }));
    }
    for t in tasks {
        timeout(LIMIT, t).await.unwrap().unwrap();
    }
    assert_eq!(runs.lock().unwrap().len(), 16 * 40);
}
