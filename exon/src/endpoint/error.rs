//! Errors of the endpoint API.

use std::io;

use crate::proto::{ConfigError, SendError};

/// Why a send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The core refused the message (queue full on `try_send`, payload too large, too many
    /// peers, or a send to self). Nothing about the message was kept.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The endpoint is closing or closed: it accepts no new messages.
    #[error("endpoint closed")]
    Closed,
}

/// Why a [`Receipt`](super::Receipt) resolved without an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiptError {
    /// The endpoint stopped (closed, or its deadline passed) before the receiver acknowledged
    /// the message. It may or may not have been delivered; it was never delivered twice.
    #[error("endpoint stopped before the message was acknowledged")]
    Unacknowledged,
    /// The endpoint refused the message after [`send`](super::Handle::send) had returned
    /// (too many destinations, or the endpoint closed meanwhile): it was never sent.
    #[error("message refused: {0}")]
    Refused(Error),
    /// The receiver lost the incarnation the message was sent under (it restarted, or
    /// forgot it under a flood of requests) before acknowledging it: the message was
    /// delivered at most once, maybe not at all, and will not be sent again.
    #[error("receiver restarted before acknowledging: message in doubt")]
    InDoubt,
}

/// Why an endpoint could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Binding the socket failed.
    #[error("bind failed: {0}")]
    Io(#[from] io::Error),
    /// The protocol configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The clock store could not be read.
    #[error("clock store: {0}")]
    Store(io::Error),
}
