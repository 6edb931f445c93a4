//! The node's handling of the frames of large messages: FRAG and its answers GOT, and the
//! reassembly credit (REQCREDIT, CREDIT).

use std::time::Instant;

use bytes::Bytes;

use super::assembler::Piece;
use super::ranges::RangeSet;
use super::{Node, NodeId};

impl Node {
    /// FRAG(s, r, total, offset, data) from `src`. The message is delivered, as a TOKEN
    /// would be, once every byte is there; until then the receiver answers GOT with the
    /// bytes it holds. The answers for a slot that is not free, or an incarnation it does
    /// not hold, are a TOKEN's. Returns true when the answer should not wait for the ACK
    /// delay.
    pub(super) fn on_frag(
        &mut self,
        now: Instant,
        src: NodeId,
        (s, r, total): (u64, u64, u64),
        offset: u64,
        data: Bytes,
    ) -> bool {
        // The limit protects reassembly memory: a FRAG that is the whole message needs none,
        // and is taken as a TOKEN of that size would be.
        let whole = offset == 0 && data.len() as u64 == total;
        if total > self.cfg.max_message_size as u64 && !whole {
            self.stats.rejects.fragment_refused += 1;
            return false;
        }
        let room = self.has_room_for_delivery() || !self.rules.ack_on_take;
        let cap = self.outbox_cap();
        let Some(rec) = self.receivers.get_mut(&src).filter(|rec| rec.rck == r) else {
            // No record of `r`: the verdict a TOKEN would get (ACK, DOUBT or RETRY).
            return self.on_token(now, src, s, r, data);
        };
        if !rec.slots.contains(s) {
            if rec.held.contains(s) {
                // Whole and waiting for the application: the sender may stop sending it.
                rec.heard(now);
                let mut all = RangeSet::new();
                all.insert(0..total);
                self.stats.duplicates_dropped += 1;
                if !self.outbox.got(src, r, s, &all, cap) {
                    self.stats.rejects.outbox_full += 1;
                }
                return true;
            }
            return self.on_token(now, src, s, r, data);
        }
        rec.heard(now);
        if !room {
            self.stats.held_back += 1;
            return false;
        }
        let credit = self.rules.fragments_need_credit;
        match rec.assembler.insert(s, total, offset, &data, now, credit) {
            Piece::Whole(payload) => {
                let mut all = RangeSet::new();
                all.insert(0..total);
                if !self.outbox.got(src, r, s, &all, cap) {
                    self.stats.rejects.outbox_full += 1;
                }
                if payload.len() > data.len() {
                    self.stats.reassembled += 1;
                }
                self.on_token(now, src, s, r, payload)
            }
            Piece::Kept => {
                if let Some(have) = rec.assembler.have(s) {
                    if !self.outbox.got(src, r, s, have, cap) {
                        self.stats.rejects.outbox_full += 1;
                    }
                }
                false
            }
            Piece::Refused(_) => {
                self.stats.rejects.fragment_refused += 1;
                false
            }
        }
    }

    /// GOT(r, s, ranges) from `src`: the bytes it holds of our message in slot `s`. Loss
    /// detection runs once the whole datagram is read (see `handle_frames`): a datagram
    /// carries a GOT per message, and judging after the first would take the fragments the
    /// later ones answer for lost.
    pub(super) fn on_got(
        &mut self,
        now: Instant,
        src: NodeId,
        r: u64,
        s: u64,
        ranges: impl Iterator<Item = std::ops::Range<u64>>,
    ) {
        let keep_own = self.rules.token_keeps_incarnation;
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        if rec.on_got(now, r, s, ranges, keep_own) && rec.credit.has_waiting() {
            self.resume_credit_waiters(src);
        }
    }

    /// REQCREDIT(r, s, want) from `src`: its receiver record's grant grows towards `want`,
    /// within the per-source cap and what no other record holds; the answer is CREDIT with
    /// the grant, even unchanged (the sender learns where it stands). Without incarnation
    /// `r`, the answer is the verdict a TOKEN for `(s, r)` would get: the sender learns that
    /// its waiting messages were made under a lost incarnation.
    pub(super) fn on_reqcredit(
        &mut self,
        now: Instant,
        src: NodeId,
        (r, s, want): (u64, u64, u64),
    ) {
        if self.receivers.get(&src).is_none_or(|rec| rec.rck != r) {
            if let Some(v) = self.verdict_without_record(r, s) {
                let cap = self.outbox_cap();
                if !self.outbox.reply(src, v, r, s, cap) {
                    self.stats.rejects.outbox_full += 1;
                }
                let (delay, every) = (self.cfg.ack_delay, self.cfg.ack_every);
                self.outbox.flush_verdicts(src, now, true, delay, every);
            }
            return;
        }
        let reserved: u64 = self.receivers.values().map(|r| r.assembler.granted()).sum();
        let free = self.cfg.max_reassembly_bytes.saturating_sub(reserved);
        let cap = self.outbox_cap();
        let Some(rec) = self.receivers.get_mut(&src) else {
            return;
        };
        let (limit, _) = rec
            .assembler
            .grant(want, self.cfg.max_reassembly_per_source, free);
        let max = self.cfg.max_message_size as u64;
        if !self.outbox.credit(src, rec.rck, limit, max, cap) {
            self.stats.rejects.outbox_full += 1;
        }
    }

    /// CREDIT(r, limit, max) from `src`: messages waiting for credit may go; those larger
    /// than the receiver takes (`max`) never will, and are given up.
    pub(super) fn on_credit(&mut self, src: NodeId, r: u64, limit: u64, max: u64) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        if rec.rck != Some(r) {
            return;
        }
        if rec.credit.on_credit(r, limit) {
            self.refuse_oversized(src, max);
            self.resume_credit_waiters(src);
        }
    }

    /// Gives up the messages to `src` waiting for credit that are larger than `max`, the
    /// largest its receiver takes: never sent, so certainly not delivered
    /// ([`Event::NotDelivered`](super::Event::NotDelivered)).
    fn refuse_oversized(&mut self, src: NodeId, max: u64) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        let (events, stats, queued_bytes) =
            (&mut self.events, &mut self.stats, &mut self.queued_bytes);
        let bytes = &mut rec.bytes;
        rec.tokens.remove_in(
            0..u64::MAX,
            |tok| tok.sends == 0 && tok.payload.len() as u64 > max,
            |_, tok| {
                *bytes -= tok.payload.len();
                *queued_bytes -= tok.payload.len();
                stats.not_delivered += 1;
                stats.too_large_for_peer += 1;
                events.push_back(super::Event::NotDelivered {
                    to: src,
                    id: tok.id,
                });
            },
        );
        if rec.tokens.is_empty() {
            rec.rto_at = None;
        }
    }

    /// Puts the messages waiting for credit back in the sending queue (they wait again if
    /// there still is not enough).
    fn resume_credit_waiters(&mut self, src: NodeId) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        for (slot, _) in rec.credit.take_waiting() {
            rec.to_send.push_back(slot);
        }
        self.outbox.wake(src, usize::MAX);
    }

    /// Bytes of reassembly memory partial messages hold now, over all sources.
    pub fn reassembly_in_use(&self) -> u64 {
        self.receivers.values().map(|r| r.assembler.in_use()).sum()
    }

    /// Bytes of reassembly memory granted (CREDIT) over all sources: never more than
    /// [`Config::max_reassembly_bytes`](super::Config::max_reassembly_bytes).
    pub fn reassembly_granted(&self) -> u64 {
        self.receivers.values().map(|r| r.assembler.granted()).sum()
    }

    /// Partial messages being reassembled, over all sources.
    pub fn partial_messages(&self) -> usize {
        self.receivers
            .values()
            .map(|r| r.assembler.partials())
            .sum()
    }
}
