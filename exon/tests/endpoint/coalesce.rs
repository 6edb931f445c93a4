//! Consecutive `Handle::send`s to one peer, taken by the driver in one turn, are handed to
//! the core together (`Node::send_many`): every message still delivered once with its own
//! verdict (acknowledged, or given up at a deadline already past), the destination's queue
//! filling in the middle of a run included, and the core counts the messages it took
//! together (`Stats::sent_together`).

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::{Endpoint, EndpointConfig, EndpointStats, Receipt, ReceiptError};
use exon::NodeId;
use tokio::time::timeout;

use crate::common::security;

const CLIENT: NodeId = NodeId::from_const(1);
const A: NodeId = NodeId::from_const(2);
const B: NodeId = NodeId::from_const(3);
const LIMIT: Duration = Duration::from_secs(30);

/// A configuration whose destination queues hold `queue` messages.
fn cfg(queue: usize) -> EndpointConfig {
    let mut cfg = EndpointConfig::default().with_linger(Duration::from_millis(100));
    cfg.protocol.limits.max_queued_per_peer = queue;
    cfg
}

async fn bind(id: NodeId, cfg: EndpointConfig) -> Endpoint {
    Endpoint::bind("127.0.0.1:0", id, security(id), cfg)
        .await
        .unwrap()
}

/// A payload carrying its sequence number.
fn payload(seq: u32) -> Bytes {
    let mut v = vec![0x42; 100];
    v[..4].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

/// Receives `n` messages at `ep`, each once; returns their sequence numbers.
async fn receive(ep: &mut Endpoint, n: usize) -> HashSet<u32> {
    let mut seen = HashSet::new();
    while seen.len() < n {
        let m = timeout(LIMIT, ep.recv()).await.unwrap().unwrap();
        let seq = u32::from_be_bytes(m.payload[..4].try_into().unwrap());
        assert!(seen.insert(seq), "message {seq} delivered twice");
    }
    seen
}

/// Asserts that the core took some of the messages together, in fewer calls than messages.
fn assert_coalesced(s: &EndpointStats, sent: u64) {
    assert_eq!(s.node.sent, sent);
    assert!(
        s.node.sent_together > 0,
        "no send was handed to the core together with another: {:?}",
        s.node
    );
}

/// Four tasks send 500 messages each with `Handle::send` to one peer whose queue holds 50:
/// runs are taken together until the queue fills, the rest wait for room, and every
/// message is delivered once and acknowledged.
#[tokio::test]
async fn concurrent_sends_beyond_the_queue_are_acknowledged_once() {
    let mut server = bind(A, cfg(50)).await;
    let ep = bind(CLIENT, cfg(50)).await;
    ep.add_peer(A, server.local_addr());
    let senders: Vec<_> = (0..4u32)
        .map(|task| {
            let h = ep.handle();
            tokio::spawn(async move {
                let mut receipts = Vec::new();
                for seq in task * 500..(task + 1) * 500 {
                    receipts.push(h.send(A, payload(seq)).await.unwrap());
                }
                receipts
            })
        })
        .collect();
    assert_eq!(receive(&mut server, 2000).await.len(), 2000);
    let mut ids = HashSet::new();
    for s in senders {
        for r in timeout(LIMIT, s).await.unwrap().unwrap() {
            let id = timeout(LIMIT, r).await.unwrap().unwrap();
            assert!(ids.insert(id), "receipt id {id:?} twice");
        }
    }
    assert_coalesced(&ep.stats().await.unwrap(), 2000);
}

/// Sends to two peers in runs of unequal length, one of them with a deadline already past
/// in the middle of a run: each run goes to its own peer, the late one is given up
/// (certainly not delivered, never sent), every other is delivered once and acknowledged.
#[tokio::test]
async fn interleaved_sends_to_two_peers_keep_their_verdicts() {
    let mut a = bind(A, cfg(1000)).await;
    let mut b = bind(B, cfg(1000)).await;
    let ep = bind(CLIENT, cfg(1000)).await;
    ep.add_peer(A, a.local_addr());
    ep.add_peer(B, b.local_addr());
    let (h, late) = (ep.handle(), 7);
    let mut receipts: Vec<(NodeId, u32, Receipt)> = Vec::new();
    for seq in 0..200u32 {
        let to = if seq % 5 < 3 { A } else { B };
        let r = if seq == late {
            h.send_within(to, payload(seq), Duration::ZERO).await
        } else {
            h.send(to, payload(seq)).await
        };
        receipts.push((to, seq, r.unwrap()));
    }
    let expected = |peer: NodeId| -> HashSet<u32> {
        let to_peer = receipts.iter().filter(|(to, _, _)| *to == peer);
        to_peer.map(|(_, s, _)| *s).filter(|s| *s != late).collect()
    };
    let (for_a, for_b) = (expected(A), expected(B));
    assert_eq!(receive(&mut a, for_a.len()).await, for_a);
    assert_eq!(receive(&mut b, for_b.len()).await, for_b);
    for (_, seq, r) in receipts {
        let verdict = timeout(LIMIT, r).await.unwrap();
        if seq == late {
            assert_eq!(verdict, Err(ReceiptError::NotDelivered));
        } else {
            assert!(verdict.is_ok(), "message {seq}: {verdict:?}");
        }
    }
    assert!(timeout(Duration::from_millis(200), a.recv()).await.is_err());
    assert_coalesced(&ep.stats().await.unwrap(), 199);
}

/// `N` sends made at once with `Handle::send` reach the core in far fewer calls than `N`
/// (`Stats::sent - Stats::sent_together` counts the calls that queued messages).
#[tokio::test]
async fn quick_sends_take_fewer_core_calls_than_messages() {
    const N: u32 = 200;
    let mut server = bind(A, cfg(1000)).await;
    let ep = bind(CLIENT, cfg(1000)).await;
    ep.add_peer(A, server.local_addr());
    let h = ep.handle();
    let mut receipts = Vec::new();
    for seq in 0..N {
        receipts.push(h.send(A, payload(seq)).await.unwrap());
    }
    assert_eq!(receive(&mut server, N as usize).await.len(), N as usize);
    for r in receipts {
        assert!(timeout(LIMIT, r).await.unwrap().is_ok());
    }
    let s = ep.stats().await.unwrap();
    assert_coalesced(&s, u64::from(N));
    let calls = s.node.sent - s.node.sent_together;
    assert!(calls < u64::from(N) / 2, "{calls} core calls for {N} sends");
}
