//! The sending application: every outbox row sent with `send_keyed`, in key order, and
//! deleted once its verdict is in; after a restart, the same from the table.
//!
//! The rule after a restart, for a row whose key exon refuses (`SendError::KeyNotAbove`):
//! its message was accepted before the crash (the journal keeps the highest key accepted per
//! destination, and rows are sent in key order). If it was not resolved, it is among
//! `Endpoint::take_recovered()` with its key: its verdict comes on that receipt. If it is not
//! there, exon resolved it before the crash: its verdict was stored, and either reported
//! then, or (stored and not reported) reported again now as a *settled* recovered message,
//! which carries its message id and no key. This example keeps no message ids, so it records
//! a settled verdict other than acknowledged by id alone ([`How::Settled`]) and deletes the
//! refused row ([`How::ResolvedBefore`]). Without deadlines (the test's case) every verdict
//! is "acknowledged"; the test checks that none other was recorded.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use exon::endpoint::Receipt;
use exon::{Endpoint, NodeId, SendError};
use tokio::sync::mpsc;

use crate::outbox::{Done, How, Outbox};
use crate::Error;

/// Verdicts settled in one transaction at most.
const BATCH: usize = 4096;

/// What the sender sends, and how fast.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Rows in the outbox (`1..=count`).
    pub count: u64,
    /// Rows written to the outbox in one transaction.
    pub batch: u64,
    /// Rows sent a second at most (0: as fast as the endpoint takes them), so that a test's
    /// kills fall during the stream.
    pub rate: u64,
}

/// Fills the outbox with `plan.count` rows if it is not yet, sends what it holds to `to`,
/// and returns once every row is settled and the outbox is empty.
pub async fn run(ep: &mut Endpoint, to: NodeId, outbox: Outbox, plan: Plan) -> Result<(), Error> {
    let outbox = Arc::new(outbox);
    let o = outbox.clone();
    let (count, batch) = (plan.count, plan.batch);
    let rows =
        tokio::task::spawn_blocking(move || o.fill(count, batch).and_then(|()| o.rows())).await??;
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(settle(outbox.clone(), rx));
    let mut recovered = HashMap::new();
    for r in ep.take_recovered() {
        match (r.settled, r.key) {
            (false, Some(key)) => {
                recovered.insert(key, r.receipt);
            }
            (settled, key) => {
                let how = if settled {
                    How::Settled
                } else {
                    How::Recovered
                };
                watch(r.receipt, key, how, &tx);
            }
        }
    }
    let handle = ep.handle();
    let start = tokio::time::Instant::now();
    for (n, (key, payload)) in rows.into_iter().enumerate() {
        if plan.rate > 0 {
            let at = Duration::from_secs_f64(n as f64 / plan.rate as f64);
            tokio::time::sleep_until(start + at).await;
        }
        match handle.send_keyed(to, key, payload).await {
            Ok(receipt) => watch(receipt, Some(key), How::Accepted, &tx),
            Err(exon::endpoint::Error::Send(SendError::KeyNotAbove { .. })) => {
                match recovered.remove(&key) {
                    Some(receipt) => watch(receipt, Some(key), How::Recovered, &tx),
                    None => resolved_before(key, &tx),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Recovered messages whose rows were deleted already (their verdict came, and the row
    // was deleted, before the journal's record of it was synced): exon finishes them.
    for (key, receipt) in recovered {
        watch(receipt, Some(key), How::Recovered, &tx);
    }
    drop(tx);
    writer.await??;
    let left = outbox.len()?;
    let _ = ep.close(Duration::from_secs(2)).await;
    match left {
        0 => Ok(()),
        n => Err(Error::OutboxNotEmpty(n)),
    }
}

/// Waits for `receipt`'s verdict in a task of its own, and hands it to the writer.
fn watch(receipt: Receipt, row: Option<u64>, how: How, tx: &mpsc::UnboundedSender<Done>) {
    let tx = tx.clone();
    tokio::spawn(async move {
        let id = Some(receipt.id());
        let failure = receipt.await.err().map(|e| e.to_string());
        let _ = tx.send(Done {
            row,
            id,
            failure,
            how,
        });
    });
}

/// A refused row whose message was not recovered: resolved before the crash.
fn resolved_before(row: u64, tx: &mpsc::UnboundedSender<Done>) {
    let how = How::ResolvedBefore;
    let _ = tx.send(Done {
        row: Some(row),
        id: None,
        failure: None,
        how,
    });
}

/// Settles the verdicts as they come, those waiting together in one transaction (off the
/// runtime: the commit syncs the file).
async fn settle(outbox: Arc<Outbox>, mut rx: mpsc::UnboundedReceiver<Done>) -> Result<(), Error> {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let (o, done) = (outbox.clone(), std::mem::take(&mut batch));
        tokio::task::spawn_blocking(move || o.settle(&done)).await??;
    }
    Ok(())
}
