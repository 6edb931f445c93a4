//! Exon: oblivious exactly-once messaging over UDP.
#![warn(missing_docs)]

pub mod proto;

pub use proto::{Config, Event, MsgId, Node, NodeId, SendError};

/// Helpers for unit tests of the sans-IO core, which itself never reads the clock.
#[cfg(test)]
pub(crate) mod test_time {
    /// An arbitrary origin for virtual time in tests.
    pub fn origin() -> std::time::Instant {
        std::time::Instant::now()
    }
}
