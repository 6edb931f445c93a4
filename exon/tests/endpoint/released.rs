//! Acknowledged payloads are freed (`exon/src/endpoint/driver/graveyard.rs`): by later
//! sends, on their threads, or by the driver within a few milliseconds when no send comes.
//! (That only acknowledged messages' payloads are handed back is the core's test,
//! `exon/tests/core/released.rs`.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::Endpoint;
use exon::NodeId;
use tokio::time::{sleep, timeout, Instant};

use crate::common::{cfg, security};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

/// A payload that counts its release.
struct Counted {
    bytes: Vec<u8>,
    dropped: Arc<AtomicUsize>,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn counted(i: u32, len: usize, dropped: &Arc<AtomicUsize>) -> Bytes {
    let mut bytes = i.to_be_bytes().to_vec();
    bytes.resize(len, 7);
    Bytes::from_owner(Counted {
        bytes,
        dropped: dropped.clone(),
    })
}

async fn pair() -> (Endpoint, Endpoint) {
    let a = Endpoint::bind("127.0.0.1:0", A, security(A), cfg())
        .await
        .unwrap();
    let b = Endpoint::bind("127.0.0.1:0", B, security(B), cfg())
        .await
        .unwrap();
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    (a, b)
}

/// Sends `n` payloads of `len` bytes and waits for every receipt, `B` taking them.
async fn send_all(a: &Endpoint, b: &mut Endpoint, n: u32, len: usize, dropped: &Arc<AtomicUsize>) {
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(a.send(B, counted(i, len, dropped)).await.unwrap());
    }
    for _ in 0..n {
        timeout(Duration::from_secs(20), b.recv())
            .await
            .unwrap()
            .unwrap();
    }
    for r in receipts {
        timeout(Duration::from_secs(20), r).await.unwrap().unwrap();
    }
}

/// Waits (bounded) until `n` payloads were released.
async fn released(dropped: &Arc<AtomicUsize>, n: usize) {
    let start = Instant::now();
    while dropped.load(Ordering::SeqCst) < n {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{} of {n} payloads released",
            dropped.load(Ordering::SeqCst)
        );
        sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn acknowledged_payloads_are_freed_without_further_sends() {
    let (a, mut b) = pair().await;
    let dropped = Arc::new(AtomicUsize::new(0));
    send_all(&a, &mut b, 300, 1000, &dropped).await;
    // Nothing is sent after the last receipt: what later sends did not take, the driver
    // frees itself.
    released(&dropped, 300).await;
    // Payloads above the graveyard's size limit are freed too (by the driver, at once:
    // this waits for them, it cannot tell at once from within 10 ms).
    let big = Arc::new(AtomicUsize::new(0));
    send_all(&a, &mut b, 20, 20_000, &big).await;
    released(&big, 20).await;
}
