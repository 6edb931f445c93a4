//! Durable mode: an append-only, checksummed log on stable storage for the protocol's records.

pub mod backend;
pub mod journal;
pub mod log;
mod record;

pub use backend::{Backend, DetachedSync, FsBackend, FsSync, MemBackend, MemStats, MemSync};
pub use journal::{Journal, JournalConfig, JournalError, JournalSync, OpenReport, Synced};
pub use log::{Log, LogConfig, LogError, Lsn, Recovery, Written};
