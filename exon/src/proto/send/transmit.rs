//! The sending half of a sender record: filling a datagram with its frames within the
//! congestion window and the pacer, and recording each transmission (sequence numbers,
//! bytes in flight, delivery-rate snapshots, fragments and their reassembly credit).

use std::time::Instant;

use crate::proto::send::fragments::Outgoing;
use crate::proto::send::record::{FragPlan, SRecord};
use crate::proto::send::timers::Timer;
use crate::proto::stats::Stats;
use crate::proto::wire::codec::varint_len;
use crate::proto::wire::frame::{
    put_frag_parts, put_reqcredit, put_reqslots, put_token_parts, reqcredit_len, reqslots_len,
    token_len,
};
use crate::proto::{Config, Rules};

/// The room a datagram leaves for a record's frames.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Space {
    /// Bytes for frames in a datagram of this destination (its size less header and tag).
    pub body_room: usize,
    /// Where frames must end in the buffer (the tag's room kept).
    pub limit: usize,
    /// The datagram size of this destination.
    pub datagram: usize,
}

impl SRecord {
    /// Writes the frames this record owes into the datagram in `buf`: an outstanding
    /// REQSLOTS, then TOKENs and FRAGs as the congestion window and the pacer let them, then
    /// a REQCREDIT, within `space`. Counts them in `stats`. Returns whether it has more to
    /// send, and whether its burst ended (nothing left to send).
    #[inline]
    pub fn write_frames(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        space: Space,
        cfg: &Config,
        rules: &Rules,
        stats: &mut Stats,
    ) -> (bool, bool) {
        let Space {
            body_room,
            limit,
            datagram: dgram_size,
        } = space;
        let rec = self;
        if rec.req.is_due() {
            let (s, n, l) = (rec.sck, rec.req.asked().unwrap_or(0), rec.frontier());
            if reqslots_len(s, n, l) <= limit - buf.len() {
                put_reqslots(buf, s, n, l);
                stats.frames_out.reqslots += 1;
                let seq = rec.flight.losses.current_seq();
                rec.req.on_sent(now, seq);
            }
        }
        let keep_own = rules.token_keeps_incarnation;
        let mss = dgram_size as u64;
        let mut wrote = false;
        let mut blocked = false;
        rec.clear_pace();
        while let Some(&s) = rec.to_send.front() {
            let logged = rec.is_logged(s);
            let Some(tok) = rec.tokens.get_mut(s) else {
                rec.to_send.pop_front();
                continue;
            };
            if !logged {
                // Durable mode: its slot is not on stable storage yet.
                blocked = true;
                break;
            }
            let r = tok.incarnation(rec.rck, keep_own);
            let len = token_len(s, r, tok.payload.len());
            if tok.frag.is_none() && (len > body_room || tok.reported) {
                // Too large for one TOKEN in this peer's datagrams: fragments from now on
                // (a whole TOKEN sent before, when datagrams were larger, is written off as
                // bytes in flight, but `whole_left` keeps that it left: it may have been
                // delivered).
                // Or a message its receiver may hold untaken for long: one whole FRAG, so
                // that the receiver's GOT says it is there (no loss, no retransmission)
                // before its ACK.
                rec.flight.bytes = rec.flight.bytes.saturating_sub(tok.flight);
                tok.flight = 0;
                tok.frag = Some(Box::new(Outgoing::new(tok.payload.len() as u64)));
            }
            if tok.frag.is_some() {
                let room_now = limit - buf.len();
                let cap = cfg.limits.max_reassembly_per_source;
                let credit = rules.fragments_need_credit;
                let plan = rec.plan_fragment(s, r, body_room, room_now, cap, credit);
                let (range, overhead) = match plan {
                    FragPlan::Done | FragPlan::Wait => continue,
                    FragPlan::Later => break,
                    FragPlan::Send { range, overhead } => (range, overhead),
                };
                let size = (overhead + (range.end - range.start) as usize) as u64;
                if !rec.may_send(now, size, mss) {
                    blocked = true;
                    break;
                }
                let Some(tok) = rec.tokens.get_mut(s) else {
                    break;
                };
                let Some(o) = &tok.frag else {
                    break;
                };
                let total = o.total();
                let (from, to) = (range.start as usize, range.end as usize);
                let data = tok.payload.slices(from, to);
                put_frag_parts(buf, s, r, (total, range.start), data);
                if o.is_resend(&range) {
                    stats.retransmissions += 1;
                }
                let more = o.has_pending_after(&range);
                tok.sends = tok.sends.saturating_add(1);
                tok.sent_at = Some(now);
                rec.to_send.pop_front();
                if more {
                    // The rest waits behind the other tokens: no message holds up another.
                    rec.to_send.push_back(s);
                } else {
                    tok.queued = false;
                }
                let reach = (dgram_size - (limit - buf.len())) as u32;
                rec.on_fragment_sent(now, s, range, size, reach);
                stats.frames_out.frag += 1;
                wrote = true;
                continue;
            }
            if len > limit - buf.len() {
                break;
            }
            let size = len as u64;
            if !rec.may_send(now, size, mss) {
                blocked = true;
                break;
            }
            let Some(tok) = rec.tokens.get_mut(s) else {
                break;
            };
            put_token_parts(buf, s, r, tok.payload.head(), tok.payload.body());
            tok.reach = (dgram_size - (limit - buf.len())) as u32;
            if tok.sends > 0 {
                stats.retransmissions += 1;
            }
            if let Some(l) = &mut tok.lost {
                l.resent_at.get_or_insert(now);
            }
            tok.sends = tok.sends.saturating_add(1);
            tok.whole_left = true;
            tok.sent_at = Some(now);
            tok.queued = false;
            rec.to_send.pop_front();
            rec.on_token_sent(now, s, size);
            stats.frames_out.token += 1;
            wrote = true;
        }
        // After the tokens: a message that found no credit just asked for it.
        if rec.credit.due().is_some() {
            // The REQCREDIT names a waiting message: never one already settled.
            let tokens = &rec.tokens;
            rec.credit.retain_waiting(|s| tokens.get(s).is_some());
        }
        if let Some((r, s, want)) = rec.credit.due() {
            if reqcredit_len(r, s, want) <= limit - buf.len() {
                put_reqcredit(buf, r, s, want);
                stats.frames_out.credit += 1;
                rec.credit.on_asked(now);
            }
        }
        rec.flight.losses.end_datagram();
        rec.flight.frag_losses.end_datagram();
        if wrote {
            rec.probe = false;
        }
        if rec.to_send.is_empty() {
            // Nothing (or no slot) to send: rate samples may understate the path.
            rec.flight.rate.mark_app_limited(rec.flight.bytes);
        }
        if wrote {
            rec.on_tokens_written(now, cfg);
        }
        let credit_due = rec.credit.due().is_some();
        let burst_end = !rec.req.is_due() && rec.to_send.is_empty() && !credit_due;
        let left = rec.req.is_due() || credit_due || (!rec.to_send.is_empty() && !blocked);
        (left, burst_end)
    }

    /// Whether the congestion window lets a token of `size` bytes go out now (one token
    /// always may when nothing is in flight, and a probe's datagram always may).
    #[inline]
    pub fn window_allows(&self, size: u64) -> bool {
        self.probe
            || self.flight.bytes == 0
            || self.flight.bytes.saturating_add(size) <= self.cc.window()
    }

    /// Whether a frame of `size` bytes may go now: the congestion window has room and the
    /// pacer lets it (when the pacer holds it back, [`Timer::Pace`] says until when).
    pub fn may_send(&mut self, now: Instant, size: u64, mss: u64) -> bool {
        if !self.window_allows(size) {
            return false;
        }
        let rate = self.cc.pacing_rate().filter(|_| !self.probe);
        if let Some(at) = self.pacer.delay(now, rate, size, mss) {
            self.timers.set(Timer::Pace, Some(at));
            return false;
        }
        true
    }

    /// Records a transmission of the token in `slot`, `size` bytes, at `now`: sequence
    /// number, bytes in flight, delivery-rate snapshot, pacer and controller.
    pub fn on_token_sent(&mut self, now: Instant, slot: u64, size: u64) {
        let st = self.flight.rate.on_sent(now, self.flight.bytes);
        let seq = self.flight.losses.on_sent(slot);
        let mut old = 0;
        if let Some(tok) = self.tokens.get_mut(slot) {
            old = std::mem::replace(&mut tok.flight, size);
            tok.seq = seq;
            tok.size = size;
            tok.rate = Some(st);
        }
        self.flight.bytes = self.flight.bytes.saturating_sub(old).saturating_add(size);
        self.pacer.on_sent(size);
        self.cc.on_sent(now, size, self.flight.bytes);
        self.token_size = if self.token_size == 0 {
            size
        } else {
            (self.token_size * 7 + size) / 8
        };
        self.compact_losses();
    }

    /// Forgets loss-detection entries of transmissions no longer in flight.
    fn compact_losses(&mut self) {
        let tokens = &self.tokens;
        self.flight.losses.compact(tokens.len(), |seq, slot| {
            tokens
                .get(slot)
                .is_some_and(|t| t.frag.is_none() && t.seq == seq && t.flight > 0)
        });
        // Fragments in flight are bounded by the window, not by the tokens: estimate their
        // number from the bytes in flight (almost every FRAG carries far more than 512).
        let live = usize::try_from(self.flight.bytes / 512).unwrap_or(usize::MAX);
        self.flight.frag_losses.compact(live, |seq, slot| {
            tokens
                .get(slot)
                .is_some_and(|t| t.frag.as_ref().is_some_and(|o| o.sent_at(seq).is_some()))
        });
    }

    /// Plans the next FRAG of the message in slot `s` (incarnation `r`, at the front of
    /// `to_send`), for datagrams with `body_room` bytes for frames and `room_now` left in
    /// this one. A message of more than one fragment first takes reassembly credit (`cap`:
    /// the most to ask the receiver for), or waits for it (unless `credit` is false: the
    /// rule switched off).
    pub fn plan_fragment(
        &mut self,
        s: u64,
        r: u64,
        body_room: usize,
        room_now: usize,
        cap: u64,
        credit: bool,
    ) -> FragPlan {
        let Some(tok) = self.tokens.get_mut(s) else {
            self.to_send.pop_front();
            return FragPlan::Done;
        };
        let Some(o) = &mut tok.frag else {
            return FragPlan::Later;
        };
        if !o.has_pending() {
            self.to_send.pop_front();
            tok.queued = false;
            return FragPlan::Done;
        }
        let total = o.total();
        // FRAG framing at most: type, s, r, total, offset (<= total), length.
        let overhead = 1
            + varint_len(s)
            + varint_len(r)
            + 2 * varint_len(total)
            + varint_len(body_room as u64);
        let whole_fits = (total as usize).saturating_add(overhead) <= body_room;
        if credit && !o.is_charged() && !whole_fits && !o.is_whole() {
            // More than one fragment: reassembly memory must be granted first.
            let charge = Outgoing::charge_of(total);
            if !self.credit.take(r, charge) {
                self.to_send.pop_front();
                self.credit.wait(s, r, charge, cap);
                return FragPlan::Wait;
            }
            o.set_charged(true);
        }
        let here = room_now.saturating_sub(overhead) as u64;
        let Some(range) = o.next_range(here) else {
            return FragPlan::Later;
        };
        let first = o.next_range(u64::MAX).unwrap_or(range.clone());
        if range != first && (here < 64 || (!o.is_charged() && whole_fits)) {
            // Not worth a sliver here, or a message sent whole: the next datagram.
            return FragPlan::Later;
        }
        FragPlan::Send { range, overhead }
    }

    /// Records a FRAG frame of `size` bytes carrying `range` of the message in `slot`, sent
    /// at `now`.
    pub fn on_fragment_sent(
        &mut self,
        now: Instant,
        slot: u64,
        range: std::ops::Range<u64>,
        size: u64,
        reach: u32,
    ) {
        let st = self.flight.rate.on_sent(now, self.flight.bytes);
        let seq = self.flight.frag_losses.on_sent(slot);
        if let Some(tok) = self.tokens.get_mut(slot) {
            if let Some(o) = &mut tok.frag {
                o.on_sent(range, seq, now, size, st, reach);
                // Every byte has now left once: a whole copy, whatever happens to sizes.
                tok.whole_left |= o.all_sent();
                tok.flight = tok.flight.saturating_add(size);
                tok.seq = seq;
            }
        }
        self.flight.bytes = self.flight.bytes.saturating_add(size);
        self.pacer.on_sent(size);
        self.cc.on_sent(now, size, self.flight.bytes);
        self.compact_losses();
    }
}
