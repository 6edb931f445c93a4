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
pub async fn run(mut ep: Endpoint, db: Effects) -> Result<(), Error> {
    let db = Arc::new(db);
    let mut buf: Vec<Message> = Vec::with_capacity(BATCH);
    loop {
        buf.clear();
        if ep.recv_many(&mut buf, BATCH).await == 0 {
            return Ok(());
        }
        let batch = buf.iter().map(delivered).collect::<Result<Vec<_>, _>>()?;
        let db = db.clone();
        tokio::task::spawn_blocking(move || db.process(&batch)).await??;
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
