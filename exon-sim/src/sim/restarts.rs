//! Crashes and restarts of the simulated hosts, and what durable mode does to a host's
//! directory at a restart: a new journal in place of the old one (`JournalModel::
//! journal_loss`), durable mode switched on (`switch_on`), or the directory restored from
//! an older copy (`restore`, with the wall-clock floor of `FileStore::load`); and the crashes
//! of both sides that follow a message given up (`abandon_crash`).

use std::time::Duration;

use exon::durable::MemBackend;
use exon::proto::MsgId;
use rand::Rng;

use super::host::Snapshot;
use super::queue::{nanos, What};
use super::Sim;
use crate::journal::ABANDON_CRASHES;
use crate::workload::MsgKey;

impl Sim {
    /// Crashes host `node` (if it is up); it comes back after `down`, from its stored clock
    /// (`keep_clock`) or from 0.
    pub(super) fn crash_host(&mut self, node: usize, down: Duration, keep_clock: bool) {
        if !self.hosts[node].crash() {
            return;
        }
        if let Some(d) = &self.sc.disk {
            let h = &mut self.hosts[node];
            h.crashes_losing_writes += u32::from(h.disk.unsynced() > 0);
            h.disk.crash(d.torn_writes, &mut self.rng);
        }
        self.crash_journal(node);
        self.oracle.on_restart(node);
        if self.sc.channels.is_some() {
            self.oracle.on_chan_restart(node);
        }
        if self.sc.rpc.is_some() {
            self.oracle.on_caller_crashed(node);
        }
        self.deaf.on_restart(node);
        let t = self.now + nanos(down);
        self.last_activity = self.last_activity.max(t);
        self.queue.push(
            t,
            What::Revive {
                node: node as u32,
                keep_clock,
            },
        );
    }

    /// Host `i` comes back. In durable mode its directory may first be replaced: durable
    /// mode switched on (a new journal), the copy it holds restored, or its journal lost;
    /// then it takes a copy if it holds none (with restores on). Its node starts from its
    /// stored clock, or the floor if that is higher (with restores on and a floor).
    pub(super) fn revive(&mut self, i: usize, keep_clock: bool) {
        let mut clock_floor = None;
        if let Some(model) = self.sc.durable.clone() {
            let mut unvouched = false;
            let mut restored = false;
            if !self.hosts[i].durable_on {
                let h = &mut self.hosts[i];
                h.durable_on = true;
                h.jdisk = MemBackend::new();
                h.jstats.switched_on += 1;
                unvouched = true;
            } else if let Some(r) = &model.restore {
                let held = self.hosts[i].snapshot.is_some();
                if held && r.probability > 0.0 && self.rng.gen_bool(r.probability.min(1.0)) {
                    self.restore_snapshot(i);
                    restored = true;
                    unvouched = true;
                }
            }
            if !restored
                && !unvouched
                && model.journal_loss > 0.0
                && self.rng.gen_bool(model.journal_loss.min(1.0))
            {
                let h = &mut self.hosts[i];
                h.jdisk = MemBackend::new();
                h.jstats.lost += 1;
                h.journal_replaced = true;
                self.oracle.on_journal_lost(i);
                unvouched = true;
            }
            if let Some(r) = &model.restore {
                if !restored && self.hosts[i].snapshot.is_none() {
                    self.take_snapshot(i);
                }
                clock_floor = r.floor(self.now);
            }
            if unvouched {
                self.oracle.on_unvouched_restart(i, self.now);
            }
        }
        let mut clock = if keep_clock {
            self.recovered_clock(i)
        } else {
            0
        };
        if let Some(floor) = clock_floor {
            clock = clock.max(floor);
        }
        self.boot(i, clock);
    }

    /// Host `i` (down) copies its directory and its application's message ids.
    fn take_snapshot(&mut self, i: usize) {
        let h = &mut self.hosts[i];
        let segments = h
            .jdisk
            .list_segments()
            .into_iter()
            .filter_map(|n| Some((n, h.jdisk.segment(n)?)))
            .collect();
        h.snapshot = Some(Snapshot {
            at: self.now,
            segments,
            disk: h.disk.clone(),
            stored_hw: h.stored_hw,
            msg_keys: h.msg_keys.clone(),
        });
    }

    /// Host `i` (down) puts back the copy it holds, and its application rolls back with it.
    fn restore_snapshot(&mut self, i: usize) {
        let h = &mut self.hosts[i];
        let Some(snap) = h.snapshot.take() else {
            return;
        };
        // Damage injected into a segment the copy holds another version of is gone with
        // the restore: recovery cannot be asked to find it (campaign 82, seed 941955828).
        if let Some(seg) = h.jstats.damaged_seg {
            let copy = snap
                .segments
                .iter()
                .find(|(n, _)| *n == seg)
                .map(|(_, d)| d);
            if copy != h.jdisk.segment(seg).as_ref() {
                h.jstats.damaged_seg = None;
            }
        }
        let disk = MemBackend::new();
        for (n, data) in snap.segments {
            disk.put_segment(n, data);
        }
        h.jdisk = disk;
        h.disk = snap.disk;
        h.stored_hw = snap.stored_hw;
        h.msg_keys = snap.msg_keys;
        h.jstats.restored += 1;
        h.restored_now = true;
        self.oracle.on_restored(i, snap.at);
    }

    /// Host `i` recovered message `id` (`key`) from a restored copy of its directory:
    /// if its deadline passed before the restore, the lost run gave it up (and the
    /// application, which keeps its deadlines, gives it up again now, as the restored
    /// node has it in flight again). A deadline still to come has its event queued. An
    /// application that forgets its deadlines at a restore (`RestoreModel::forgets_deadlines`)
    /// lets such a message wait for its verdict.
    pub(super) fn deadline_again(&mut self, i: usize, id: MsgId, key: MsgKey) {
        let Some(d) = self.sc.deadline else {
            return;
        };
        let forgets = self.sc.durable.as_ref().and_then(|j| j.restore.as_ref());
        if forgets.is_some_and(|r| r.forgets_deadlines) {
            return;
        }
        let Some((sent_at, to)) = self.oracle.submission(key) else {
            return;
        };
        if sent_at + nanos(d) > self.now {
            return;
        }
        let what = What::GiveUp {
            node: i as u32,
            to: to as u32,
            id: id.0,
            boot: self.hosts[i].restarts,
            seq: key.seq,
        };
        self.queue.push(self.now, what);
    }

    /// Node `i` gave up a message to `to`: with `JournalModel::abandon_crash`, crashes of
    /// both sides follow, the sender's within two sync latencies (often before its
    /// `Resolved` record is synced), the receiver's within four after a one-way latency
    /// (often after the frontier that passed the message's slot reached it).
    pub(super) fn crash_after_abandon(&mut self, i: usize, to: usize) {
        let Some(p) = self.sc.durable.as_ref().map(|d| d.abandon_crash) else {
            return;
        };
        let done: u32 = self.hosts.iter().map(|h| h.jstats.abandon_crashes).sum();
        if p <= 0.0 || done >= ABANDON_CRASHES || !self.rng.gen_bool(p.min(1.0)) {
            return;
        }
        let sync = nanos(self.sc.disk.clone().unwrap_or_default().sync_latency).max(1);
        self.hosts[i].jstats.abandon_crashes += 1;
        let latency = nanos(self.sc.link.latency);
        for (node, after, within) in [(i, 0, 2 * sync), (to, latency, 4 * sync)] {
            let t = self.now + after + self.rng.gen_range(0..within);
            let down_us = self.rng.gen_range(1_000..20_000);
            self.last_activity = self.last_activity.max(t);
            self.queue.push(
                t,
                What::Crash {
                    node: node as u32,
                    down_us,
                },
            );
        }
    }
}
