//! Test kit for exon: the one drain, the in-memory two-node `Pair`, and frame builders.
#![warn(missing_docs)]

pub mod alloc;
pub mod drain;
pub mod frames;
pub mod pair;

pub use drain::{confirm_clock, datagrams, drain, drain_taking, drain_with, Drained, Outputs};
