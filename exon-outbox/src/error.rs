//! What stops an outbox node.

/// An error of an outbox node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The application's database failed.
    #[error("database: {0}")]
    Db(#[from] redb::Error),
    /// The endpoint refused or failed an operation.
    #[error(transparent)]
    Exon(#[from] exon::endpoint::Error),
    /// The endpoint could not be built.
    #[error("bind: {0}")]
    Bind(#[from] exon::endpoint::BindError),
    /// A payload that is not an item number (8 bytes).
    #[error("a payload of {0} bytes is not an item number")]
    Payload(usize),
    /// A node id that is not 1 or 2 (the test has two nodes).
    #[error("node id {0}: must be 1 or 2")]
    Id(u64),
    /// The sender finished with rows still in its outbox.
    #[error("{0} rows left in the outbox")]
    OutboxNotEmpty(u64),
    /// A channel's numbering was not what its sender expects (`channel-node send`).
    #[error("channel: {0}")]
    Channel(String),
    /// Messages whose verdict was not acknowledged (`channel-node send`).
    #[error("{0} messages not acknowledged")]
    NotAcknowledged(u64),
    /// A task of the node panicked or was cancelled.
    #[error("task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// redb's errors of each step, through `redb::Error`.
macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::Db(e.into())
            }
        }
    )*};
}

from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);
