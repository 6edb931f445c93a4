//! The journal of durable mode: the records a node asks its embedding to keep on stable
//! storage before it acts on them, and what a restarted node recovers from them.
//!
//! The core does no I/O. In durable mode it hands out [`Write`]s (through
//! [`Node::poll_store`](crate::proto::Node::poll_store)), numbered in the order they must
//! reach the disk, and holds back what depends on them until the embedding reports them
//! durable with [`Node::handle_stored`](crate::proto::Node::handle_stored):
//!
//! | record      | written when                         | held back until it is durable      |
//! |-------------|--------------------------------------|------------------------------------|
//! | `Accepted`  | `send` accepts a message             | [`Event::Stored`](crate::proto::Event::Stored) |
//! | `Assigned`  | a message gets its slot (a token)    | the token's first transmission      |
//! | `Resolved`  | a verdict ends a message (it keeps the verdict) | the verdict event (a deadline's too), and the frontier passing its slot |
//! | `Reported`  | the application is handed verdicts   | nothing (it lets the log shrink)    |
//! | `Delivered` | a TOKEN or FRAG fills a slot (any, with `Rules::deliver_from_senders_copy` off) | [`Event::Delivered`](crate::proto::Event::Delivered) |
//! | `Handed`    | an STOKEN or SFRAG fills a slot (its sender keeps the payload until the ACK) | [`Event::Delivered`](crate::proto::Event::Delivered) |
//! | `Taken`     | the application takes a delivery     | the ACK                             |
//! | `Confirmed` | the sender's frontier passes taken slots, or hand-overs of an earlier run | nothing (it only lets the log shrink) |
//! | `Mark`, `AcceptedMark`, `TakenMark` | a layer above keeps a value (alone, with a send, with a take) | what the send or the take holds back |
//!
//! [`State`] replays records (at recovery, and in the storage layer to know what a
//! compaction keeps); [`Recovered`] is what a restarted node is given.

mod archive;
mod entry;
pub(crate) mod forgotten;
pub(crate) mod gates;
pub(crate) mod marks;
mod pending_slots;
mod sorted_ring;
mod state;

pub(crate) use archive::Archive;
pub use entry::{Entry, EntryError, Outcome};
pub use marks::{Mark, MAX_MARK_BYTES};
pub use state::{Recovered, RecoveredDelivery, RecoveredMessage, RecoveredVerdict, State};

/// One record to make durable, numbered: `seq` grows by one per write, and reporting `seq`
/// durable reports every write before it durable too (writes reach the disk in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// The write's place in the order (1, 2, 3, ... over the node's life).
    pub seq: u64,
    /// What to store.
    pub entry: Entry,
}
