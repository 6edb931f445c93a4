//! The driver's journal jobs (durable mode): the node's writes, appended and synced on a
//! blocking thread in groups (everything written while the previous sync ran goes in the
//! next), and the compaction of a quiet journal.

use std::time::{Duration, Instant};

use tokio::task::{JoinError, JoinHandle};

use crate::durable::{FsBackend, Journal, JournalError};
use crate::proto::journal::Write;

/// The journal of an endpoint.
pub(crate) type EndpointJournal = Journal<FsBackend>;

/// What a job gives back: the journal, and the number of the last write now durable (or
/// why not).
pub(crate) type JournalDone = (EndpointJournal, Result<u64, JournalError>);

/// A group commit (or a compaction) running on a blocking thread.
pub(crate) type JournalJob = JoinHandle<JournalDone>;

/// After this long without a write, a journal with nothing live is compacted to nothing.
const QUIET: Duration = Duration::from_secs(1);

/// The journal and the writes waiting for it.
pub(crate) struct JournalJobs {
    /// The journal, when no job holds it (`None` forever after a failure).
    journal: Option<EndpointJournal>,
    job: Option<JournalJob>,
    /// Writes not yet handed to a job, in order.
    pending: Vec<Write>,
    /// Their encoded bytes.
    pending_bytes: usize,
    /// When the oldest of them came.
    pending_since: Option<Instant>,
    /// Group commit: how long writes may gather, and the most bytes per sync.
    delay: Duration,
    max_batch: usize,
    /// The journal failed: nothing more is stored (sends are refused).
    failed: bool,
    /// When the last write came, for the quiet compaction.
    last_write: Option<Instant>,
    /// Bytes on disk at the end of the last job.
    disk_bytes: u64,
    /// Group commits done, writes in them, and those writes' encoded bytes (record
    /// framing left out).
    pub(crate) commits: u64,
    pub(crate) writes: u64,
    pub(crate) written_bytes: u64,
}

impl JournalJobs {
    pub(crate) fn new(journal: EndpointJournal) -> JournalJobs {
        let (delay, max_batch) = (
            journal.config().commit_delay,
            journal.config().max_batch_bytes.max(1),
        );
        JournalJobs {
            journal: Some(journal),
            job: None,
            pending: Vec::new(),
            pending_bytes: 0,
            pending_since: None,
            delay,
            max_batch,
            failed: false,
            last_write: None,
            disk_bytes: 0,
            commits: 0,
            writes: 0,
            written_bytes: 0,
        }
    }

    /// The node asks for `w` to be stored.
    pub(crate) fn want(&mut self, t: Instant, w: Write) {
        self.pending_bytes += w.entry.encoded_len();
        self.pending.push(w);
        self.pending_since.get_or_insert(t);
        self.last_write = Some(t);
    }

    /// Whether the pending writes wait for the commit delay at `t`.
    fn gathering(&self, t: Instant) -> bool {
        self.pending_bytes < self.max_batch
            && self
                .pending_since
                .is_some_and(|since| t < since + self.delay)
    }

    /// Whether the journal failed (full or failing disk): the endpoint stores nothing more.
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// Starts a group commit of the pending writes, unless one runs; or, after a quiet
    /// while, a compaction of a journal with nothing live.
    pub(crate) fn start(&mut self, t: Instant) {
        if self.job.is_some() || self.failed {
            return;
        }
        let quiet = self.pending.is_empty()
            && self
                .last_write
                .is_some_and(|w| t.saturating_duration_since(w) >= QUIET);
        if (self.pending.is_empty() && !quiet) || self.gathering(t) {
            return;
        }
        let Some(mut journal) = self.journal.take() else {
            return;
        };
        if quiet {
            self.last_write = None;
            self.job = Some(tokio::task::spawn_blocking(move || {
                let r = journal.compact_if_quiet().map(|_| 0);
                (journal, r)
            }));
            return;
        }
        // At most `max_batch` bytes (and at least one write) per sync.
        let (mut bytes, mut n) = (0, 0);
        for w in &self.pending {
            if n > 0 && bytes + w.entry.encoded_len() > self.max_batch {
                break;
            }
            bytes += w.entry.encoded_len();
            n += 1;
        }
        let rest = self.pending.split_off(n);
        let writes = std::mem::replace(&mut self.pending, rest);
        self.pending_bytes -= bytes;
        if self.pending.is_empty() {
            self.pending_since = None;
        }
        self.commits += 1;
        self.writes += writes.len() as u64;
        self.written_bytes += bytes as u64;
        self.job = Some(tokio::task::spawn_blocking(move || {
            let r = writes
                .iter()
                .try_for_each(|w| journal.append(w))
                .and_then(|()| journal.commit());
            (journal, r)
        }));
    }

    /// The job under way, to wait for.
    pub(crate) fn job(&mut self) -> Option<&mut JournalJob> {
        self.job.as_mut()
    }

    /// When pending writes are due for a sync (the commit delay), or the quiet compaction.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if self.job.is_some() || self.failed {
            return None;
        }
        if let Some(since) = self.pending_since {
            return Some(since + self.delay);
        }
        self.last_write.map(|w| w + QUIET)
    }

    /// The job ended: the number of the last write now durable, if a commit succeeded.
    pub(crate) fn on_done(&mut self, r: Result<JournalDone, JoinError>) -> Option<u64> {
        self.job = None;
        match r {
            Ok((journal, Ok(through))) => {
                self.disk_bytes = journal.disk_bytes();
                self.journal = Some(journal);
                (through > 0).then_some(through)
            }
            Ok((_, Err(e))) => {
                tracing::error!(
                    error = %e,
                    "journal failed: nothing more is stored, sends are refused; restart \
                     the endpoint once the disk is fixed"
                );
                self.failed = true;
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "journal task failed");
                self.failed = true;
                None
            }
        }
    }

    /// Bytes the journal took on disk at the end of the last job.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }
}
