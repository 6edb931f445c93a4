//! Exon: oblivious exactly-once messaging over UDP.
#![warn(missing_docs)]

pub mod proto;

#[cfg(feature = "tokio")]
pub mod endpoint;

pub use proto::{Config, Event, MsgId, Node, NodeId, SendError};

#[cfg(feature = "tokio")]
pub use endpoint::{Endpoint, EndpointConfig, Message};
