//! The real endpoint driver over turmoil's simulated network (feature `turmoil`): random
//! loss, reordering, partitions, held links, restarts (a stream's writer among them), many
//! peers and a racing observer, in simulated time and deterministic from a fixed seed.
//! `support` holds the pieces these tests share (hosts, clients, the step loop); they are
//! specific to turmoil, so they stay here rather than in `exon-testkit`.
//!
//! Run: `cargo test -p exon --test turmoil`.

mod behind_nat;
mod exactly_once;
mod many_peers;
mod observer;
mod restarted_writer;
mod rpc;
mod support;
