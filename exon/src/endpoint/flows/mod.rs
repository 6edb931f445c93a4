//! Ordered flows: channels and streams (the handle side), the sending side of one flow, the
//! verdicts on their way back, why a flow broke, their configuration, and their share of
//! the driver (the reorder buffers, in [`at_driver`]).

pub(crate) mod ack;
pub(crate) mod at_driver;
pub(crate) mod broken;
pub(crate) mod channel;
pub(crate) mod config;
pub(crate) mod out;
pub(crate) mod positions;
pub(crate) mod resume;
pub(crate) mod slots;
pub(crate) mod stream;
pub(crate) mod stream_in;
