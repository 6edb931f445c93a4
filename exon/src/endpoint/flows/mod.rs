//! Ordered flows: channels and streams (the handle side), the sending side of one flow, the
//! verdicts on their way back, why a flow broke, their configuration, and their share of
//! the driver (the reorder buffers, in [`at_driver`]). Durable mode: their positions
//! ([`positions`]), recovery ([`resume`]), the room reserved for their marks ([`slots`]),
//! and the receiver's window kept in the sender's mark ([`window_mark`]). Streams are
//! kept by peer ([`by_peer`]).

pub(crate) mod ack;
pub(crate) mod at_driver;
pub(crate) mod broken;
pub(crate) mod by_peer;
pub(crate) mod channel;
pub(crate) mod config;
pub(crate) mod out;
pub(crate) mod positions;
pub(crate) mod resume;
pub(crate) mod slots;
pub(crate) mod stalls;
pub(crate) mod stream;
pub(crate) mod stream_in;
pub(crate) mod window_mark;
pub(crate) mod write_buf;
