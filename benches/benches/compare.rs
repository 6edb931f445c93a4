//! Side-by-side loopback comparison of exon, TCP and QUIC, with the systems run alternately
//! in rounds so that machine drift hits all of them.
//!
//! ```text
//! cargo bench -p exon-benches --bench compare -- one-way --secs 3
//! cargo bench -p exon-benches --bench compare -- rpc --callers 100 --secs 3
//! cargo bench -p exon-benches --bench compare -- one-way --size 65536 --datagram 65507 --secs 2
//! cargo bench -p exon-benches --bench compare -- one-way --size 1048576 --secs 2
//! cargo bench -p exon-benches --bench compare -- rpc --size 1048576 --callers 10 --secs 2
//! ```
//!
//! Systems: exon (sealed, its default) and `exon_plain`; TCP with 4-byte length-prefixed
//! frames read with exact reads; QUIC (quinn) as one long stream of such frames (`quic`) or a
//! new stream per message (`quic_uni` one-way; rpc's `quic` opens a bidirectional stream per
//! request). In rpc, exon calls with `Handle::call` and answers with `Handle::serve` (the
//! endpoint correlates each reply with its call); TCP multiplexes the callers over one
//! connection with a map of request ids.
//!
//! `--size BYTES` (default 1024, at least 16) sets every message's size: one-way messages,
//! and in rpc both the request and the reply (the server echoes the request). Each message
//! carries its sequence number in its first and last 8 bytes; receivers check the length,
//! both copies and exactly-once delivery. The default batch shrinks with the size so that a
//! batch holds about 64 MiB of payload at most (`--batch` overrides). Rates are reported in
//! messages (requests) per second and in MB/s of payload (10^6 bytes; rpc counts request and
//! reply). Where exon refuses the size (a payload larger than one datagram, until exon carries
//! larger messages in fragments) the run says `exon: size N refused (PayloadTooLarge)` and
//! goes on without it.
//!
//! Exon runs with its own defaults unless told otherwise (`--datagram 0`): path MTU discovery
//! starts at 1200-byte datagrams and reaches 65507 on loopback within a few round trips.
//! `--datagram B` fixes its datagrams at B bytes instead (1472: one 1 KB message per
//! datagram, as on Ethernet, the setting of the figures taken before discovery existed).
//! Where exon refuses a size, the run says so and goes on without it.
//!
//! Scaled one-way (`--pairs P --shards S [--send-batch K]`): P sender endpoints, each on its
//! own thread, send to one receiving endpoint of S driver shards (a runtime with S worker
//! threads, one task per shard taking its messages with `recv_many`); the senders' node ids
//! are picked so that each shard owns as many. Beside exon and exon_plain, `tcp` runs P
//! connections from P threads into one process with P worker threads. Each sender's share
//! of a batch is 10000 messages.
//!
//! The durable section (after the other systems, the same in both modes, not with
//! `--pairs`/`--shards`/`--send-batch` or an `--only` other than `--only durable`): the disk's
//! sync latency (1 KB appended + `sync_data`, 1000 times, in the section's temporary
//! directory, `--dir` or the system's) and NATS JetStream, the durable broker with
//! deduplication a user would pick instead: `nats-server` (`$NATS_SERVER`, `PATH`, then
//! `$(go env GOPATH)/bin`; built with `go install` if only `go` is found; skipped, with the
//! reason, if neither) on a free loopback port, file storage, `sync_interval: always` (each
//! write fsynced before the PubAck), a `Nats-Msg-Id` on every message. Rows: `nats_js` (async
//! publish, 256 PubAcks awaited at once, msgs/s counting acknowledged messages),
//! `nats_js_nofsync` (the same on a server with JetStream's default sync, no fsync before the
//! ack), `nats_js_sync` (publish and await the ack, one caller: p50/p99) and `nats_js_rpc`
//! (the same with `--callers` concurrent callers, as the rpc mode). `--quick` (a smoke run:
//! 0.3 s, one round) and `--no-nats` skip NATS (`nats_js=skipped`); `--only durable` runs the
//! durable section alone. `durable::exon_durable_rows` adds exon's rows: durable and
//! in-memory one-way in batches of 256 (`exon_durable`, `exon_durable_keyed`, `exon_memory`)
//! and of 16 (`exon_durable_b16`, `exon_memory_b16`) and request/reply (`exon_durable_rpc`,
//! `exon_memory_rpc`), then two durable senders into a durable receiver of one shard and of
//! two (`exon_durable_2to1`, `exon_durable_2shards`: a journal per shard), those two on a
//! runtime of at least two worker threads; and `journal_engine`, exon's journal alone
//! (`durable_engine.rs`: two journals, a thread each, writing the records `exon_durable`
//! writes per message, one commit per 256 messages), the ceiling the protocol's rows sit
//! under on the same disk in the same run. Under the table, what the durable rows' journals
//! wrote per message counted, both ends together (`EndpointStats::journal_written_bytes`,
//! `journal_writes`, `journal_commits`): bytes, records and syncs, also in the last line as
//! `<row>_journal_b_per_msg`, `<row>_journal_records_per_msg`, `<row>_syncs_per_msg`.
//!
//! ```text
//! cargo bench -p exon-benches --bench compare -- one-way --secs 3            # with NATS
//! cargo bench -p exon-benches --bench compare -- one-way --only durable      # NATS alone
//! cargo bench -p exon-benches --bench compare -- one-way --quick             # no NATS
//! ```
//!
//! `cargo bench -p exon-benches --bench compare -- --help` lists the options. The last line of
//! the output is `key=value` pairs for scripts: each system's rate under its name (messages
//! or requests per second, as before sizes existed), `<name>_mb_s` (MB/s), the ratios
//! (`exon_over_tcp`, `exon_over_quic`, ...: the same for messages and bytes), `size=`,
//! `refused=` naming the exon systems that refused the size, if any, and then the durable
//! section's keys: `fsync_p50_us`, `fsync_p99_us`, `nats_js` (or `nats_js=skipped`),
//! `nats_js_nofsync`, `nats_js_sync`, `nats_js_sync_p50_us`, `nats_js_sync_p99_us`,
//! `nats_js_rpc`, `nats_js_rpc_p50_us`, `nats_js_rpc_p99_us`.

use clap::{CommandFactory, Parser};
use exon_benches::compare;

/// Side-by-side loopback comparison of exon, TCP and QUIC, run alternately in rounds. The
/// last line of the output is `key=value` pairs for scripts.
#[derive(Debug, Parser)]
#[command(name = "compare")]
struct Args {
    #[command(flatten)]
    options: compare::Options,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(msg) = compare::run(&args.options) {
        // A usage error, reported the way clap does (exit status 2).
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, msg)
            .exit()
    }
}
