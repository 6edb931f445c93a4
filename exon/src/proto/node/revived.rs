//! Durable mode with `Rules::deliver_from_senders_copy`: messages in fragments that an
//! earlier run handed over and no one took (`Handed`; no live record holds their
//! incarnation) are reassembled from their senders' copies, within credit granted as a
//! live record grants it, and delivered again, flagged.

use std::time::Instant;

use bytes::Bytes;

use crate::proto::frame::TokenKind;
use crate::proto::recv::assembler::{Assembler, Piece};
use crate::proto::wire::ranges::RangeSet;
use crate::proto::{Node, NodeId};

impl Node {
    /// The reassembly of `src`'s messages handed over in its incarnation `r` of an earlier run:
    /// one per source (a newer incarnation's replaces an older one's, its partials dropped).
    fn revived_assembler(&mut self, src: NodeId, r: u64) -> Option<&mut Assembler> {
        let j = self.journal.as_mut()?;
        let slot = j
            .revived
            .entry(src)
            .or_insert_with(|| (r, Assembler::default()));
        if slot.0 != r {
            *slot = (r, Assembler::default());
        }
        Some(&mut slot.1)
    }

    /// FRAG(s, r, total, offset, data) from `src` for slot `s`, handed over before, of its incarnation `r` of
    /// an earlier run: kept (GOT), and delivered again once whole. Returns true when the
    /// answer should not wait for the ACK delay.
    pub(super) fn on_revived_frag(
        &mut self,
        now: Instant,
        src: NodeId,
        (s, r, total): (u64, u64, u64),
        offset: u64,
        data: Bytes,
        senders_copy: bool,
    ) -> bool {
        if !self.has_room_for_delivery(src) && self.rules.ack_on_take {
            self.stats.held_back += 1;
            return false;
        }
        let (credit, idle) = (
            self.rules.fragments_need_credit,
            self.cfg.timers.reassembly_timeout,
        );
        let cap = self.outbox_cap();
        let free = self
            .cfg
            .limits
            .max_reassembly_bytes
            .saturating_sub(self.reassembly_granted());
        let per_source = self.cfg.limits.max_reassembly_per_source;
        let bufs = std::mem::take(&mut self.bufs);
        let piece = self.revived_assembler(src, r).map(|a| {
            a.expire(now, idle);
            // The sender holds credit the last run granted; this run never heard of it, so
            // a new message is granted room as it comes (as a REQCREDIT would be), within
            // the same caps. Without it, every fragment is refused for good.
            if credit {
                a.grant_room_for(s, total, per_source, free);
            }
            let piece = a.insert(s, total, offset, &data, now, credit, &bufs);
            (piece, a.have(s).cloned())
        });
        self.bufs = bufs;
        match piece {
            Some((Piece::Whole(payload), _)) => {
                let mut all = RangeSet::new();
                all.insert(0..total);
                if !self.outbox.got(src, r, s, &all, cap) {
                    reject!(self.outbox_full);
                }
                self.stats.reassembled += 1;
                self.on_token(now, src, s, r, payload, TokenKind::stored(senders_copy))
            }
            Some((Piece::Kept, Some(have))) => {
                if !self.outbox.got(src, r, s, &have, cap) {
                    reject!(self.outbox_full);
                }
                false
            }
            Some((Piece::Refused(_), _)) => {
                reject!(self.fragment_refused);
                false
            }
            _ => false,
        }
    }

    /// REQCREDIT(r, s, want) from `src` for a slot handed over before, of its incarnation `r` of an earlier run:
    /// credit granted as a live record grants it (within the per-source cap and what the
    /// other records leave), answered CREDIT.
    pub(super) fn on_revived_reqcredit(&mut self, src: NodeId, r: u64, want: u64) {
        let free = self
            .cfg
            .limits
            .max_reassembly_bytes
            .saturating_sub(self.reassembly_granted());
        let per_source = self.cfg.limits.max_reassembly_per_source;
        let Some(a) = self.revived_assembler(src, r) else {
            return;
        };
        let (limit, _) = a.grant(want, per_source, free);
        let (max, cap) = (self.cfg.limits.max_message_size as u64, self.outbox_cap());
        if !self.outbox.credit(src, r, limit, max, cap) {
            reject!(self.outbox_full);
        }
    }

    /// Durable mode: no hand-over of `src`'s incarnation being reassembled is left to come
    /// again (its frontier passed them): its reassembly goes.
    pub(super) fn drop_revived(&mut self, src: NodeId) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        if let Some(&(r, _)) = j.revived.get(&src) {
            if !j.handed.iter().any(|&(from, rr, _)| from == src && rr == r) {
                j.revived.remove(&src);
            }
        }
    }
}
