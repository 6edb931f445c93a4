//! The caller side of request/reply, shared by every system: one call, and (TCP, which has
//! no request/reply of its own) the requests in flight by id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use exon::proto::NodeId;
use tokio::sync::{mpsc, oneshot};

use crate::harness::BATCH_DEADLINE;
use crate::message::{payload, seq_of};

/// TCP callers waiting for replies, by request id.
pub type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Bytes>>>>;

/// How a caller sends one request.
pub enum Caller {
    /// An exon call (`Handle::call`: the endpoint correlates the reply).
    Exon(exon::endpoint::Handle),
    /// To the writer task of a TCP connection; its reader task routes the replies to the
    /// callers waiting in `pending`.
    Tcp {
        /// The writer task's queue.
        writer: mpsc::UnboundedSender<Bytes>,
        /// The callers waiting for replies.
        pending: Pending,
    },
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
pub async fn call(caller: &Caller, server: NodeId, seq: u64, size: usize) -> Bytes {
    let req = payload(seq, size);
    match caller {
        Caller::Exon(h) => h
            .call_within(server, req, BATCH_DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("call {seq}: {e}")),
        Caller::Tcp { writer, pending } => {
            let (tx, rx) = oneshot::channel();
            pending.lock().unwrap().insert(seq, tx);
            writer.send(req).expect("writer alive");
            tokio::time::timeout(BATCH_DEADLINE, rx)
                .await
                .expect("reply in time")
                .expect("router alive")
        }
        Caller::Quic(conn) => {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&req).await.unwrap();
            send.finish().unwrap();
            Bytes::from(recv.read_to_end(size).await.unwrap())
        }
    }
}
