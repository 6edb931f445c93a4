//! Inputs from the network: datagrams opened and their frames dispatched, slot requests and
//! grants, and the sender's handling of verdicts (ACK, DOUBT, RETRY) and of messages given up.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};

use crate::proto::codec::VARINT_MAX;
use crate::proto::crypto::{OpenError, Vouch};
use crate::proto::frame::{self, Frame, TokenKind, Verdict};
use crate::proto::recv::record::{Grant, RRecord};
use crate::proto::send::answers::{Sink, SlotsAnswer};
use crate::proto::wire::clocks::Clocks;
use crate::proto::{Abandoned, Accepted, Config, MsgId, Node, NodeId};

impl Node {
    /// Input: a datagram received from the network. Anything malformed, oversized, not
    /// addressed to this node, or (sealed mode) not authenticated as from its source is
    /// dropped and counted in [`Stats::rejects`](crate::proto::Stats::rejects); nothing from the network can make the node
    /// panic or grow past its configured bounds.
    ///
    /// Returns the sending node when the datagram was taken whole, with nothing in it
    /// refused. [`handle_datagram_buf`](Self::handle_datagram_buf) is the same without a
    /// copy when the buffer is not shared, and also returns the datagram's sequence number.
    pub fn handle_datagram(&mut self, now: Instant, data: Bytes) -> Option<NodeId> {
        let buf = data
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        self.handle_datagram_buf(now, buf).map(|a| a.from)
    }

    /// Input: a datagram received from the network, in a buffer the node may decrypt in
    /// place. The order of work: header, destination check, key, open, frames.
    ///
    /// Returns what an embedding may trust when the datagram was taken whole: its source
    /// (authenticated in sealed mode) and its sequence number. The driver learns peer
    /// addresses from these and challenges a new one before it moves a peer there (a
    /// replayed datagram cannot move a peer).
    pub fn handle_datagram_buf(&mut self, now: Instant, data: BytesMut) -> Option<Accepted> {
        self.handle_datagram_vouched(now, data, Vouch::Unproven)
    }

    /// [`handle_datagram_buf`](Self::handle_datagram_buf) for a datagram whose source
    /// address the embedding vouches for (or not): with [`Vouch::Cookie`], a key agreement
    /// it needs comes from the vouched budget (`Config::keys.cookie_agreements_per_sec`), which
    /// datagrams from unproven addresses cannot spend.
    pub fn handle_datagram_vouched(
        &mut self,
        now: Instant,
        mut data: BytesMut,
        vouch: Vouch,
    ) -> Option<Accepted> {
        self.stats.datagrams_in += 1;
        self.stats.bytes_in += data.len() as u64;
        self.pins.on_datagram(data.len());
        // The receive ceiling is the UDP maximum, not this node's own send size: a peer
        // configured with larger datagrams is understood.
        if data.len() > crate::proto::MAX_DATAGRAM_SIZE {
            reject!(self.oversized);
            return None;
        }
        let (header, body_at) = match frame::Header::decode_prefix(&data) {
            Ok(h) => h,
            Err(e) => {
                self.stats.rejects.count_decode(e);
                return None;
            }
        };
        if header.dst != self.id {
            reject!(self.wrong_destination);
            return None;
        }
        if header.src == self.id {
            reject!(self.from_self);
            return None;
        }
        let body = match (&mut self.sealer, header.seal) {
            (Some(sealer), Some(_)) => {
                let (senders, receivers) = (&self.senders, &self.receivers);
                let pinned = |p: NodeId| senders.contains_key(&p) || receivers.contains_key(&p);
                let pin = self.rules.pin_member_keys;
                match sealer.open(now, &header, &mut data, body_at, pinned, pin, vouch) {
                    Ok(len) => body_of(data, body_at, Some(body_at + len)),
                    Err(e) => {
                        let r = &mut self.stats.rejects;
                        *match e {
                            OpenError::WrongMode => &mut r.wrong_mode,
                            OpenError::UnknownPeer => &mut r.unknown_peer,
                            OpenError::KeyMismatch => &mut r.key_mismatch,
                            OpenError::Busy => &mut r.key_budget,
                            OpenError::BadTag => &mut r.bad_tag,
                        } += 1;
                        return None;
                    }
                }
            }
            (None, None) => body_of(data, body_at, None),
            _ => {
                reject!(self.wrong_mode);
                return None;
            }
        };
        let refusals = self.refusals;
        #[cfg(debug_assertions)]
        let rejects = self.stats.rejects.total();
        // One pass: decode every frame into the scratch list before acting on any, so a
        // datagram with one bad frame is dropped whole.
        let mut frames = std::mem::take(&mut self.frame_scratch);
        let clocks = Clocks::of(&header);
        let max = Config::max_receive_payload();
        let mut keepalive = false;
        let taken = match frame::decode_frames_on(&body, max, clocks, &mut frames) {
            Ok(()) => {
                keepalive = matches!(frames.as_slice(), [frame::Frame::Ping]);
                self.handle_frames(now, header, &mut frames);
                true
            }
            Err(e) => {
                self.stats.rejects.count_decode(e);
                self.refusals = self.refusals.wrapping_add(1);
                false
            }
        };
        frames.clear();
        self.frame_scratch = frames;
        let response = self.last_response.take();
        let challenge = self.last_challenge.take();
        let clean = self.refusals == refusals;
        #[cfg(debug_assertions)]
        debug_assert_eq!(
            clean,
            self.stats.rejects.total() == rejects,
            "a refusal counted without reject!"
        );
        (taken && clean).then_some(Accepted {
            from: header.src,
            seq: header.seal.map(|h| h.seq),
            response,
            challenge,
            keepalive,
        })
    }

    /// Acts on the frames of one valid datagram, in order.
    fn handle_frames(&mut self, now: Instant, header: frame::Header, frames: &mut Vec<Frame>) {
        let src = header.src;
        self.heard_from(now, src);
        let mut tokens = 0u32;
        let mut gots = false;
        let mut credit_want = None;
        let mut lost_incarnation = None;
        // Duplicates or verdicts other than ACK (`on_token`, `on_frag`): see `after_tokens`.
        let mut retransmitted = false;
        // A probe (SLOTS of no slots) came before in this datagram.
        let mut probed = false;
        let mut frames = frames.drain(..);
        while let Some(f) = frames.next() {
            self.stats.frames_in.count(&f);
            match f {
                Frame::ReqSlots { s, n, l } => self.on_reqslots(now, src, s, n, l),
                Frame::Challenge { token } => self.on_challenge(src, token),
                Frame::Response { token } => self.last_response = Some(token),
                Frame::Ping => {} // its datagram, accepted, was all it showed
                Frame::MtuProbe { id, .. } => self.on_mtu_probe(src, id),
                Frame::MtuAck { id } => self.on_mtu_ack(src, id),
                Frame::Slots { s, r, n } => {
                    // A grant behind a probe in one datagram may be the probe's repeat of
                    // a lost one (`probe_repeats_grant`): no RTT sample from it.
                    self.on_slots(now, src, (s, r, n), !probed);
                    probed |= n == 0;
                }
                Frame::Token {
                    s,
                    r,
                    payload,
                    senders_copy,
                } => {
                    // Tokens of one incarnation in a row: one record lookup for the run.
                    let first = (s, payload, senders_copy);
                    let (taken, left) = self.on_token_run(now, src, r, first, &mut frames);
                    tokens += taken;
                    if let Some((s, payload, senders_copy)) = left {
                        tokens += 1;
                        let kind = TokenKind::stored(senders_copy);
                        retransmitted |= self.on_token(now, src, s, r, payload, kind);
                    }
                }
                Frame::EarlyToken {
                    s,
                    r,
                    payload,
                    senders_copy,
                } => {
                    tokens += 1;
                    let kind = TokenKind::early(senders_copy);
                    retransmitted |= self.on_token(now, src, s, r, payload, kind);
                }
                Frame::Stored { from, below } => self.on_stored(src, from..below),
                Frame::Frag {
                    s,
                    r,
                    total,
                    offset,
                    data,
                    senders_copy,
                } => {
                    tokens += 1;
                    retransmitted |=
                        self.on_frag(now, src, (s, r, total), offset, data, senders_copy);
                }
                Frame::Got { r, s, ranges } => {
                    self.on_got(now, src, (r, Some(s)), ranges.iter().map_while(Result::ok));
                    gots = true;
                }
                Frame::Held { r, ranges } => {
                    self.on_got(now, src, (r, None), ranges.iter().map_while(Result::ok));
                    gots = true;
                }
                Frame::ReqCredit { r, s, want } => {
                    credit_want = largest_want(credit_want, (r, s, want));
                }
                Frame::Credit { r, limit, max } => self.on_credit(now, src, r, limit, max),
                Frame::Received { at } => self.on_received(src, at),
                Frame::Ack { .. }
                | Frame::Doubt { .. }
                | Frame::Retry { .. }
                | Frame::Lost { .. } => self.on_verdict_frame(now, src, &f, &mut lost_incarnation),
            }
        }
        if gots {
            self.after_verdicts(now, src);
        }
        if let Some(ask) = credit_want {
            self.on_reqcredit(now, src, ask);
        }
        if tokens > 0 {
            self.after_tokens(now, src, retransmitted, header.ack_now);
        }
        self.journal_assignments(now, src);
        self.defer_rearm(src);
    }

    /// A valid datagram came from `src`: its liveness, its deaf schedule and its path MTU
    /// search count it as heard.
    fn heard_from(&mut self, now: Instant, src: NodeId) {
        self.liveness_heard(now, src);
        if self.silence.on_heard(src) {
            self.outbox.wake(src, usize::MAX);
        }
        if let Some(rec) = self.senders.get_mut(&src) {
            rec.mtud_mut().on_heard(now);
            // A receipt time applies to its own datagram's acknowledgements only.
            rec.on_receipt_time(None);
        }
    }

    /// A datagram from `src` carried tokens: their verdicts go at once when the sender is
    /// retransmitting (`retransmitted`: a duplicate, or a verdict other than ACK; these
    /// never wait for tokens of this node's to ride with) or asked for them (`ack_now`),
    /// else with the ACK delay.
    fn after_tokens(&mut self, now: Instant, src: NodeId, retransmitted: bool, ack_now: bool) {
        let urgent = retransmitted || ack_now;
        if urgent {
            if let Some(rec) = self.receivers.get_mut(&src) {
                rec.want_ack_now();
            }
        }
        let (delay, every) = (self.cfg.acks.delay, self.cfg.acks.every);
        self.outbox.flush_verdicts(src, now, urgent, delay, every);
        if retransmitted {
            self.outbox.no_hold(src);
        }
    }

    /// CHALLENGE from `src`: answered with a RESPONSE.
    fn on_challenge(&mut self, src: NodeId, token: u64) {
        let cap = self.outbox_cap();
        if self.outbox.respond(src, token, cap) {
            self.last_challenge = Some(token);
        } else {
            reject!(self.outbox_full);
        }
    }

    /// RECEIVED(at) from `src`: its receipt time bounds the delivery-rate sample of the
    /// acknowledgements that follow in its datagram (rule `receipt_times`).
    fn on_received(&mut self, src: NodeId, at: u16) {
        if !self.rules.receipt_times {
            return;
        }
        if let Some(rec) = self.senders.get_mut(&src) {
            rec.on_receipt_time(Some(at));
        }
    }

    /// MTU_PROBE from `src`: answered with an MTU_ACK.
    fn on_mtu_probe(&mut self, src: NodeId, id: u64) {
        let cap = self.outbox_cap();
        if !self.outbox.mtu_ack(src, id, cap) {
            reject!(self.outbox_full);
        }
    }

    /// A verdict frame (ACK, DOUBT, RETRY, LOST) from `src`: each of its slots settled; the
    /// messages of an incarnation that was not acknowledged and never left are queued again
    /// (once per datagram and incarnation, `lost_incarnation`).
    fn on_verdict_frame(
        &mut self,
        now: Instant,
        src: NodeId,
        f: &Frame,
        lost_incarnation: &mut Option<u64>,
    ) {
        let Some((v, r, ranges)) = f.verdict() else {
            return;
        };
        // A verdict other than ACK wholly below this node's frontier for `src` is stale
        // (`Rules::stale_verdicts_ignored`): no token or envelope is there to settle.
        let below = match self.senders.get(&src) {
            Some(rec) if v != Verdict::Ack && self.rules.stale_verdicts_ignored => rec.frontier(),
            _ => 0,
        };
        let mut live = below == 0;
        for rg in ranges.iter().flatten() {
            if rg.end <= below {
                self.stats.stale_acks += 1;
                continue;
            }
            live = true;
            self.on_verdict(now, src, v, r, rg);
        }
        if !live {
            return;
        }
        if v != Verdict::Ack && *lost_incarnation != Some(r) {
            *lost_incarnation = Some(r);
            self.requeue_unsent(src, r);
            self.journal_moved(now, src);
        }
        self.after_verdicts(now, src);
        if let Some(rec) = self.senders.get_mut(&src) {
            rec.note_if_idle(now);
        }
        self.request_slots(src);
    }

    /// MTU_ACK(id) from `src`: path MTU discovery learns that its probe got through. The
    /// next probe, if any, goes at once.
    fn on_mtu_ack(&mut self, src: NodeId, id: u64) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        if !rec.mtud_mut().on_ack(id) {
            return;
        }
        self.stats.mtu.probes_acked += 1;
        rec.mss_changed();
        if !rec.is_quiet() {
            self.outbox.wake(src, usize::MAX);
        }
    }

    /// REQSLOTS(s, n, l) from `src` (Algorithm 1, lines 48-60, bounded).
    fn on_reqslots(&mut self, now: Instant, src: NodeId, s: u64, n: u64, l: u64) {
        let bounded = self.rules.bounded_input;
        // Rule 6: a request beyond `max_slots_request` is granted in part (the receiver
        // grants what it allows, and SLOTS says how many): peers with different limits
        // degrade to what both allow instead of asking in vain.
        let asked = n;
        let n = if bounded {
            n.min(self.cfg.limits.max_slots_request)
        } else {
            n
        };
        if s.checked_add(n).is_none_or(|end| end > VARINT_MAX) {
            reject!(self.slots_overflow);
            return;
        }
        if self.implausible_frontier(now, src, s, l) {
            return;
        }
        // A durable receiver forgets the taken deliveries the sender holds no token for.
        self.journal_frontier(now, src, l);
        if n > 0 && self.rules.ack_on_take && !self.has_room_for_delivery(src) {
            // The application is behind: no new slots until it takes (or acknowledges)
            // what it has, so a slow consumer slows its senders down. They ask again.
            self.stats.held_back += 1;
            return;
        }
        if !self.receivers.contains_key(&src) {
            if n == 0 {
                return; // a waiver for a record that is already gone
            }
            if !self.open_receiver(now, src, s) {
                return;
            }
        }
        self.grant_slots(now, src, s, n, l, asked);
    }

    /// Rule `plausible_input`: whether the frontier `l` of a REQSLOTS(s, _, l) from `src`
    /// is past what an honest sender asks for (its clock `s`), or past all its receiver
    /// record ever granted (a restarted sender). Counted; nothing is granted.
    fn implausible_frontier(&mut self, now: Instant, src: NodeId, s: u64, l: u64) -> bool {
        if self.rules.plausible_input && l > s {
            // An honest sender's frontier is at most its clock `s`: anything above would
            // waive slots it may hold tokens for.
            reject!(self.frontier_beyond_grant);
            return true;
        }
        let past_free_slots = |rec: &RRecord| {
            l > rec.sck()
                && (!self.rules.restarted_sender_gets_slots
                    || rec.slots().first().is_some_and(|f| f.start < l))
        };
        if self.rules.plausible_input && self.receivers.get(&src).is_some_and(past_free_slots) {
            // Above the end of what this record ever granted, yet within the sender's own
            // clock: a sender that restarted (its clock jumped past the record) asks. Not
            // granted while the record holds free slots below it (that would waive slots
            // tokens of the record may still be in flight for). Sealed, the datagram is the
            // sender's own, so it is not hostile: it counts as accepted, and an endpoint
            // learns the address the sender restarted at. In plaintext anyone could have
            // sent it (and a learned plaintext address follows every accepted datagram):
            // refused as before. The sender learns of the record from a probe, which it
            // answers with the waiver that ends its free slots (it holds nothing below its
            // clock). A record left with deliveries its application has not taken (rule
            // `restarted_sender_gets_slots`) has nothing such a request could waive: it
            // grants from the request's clock on, in its incarnation, and the held
            // deliveries stay held until taken.
            self.on_restarted_sender(now, src);
            return true;
        }
        false
    }

    /// A REQSLOTS from `src` past the end of its receiver record: the sender restarted.
    /// Counted (sealed) or refused (plaintext); the record hears from it and probes it.
    fn on_restarted_sender(&mut self, now: Instant, src: NodeId) {
        let sealed = self.sealer.is_some();
        if sealed {
            self.stats.sender_restarts += 1;
        } else {
            reject!(self.frontier_beyond_grant);
        }
        let cap = self.outbox_cap();
        if let Some(rec) = self.receivers.get_mut(&src) {
            rec.heard(now);
            if !self.outbox.probe(src, rec.sck(), rec.rck(), cap) {
                reject!(self.outbox_full);
            }
        }
    }

    /// Opens a receiver record for `src`, its slots from `s`, in a new incarnation taken
    /// from the node clock, when the record bound (room made if need be) and the stored
    /// clock allow it. Returns whether it did (what stopped it is counted).
    fn open_receiver(&mut self, now: Instant, src: NodeId, s: u64) -> bool {
        if self.rules.bounded_input
            && self.receivers.len() >= self.cfg.limits.max_receiver_records
            && !self.make_room(now)
        {
            reject!(self.too_many_records);
            return false;
        }
        if !self.reserve_clock(self.ck + 1) || !self.journal_covers_incarnation(self.ck) {
            reject!(self.clock_wait);
            return false;
        }
        let rck = self.ck;
        self.ck += 1;
        self.stats.incarnations += 1;
        self.receivers.insert(src, RRecord::new(s, rck, now));
        let until = now + self.fresh_grace(src);
        self.unproven.insert(src, rck, until);
        if self.unproven.len() > 2 * self.cfg.limits.max_receiver_records {
            let receivers = &self.receivers;
            self.unproven.retain(|p, r| {
                receivers
                    .get(&p)
                    .is_some_and(|rec| rec.rck() == r && !rec.is_proven())
            });
        }
        true
    }

    /// Grants REQSLOTS(s, n, l) from `src` on its receiver record (`asked`: `n` before
    /// rule 6 trimmed it): SLOTS for what was granted go in the outbox, and a record left
    /// holding nothing goes.
    fn grant_slots(&mut self, now: Instant, src: NodeId, s: u64, n: u64, l: u64, asked: u64) {
        let cap = self.outbox_cap();
        let Some(rec) = self.receivers.get_mut(&src) else {
            return;
        };
        // Only the source's sender half (REQSLOTS, TOKEN) counts as hearing from it: its
        // receiver half's SLOTS and ACKs say nothing about the slots held here.
        rec.heard(now);
        let cap_slots = if self.rules.bounded_input {
            self.cfg.limits.max_slots_per_record
        } else {
            u64::MAX
        };
        let grant = rec.request(s, n, l, cap_slots);
        let r = rec.rck();
        if rec.is_spent() {
            self.receivers.remove(&src);
        }
        match grant {
            Grant::Granted(granted) => {
                if granted < asked {
                    self.stats.slots_trimmed += 1;
                }
                if !self.outbox.grant(src, s, r, granted, cap) {
                    reject!(self.outbox_full);
                }
            }
            Grant::Waived => {}
            Grant::OverCap => reject!(self.slots_cap),
        }
    }

    /// SLOTS(s, r, n) from `src` (lines 61-74, with rules 3 and 5).
    fn on_slots(&mut self, now: Instant, src: NodeId, (s, r, n): (u64, u64, u64), sample: bool) {
        let Some(rec) = self.senders.get_mut(&src) else {
            // Rule 5: orphan slots lie at or above the sck we last used with `src`, which is
            // at most our stored high-water mark; anything above it was never ours.
            if s > self.hw {
                reject!(self.clock_jump);
                return;
            }
            if self.rules.raise_clock_on_orphan_slots {
                self.ck = self.ck.max(s);
            }
            // Waive up to our clock, but not beyond the end of what the receiver holds for us
            // (`s + n`): a frontier above what it ever granted is refused as implausible.
            let end = s.saturating_add(n).min(self.ck);
            let cap = self.outbox_cap();
            if !self.outbox.waive(src, end, cap) {
                reject!(self.outbox_full);
            }
            return;
        };
        if n == 0 && self.rules.probe_prompts_resend && rec.resend_on_probe(now, r, &self.cfg) > 0 {
            self.outbox.wake(src, usize::MAX);
        }
        let keep_own = self.rules.token_keeps_incarnation;
        let step = self.cfg.flow.envelope_target;
        match rec.on_slots(now, (s, r, n), keep_own, step, sample) {
            SlotsAnswer::Stale { waive } => {
                self.stats.stale_slots += 1;
                if let Some(w) = waive {
                    if self.rules.request_carries_waiver {
                        rec.owe_waiver(w);
                    }
                    let cap = self.outbox_cap();
                    if !self.outbox.waive(src, w, cap) {
                        reject!(self.outbox_full);
                    }
                }
                return;
            }
            SlotsAnswer::Unrequested => {
                reject!(self.unrequested_slots);
                return;
            }
            SlotsAnswer::Taken { filled: true } => {
                self.outbox.wake(src, usize::MAX);
            }
            SlotsAnswer::Taken { filled: false } => {}
        }
        self.request_slots(src);
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
        let sink = Sink {
            stats: &mut self.stats,
            events: &mut self.events,
            queued_bytes: &mut self.queued_bytes,
            held: self.journal.as_mut().map(|j| &mut j.held),
            released: self.released.as_mut(),
        };
        let sealed = self.sealer.is_some();
        let implausible = sink.stats.rejects.implausible_verdict;
        if rec.on_verdict(now, src, (v, r, rg), &self.rules, sealed, sink) {
            self.outbox.wake(src, usize::MAX);
        }
        // The record counts this refusal in the node's counters itself.
        let refused = self.stats.rejects.implausible_verdict - implausible;
        self.refusals = self.refusals.wrapping_add(refused);
        self.journal_verdicts(now, src);
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
        let (again, filled) = rec.requeue_unsent(r, keep_own);
        self.stats.retried += again;
        if filled {
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
        let f = rec.after_verdict_frame(now, &self.cfg);
        if self.rules.credit_return_resumes && rec.credit_returned_to_waiters() {
            // A verdict settled messages in progress: their credit is back, and messages
            // waiting for it go (nothing else would wake them: no REQCREDIT is outstanding
            // once a CREDIT answered in full).
            rec.resume_credit_waiters();
            self.outbox.wake(src, usize::MAX);
        }
        self.stats.losses_detected += f.lost;
        self.stats.spurious_losses += f.spurious;
        self.stats.spurious_retransmissions += f.spurious_resent;
        if f.reqslots_again {
            self.stats.reqslots_retransmissions += 1;
        }
        if f.reqslots_again || f.ready || rec.notice_due() {
            self.outbox.wake(src, usize::MAX);
        }
    }

    /// Input: gives up on message `id` to `to` (for example at its deadline). The node
    /// forgets it: no retransmission, no later [`Event`](crate::proto::Event) for it. Returns the
    /// truthful verdict, or `None` if the message is not pending (already settled, or never
    /// sent to `to`).
    ///
    /// A message no whole copy of which ever left (still queued, made into a TOKEN never
    /// written out, or sent only in fragments some bytes of which never left) is
    /// [`Abandoned::NotDelivered`]: its slot (if any) is simply released later by the
    /// collection frontier (with any partial message the receiver held in it). Any other is
    /// [`Abandoned::InDoubt`], including a message that left as one whole TOKEN and was
    /// cut into fragments afterwards (smaller datagrams), however few of those left.
    ///
    /// Durable mode: the verdict is decided now but reaches the application only once the
    /// message's `Resolved` record is stored: `abandon` returns [`Abandoned::Pending`], and
    /// [`Event::NotDelivered`](crate::proto::Event::NotDelivered) or
    /// [`Event::InDoubt`](crate::proto::Event::InDoubt) for `id` follows. A crash before
    /// the record is stored recovers the message: it is sent again and gets a verdict from
    /// the restarted node (never one the application heard before).
    pub fn abandon(&mut self, now: Instant, to: NodeId, id: MsgId) -> Option<Abandoned> {
        let rules = self.rules;
        let rec = self.senders.get_mut(&to)?;
        let (len, verdict, slot) = rec.abandon(now, id, &rules)?;
        if rec.notice_due() || (rules.abandon_wakes_sender && !rec.is_quiet()) {
            // Its receiver may hold a partial of it: the frontier notice goes now. And the
            // window or credit it held may let the messages queued behind it go: nothing
            // else may come to wake them (`Rules::abandon_wakes_sender`).
            self.outbox.wake(to, usize::MAX);
        }
        self.queued_bytes -= len;
        match verdict {
            Abandoned::NotDelivered => self.stats.not_delivered += 1,
            _ => self.stats.in_doubt += 1,
        }
        let pending = self.journal_abandoned(now, to, id, slot, verdict);
        if rules.abandon_wakes_sender {
            // The slot window it held may now let the queued messages ask for slots: the
            // outbox's wake sends what has envelopes, only this asks for more.
            self.request_slots(to);
        }
        self.rearm_sender(to);
        Some(if pending { Abandoned::Pending } else { verdict })
    }
}

/// The datagram's frames: its bytes `from .. to` (to its end without `to`), cut from the
/// buffer it owns rather than sliced off a shared copy (no reference count taken and
/// dropped for each datagram).
#[inline]
fn body_of(mut data: BytesMut, from: usize, to: Option<usize>) -> Bytes {
    if let Some(to) = to {
        data.truncate(to);
    }
    data.advance(from.min(data.len()));
    data.freeze()
}

/// Of a datagram's REQCREDITs, the one answered: `ask` or the one `kept` so far, whichever
/// wants more (one answer per datagram: a request costs a pass over the receiver records).
#[inline]
fn largest_want(kept: Option<(u64, u64, u64)>, ask: (u64, u64, u64)) -> Option<(u64, u64, u64)> {
    if kept.is_none_or(|(_, _, w)| ask.2 >= w) {
        Some(ask)
    } else {
        kept
    }
}
