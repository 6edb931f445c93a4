//! The sans-IO core (`exon::proto`), with no socket and no runtime: frame-by-frame tests
//! built with `exon_testkit::frames`, runs of two nodes over the in-memory network of
//! `exon_testkit::pair::Pair` in virtual time, and the wire codec and configuration on their
//! own. A new test of the core's behaviour goes in the module of its topic here (see
//! `docs/testing.md`); one that needs real sockets goes in `endpoint/`.
//!
//! Run: `cargo test -p exon --test core`.

mod answers_on_timers;
mod batches;
mod codec;
mod config_serde;
mod congestion;
mod delivery;
mod durable;
mod fuzz_replays;
mod held;
mod hostile;
mod keyed;
mod large_messages;
mod last_frame;
mod marks;
mod mtu;
mod pair_exactly_once;
mod probe_resend;
mod receiver_restarts;
mod record_pressure;
mod released;
mod reply;
mod reply_many;
mod rules;
mod sealed;
mod sender_restarts;
mod senders_copy;
mod sync_paths;
mod transmit_runs;
mod verdicts;
