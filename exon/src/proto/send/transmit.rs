//! The sending half of a sender record: filling a datagram with its frames within the
//! congestion window and the pacer, and recording each transmission (sequence numbers,
//! bytes in flight, delivery-rate snapshots, fragments and their reassembly credit).

use std::time::Instant;

use crate::proto::send::fragments::Outgoing;
use crate::proto::send::record::{FragPlan, SRecord};
use crate::proto::send::timers::Timer;
use crate::proto::send::token::NEVER_SENT;
use crate::proto::send::tokens::{TokenAt, Tokens};
use crate::proto::stats::Stats;
use crate::proto::wire::clocks::Clocks;
use crate::proto::wire::codec::varint_len;
use crate::proto::wire::frame::{frame_type, len_field, SlotFields, TokenKind};
use crate::proto::{Config, Rules};

/// Bytes of one fragmented message sent in a row before it goes behind the other tokens:
/// a message of up to this many bytes (a stream's chunk) goes whole, in order, rather than
/// interleaved with every other message in flight, so it is complete (and its receiver's
/// memory free, its reader's next bytes there) a few datagrams after it starts; a larger
/// one holds up the others for no more than this.
pub(crate) const FRAG_BURST: u64 = 64 * 1024;

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

/// A datagram being filled with a record's frames: when, the buffer and its room, and the
/// counters of what goes in.
struct Fill<'a> {
    now: Instant,
    buf: &'a mut Vec<u8>,
    /// The datagram's clock chains, which its frames' clock fields are written on.
    clocks: &'a mut Clocks,
    space: Space,
    stats: &'a mut Stats,
    /// Bytes of TOKENs that may still go without asking the window and the pacer (see
    /// [`SRecord::allowance`]); 0 until they are first asked, and after a FRAG.
    allowance: u64,
    /// How the last frame written ends the datagram, if it is a TOKEN or a FRAG.
    last: Last,
}

/// The last frame written into a datagram, as far as its end goes: a TOKEN or FRAG must
/// end the datagram in its `TO_END` form (`docs/wire.md`, "TOKEN"), without `len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Last {
    /// No TOKEN or FRAG last.
    Other,
    /// A TOKEN or FRAG whose type is at `ty_at` in the buffer, written with its `len`
    /// before its last `data` bytes: turned into its `TO_END` form if nothing follows.
    Open { ty_at: usize, data: usize },
    /// A TOKEN or FRAG written in its `TO_END` form (nothing may follow it).
    Ended,
}

impl Last {
    /// After a TOKEN or FRAG of `data` bytes whose type is at `ty_at`, written in its
    /// `TO_END` form or not.
    #[inline]
    fn written(to_end: bool, ty_at: usize, data: usize) -> Last {
        if to_end {
            Last::Ended
        } else {
            Last::Open { ty_at, data }
        }
    }
}

/// Turns the TOKEN or FRAG that ends the datagram in `buf` (its type at `ty_at`, its last
/// `data` bytes its payload, its `len` just before them) into its `TO_END` form: the type's
/// bit set, the `len` taken out, the payload moved back over it.
#[cold]
#[inline(never)]
fn end_at_last_frame(buf: &mut Vec<u8>, ty_at: usize, data: usize) {
    let end = buf.len();
    let data_at = end - data;
    let len_at = data_at - varint_len(data as u64);
    // Every TOKEN and FRAG type is below 64 with the bit set: one byte.
    buf[ty_at] |= frame_type::TO_END as u8;
    buf.copy_within(data_at..end, len_at);
    buf.truncate(end - (data_at - len_at));
}

impl Fill<'_> {
    /// Bytes left for frames in this datagram.
    #[inline]
    fn room(&self) -> usize {
        self.space.limit - self.buf.len()
    }

    /// How far into the datagram the frames written so far reach.
    #[inline]
    fn reach(&self) -> u32 {
        (self.space.datagram - self.room()) as u32
    }

    /// The datagram size, as the pacer's maximum segment size.
    #[inline]
    fn mss(&self) -> u64 {
        self.space.datagram as u64
    }
}

/// What became of the token at the front of `to_send` (see [`SRecord::write_tokens`]).
enum Step {
    /// A frame of it went into the datagram.
    Wrote,
    /// Nothing of it here, and it left the front of the queue: the next token's turn.
    Next,
    /// Nothing more goes into this datagram.
    Stop,
    /// The congestion window or the pacer holds it back.
    Blocked,
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
        (buf, clocks): (&mut Vec<u8>, &mut Clocks),
        space: Space,
        cfg: &Config,
        rules: &Rules,
        stats: &mut Stats,
    ) -> (bool, bool) {
        let mut fill = Fill {
            now,
            buf,
            clocks,
            space,
            stats,
            allowance: 0,
            last: Last::Other,
        };
        self.write_stored(&mut fill);
        self.write_reqslots(&mut fill);
        let (wrote, blocked) = self.write_tokens(&mut fill, cfg, rules);
        self.write_reqcredit(&mut fill);
        if let Last::Open { ty_at, data } = fill.last {
            end_at_last_frame(fill.buf, ty_at, data);
        }
        if wrote {
            // How far the datagram reached, for the TOKENs in it (if any went whole).
            let seq = self.flight.losses.current_seq();
            self.flight.sent.note_reach(seq, fill.reach());
        }
        self.end_datagram(now, cfg, wrote);
        let credit_due = self.credit.due().is_some();
        let burst_end = !self.req.is_due() && self.to_send.is_empty() && !credit_due;
        let stored_due = self.stored_due().is_some();
        let left = self.req.is_due()
            || credit_due
            || stored_due
            || self.notice_due()
            || (!self.to_send.is_empty() && !blocked);
        (left, burst_end)
    }

    /// Durable mode: writes the STORED frame owed for tokens sent early, if it fits.
    #[inline]
    fn write_stored(&mut self, fill: &mut Fill<'_>) {
        if let Some((from, below)) = self.stored_due() {
            if fill.clocks.stored_len(from, below) <= fill.room() {
                fill.clocks.put_stored(fill.buf, from, below);
                fill.stats.frames_out.stored += 1;
                self.on_stored_told(below);
            }
        }
    }

    /// Writes the outstanding REQSLOTS into the datagram, if one is due and fits, after the
    /// waiver owed with it, if any (still within the frontier) and both fit.
    #[inline]
    fn write_reqslots(&mut self, fill: &mut Fill<'_>) {
        if self.req.is_due() {
            let (s, n, l) = (self.sck, self.req.asked().unwrap_or(0), self.frontier());
            if let Some(w) = self.req.waiver().filter(|&w| w <= l) {
                let (mark, before) = (fill.buf.len(), *fill.clocks);
                fill.clocks.put_reqslots(fill.buf, w, 0, w);
                if fill.clocks.reqslots_len(s, n, l) <= fill.room() {
                    fill.stats.frames_out.reqslots += 1;
                } else {
                    fill.buf.truncate(mark);
                    *fill.clocks = before;
                }
            }
            if fill.clocks.reqslots_len(s, n, l) <= fill.room() {
                fill.clocks.put_reqslots(fill.buf, s, n, l);
                fill.stats.frames_out.reqslots += 1;
                let seq = self.flight.losses.current_seq();
                self.req.on_sent(fill.now, seq);
                self.req.told_frontier(l);
            }
        } else {
            // A frontier notice: REQSLOTS(s, 0, l) asks for nothing (the receiver answers
            // nothing) and lets it drop what it holds below `l` (a partial given up).
            let (s, l) = (self.sck, self.frontier());
            if self.req.notice_due(l) && fill.clocks.reqslots_len(s, 0, l) <= fill.room() {
                fill.clocks.put_reqslots(fill.buf, s, 0, l);
                fill.stats.frames_out.reqslots += 1;
                self.req.told_frontier(l);
            }
        }
    }

    /// Whether a frontier notice is owed and may go (`SlotRequest::owe_notice`).
    #[inline]
    pub fn notice_due(&self) -> bool {
        self.req.notice_due(self.frontier())
    }

    /// Writes the tokens of `to_send` in turn, each whole (TOKEN) or a fragment of it
    /// (FRAG), while they fit and the congestion window and the pacer let them. Returns
    /// whether any was written, and whether one was held back (window, pacer, or a slot not
    /// yet on stable storage).
    #[inline]
    fn write_tokens(&mut self, fill: &mut Fill<'_>, cfg: &Config, rules: &Rules) -> (bool, bool) {
        let keep_own = rules.token_keeps_incarnation;
        let mut wrote = false;
        self.clear_pace();
        while let Some(&s) = self.to_send.front() {
            if fill.last == Last::Ended {
                // A frame runs to the datagram's end: nothing may follow it (its payload
                // would take the next frame's bytes). The rest goes in the next datagram.
                return (wrote, false);
            }
            let logged = self.is_logged(s);
            let Some(at) = self.tokens.position(s) else {
                self.to_send.pop_front();
                continue;
            };
            let Some(tok) = self.tokens.at_mut(at) else {
                self.to_send.pop_front();
                continue;
            };
            if tok.held && tok.frag.is_none() {
                // Reported held (HELD) since it was queued: nothing to send.
                tok.queued = false;
                self.to_send.pop_front();
                if rules.whole_awaits_verdict {
                    self.on_token_unqueued(fill.now, cfg);
                }
                continue;
            }
            let r = tok.incarnation(self.rck, keep_own);
            let total = tok.payload.len();
            // A reported message goes whole as one FRAG, so that its receiver answers HELD
            // while it holds it untaken; any other as a TOKEN.
            // Its slot and incarnation on the datagram's chains, worked out once for its size
            // and its writing.
            let fields = fill.clocks.slot_fields(s, r);
            let len = if tok.reported {
                fields.frag_len(total as u64, 0, total)
            } else {
                fields.token_len(total)
            };
            let kind = if logged {
                TokenKind::stored(tok.senders_copy)
            } else if cfg.flow.early_tokens
                && !tok.reported
                && tok.frag.is_none()
                && len <= fill.space.body_room
            {
                // Durable mode: its records are not on stable storage yet, and its
                // receiver holds it until they are (STORED).
                TokenKind::early(tok.senders_copy)
            } else {
                // Durable mode: its slot is not on stable storage yet.
                return (wrote, true);
            };
            if tok.frag.is_none() && len > fill.space.body_room {
                // Too large for one frame in this peer's datagrams: fragments from now on
                // (a whole copy sent before, when datagrams were larger, is written off as
                // bytes in flight, but `whole_left` keeps that it left: it may have been
                // delivered).
                self.flight.bytes = self.flight.bytes.saturating_sub(tok.flight);
                tok.flight = 0;
                let len = tok.payload.len() as u64;
                let mut o = if tok.sends > 0 {
                    // It may have arrived whole already (or, recovered after a restart,
                    // in fragments of the life before): answers prove no round trip.
                    Outgoing::sent_before(len)
                } else {
                    Outgoing::new(len)
                };
                // Its timers run from its whole copy's transmission until a fragment leaves.
                o.set_last_sent(tok.last_sent(&self.flight.sent));
                tok.frag = Some(Box::new(o));
            }
            let step = if tok.frag.is_some() {
                self.write_fragment(fill, s, r, cfg, rules)
            } else {
                self.write_token(fill, (s, fields, kind), (len, total), at)
            };
            match step {
                Step::Wrote => {
                    wrote = true;
                    // A credit asked for ahead (`ask_credit`) names the first token sent.
                    self.credit.name_ahead(s, r);
                }
                Step::Next => {}
                Step::Stop => return (wrote, false),
                Step::Blocked => return (wrote, true),
            }
        }
        (wrote, false)
    }

    /// Writes the next FRAG of the message in slot `s` (incarnation `r`, at the front of
    /// `to_send`) as its plan, the congestion window and the pacer let it.
    #[inline]
    fn write_fragment(
        &mut self,
        fill: &mut Fill<'_>,
        s: u64,
        r: u64,
        cfg: &Config,
        rules: &Rules,
    ) -> Step {
        // Fragments ask the window and the pacer themselves, and spend what they allowed.
        fill.allowance = 0;
        let room_now = fill.room();
        let cap = cfg.limits.max_reassembly_per_source;
        let rooms = (fill.space.body_room, room_now);
        let budget = self.progress_budget(fill.now, cfg, rules);
        let plan = self.plan_fragment((s, r, *fill.clocks), rooms, (cap, budget), rules);
        let (range, overhead) = match plan {
            FragPlan::Done => {
                if rules.whole_awaits_verdict {
                    self.on_token_unqueued(fill.now, cfg);
                }
                return Step::Next;
            }
            FragPlan::Wait => return Step::Next,
            FragPlan::Later => return Step::Stop,
            FragPlan::Send { range, overhead } => (range, overhead),
        };
        let (from, to) = (range.start as usize, range.end as usize);
        let mut size = overhead + (to - from);
        let Some((total, more)) = self
            .tokens
            .get(s)
            .and_then(|t| t.frag.as_ref())
            .map(|o| (o.total(), o.has_pending_after(&range)))
        else {
            return Step::Stop;
        };
        // Its datagram's last frame for certain (cut to fill it, or the last bytes of the
        // last message that go): written without its length, which it saves. (`overhead`
        // is at most the framing; the frame is this long.)
        let frame =
            fill.clocks.frag_len(s, r, total, range.start, to - from) - len_field(to - from);
        let to_end = self.ends_datagram(fill.room() - frame, frame, more, fill.space.body_room);
        if to_end {
            size -= len_field(to - from);
        }
        let size = size as u64;
        if !self.may_send(fill.now, size, fill.mss()) {
            return Step::Blocked;
        }
        let Some(tok) = self.tokens.get_mut(s) else {
            return Step::Stop;
        };
        let Some(o) = &tok.frag else {
            return Step::Stop;
        };
        let data = tok.payload.slices(from, to);
        let senders_copy = tok.senders_copy;
        let slot = (s, r, senders_copy, to_end);
        let ty_at = fill.buf.len();
        fill.clocks
            .put_frag_parts(fill.buf, slot, (total, range.start), data);
        fill.last = Last::written(to_end, ty_at, to - from);
        if o.is_resend(&range) {
            fill.stats.retransmissions += 1;
        }
        tok.sends = tok.sends.saturating_add(1);
        let sent = range.end - range.start;
        let in_row = if self.burst.0 == s { self.burst.1 } else { 0 };
        if more && in_row + sent < FRAG_BURST {
            // Its next bytes go next (in this datagram if they fit).
            self.burst = (s, in_row + sent);
        } else {
            self.burst = (s, 0);
            self.to_send.pop_front();
            if more {
                // The rest waits behind the other tokens: no message holds up another.
                self.to_send.push_back(s);
            } else {
                tok.queued = false;
            }
        }
        let reach = fill.reach();
        self.on_fragment_sent(fill.now, s, range, size, reach);
        fill.stats.frames_out.frag += 1;
        Step::Wrote
    }

    /// Writes the token in slot `s` (its slot and incarnation on the datagram's chains as
    /// `fields`, at the front of `to_send`) whole, as a TOKEN frame of `len` bytes with its
    /// length (a reported message: one FRAG of all of it) carrying `payload` bytes, if it
    /// fits and the congestion window and the pacer let it. `at` is where it lies in the
    /// ring.
    #[inline]
    fn write_token(
        &mut self,
        fill: &mut Fill<'_>,
        (s, fields, kind): (u64, SlotFields, TokenKind),
        (len, payload): (usize, usize),
        at: TokenAt,
    ) -> Step {
        if len > fill.room() {
            return Step::Stop;
        }
        // Its datagram's last frame for certain: written without its length at once (and
        // counted so), rather than moved so once the datagram ends.
        let lf = len_field(payload);
        let body_room = fill.space.body_room;
        let to_end = self.ends_datagram(fill.room() - (len - lf), len - lf, false, body_room);
        let len = if to_end { len - lf } else { len };
        let size = len as u64;
        let admitted = size <= fill.allowance;
        if admitted {
            // What may_send would answer, without asking.
            debug_assert!(self.window_allows(size));
            debug_assert!(self.pacer.admits_from_credit(
                fill.now,
                self.cc.pacing_rate().filter(|_| !self.probe),
                size,
                fill.mss()
            ));
        } else if !self.may_send(fill.now, size, fill.mss()) {
            return Step::Blocked;
        }
        // Found where `write_tokens` found it: asking the window and the pacer touched no
        // token.
        let Some(tok) = self.tokens.at_mut(at) else {
            return Step::Stop;
        };
        let (head, body) = (tok.payload.head(), tok.payload.body());
        let ty_at = fill.buf.len();
        if tok.reported {
            let at = (tok.senders_copy, tok.payload.len() as u64, 0, to_end);
            fields.put_frag(fill.clocks, fill.buf, at, (head, body));
            fill.stats.frames_out.frag += 1;
        } else {
            fields.put_token(fill.clocks, fill.buf, (kind, to_end), (head, body));
            fill.stats.frames_out.token += 1;
        }
        fill.last = Last::written(to_end, ty_at, tok.payload.len());
        // Its transmission, recorded on the token: the datagram's sequence number (loss
        // detection, and the datagram's delivery-rate snapshot), size and bytes in flight.
        let seq = self.flight.losses.on_sent(s);
        let old = std::mem::replace(&mut tok.flight, size);
        tok.seq = seq;
        // A frame within one datagram (`len <= fill.room()`).
        tok.size = len as u32;
        if tok.sends > 0 {
            fill.stats.retransmissions += 1;
        }
        if let Some(r) = &mut tok.rare {
            if let Some(l) = &mut r.lost {
                l.resent_at.get_or_insert(fill.now);
            }
            // Its new datagram's time is the log's.
            r.sent_at = None;
        }
        tok.sends = tok.sends.saturating_add(1);
        tok.whole_left = true;
        tok.queued = false;
        self.to_send.pop_front();
        if kind.is_early() {
            self.on_sent_early(s);
        }
        // Its send time and reach are its datagram's: kept once, in the log.
        self.on_token_sent(fill.now, seq, size, old);
        fill.allowance = if admitted {
            fill.allowance - size
        } else {
            self.allowance()
        };
        Step::Wrote
    }

    /// Whether a TOKEN or FRAG of `frame` bytes at the front of `to_send` that leaves
    /// `room_after` bytes in the datagram is certainly its last frame: no REQCREDIT is due,
    /// and nothing else can follow it (no frame fits in under 3 bytes; it is the last token
    /// queued; or the next one, whole and not held, does not fit). A fragment with bytes of
    /// its message after it (`more`) is not looked past: it ends the datagram only when it
    /// fills it. The next token is looked at only where no other of this one's size would
    /// fit after it. A wrong answer costs room or a move, never bytes: nothing is written
    /// after such a frame ([`write_tokens`](Self::write_tokens),
    /// [`write_reqcredit`](Self::write_reqcredit)), and one that ends the datagram with its
    /// length is moved so at the end ([`end_at_last_frame`]).
    #[inline]
    fn ends_datagram(&self, room_after: usize, frame: usize, more: bool, body_room: usize) -> bool {
        if room_after < 3 || (!more && self.to_send.len() == 1) {
            return self.credit.due().is_none();
        }
        if more || room_after >= frame {
            return false;
        }
        self.next_cannot_follow(room_after, body_room)
    }

    /// Whether the second token of `to_send` cannot follow in `room_after` bytes: whole (not
    /// cut to fill what is left: its framing, at most 25 bytes, fits a datagram of
    /// `body_room` with it), not held, and at least its type, `s`, `r` and payload larger;
    /// and no REQCREDIT is due.
    #[inline(never)]
    fn next_cannot_follow(&self, room_after: usize, body_room: usize) -> bool {
        let Some(&next) = self.to_send.get(1) else {
            return false;
        };
        self.credit.due().is_none()
            && self.tokens.get(next).is_some_and(|t| {
                let p = t.payload.len();
                let whole = t.frag.is_none() && p + 25 <= body_room;
                whole && !t.held && p + 3 > room_after
            })
    }

    /// After the tokens: writes the REQCREDIT a message that found no credit just asked
    /// for, if it is due and fits.
    #[inline]
    fn write_reqcredit(&mut self, fill: &mut Fill<'_>) {
        if self.credit.due().is_some() {
            // The REQCREDIT names a waiting message: never one already settled.
            let tokens = &self.tokens;
            self.credit.retain_waiting(|s| tokens.get(s).is_some());
        }
        if fill.last == Last::Ended {
            // A frame running to the datagram's end went last (no REQCREDIT was due when it
            // was written): the REQCREDIT goes in the next datagram, written at once.
            return;
        }
        if let Some((r, s, want)) = self.credit.due() {
            if fill.clocks.reqcredit_len(r, s, want) <= fill.room() {
                fill.clocks.put_reqcredit(fill.buf, r, s, want);
                fill.stats.frames_out.credit += 1;
                self.credit.on_asked(fill.now);
                fill.last = Last::Other;
            }
        }
    }

    /// The datagram is written: the loss detectors close it, a probe that put tokens in it
    /// is over, an emptied queue marks rate samples app-limited, and written tokens run the
    /// retransmission timer.
    #[inline]
    fn end_datagram(&mut self, now: Instant, cfg: &Config, wrote: bool) {
        self.flight.losses.end_datagram();
        self.flight.frag_losses.end_datagram();
        if wrote {
            self.compact_losses();
        }
        if wrote {
            self.probe = false;
        }
        if self.to_send.is_empty() {
            // Nothing (or no slot) to send: rate samples may understate the path.
            self.flight.rate.mark_app_limited(self.flight.bytes);
        }
        if wrote {
            self.on_tokens_written(now, cfg);
        }
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

    /// Records a transmission of a token in datagram `seq`, `size` bytes (`old` of it
    /// were in flight before), at `now`: the datagram's delivery-rate snapshot (taken at
    /// its first token), bytes in flight, pacer and controller.
    #[inline]
    fn on_token_sent(&mut self, now: Instant, seq: u64, size: u64, old: u64) {
        if !self.flight.sent.has(seq) {
            // The datagram's first token: its snapshot, which the others share (nothing
            // the estimator holds changes between the tokens of one datagram).
            let st = self.flight.rate.on_sent(now, self.flight.bytes);
            if self.flight.sent.push(seq, st, self.tokens.len()) {
                self.forget_old_datagrams();
            }
        }
        self.flight.bytes = self.flight.bytes.saturating_sub(old).saturating_add(size);
        self.flight.rate.count_sent(size);
        self.pacer.on_sent(size);
        self.cc.on_sent(now, size, self.flight.bytes);
        self.token_size = if self.token_size == 0 {
            size
        } else {
            (self.token_size * 7 + size) / 8
        };
    }

    /// The datagram log has grown: it forgets the datagrams no token sent whole refers to
    /// any more (a token's last transmission is its only one that can be acknowledged),
    /// and, past its hard bound, the oldest of those still named, whose tokens keep their
    /// send time themselves (their timers run from it, never from a later datagram's).
    #[cold]
    fn forget_old_datagrams(&mut self) {
        let oldest = self
            .tokens
            .iter()
            .filter(|(_, t)| t.frag.is_none() && t.seq != NEVER_SENT)
            .map(|(_, t)| t.seq)
            .min();
        let tokens = self.tokens.len();
        let from = self.flight.sent.keep_from(oldest, tokens);
        if oldest.is_some_and(|o| o < from) {
            let log = &self.flight.sent;
            for (_, t) in self.tokens.iter_mut() {
                if t.frag.is_none() && t.seq != NEVER_SENT && t.seq < from {
                    if let Some(at) = log.sent_exactly_at(t.seq) {
                        t.pin_sent_at(at);
                    }
                }
            }
        }
        self.flight.sent.forget_below(from, tokens);
    }

    /// Bytes more that may go into the datagram being written without asking the window
    /// and the pacer again, once they let a frame go: neither changes its answer before
    /// the datagram is complete (the window and the pacing rate move with acknowledgements,
    /// and the pacer's credit, with the instant unchanged, only falls by what is sent), so
    /// a frame the window has room for and the pacer's credit covers goes, as
    /// [`may_send`](Self::may_send) would say.
    #[inline]
    fn allowance(&self) -> u64 {
        let room = if self.probe {
            u64::MAX
        } else {
            self.cc.window().saturating_sub(self.flight.bytes)
        };
        let paced = self.cc.pacing_rate().is_some() && !self.probe;
        room.min(if paced { self.pacer.credit() } else { u64::MAX })
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
    /// `to_send`; `clocks`: where the datagram's clock chains stand), for datagrams with
    /// `body_room` bytes for frames and `room_now` left in this one. A message of more than one fragment first takes reassembly credit (`cap`:
    /// the most to ask the receiver for), or waits for it, unless
    /// `rules.fragments_need_credit` is off (`rules.credit_doubles`: how much it asks for).
    pub fn plan_fragment(
        &mut self,
        (s, r, clocks): (u64, u64, Clocks),
        (body_room, room_now): (usize, usize),
        (cap, budget): (u64, u64),
        rules: &Rules,
    ) -> FragPlan {
        self.trim_in_progress();
        let in_progress = self
            .tokens
            .get(s)
            .and_then(|t| t.frag.as_ref())
            .is_some_and(|o| o.is_charged() && o.has_pending());
        // All in progress within the budget (the usual case, read from the grants): no
        // need to find this one's place among them.
        let oldest_first = rules.progress_oldest_first && !self.credit.fits_progress(0, budget);
        if in_progress && oldest_first && !self.within_progress(s, budget) {
            // Started when the path moved more than it does now: the older messages in
            // progress take the path until one is whole, so that they are whole before
            // their receiver drops them as stale (this one's partial may go meanwhile; its
            // bytes go again when its turn comes).
            self.to_send.pop_front();
            self.credit.wait_for_progress(s, r);
            return FragPlan::Wait;
        }
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
        let overhead = clocks.frag_len(s, r, total, total, 0) - 1 + varint_len(body_room as u64);
        let whole_fits = (total as usize).saturating_add(overhead) <= body_room;
        if rules.fragments_need_credit && !o.is_charged() && !whole_fits && !o.is_whole() {
            // More than one fragment: reassembly memory must be granted first.
            let charge = Outgoing::charge_of(total);
            if !self.credit.fits_progress(charge, budget) {
                // As many in progress as the path finishes in time: it starts when one of
                // them is whole (or settled).
                self.to_send.pop_front();
                self.credit.wait_for_progress(s, r);
                return FragPlan::Wait;
            }
            if !self.credit.take(r, charge) {
                self.to_send.pop_front();
                self.credit.wait(s, r, charge, cap, rules.credit_doubles);
                return FragPlan::Wait;
            }
            self.charges += 1;
            o.set_charge(self.charges);
            if rules.credit_doubles {
                self.credit.ask_ahead(s, r, cap);
            }
            // `trim_in_progress` ran above: the list stays bounded.
            self.in_progress.push_back((s, self.charges));
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

    /// The message in slot `s` was charged, under number `no`: it is the newest in
    /// progress. Entries of messages given back or charged again since are dropped as they
    /// come to the front, and all at once when they outnumber twice the tokens (each once:
    /// O(1) a charge, amortised).
    pub(super) fn note_in_progress(&mut self, s: u64, no: u64) {
        self.trim_in_progress();
        self.in_progress.push_back((s, no));
    }

    /// Drops the entries of charges given back, once they outnumber twice the tokens.
    fn trim_in_progress(&mut self) {
        if self.in_progress.len() > self.tokens.len().saturating_mul(2) + 64 {
            let tokens = &self.tokens;
            self.in_progress
                .retain(|&(slot, no)| live_charge(tokens, slot, no).is_some());
        }
    }

    /// Whether the charged message in slot `s` is among the oldest messages in progress
    /// whose charges fit `budget` (the oldest always is). A message given back and charged
    /// again counts once, at its latest charge (`Rules::progress_oldest_first`). With
    /// `Rules::progress_past_all_sent`, an older message with no byte waiting to be sent
    /// (all in flight or held by the receiver) does not count: it has no use for the path
    /// until a byte of it is to go again.
    pub(super) fn within_progress(&mut self, s: u64, budget: u64) -> bool {
        while let Some(&(slot, no)) = self.in_progress.front() {
            if live_charge(&self.tokens, slot, no).is_some() {
                break;
            }
            self.in_progress.pop_front();
        }
        let mut used = 0u64;
        for &(slot, no) in &self.in_progress {
            let Some(o) = live_outgoing(&self.tokens, slot, no) else {
                continue;
            };
            let charge = Outgoing::charge_of(o.total());
            if slot == s {
                return used == 0 || used.saturating_add(charge) <= budget;
            }
            if self.past_sent_rule && !o.has_pending() {
                continue;
            }
            used = used.saturating_add(charge);
            if used >= budget {
                return false;
            }
        }
        true
    }

    /// Bytes of fragmented messages to have in progress at once
    /// (`Rules::progress_within_reassembly_timeout`): what the path moves, at the congestion
    /// controller's bandwidth estimate (or pacing rate), in a quarter of the reassembly
    /// timeout, so that each message in progress, sharing the path with the others, is
    /// whole long before its receiver drops it as stale. Once messages have been in
    /// progress for a quarter of the timeout, at most twice what the receiver came to hold
    /// in the last quarter (`Rules::progress_measured`): under heavy reordering or loss the
    /// estimate counts bytes sent again. Without an estimate (no congestion control), the
    /// measured bound alone.
    fn progress_budget(&mut self, now: Instant, cfg: &Config, rules: &Rules) -> u64 {
        if !rules.progress_within_reassembly_timeout {
            return u64::MAX;
        }
        let quarter = cfg.timers.reassembly_timeout / 4;
        let estimate = self.cc.bandwidth().or_else(|| self.cc.pacing_rate());
        let by_estimate = estimate.map_or(u64::MAX, |rate| {
            (rate as u128 * quarter.as_micros() / 1_000_000).min(u64::MAX as u128) as u64
        });
        if !rules.progress_measured {
            return by_estimate;
        }
        let busy = self.credit.in_use();
        match self.held.bound(now, quarter, busy) {
            Some(measured) => by_estimate.min(measured),
            None => by_estimate,
        }
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
        let mut last_left = false;
        if let Some(tok) = self.tokens.get_mut(slot) {
            if let Some(o) = &mut tok.frag {
                let had_pending = o.has_pending();
                o.on_sent(range, seq, now, size, st, reach);
                last_left = had_pending && !o.has_pending() && o.is_charged();
                // Every byte has now left once: a whole copy, whatever happens to sizes.
                tok.whole_left |= o.all_sent();
                tok.flight = tok.flight.saturating_add(size);
                tok.seq = seq;
            }
        }
        self.flight.bytes = self.flight.bytes.saturating_add(size);
        self.flight.rate.count_sent(size);
        self.pacer.on_sent(size);
        self.cc.on_sent(now, size, self.flight.bytes);
        if last_left && self.past_sent_rule && self.credit.has_waiting() {
            // A message in progress no longer needs the path: newer ones waiting for it
            // may go (`Rules::progress_past_all_sent`).
            self.resume_credit_waiters();
        }
    }
}

/// The message in `slot`, if it still holds its charge number `no` (not settled, given
/// back, or charged again under another number since).
fn live_outgoing(tokens: &Tokens, slot: u64, no: u64) -> Option<&Outgoing> {
    tokens
        .get(slot)
        .and_then(|t| t.frag.as_deref())
        .filter(|o| o.is_charged() && o.charge_no() == no)
}

/// The credit the message in `slot` holds under charge number `no`, if it still does.
fn live_charge(tokens: &Tokens, slot: u64, no: u64) -> Option<u64> {
    live_outgoing(tokens, slot, no).map(|o| Outgoing::charge_of(o.total()))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::proto::send::record::SRecord;
    use crate::proto::send::token::Queued;
    use crate::proto::{Config, MsgId, Payload, Rules};

    /// Token `slot` leaves whole in a datagram of its own at `at` (as `write_token` records
    /// it).
    fn send(rec: &mut SRecord, slot: u64, at: Instant) {
        let seq = rec.flight.losses.on_sent(slot);
        let tok = rec.tokens.get_mut(slot).expect("a token");
        let old = std::mem::replace(&mut tok.flight, 100);
        (tok.seq, tok.size, tok.queued) = (seq, 100, false);
        tok.sends += 1;
        rec.on_token_sent(at, seq, 100, old);
        rec.flight.losses.end_datagram();
    }

    /// A token that waits for its verdict while many datagrams leave after it (held at its
    /// receiver, untaken) keeps its own send time when the datagram log forgets its
    /// datagram past the log's hard bound: its timers run from when it left. (With the
    /// log's oldest kept datagram standing in for it, its retransmission timer moved later
    /// with every datagram sent, and never fired while the others flowed.)
    #[test]
    fn a_token_whose_datagram_the_log_forgot_keeps_its_send_time() {
        let cfg = Config::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rec = SRecord::new(100, t0, &cfg, &Rules::ALL);
        for id in [1, 2] {
            let msg = Queued {
                id: MsgId(id),
                payload: Payload::from(&b"m"[..]),
                reported: false,
                senders_copy: false,
                reply: false,
            };
            rec.make_token(id, 7, msg);
        }
        send(&mut rec, 1, t0);
        for i in 1..3000 {
            send(&mut rec, 2, t0 + ms(i));
        }
        let tok = rec.tokens.get(1).expect("waiting");
        assert!(!rec.flight.sent.has(tok.seq), "its datagram forgotten");
        assert!(rec.flight.sent.sent_at(tok.seq) > Some(t0 + ms(1000)));
        assert_eq!(tok.last_sent(&rec.flight.sent), Some(t0));
        // The RTT sample and loss detection's time rule read the same instant.
        assert_eq!(tok.datagram_sent_at(&rec.flight.sent), Some(t0));
        // Sent again: its new datagram's time.
        send(&mut rec, 1, t0 + ms(5000));
        let tok = rec.tokens.get(1).expect("waiting");
        assert_eq!(tok.last_sent(&rec.flight.sent), Some(t0 + ms(5000)));
    }
}
