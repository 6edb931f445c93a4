//! The durable table's shapes, shared by its systems (`durable.rs`: the sync probe and
//! NATS; `durable_exon.rs`: exon): the section's settings, one row, and what every system
//! is given.

use std::path::{Path, PathBuf};

use crate::report::Tally;
use crate::stats::Latencies;

/// What the durable section is told by `compare`'s command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Bytes per message.
    pub size: usize,
    /// Measured time per system, split into `rounds` rounds (systems alternate within each).
    pub secs: f64,
    /// Rounds.
    pub rounds: u32,
    /// Concurrent callers of the request/reply-like row (`nats_js_rpc`).
    pub callers: u64,
    /// Worker threads of the client's tokio runtime (0: current-thread).
    pub threads: usize,
    /// Samples of the sync probe.
    pub sync_samples: usize,
    /// Why NATS is not run, if it is not (`--quick`, `--no-nats`, `--only`).
    pub skip_nats: Option<String>,
    /// Where the temporary directory is made (default: the system's temporary directory).
    pub dir: Option<PathBuf>,
}

/// One row of the durable table: a system's rate and, for the request/reply-like rows, its
/// latency.
#[derive(Debug, Clone)]
pub struct Row {
    /// The name in the table and the key of the last line.
    pub name: &'static str,
    /// What was measured, in words.
    pub what: String,
    /// Messages (or acknowledged publishes) and their time, by round.
    pub tally: Tally,
    /// Latency of each call, for the rows that wait for each message's acknowledgement.
    pub latency: Option<Latencies>,
    /// Durable exon rows: what both ends' journals wrote for the messages counted.
    pub journal: Option<JournalCost>,
}

/// What the journals of a durable exon run wrote (`EndpointStats::journal_written_bytes`,
/// `journal_writes`, `journal_commits`, every endpoint of the run together), for the
/// messages it counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct JournalCost {
    /// Encoded bytes of the records (framing left out).
    pub bytes: u64,
    /// Records.
    pub records: u64,
    /// Group commits (one sync each).
    pub commits: u64,
    /// Messages (or requests) counted.
    pub messages: u64,
}

impl JournalCost {
    /// Adds another run's figures.
    pub fn add(&mut self, o: JournalCost) {
        self.bytes += o.bytes;
        self.records += o.records;
        self.commits += o.commits;
        self.messages += o.messages;
    }

    /// Per message counted: bytes, records and syncs.
    pub fn per_message(&self) -> (f64, f64, f64) {
        let n = self.messages.max(1) as f64;
        (
            self.bytes as f64 / n,
            self.records as f64 / n,
            self.commits as f64 / n,
        )
    }
}

/// What every durable system gets: where to keep its files, and the run's settings.
pub struct Context<'a> {
    /// The run's temporary directory (removed at the end).
    pub dir: &'a Path,
    /// The settings.
    pub settings: &'a Settings,
}
