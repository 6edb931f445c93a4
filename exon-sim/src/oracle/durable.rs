//! The oracle's checks of durable mode: no message in doubt, stored messages owed a
//! verdict across crashes of their sender, and flagged redeliveries only of messages whose
//! sender was not yet told they were acknowledged.

use super::{rec_in, Oracle, ViolationKind};
use crate::workload::{Kind, MsgKey};
use exon::proto::journal::Outcome;

impl Oracle {
    /// Turns on the checks of durable mode (every node journals its inbox and outbox):
    /// an `InDoubt` verdict is a violation ([`ViolationKind::DurableInDoubt`]), a message
    /// reported stored must be acknowledged whatever crashes, and a redelivery must not
    /// follow an acknowledgement ([`ViolationKind::RedeliveredAfterAck`]).
    pub fn set_durable(&mut self) {
        self.durable = true;
    }

    /// Keyed sends from an outbox (durable mode): a restarted sender's application sends
    /// again every message it holds no verdict for, so none is excused as lost by the
    /// restart.
    pub fn set_keyed(&mut self) {
        self.keyed = true;
    }

    /// Whether the checks of durable mode are on.
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// The journal of `node` was found damaged at a recovery: verdicts in doubt about
    /// messages to it are excused from then on, and so are flagged redeliveries of messages
    /// already acknowledged (it may have lost their `Taken` records: the application gets
    /// them again flagged, with their stable ids). Nothing else is: no unflagged duplicate,
    /// no acknowledgement of what was not delivered, no stored message left without a
    /// verdict.
    pub fn on_damaged(&mut self, node: usize) {
        if let Some(d) = self.damaged.get_mut(node) {
            *d = true;
        }
    }

    /// The sender's application was told `key` is stored (`Event::Stored`): from now on a
    /// crash of its sender does not excuse its loss.
    pub fn on_stored(&mut self, key: MsgKey, now: u64) {
        let Some(r) = rec_in(&mut self.msgs, key) else {
            self.violate(
                ViolationKind::NeverSent,
                Some(key),
                now,
                "reported stored, never submitted".into(),
            );
            return;
        };
        if !r.stored {
            r.stored = true;
            self.stored += 1;
        }
    }

    /// A flagged redelivery of `key`, handed over before: allowed (the application gets it
    /// again) unless its sender was already told it was acknowledged (and `node`'s journal
    /// was not found damaged).
    pub(super) fn on_redelivery(
        &mut self,
        node: usize,
        key: MsgKey,
        kind: Kind,
        now: u64,
    ) -> Option<(MsgKey, Kind)> {
        let damaged = self.damaged.get(node).copied().unwrap_or(false);
        let r = rec_in(&mut self.msgs, key)?;
        if r.acked && r.retake_ok {
            // Taken after the copy its restored host came back from: the copy cannot know,
            // and until the restored host's own take is stored (unseen here, so the excuse
            // stays), every restart of it hands the message over again (a crash loop after
            // the restore: campaign 134).
            r.redeliveries += 1;
            self.restore_redeliveries += 1;
            return Some((key, kind));
        }
        if r.acked && !damaged {
            self.violate(
                ViolationKind::RedeliveredAfterAck,
                Some(key),
                now,
                format!(
                    "node{node} handed it over again after its sender was told it was acknowledged"
                ),
            );
            return None;
        }
        r.redeliveries += 1;
        self.redeliveries += 1;
        Some((key, kind))
    }

    /// An `InDoubt` verdict in durable mode: a violation unless the receiver's journal was
    /// damaged, or could not vouch for what it held before a restart (see
    /// [`on_unvouched_restart`](Self::on_unvouched_restart) and `old_envelope_doubt`).
    pub(super) fn check_durable_doubt(&mut self, key: MsgKey, now: u64) {
        let old_envelope = self.old_envelope_doubt(key, now);
        let to = self.rec(key).map(|r| r.to as usize);
        if to.is_some_and(|to| self.damaged.get(to).copied().unwrap_or(false)) {
            return;
        }
        if self.rec(key).is_some_and(|r| r.doubt_ok) {
            self.note_old_doubt(key, now);
            return;
        }
        // A receiver not yet switched to durable mode (it runs without a journal until its
        // restart) that evicted a record something was delivered into.
        if to.is_some_and(|to| self.evicted.get(to).copied().unwrap_or(false)) {
            return;
        }
        if old_envelope {
            self.doubt_excused += 1;
            self.note_old_doubt(key, now);
            return;
        }
        self.violate(
            ViolationKind::DurableInDoubt,
            Some(key),
            now,
            "in doubt, although every node keeps a journal".into(),
        );
    }

    /// `node` restarts (durable mode) with a journal that cannot vouch for the incarnations
    /// it made before: a new one (its directory lost, or durable mode just switched on) or
    /// one restored from an older copy. Tokens of those incarnations get DOUBT, so the
    /// messages to it unsettled now may end in doubt (and only those).
    pub fn on_unvouched_restart(&mut self, node: usize, now: u64) {
        if let Some(t) = self.unvouched_at.get_mut(node) {
            *t = now;
        }
        // From now on its journal answers for its evictions; messages unsettled now are
        // excused below, later ones sent in its old envelopes by `old_envelope_doubt`.
        if let Some(e) = self.evicted.get_mut(node) {
            *e = false;
        }
        for v in &mut self.msgs {
            for r in v.iter_mut() {
                if r.to as usize == node && !(r.acked || r.doubted || r.not_delivered) {
                    if !r.doubt_ok {
                        self.doubt_excused += 1;
                    }
                    r.doubt_ok = true;
                }
            }
        }
    }

    /// `key`, reported in doubt at `now`, may have been in an envelope of an incarnation its
    /// receiver's unvouched restart lost: its sender heard a DOUBT for that incarnation then.
    fn note_old_doubt(&mut self, key: MsgKey, now: u64) {
        let Some(to) = self.rec(key).map(|r| r.to as usize) else {
            return;
        };
        if let Some(t) = self
            .last_old_doubt
            .get_mut(key.sender as usize)
            .and_then(|v| v.get_mut(to))
        {
            *t = now;
        }
    }

    /// Whether `key`, sent after its receiver restarted unvouched, may have gone in an
    /// envelope of an incarnation that receiver made before. Its sender drops the envelopes
    /// of an incarnation when it hears a DOUBT for it, and may hold envelopes of several
    /// incarnations the restart lost (a DOUBT for an older one says nothing of the newer:
    /// it might have been evicted alone): `key` was sent no later than its sender's first
    /// report in doubt of a message to that receiver since the restart (taken as the first
    /// DOUBT's, at `now`), or than its last report in doubt of a message that may have been
    /// in such an envelope (a DOUBT for one of those incarnations came then).
    fn old_envelope_doubt(&mut self, key: MsgKey, now: u64) -> bool {
        let Some((to, sent_at)) = self.rec(key).map(|r| (r.to as usize, r.sent_at)) else {
            return false;
        };
        let restart = self.unvouched_at.get(to).copied().unwrap_or(super::NONE);
        if restart == super::NONE {
            return false;
        }
        let Some(first) = self
            .first_doubt
            .get_mut(key.sender as usize)
            .and_then(|v| v.get_mut(to))
        else {
            return false;
        };
        if *first == super::NONE || *first < restart {
            *first = now;
        }
        let first = *first;
        let last_old = self
            .last_old_doubt
            .get(key.sender as usize)
            .and_then(|v| v.get(to))
            .copied()
            .filter(|&t| t != super::NONE && t >= restart);
        sent_at >= restart && (sent_at <= first || last_old.is_some_and(|t| sent_at <= t))
    }

    /// `node` restarts with a new, empty journal (its directory lost): its unsettled
    /// messages, reported stored or not, died with it.
    pub fn on_journal_lost(&mut self, node: usize) {
        if let Some(v) = self.msgs.get_mut(node) {
            for r in v
                .iter_mut()
                .filter(|r| !(r.acked || r.doubted || r.not_delivered))
            {
                r.sender_restarted = true;
            }
        }
    }

    /// `node` restarts from a copy of its directory taken at `since` (virtual ns): what it
    /// did after that is lost with its application's own state, rolled back with it. The
    /// messages first delivered to it since may be delivered once more (its journal does not
    /// know them, and vouches for slots they were delivered in: the documented limit of
    /// restored copies), those it took since may be handed over again after their
    /// acknowledgement, and the messages it submitted since are forgotten. Those it
    /// submitted before and heard the verdict of since are in flight again (`reopened`):
    /// their verdict may come again, and may be `InDoubt` (as may that of those unsettled
    /// in the copy, which the lost run may have moved to another slot); delivered again,
    /// they are reported as [`ViolationKind::ResentByRestoredSender`] (a message the copy
    /// knew no slot for, sent in a fresh one: the limit of restored copies recorded in
    /// `tests/sim/durable.rs`).
    pub fn on_restored(&mut self, node: usize, since: u64) {
        let after = |t: u64| t != super::NONE && t >= since;
        for v in &mut self.msgs {
            for r in v.iter_mut().filter(|r| r.to as usize == node) {
                if after(r.last_delivered_at) {
                    r.replay_ok = true;
                }
                if after(r.last_taken_at) {
                    r.retake_ok = true;
                }
            }
        }
        let (mut reopened, mut excused) = (0, 0);
        if let Some(v) = self.msgs.get_mut(node) {
            for r in v.iter_mut() {
                let settled = r.acked || r.doubted || r.not_delivered;
                if r.sent_at >= since {
                    if !settled {
                        r.sender_restarted = true;
                    }
                } else if !settled {
                    // In the copy, unsettled: the restored node sends it again, in the slot
                    // the copy knows or in a fresh one. The lost run may have moved it to
                    // another slot and passed the old one with its frontier: a receiver
                    // that forgot what it delivered below that frontier answers DOUBT
                    // there (`Rules::doubt_below_forgotten`), truthfully.
                    r.reopened = true;
                    if !r.doubt_ok {
                        r.doubt_ok = true;
                        excused += 1;
                    }
                } else if after(r.acked_at) {
                    // Its verdict came after the copy: the restored application does not
                    // know it, and the restored node may send it again.
                    r.acked = false;
                    r.doubted = false;
                    r.given_up = false;
                    r.not_delivered = false;
                    r.acked_at = super::NONE;
                    r.reopened = true;
                    r.verdict_undone = true;
                    r.doubt_ok = true;
                    r.sender_restarted = true;
                    reopened += 1;
                }
            }
        }
        self.restore_reopened += reopened;
        self.doubt_excused += reopened + excused;
    }

    /// A second unflagged delivery of `key`: tolerated (and counted) once if its first
    /// delivery was lost with a restored copy of its receiver's directory.
    pub(super) fn tolerate_replay(&mut self, key: MsgKey) -> bool {
        let Some(r) = rec_in(&mut self.msgs, key) else {
            return false;
        };
        if !r.replay_ok {
            return false;
        }
        r.replay_ok = false;
        r.replays += 1;
        self.restore_duplicates += 1;
        true
    }

    /// The sender gave `key` up (durable mode): its verdict comes once its `Resolved`
    /// record is stored, as an event ([`on_in_doubt`](Self::on_in_doubt) or
    /// [`on_abandoned`](Self::on_abandoned)).
    pub fn on_giving_up(&mut self, key: MsgKey) {
        if let Some(r) = rec_in(&mut self.msgs, key) {
            r.giving_up = true;
        }
    }

    /// The restarted sender of `key` reports its verdict `outcome` again, from its journal
    /// (durable mode): returns true if it was reported already, the same (allowed, counted
    /// in `repeated_verdicts`) or not ([`ViolationKind::VerdictChanged`]); false if this is
    /// its first report.
    pub fn on_reported_again(&mut self, key: MsgKey, outcome: Outcome, now: u64) -> bool {
        let Some(r) = rec_in(&mut self.msgs, key) else {
            return false;
        };
        let before = if r.acked {
            Outcome::Acknowledged
        } else if r.not_delivered {
            Outcome::NotDelivered
        } else if r.doubted {
            Outcome::InDoubt
        } else {
            return false;
        };
        // A sender whose journal was damaged reports the messages it recovered in doubt
        // (`on_in_doubt` takes that, weaker and true, after any verdict): the same again
        // from its journal after a later restart.
        let damaged_doubt = outcome == Outcome::InDoubt
            && self
                .damaged
                .get(key.sender as usize)
                .copied()
                .unwrap_or(false);
        if before == outcome || damaged_doubt {
            self.repeated_verdicts += 1;
        } else {
            self.violate(
                ViolationKind::VerdictChanged,
                Some(key),
                now,
                format!("reported {outcome:?} after a restart, {before:?} before"),
            );
        }
        true
    }

    /// The restarted sender of `key` recovered it from its journal (durable mode). If its
    /// application was waiting for the verdict of the message given up, the crash came
    /// before the `Resolved` record was durable: the message is live again and owes a
    /// verdict (the restarted node decides it). If its application had heard the verdict,
    /// that verdict is revoked: a violation ([`ViolationKind::VerdictRevoked`]).
    pub fn on_recovered(&mut self, key: MsgKey, now: u64) {
        let Some(r) = rec_in(&mut self.msgs, key) else {
            return;
        };
        if r.given_up && !r.acked {
            self.revoked_verdicts += 1;
            self.violate(
                ViolationKind::VerdictRevoked,
                Some(key),
                now,
                "its verdict was reported, and its sender recovered it to send it again".into(),
            );
            return;
        }
        if r.giving_up {
            // In flight all along (its sender's journal held it): a restart of its
            // receiver that could not vouch since it was sent excuses doubt too.
            r.giving_up = false;
            let t = self
                .unvouched_at
                .get(r.to as usize)
                .copied()
                .unwrap_or(super::NONE);
            if t != super::NONE && t >= r.sent_at && !r.doubt_ok {
                r.doubt_ok = true;
                self.doubt_excused += 1;
            }
        }
    }
}
