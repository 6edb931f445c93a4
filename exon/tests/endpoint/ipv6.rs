//! IPv6 over real loopback UDP: endpoints on `[::1]` (one-way messages and calls), a
//! dual-stack endpoint on `[::]` serving an IPv4 and an IPv6 peer at once, a peer whose
//! address moves between the families (a NAT rebinding) being followed, and addresses out
//! of a socket's reach refused with a typed error. Each test skips, saying why, where the
//! machine has no IPv6 loopback (or no dual-stack sockets, for those that need them).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use exon::endpoint::{Endpoint, Error, Reach};
use exon::rpc::{Failure, Request, Response};
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::time::timeout;

use super::common::{cfg, security};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const S: NodeId = NodeId::from_const(3);
const LIMIT: Duration = Duration::from_secs(10);
/// Messages each sender sends in a test.
const N: u32 = 50;

/// Whether this machine has an IPv6 loopback; prints why a test skips when not.
fn ipv6_loopback(test: &str) -> bool {
    match std::net::UdpSocket::bind("[::1]:0") {
        Ok(_) => true,
        Err(e) => {
            eprintln!("{test}: skipped, no IPv6 loopback (binding [::1]:0: {e})");
            false
        }
    }
}

async fn start(id: NodeId, addr: &str) -> Endpoint {
    start_sharded(id, addr, 1).await
}

async fn start_sharded(id: NodeId, addr: &str, shards: usize) -> Endpoint {
    let mut cfg = cfg();
    cfg.shards = shards;
    Endpoint::builder(id)
        .security(security(id))
        .config(cfg)
        .bind(addr)
        .await
        .unwrap()
}

/// A dual-stack endpoint on `[::]` with `shards` driver shards, or `None` (with the reason
/// printed) where the machine gives none.
async fn dual_stack(id: NodeId, test: &str, shards: usize) -> Option<Endpoint> {
    if !ipv6_loopback(test) {
        return None;
    }
    let e = start_sharded(id, "[::]:0", shards).await;
    if e.reach() != Reach::DualStack {
        eprintln!("{test}: skipped, the system refused a dual-stack socket");
        return None;
    }
    Some(e)
}

/// `port` on the IPv4 loopback.
fn v4(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `port` on the IPv6 loopback.
fn v6(port: u16) -> SocketAddr {
    SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port))
}

/// `addr` (IPv4) in its IPv4-mapped IPv6 form.
fn mapped(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) => SocketAddr::from((a.ip().to_ipv6_mapped(), a.port())),
        v6 => v6,
    }
}

/// `from` sends `N` numbered messages to `to` (at node `to_id`), each acknowledged; `to`
/// receives each exactly once.
async fn one_way(from: &Endpoint, to: &mut Endpoint, to_id: NodeId) {
    let mut receipts = Vec::new();
    for i in 0..N {
        receipts.push(from.send(to_id, i.to_be_bytes().to_vec()).await.unwrap());
    }
    let mut got = HashSet::new();
    while got.len() < N as usize {
        let m = timeout(LIMIT, to.recv()).await.unwrap().unwrap();
        assert_eq!(m.from, from.id());
        assert!(got.insert(m.payload.to_vec()), "delivered twice: {m:?}");
    }
    for r in receipts {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
}

/// Doubles a big-endian u32.
async fn double(req: Request) -> Result<Response, Failure> {
    let x = u32::from_be_bytes(
        req.body()[..]
            .try_into()
            .map_err(|_| Failure::message("4"))?,
    );
    Ok(Response::new((2 * x).to_be_bytes().to_vec()))
}

#[tokio::test]
async fn endpoints_on_the_ipv6_loopback_exchange_messages_and_calls() {
    if !ipv6_loopback("ipv6 loopback") {
        return;
    }
    let (mut a, mut b) = (start(A, "[::1]:0").await, start(B, "[::1]:0").await);
    assert_eq!(a.local_addr().ip(), v6(0).ip());
    assert_eq!(
        a.reach(),
        Reach::V6Only,
        "one IPv6 address: IPv6 peers only"
    );
    a.add_peer(B, b.local_addr());
    one_way(&a, &mut b, B).await;
    // B learned A's address from A's datagrams, and answers there.
    one_way(&b, &mut a, A).await;
    let server = b.handle();
    tokio::spawn(async move { server.serve(double).await });
    for x in 0..N {
        let r = timeout(LIMIT, a.call(B, x.to_be_bytes().to_vec()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r[..], (2 * x).to_be_bytes());
    }
}

/// One endpoint on `[::]` serves a peer on 127.0.0.1 and one on `::1` at once: every message
/// both ways arrives once and is acknowledged. The IPv4 peer, which the server's application
/// set in its IPv4-mapped form, and whose datagrams come from `::ffff:127.0.0.1`, is at one
/// address throughout (no move, no challenge); the server only learned the IPv6 peer's.
/// Also with two shards (an `SO_REUSEPORT` group on `[::]`, each peer owned by one shard).
#[tokio::test]
async fn a_dual_stack_endpoint_serves_ipv4_and_ipv6_peers_at_once() {
    for shards in [1, 2] {
        if !serve_both_families(shards).await {
            return;
        }
    }
}

/// The test above with `shards` driver shards; false if skipped.
async fn serve_both_families(shards: usize) -> bool {
    let Some(mut s) = dual_stack(S, "dual stack", shards).await else {
        return false;
    };
    assert_eq!(s.shards(), shards);
    let port = s.local_addr().port();
    let (mut a, mut b) = (start(A, "127.0.0.1:0").await, start(B, "[::1]:0").await);
    a.add_peer(S, v4(port));
    b.add_peer(S, v6(port));
    s.add_peer(A, mapped(a.local_addr()));
    let mut receipts = Vec::new();
    for i in 0..N {
        receipts.push(a.send(S, i.to_be_bytes().to_vec()).await.unwrap());
        receipts.push(b.send(S, i.to_be_bytes().to_vec()).await.unwrap());
    }
    let mut got = HashSet::new();
    while got.len() < 2 * N as usize {
        let m = timeout(LIMIT, s.recv()).await.unwrap().unwrap();
        assert!(got.insert((m.from, m.payload.to_vec())), "twice: {m:?}");
    }
    for r in receipts {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
    // And back: the server sends to both families from its one socket.
    tokio::join!(one_way(&s, &mut a, A), one_way(&s, &mut b, B));
    let st = s.stats().await.unwrap();
    assert_eq!(st.address_updates, 1, "only B's address learned: {st:?}");
    assert_eq!(st.path_challenges, 0, "no move to challenge: {st:?}");
    assert_eq!(st.send_errors, 0, "{st:?}");
    true
}

/// A NAT in front of A: A sends to the returned address, and its datagrams leave from the
/// outer socket that `mapping` names, each to its own address of the server (an IPv4 socket
/// to the server's IPv4 address, an IPv6 one to its IPv6 address). What the server sends
/// to an outer socket goes to A only while that socket is the mapping (an old mapping is
/// gone), and is counted in `back[k]`.
async fn nat(
    a: SocketAddr,
    outer: Vec<(UdpSocket, SocketAddr)>,
    mapping: Arc<AtomicUsize>,
) -> (SocketAddr, Arc<Vec<AtomicU64>>) {
    let inner = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let back: Arc<Vec<_>> = Arc::new(outer.iter().map(|_| AtomicU64::new(0)).collect());
    let outer: Vec<_> = outer.into_iter().map(|(s, to)| (Arc::new(s), to)).collect();
    for (k, (sock, _)) in outer.iter().enumerate() {
        let (sock, inner) = (sock.clone(), inner.clone());
        let (mapping, back) = (mapping.clone(), back.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok((n, _)) = sock.recv_from(&mut buf).await {
                if mapping.load(Ordering::Relaxed) == k {
                    back[k].fetch_add(1, Ordering::Relaxed);
                    let _ = inner.send_to(&buf[..n], a).await;
                }
            }
        });
    }
    let addr = inner.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, _)) = inner.recv_from(&mut buf).await {
            let (sock, to) = &outer[mapping.load(Ordering::Relaxed)];
            let _ = sock.send_to(&buf[..n], *to).await;
        }
    });
    (addr, back)
}

/// A peer whose address moves from IPv4 to IPv6 and back to its IPv4 address (its NAT
/// rebinding each time) is followed: the dual-stack server challenges each new address,
/// moves there once it answers, and its messages reach A through the new mapping.
#[tokio::test]
async fn a_peer_moving_between_families_is_followed() {
    let Some(mut s) = dual_stack(S, "family moves", 1).await else {
        return;
    };
    let mut a = start(A, "127.0.0.1:0").await;
    let port = s.local_addr().port();
    let outer = vec![
        (UdpSocket::bind("127.0.0.1:0").await.unwrap(), v4(port)),
        (UdpSocket::bind("[::1]:0").await.unwrap(), v6(port)),
    ];
    let mapping = Arc::new(AtomicUsize::new(0));
    let (relay, back) = nat(a.local_addr(), outer, mapping.clone()).await;
    a.add_peer(S, relay);
    for (phase, k) in [0, 1, 0].into_iter().enumerate() {
        mapping.store(k, Ordering::Relaxed);
        let before: Vec<u64> = back.iter().map(|n| n.load(Ordering::Relaxed)).collect();
        one_way(&a, &mut s, S).await;
        one_way(&s, &mut a, A).await;
        let st = s.stats().await.unwrap();
        // Learned, then one move per rebinding.
        assert_eq!(
            st.address_updates,
            phase as u64 + 1,
            "phase {phase}: {st:?}"
        );
        for (j, n) in back.iter().enumerate() {
            let grew = n.load(Ordering::Relaxed) > before[j];
            assert_eq!(
                grew,
                j == k,
                "phase {phase}: the server sends to mapping {k} alone"
            );
        }
    }
}

/// An address of a family the socket cannot send to is refused with a typed error (and
/// never reaches the driver: a send to that peer finds no address); an IPv4-mapped address
/// is an IPv4 one.
#[tokio::test]
async fn addresses_out_of_a_sockets_reach_are_refused() {
    let a = start(A, "127.0.0.1:0").await;
    assert_eq!(a.reach(), Reach::V4);
    let far = v6(4000);
    assert_eq!(
        a.try_add_peer(B, far),
        Err(Error::OutOfReach {
            addr: far,
            reach: Reach::V4
        })
    );
    a.add_peer(B, far);
    assert_eq!(a.send(B, "x").await.err(), Some(Error::UnknownPeer(B)));
    let mapped = mapped(v4(4000));
    assert_eq!(a.try_add_peer(S, mapped), Ok(()));
    if !ipv6_loopback("out of reach, IPv6 side") {
        return;
    }
    let b = start(B, "[::1]:0").await;
    assert_eq!(b.reach(), Reach::V6Only);
    for addr in [v4(4000), mapped] {
        let refused = b.try_add_peer(A, addr);
        assert!(
            matches!(refused, Err(Error::OutOfReach { .. })),
            "{refused:?}"
        );
    }
    let e = b.try_add_peer(A, v4(4000)).unwrap_err().to_string();
    assert_eq!(
        e,
        "127.0.0.1:4000 is out of reach of this endpoint's IPv6-only socket"
    );
}
