//! The caller side of request/reply, shared by every system: requests in flight by id, and
//! one call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use exon::proto::NodeId;
use tokio::sync::{mpsc, oneshot};

use crate::harness::BATCH_DEADLINE;
use crate::message::{payload, seq_of};

/// Callers waiting for replies, by request id.
pub type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Bytes>>>>;

/// How a caller sends one request (the reply arrives through `Pending`, or directly).
pub enum Caller {
    /// Through an exon endpoint.
    Exon(exon::endpoint::Handle),
    /// To the writer task of a TCP connection.
    Tcp(mpsc::UnboundedSender<Bytes>),
    /// On a new bidirectional stream of a QUIC connection.
    Quic(quinn::Connection),
}

/// Hands a `size`-byte reply to the caller waiting for it; a reply nobody waits for is a
/// duplicate.
pub fn route(pending: &Pending, reply: Bytes, size: usize) {
    let seq = seq_of(&reply, size);
    let tx = pending
        .lock()
        .unwrap()
        .remove(&seq)
        .unwrap_or_else(|| panic!("reply {seq} not awaited (duplicate?)"));
    let _ = tx.send(reply);
}

/// One `size`-byte request `seq` and its reply (panics if no reply within
/// `BATCH_DEADLINE`).
pub async fn call(
    caller: &Caller,
    server: NodeId,
    pending: &Pending,
    seq: u64,
    size: usize,
) -> Bytes {
    let req = payload(seq, size);
    let wait = |rx: oneshot::Receiver<Bytes>| async move {
        tokio::time::timeout(BATCH_DEADLINE, rx)
            .await
            .expect("reply in time")
            .expect("router alive")
    };
    match caller {
        Caller::Exon(h) => {
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap().insert(seq, tx);
            drop(h.send(server, req).await.expect("send"));
            wait(rx).await
        }
        Caller::Tcp(w) => {
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap().insert(seq, tx);
            w.send(req).expect("writer alive");
            wait(rx).await
        }
        Caller::Quic(conn) => {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&req).await.unwrap();
            send.finish().unwrap();
            Bytes::from(recv.read_to_end(size).await.unwrap())
        }
    }
}
