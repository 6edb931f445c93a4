//! The wire format: variable-length integers, the datagram header, frames and range sets
//! (documented byte by byte in `docs/wire.md`).

pub mod clocks;
pub mod codec;
pub mod frame;
pub mod header;
pub mod ranges;
