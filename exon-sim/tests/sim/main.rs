//! Runs of the simulator in process, in virtual time: exactly-once and the oracles under
//! adversaries, congestion, late joiners at a bottleneck, one-way outages, large messages,
//! MTU changes, reordering and random scenarios (proptest), and the checker's self-test with
//! each rule switched off.
//! A new test that builds a `Scenario` and runs a `Sim` goes in the module of its topic
//! here; a test of the `exon-sim` command line goes in `cli.rs` (see `docs/testing.md`).
//!
//! Run: `cargo test -p exon-sim --test sim`.

mod adversary;
mod channels;
mod congestion;
mod deaf_paths;
mod durable;
mod fairness;
mod flow_control;
mod large_messages;
mod mtu;
mod properties;
mod reordering;
mod rpc;
mod self_test;
mod streams;
