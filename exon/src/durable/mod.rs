//! Durable mode: an append-only, checksummed log on stable storage for the protocol's records.

pub mod backend;
pub mod journal;
pub mod log;
mod record;

pub use backend::{Backend, FsBackend, MemBackend, MemStats};
pub use journal::{Journal, JournalConfig, JournalError, OpenReport};
pub use log::{Log, LogConfig, LogError, Lsn, Recovery};
