//! Why an ordered flow (a channel, or one side of a stream) sends nothing more
//! ([`Broken`]), and the I/O error a stream reports for it.

/// Why a flow sends nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broken {
    /// The stream was aborted: by its peer, by this end, or because its peer does not know
    /// it (it restarted).
    Reset,
    /// A chunk was not acknowledged by its deadline (the peer is gone, or does not read).
    TimedOut,
    /// The endpoint closed.
    Closed,
}

impl Broken {
    /// The I/O error a stream reports for it.
    pub(crate) fn io(self) -> std::io::Error {
        use std::io::{Error, ErrorKind};
        match self {
            Broken::Reset => Error::new(ErrorKind::ConnectionReset, "exon stream reset"),
            Broken::TimedOut => Error::new(
                ErrorKind::TimedOut,
                "exon stream: data not acknowledged by its deadline",
            ),
            Broken::Closed => Error::new(ErrorKind::NotConnected, "exon endpoint closed"),
        }
    }
}
