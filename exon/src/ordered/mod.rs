//! Ordered flows above the exactly-once messages, sans-IO: a sender's numbering and window
//! ([`Sequencer`]) and a receiver's reorder buffer ([`Reorder`]), and where a durable flow
//! stands in its journal marks ([`position`]). The endpoint's channels and
//! streams and the simulator's channel checks use these same two parts (`docs/channels.md`).

pub mod position;
mod reorder;
mod sequencer;

pub use reorder::{Arrival, Reorder, Step};
pub use sequencer::{Sequencer, Settled, Window};
