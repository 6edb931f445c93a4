//! Exon: oblivious exactly-once messaging over UDP.
#![warn(missing_docs)]

pub mod proto;

pub use proto::{Config, Event, MsgId, Node, NodeId, SendError};
