//! Test kit for exon: the one drain, the in-memory two-node `Pair`, frame builders, and
//! real processes for the SIGKILL tests.
#![warn(missing_docs)]

pub mod alloc;
pub mod drain;
pub mod frames;
pub mod pair;
pub mod procs;

pub use drain::{confirm_clock, datagrams, drain, drain_taking, drain_with, Drained, Outputs};
