//! Durable mode of the simulated hosts: each node's journal on a simulated disk that
//! survives the host's crashes, committed in groups; crashes that lose the unsynced tail,
//! tear it, or cut a commit or a compaction part way; and the end-of-run check that every
//! journal replays to nothing.

use exon::durable::{Journal, JournalConfig};
use exon::proto::journal::{Recovered, Write};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::queue::{nanos, What};
use super::Sim;
use crate::disk::DiskModel;
use crate::journal::record_starts;
use crate::oracle::ViolationKind;

/// Changes a byte of a synced record of `disk` (XOR `mask`): a byte chosen by `pick` among
/// those of the records that another synced record follows in their segment. Returns
/// whether there was one.
fn damage_synced(disk: &exon::durable::MemBackend, pick: u64, mask: u8) -> Option<u64> {
    let sites: Vec<(u64, usize)> = disk
        .synced_segments()
        .into_iter()
        .filter_map(|(seg, data)| Some((seg, *record_starts(&data).last()?)))
        .filter(|&(_, last)| last > 0)
        .collect();
    let total: u64 = sites.iter().map(|&(_, n)| n as u64).sum();
    if total == 0 {
        return None;
    }
    let mut at = pick % total;
    for (seg, n) in sites {
        if at < n as u64 {
            return disk.damage_synced(seg, at as usize, mask).then_some(seg);
        }
        at -= n as u64;
    }
    None
}

impl Sim {
    /// The disk the journals run on: the scenario's, or the default model.
    fn journal_disk(&self) -> DiskModel {
        self.sc.disk.clone().unwrap_or_default()
    }

    /// The journal configuration of the scenario, if it is durable: records sized for its
    /// largest message (a stream's chunk included: sized for payloads alone, a chunk above
    /// about 4 KB failed every append).
    fn journal_config(&self) -> Option<JournalConfig> {
        let largest = self.sc.largest_message();
        Some(self.sc.durable.as_ref()?.config(largest))
    }

    /// Opens host `i`'s journal (durable mode): what its new node recovers, or `None`
    /// when the scenario is not durable.
    pub(super) fn open_journal(&mut self, i: usize) -> Option<Recovered> {
        let cfg = self.journal_config()?;
        if !self.hosts[i].durable_on {
            return None;
        }
        let h = &mut self.hosts[i];
        match Journal::open(h.jdisk.clone(), cfg) {
            Ok((j, rec, report)) => {
                h.jstats.torn_bytes += report.torn_bytes;
                // A changed byte of a synced record in a segment the recovery kept (so
                // read: one it did not read was obsolete, and is removed) must be found.
                if let Some(seg) = h.jstats.damaged_seg.take() {
                    if !report.damaged && h.jdisk.list_segments().contains(&seg) {
                        let what = format!(
                            "node{i}'s journal: damage to a synced record of segment {seg} \
                             not found at recovery"
                        );
                        self.oracle
                            .violate(ViolationKind::JournalError, None, self.now, what);
                    }
                }
                if report.damaged {
                    h.jstats.damaged += 1;
                    self.oracle.on_damaged(i);
                }
                h.journal = Some(j);
                Some(rec)
            }
            Err(e) => {
                let what = format!("node{i}'s journal did not open: {e}");
                self.oracle
                    .violate(ViolationKind::JournalError, None, self.now, what);
                Some(Recovered::default())
            }
        }
    }

    /// Appends `w` to host `i`'s journal and schedules a commit a sync latency later if
    /// none is; with no journal open, reports it stored at once. Returns an error to report.
    pub(super) fn append_journal(&mut self, i: usize, w: &Write) -> Option<String> {
        let sync = nanos(self.journal_disk().sync_latency);
        let h = &mut self.hosts[i];
        let Some(j) = h.journal.as_mut() else {
            let now = self.base + std::time::Duration::from_nanos(self.now);
            if let Some(node) = h.node.as_mut() {
                node.handle_stored(now, w.seq);
            }
            return None;
        };
        let err = j.append(w).err().map(|e| format!("node{i} append: {e}"));
        if !h.commit_scheduled {
            h.commit_scheduled = true;
            let boot = h.restarts;
            self.queue.push(
                self.now + sync,
                What::Commit {
                    node: i as u32,
                    boot,
                },
            );
        }
        err
    }

    /// Host `i` commits its journal (unless it crashed since `boot`): everything appended
    /// is durable, the node is told, and a journal with nothing live is compacted.
    pub(super) fn on_commit(&mut self, i: usize, boot: u32) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        if h.restarts != boot {
            return;
        }
        h.commit_scheduled = false;
        let (Some(node), Some(j)) = (h.node.as_mut(), h.journal.as_mut()) else {
            return;
        };
        let result = j.commit().and_then(|through| {
            j.compact_if_quiet()?;
            Ok(through)
        });
        h.jstats.bytes_max = h.jstats.bytes_max.max(j.disk_bytes());
        match result {
            Ok(through) => {
                h.jstats.commits += 1;
                node.handle_stored(now, through);
            }
            Err(e) => {
                let what = format!("node{i} commit: {e}");
                self.oracle
                    .violate(ViolationKind::JournalError, None, self.now, what);
            }
        }
        self.drain(i);
    }

    /// Host `i` crashed (durable mode): its journal is dropped with what was not committed.
    /// The crash may fall inside a compaction, or with torn writes inside a commit (the disk
    /// fails after a few operations); with torn writes it keeps a random part of the bytes
    /// written and not synced, and of the directory changes not synced.
    pub(super) fn crash_journal(&mut self, i: usize) {
        let Some(model) = self.sc.durable.clone() else {
            return;
        };
        let torn = self.journal_disk().torn_writes;
        let mid_commit = torn && self.rng.gen_bool(model.crash_mid_commit.clamp(0.0, 1.0));
        let mid_compaction = self
            .rng
            .gen_bool(model.crash_mid_compaction.clamp(0.0, 1.0));
        let ops = self.rng.gen_range(0..8);
        let mut keep = SmallRng::seed_from_u64(self.rng.gen());
        let mut keep_dir = SmallRng::seed_from_u64(self.rng.gen());
        let h = &mut self.hosts[i];
        h.commit_scheduled = false;
        let Some(mut j) = h.journal.take() else {
            return;
        };
        if mid_commit && j.has_pending() {
            h.jdisk.fail_after_ops(Some(ops));
            h.jstats.cut_commits += u32::from(j.commit().is_err());
            h.jdisk.fail_after_ops(None);
        } else if mid_compaction && !j.has_pending() {
            // Only with nothing pending: a compaction commits the pending writes first,
            // which is a crash inside a commit.
            h.jdisk.fail_after_ops(Some(ops));
            h.jstats.cut_compactions += u32::from(j.compact().is_err());
            h.jdisk.fail_after_ops(None);
        }
        h.jstats.compactions += j.compactions();
        drop(j);
        if model.damage > 0.0 && self.rng.gen_bool(model.damage.clamp(0.0, 1.0)) {
            let pick: u64 = self.rng.gen();
            let mask = self.rng.gen_range(1..=255u8);
            let h = &mut self.hosts[i];
            h.jstats.damaged_seg = damage_synced(&h.jdisk, pick, mask);
            h.jstats.damage_injected += u32::from(h.jstats.damaged_seg.is_some());
        }
        let h = &mut self.hosts[i];
        if torn {
            h.jdisk.crash_with(
                |_, unsynced| keep.gen_range(0..=unsynced),
                |_| keep_dir.gen_bool(0.5),
            );
        } else {
            h.jdisk.crash(|_, _| 0);
        }
    }

    /// The end-of-run check of durable mode: every host's journal, after a final
    /// [`compact_if_quiet`](Journal::compact_if_quiet), holds nothing live, and reopened from
    /// its disk replays to nothing.
    pub(super) fn check_journals(&mut self) {
        let Some(cfg) = self.journal_config() else {
            return;
        };
        for i in 0..self.hosts.len() {
            let h = &mut self.hosts[i];
            let Some(mut j) = h.journal.take() else {
                continue;
            };
            let mut bad = Vec::new();
            if j.has_pending() {
                bad.push(String::from("writes never committed"));
            }
            if let Err(e) = j.compact_if_quiet() {
                bad.push(format!("final compaction: {e}"));
            }
            if !j.state().is_empty() {
                let (deliveries, msgs) = j.state().counts();
                bad.push(format!("{msgs} messages and {deliveries} deliveries live"));
            }
            h.jstats.compactions += j.compactions();
            drop(j);
            match Journal::open(h.jdisk.clone(), cfg.clone()) {
                Ok((j, _, report)) => {
                    // A quiet journal keeps one record of where its coverage starts, one
                    // of each destination's highest key (keyed sends), one of each sender's
                    // forgotten frontier, one of each mark (durable channels' positions), and one
                    // saying it forgot keys (`KeysForgotten`: a lost or damaged journal's).
                    let covers = usize::from(j.state().covers().is_some())
                        + usize::from(j.state().keys_forgotten())
                        + j.state().keys().count()
                        + j.state().forgotten().count()
                        + j.state().marks().count();
                    if !j.state().is_empty() || report.records > covers {
                        bad.push(format!("reopened, it replays {} records", report.records));
                    }
                }
                Err(e) => bad.push(format!("reopened: {e}")),
            }
            if !bad.is_empty() {
                let what = format!("node{i}'s journal: {}", bad.join(", "));
                self.oracle
                    .violate(ViolationKind::JournalNotEmpty, None, self.now, what);
            }
        }
    }
}
