//! Durable mode: an append-only, checksummed log on stable storage for the protocol's records.

pub mod backend;
#[allow(dead_code)] // used by the log, next
mod record;

pub use backend::{Backend, FsBackend, MemBackend, MemStats};
