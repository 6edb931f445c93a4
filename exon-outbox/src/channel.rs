//! The application of the ordered-channel SIGKILL test (`channel-node`,
//! `tests/channel_kill.rs`): a durable channel's sender that goes on from
//! `Channel::next_seq()` after each restart, and a receiver that applies each message in the
//! channel's order into its database ([`Applied`]) before acknowledging it.
//!
//! The sender's item `i` is the channel's message `i`: after a restart the numbers below
//! `next_seq()` were accepted before it (those without a verdict are recovered and sent
//! again by exon, so the application does not send them), and it sends the rest.

use std::time::Duration;

use exon::endpoint::{Kind, Receipt};
use exon::{Endpoint, Message, NodeId};

use crate::applied::{Applied, Arrival};
use crate::receiver::commit_then_ack;
use crate::{item_of, item_payload, Error};

/// Sends items `next_seq()..count` on channel 0 to `to`, item `i` as number `i`, at `rate`
/// items a second at most (0: as fast as the channel takes them), and returns once every
/// message of this run and every one recovered from the last has its verdict: an error if
/// any was not acknowledged.
pub async fn send(ep: &mut Endpoint, to: NodeId, count: u64, rate: u64) -> Result<(), Error> {
    let ch = ep.handle().channel(to, 0)?;
    let first = ch.next_seq();
    let mut receipts: Vec<Receipt> = Vec::new();
    let (mut recovered, mut settled) = (0, 0);
    for r in ep.take_recovered() {
        if let Some((_, seq)) = r.channel {
            if seq >= first || (!r.settled && item_of(&r.payload)? != seq) {
                let what = format!("recovered number {seq} with {first} next");
                return Err(Error::Channel(what));
            }
        }
        if r.settled {
            settled += 1;
        } else {
            recovered += 1;
        }
        receipts.push(r.receipt);
    }
    eprintln!(
        "channel-node send: from {first} of {count}, {recovered} recovered, {settled} settled"
    );
    let start = tokio::time::Instant::now();
    for item in first..count {
        if rate > 0 {
            let at = Duration::from_secs_f64((item - first) as f64 / rate as f64);
            tokio::time::sleep_until(start + at).await;
        }
        let seq = ch.next_seq();
        if seq != item {
            return Err(Error::Channel(format!(
                "item {item} to be sent as number {seq}"
            )));
        }
        receipts.push(ch.send(item_payload(item)).await?);
    }
    let mut failed = 0;
    for r in receipts {
        if r.await.is_err() {
            failed += 1;
        }
    }
    let _ = ep.close(Duration::from_secs(2)).await;
    match failed {
        0 => Ok(()),
        n => Err(Error::NotAcknowledged(n)),
    }
}

/// Applies every message delivered to `ep` (built with `ack_after_processing`) into
/// `applied`, in the order delivered, each before its acknowledgement, until the endpoint
/// stops.
pub async fn recv(ep: Endpoint, applied: Applied) -> Result<(), Error> {
    commit_then_ack(ep, applied, arrival, |db, batch| db.apply(batch).map(drop)).await
}

/// What the application keeps of a message.
fn arrival(m: &Message) -> Result<Arrival, Error> {
    let redelivery = m.is_redelivery();
    Ok(match m.kind() {
        Kind::Channel { channel: 0, seq } => Arrival::Seq {
            seq,
            item: item_of(&m.payload)?,
            redelivery,
        },
        other => Arrival::Other(format!("{other:?} (redelivery: {redelivery})")),
    })
}
