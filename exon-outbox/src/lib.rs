//! Exactly once from the application's store to the application's store, with a real
//! embedded database ([redb](https://docs.rs/redb)) on both sides: the nodes of the outbox
//! SIGKILL test (`tests/outbox_kill.rs`), each a process of its own (`outbox-node`), killed
//! at random moments and started again on the same directory and database.
//!
//! - The sender ([`sender`]) keeps what it must send as rows of an [`Outbox`] (key -> item),
//!   sends every row it still holds in key order with `Handle::send_keyed`, and deletes a
//!   row once its receipt resolves. After a restart it does the same from the table: a key
//!   exon accepted before the crash is refused (`SendError::KeyNotAbove`), so no row is ever
//!   sent as two messages.
//! - The receiver ([`receiver`]) commits each message's effect together with its
//!   `Message::stable_id()` in one transaction of its [`Effects`] database, then acknowledges
//!   it (`ack_after_processing`); a flagged redelivery whose id is there is only
//!   acknowledged.
//!
//! `docs/durability.md`, "Exactly once from an outbox", describes the pattern and what it
//! relies on.
//!
//! The same harness checks a durable ordered channel through SIGKILLs
//! (`tests/channel_kill.rs`, binary `channel-node`, module [`channel`]): the sender goes on
//! from `Channel::next_seq()` after each restart, the receiver applies each message in the
//! channel's order into its redb database ([`Applied`]) before acknowledging it.

pub mod applied;
pub mod channel;
pub mod effects;
pub mod error;
pub mod node;
pub mod outbox;
pub mod receiver;
pub mod sender;

pub use applied::{Applied, Order};
pub use effects::{Effects, Tally};
pub use error::Error;
pub use outbox::Outbox;

/// The payload of an item: its number, 8 bytes big-endian.
pub fn item_payload(item: u64) -> Vec<u8> {
    item.to_be_bytes().to_vec()
}

/// The item number a payload carries ([`item_payload`]).
pub fn item_of(payload: &[u8]) -> Result<u64, Error> {
    let bytes: [u8; 8] = payload
        .try_into()
        .map_err(|_| Error::Payload(payload.len()))?;
    Ok(u64::from_be_bytes(bytes))
}
