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
    /// The defect `JournalConfig::mark_damage` prevents (self-test only): damage found at
    /// an opening is not written down, so the next opening, which finds the cut log clean,
    /// vouches again for what the damage took.
    pub forget_damage: bool,
    /// The probability that a restart brings the host back with a new, empty journal (its
    /// directory lost, its clock kept): what its old journal vouched for is gone, so tokens
    /// of its earlier incarnations must get DOUBT, never LOST. The oracle then excuses
    /// `InDoubt` for the messages to it that were unsettled at that restart.
    pub journal_loss: f64,
    /// Durable mode switched on: every host runs without a journal until its first
    /// restart, and comes back durable (with a new journal, its clock kept). Messages to it
    /// unsettled at that restart may end in doubt.
    pub switch_on: bool,
    /// A host's directory restored from an older copy (see [`RestoreModel`]). `None`:
    /// never.
    pub restore: Option<RestoreModel>,
    /// With deadlines ([`Scenario::deadline`](crate::Scenario::deadline)): the probability
    /// that a message given up is followed by crashes of both sides, the sender's within
    /// two sync latencies (often before its `Resolved` record is synced) and the receiver's
    /// within four. At most [`ABANDON_CRASHES`] such crashes per run.
    pub abandon_crash: f64,
    /// Keyed sends from an outbox (`Node::send_keyed`): each application sends every
    /// message under its sequence number as the key, keeps it in its own (perfectly
    /// durable) outbox until it has a verdict, and at each restart sends again, in order,
    /// every message it holds no verdict for. A refusal (`KeyNotAbove`) means exon had
    /// accepted it. The oracle then excuses no message of a restarted sender: each must
    /// be delivered exactly once.
    pub keyed: bool,
    /// With [`keyed`](Self::keyed), a self-test: the outbox is sent again with plain
    /// `send`s after a restart (the sender's gap keyed sends close): the oracle must find
    /// messages delivered twice.
    pub resend_unkeyed: bool,
}

/// Most crash pairs [`JournalModel::abandon_crash`] adds to one run.
pub const ABANDON_CRASHES: u32 = 16;

/// Directories restored from an older copy: at each restart of a host, the copy it holds
/// (its clock and journal as they were at an earlier restart, taken when it held none) is
/// put back with probability [`probability`](Self::probability) instead of what its last
/// run left. The restarted node starts from `max(stored clock, floor)`, as
/// `exon::endpoint::FileStore::load` does with the wall clock, where the floor is
/// [`FLOOR_BASE`] plus the virtual time in microseconds times
/// [`floor_rate`](Self::floor_rate) (applied at every restart, as the real store does).
///
/// What a restored host delivered, took or sent between its copy and the crash is lost
/// with the copy: the oracle tolerates, and counts, exactly those consequences (see
/// [`Oracle::on_restored`](crate::Oracle::on_restored)).
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreModel {
    /// Probability that a restart restores the copy held.
    pub probability: f64,
    /// Wall-clock microseconds per microsecond of virtual time. The real floor assumes a
    /// node's clock does not run ahead of the wall clock, but each restart moves the clock
    /// up by `clock_block` (2^20 by default, about a second of microseconds), and the
    /// simulator crashes hosts every hundred milliseconds or so: at rate 1 the clock of a
    /// crash loop runs ahead of the floor. The default, 1000, makes the simulator's wall
    /// clock as far ahead of its restarts as a real one is of restarts a few minutes apart.
    /// 0: no floor (the node starts from its stored clock: the defect the floor fixes).
    pub floor_rate: u64,
    /// The application forgets its deadlines at a restore: a message the restored node
    /// has in flight again, whose deadline passed in the lost run, is not given up again
    /// but waits for its verdict (else it is given up at once, `Sim::deadline_again`).
    /// Such messages are sent again in the slots the copy knew, which the lost run's
    /// frontier may have waived unfilled: the class `Rules::doubt_below_forgotten` covers.
    pub forgets_deadlines: bool,
}

/// The sim's wall clock at virtual time zero, in microseconds: above every clock value a
/// node reaches from a start at 0 (each restart adds `clock_block`, 2^20 by default).
pub const FLOOR_BASE: u64 = 1 << 40;

impl Default for RestoreModel {
    fn default() -> Self {
        RestoreModel {
            probability: 0.5,
            floor_rate: 1000,
            forgets_deadlines: false,
        }
    }
}

impl RestoreModel {
    /// The floor of a restart at `now_ns` of virtual time, if there is one.
    pub fn floor(&self, now_ns: u64) -> Option<u64> {
        (self.floor_rate > 0)
            .then(|| FLOOR_BASE.saturating_add((now_ns / 1000).saturating_mul(self.floor_rate)))
    }
}

impl Default for JournalModel {
    fn default() -> Self {
        JournalModel {
            compact_after: 16 << 10,
            segment_bytes: 64 << 10,
            crash_mid_commit: 0.0,
            crash_mid_compaction: 0.5,
            damage: 0.0,
            forget_damage: false,
            journal_loss: 0.0,
            switch_on: false,
            restore: None,
            abandon_crash: 0.0,
            keyed: false,
            resend_unkeyed: false,
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
            mark_damage: !self.forget_damage,
            ..JournalConfig::default()
        }
    }
}
