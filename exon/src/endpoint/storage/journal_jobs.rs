//! The driver's journal jobs (durable mode): the node's writes, appended and written on a
//! blocking thread in groups, and synced on another while the next group is written (a
//! pipelined group commit), and the compaction of a journal that grew or went quiet.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::task::{JoinError, JoinHandle};

use crate::durable::{FsBackend, Journal, JournalError, SyncHandle};
use crate::proto::journal::Write;

/// The journal of an endpoint.
pub(crate) type EndpointJournal = Journal<FsBackend>;

/// What a write job did: its writes are durable through a number, or written and waiting
/// for the sync of a segment.
pub(crate) enum Step {
    /// Every write up to this one is durable (a commit or a compaction ran, or nothing was
    /// left to sync). 0: nothing new.
    Durable(u64),
    /// Written up to this one; the handle makes them durable.
    Written(u64, SyncHandle),
}

/// What a write job gives back: the journal, and what it did (or why it failed).
pub(crate) type JournalDone = (EndpointJournal, Result<Step, JournalError>);

/// A job that ended: a write job (the journal back), or a sync (durable through a number).
pub(crate) enum JobEnd {
    Write(Box<Result<JournalDone, JoinError>>),
    Sync(Result<std::io::Result<u64>, JoinError>),
}

/// After this long without a write, a journal with nothing live is compacted to nothing.
const QUIET: Duration = Duration::from_secs(1);

/// The journal and the writes waiting for it.
pub(crate) struct JournalJobs {
    /// The journal, when no job holds it (`None` forever after a failure).
    journal: Option<EndpointJournal>,
    /// The job that holds the journal: writes appended and written, a commit, or a
    /// compaction.
    job: Option<JoinHandle<JournalDone>>,
    /// The sync under way, and the number of the last write it makes durable.
    sync: Option<JoinHandle<std::io::Result<u64>>>,
    /// Written and not yet being synced: the last write's number and its segment's handle
    /// (a later write's replaces it: its sync covers the earlier bytes of its segment, and
    /// a segment left behind was synced when the next one was made).
    unsynced: Option<(u64, SyncHandle)>,
    /// The last write known durable, for the journal when it comes back.
    synced: u64,
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
    /// Group commits done (syncs of writes), writes in them, and those writes' encoded
    /// bytes (record framing left out).
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
            sync: None,
            unsynced: None,
            synced: 0,
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

    /// Starts what can start: the sync of what was written, unless one runs; a write job
    /// for the pending writes while that sync runs (the next group is written meanwhile),
    /// unless one runs; and, with nothing being synced, a compaction of a journal that
    /// grew (its writes wait for it) or went quiet.
    pub(crate) fn start(&mut self, t: Instant) {
        if self.failed {
            return;
        }
        if self.sync.is_none() {
            if let Some((through, handle)) = self.unsynced.take() {
                self.commits += 1;
                self.sync = Some(tokio::task::spawn_blocking(move || {
                    handle.sync().map(|()| through)
                }));
            }
        }
        if self.job.is_some() {
            return;
        }
        let Some(journal) = self.journal.as_mut() else {
            return;
        };
        journal.synced(self.synced);
        let idle = self.sync.is_none() && self.unsynced.is_none();
        if journal.wants_compaction() {
            // Compacted once what was written is synced: the checkpoint takes the writes
            // pending too, in one commit.
            if idle {
                self.run(true);
            }
            return;
        }
        let quiet = self.pending.is_empty()
            && idle
            && self
                .last_write
                .is_some_and(|w| t.saturating_duration_since(w) >= QUIET);
        if quiet {
            self.last_write = None;
            let Some(mut journal) = self.journal.take() else {
                return;
            };
            self.job = Some(tokio::task::spawn_blocking(move || {
                let r = journal.compact_if_quiet().map(|_| Step::Durable(0));
                (journal, r)
            }));
            return;
        }
        if self.pending.is_empty() || self.gathering(t) {
            return;
        }
        self.run(false);
    }

    /// Hands the pending writes (at most `max_batch` bytes, at least one write) to a job
    /// that appends and writes them, and with `commit` syncs and compacts too.
    fn run(&mut self, commit: bool) {
        let Some(mut journal) = self.journal.take() else {
            return;
        };
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
        self.writes += writes.len() as u64;
        self.written_bytes += bytes as u64;
        if commit {
            self.commits += 1;
        }
        self.job = Some(tokio::task::spawn_blocking(move || {
            let r = writes
                .iter()
                .try_for_each(|w| journal.append(w))
                .and_then(|()| write_or_commit(&mut journal, commit));
            (journal, r)
        }));
    }

    /// The jobs under way, to wait for the first to end.
    pub(crate) fn job(&mut self) -> Option<Jobs<'_>> {
        (self.job.is_some() || self.sync.is_some()).then_some(Jobs {
            write: &mut self.job,
            sync: &mut self.sync,
        })
    }

    /// Waits for every job under way (the endpoint closes: it finds the journal at rest
    /// when it is opened again).
    pub(crate) async fn settle(&mut self) {
        if let Some(job) = self.job.take() {
            if let Ok((journal, _)) = job.await {
                self.journal = Some(journal);
            }
        }
        if let Some(sync) = self.sync.take() {
            let _ = sync.await;
        }
        if let Some((_, handle)) = self.unsynced.take() {
            let _ = tokio::task::spawn_blocking(move || handle.sync()).await;
        }
    }

    /// When pending writes are due for a write job (the commit delay), or the quiet
    /// compaction.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if self.job.is_some() || self.failed {
            return None;
        }
        if let Some(since) = self.pending_since {
            return Some(since + self.delay);
        }
        self.last_write.map(|w| w + QUIET)
    }

    /// A job ended: the number of the last write now durable, if that moved.
    pub(crate) fn on_done(&mut self, end: JobEnd) -> Option<u64> {
        let end = match end {
            JobEnd::Write(r) => Ok(*r),
            JobEnd::Sync(r) => Err(r),
        };
        let durable = match end {
            Ok(Ok((journal, Ok(step)))) => {
                self.disk_bytes = journal.disk_bytes();
                self.journal = Some(journal);
                match step {
                    Step::Durable(through) => {
                        // A commit synced everything written before it too.
                        self.unsynced = None;
                        through
                    }
                    Step::Written(through, handle) => {
                        self.unsynced = Some((through, handle));
                        0
                    }
                }
            }
            Err(Ok(Ok(through))) => through,
            Ok(Ok((_, Err(e)))) => return self.fail(&e),
            Err(Ok(Err(e))) => return self.fail(&e),
            Ok(Err(e)) | Err(Err(e)) => return self.fail(&e),
        };
        (durable > self.synced).then(|| {
            self.synced = durable;
            durable
        })
    }

    fn fail(&mut self, e: &dyn std::fmt::Display) -> Option<u64> {
        tracing::error!(
            error = %e,
            "journal failed: nothing more is stored, sends are refused; restart the \
             endpoint once the disk is fixed"
        );
        self.failed = true;
        None
    }

    /// Bytes the journal took on disk at the end of the last job.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }
}

/// The second half of a write job: the batch written (its sync left to a job of its own),
/// or, with `commit`, written, synced and compacted.
fn write_or_commit(journal: &mut EndpointJournal, commit: bool) -> Result<Step, JournalError> {
    if commit {
        return journal.commit().map(Step::Durable);
    }
    match journal.write()? {
        (through, None) => Ok(Step::Durable(through)),
        (through, Some(seg)) => {
            let handle = journal
                .backend_mut()
                .sync_handle(seg)
                .map_err(|e| JournalError::Log(crate::durable::LogError::Io(e)))?;
            Ok(Step::Written(through, handle))
        }
    }
}

/// The write job and the sync under way, awaited together.
pub(crate) struct Jobs<'a> {
    write: &'a mut Option<JoinHandle<JournalDone>>,
    sync: &'a mut Option<JoinHandle<std::io::Result<u64>>>,
}

impl Future for Jobs<'_> {
    type Output = JobEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<JobEnd> {
        let this = self.get_mut();
        if let Some(sync) = this.sync.as_mut() {
            if let Poll::Ready(r) = Pin::new(sync).poll(cx) {
                *this.sync = None;
                return Poll::Ready(JobEnd::Sync(r));
            }
        }
        if let Some(write) = this.write.as_mut() {
            if let Poll::Ready(r) = Pin::new(write).poll(cx) {
                *this.write = None;
                return Poll::Ready(JobEnd::Write(Box::new(r)));
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::durable::JournalConfig;
    use crate::proto::journal::Entry;
    use crate::proto::{MsgId, NodeId};

    fn write(seq: u64) -> Write {
        let payload = Bytes::from(vec![7u8; 1000]);
        let entry = Entry::Accepted {
            id: MsgId(seq),
            to: NodeId::from_const(9),
            payload,
        };
        Write { seq, entry }
    }

    /// The next group is written while the sync of the one before runs, and neither is
    /// reported durable before its own sync has returned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_group_is_written_while_a_sync_runs() {
        let dir = tempfile::tempdir().unwrap();
        let backend = FsBackend::open(dir.path()).unwrap();
        let (journal, _, _) = Journal::open(backend, JournalConfig::default()).unwrap();
        let mut jobs = JournalJobs::new(journal);
        let t = Instant::now();
        jobs.want(t, write(1));
        jobs.start(t);
        let end = jobs.job().expect("a write job").await;
        assert!(matches!(end, JobEnd::Write(_)));
        assert_eq!(jobs.on_done(end), None, "written, not yet synced");
        jobs.want(t, write(2));
        jobs.start(t);
        assert!(
            jobs.sync.is_some() && jobs.job.is_some(),
            "the sync of write 1 and the write of write 2 run together"
        );
        let mut durable = Vec::new();
        while let Some(wait) = jobs.job() {
            let end = wait.await;
            durable.extend(jobs.on_done(end));
            jobs.start(t);
        }
        assert_eq!(durable, [1, 2], "each reported once its own sync returned");
        assert_eq!(jobs.commits, 2);
    }
}
