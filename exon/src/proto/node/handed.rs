//! Durable mode with `Rules::deliver_from_senders_copy`: a delivery whose sender keeps its
//! copy until the ACK is journalled without its payload (`Handed`); after a restart, the
//! copy its sender sends again is delivered again, flagged, if the journal says it was
//! handed over and not taken.

use std::time::Instant;

use bytes::Bytes;

use crate::proto::{DeliveryId, Event, Node, NodeId};

impl Node {
    /// Durable mode: whether the token of slot `s` of `(src, r)`, of an earlier run (no
    /// live record holds it), is to be delivered again: an earlier run handed it over
    /// (`Handed`) and its application did not take it, and this run has not delivered it
    /// again yet. Any other token no live record holds gets the journal's answer
    /// (`answer_without_record`: ACK if taken, nothing while held, LOST for a slot of an
    /// incarnation the journal vouches for, which holds no delivery, DOUBT when it cannot
    /// vouch).
    pub(super) fn journal_redelivers(&self, src: NodeId, r: u64, s: u64) -> bool {
        let Some(j) = self.journal.as_ref() else {
            return false;
        };
        self.rules.deliver_from_senders_copy
            && j.handed.contains(&(src, r, s))
            && j.archive.verdict(src, r, s).is_none()
    }

    /// Durable mode: the token of `(src, r, s)`, handed over by an earlier run and not
    /// taken, came again from its sender's copy: delivered again at once, flagged as a
    /// redelivery under its id, and kept in the archive until taken (its later copies get
    /// no answer, then ACK).
    pub(super) fn redeliver(&mut self, now: Instant, src: NodeId, (r, s): (u64, u64), p: Bytes) {
        let (payload, kept) = self.keep_payload(p);
        self.untaken.add(src, kept.charge);
        let every = self.cfg.timers.probe_interval;
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        j.archive.insert(now, src, r, s, false, every);
        j.handed.remove(&(src, r, s));
        self.stats.redelivered += 1;
        self.events.push_back(Event::Delivered {
            from: src,
            payload,
            id: DeliveryId::redelivered(src, r, s, kept),
        });
    }

    /// Durable mode: `src`'s frontier is `l`: its hand-overs recovered in slots below it
    /// will never come again (their sender gave them up: it holds no copy). Returns how
    /// many were forgotten.
    pub(super) fn forget_handed_below(&mut self, src: NodeId, l: u64) -> usize {
        let Some(j) = self.journal.as_mut().filter(|j| !j.handed.is_empty()) else {
            // Nothing to forget (the usual case: this runs at every frontier a source sends).
            return 0;
        };
        let before = j.handed.len();
        j.handed.retain(|&(from, _, s)| from != src || s >= l);
        before - j.handed.len()
    }
}
