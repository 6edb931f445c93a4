//! Recovery of a sender record, in one place: its timer table and the one `next_deadline`,
//! the retransmission timeout and its probe, loss detection after verdicts and by time,
//! lost REQSLOTS and fragments, and the REQSLOTS and REQCREDIT re-asks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::proto::send::congestion::{AckEvent, LossEvent, SpuriousEvent};
use crate::proto::send::flight::Flight;
use crate::proto::send::loss::{loss_delay, Judgement};
use crate::proto::send::mtud::Mtud;
use crate::proto::send::record::SRecord;
use crate::proto::send::timers::Timer;
use crate::proto::send::token::{Lost, Token};
use crate::proto::Config;

/// What [`SRecord::on_timeout`] did.
#[derive(Debug, Default)]
pub(crate) struct Expiry {
    /// Tokens declared lost by the retransmission timeout.
    pub expired: u64,
    /// The timeout sent a probe instead (nothing declared lost).
    pub tail_probe: bool,
    /// Tokens declared lost by the time threshold.
    pub lost: u64,
    /// Times the outstanding REQSLOTS was found lost and is to be sent again.
    pub reqslots_again: u64,
    /// MTU probes found lost, and whether discovery fell back to the base size.
    pub mtu_probes_lost: u64,
    pub mtu_fallback: bool,
    /// Something is to be sent.
    pub wake: bool,
    /// The record has been quiet for the idle timeout: discard it.
    pub idle: bool,
}

impl SRecord {
    /// The retransmission timeout, with this record's jitter, never past the ceiling of its
    /// backoff (`max_backoff`, or the timeout itself where longer; at most `max_rto`): the
    /// tokens of a destination not yet deaf are tried again at least that often.
    #[inline]
    pub fn rto(&self, cfg: &Config) -> std::time::Duration {
        let (rto, ceiling) = self.rtt.rto_and_ceiling(cfg);
        crate::proto::node::timer::stretch_within(rto, ceiling, self.jitter)
    }

    /// How long after the last send or acknowledgement the retransmission timer fires: the
    /// probe timeout for a first expiry (with a controller), else the timeout. Worked out
    /// again only when the RTT estimate, the backoff or the jitter changed (every datagram
    /// with tokens arms the timer; the configuration and the controller's kind never change
    /// in a record).
    #[inline]
    pub fn timer_delay(&mut self, cfg: &Config) -> std::time::Duration {
        let key = (self.rtt.version(), self.jitter);
        if let Some((k, d)) = self.delay_memo {
            if k == key {
                return d;
            }
        }
        let d = self.timer_delay_afresh(cfg);
        self.delay_memo = Some((key, d));
        d
    }

    /// [`timer_delay`](Self::timer_delay), worked out.
    #[inline(never)]
    fn timer_delay_afresh(&self, cfg: &Config) -> std::time::Duration {
        if self.cc.is_enabled() && self.rtt.backoff() == 0 {
            let ceiling = cfg.timers.max_rto;
            crate::proto::node::timer::stretch_within(self.rtt.pto(cfg), ceiling, self.jitter)
        } else {
            self.rto(cfg)
        }
    }

    /// After a verdict frame: tells the controller what it acknowledged (if anything), then
    /// runs loss detection. Returns how many tokens were declared lost.
    ///
    /// An acknowledgement of new tokens also restarts the retransmission timer (RFC 6298,
    /// 5.3): while acknowledgements flow, losses are found from them, and the timer fires
    /// only when they stop.
    pub fn after_verdicts(&mut self, now: Instant, cfg: &Config) -> u64 {
        self.flight.end_frame(now);
        let acked = std::mem::take(&mut self.flight.ack_batch);
        // The frame's one sample (RFC 9002's: the newest transmission acknowledged).
        let rtt = self
            .flight
            .ack_newest
            .take()
            .map(|at| now.saturating_duration_since(at));
        if let Some(sample) = rtt {
            self.rtt.sample(sample);
        }
        self.flight.losses.end_batch();
        self.flight.frag_losses.end_batch();
        let spurious = std::mem::take(&mut self.flight.spurious_bytes);
        if let Some(lost_at) = self.flight.spurious_at.take() {
            if self.flight.undo && spurious > 0 {
                self.cc.on_spurious(&SpuriousEvent {
                    lost: spurious,
                    lost_at,
                });
            }
        }
        if acked > 0 {
            if self.timers.is_set(Timer::Rto) {
                let at = now + self.timer_delay(cfg);
                self.timers.set(Timer::Rto, Some(at));
            }
            let srtt = self.rtt.smoothed().unwrap_or(cfg.timers.initial_rtt);
            let rate = self.flight.rate.take_sample(srtt);
            let reorder = self.flight.reo.window(self.rtt.min().unwrap_or(srtt), srtt);
            self.cc.on_ack(&AckEvent {
                now,
                acked,
                in_flight: self.flight.bytes,
                rate,
                rtt,
                srtt: self.rtt.smoothed(),
                delivered: self.flight.rate.delivered(),
                reorder,
            });
        }
        self.detect_losses(now, cfg)
    }

    /// Declares the outstanding REQSLOTS lost (or its SLOTS) when tokens sent after it were
    /// acknowledged as loss detection would for a token, and queues it again.
    fn detect_lost_request(&mut self, now: Instant, delay: Duration, threshold: u64) {
        let Some((seq, sent)) = self.req.in_flight() else {
            return;
        };
        match self.flight.losses.judge(seq, sent, now, delay, threshold) {
            Judgement::Lost => self.req.on_lost(),
            Judgement::LostAt(t) => {
                self.timers.set_earliest(Timer::Loss, t);
            }
            Judgement::Unknown => {}
        }
    }

    /// Declares lost every token that acknowledgements of later ones show lost, queues them
    /// for retransmission ahead of new tokens, and arms the loss timer for the next one.
    /// Returns how many were declared lost.
    pub fn detect_losses(&mut self, now: Instant, cfg: &Config) -> u64 {
        let srtt = self.rtt.smoothed().unwrap_or(cfg.timers.initial_rtt);
        let latest = self.rtt.latest().unwrap_or(srtt);
        let min_rtt = self.rtt.min().unwrap_or(srtt);
        let delay = loss_delay(srtt, latest, cfg.timers.timer_granularity)
            .saturating_add(self.flight.reo.window(min_rtt, srtt));
        let threshold = self.flight.reo.packet_threshold();
        self.timers.set(Timer::Loss, None);
        let mut lost = Vec::new();
        let (mut bytes, mut newest) = (0u64, None);
        let mut count = 0u64;
        // Below the lowest token every token was settled: their transmissions go at once.
        let first = self.tokens.first_slot().unwrap_or(u64::MAX);
        while let Some((seq, slot)) = self.flight.losses.front() {
            if slot < first {
                self.flight.losses.drop_settled_below(first);
                continue;
            }
            let Some(tok) = self.tokens.get_mut(slot) else {
                self.flight.losses.pop_front();
                continue;
            };
            if tok.frag.is_some() {
                // Sent whole before it went in fragments: the fragments' detector has it.
                self.flight.losses.pop_front();
                continue;
            }
            // Its datagram's send time (`Token::last_sent`: the log's, or pinned).
            let sent = match tok.last_sent(&self.flight.sent) {
                Some(t) if tok.seq == seq && tok.flight > 0 && !tok.queued => t,
                _ => {
                    self.flight.losses.pop_front();
                    continue;
                }
            };
            match self.flight.losses.judge(seq, sent, now, delay, threshold) {
                Judgement::Lost => {
                    self.flight.losses.pop_front();
                    if let Some(reach) = self.flight.sent.reach(seq) {
                        self.mtud.on_lost(seq, reach as usize);
                    }
                    tok.set_lost(Lost {
                        at: now,
                        resent_at: None,
                        bytes: tok.flight,
                    });
                    bytes += tok.flight;
                    self.flight.bytes = self.flight.bytes.saturating_sub(tok.flight);
                    tok.flight = 0;
                    tok.queued = true;
                    newest = Some(newest.map_or(sent, |n: Instant| n.max(sent)));
                    lost.push(slot);
                    count += 1;
                }
                Judgement::LostAt(t) => {
                    self.timers.set(Timer::Loss, Some(t));
                    break;
                }
                Judgement::Unknown => break,
            }
        }
        self.detect_lost_fragments(
            now,
            (delay, threshold),
            &mut lost,
            &mut bytes,
            &mut newest,
            &mut count,
        );
        for &slot in lost.iter().rev() {
            self.to_send.push_front(slot);
        }
        self.detect_lost_request(now, delay, threshold);
        if let Some(sent_at) = newest {
            if self.flight.recovery_at.is_none_or(|t| sent_at > t) {
                // Losses of a transmission sent since the last recovery began: a new one.
                self.flight.recovery_at = Some(now);
                self.flight.reo.on_recovery();
            }
            self.cc.on_lost(&LossEvent {
                now,
                lost: bytes,
                sent_at,
                in_flight: self.flight.bytes,
            });
        }
        count
    }

    /// Loss detection for FRAG transmissions, from GOTs of later ones: their bytes are sent
    /// again (the message is queued if it was not).
    fn detect_lost_fragments(
        &mut self,
        now: Instant,
        (delay, threshold): (Duration, u64),
        lost: &mut Vec<u64>,
        bytes: &mut u64,
        newest: &mut Option<Instant>,
        count: &mut u64,
    ) {
        while let Some((seq, slot)) = self.flight.frag_losses.front() {
            let Some(tok) = self.tokens.get_mut(slot) else {
                self.flight.frag_losses.pop_front();
                continue;
            };
            let Some(o) = &mut tok.frag else {
                self.flight.frag_losses.pop_front();
                continue;
            };
            let Some(sent) = o.sent_at(seq) else {
                self.flight.frag_losses.pop_front();
                continue;
            };
            match self
                .flight
                .frag_losses
                .judge(seq, sent, now, delay, threshold)
            {
                Judgement::Lost => {
                    self.flight.frag_losses.pop_front();
                    let (size, reach) = o.on_lost(seq, now);
                    self.mtud.on_lost(seq, reach as usize);
                    *bytes += size;
                    self.flight.bytes = self.flight.bytes.saturating_sub(size);
                    tok.flight = tok.flight.saturating_sub(size);
                    *newest = Some(newest.map_or(sent, |n: Instant| n.max(sent)));
                    *count += 1;
                    if !tok.queued {
                        tok.queued = true;
                        lost.push(slot);
                    }
                }
                Judgement::LostAt(t) => {
                    self.timers.set_earliest(Timer::Loss, t);
                    break;
                }
                Judgement::Unknown => break,
            }
        }
    }

    /// Tokens were settled (acknowledged, given up or sent back to the queue): with none left
    /// in flight, the retransmission timer stops.
    #[inline]
    pub fn on_tokens_settled(&mut self) {
        if self.tokens.is_empty() {
            self.timers.set(Timer::Rto, None);
        }
    }

    /// A datagram with tokens left: the retransmission timer runs (from its earliest arming).
    #[inline]
    pub fn on_tokens_written(&mut self, now: Instant, cfg: &Config) {
        let at = now + self.timer_delay(cfg);
        self.timers.set_earliest(Timer::Rto, at);
    }

    /// A queued token left the queue unwritten, nothing of it to send (its receiver holds
    /// it whole: HELD, or GOT for every byte): its verdict still to come, the
    /// retransmission timer runs, whose probe asks again for an ACK that was lost. (A timer
    /// that expired while it was queued passed it over: queued tokens get theirs when they
    /// are written.)
    #[inline]
    pub fn on_token_unqueued(&mut self, now: Instant, cfg: &Config) {
        if !self.timers.is_set(Timer::Rto) && !self.tokens.is_empty() {
            let at = now + self.timer_delay(cfg);
            self.timers.set(Timer::Rto, Some(at));
        }
    }

    /// Whether the pacer holds the next token back (until [`Timer::Pace`]).
    #[inline]
    pub fn is_paced(&self) -> bool {
        self.timers.is_set(Timer::Pace)
    }

    /// When the pacer lets the next queued token go, if tokens wait for it.
    #[inline]
    pub fn paced_until(&self) -> Option<std::time::Instant> {
        if self.to_send.is_empty() {
            None
        } else {
            self.timers.get(Timer::Pace)
        }
    }

    /// How long `size` bytes take at the pacing rate (`None`: not paced, or a rate so high
    /// that they take no time worth waiting for).
    #[inline]
    pub fn pace_interval(&self, size: u64) -> Option<Duration> {
        let rate = self.cc.pacing_rate()?.max(1);
        let nanos = u128::from(size) * 1_000_000_000 / u128::from(rate);
        u64::try_from(nanos).ok().map(Duration::from_nanos)
    }

    /// A datagram is being filled: the pacer's hold is looked at again.
    #[inline]
    pub fn clear_pace(&mut self) {
        self.timers.set(Timer::Pace, None);
    }

    /// Runs every timer of the record that is due at `now`, in one place: retransmission
    /// (or its probe), pacing, time-threshold loss, MTU discovery, the REQSLOTS and
    /// REQCREDIT re-asks (a REQSLOTS for at most `clock_room` slots: what the stored clock
    /// allows), and the idle timeout. Says what happened; the node counts it and wakes or
    /// discards the record.
    pub fn on_timeout(
        &mut self,
        now: Instant,
        cfg: &Config,
        clock_room: u64,
        deaf_backoff: bool,
    ) -> Expiry {
        let mut out = Expiry::default();
        let (expired, mut wake) = self.expire_tokens(now, cfg);
        out.expired = expired;
        out.tail_probe = wake && expired == 0;
        if self.timers.expire(Timer::Pace, now) {
            wake |= !self.to_send.is_empty();
        }
        if self.timers.get(Timer::Loss).is_some_and(|t| t <= now) {
            let req_due = self.req.is_due();
            let lost = self.detect_losses(now, cfg);
            out.lost = lost;
            if self.req.is_due() && !req_due {
                out.reqslots_again += 1;
                wake = true;
            }
            wake |= lost > 0;
        }
        let due = |t: Option<Instant>| t.is_some_and(|t| t <= now);
        if due(self.deadline_of(Timer::Mtu, cfg)) {
            let e = self.mtud.poll(now);
            out.mtu_probes_lost = u64::from(e.lost);
            out.mtu_fallback = e.fallback;
            if e.fallback {
                self.mss_changed();
            }
            wake |= self.mtud.want_if(deaf_backoff).is_some();
        }
        if let Some(asked) = self
            .req
            .asked()
            .filter(|_| due(self.deadline_of(Timer::ReqSlots, cfg)))
        {
            // Ask again, for at least as much as before (the receiver grants the union).
            let want = self.wanted_slots(cfg).max(asked).min(clock_room);
            self.req.on_timeout(want);
            self.rtt.on_timeout();
            out.reqslots_again += 1;
            wake = true;
        }
        if due(self.deadline_of(Timer::Credit, cfg)) {
            // No CREDIT, or not enough: ask again.
            self.credit.ask_again(self.credit_rotate_rule);
            wake = true;
        }
        out.idle = due(self.deadline_of(Timer::Idle, cfg));
        out.wake = wake;
        out
    }

    /// A probe (SLOTS with `n = 0`) from the receiver for incarnation `r`: it has not heard
    /// from this sender for a while (or it restarted and holds `r` open, its deliveries
    /// waiting for the senders' copies). Every token of `r` still in flight that left more
    /// than a smoothed round trip ago is queued to go again now. Not a congestion signal:
    /// the window is kept. Returns how many were queued.
    pub fn resend_on_probe(&mut self, now: Instant, r: u64, cfg: &Config) -> u64 {
        let srtt = self.rtt.smoothed().unwrap_or(cfg.timers.initial_rtt);
        // One held whole is asked about again no sooner than its own backoff allows
        // (`Rules::held_probes_back_off`): the receiver's probes, each answered, would
        // otherwise ask about it every probe interval for as long as it is held.
        let held_wait = if self.held_probe_rule {
            self.held_rto(self.rto(cfg), cfg)
        } else {
            srtt
        };
        let mut queued = 0;
        for (s, tok) in self.tokens.iter_mut() {
            if tok.rck != r {
                continue;
            }
            let Some(sent) = tok.last_sent(&self.flight.sent) else {
                continue;
            };
            // In flight, or held whole by the receiver (a message in fragments, answered
            // GOT): a receiver that restarted with the incarnation open lost what it held,
            // and the few bytes sent again ask it (its GOT says what it has).
            let held_whole = tok.flight == 0 && (tok.frag.is_some() || tok.held) && !tok.queued;
            let wait = if held_whole {
                held_wait.max(srtt)
            } else {
                srtt
            };
            if (tok.flight == 0 && !held_whole)
                || (tok.queued && tok.frag.is_none())
                || sent + wait > now
            {
                continue;
            }
            // Lost as a timeout finds it lost (path MTU discovery counts it too: a black
            // hole shows as full datagrams that never arrive).
            requeue(s, tok, &mut self.mtud, &mut self.flight, &mut self.to_send);
            queued += 1;
        }
        // The retransmission timer stays as it was (backed off: the probe shows the path
        // back works, not the path there), the safety net if what was queued cannot go.
        queued
    }

    /// The earliest deadline of the record's timers (every [`Timer`] kind): when it next
    /// needs [`on_timeout`](Self::on_timeout).
    pub fn next_deadline(&self, cfg: &Config) -> Option<Instant> {
        // Runs after every send: the armed timers and the cheap derived ones first, the
        // timeout (`rto`) computed only when a REQSLOTS or REQCREDIT waits for an answer.
        let min = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut at = self.timers.earliest();
        let quiet_or_mtu = if self.is_quiet() {
            self.deadline_of(Timer::Idle, cfg)
        } else {
            self.mtud.deadline()
        };
        at = min(at, quiet_or_mtu);
        let req_waits = self.req.waits_for_answer();
        if req_waits || self.credit.asked_at().is_some() {
            at = min(at, self.deadline_of(Timer::ReqSlots, cfg));
            at = min(at, self.deadline_of(Timer::Credit, cfg));
        }
        debug_assert_eq!(
            at,
            Timer::ALL
                .iter()
                .filter_map(|&t| self.deadline_of(t, cfg))
                .min(),
            "next_deadline is the earliest of every timer kind"
        );
        at
    }

    /// The deadline of one timer kind, if it runs.
    pub fn deadline_of(&self, t: Timer, cfg: &Config) -> Option<Instant> {
        match t {
            Timer::Rto | Timer::Pace | Timer::Loss => self.timers.get(t),
            Timer::Idle => self
                .idle_since
                .filter(|_| self.is_quiet())
                .map(|since| since + cfg.timers.idle_timeout),
            // Path MTU discovery only probes while there is work for the destination.
            Timer::Mtu => self.mtud.deadline().filter(|_| !self.is_quiet()),
            // A re-send waiting to be written needs no timer until it is written.
            Timer::ReqSlots => {
                if self.req.waits_for_answer() {
                    self.req.deadline(self.rto(cfg))
                } else {
                    None
                }
            }
            Timer::Credit => self.credit.asked_at().map(|asked| asked + self.rto(cfg)),
        }
    }

    /// The retransmission timer: returns how many tokens were declared lost, and whether
    /// something is to be sent.
    ///
    /// With a congestion controller, the first expiry since the last RTT sample only sends
    /// a probe (RFC 9002's probe timeout, TCP's tail loss probe): one datagram past the
    /// congestion window and the pacer, with a token never sent if one waits, else the
    /// oldest token again. Its acknowledgement lets loss detection find what was lost (a
    /// loss at the end of a flight has no later token to reveal it). Nothing is declared
    /// lost and the window is kept. A later expiry with no sample since (or any expiry
    /// without a controller) queues for retransmission every token whose timeout expired,
    /// tells the controller, re-arms the timer and backs off.
    pub fn expire_tokens(&mut self, now: Instant, cfg: &Config) -> (u64, bool) {
        let Some(at) = self.timers.get(Timer::Rto) else {
            return (0, false);
        };
        if at > now {
            return (0, false);
        }
        let held_rule = self.held_probe_rule;
        if self.cc.is_enabled() && self.rtt.backoff() == 0 && !self.only_held(held_rule) {
            self.rtt.on_timeout();
            self.probe = true;
            let tokens = &self.tokens;
            let fresh = self
                .to_send
                .iter()
                .any(|s| tokens.get(*s).is_some_and(|t| t.sends == 0));
            if !fresh {
                let log = &self.flight.sent;
                // Not one held whole: those are asked about on their own schedule.
                let oldest = self.tokens.iter_mut().find(|(_, t)| {
                    !t.queued && t.last_sent(log).is_some() && !(held_rule && t.is_held_whole())
                });
                if let Some((s, tok)) = oldest {
                    tok.probe_held(log);
                    tok.queued = true;
                    let out = match &mut tok.frag {
                        Some(o) => o.probe_oldest(),
                        None => tok.flight,
                    };
                    self.flight.bytes = self.flight.bytes.saturating_sub(out);
                    tok.flight = tok.flight.saturating_sub(out);
                    self.to_send.push_front(s);
                }
            }
            self.timers.set(Timer::Rto, Some(now + self.rto(cfg)));
            return (0, true);
        }
        let rto = self.rto(cfg);
        let held_rto = self.held_rto(rto, cfg);
        let (mut due, mut held, mut held_any) = (0, 0, false);
        let mut next: Option<Instant> = None;
        for (s, tok) in self.tokens.iter_mut() {
            let Some(sent) = tok.last_sent(&self.flight.sent) else {
                continue;
            };
            // One its receiver holds whole is asked about on its own backoff, not lost
            // (`Rules::held_probes_back_off`); one whose probe waits to go still counts.
            let is_held = held_rule && tok.is_held_whole();
            held_any |= is_held;
            // A fragmented message waiting to send more bytes may still have bytes in
            // flight: those expire too.
            if tok.queued && (tok.frag.is_none() || tok.flight == 0) {
                continue;
            }
            let expiry = sent + if is_held { held_rto } else { rto };
            if expiry <= now {
                let lost = !is_held;
                requeue(s, tok, &mut self.mtud, &mut self.flight, &mut self.to_send);
                if lost {
                    due += 1;
                } else {
                    held += 1;
                }
            } else {
                next = Some(next.map_or(expiry, |n| n.min(expiry)));
            }
        }
        if due > 0 {
            self.rtt.on_timeout();
            self.cc.on_rto(now);
        } else if held > 0 && !held_rule {
            self.rtt.on_timeout();
        }
        if held > 0 {
            // Only asked about: the path lost nothing, and their next probes wait longer.
            self.held_backoff = (self.held_backoff + 1).min(16);
        } else if !held_any {
            self.held_backoff = 0;
        }
        // Tokens queued now get a fresh timer when they are written.
        self.timers.set(Timer::Rto, next);
        (due, due > 0 || held > 0)
    }
}

impl SRecord {
    /// Whether every token sent and not queued again is one its receiver holds whole, and
    /// there is at least one (with `Rules::held_probes_back_off`): a timeout then only asks
    /// about them, on their own backoff.
    fn only_held(&self, held_rule: bool) -> bool {
        if !held_rule {
            return false;
        }
        let log = &self.flight.sent;
        let mut any = false;
        for (_, t) in self.tokens.iter() {
            if t.queued || t.last_sent(log).is_none() {
                continue;
            }
            if !t.is_held_whole() {
                return false;
            }
            any = true;
        }
        any
    }

    /// How long after its last probe a token held whole is asked about again: the timeout,
    /// doubled for each timeout in a row that asked (`held_backoff`), up to `max_rto` (or
    /// the timeout itself where that is longer).
    fn held_rto(&self, rto: std::time::Duration, cfg: &Config) -> std::time::Duration {
        let longer = rto.saturating_mul(1u32 << self.held_backoff.min(16));
        longer.min(cfg.timers.max_rto.max(rto))
    }
}

/// Token `tok` (in slot `s`) is taken for lost by a timeout (or a receiver's probe): out of
/// flight, its bytes to send again (all those in flight, for a fragmented message; path MTU
/// discovery told of the loss of a whole one; a few bytes to ask about one held whole),
/// queued unless it waits already.
fn requeue(
    s: u64,
    tok: &mut Token,
    mtud: &mut Mtud,
    flight: &mut Flight,
    to_send: &mut VecDeque<u64>,
) {
    let was_queued = std::mem::replace(&mut tok.queued, true);
    tok.probe_held(&flight.sent);
    match &mut tok.frag {
        Some(o) => {
            o.on_timeout();
        }
        None => {
            if let Some(reach) = flight.sent.reach(tok.seq) {
                mtud.on_lost(tok.seq, reach as usize);
            }
        }
    }
    flight.bytes = flight.bytes.saturating_sub(tok.flight);
    tok.flight = 0;
    if !was_queued {
        to_send.push_back(s);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::proto::send::record::SRecord;
    use crate::proto::{Config, Rules};

    /// The jitter never takes the backed-off timeout past `max_backoff`: tokens in flight
    /// into an outage are tried again at least that often (a 3 s cut was found 0.49 s after
    /// it healed when the jitter stretched a timeout held at the ceiling).
    #[test]
    fn the_jittered_timeout_stays_within_max_backoff() {
        let cfg = Config::default();
        let mut rec = SRecord::new(0, Instant::now(), &cfg, &Rules::default());
        rec.rtt.sample(Duration::from_millis(20));
        for _ in 0..10 {
            rec.rtt.on_timeout();
        }
        for jitter in [0, 1, 40_000, u16::MAX] {
            rec.set_jitter(jitter);
            let rto = rec.rto(&cfg);
            assert!(rto <= cfg.timers.max_backoff, "jitter {jitter}: {rto:?}");
            assert_eq!(rec.timer_delay(&cfg), rto, "the timer is armed with it");
        }
    }

    #[test]
    fn the_kept_timer_delay_follows_every_change_of_what_it_derives_from() {
        let cfg = Config::default();
        let mut rec = SRecord::new(0, Instant::now(), &cfg, &Rules::default());
        let check = |rec: &mut SRecord, what: &str| {
            let kept = rec.timer_delay(&cfg);
            assert_eq!(kept, rec.timer_delay_afresh(&cfg), "after {what}");
            kept
        };
        let first = check(&mut rec, "nothing");
        rec.rtt.sample(Duration::from_millis(3));
        let sampled = check(&mut rec, "a sample");
        assert_ne!(first, sampled);
        rec.rtt.on_timeout();
        let backed_off = check(&mut rec, "a timeout");
        assert_ne!(sampled, backed_off);
        rec.set_jitter(u16::MAX);
        let jittered = check(&mut rec, "new jitter");
        assert_ne!(backed_off, jittered);
        rec.rtt.sample(Duration::from_millis(40));
        check(&mut rec, "another sample");
    }
}
