//! Batched socket I/O: the GSO/GRO path of `BatchSocket`, its one-datagram-per-call
//! fallback, and the default batch methods of `DatagramSocket` (a plain tokio socket); each
//! must keep exactly-once, and the counters show whether datagrams went in batches.

use std::collections::HashSet;
use std::io::IoSliceMut;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::{
    BatchSocket, DatagramSocket, Endpoint, EndpointConfig, EndpointStats, Error, ReceiptError,
    RecvMeta,
};
use exon::proto::SendError;
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::time::timeout;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(20);
/// Messages per run: enough for the window to fill and datagrams to queue up.
const N: u32 = 5000;

fn cfg() -> EndpointConfig {
    // 1472-byte datagrams and ~1 KB payloads: one message per datagram, so batches come
    // from the socket layer, not from packing.
    EndpointConfig::default().with_max_datagram_size(1472)
}

fn payload(i: u32) -> Bytes {
    let mut v = vec![0x5a; 1000];
    v[..4].copy_from_slice(&i.to_be_bytes());
    Bytes::from(v)
}

fn unspecified() -> RecvMeta {
    RecvMeta::single(SocketAddr::from(([0, 0, 0, 0], 0)), 0)
}

/// Sends `N` messages from `a` to `b`; checks each arrives once and every receipt resolves.
/// Returns both sides' counters.
async fn run(a: Endpoint, mut b: Endpoint) -> (EndpointStats, EndpointStats) {
    a.add_peer(B, b.local_addr());
    let h = a.handle();
    let sender = tokio::spawn(async move {
        let mut receipts = Vec::new();
        for i in 0..N {
            receipts.push(h.send(B, payload(i)).await.unwrap());
        }
        receipts
    });
    let mut seen = HashSet::new();
    while seen.len() < N as usize {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        let i = u32::from_be_bytes(m.payload[..4].try_into().unwrap());
        assert!(seen.insert(i), "message {i} delivered twice");
    }
    for r in sender.await.unwrap() {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
    let report = timeout(LIMIT, a.close(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    (report.stats, b.stats().await.unwrap())
}

#[tokio::test]
async fn gso_and_gro_path_sends_and_receives_in_batches() {
    let a_sock = BatchSocket::bind("127.0.0.1:0").await.unwrap();
    let gso = a_sock.max_send_segments() > 1;
    let a = Endpoint::builder(A)
        .security(test_security(A))
        .config(cfg())
        .with_socket(a_sock)
        .unwrap();
    let b = Endpoint::bind("127.0.0.1:0", B, test_security(B), cfg())
        .await
        .unwrap();
    let (sa, sb) = run(a, b).await;
    let out = sa.node.datagrams_out;
    assert!(sa.send_calls <= out, "{sa:?}");
    if gso {
        assert!(
            sa.send_calls * 2 < out,
            "GSO: several datagrams per call: {sa:?}"
        );
    }
    assert!(
        sb.recv_calls < sb.node.datagrams_in,
        "batched receives: {sb:?}"
    );
}

#[tokio::test]
async fn without_segmentation_each_datagram_is_one_call() {
    let a_sock = BatchSocket::bind("127.0.0.1:0")
        .await
        .unwrap()
        .with_max_send_segments(1);
    assert_eq!(a_sock.max_send_segments(), 1);
    let a = Endpoint::builder(A)
        .security(test_security(A))
        .config(cfg())
        .with_socket(a_sock)
        .unwrap();
    let b = Endpoint::bind("127.0.0.1:0", B, test_security(B), cfg())
        .await
        .unwrap();
    let (sa, _) = run(a, b).await;
    assert_eq!(sa.send_calls, sa.node.datagrams_out, "{sa:?}");
}

#[tokio::test]
async fn plain_socket_uses_the_one_at_a_time_defaults() {
    let a_sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let b_sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    assert_eq!(
        (a_sock.max_send_segments(), a_sock.max_recv_segments()),
        (1, 1)
    );
    let a = Endpoint::builder(A)
        .security(test_security(A))
        .config(cfg())
        .with_socket(a_sock)
        .unwrap();
    let b = Endpoint::builder(B)
        .security(test_security(B))
        .config(cfg())
        .with_socket(b_sock)
        .unwrap();
    let (sa, sb) = run(a, b).await;
    assert_eq!(sa.send_calls, sa.node.datagrams_out, "{sa:?}");
    assert!(sb.recv_calls <= sb.node.datagrams_in, "{sb:?}");
}

#[tokio::test]
async fn segmented_send_arrives_as_separate_datagrams() {
    let s = BatchSocket::bind("127.0.0.1:0").await.unwrap();
    let r = BatchSocket::bind("127.0.0.1:0").await.unwrap();
    let to = r.local_addr().unwrap();
    let mut buf: Vec<u8> = (0..3).flat_map(|i| vec![i as u8; 100]).collect();
    buf.extend_from_slice(&[9; 50]);
    s.send_segments(&buf, 100, to).await.unwrap();
    let mut got = Vec::new();
    let mut slab = vec![0u8; 4 * 65536];
    while got.iter().map(Vec::len).sum::<usize>() < buf.len() {
        let mut chunks = slab.chunks_mut(65536);
        let mut bufs: Vec<IoSliceMut<'_>> = (0..4)
            .map(|_| IoSliceMut::new(chunks.next().unwrap()))
            .collect();
        let mut meta = [unspecified(); 4];
        let n = timeout(LIMIT, r.recv_batch(&mut bufs, &mut meta))
            .await
            .unwrap()
            .unwrap();
        for (b, m) in bufs.iter().zip(&meta[..n]) {
            assert_eq!(m.addr, s.local_addr().unwrap());
            got.extend(b[..m.len].chunks(m.stride).map(<[u8]>::to_vec));
        }
    }
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [100, 100, 100, 50]);
    assert_eq!(got.concat(), buf);
}

#[tokio::test]
async fn default_recv_batch_takes_what_is_waiting() {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let r = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = r.local_addr().unwrap();
    // The default send_segments: one send_to per datagram.
    s.send_segments(&[1, 1, 2, 2, 3], 2, to).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut slab = [0u8; 4 * 16];
    let mut bufs: Vec<IoSliceMut<'_>> = slab.chunks_mut(16).map(IoSliceMut::new).collect();
    let mut meta = [unspecified(); 4];
    let n = r.recv_batch(&mut bufs, &mut meta).await.unwrap();
    let lens: Vec<usize> = meta[..n].iter().map(|m| m.len).collect();
    assert_eq!(lens, [2, 2, 1], "all three waiting datagrams in one call");
}

#[tokio::test]
async fn refusal_found_after_send_returned_resolves_the_receipt() {
    let mut c = cfg();
    c.protocol.limits.max_sender_records = 1;
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c)
        .await
        .unwrap();
    let gone: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let c_id = NodeId::from_const(3);
    a.add_peer(B, gone);
    a.add_peer(c_id, gone);
    let _first = a.send(B, Bytes::from_static(b"x")).await.unwrap();
    // The second destination needs a second sender record: refused by the core, after
    // `send` already returned.
    let r = a.send(c_id, Bytes::from_static(b"y")).await.unwrap();
    assert_eq!(
        timeout(LIMIT, r).await.unwrap(),
        Err(ReceiptError::Refused(Error::Send(SendError::TooManyPeers)))
    );
    // try_send says it at once.
    assert!(matches!(
        a.try_send(c_id, Bytes::from_static(b"z")).await,
        Err(Error::Send(SendError::TooManyPeers))
    ));
    a.close(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn close_ends_sends_waiting_for_room_or_credits() {
    let mut c = cfg().with_send_buffer(1);
    c.protocol.limits.max_queued_per_peer = 2;
    let a = Endpoint::bind("127.0.0.1:0", A, test_security(A), c)
        .await
        .unwrap();
    // Nobody answers: the queue fills, then sends wait.
    a.add_peer(B, "127.0.0.1:9".parse().unwrap());
    let h = a.handle();
    let sender = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        for i in 0..20 {
            outcomes.push(h.send(B, payload(i)).await.map(|r| r.id()));
        }
        outcomes
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!sender.is_finished(), "sends wait while the queue is full");
    let report = timeout(LIMIT, a.close(Duration::from_millis(100)))
        .await
        .expect("close never hangs");
    let outcomes = timeout(LIMIT, sender).await.unwrap().unwrap();
    let accepted = outcomes.iter().filter(|o| o.is_ok()).count();
    assert!(accepted >= 2, "{outcomes:?}");
    assert!(outcomes.contains(&Err(Error::Closed)), "{outcomes:?}");
    // Every accepted send is either reported unacknowledged or was refused on its receipt.
    assert!(report.unacknowledged.len() <= accepted, "{report:?}");
}

/// Sealed datagrams with keys derived from the node ids, ids 0-63 and 1000-1063 known.
fn test_security(id: exon::NodeId) -> exon::proto::Security {
    exon::proto::crypto::insecure_test_security(
        id,
        (0..64).chain(1000..1064).map(exon::NodeId::from_const),
    )
}

/// The batch socket forbids IP fragmentation (`IP_MTU_DISCOVER` = `IP_PMTUDISC_PROBE`, set
/// by quinn-udp's socket state): a datagram too large for the path is refused with EMSGSIZE
/// (a lost datagram to the driver) instead of leaving in fragments, which path MTU discovery
/// relies on.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_batch_socket_forbids_fragmentation() {
    use std::os::fd::AsRawFd;
    let sock = exon::endpoint::BatchSocket::bind("127.0.0.1:0")
        .await
        .unwrap();
    let fd = sock.get_ref().as_raw_fd();
    let mut value: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket, and a buffer of the option's size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0);
    assert_eq!(value, libc::IP_PMTUDISC_PROBE);
}
