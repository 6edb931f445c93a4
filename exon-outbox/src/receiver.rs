//! The receiving application: each message's effect and its stable id in one transaction,
//! then the acknowledgement.

use std::sync::Arc;

use exon::{Endpoint, Message};

use crate::effects::{Delivered, Effects};
use crate::Error;

/// Messages processed in one transaction at most.
const BATCH: usize = 1024;

/// Processes every message delivered to `ep` (built with `ack_after_processing`) exactly
/// once into `db`, until the endpoint stops: the messages waiting are taken together, their
/// effects committed in one transaction (off the runtime: the commit syncs the file), and
/// only then acknowledged.
pub async fn run(ep: Endpoint, db: Effects) -> Result<(), Error> {
    commit_then_ack(ep, db, delivered, |db, batch| db.process(batch).map(drop)).await
}

/// Until `ep` stops: takes the messages waiting (up to a batch), keeps of each what
/// `keep` says, hands those to `commit` (off the runtime: a commit syncs a file), and
/// acknowledges the messages once it returned. `ep` is built with `ack_after_processing`.
pub async fn commit_then_ack<S, T>(
    mut ep: Endpoint,
    store: S,
    keep: fn(&Message) -> Result<T, Error>,
    commit: fn(&S, &[T]) -> Result<(), Error>,
) -> Result<(), Error>
where
    S: Send + Sync + 'static,
    T: Send + 'static,
{
    let store = Arc::new(store);
    let mut buf: Vec<Message> = Vec::with_capacity(BATCH);
    loop {
        buf.clear();
        if ep.recv_many(&mut buf, BATCH).await == 0 {
            return Ok(());
        }
        let batch = buf.iter().map(keep).collect::<Result<Vec<_>, _>>()?;
        let store = store.clone();
        tokio::task::spawn_blocking(move || commit(&store, &batch)).await??;
        for m in &buf {
            m.ack();
        }
    }
}

/// What the application keeps of a message.
fn delivered(m: &Message) -> Result<Delivered, Error> {
    let (from, rck, slot) = m.stable_id();
    Ok(Delivered {
        id: (from.get(), rck, slot),
        item: crate::item_of(&m.payload)?,
        redelivery: m.is_redelivery(),
    })
}
