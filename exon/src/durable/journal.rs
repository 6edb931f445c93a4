//! The journal on stable storage: the core's [`Write`]s appended to a [`Log`], committed in
//! groups, replayed at recovery and compacted to what is still live.

use crate::durable::backend::{Backend, DetachedSync};
use crate::durable::log::{Log, LogConfig, LogError, Lsn};
use crate::proto::journal::{Entry, Recovered, State, Write};

/// How a journal uses its storage.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// The log's segments and record limit.
    pub log: LogConfig,
    /// The most bytes the journal may take on disk; past it, writes are refused with
    /// [`JournalError::Full`] (sends are refused, nothing is acknowledged that is not
    /// stored).
    pub max_disk_bytes: u64,
    /// A compaction runs once the log grew by this much since the last one, and by four
    /// times what is live. Default 64 MiB: a compaction stops the journal's group commits
    /// for a new segment and three syncs (about 10 ms on a loaded 2-core machine), so a
    /// busy journal compacts about once a second instead of ten times; a restart then
    /// replays at most this much (about 0.1 s from the page cache, `journal_state` bench).
    pub compact_after: u64,
    /// Group commit: how long the endpoint lets records gather before it writes and syncs
    /// them (0: as soon as the previous group is written and there is room for its sync;
    /// whatever comes meanwhile goes in the next one). A delay trades latency for fewer,
    /// larger syncs.
    pub commit_delay: std::time::Duration,
    /// Group commit: the most bytes of records one sync takes; a batch this large is
    /// synced without waiting for `commit_delay`.
    pub max_batch_bytes: usize,
    /// When opening finds synced records damaged (and cuts them), write and sync a
    /// `Damaged` record before anything else ([`Entry::Damaged`]), so that a crash before
    /// the restarted node's next `Covers` record still tells the next recovery. Default
    /// true; off only to show what it prevents (as the core's `Rules`): the cut log reads
    /// clean at the next opening, which vouches again for what the damage took.
    pub mark_damage: bool,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            log: LogConfig::default(),
            max_disk_bytes: 4 << 30,
            compact_after: 64 << 20,
            commit_delay: std::time::Duration::ZERO,
            max_batch_bytes: 8 << 20,
            mark_damage: true,
        }
    }
}

/// An error of the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The log failed (I/O error, full disk, poisoned). Nothing written since the last
    /// successful commit is reported durable; reopen to go on.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The journal would pass [`JournalConfig::max_disk_bytes`].
    #[error("journal full: {disk} bytes on disk, limit {max}")]
    Full {
        /// Bytes on disk and pending.
        disk: u64,
        /// The limit.
        max: u64,
    },
}

/// What [`Journal::write`] wrote, and the sync that makes it durable, to run apart from the
/// journal (on another thread) while the next writes are appended and written.
#[derive(Debug)]
pub struct JournalSync<S> {
    synced: Synced,
    /// `None`: durable already.
    sync: Option<S>,
}

impl<S: DetachedSync> JournalSync<S> {
    /// The number of the last write it makes durable.
    pub fn through(&self) -> u64 {
        self.synced.through
    }

    /// What was written, if it is durable already (there is no sync to run).
    pub fn durable(&self) -> Option<Synced> {
        self.sync.is_none().then_some(self.synced)
    }

    /// Runs the sync. On success, tell the journal with [`Journal::synced`] once every
    /// sync of an earlier write succeeded too; on failure, with [`Journal::sync_failed`].
    pub fn run(self) -> Result<Synced, JournalError> {
        if let Some(sync) = self.sync {
            sync.run().map_err(|e| JournalError::Log(LogError::Io(e)))?;
        }
        Ok(self.synced)
    }
}

/// A [`JournalSync`] that ran: every write through [`through`](Self::through) is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synced {
    through: u64,
    lsn: Lsn,
}

impl Synced {
    /// The number of the last write now durable.
    pub fn through(&self) -> u64 {
        self.through
    }
}

/// What a journal found when it was opened.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpenReport {
    /// Records replayed.
    pub records: usize,
    /// Bytes cut off the log's tail (a write torn by a crash: never synced data).
    pub torn_bytes: u64,
    /// Records that did not decode, or synced data the log lost: the node then answers
    /// DOUBT rather than LOST for what it cannot vouch for.
    pub damaged: bool,
}

/// A journal: the log, and the live state its records replay to.
pub struct Journal<B: Backend> {
    log: Log<B>,
    state: State,
    cfg: JournalConfig,
    /// The number of the last write appended.
    appended: u64,
    /// Every write up to this one is durable.
    durable: u64,
    /// Compactions done.
    compactions: u64,
    scratch: Vec<u8>,
}

impl<B: Backend> std::fmt::Debug for Journal<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("appended", &self.appended)
            .field("durable", &self.durable)
            .field("disk_bytes", &self.log.disk_bytes())
            .finish()
    }
}

impl<B: Backend> Journal<B> {
    /// Opens the journal in `backend`: recovers the log and replays it. Returns the journal,
    /// what the node is to [`recover`](crate::proto::Node::recover), and a report.
    pub fn open(
        backend: B,
        cfg: JournalConfig,
    ) -> Result<(Journal<B>, Recovered, OpenReport), JournalError> {
        let (log, rec) = Log::open(backend, cfg.log.clone())?;
        let mut state = State::new();
        let mut report = OpenReport {
            records: rec.entries.len(),
            torn_bytes: rec.torn_bytes,
            damaged: rec.lost_synced_data(),
        };
        for bytes in &rec.entries {
            match Entry::decode(bytes) {
                Ok(e) => state.apply(&e),
                Err(_) => report.damaged = true,
            }
        }
        let mut journal = Journal {
            log,
            state,
            cfg,
            appended: 0,
            durable: 0,
            compactions: 0,
            scratch: Vec::new(),
        };
        if report.damaged && journal.cfg.mark_damage {
            // The log was cut at the damage and now reads clean: say so in it, synced
            // before the node acts on anything, until the node's next `Covers` record.
            journal.mark_damaged()?;
        }
        let recovered = journal.state.recovered(report.damaged);
        Ok((journal, recovered, report))
    }

    /// Writes and syncs a `Damaged` record (see [`Entry::Damaged`]).
    fn mark_damaged(&mut self) -> Result<(), JournalError> {
        self.scratch.clear();
        Entry::Damaged.encode(&mut self.scratch);
        self.log.append(&self.scratch)?;
        self.log.commit()?;
        self.state.apply(&Entry::Damaged);
        Ok(())
    }

    /// Appends `w` (not durable until [`commit`](Self::commit)). Writes come in the order
    /// the node numbered them.
    pub fn append(&mut self, w: &Write) -> Result<(), JournalError> {
        let len = w.entry.encoded_len() as u64;
        let disk = self.log.disk_bytes() + self.log.pending_bytes() as u64 + len;
        if disk > self.cfg.max_disk_bytes {
            return Err(JournalError::Full {
                disk,
                max: self.cfg.max_disk_bytes,
            });
        }
        self.scratch.clear();
        w.entry.encode(&mut self.scratch);
        self.log.append(&self.scratch)?;
        self.state.apply(&w.entry);
        self.appended = w.seq;
        Ok(())
    }

    /// Writes and syncs what was appended; returns the number of the last write now
    /// durable (report it with [`Node::handle_stored`](crate::proto::Node::handle_stored)).
    /// Compacts the log afterwards when it grew enough.
    pub fn commit(&mut self) -> Result<u64, JournalError> {
        if self.appended > self.durable {
            self.log.commit()?;
            self.durable = self.appended;
        }
        if self.compaction_due() {
            self.compact()?;
        }
        Ok(self.durable)
    }

    /// Writes what was appended without syncing it (pipelined group commit): returns the
    /// sync that makes it durable, to run apart while the next writes are appended and
    /// written. It has nothing to run when every write appended is durable already (nothing
    /// was written since the last sync, or the log grew enough to compact, which
    /// [`commit`](Self::commit)s first). A sync makes durable what its own write wrote; the
    /// writes before it are durable once their syncs succeeded too.
    pub fn write(&mut self) -> Result<JournalSync<B::Sync>, JournalError> {
        if self.compaction_due() {
            self.commit()?;
        } else {
            let written = self.log.write()?;
            let synced = Synced {
                through: self.appended,
                lsn: written.lsn,
            };
            if written.sync.is_some() {
                return Ok(JournalSync {
                    synced,
                    sync: written.sync,
                });
            }
            self.durable = self.appended;
        }
        Ok(JournalSync {
            synced: Synced {
                through: self.durable,
                lsn: self.log.durable_lsn(),
            },
            sync: None,
        })
    }

    /// A sync from [`write`](Self::write) succeeded.
    pub fn synced(&mut self, s: Synced) {
        self.log.synced(s.lsn);
        self.durable = self.durable.max(s.through);
    }

    /// A sync from [`write`](Self::write) failed: the journal is poisoned (nothing written
    /// since the last successful sync is reported durable; reopen it).
    pub fn sync_failed(&mut self) {
        self.log.poison();
    }

    /// The number of the last write durable.
    pub fn durable(&self) -> u64 {
        self.durable
    }

    /// Whether the log grew enough since the last compaction. Only growth compacts here, a
    /// log with nothing live too: a busy journal that empties at the end of each commit
    /// would otherwise rewrite itself (a new segment, three syncs, a removal) every few
    /// commits, which halved what it stores per second. A quiet one is emptied by
    /// [`compact_if_quiet`](Self::compact_if_quiet), which the endpoint calls once writes
    /// stop for a while.
    fn compaction_due(&self) -> bool {
        let grown = self.log.bytes_since_checkpoint();
        let live = self.state.live_bytes() as u64;
        grown > self.cfg.compact_after.max(live.saturating_mul(4))
    }

    /// Compacts when nothing is live and the log holds anything: a quiet node's journal
    /// shrinks back to nothing (call it when writes have stopped for a while). Returns
    /// whether it compacted.
    pub fn compact_if_quiet(&mut self) -> Result<bool, JournalError> {
        if self.has_pending() || !self.state.is_empty() || self.log.bytes_since_checkpoint() == 0 {
            return Ok(false);
        }
        self.compact()?;
        Ok(true)
    }

    /// Rewrites the log to the live records only.
    pub fn compact(&mut self) -> Result<(), JournalError> {
        let live: Vec<_> = self.state.live_entries().map(|e| e.to_bytes()).collect();
        self.log.checkpoint(live)?;
        self.compactions += 1;
        Ok(())
    }

    /// Bytes appended and not yet committed (close a group by size).
    pub fn pending_bytes(&self) -> usize {
        self.log.pending_bytes()
    }

    /// Whether writes wait for a commit.
    pub fn has_pending(&self) -> bool {
        self.appended > self.durable
    }

    /// Bytes the journal takes on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.log.disk_bytes()
    }

    /// The live state (what a restart would recover, once committed).
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Compactions done since open.
    pub fn compactions(&self) -> u64 {
        self.compactions
    }

    /// The configuration.
    pub fn config(&self) -> &JournalConfig {
        &self.cfg
    }

    /// The storage, for tests that crash it.
    pub fn backend(&self) -> &B {
        self.log.backend()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::MemBackend;
    use crate::proto::{MsgId, NodeId};
    use bytes::Bytes;

    const A: NodeId = NodeId::from_const(4);

    fn w(seq: u64, entry: Entry) -> Write {
        Write { seq, entry }
    }

    fn accepted(id: u64) -> Entry {
        Entry::Accepted {
            id: MsgId(id),
            to: A,
            payload: Bytes::from(vec![7u8; 100]).into(),
        }
    }

    #[test]
    fn committed_writes_survive_a_crash_and_uncommitted_ones_do_not() {
        let disk = MemBackend::new();
        let (mut j, rec, _) = Journal::open(disk.clone(), JournalConfig::default()).unwrap();
        assert!(rec.messages.is_empty());
        j.append(&w(1, accepted(1))).unwrap();
        j.append(&w(2, accepted(2))).unwrap();
        assert_eq!(j.commit().unwrap(), 2);
        j.append(&w(3, accepted(3))).unwrap();
        drop(j);
        disk.crash(|_, _| 0);
        let (_, rec, report) = Journal::open(disk, JournalConfig::default()).unwrap();
        let ids: Vec<_> = rec.messages.iter().map(|m| m.id.0).collect();
        assert_eq!(ids, [1, 2]);
        assert!(!report.damaged && !rec.damaged);
    }

    /// A disk whose journal committed three records, one at a time, and then had a byte of
    /// the second changed (a synced record with an intact one after it).
    fn damaged_disk(cfg: &JournalConfig) -> MemBackend {
        let disk = MemBackend::new();
        let (mut j, _, _) = Journal::open(disk.clone(), cfg.clone()).unwrap();
        for i in 1..=3 {
            j.append(&w(i, accepted(i))).unwrap();
            j.commit().unwrap();
        }
        drop(j);
        let mut data = disk.segment(0).unwrap();
        let at = data.len() / 2;
        data[at] ^= 0x04;
        disk.put_segment(0, data);
        disk
    }

    /// Issue 42, item 5: a byte flipped in a synced record of the last segment, with intact
    /// records after it, is reported damaged (the node then answers DOUBT), not cut as a
    /// torn write.
    #[test]
    fn a_damaged_synced_record_in_the_last_segment_is_reported_damaged() {
        let disk = damaged_disk(&JournalConfig::default());
        let (_, rec, report) = Journal::open(disk, JournalConfig::default()).unwrap();
        assert!(report.damaged && rec.damaged, "{report:?}");
        assert_eq!((report.records, report.torn_bytes), (1, 0));
    }

    /// A journal whose synced records were damaged, opened (the damage cut), then opened
    /// again after a crash before the node wrote anything: `mark_damage` writes the damage
    /// down at the first opening, so the second still says damaged (without it the cut log
    /// reads clean and vouches again for what the damage took); a `Covers` record, which the
    /// restarted node writes once it has resolved its messages in doubt, ends it, through
    /// compactions too.
    fn damaged_then_reopened(mark_damage: bool) -> (bool, bool) {
        let cfg = JournalConfig {
            mark_damage,
            ..JournalConfig::default()
        };
        let disk = damaged_disk(&cfg);
        let (j, first, _) = Journal::open(disk.clone(), cfg.clone()).unwrap();
        assert!(first.damaged);
        drop(j);
        disk.crash(|_, _| 0);
        let (mut j, second, report) = Journal::open(disk.clone(), cfg.clone()).unwrap();
        assert!(!report.damaged, "the log itself reads clean now");
        if second.damaged {
            j.compact().unwrap();
            let (_, again, _) = Journal::open(disk.clone(), cfg.clone()).unwrap();
            assert!(again.damaged, "kept by a compaction");
        }
        let (mut j, _, _) = Journal::open(disk.clone(), cfg.clone()).unwrap();
        j.append(&w(
            1,
            Entry::Covers {
                from: 50,
                below: 60,
            },
        ))
        .unwrap();
        j.commit().unwrap();
        j.compact().unwrap();
        drop(j);
        let (_, third, _) = Journal::open(disk, cfg).unwrap();
        (second.damaged, third.damaged)
    }

    #[test]
    fn damage_found_is_remembered_until_the_node_covers_again() {
        assert_eq!(damaged_then_reopened(true), (true, false));
        assert_eq!(
            damaged_then_reopened(false),
            (false, false),
            "without the mark, forgotten at the next opening"
        );
    }

    #[test]
    fn a_quiet_journal_compacts_to_nothing() {
        let disk = MemBackend::new();
        let cfg = JournalConfig::default();
        let (mut j, _, _) = Journal::open(disk.clone(), cfg.clone()).unwrap();
        for i in 1..=200 {
            j.append(&w(2 * i - 1, accepted(i))).unwrap();
            j.append(&w(
                2 * i,
                Entry::Resolved {
                    id: MsgId(i),
                    verdict: None,
                },
            ))
            .unwrap();
        }
        j.commit().unwrap();
        assert!(j.disk_bytes() > 1000);
        assert!(j.compact_if_quiet().unwrap(), "nothing live");
        assert!(!j.compact_if_quiet().unwrap(), "once");
        assert!(j.disk_bytes() < 64, "{} bytes left", j.disk_bytes());
        drop(j);
        let (_, rec, report) = Journal::open(disk, cfg).unwrap();
        assert!(rec.messages.is_empty() && rec.deliveries.is_empty());
        assert_eq!(report.records, 0);
    }

    /// A busy journal that holds nothing live at the end of each commit (every message
    /// resolved within its batch) compacts only once it grew by `compact_after`, not every
    /// few hundred KiB (the old rule compacted such a log past 256 KiB: 7 times here).
    #[test]
    fn a_journal_empty_after_each_commit_compacts_only_as_it_grows() {
        let disk = MemBackend::new();
        let cfg = JournalConfig {
            compact_after: 1 << 20,
            ..JournalConfig::default()
        };
        let (mut j, _, _) = Journal::open(disk.clone(), cfg).unwrap();
        let (mut seq, mut id) = (0, 0);
        for _ in 0..200 {
            for _ in 0..10 {
                id += 1;
                seq += 1;
                let payload = Bytes::from(vec![7u8; 1000]);
                j.append(&w(
                    seq,
                    Entry::Accepted {
                        id: MsgId(id),
                        to: A,
                        payload: payload.into(),
                    },
                ))
                .unwrap();
                seq += 1;
                let verdict = None;
                j.append(&w(
                    seq,
                    Entry::Resolved {
                        id: MsgId(id),
                        verdict,
                    },
                ))
                .unwrap();
            }
            j.commit().unwrap();
        }
        assert!(
            (1..=2).contains(&j.compactions()),
            "{} compactions",
            j.compactions()
        );
        assert!(
            j.disk_bytes() <= (1 << 20) + 20_000,
            "bounded by compact_after"
        );
        assert!(
            j.compact_if_quiet().unwrap(),
            "a quiet journal still empties"
        );
        assert!(j.disk_bytes() < 64);
    }

    #[test]
    fn a_busy_journal_compacts_to_its_live_records() {
        let disk = MemBackend::new();
        let cfg = JournalConfig {
            compact_after: 4096,
            ..JournalConfig::default()
        };
        let (mut j, _, _) = Journal::open(disk.clone(), cfg.clone()).unwrap();
        let mut seq = 0;
        for i in 1..=500u64 {
            seq += 1;
            j.append(&w(seq, accepted(i))).unwrap();
            if i > 3 {
                seq += 1;
                j.append(&w(
                    seq,
                    Entry::Resolved {
                        id: MsgId(i - 3),
                        verdict: None,
                    },
                ))
                .unwrap();
            }
            j.commit().unwrap();
        }
        assert!(j.compactions() > 5);
        assert!(j.disk_bytes() < 16 << 10, "{} bytes", j.disk_bytes());
        drop(j);
        let (_, rec, _) = Journal::open(disk, cfg).unwrap();
        let ids: Vec<_> = rec.messages.iter().map(|m| m.id.0).collect();
        assert_eq!(ids, [498, 499, 500]);
    }

    #[test]
    fn a_full_journal_refuses_writes_with_a_typed_error() {
        let cfg = JournalConfig {
            max_disk_bytes: 1000,
            ..JournalConfig::default()
        };
        let (mut j, _, _) = Journal::open(MemBackend::new(), cfg).unwrap();
        let mut seq = 0;
        let err = loop {
            seq += 1;
            if let Err(e) = j.append(&w(seq, accepted(seq))) {
                break e;
            }
        };
        assert!(matches!(err, JournalError::Full { max: 1000, .. }), "{err}");
        assert!(seq > 5);
        // What was appended before still commits.
        assert_eq!(j.commit().unwrap(), seq - 1);
    }

    #[test]
    fn a_failing_disk_commits_nothing_and_says_so() {
        let disk = MemBackend::new();
        let (mut j, _, _) = Journal::open(disk.clone(), JournalConfig::default()).unwrap();
        j.append(&w(1, accepted(1))).unwrap();
        j.commit().unwrap();
        disk.fail_syncs(true);
        j.append(&w(2, accepted(2))).unwrap();
        assert!(j.commit().is_err());
        assert!(j.commit().is_err(), "poisoned: never reports it durable");
    }
}
