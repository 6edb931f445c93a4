//! Receiving TOKENs and their verdicts: delivery, the answer to a token (ACK, DOUBT or
//! RETRY), eviction of unused receiver records under pressure, and the sender's handling of
//! a verdict.

use std::time::Instant;

use bytes::Bytes;

use super::eviction::Candidate;
use super::fragments::Outgoing;
use super::frame::Verdict;
use super::sender::{Queued, Token};
use super::{DeliveryId, Event, Node, NodeId};

impl Node {
    /// TOKEN(s, r, payload) from `src` (lines 75-81, with rule 4 and the verdicts for
    /// incarnations this node no longer knows).
    ///
    /// Returns true when the verdict should not wait for the ACK delay: a duplicate (the
    /// sender is retransmitting, so an ACK was lost or late) or anything but an ACK.
    pub(super) fn on_token(
        &mut self,
        now: Instant,
        src: NodeId,
        s: u64,
        r: u64,
        payload: Bytes,
    ) -> bool {
        let mut urgent = false;
        let on_take = self.rules.ack_on_take;
        let room = self.has_room_for_delivery() || !on_take;
        let verdict = match self.receivers.get_mut(&src) {
            Some(rec) if rec.rck == r => {
                rec.heard(now);
                if rec.slots.contains(s) && !room {
                    // The application is behind: neither delivered nor answered, so the
                    // sender sends it again later.
                    self.stats.held_back += 1;
                    None
                } else if rec.fill(s, r) {
                    rec.proven = true;
                    if on_take {
                        // Held until taken (`handle_taken`).
                        rec.held.hold(s);
                    }
                    if rec.is_spent() {
                        self.receivers.remove(&src);
                    }
                    let (payload, kept) = self.keep_payload(payload);
                    if on_take {
                        self.untaken += 1;
                        self.untaken_bytes += kept.charge;
                    } else if let Some(key) = kept.pin {
                        // Not held: nothing to give back at a take.
                        self.pins.release(key);
                    }
                    self.stats.delivered += 1;
                    self.events.push_back(Event::Delivered {
                        from: src,
                        payload,
                        id: DeliveryId::new(src, r, s, kept),
                    });
                    // Acknowledged once taken (`handle_taken`), unless the rule is off.
                    (!on_take).then_some(Verdict::Ack)
                } else if on_take && rec.held.contains(s) {
                    // A duplicate of a delivery the application has not taken yet: no
                    // answer until it is taken.
                    self.stats.duplicates_dropped += 1;
                    None
                } else {
                    self.stats.duplicates_dropped += 1;
                    urgent = true;
                    Some(Verdict::Ack)
                }
            }
            other => {
                if let Some(rec) = other {
                    rec.heard(now);
                }
                urgent = true;
                self.verdict_without_record(r, s)
            }
        };
        if let Some(v) = verdict {
            if !self.outbox.reply(src, v, r, s, self.outbox_cap()) {
                self.stats.rejects.outbox_full += 1;
            }
        }
        urgent
    }

    /// The answer to a TOKEN of slot `s` of incarnation `r` when no record of `r` exists.
    ///
    /// An incarnation made since this node started and then removed had every slot filled
    /// or waived, so the token is a duplicate: ACK (rule 4). One evicted under pressure: what
    /// its slot deserves (`eviction.rs`: RETRY when nothing was delivered into it, ACK for a
    /// filled slot, DOUBT when unknown). One older than this node's start (lost in a
    /// restart) or forgotten after an eviction: DOUBT, since it may or may not have been
    /// delivered.
    pub(super) fn verdict_without_record(&mut self, r: u64, s: u64) -> Option<Verdict> {
        if self.rules.plausible_input && r >= self.ck {
            // Never issued by this node (incarnations come from the clock): no verdict at
            // all, so a forged token cannot make this node vouch for anything.
            self.stats.rejects.never_issued += 1;
            return None;
        }
        let doubt = self.rules.doubt_lost_incarnations;
        if let Some(v) = self.evictions.verdict(r, s).filter(|_| doubt) {
            if v == Verdict::Ack {
                self.stats.duplicates_dropped += 1;
            }
            Some(v)
        } else if doubt && r < self.doubt_below {
            Some(Verdict::Doubt)
        } else {
            self.stats.duplicates_dropped += 1;
            self.rules.ack_without_record.then_some(Verdict::Ack)
        }
    }

    /// Makes room for a new receiver record by evicting the oldest record nothing was
    /// delivered into yet (a source that asked for slots and never used them: a forger, or
    /// a sender that went away). Its later TOKENs get RETRY, so nothing is lost. Returns
    /// false when every record is in use.
    pub(super) fn evict_unproven(&mut self) -> bool {
        while let Some((src, r)) = self.unproven.pop_front() {
            let Some(rec) = self.receivers.get(&src) else {
                continue;
            };
            if rec.rck != r || rec.proven {
                continue;
            }
            self.evict_receiver(src, r);
            return true;
        }
        false
    }

    /// Removes the unproven receiver record of `src` (incarnation `r`) and remembers `r` as
    /// evicted, so its tokens get RETRY.
    pub(super) fn evict_receiver(&mut self, src: NodeId, r: u64) {
        self.receivers.remove(&src);
        self.stats.evictions += 1;
        let forgot = self.evictions.evicted_unused(r);
        self.forget_evicted_below(forgot);
    }

    /// Evicted incarnations below `below` are no longer remembered: their tokens are
    /// answered DOUBT (safe, less precise).
    fn forget_evicted_below(&mut self, below: Option<u64>) {
        if let Some(b) = below {
            self.doubt_below = self.doubt_below.max(b);
        }
    }

    /// Makes room for a new receiver record at `now`: evicts (rule `evict_silent_records`)
    /// the record whose source has been silent longest, at least `probe_interval`, with no
    /// delivery waiting for the application; else the oldest record nothing was delivered
    /// into, however recent (a flood of requests from forged ids). Returns false when every
    /// record is in use.
    pub(super) fn make_room(&mut self, now: Instant) -> bool {
        // Only a sealed node evicts records something was delivered into: their RETRYs are
        // then authentic, where a plaintext sender must refuse a RETRY after an ACK of the
        // same incarnation as a forgery.
        if !self.evicts_proven() {
            return self.evict_unproven();
        }
        let receivers = &self.receivers;
        let candidate = |(src, rec): (&NodeId, &super::receiver::RRecord)| Candidate {
            src: *src,
            rck: rec.rck,
            last_heard: rec.last_heard,
            evictable: rec.held.is_empty(),
        };
        let victim = self.evictions.next_victim(
            now,
            self.cfg.probe_interval,
            || receivers.iter().map(candidate),
            |src| receivers.get_key_value(&src).map(candidate),
        );
        let Some((src, r)) = victim else {
            return self.evict_unproven();
        };
        if self.receivers.get(&src).is_some_and(|rec| !rec.proven) {
            self.evict_receiver(src, r);
        } else {
            self.evict_proven(src);
        }
        true
    }

    /// Removes the receiver record of `src`, something delivered into it, remembering its
    /// free slots (rule `remember_evicted_slots`) so that its late TOKENs get RETRY for them
    /// and ACK for filled ones.
    pub(super) fn evict_proven(&mut self, src: NodeId) {
        let Some(rec) = self.receivers.remove(&src) else {
            return;
        };
        self.stats.evictions += 1;
        self.stats.evictions_proven += 1;
        if self.rules.remember_evicted_slots {
            let forgot = self.evictions.evicted_used(rec.rck, rec.sck, &rec.slots);
            self.forget_evicted_below(forgot);
        }
    }

    /// Whether this node evicts receiver records something was delivered into: sealed
    /// nodes with the rule on (a plaintext sender refuses the RETRY such an eviction may
    /// bring, as a forgery).
    pub(super) fn evicts_proven(&self) -> bool {
        self.rules.evict_silent_records && self.sealer.is_some()
    }

    /// ACK, DOUBT or RETRY(r, range) from `src` (ACK: lines 82-86): settles the tokens of
    /// incarnation `r` in `rg`. DOUBT and RETRY also mean the receiver lost incarnation `r`:
    /// envelopes under it are dropped and fresh slots asked for.
    pub(super) fn on_verdict(
        &mut self,
        now: Instant,
        src: NodeId,
        v: Verdict,
        r: u64,
        rg: std::ops::Range<u64>,
    ) {
        let Some(rec) = self.senders.get_mut(&src) else {
            self.stats.stale_acks += 1;
            return;
        };
        let keep_own = self.rules.token_keeps_incarnation;
        let plausible = self.rules.plausible_input;
        if plausible && v == Verdict::Retry && rec.proven.contains(&r) && self.sealer.is_none() {
            // The receiver delivered tokens of `r`, so a plaintext receiver never evicted `r`
            // (only sealed nodes evict records something was delivered into): a RETRY for
            // it cannot be true, and obeying it could deliver a message twice.
            self.stats.rejects.implausible_verdict += 1;
            return;
        }
        let rec_rck = rec.rck;
        let (stats, events, queued_bytes) =
            (&mut self.stats, &mut self.events, &mut self.queued_bytes);
        let (rtt, bytes, flight, mtud) =
            (&mut rec.rtt, &mut rec.bytes, &mut rec.flight, &mut rec.mtud);
        let credit = &mut rec.credit;
        let mut retry = Vec::new();
        // A token that never left cannot have a verdict.
        let pick =
            |tok: &Token| tok.incarnation(rec_rck, keep_own) == r && (!plausible || tok.sends > 0);
        let removed = rec.tokens.remove_in(rg, pick, |_, tok| {
            flight.on_settled(now, &tok, v == Verdict::Ack, rtt);
            if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                credit.give_back(tok.rck, Outgoing::charge_of(o.total()));
            }
            if v == Verdict::Ack && tok.sends == 1 && tok.frag.is_none() {
                mtud.on_acked(tok.reach as usize);
            }
            let id = tok.id;
            if v == Verdict::Retry {
                stats.retried += 1;
                retry.push(Queued {
                    id,
                    payload: tok.payload,
                });
                return;
            }
            *bytes -= tok.payload.len();
            *queued_bytes -= tok.payload.len();
            if v == Verdict::Doubt {
                stats.in_doubt += 1;
                events.push_back(Event::InDoubt { to: src, id });
                return;
            }
            stats.acknowledged += 1;
            events.push_back(Event::Acknowledged { to: src, id });
        }) > 0;
        // Messages to send again go first, in their original order.
        for msg in retry.into_iter().rev() {
            rec.queue.push_front(msg);
        }
        if v != Verdict::Ack && rec.rck == Some(r) {
            // The receiver lost this incarnation: its envelopes are worthless, and so is
            // its reassembly credit.
            rec.env_start = rec.sck;
            rec.rck = None;
            rec.credit.reset();
        }
        if v == Verdict::Retry && rec.fill_envelopes() > 0 {
            self.outbox.wake(src, usize::MAX);
        }
        if removed && v == Verdict::Ack {
            rec.note_proven(r);
        }
        if !removed {
            self.stats.stale_acks += 1;
        } else if rec.tokens.is_empty() {
            rec.rto_at = None;
        }
    }

    /// DOUBT or RETRY for incarnation `r` from `src`: the receiver holds nothing of `r`, so
    /// a token of `r` that never left this node was certainly not delivered. Such tokens
    /// (a message that waited for reassembly credit, or one not yet written) go back to the
    /// head of the queue, in order, for fresh slots: they are neither lost nor reported in
    /// doubt, and none waits for credit under an incarnation that is gone.
    pub(super) fn requeue_unsent(&mut self, src: NodeId, r: u64) {
        let keep_own = self.rules.token_keeps_incarnation;
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        let rec_rck = rec.rck;
        let credit = &mut rec.credit;
        let mut again = Vec::new();
        let mut slots = Vec::new();
        rec.tokens.remove_in(
            0..u64::MAX,
            |tok| tok.sends == 0 && tok.incarnation(rec_rck, keep_own) == r,
            |slot, tok| {
                slots.push(slot);
                if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                    credit.give_back(tok.rck, Outgoing::charge_of(o.total()));
                }
                again.push(Queued {
                    id: tok.id,
                    payload: tok.payload,
                });
            },
        );
        // Only these: a message of `r` that did leave and waits for credit again stays
        // waiting, and its REQCREDIT brings its verdict.
        rec.credit.drop_waiting(&slots);
        if again.is_empty() {
            return;
        }
        self.stats.retried += again.len() as u64;
        for msg in again.into_iter().rev() {
            rec.queue.push_front(msg);
        }
        if rec.tokens.is_empty() {
            rec.rto_at = None;
        }
        if rec.fill_envelopes() > 0 {
            self.outbox.wake(src, usize::MAX);
        }
    }

    /// After a verdict frame from `src`: the congestion controller learns what it
    /// acknowledged, loss detection declares lost what later acknowledgements show lost, and
    /// the peer is woken if tokens wait and the window and pacer let them go.
    pub(super) fn after_verdicts(&mut self, now: Instant, src: NodeId) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        let req_due = rec.req_due;
        let lost = rec.after_verdicts(now, &self.cfg);
        self.stats.losses_detected += lost;
        self.stats.spurious_losses += std::mem::take(&mut rec.flight.spurious);
        self.stats.spurious_retransmissions += std::mem::take(&mut rec.flight.spurious_resent);
        if rec.req_due && !req_due {
            self.stats.reqslots_retransmissions += 1;
            self.outbox.wake(src, usize::MAX);
        }
        let next = rec.to_send.front().and_then(|s| rec.tokens.get(*s));
        // A fragmented message goes a datagram at a time.
        let most = self.cfg.max_datagram_size as u64;
        let size = next.map_or(0, |t| t.size.max(t.payload.len() as u64).min(most));
        if !rec.to_send.is_empty() && rec.pace_at.is_none() && rec.window_allows(size) {
            self.outbox.wake(src, usize::MAX);
        }
    }
}
