//! Test kit for exon's tests, simulator and fuzz targets: the one drain, the in-memory `Pair`, and frame builders.
#![warn(missing_docs)]

pub mod drain;
pub mod frames;
pub mod pair;

pub use drain::{confirm_clock, datagrams, drain, drain_taking, drain_with, Drained, Outputs};
