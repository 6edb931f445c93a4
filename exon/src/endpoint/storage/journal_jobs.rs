//! The driver's journal jobs (durable mode): the node's writes appended, written and synced
//! on blocking threads in groups, the next group written while the previous one syncs
//! (pipelined group commit), and the compaction of a quiet journal.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::sync_line::{SyncDone, SyncLine};
use crate::durable::{Backend, FsBackend, Journal, JournalError, JournalSync, Synced};
use crate::proto::journal::Write;

/// What a write job hands back before it syncs: the journal, and the sync of the group it
/// wrote if it does not run it itself (`None`: it runs it, or it compacted), or why it
/// failed.
type WriteDone<B> = (
    Journal<B>,
    Result<Option<JournalSync<<B as Backend>::Sync>>, JournalError>,
);

/// A write job under way: its journal comes back on this channel.
type WriteJob<B> = oneshot::Receiver<Box<WriteDone<B>>>;

/// A job of the journal that ended.
pub(crate) enum JournalEvent<B: Backend = FsBackend> {
    /// The write job handed the journal back (a group written, or a compaction).
    Written(Result<Box<WriteDone<B>>, oneshot::error::RecvError>),
    /// The sync of group `.0`.
    Synced(u64, SyncDone),
}

/// Syncs of one journal running at once. Two overlap well on the disks measured (two
/// threads syncing 36 KiB each to one file: each sync 10 % slower, 1.75 times the syncs per
/// second), so a group written while another syncs need not wait for it to end.
const MAX_SYNCS: usize = 2;

/// After this long without a write, a journal with nothing live is compacted to nothing.
const QUIET: Duration = Duration::from_secs(1);

/// The journal, the writes waiting for it, and the jobs under way: at most one write job
/// holding the journal (it hands the journal back once its group is written, then syncs
/// the group itself when there was room for a sync), up to [`MAX_SYNCS`] syncs at once,
/// and one written group waiting for room. A write is reported durable only once its own
/// group's sync and those of every group written before it succeeded.
pub(crate) struct JournalJobs<B: Backend = FsBackend> {
    /// The journal, when no job holds it (`None` forever after a failure).
    journal: Option<Journal<B>>,
    /// The write job holding the journal (until it hands it back), and its group's number
    /// (`None`: a compaction).
    job: Option<(WriteJob<B>, Option<u64>)>,
    /// The groups written or being written, not yet reported.
    line: SyncLine<B::Sync>,
    /// The last group durable, not yet told to the journal (a write job held it).
    synced: Option<Synced>,
    /// The last write reported durable.
    durable: u64,
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

impl<B: Backend> JournalJobs<B> {
    pub(crate) fn new(journal: Journal<B>) -> JournalJobs<B> {
        Self::with_max_syncs(journal, MAX_SYNCS)
    }

    /// With at most `max_syncs` syncs at once.
    fn with_max_syncs(journal: Journal<B>, max_syncs: usize) -> JournalJobs<B> {
        let (delay, max_batch) = (
            journal.config().commit_delay,
            journal.config().max_batch_bytes.max(1),
        );
        JournalJobs {
            durable: journal.durable(),
            journal: Some(journal),
            job: None,
            line: SyncLine::new(max_syncs),
            synced: None,
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

    /// Whether a write job may start: none holds the journal, and no group already waits
    /// for the sync under way (one group is written ahead, not more: the writes that come
    /// meanwhile gather for the next).
    fn can_write(&self) -> bool {
        !self.failed && self.job.is_none() && !self.line.has_waiting()
    }

    /// Whether the journal is at rest: no job, no sync, nothing pending.
    fn at_rest(&self) -> bool {
        self.can_write() && self.line.is_empty() && self.pending.is_empty()
    }

    /// Starts a group commit of the pending writes (written now, even while the previous
    /// group syncs), unless a write job runs or a group waits for its sync; or, after a
    /// quiet while, a compaction of a journal with nothing live.
    pub(crate) fn start(&mut self, t: Instant) {
        if !self.can_write() {
            return;
        }
        let quiet = self.at_rest()
            && self
                .last_write
                .is_some_and(|w| t.saturating_duration_since(w) >= QUIET);
        if (self.pending.is_empty() && !quiet) || self.gathering(t) {
            return;
        }
        let Some(mut journal) = self.journal.take() else {
            return;
        };
        if let Some(s) = self.synced.take() {
            journal.synced(s);
        }
        let (tx, rx) = oneshot::channel();
        if quiet {
            self.last_write = None;
            tokio::task::spawn_blocking(move || {
                let r = journal.compact_if_quiet().map(|_| None);
                let _ = tx.send(Box::new((journal, r)));
            });
            self.job = Some((rx, None));
            return;
        }
        let writes = self.take_batch();
        let inline = self.line.has_room();
        let job = tokio::task::spawn_blocking(move || {
            let r = writes
                .iter()
                .try_for_each(|w| journal.append(w))
                .and_then(|()| journal.write());
            // The journal goes back before the sync: the next group is written meanwhile.
            match r {
                Ok(sync) if inline => {
                    let _ = tx.send(Box::new((journal, Ok(None))));
                    Some(sync.run())
                }
                r => {
                    let _ = tx.send(Box::new((journal, r.map(Some))));
                    None
                }
            }
        });
        let id = self.line.begin(inline.then_some(job));
        self.job = Some((rx, Some(id)));
    }

    /// The next group: at most `max_batch` bytes (and at least one write).
    fn take_batch(&mut self) -> Vec<Write> {
        let (mut bytes, mut n) = (self.pending_bytes, self.pending.len());
        if bytes > self.max_batch {
            (bytes, n) = (0, 0);
            for w in &self.pending {
                if n > 0 && bytes + w.entry.encoded_len() > self.max_batch {
                    break;
                }
                bytes += w.entry.encoded_len();
                n += 1;
            }
        }
        // Taken whole (the usual case), the next batch starts with as much room.
        let rest = match n == self.pending.len() {
            true => Vec::with_capacity(n),
            false => self.pending.split_off(n),
        };
        let writes = std::mem::replace(&mut self.pending, rest);
        self.pending_bytes -= bytes;
        if self.pending.is_empty() {
            self.pending_since = None;
        }
        self.commits += 1;
        self.writes += writes.len() as u64;
        self.written_bytes += bytes as u64;
        writes
    }

    /// The next job to end, if any runs.
    pub(crate) fn next_event(&mut self) -> Option<impl Future<Output = JournalEvent<B>> + '_> {
        if self.job.is_none() && self.line.is_empty() {
            return None;
        }
        let (job, line) = (&mut self.job, &mut self.line);
        Some(std::future::poll_fn(move |cx| {
            if let Some((rx, _)) = job {
                if let Poll::Ready(r) = Pin::new(rx).poll(cx) {
                    return Poll::Ready(JournalEvent::Written(r));
                }
            }
            line.poll_sync(cx)
                .map(|(id, r)| JournalEvent::Synced(id, r))
        }))
    }

    /// Waits for the jobs under way to end (the endpoint closes: a journal reopened on the
    /// same directory finds it at rest). What they made durable is not reported.
    pub(crate) async fn settle(&mut self) {
        if let Some((rx, _)) = self.job.take() {
            let _ = rx.await;
        }
        self.line.settle().await;
    }

    /// When pending writes are due for a sync (the commit delay), or the quiet compaction.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        if !self.can_write() {
            return None;
        }
        if let Some(since) = self.pending_since {
            return Some(since + self.delay);
        }
        self.last_write
            .filter(|_| self.at_rest())
            .map(|w| w + QUIET)
    }

    /// A job ended: the number of the last write now durable, if that number grew.
    pub(crate) fn on_event(&mut self, event: JournalEvent<B>) -> Option<u64> {
        let r = match event {
            JournalEvent::Written(Ok(done)) => {
                let (mut journal, r) = *done;
                let id = self.job.take().and_then(|(_, id)| id);
                if let Some(s) = self.synced.take() {
                    journal.synced(s);
                }
                self.disk_bytes = journal.disk_bytes();
                self.journal = Some(journal);
                match (r, id) {
                    (Ok(Some(sync)), Some(id)) => {
                        let durable = self.line.written(id, sync);
                        return self.tell(durable);
                    }
                    (r, _) => r.map(|_| ()),
                }
            }
            JournalEvent::Synced(id, Ok(Some(Ok(synced)))) => {
                let durable = self.line.done(id, synced);
                return self.tell(durable);
            }
            JournalEvent::Synced(_, Ok(Some(Err(e)))) => Err(e),
            JournalEvent::Synced(_, Ok(None)) => {
                // A write job that failed before its sync; its error comes with the journal.
                return None;
            }
            JournalEvent::Written(Err(_)) | JournalEvent::Synced(_, Err(_)) => {
                tracing::error!("journal task failed");
                self.fail();
                return None;
            }
        };
        if let Err(e) = r {
            tracing::error!(
                error = %e,
                "journal failed: nothing more is stored, sends are refused; restart \
                 the endpoint once the disk is fixed"
            );
            self.fail();
        }
        None
    }

    /// Tells the journal, and reports, the last group durable with every group before it.
    fn tell(&mut self, synced: Option<Synced>) -> Option<u64> {
        let synced = synced?;
        match &mut self.journal {
            Some(j) => j.synced(synced),
            None => self.synced = Some(synced),
        }
        self.report(synced.through())
    }

    /// `through` is durable: reported if it is news.
    fn report(&mut self, through: u64) -> Option<u64> {
        (through > self.durable).then(|| {
            self.durable = through;
            through
        })
    }

    /// A job failed: nothing more is stored or reported. Syncs under way are left to end
    /// (their results are not read).
    fn fail(&mut self) {
        self.failed = true;
        self.job = None;
        self.line.clear();
        if let Some(j) = &mut self.journal {
            j.sync_failed();
        }
        self.journal = None;
    }

    /// Bytes the journal took on disk at the end of the last job.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::{JournalConfig, MemBackend};
    use crate::proto::journal::Entry;
    use crate::proto::{MsgId, NodeId};

    fn record(seq: u64) -> Write {
        let entry = Entry::Accepted {
            id: MsgId(seq),
            to: NodeId::from_const(4),
            payload: bytes::Bytes::from(vec![seq as u8; 300]).into(),
        };
        Write { seq, entry }
    }

    async fn next_event(jobs: &mut JournalJobs<MemBackend>) -> Option<JournalEvent<MemBackend>> {
        Some(jobs.next_event()?.await)
    }

    /// The messages a crash now would leave: the synced segments, reopened.
    fn after_crash(disk: &MemBackend) -> Vec<u64> {
        let snapshot = MemBackend::new();
        for (seg, data) in disk.synced_segments() {
            snapshot.put_segment(seg, data);
        }
        let (_, rec, _) = Journal::open(snapshot, JournalConfig::default()).unwrap();
        rec.messages.iter().map(|m| m.id.0).collect()
    }

    /// Groups written while others sync (a slow disk), syncs side by side or one at a
    /// time: every write reported durable survives a crash at the moment it is reported,
    /// and every write is reported.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_write_reported_durable_survives_a_crash_then() {
        for max_syncs in [1, 2, 3] {
            let written_behind = reported_writes_survive(max_syncs).await;
            assert!(written_behind > 0, "no group written behind a sync");
        }
    }

    /// Returns how many groups were written while a sync ran.
    async fn reported_writes_survive(max_syncs: usize) -> usize {
        let disk = MemBackend::new();
        disk.set_sync_delay(Duration::from_millis(2));
        let (journal, _, _) = Journal::open(disk.clone(), JournalConfig::default()).unwrap();
        let mut jobs = JournalJobs::with_max_syncs(journal, max_syncs);
        let mut written_behind = 0;
        let (mut next, mut durable, mut reports) = (1, 0, 0);
        while durable < 400 {
            // Writes come in bursts while jobs run, so groups are written behind syncs.
            for _ in 0..7 {
                if next <= 400 {
                    jobs.want(Instant::now(), record(next));
                    next += 1;
                }
            }
            let behind = !jobs.line.is_empty() && jobs.job.is_none();
            jobs.start(Instant::now());
            written_behind += usize::from(behind && jobs.job.is_some());
            let Some(event) = next_event(&mut jobs).await else {
                continue;
            };
            if let Some(through) = jobs.on_event(event) {
                assert!(through > durable);
                durable = through;
                reports += 1;
                let kept = after_crash(&disk);
                assert!(
                    (1..=through).all(|id| kept.contains(&id)),
                    "reported {through}, a crash keeps {kept:?}"
                );
            }
            assert!(!jobs.failed());
        }
        assert!(reports > 1);
        assert!(jobs.commits > 1 && jobs.writes == 400);
        written_behind
    }

    /// A sync that fails fails the journal: after a group reported durable, the groups
    /// whose syncs fail are not reported, and nothing more is stored.
    #[tokio::test]
    async fn a_failed_sync_reports_nothing_more() {
        let disk = MemBackend::new();
        let (journal, _, _) = Journal::open(disk.clone(), JournalConfig::default()).unwrap();
        let mut jobs = JournalJobs::new(journal);
        jobs.want(Instant::now(), record(1));
        jobs.start(Instant::now());
        let mut reported = None;
        while reported.is_none() {
            let event = next_event(&mut jobs).await.expect("a job runs");
            reported = jobs.on_event(event);
        }
        assert_eq!(reported, Some(1));
        disk.fail_syncs(true);
        for seq in 2..=3 {
            jobs.want(Instant::now(), record(seq));
            jobs.start(Instant::now());
        }
        while let Some(event) = next_event(&mut jobs).await {
            assert_eq!(jobs.on_event(event), None);
            jobs.start(Instant::now());
        }
        assert!(jobs.failed());
        jobs.want(Instant::now(), record(4));
        jobs.start(Instant::now());
        assert!(
            jobs.next_event().is_none(),
            "a failed journal starts nothing"
        );
    }
}
