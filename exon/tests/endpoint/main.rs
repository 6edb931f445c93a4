//! The tokio endpoint (`exon::endpoint`) over real UDP on 127.0.0.1: sending, receiving and
//! receipts, backpressure, close and restarts, batched and sharded I/O, the endpoint's
//! parts. The tests run in parallel threads of one process; each binds its own ports and
//! sets no process-wide state (what the endpoint logs is tested in `tracing_events.rs`, a
//! binary of its own; the attacks over UDP, with their deadlines, in `timed/`).
//!
//! A loopback test that measures time or rates and would be disturbed by others running
//! beside it goes in `timed/` instead; see `docs/testing.md`.
//!
//! Run: `cargo test -p exon --test endpoint`.

mod batch;
mod channel_windows;
mod coalesce;
mod common;
mod durable;
mod durable_channels;
mod durable_marks;
mod durable_shards;
mod durable_streams;
mod http;
mod ipv6;
mod loopback;
mod note_flood;
mod parts;
mod recovered_calls;
mod released;
mod rpc;
mod shards;
mod stranded_runs;
mod stranded_streams;
mod streams;
mod tower_stack;
