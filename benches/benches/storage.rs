//! Durable storage for issue 22: redb, fjall and an append-only log (`std::fs::File` and
//! `sync_data`, CRC32-checked records), 1 KB records in batches of 1, 16 and 256 per durable
//! commit, inserted then deleted; beside the raw `fdatasync` latency of the disk and the space
//! each gives back after 10 000 records are inserted and deleted.
//!
//! ```text
//! cargo bench -p exon-benches --bench storage
//! cargo bench -p exon-benches --bench storage -- --quick
//! ```
//!
//! Prints tables; the last line is `key=value` pairs (`fsync_p50_us`, then `<store>_b<batch>`:
//! records inserted and committed per second).

use std::path::PathBuf;

use clap::Parser;

/// Measures durable inserts and deletes of 1 KB records in redb, fjall and an append-only log.
#[derive(Debug, Parser)]
#[command(name = "storage")]
struct Args {
    /// Seconds per phase (insert, then delete) of each candidate and batch size.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// A smoke run: 0.2 s per phase.
    #[arg(long)]
    quick: bool,
    /// Directory under which the temporary stores are made (default: the system's temporary
    /// directory; it must be on the disk to measure, not a tmpfs).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    let secs = if args.quick { 0.2 } else { args.secs };
    if let Err(e) = exon_benches::storage::run(secs, args.dir.as_deref()) {
        eprintln!("storage: {e}");
        std::process::exit(1);
    }
}
