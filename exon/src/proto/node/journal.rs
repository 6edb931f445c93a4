//! Durable mode of the node: records asked for and gates opened when they are stored
//! (`poll_store`, `handle_stored`), and recovery from a journal (`recover`).

use std::time::Instant;

use crate::proto::frame::{TokenKind, Verdict};
use crate::proto::journal::gates::{Gate, Journal};
use crate::proto::journal::{Entry, Mark, Outcome, Recovered, RecoveredVerdict, Write};
use crate::proto::node::send::Stamp;
use crate::proto::recv::delivery::Kept;
use crate::proto::{Abandoned, DeliveryId, Event, MsgId, MsgIds, Node, NodeId, Payload};

/// Why [`Node::recover`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecoverError {
    /// The node already did something: recovery comes first, once.
    #[error("recover must be the first input of a new node, and comes once")]
    NotFresh,
}

impl Node {
    /// Input, first and once: turns durable mode on, with what a previous run of this node
    /// left in its journal (`Recovered::default()` for a node that never ran).
    ///
    /// From then on the node asks for [`Write`]s ([`poll_store`](Self::poll_store)) and holds
    /// back what depends on them until [`handle_stored`](Self::handle_stored): deliveries,
    /// acknowledgements, first transmissions of tokens, verdicts (see
    /// [`journal`](crate::proto::journal)). What it recovers: deliveries not taken are
    /// handed to the application again ([`DeliveryId::is_redelivery`]), taken ones are
    /// acknowledged to late copies of their tokens, tokens of incarnations this node made
    /// before the restart and delivered nothing into get RETRY (never DOUBT), and messages
    /// not resolved are sent again, in the slot they had (the receiver deduplicates).
    pub fn recover(&mut self, now: Instant, recovered: Recovered) -> Result<(), RecoverError> {
        if self.journal.is_some() || self.next_msg != 0 || !self.is_idle() {
            return Err(RecoverError::NotFresh);
        }
        let mut j = Journal::new(self.ck, recovered.covers, recovered.damaged);
        recover_keys(&mut j, &recovered);
        for &(from, below) in &recovered.forgotten {
            j.forgotten.raise(from, below);
        }
        for (peer, lane, value) in &recovered.marks {
            j.marks.set(*peer, *lane, value);
        }
        let every = self.cfg.timers.probe_interval;
        for d in recovered.deliveries {
            let taken = d.payload.is_none();
            j.archive.insert(now, d.from, d.rck, d.slot, taken, every);
            if let Some(payload) = d.payload {
                let kept = Kept {
                    charge: payload.len(),
                    pin: None,
                };
                self.untaken.add(d.from, kept.charge);
                self.stats.redelivered += 1;
                let ev = Event::Delivered {
                    from: d.from,
                    payload,
                    id: DeliveryId::redelivered(d.from, d.rck, d.slot, kept),
                };
                if d.early && self.rules.early_token_waits_for_stored {
                    // Its sender may never have stored it: held until it says so (a stored
                    // copy), or dropped once its frontier passes the slot.
                    self.unstored.arrived(d.from);
                    self.early_ready(now, ev);
                } else {
                    self.events.push_back(ev);
                }
            }
        }
        for &(from, r, s) in &recovered.handed {
            // Probed, so that the source's frontier forgets it even if it stays quiet
            // (its sender gave it up: no copy comes again).
            j.archive.watch(now, from, r, s.saturating_add(1), every);
        }
        j.handed.extend(recovered.handed.iter().copied());
        self.journal = Some(Box::new(j));
        for m in recovered.messages {
            if m.to == self.id {
                // Never written by a node (it refuses sends to itself): a damaged journal.
                continue;
            }
            self.next_msg = self.next_msg.max(m.id.0.saturating_add(1));
            if m.held {
                if let Some(j) = self.journal.as_mut() {
                    j.holds.insert(m.id);
                }
            }
            if recovered.damaged && self.rules.journal_covers_incarnations {
                // The log lost records after these: a newer slot (delivered there, this
                // one would get LOST and the message would go twice), or the verdict (the
                // receiver may have forgotten the slot). Nothing says which: in doubt.
                self.stats.in_doubt += 1;
                let event = Event::in_doubt(m.to, m.id);
                let g = Gate::Verdict {
                    to: m.to,
                    slot: None,
                    event,
                };
                let verdict = Some((m.to, Outcome::InDoubt));
                self.journal(now, Entry::Resolved { id: m.id, verdict }, g);
                continue;
            }
            if !self.senders.contains_key(&m.to) {
                let mut rec = self.new_sender_record(m.to, now);
                rec.set_durable();
                self.senders.insert(m.to, rec);
            }
            self.queued_bytes += m.payload.len();
            self.stats.recovered_messages += 1;
            if let Some(rec) = self.senders.get_mut(&m.to) {
                rec.restore(m.id, m.payload, m.assigned);
            }
        }
        self.recover_verdicts(recovered.verdicts);
        self.recover_held(recovered.held);
        // The journal covers this run's incarnations from here on: the clock's mark asked
        // for so far (the next ones as they are asked, `poll_clock_store`). After the
        // records above: a damaged journal's `Damaged` mark holds until this record, so
        // the messages it recovered are resolved in doubt before it, in the log.
        self.journal_covers(self.hw_asked.max(self.hw), true);
        let peers: Vec<NodeId> = self.senders.keys().copied().collect();
        for peer in peers {
            self.liveness_work(now, peer, true);
            self.outbox.wake(peer, usize::MAX);
            self.request_slots(peer);
            self.rearm_sender(peer);
        }
        Ok(())
    }

    /// Verdicts the journal stored and holds as not reported (a crash came between the
    /// record's sync and the report, or before the `Reported` record was stored): reported
    /// again, as events, the same verdicts. With the rule off they are forgotten.
    fn recover_verdicts(&mut self, verdicts: Vec<RecoveredVerdict>) {
        for v in verdicts {
            self.next_msg = self.next_msg.max(v.id.0.saturating_add(1));
            if !self.rules.report_stored_verdicts {
                if let Some(j) = self.journal.as_mut() {
                    j.report(v.id, 1);
                }
                continue;
            }
            let (to, id) = (v.to, v.id);
            let event = match v.outcome {
                Outcome::Acknowledged => Event::Acknowledged {
                    to,
                    ids: MsgIds::one(id),
                },
                Outcome::NotDelivered => Event::NotDelivered { to, id },
                Outcome::InDoubt => Event::in_doubt(to, id),
            };
            Event::push_merged(&mut self.events, event);
        }
    }

    /// Durable mode: event `e` is being handed to the application; a verdict's record may
    /// forget it (a `Reported` record, synced with the next commit).
    pub(super) fn journal_reported(&mut self, e: &Event) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        match e {
            Event::Acknowledged { ids, .. } => j.report(ids.first(), ids.count()),
            Event::InDoubt { id, .. } | Event::NotDelivered { id, .. } => j.report(*id, 1),
            _ => {}
        }
    }

    /// Whether the node runs in durable mode ([`recover`](Self::recover)).
    pub fn is_durable(&self) -> bool {
        self.journal.is_some()
    }

    /// Output (durable mode): the next record to append to the journal, in order. Report
    /// writes durable with [`handle_stored`](Self::handle_stored) once synced (a batch of
    /// them per sync: group commit).
    pub fn poll_store(&mut self) -> Option<Write> {
        self.journal.as_mut()?.poll_write()
    }

    /// Input (durable mode): every write numbered up to `through` is on stable storage.
    pub fn handle_stored(&mut self, now: Instant, through: u64) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        j.on_stored(through);
        while let Some(g) = self.journal.as_mut().and_then(|j| j.next_open()) {
            self.open_gate(now, g);
        }
    }

    /// Journal writes handed out and not yet reported durable, and actions waiting for
    /// them (durable mode).
    pub fn journal_backlog(&self) -> (u64, usize) {
        self.journal.as_ref().map_or((0, 0), |j| j.backlog())
    }

    /// Deliveries a durable receiver remembers for late copies of their tokens.
    pub fn remembered_deliveries(&self) -> usize {
        self.journal.as_ref().map_or(0, |j| j.archive.len())
    }

    /// Journals `entry` and holds `g` until it is stored, unless the rule for `g` is
    /// switched off (the checker's self-test: then it acts at once).
    pub(super) fn journal(&mut self, now: Instant, entry: Entry, g: Gate) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let seq = j.write(entry);
        self.gate_on(now, seq, g);
    }

    /// Durable mode: `g` waits for write `seq` (or goes at once, with its rule off).
    fn gate_on(&mut self, now: Instant, seq: u64, g: Gate) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let waits = match &g {
            Gate::Deliver(_) | Gate::DeliverEarly(_) => self.rules.journal_before_delivery,
            Gate::Take(_) => self.rules.journal_before_ack,
            Gate::Assigned { .. } => self.rules.journal_before_token,
            Gate::Verdict { .. } | Gate::Stored(_) | Gate::Released { .. } => {
                self.rules.journal_before_verdict
            }
            Gate::Covers { .. } => true,
        };
        if waits {
            j.gate(seq, g);
        } else {
            self.open_gate(now, g);
        }
    }

    fn open_gate(&mut self, now: Instant, g: Gate) {
        match g {
            Gate::Deliver(ev) | Gate::Stored(ev) => self.events.push_back(ev),
            Gate::DeliverEarly(ev) => self.early_ready(now, ev),
            Gate::Take(id) => self.complete_take(now, id),
            Gate::Assigned { to, below } => {
                if self
                    .senders
                    .get_mut(&to)
                    .is_some_and(|rec| rec.logged_through(below))
                {
                    self.outbox.wake(to, usize::MAX);
                }
            }
            Gate::Covers { .. } => {
                // New incarnations may be made: sources refused meanwhile ask again.
            }
            Gate::Released { to, .. } => self.release_frontier(now, to),
            Gate::Verdict { to, event, .. } => {
                Event::push_merged(&mut self.events, event);
                let cap = self.journal.as_ref().and_then(|j| j.frontier_cap(to));
                if let Some(rec) = self.senders.get_mut(&to) {
                    rec.set_frontier_cap(cap);
                    rec.note_if_idle(now);
                }
                self.rearm_sender(to);
            }
        }
    }

    /// Durable mode (rule `frontier_waits_for_moves`): the journalled slots `to`'s
    /// messages left for fresh ones (RETRY, LOST) are undone by `Unassigned` records; the
    /// frontier stays below each until its record is durable, so that this node never
    /// reports a frontier above a slot its journal would send a token in after a crash.
    pub(super) fn journal_moved(&mut self, now: Instant, to: NodeId) {
        if self.journal.is_none() {
            return;
        }
        let Some(rec) = self.senders.get_mut(&to) else {
            return;
        };
        let moved = rec.take_moved();
        if moved.is_empty() || !self.rules.frontier_waits_for_moves {
            return;
        }
        for (id, rck, slot) in moved {
            let g = Gate::Released { to, slot };
            self.journal(now, Entry::Unassigned { id, rck, slot }, g);
        }
        self.release_frontier(now, to);
    }

    /// Durable mode: the slots assigned to `to`'s messages since the last call go to the
    /// journal; their tokens wait for it. Inline, so that a node without a journal pays one
    /// test where a message is sent or a datagram comes (the call cost about 18
    /// instructions each time).
    #[inline]
    pub(super) fn journal_assignments(&mut self, now: Instant, to: NodeId) {
        if self.journal.is_some() {
            self.journal_assignments_now(now, to);
        }
    }

    /// [`journal_assignments`](Self::journal_assignments) with a journal.
    #[inline(never)]
    fn journal_assignments_now(&mut self, now: Instant, to: NodeId) {
        let Some(rec) = self.senders.get_mut(&to) else {
            return;
        };
        for (id, rck, slot) in rec.take_assigned() {
            let g = Gate::Assigned {
                to,
                below: slot.saturating_add(1),
            };
            self.journal(now, Entry::Assigned { id, rck, slot }, g);
        }
    }

    /// Durable mode: the verdicts a sender record settled go to the journal; the
    /// application hears them, and the frontier passes their slots, once stored.
    pub(super) fn journal_verdicts(&mut self, now: Instant, to: NodeId) {
        self.journal_moved(now, to);
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        // Taken, then given back empty below: its room is kept for the next verdicts.
        let mut held = std::mem::take(&mut j.held);
        for (slot, event) in held.drain(..) {
            let (id, outcome) = match &event {
                // Held one message each: the journal resolves them one by one.
                Event::Acknowledged { ids, .. } => (ids.first(), Outcome::Acknowledged),
                Event::InDoubt { id, .. } => (*id, Outcome::InDoubt),
                Event::NotDelivered { id, .. } => (*id, Outcome::NotDelivered),
                _ => continue,
            };
            let g = Gate::Verdict {
                to,
                slot: Some(slot),
                event,
            };
            // Consecutive messages resolved alike share one record (`ResolvedRun`).
            let seq = (self.journal.as_mut()).map_or(0, |j| j.resolve(id, to, outcome));
            self.gate_on(now, seq, g);
        }
        if let Some(j) = self.journal.as_mut().filter(|j| j.held.is_empty()) {
            j.held = held;
        }
        let cap = self.journal.as_ref().and_then(|j| j.frontier_cap(to));
        if let Some(rec) = self.senders.get_mut(&to) {
            rec.set_frontier_cap(cap);
        }
    }

    /// Durable mode: message `id` to `to` was accepted; the application hears it is stored
    /// once it is.
    /// With `answers`, the message is a reply that takes that delivery: one `Replied`
    /// record, which the take's acknowledgement waits for too.
    pub(super) fn journal_accepted(
        &mut self,
        now: Instant,
        id: MsgId,
        to: NodeId,
        payload: Payload,
        answers: Option<DeliveryId>,
        stamp: Stamp,
    ) {
        let g = Gate::Stored(Event::Stored { to, id });
        // The record holds the payload as it is, head and body: the log copies both into
        // its buffer when it encodes the record, on the journal's thread.
        match stamp {
            Stamp::Plain => {}
            Stamp::Held if self.rules.hold_call_requests => {
                if let Some(j) = self.journal.as_mut() {
                    j.holds.insert(id);
                }
                return self.journal(now, Entry::AcceptedHeld { id, to, payload }, g);
            }
            // The defect the rule prevents: an `Accepted` record, forgotten at its verdict.
            Stamp::Held => {}
            Stamp::Key(key) => {
                if let Some(j) = self.journal.as_mut() {
                    j.keys.insert(to, key);
                }
                let accepted = Entry::AcceptedKeyed {
                    id,
                    to,
                    key,
                    payload,
                };
                return self.journal(now, accepted, g);
            }
            Stamp::Mark(Mark { lane, value }) => {
                if let Some(j) = self.journal.as_mut() {
                    j.marks.set(to, lane, &value);
                    if !self.rules.mark_in_one_record {
                        // The defect the rule prevents: the mark, then the message.
                        j.write(Entry::Mark {
                            peer: to,
                            lane,
                            value,
                        });
                        return self.journal(now, Entry::Accepted { id, to, payload }, g);
                    }
                }
                let accepted = Entry::AcceptedMark {
                    id,
                    to,
                    lane,
                    value,
                    payload,
                };
                return self.journal(now, accepted, g);
            }
        }
        let Some(d) = answers else {
            self.journal(now, Entry::Accepted { id, to, payload }, g);
            return;
        };
        let (r, s) = d.slot();
        if !self.rules.reply_in_one_record {
            // The defect the rule prevents: the take, then the reply, in two records.
            let taken = Entry::Taken {
                from: d.from(),
                rck: r,
                slot: s,
            };
            self.journal(now, taken, Gate::Take(d));
            self.journal(now, Entry::Accepted { id, to, payload }, g);
            return;
        }
        let entry = Entry::Replied {
            from: d.from(),
            rck: r,
            slot: s,
            id,
            payload,
        };
        self.journal(now, entry, g);
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let seq = j.last_seq();
        if self.rules.journal_before_ack {
            j.gate(seq, Gate::Take(d));
        } else {
            self.open_gate(now, Gate::Take(d));
        }
    }

    /// Whether the delivery `id` waits to be taken (handed out, not taken nor being taken).
    pub(super) fn is_waiting(&self, id: &DeliveryId) -> bool {
        let (from, (r, s)) = (id.from(), id.slot());
        let live = self
            .receivers
            .get(&from)
            .is_some_and(|rec| rec.rck() == r && rec.held().contains(s));
        match self.journal.as_ref() {
            None => live,
            Some(j) => (live || j.archive.is_held(from, r, s)) && !j.is_taking(id),
        }
    }

    /// Durable mode: a message given up is forgotten by the journal too; returns whether
    /// its verdict waits for the record (it then comes as an event once stored). Until its
    /// `Resolved` record is stored, the frontier to `to` stays below its slot (if it had
    /// one): a crash before then recovers the message in that slot, and the receiver must
    /// still know whether it delivered it; and the application does not hear the verdict,
    /// which the restarted node decides anew.
    pub(super) fn journal_abandoned(
        &mut self,
        now: Instant,
        to: NodeId,
        id: MsgId,
        slot: Option<u64>,
        verdict: Abandoned,
    ) -> bool {
        if self.journal.is_none() {
            return false;
        }
        let pending = self.rules.deadline_verdict_after_record;
        if pending {
            let (outcome, event) = match verdict {
                Abandoned::NotDelivered => (Outcome::NotDelivered, Event::NotDelivered { to, id }),
                _ => (Outcome::InDoubt, Event::in_doubt(to, id)),
            };
            let entry = Entry::Resolved {
                id,
                verdict: Some((to, outcome)),
            };
            self.journal(now, entry, Gate::Verdict { to, slot, event });
        } else if let Some(slot) = slot {
            // The defect (self-test only): the verdict went out already.
            let entry = Entry::Resolved { id, verdict: None };
            self.journal(now, entry, Gate::Released { to, slot });
        } else if let Some(j) = self.journal.as_mut() {
            j.write(Entry::Resolved { id, verdict: None });
        }
        let cap = self.journal.as_ref().and_then(|j| j.frontier_cap(to));
        if let Some(rec) = self.senders.get_mut(&to) {
            rec.set_frontier_cap(cap);
        }
        pending
    }

    /// A held slot's record is stored: the frontier to `to` may move on.
    fn release_frontier(&mut self, now: Instant, to: NodeId) {
        let cap = self.journal.as_ref().and_then(|j| j.frontier_cap(to));
        if let Some(rec) = self.senders.get_mut(&to) {
            rec.set_frontier_cap(cap);
            rec.note_if_idle(now);
        }
        self.rearm_sender(to);
    }

    /// Durable mode: the delivery `ev` (slot `s` of `(src, r)`) reaches the application once
    /// its record is stored: `Handed` (no payload) with `Rules::deliver_from_senders_copy`,
    /// `Delivered` (with it) without, or when its sender did not say it keeps its own copy
    /// until the ACK whatever happens (`senders_copy`: an STOKEN or SFRAG). Not durable, it
    /// is handed over at once.
    pub(super) fn deliver(
        &mut self,
        now: Instant,
        ev: Event,
        src: NodeId,
        (r, s): (u64, u64),
        kind: TokenKind,
    ) {
        let early = kind.is_early() && self.rules.early_token_waits_for_stored;
        if early {
            self.unstored.arrived(src);
        }
        if self.journal.is_none() {
            if early {
                self.early_ready(now, ev);
            } else {
                self.events.push_back(ev);
            }
            return;
        }
        let Event::Delivered { payload, .. } = &ev else {
            return;
        };
        let entry = if self.rules.deliver_from_senders_copy && kind.senders_copy() {
            // The sender's copy stands for the receiver's (the ACK waits for the take): the
            // journal says only that the slot was handed over, so that a restart flags the
            // copy that comes back, and nothing else.
            Entry::Handed {
                from: src,
                rck: r,
                slot: s,
            }
        } else if early {
            // Held by a restart too until its sender's word comes (it may never stored it).
            Entry::DeliveredEarly {
                from: src,
                rck: r,
                slot: s,
                payload: payload.clone(),
            }
        } else {
            Entry::Delivered {
                from: src,
                rck: r,
                slot: s,
                payload: payload.clone(),
            }
        };
        let gate = if early {
            Gate::DeliverEarly(ev)
        } else {
            Gate::Deliver(ev)
        };
        self.journal(now, entry, gate);
    }

    /// Durable mode: the answer the journal gives a token (or a REQCREDIT) of
    /// `(src, r, s)` for which no live record holds `r`: `Some(answer)` when it knows (ACK
    /// for a taken delivery, no answer for one the application holds, LOST for a slot of
    /// an incarnation it vouches for that holds no delivery), `None` when it cannot say.
    ///
    /// The journal vouches for an incarnation when it holds every delivery ever made into
    /// it: one this run made (each delivery was stored before it was handed over), or one
    /// an earlier run made inside what the journal covered (`Covers`), unless the storage
    /// lost records. A new or replaced journal covers nothing made before it, a restored
    /// clock nothing between its copy and the run that started above it: DOUBT there.
    pub(super) fn journal_verdict(&self, src: NodeId, r: u64, s: u64) -> Option<Option<Verdict>> {
        let j = self.journal.as_ref()?;
        if let Some(v) = j.archive.verdict(src, r, s) {
            let unseen = self.rules.dropped_unseen_doubt && self.rules.doubt_below_forgotten;
            if v.is_some() && unseen && s < j.forgotten.below(src) {
                // A take stored after its sender's frontier passed the slot (an early
                // delivery dropped unseen at that frontier, or a take that came late):
                // the frontier's `Confirmed` came first, so the archive still has it
                // until its probe brings the frontier again. Below the forgotten
                // frontier, as below: DOUBT.
                return Some(Some(Verdict::Doubt));
            }
            return Some(v);
        }
        if !self.rules.journal_covers_incarnations {
            // The defect (self-test only): every incarnation from before this run is taken
            // for covered, whatever journal the node restarted with.
            return (r < j.run_start && !j.damaged).then_some(Some(Verdict::Lost));
        }
        if !j.vouches_for(r, self.ck) {
            return None;
        }
        if self.rules.doubt_below_forgotten && s < j.forgotten.below(src) {
            // Below the frontier past which this sender's deliveries were forgotten: the
            // journal cannot say the slot was never filled. Only a sender that forgot
            // what it sent since (restored from an older copy) sends such a token.
            return Some(Some(Verdict::Doubt));
        }
        Some(Some(Verdict::Lost))
    }

    /// Durable mode: the journal covers this node's incarnations below `below` (the
    /// clock's mark asked for): a `Covers` record, which new incarnations wait for. The
    /// first one (at recovery) is written whatever `below`: it records where the journal
    /// starts.
    pub(super) fn journal_covers(&mut self, below: u64, first: bool) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        if below <= j.covers_asked && !first {
            return;
        }
        j.covers_asked = j.covers_asked.max(below);
        let (from, below) = (j.covers_from, j.covers_asked);
        let seq = j.write(Entry::Covers { from, below });
        j.gate(seq, Gate::Covers { below });
    }

    /// Durable mode: whether incarnation `r` may be made now (the journal covers it
    /// durably). Always true in other modes, and with the rule off.
    pub(super) fn journal_covers_incarnation(&self, r: u64) -> bool {
        !self.rules.journal_covers_incarnations
            || self.journal.as_ref().is_none_or(|j| r < j.covered_below)
    }

    /// Durable mode: the application took `id`; the ACK waits for the `Taken` record.
    /// Returns whether the take was accepted (the delivery was waiting).
    /// With `mark`, the take sets the mark `(source, lane)` in the same record.
    pub(super) fn journal_take(
        &mut self,
        now: Instant,
        id: DeliveryId,
        mark: Option<Mark>,
    ) -> bool {
        if self.journal.is_none() || !self.is_waiting(&id) {
            return false;
        }
        let (from, (r, s)) = (id.from(), id.slot());
        let entry = match mark {
            None => Entry::Taken {
                from,
                rck: r,
                slot: s,
            },
            Some(Mark { lane, value }) => match self.journal.as_mut() {
                Some(j) if !self.rules.mark_in_one_record => {
                    // The defect the rule prevents: the mark, then the take.
                    j.marks.set(from, lane, &value);
                    j.write(Entry::Mark {
                        peer: from,
                        lane,
                        value,
                    });
                    Entry::Taken {
                        from,
                        rck: r,
                        slot: s,
                    }
                }
                j => {
                    if let Some(j) = j {
                        j.marks.set(from, lane, &value);
                    }
                    Entry::TakenMark {
                        from,
                        rck: r,
                        slot: s,
                        lane,
                        value,
                    }
                }
            },
        };
        self.journal(now, entry, Gate::Take(id));
        true
    }

    /// A take is stored (or needs no storing): the slot is released and acknowledged, and a
    /// durable node remembers it for late copies of its token.
    pub(super) fn complete_take(&mut self, now: Instant, id: DeliveryId) {
        let (from, (r, s)) = (id.from(), id.slot());
        if let Some(j) = self.journal.as_mut() {
            let every = self.cfg.timers.probe_interval;
            if j.archive.take(from, r, s) {
                // A delivery recovered after a restart: no live record holds it.
                self.release_taken(id);
                // An early delivery dropped unseen: DOUBT (`Node::take_verdict`).
                let v = self.take_verdict(id);
                self.answer_taken(now, from, (v, r, s), false);
                return;
            }
            j.archive.insert(now, from, r, s, true, every);
        }
        self.take_live(now, id);
    }

    /// Durable mode: `src`'s frontier is `l`; taken deliveries below it are forgotten, and
    /// so are hand-overs of an earlier run below it that never came again.
    pub(super) fn journal_frontier(&mut self, now: Instant, src: NodeId, l: u64) {
        self.unstored_frontier(now, src, l);
        let handed = self.forget_handed_below(src, l) > 0;
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let forgot = j.archive.confirm(src, l) > 0;
        // Below `l` the sender holds nothing even where nothing was forgotten: a slot there
        // that no record knows (a record lost in a restart, one waived unfilled) may hold a
        // message its sender moved to a later slot (`Rules::doubt_below_forgotten`). The
        // record costs little: most frontiers forget taken deliveries and write it anyway.
        // A source with no record here only raises it in memory (bounded): an
        // unauthenticated one cannot make the journal write a record per datagram.
        let raised = self.rules.doubt_below_forgotten && l > j.forgotten.below(src);
        if forgot || handed || (raised && self.receivers.contains_key(&src)) {
            j.forgotten.raise(src, l);
            j.write(Entry::Confirmed {
                from: src,
                below: l,
            });
        } else if raised {
            j.forgotten.raise(src, l);
        }
        self.drop_revived(src);
    }

    /// Durable mode: the archive's probes due at `now` (SLOTS(s, r, 0) to each source it
    /// remembers deliveries of, answered with the source's frontier).
    pub(super) fn probe_archive(&mut self, now: Instant) {
        let (every, max) = (
            self.cfg.timers.probe_interval,
            self.cfg.timers.max_probe_interval,
        );
        let cap = self.outbox_cap();
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        for (peer, s, r) in j.archive.due(now, every, max) {
            self.stats.probes += 1;
            if !self.outbox.probe(peer, s, r, cap) {
                reject!(self.outbox_full);
            }
        }
    }

    /// When the archive probes next.
    pub(super) fn archive_deadline(&self) -> Option<Instant> {
        self.journal.as_ref()?.archive.next_probe()
    }

    /// Durable mode: whether verdicts to `to` wait for the journal (its record must stay,
    /// its frontier below them).
    pub(super) fn is_resolving(&self, to: NodeId) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| j.frontier_cap(to).is_some())
    }
}

/// The application keys `recovered` holds (`Node::send_keyed`). A damaged journal lost
/// records, a replaced one all of them: keys accepted there may be gone, and a row sent
/// again under one would be a second message. That is recorded (`KeysForgotten`), so that
/// later restarts refuse keyed sends too until the application settles each destination.
fn recover_keys(j: &mut Journal, recovered: &Recovered) {
    j.keys.extend(recovered.keys.iter().copied());
    j.keys_forgotten = recovered.keys_forgotten;
    j.keys_settled
        .extend(recovered.keys_settled.iter().copied());
    if recovered.damaged || recovered.replaced {
        j.keys_forgotten = true;
        j.keys_settled.clear();
        j.write(Entry::KeysForgotten);
    }
}
