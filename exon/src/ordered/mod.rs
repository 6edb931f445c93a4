//! Ordered flows above the exactly-once messages, sans-IO: a sender's numbering and window
//! ([`Sequencer`]) and a receiver's reorder buffer ([`Reorder`]). The endpoint's channels and
//! streams and the simulator's channel checks use these same two parts (`docs/channels.md`).

mod reorder;
mod sequencer;

pub use reorder::{Arrival, Reorder, Step};
pub use sequencer::{Sequencer, Settled, Window};
