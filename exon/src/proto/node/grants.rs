//! Durable mode with `Rules::deliver_from_senders_copy`: the receiver journals no payload.
//! It journals how far each incarnation granted each source (`Granted`), and after a
//! restart delivers a token of an open incarnation from the copy its sender keeps until the
//! ACK (flagged if its `Handed` record says the last run handed it over).

use std::time::Instant;

use bytes::Bytes;

use crate::proto::journal::{Entry, Standing};
use crate::proto::{DeliveryId, Event, Node, NodeId};

/// Open incarnations a journal keeps at most, per receiver record allowed: records outlive
/// restarts now, so more than the live ones may be open (removed, evicted, or of an
/// earlier run), until their sources' frontiers pass them.
const OPEN_PER_RECORD: usize = 4;

impl Node {
    /// Whether this node journals grants instead of deliveries (durable mode, the rule on).
    pub(super) fn journals_grants(&self) -> bool {
        self.journal.is_some() && self.rules.deliver_from_senders_copy
    }

    /// Durable mode: incarnation `r` of `src`'s record granted it slots below `end`: a
    /// `Granted` record of `end`, unless one holds it already. The SLOTS need not wait for
    /// it: the log is written in order, so a delivery into them, which waits for its own
    /// `Handed` record, finds this one stored too; and a crash before it is stored leaves
    /// the incarnation unknown with nothing handed over in it (its tokens get LOST, and
    /// their messages come again in fresh slots, delivered once).
    pub(super) fn journal_granted(&mut self, src: NodeId, r: u64, end: u64) {
        if !self.journals_grants() {
            return;
        }
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        if j.grants.grant(src, r, end) {
            j.write(Entry::Granted {
                from: src,
                rck: r,
                end,
            });
        }
    }

    /// Durable mode: whether a new incarnation may be opened (the journal keeps a bounded
    /// number open). Counted when not.
    pub(super) fn journal_has_room_for_grants(&mut self) -> bool {
        let cap = self
            .cfg
            .limits
            .max_receiver_records
            .saturating_mul(OPEN_PER_RECORD);
        let full =
            self.journals_grants() && self.journal.as_ref().is_some_and(|j| j.grants.len() >= cap);
        if full {
            self.stats.rejects.too_many_records += 1;
        }
        !full
    }

    /// Durable mode: the unproven record of `(src, r)` was evicted (nothing was delivered
    /// into it): its incarnation closes (a `Granted` record of end 0).
    pub(super) fn journal_closed(&mut self, src: NodeId, r: u64) {
        if !self.journals_grants() {
            return;
        }
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        if j.grants.grant(src, r, 0) {
            j.write(Entry::Granted {
                from: src,
                rck: r,
                end: 0,
            });
        }
    }

    /// Durable mode: whether the token of slot `s` of `(src, r)`, an incarnation of an
    /// earlier run no live record holds, is to be delivered again: its incarnation is open,
    /// the slot below its end and above the source's frontier, and the archive does not
    /// know it. Otherwise the journal answers as without this rule (`answer_without_record`:
    /// ACK if taken, nothing while held, LOST or DOUBT for a slot its sender holds no token
    /// in).
    pub(super) fn journal_redelivers(&self, src: NodeId, r: u64, s: u64) -> bool {
        let Some(j) = self.journal.as_ref().filter(|_| self.journals_grants()) else {
            return false;
        };
        if r >= j.run_start || j.archive.verdict(src, r, s).is_some() {
            return false;
        }
        match j.grants.standing(src, r, s) {
            Standing::Open => true,
            // The defect the rule prevents: a stale copy below the frontier delivered.
            Standing::Passed => !self.rules.redeliver_above_frontier,
            Standing::Closed => false,
        }
    }

    /// Durable mode: the token of `(src, r, s)` in an open incarnation of an earlier run is
    /// delivered, and kept in the archive until taken (its later copies get no answer, then
    /// ACK). Flagged as a redelivery if an earlier run handed it over (`Handed`, not
    /// taken): then at once. Otherwise it was never handed over: unflagged, once its own
    /// `Handed` record is stored (as any delivery).
    pub(super) fn redeliver(
        &mut self,
        now: Instant,
        src: NodeId,
        (r, s): (u64, u64),
        p: Bytes,
        senders_copy: bool,
    ) {
        let (payload, kept) = self.keep_payload(p);
        self.untaken.add(src, kept.charge);
        let every = self.cfg.timers.probe_interval;
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        j.archive.insert(now, src, r, s, false, every);
        // A log that does not vouch for `r` (damaged since, or new) may have lost its
        // `Handed` records: then any slot may have been handed over, and every copy is
        // flagged.
        let vouched = j.vouches_for(r, self.ck);
        if j.handed.remove(&(src, r, s)) || !vouched {
            self.stats.redelivered += 1;
            self.events.push_back(Event::Delivered {
                from: src,
                payload,
                id: DeliveryId::redelivered(src, r, s, kept),
            });
        } else {
            self.stats.delivered += 1;
            let ev = Event::Delivered {
                from: src,
                payload,
                id: DeliveryId::new(src, r, s, kept),
            };
            self.deliver(now, ev, src, (r, s), senders_copy);
        }
    }
}
