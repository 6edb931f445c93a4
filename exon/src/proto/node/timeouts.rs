//! Timers of the node: the timer queue's entries per record, retransmission, REQSLOTS
//! re-send, idle discard of sender records, and the receiver's slow probe.

use std::time::Instant;

use crate::proto::node::timer::Side;
use crate::proto::send::liveness::Change;
use crate::proto::{Event, Node, NodeId, Verdict};

/// Unanswered probes after which a receiver record nothing was delivered into is evicted.
pub(crate) const MAX_UNPROVEN_PROBES: u32 = 6;

/// Peers whose re-arming waits at most (beyond it, they are re-armed at once).
const MAX_REARMS_DUE: usize = 64;

impl Node {
    /// Re-arms both records of `peer` before the next output or timeout rather than now:
    /// a batch of inputs from one peer (datagrams of a segmented receive, a burst of sends)
    /// re-arms it once. Every output and timer entry point calls
    /// [`rearm_due`](Self::rearm_due) first.
    pub(super) fn defer_rearm(&mut self, peer: NodeId) {
        if self.rearms_due.last() == Some(&peer) {
            return;
        }
        self.rearms_due.push(peer);
        if self.rearms_due.len() >= MAX_REARMS_DUE {
            self.rearm_due();
        }
    }

    /// Re-arms the records whose re-arming was deferred.
    pub(super) fn rearm_due(&mut self) {
        if self.rearms_due.is_empty() {
            return;
        }
        let mut due = std::mem::take(&mut self.rearms_due);
        for &peer in &due {
            self.rearm_sender(peer);
            self.rearm_receiver(peer);
        }
        due.clear();
        self.rearms_due = due;
    }

    pub(super) fn rearm_sender(&mut self, peer: NodeId) {
        if let Some(rec) = self.senders.get_mut(&peer) {
            if self.rules.credit_return_resumes && rec.credit_returned_to_waiters() {
                // Whatever settled or abandoned a message in progress (a verdict, a
                // deadline, a RETRY, a refusal): the messages waiting behind it go.
                rec.resume_credit_waiters();
                self.outbox.wake(peer, usize::MAX);
            }
            // With every rule on: the checker's self-tests switch rules off to strand tokens.
            debug_assert!(
                self.rules != crate::proto::Rules::ALL || !rec.tokens_stranded(),
                "tokens to {peer:?} with nothing to wake them: {}",
                rec.stranded_debug()
            );
            let want = rec.next_deadline(&self.cfg);
            self.timers.arm(rec.armed_mut(), want, Side::Sender, peer);
        }
        self.compact_timers();
    }

    /// When the R record `rec` of `peer` probes it next, if it does: while it holds free
    /// slots, or (rule `parked_early_probes`) early deliveries parked for `peer`'s word.
    fn receiver_probe_at(
        &self,
        peer: NodeId,
        rec: &crate::proto::recv::record::RRecord,
    ) -> Option<Instant> {
        if !self.rules.receiver_probe {
            return None;
        }
        let parked = self.rules.parked_early_probes && self.unstored.waits_for(peer);
        rec.deadline_also(&self.cfg, parked)
    }

    pub(super) fn rearm_receiver(&mut self, peer: NodeId) {
        let probe = self
            .receivers
            .get(&peer)
            .and_then(|rec| self.receiver_probe_at(peer, rec));
        if let Some(rec) = self.receivers.get_mut(&peer) {
            let expiry = rec
                .assembler()
                .next_expiry(self.cfg.timers.reassembly_timeout);
            let want = [probe, expiry].into_iter().flatten().min();
            self.timers.arm(rec.armed_mut(), want, Side::Receiver, peer);
        }
        self.compact_timers();
    }

    /// Gives back the memory of tables that emptied (a `HashMap` never shrinks by itself):
    /// records evicted after a flood of forged ids leave their maps' capacity behind.
    fn tidy_tables(&mut self) {
        fn shrink<K: std::hash::Hash + Eq, V, S: std::hash::BuildHasher>(
            m: &mut std::collections::HashMap<K, V, S>,
        ) {
            if m.capacity() > 4 * m.len() + 64 {
                m.shrink_to(2 * m.len());
            }
        }
        shrink(&mut self.receivers);
        shrink(&mut self.senders);
        self.unproven.shrink();
        self.timers.shrink();
        self.outbox.shrink();
    }

    /// Drops stale timer entries once they outnumber the records by far (`TimerQueue::compact`).
    fn compact_timers(&mut self) {
        let live = self.senders.len() + self.receivers.len();
        let (senders, receivers) = (&self.senders, &self.receivers);
        self.timers.compact(live, |t, side, peer| match side {
            Side::Sender => senders.get(&peer).is_some_and(|r| r.is_armed_at(t)),
            Side::Receiver => receivers.get(&peer).is_some_and(|r| r.is_armed_at(t)),
        });
    }

    fn is_current(&self, t: Instant, side: Side, peer: NodeId) -> bool {
        match side {
            Side::Sender => self.senders.get(&peer).is_some_and(|r| r.is_armed_at(t)),
            Side::Receiver => self.receivers.get(&peer).is_some_and(|r| r.is_armed_at(t)),
        }
    }

    /// Output: the next instant at which [`handle_timeout`](Self::handle_timeout) must be
    /// called, if any. May be early (then the call does nothing); never late.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.rearm_due();
        let acks = [
            self.outbox.next_deadline(),
            self.silence.next_wake(),
            self.archive_deadline(),
        ]
        .into_iter()
        .flatten()
        .min();
        while let Some((t, side, peer)) = self.timers.peek() {
            if self.is_current(t, side, peer) {
                return Some(acks.map_or(t, |a| a.min(t)));
            }
            self.timers.pop();
        }
        acks
    }

    /// Input: time has reached `now`; runs every timer that is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.rearm_due();
        self.outbox.release_due(now);
        self.release_deaf(now);
        self.silence.tidy(now);
        self.tidy_tables();
        self.probe_archive(now);
        // Take every due entry first, so a record is handled at most once per call.
        let mut due = std::mem::take(&mut self.due_scratch);
        while let Some((t, side, peer)) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if self.is_current(t, side, peer) {
                due.push((side, peer));
            }
        }
        for &(side, peer) in &due {
            match side {
                Side::Sender => {
                    if let Some(rec) = self.senders.get_mut(&peer) {
                        *rec.armed_mut() = None;
                    }
                    self.sender_timeout(now, peer);
                    self.liveness_check(now, peer);
                    let j = self.next_jitter();
                    if let Some(rec) = self.senders.get_mut(&peer) {
                        rec.set_jitter(j);
                    }
                    self.rearm_sender(peer);
                }
                Side::Receiver => {
                    if let Some(rec) = self.receivers.get_mut(&peer) {
                        *rec.armed_mut() = None;
                    }
                    self.receiver_timeout(now, peer);
                    let j = self.next_jitter();
                    if let Some(rec) = self.receivers.get_mut(&peer) {
                        rec.set_jitter(j);
                    }
                    self.rearm_receiver(peer);
                }
            }
        }
        due.clear();
        self.due_scratch = due;
    }

    /// Retransmission, REQSLOTS re-send and idle discard of the S record for `peer`.
    fn sender_timeout(&mut self, now: Instant, peer: NodeId) {
        let resolving = self.is_resolving(peer);
        let cfg = &self.cfg;
        let Some(rec) = self.senders.get_mut(&peer) else {
            return;
        };
        let room = self.hw.saturating_sub(rec.sck());
        let e = rec.on_timeout(now, cfg, room, self.rules.deaf_backoff);
        self.stats.timeouts += e.expired;
        self.stats.tail_probes += u64::from(e.tail_probe);
        self.stats.losses_detected += e.lost;
        self.stats.reqslots_retransmissions += e.reqslots_again;
        self.stats.mtu.probes_lost += e.mtu_probes_lost;
        self.stats.mtu.black_hole_fallbacks += u64::from(e.mtu_fallback);
        let wake = e.wake;
        if e.idle && resolving {
            // Durable mode: verdicts wait for the journal; the record (and its frontier
            // below them) stays until they are stored.
        } else if e.idle {
            // Line 45-47: waive every slot, keep the clock past this record's, forget it.
            let sck = rec.sck();
            self.senders.remove(&peer);
            self.clock_waiters.retain(|p| *p != peer);
            self.ck = self.ck.max(sck);
            self.stats.idle_discards += 1;
            if !self.outbox.waive(peer, sck, self.outbox_cap()) {
                reject!(self.outbox_full);
            }
            return;
        }
        if wake {
            self.outbox.wake(peer, usize::MAX);
        }
    }

    /// The slow probe of the R record for `peer`.
    fn receiver_timeout(&mut self, now: Instant, peer: NodeId) {
        let cap = self.outbox_cap();
        let evicts_proven = self.evicts_proven();
        let Some(rec) = self.receivers.get_mut(&peer) else {
            return;
        };
        if self.rules.unproven_probe_limit
            && !rec.is_proven()
            && rec.probes() >= MAX_UNPROVEN_PROBES
        {
            // Created and never used, and silent through every probe: evict it as a full
            // table would (its tokens, if any ever come, get RETRY).
            let r = rec.rck();
            self.evict_receiver(peer, r);
            return;
        }
        if evicts_proven
            && rec.is_proven()
            && rec.probes() >= MAX_UNPROVEN_PROBES
            && rec.held().is_empty()
        {
            // Used, then silent through every probe (a source that went away, or whose
            // answers were lost): evict it as a full table would, remembering its free
            // slots, so probes stop and the node can go idle.
            self.evict_proven(peer);
            return;
        }
        let stalled = rec
            .assembler_mut()
            .expire(now, self.cfg.timers.reassembly_timeout);
        self.stats.partials_expired += stalled as u64;
        let due = self
            .receivers
            .get(&peer)
            .and_then(|rec| self.receiver_probe_at(peer, rec))
            .is_some_and(|d| d <= now);
        let Some(rec) = self.receivers.get_mut(&peer) else {
            return;
        };
        if due {
            rec.probed(now);
            self.stats.probes += 1;
            if !self.outbox.probe(peer, rec.sck(), rec.rck(), cap) {
                reject!(self.outbox_full);
            } else if self.rules.probe_repeats_ack {
                // A token came again since: the ACKs last sent go with the probe.
                let r = rec.rck();
                if let Some(acked) = rec.acks_for_probe() {
                    self.outbox
                        .repeat_verdicts(peer, Verdict::Ack, r, acked, cap);
                }
            }
            if let Some((s, n)) = rec
                .grant_to_repeat()
                .filter(|_| self.rules.probe_repeats_grant)
            {
                // The last grant, none of its slots used yet: its SLOTS may have been lost.
                self.outbox.grant(peer, s, rec.rck(), n, cap);
            }
            for (s, have) in rec.take_got() {
                // The GOT of messages fragments came for since the last probe, again.
                self.outbox.got(peer, rec.rck(), s, &have, cap);
            }
            if let Some(t) = rec
                .take_told()
                .filter(|_| self.rules.probe_repeats_old_verdicts)
            {
                // Verdicts told without a record since the last probe go with it once.
                self.outbox.repeat_verdicts(peer, t.v, t.r, &t.slots, cap);
            }
        }
    }

    /// Emits the event for a liveness change of `peer`.
    fn report_liveness(&mut self, peer: NodeId, change: Option<Change>) {
        match change {
            Some(Change::Reachable) => self.events.push_back(Event::PeerReachable { peer }),
            Some(Change::Unreachable) => {
                self.events.push_back(Event::PeerUnreachable { peer });
            }
            None => {}
        }
    }

    /// Work for `peer` may have appeared at `now` (a send).
    pub(super) fn liveness_work(&mut self, now: Instant, peer: NodeId, was_quiet: bool) {
        if was_quiet {
            self.liveness.work_started(now, peer);
        }
    }

    /// A datagram from `peer` was accepted.
    pub(super) fn liveness_heard(&mut self, now: Instant, peer: NodeId) {
        let c = self.liveness.heard(now, peer);
        self.report_liveness(peer, c);
    }

    /// After a timeout of `peer`'s sender record: reports it unreachable if it owes an
    /// answer for too long, and forgets it once its record is gone.
    pub(super) fn liveness_check(&mut self, now: Instant, peer: NodeId) {
        let c = match self.senders.get(&peer) {
            Some(rec) => {
                let busy = !rec.is_quiet() || rec.is_requesting();
                let after = self.cfg.timers.unreachable_after;
                self.liveness.check(now, peer, busy, after)
            }
            None => self.liveness.forget(peer),
        };
        self.report_liveness(peer, c);
    }

    /// Whether `peer` is reported unreachable: work for it has waited
    /// [`Config::timers.unreachable_after`](crate::proto::TimerConfig::unreachable_after) without any datagram
    /// from it.
    pub fn is_unreachable(&self, peer: NodeId) -> bool {
        self.liveness.is_unreachable(peer)
    }
}
