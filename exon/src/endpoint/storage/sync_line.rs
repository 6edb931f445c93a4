//! The line of a journal's group commits between their write and their report: syncs
//! running side by side, reported in the order their groups were written.

use std::collections::VecDeque;
use std::future::Future as _;
use std::task::{Context, Poll};

use tokio::task::{JoinError, JoinHandle};

use crate::durable::{DetachedSync, JournalError, JournalSync, Synced};

/// What a sync gives back (`None`: a write job that ran no sync; never in the line).
pub(crate) type SyncResult = Option<Result<Synced, JournalError>>;

/// What a sync job gives back.
pub(crate) type SyncDone = Result<SyncResult, JoinError>;

/// A group commit's place in the line.
enum Stage<S> {
    /// Its write job runs, and does not sync it (there was no room for a sync when it
    /// started).
    Writing,
    /// Written; its sync waits for room.
    Waiting(JournalSync<S>),
    /// Its sync runs (in its write job, or a job of its own).
    Syncing(JoinHandle<SyncResult>),
    /// Its sync ended; the caller has the result.
    Ended,
    /// Durable; reported once every group before it is.
    Done(Synced),
}

/// The group commits written or being written and not yet reported, oldest first; each
/// numbered. At most `max_syncs` syncs run at once (the write job's own included).
pub(crate) struct SyncLine<S> {
    groups: VecDeque<(u64, Stage<S>)>,
    next_id: u64,
    max_syncs: usize,
}

impl<S: DetachedSync> SyncLine<S> {
    pub(crate) fn new(max_syncs: usize) -> Self {
        SyncLine {
            groups: VecDeque::new(),
            next_id: 0,
            max_syncs: max_syncs.max(1),
        }
    }

    /// Whether nothing is in the line.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Whether a written group waits for room (then no other group is written: the writes
    /// that come meanwhile gather for the next).
    pub(crate) fn has_waiting(&self) -> bool {
        self.groups
            .iter()
            .any(|(_, s)| matches!(s, Stage::Waiting(_)))
    }

    /// Syncs running.
    fn syncing(&self) -> usize {
        self.groups
            .iter()
            .filter(|(_, s)| matches!(s, Stage::Syncing(_) | Stage::Ended))
            .count()
    }

    /// Whether there is room for one more sync: a write job that starts now syncs its
    /// group itself, once it has handed the journal back.
    pub(crate) fn has_room(&self) -> bool {
        self.syncing() < self.max_syncs
    }

    /// A group's write job starts: its number. `sync` is the job, if it syncs the group
    /// itself.
    pub(crate) fn begin(&mut self, sync: Option<JoinHandle<SyncResult>>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let stage = sync.map_or(Stage::Writing, Stage::Syncing);
        self.groups.push_back((id, stage));
        id
    }

    /// Group `id` was written and not synced: its sync starts, or waits for room. Returns
    /// what [`done`](Self::done) returns (a group with nothing to sync is durable).
    pub(crate) fn written(&mut self, id: u64, sync: JournalSync<S>) -> Option<Synced> {
        let room = self.has_room();
        if let Some(stage) = self.stage(id) {
            *stage = if let Some(s) = sync.durable() {
                // Nothing to sync.
                Stage::Done(s)
            } else if room {
                Stage::Syncing(tokio::task::spawn_blocking(move || Some(sync.run())))
            } else {
                Stage::Waiting(sync)
            };
        }
        self.pop_done()
    }

    /// Group `id` is durable: returns the last group now durable with every group before
    /// it (to tell the journal and report), and starts waiting syncs there is room for.
    pub(crate) fn done(&mut self, id: u64, synced: Synced) -> Option<Synced> {
        if let Some(stage) = self.stage(id) {
            *stage = Stage::Done(synced);
        }
        self.pop_done()
    }

    /// Takes the durable groups off the head of the line; returns the last.
    fn pop_done(&mut self) -> Option<Synced> {
        let mut last = None;
        while let Some((_, Stage::Done(s))) = self.groups.front() {
            last = Some(*s);
            self.groups.pop_front();
        }
        self.start_waiting();
        last
    }

    /// Starts the waiting syncs there is room for, oldest first.
    fn start_waiting(&mut self) {
        let mut running = self.syncing();
        for (_, stage) in self.groups.iter_mut() {
            if running >= self.max_syncs {
                break;
            }
            if let Stage::Waiting(_) = stage {
                let Stage::Waiting(sync) = std::mem::replace(stage, Stage::Ended) else {
                    unreachable!("matched above");
                };
                *stage = Stage::Syncing(tokio::task::spawn_blocking(move || Some(sync.run())));
                running += 1;
            }
        }
    }

    fn stage(&mut self, id: u64) -> Option<&mut Stage<S>> {
        self.groups
            .iter_mut()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| s)
    }

    /// Polls the syncs running: the number of a group whose sync ended, and its result.
    pub(crate) fn poll_sync(&mut self, cx: &mut Context<'_>) -> Poll<(u64, SyncDone)> {
        for (id, stage) in self.groups.iter_mut() {
            if let Stage::Syncing(h) = stage {
                if let Poll::Ready(r) = std::pin::Pin::new(h).poll(cx) {
                    // Not polled again: the caller settles the group with `done` or fails.
                    *stage = Stage::Ended;
                    return Poll::Ready((*id, r));
                }
            }
        }
        Poll::Pending
    }

    /// Waits for the syncs running to end, and empties the line (nothing more is
    /// reported).
    pub(crate) async fn settle(&mut self) {
        for (_, stage) in std::mem::take(&mut self.groups) {
            if let Stage::Syncing(h) = stage {
                let _ = h.await;
            }
        }
    }

    /// Empties the line after a failure: syncs running are left to end unread.
    pub(crate) fn clear(&mut self) {
        self.groups.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::{Journal, JournalConfig, MemBackend, MemSync};
    use crate::proto::journal::{Entry, Write};
    use crate::proto::{MsgId, NodeId};

    /// A journal on a fresh disk, and `n` groups of one write each, written and not synced.
    fn written(n: u64) -> Vec<JournalSync<MemSync>> {
        let (mut j, _, _) = Journal::open(MemBackend::new(), JournalConfig::default()).unwrap();
        (1..=n)
            .map(|seq| {
                let entry = Entry::Accepted {
                    id: MsgId(seq),
                    to: NodeId::from_const(4),
                    payload: bytes::Bytes::from_static(b"x").into(),
                };
                j.append(&Write { seq, entry }).unwrap();
                j.write().unwrap()
            })
            .collect()
    }

    /// A sync job that returns `synced`.
    fn job(synced: Synced) -> JoinHandle<SyncResult> {
        tokio::task::spawn_blocking(move || Some(Ok(synced)))
    }

    /// The rule of the line: a group synced before the one written ahead of it is not
    /// reported until that one is (a sync that failed would otherwise leave a hole
    /// reported durable).
    #[tokio::test]
    async fn a_group_is_reported_only_with_every_group_before_it() {
        let s: Vec<Synced> = written(3).into_iter().map(|j| j.run().unwrap()).collect();
        let mut line = SyncLine::<MemSync>::new(3);
        let ids: Vec<u64> = s.iter().map(|&s| line.begin(Some(job(s)))).collect();
        assert!(!line.has_room(), "three syncs run");
        assert_eq!(line.done(ids[1], s[1]), None);
        assert_eq!(line.done(ids[2], s[2]), None);
        assert_eq!(line.done(ids[0], s[0]).map(|s| s.through()), Some(3));
        assert!(line.is_empty());
    }

    #[tokio::test]
    async fn a_group_written_while_the_syncs_are_full_waits_for_room() {
        let mut syncs = written(2).into_iter();
        let first_sync = syncs.next().unwrap().run().unwrap();
        let mut line = SyncLine::<MemSync>::new(1);
        let first = line.begin(Some(job(first_sync)));
        assert!(!line.has_room());
        let second = line.begin(None);
        assert_eq!(line.written(second, syncs.next().unwrap()), None);
        assert!(line.has_waiting());
        let (id, r) = std::future::poll_fn(|cx| line.poll_sync(cx)).await;
        assert_eq!(id, first);
        let a = r.unwrap().unwrap().unwrap();
        assert_eq!(line.done(first, a).map(|s| s.through()), Some(1));
        assert!(
            !line.has_waiting(),
            "its sync started once the first was done"
        );
        let (id, r) = std::future::poll_fn(|cx| line.poll_sync(cx)).await;
        assert_eq!(id, second);
        let s = r.unwrap().unwrap().unwrap();
        assert_eq!(line.done(id, s).map(|s| s.through()), Some(2));
    }
}
