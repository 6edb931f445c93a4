//! Durable mode in the simulator: how each host keeps its node's journal (an
//! [`exon::durable::Journal`] over a [`MemBackend`](exon::durable::MemBackend) that survives
//! the host's crashes), and how crashes hit it.

use exon::durable::{JournalConfig, LogConfig};

/// How the hosts of a durable scenario keep their journals. Commits take the scenario's
/// [`DiskModel::sync_latency`](crate::DiskModel::sync_latency), and crashes tear unsynced
/// bytes with its `torn_writes` (without [`Scenario::disk`](crate::Scenario::disk): the
/// default [`DiskModel`](crate::DiskModel)).
#[derive(Debug, Clone, PartialEq)]
pub struct JournalModel {
    /// A commit compacts the log once it grew by this many bytes since the last compaction
    /// ([`JournalConfig::compact_after`]): small, so that busy runs compact too.
    pub compact_after: u64,
    /// Bytes of one log segment (at least a record of the largest payload and its fields).
    pub segment_bytes: usize,
    /// With torn writes: the probability that a crash falls inside a commit of pending
    /// writes (the disk fails after a random number of operations, and the crash keeps a
    /// random part of what was written and not synced). Such a crash may leave records
    /// durable that the node was never told of (the sync completed, the process died before
    /// `handle_stored`): the window of the core defect in `tests/sim/durable.rs`, so 0 by
    /// default.
    pub crash_mid_commit: f64,
    /// The probability that a crash with nothing pending falls inside a compaction (the
    /// disk fails after a random number of operations).
    pub crash_mid_compaction: f64,
    /// The probability that a crash also changes a byte of a record the journal had synced
    /// (bit rot, a bad sector), in any segment: a byte of a record that another synced
    /// record follows in its segment (damage confined to a segment's last record may look
    /// like a torn write: the documented limit of docs/durability.md). The oracle then
    /// expects the recovery to say the journal is damaged, and excuses `InDoubt` for
    /// messages to that node from then on, and no more.
    pub damage: f64,
}

impl Default for JournalModel {
    fn default() -> Self {
        JournalModel {
            compact_after: 16 << 10,
            segment_bytes: 64 << 10,
            crash_mid_commit: 0.0,
            crash_mid_compaction: 0.5,
            damage: 0.0,
        }
    }
}

/// Where the records of a segment's synced bytes start, by the framing of
/// docs/durability.md (`len: u32 LE | crc32: u32 LE | kind: u8 | body`, `len` counting kind
/// and body): synced bytes end with a whole record (a sync comes at the end of a batch).
pub(crate) fn record_starts(data: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 0usize;
    while let Some(len) = data.get(at..at + 4) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if len == 0 || at + 8 + len > data.len() {
            break;
        }
        starts.push(at);
        at += 8 + len;
    }
    starts
}

/// Bytes a journal record needs beyond its payload (the record's fields, framing).
const RECORD_OVERHEAD: usize = 4096;

impl JournalModel {
    /// The journal configuration for payloads of at most `largest` bytes.
    pub fn config(&self, largest: usize) -> JournalConfig {
        let max_record = largest + RECORD_OVERHEAD;
        JournalConfig {
            log: LogConfig {
                segment_bytes: self.segment_bytes.max(2 * max_record),
                max_record,
            },
            compact_after: self.compact_after,
            ..JournalConfig::default()
        }
    }
}
