//! The sender-side half-connection record (S record): envelopes, tokens and queued messages
//! for one destination.

use crate::proto::Payload;
use std::collections::VecDeque;
use std::time::Instant;

use crate::proto::send::congestion::Controller;
use crate::proto::send::credit::Credit;
use crate::proto::send::flight::Flight;
use crate::proto::send::fragments::{Outgoing, Sent};
use crate::proto::send::held_rate::HeldRate;
use crate::proto::send::mtud::Mtud;
use crate::proto::send::pacing::Pacer;
use crate::proto::send::request::SlotRequest;
use crate::proto::send::rtt::Rtt;
use crate::proto::send::timers::{Timer, Timers};
use crate::proto::send::token::{Queued, Token};
use crate::proto::send::tokens::Tokens;

use crate::proto::{Config, MsgId, PathStats, Rules};

/// Sender-side record for one destination, as in the paper's type `S`.
///
/// Envelopes are the range `env_start .. sck`, all under incarnation `rck`: slots the
/// receiver granted that no token uses yet. `sck` is the next slot number to ask for.
#[derive(Debug)]
pub(crate) struct SRecord {
    /// Sender clock: next slot number to request (one past the last envelope).
    pub(super) sck: u64,
    /// Receiver incarnation the envelopes belong to (`None` before the first SLOTS).
    pub(super) rck: Option<u64>,
    /// First envelope; envelopes are `env_start .. sck`.
    pub(super) env_start: u64,
    /// Messages waiting for an envelope.
    pub(super) queue: VecDeque<Queued>,
    /// How many messages at the front of `queue` are sent again (their tokens'
    /// incarnation was lost: RETRY, LOST): they held slots before, and ask for fresh ones
    /// whatever the slot window ([`Rules::resend_beyond_slot_window`], `resend_rule`).
    pub(super) again: usize,
    resend_rule: bool,
    /// [`Rules::held_outside_slot_window`]: tokens held whole at the receiver leave the
    /// slot window once nothing else is in flight.
    held_rule: bool,
    /// [`Rules::held_probes_back_off`]: a timeout of tokens held whole at the receiver is
    /// no loss.
    pub(super) held_probe_rule: bool,
    /// With `held_probe_rule`: timeouts in a row that probed tokens held whole, while some
    /// token is held whole. Their probes wait `rto << held_backoff` (at most `max_rto`),
    /// whatever the round-trip samples their answers bring.
    pub(super) held_backoff: u32,
    /// [`Rules::credit_asks_each_waiting`]: an unanswered REQCREDIT for a lost incarnation
    /// names the next waiting message when asked again.
    pub(super) credit_rotate_rule: bool,
    /// [`Rules::got_forgets_dropped_bytes`]: a newer GOT lacking bytes taken as held means
    /// the receiver dropped that partial.
    forget_dropped_rule: bool,
    /// Tokens by slot number.
    pub(super) tokens: Tokens,
    /// Slot numbers of tokens waiting to be (re)transmitted, oldest first.
    pub(super) to_send: VecDeque<u64>,
    /// The fragmented message at the front of `to_send` and the bytes of it sent in a row
    /// (see `FRAG_BURST` in `transmit.rs`).
    pub(super) burst: (u64, u64),
    /// Fragmented messages in the order they were charged against reassembly credit, by
    /// slot and charge number (some since settled, given back or charged again under a
    /// later number: dropped as they come to the front): the oldest are the ones the path
    /// serves first (`Rules::progress_oldest_first`). A message counts at the place of
    /// the charge it holds, once.
    pub(super) in_progress: VecDeque<(u64, u64)>,
    /// [`Rules::progress_past_all_sent`] (with [`Rules::progress_oldest_first`], which it
    /// qualifies): a message in progress whose every byte has left keeps no newer one
    /// waiting.
    pub(super) past_sent_rule: bool,
    /// Charges made against reassembly credit: the last one's number.
    pub(super) charges: u64,
    /// What the receiver came to hold of fragmented messages lately
    /// (`Rules::progress_measured`).
    pub(super) held: HeldRate,
    /// The outstanding REQSLOTS.
    pub(super) req: SlotRequest,
    /// Round-trip estimate and backoff for this destination.
    pub(super) rtt: Rtt,
    /// The deadlines it armed: retransmission (while tokens are in flight), pacing, loss.
    pub(super) timers: Timers,
    /// When the record became idle (no message queued, no token).
    pub(super) idle_since: Option<Instant>,
    /// The deadline this record armed in the node's timer queue.
    pub(super) armed: Option<Instant>,
    /// Payload bytes queued or in tokens.
    pub(super) bytes: usize,
    /// Timer jitter, a fraction of 2^16 (re-drawn by the node at every timeout): stretches
    /// timeouts by up to a quarter so that peers' retransmissions do not phase-lock.
    pub(super) jitter: u16,
    /// The retransmission timer's delay, and the RTT version and jitter it was worked out
    /// for (see [`timer_delay`](Self::timer_delay)).
    pub(super) delay_memo: Option<((u64, u16), std::time::Duration)>,
    /// The last few incarnations the receiver acknowledged tokens of: it delivered into
    /// them, so it never evicted them unused (a RETRY for one of them is refused).
    pub(super) proven: [u64; PROVEN_KEPT],
    proven_next: usize,
    /// Congestion controller of this destination.
    pub(super) cc: Controller,
    /// Pacer of this destination.
    pub(super) pacer: Pacer,
    /// A probe is due: the next datagram may pass the congestion window and the pacer.
    pub(super) probe: bool,
    /// What is in flight, and what acknowledgements say of it.
    pub(super) flight: Flight,
    /// Moving average of TOKEN frame sizes, to turn the window into slots.
    pub(super) token_size: u64,
    /// Reassembly credit from the receiver, for messages sent in fragments.
    pub(super) credit: Credit,
    /// Path MTU discovery: the size of datagrams to this destination.
    pub(super) mtud: Mtud,
    /// Durable mode: what the journal must know of this record's tokens.
    pub(super) durable: Option<Box<DurableTokens>>,
}

/// A durable sender record's tokens and the journal: a token goes out only once its slot is
/// on stable storage (`Assigned`), and the frontier never passes a message whose verdict is
/// not (`Resolved`), so a restarted sender resends it in the same slot and the receiver,
/// which may have forgotten the slot otherwise, still knows it.
#[derive(Debug, Default)]
pub(crate) struct DurableTokens {
    /// Slots assigned since the node last took them, to journal: (message, rck, slot).
    assigned: Vec<(MsgId, u64, u64)>,
    /// Tokens in slots below this are journalled: they may go out.
    logged_below: u64,
    /// Where this record began in this run: slots from here up to `logged_below` are
    /// journalled by this run (what a STORED frame vouches for).
    run_from: u64,
    /// One past the highest slot sent early (ETOKEN, before `logged_below` covered it).
    early_below: u64,
    /// The `below` of the last STORED frame written.
    told_below: u64,
    /// The lowest slot of a message settled and not yet journalled as resolved.
    frontier_cap: Option<u64>,
    /// Messages whose journalled slot a RETRY (or LOST) took back, to journal as
    /// `Unassigned` (`Rules::frontier_waits_for_moves`): (message, rck, slot).
    moved: Vec<(MsgId, u64, u64)>,
}

/// What to do next with a fragmented message at the front of the sending queue.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FragPlan {
    /// Nothing left to send: it left the queue.
    Done,
    /// It waits for reassembly credit: it left the queue.
    Wait,
    /// Not in this datagram.
    Later,
    /// Send these bytes in a FRAG frame with at most `overhead` bytes of framing.
    Send {
        range: std::ops::Range<u64>,
        overhead: usize,
    },
}

/// Incarnations remembered as proven per sender record.
const PROVEN_KEPT: usize = 4;

impl SRecord {
    /// Notes that the receiver acknowledged a token of incarnation `r`.
    #[inline]
    pub fn note_proven(&mut self, r: u64) {
        if !self.proven.contains(&r) {
            self.proven[self.proven_next] = r;
            self.proven_next = (self.proven_next + 1) % PROVEN_KEPT;
        }
    }

    /// A record for a destination with no state: `sck` starts at the node clock.
    pub fn new(ck: u64, now: Instant, cfg: &Config, rules: &Rules) -> Self {
        let mut flight = Flight {
            undo: rules.spurious_undo,
            ..Flight::default()
        };
        flight.reo.adapt = rules.reordering_window;
        SRecord {
            sck: ck,
            rck: None,
            env_start: ck,
            queue: VecDeque::new(),
            again: 0,
            resend_rule: rules.resend_beyond_slot_window,
            held_rule: rules.held_outside_slot_window,
            held_probe_rule: rules.held_probes_back_off,
            held_backoff: 0,
            credit_rotate_rule: rules.credit_asks_each_waiting,
            forget_dropped_rule: rules.got_forgets_dropped_bytes,
            tokens: Tokens::default(),
            to_send: VecDeque::new(),
            burst: (0, 0),
            in_progress: VecDeque::new(),
            past_sent_rule: rules.progress_past_all_sent && rules.progress_oldest_first,
            charges: 0,
            held: HeldRate::default(),
            req: SlotRequest::default(),
            rtt: Rtt::new(),
            timers: Timers::default(),
            idle_since: Some(now),
            armed: None,
            bytes: 0,
            jitter: 0,
            delay_memo: None,
            // u64::MAX is never an incarnation (they are at most 2^62 - 1).
            proven: [u64::MAX; PROVEN_KEPT],
            proven_next: 0,
            cc: Controller::new(
                cfg.flow.congestion,
                cfg.base_datagram_size() as u64,
                cfg.timers.initial_rtt,
                cfg.acks.delay,
            )
            .with_random_loss_made_up(rules.random_loss_made_up)
            .with_unyielding_loss_per_product(rules.unyielding_loss_per_product)
            .with_drain_test_counts_losses(rules.drain_test_counts_losses)
            .with_reorder_allowance(rules.reordering_allowance),
            pacer: Pacer::default(),
            probe: false,
            flight,
            token_size: 0,
            credit: Credit::default(),
            mtud: Mtud::new(
                cfg.base_datagram_size(),
                cfg.mtu.max_datagram_size,
                cfg.mtu.raise_interval,
            ),
            durable: None,
        }
    }

    /// Number of envelopes ready.
    #[inline]
    pub fn envelopes(&self) -> u64 {
        self.sck - self.env_start
    }

    /// Takes the next envelope.
    #[inline]
    pub fn take_envelope(&mut self) -> Option<u64> {
        (self.env_start < self.sck).then(|| {
            self.env_start += 1;
            self.env_start - 1
        })
    }

    /// A probe showed the receiver holding slots below `w` this record holds nothing of:
    /// the waiver goes with each REQSLOTS until one is granted
    /// (`Rules::request_carries_waiver`).
    pub fn owe_waiver(&mut self, w: u64) {
        self.req.owe_waiver(w);
    }

    /// The collection frontier `l`: the receiver may drop every slot below it. It never
    /// passes a token that exists (tokens are recorded before any REQSLOTS is written), nor an
    /// envelope (rule 2), nor, in durable mode, a message whose verdict is not stored yet.
    pub fn frontier(&self) -> u64 {
        if let Some(l) = self.req.frontier_override() {
            return l;
        }
        let l = match self.tokens.first_slot() {
            Some(s) => s.min(self.env_start),
            None => self.env_start,
        };
        match self.durable.as_ref().and_then(|d| d.frontier_cap) {
            Some(cap) => l.min(cap),
            None => l,
        }
    }

    /// Durable mode: tokens wait for their slot to be journalled before they go out. Slots
    /// below the record's clock (tokens recovered from the journal) are journalled already.
    pub fn set_durable(&mut self) {
        let logged_below = self.sck;
        self.durable = Some(Box::new(DurableTokens {
            logged_below,
            run_from: logged_below,
            told_below: logged_below,
            ..DurableTokens::default()
        }));
    }

    /// Durable mode: the slots assigned since the last call, to journal.
    pub fn take_assigned(&mut self) -> Vec<(MsgId, u64, u64)> {
        self.durable
            .as_mut()
            .map(|d| std::mem::take(&mut d.assigned))
            .unwrap_or_default()
    }

    /// Durable mode: message `id` left its slot `slot` of incarnation `rck` for a fresh one
    /// (a RETRY or LOST). An assignment not yet handed to the journal is simply dropped;
    /// one that was is to be undone by an `Unassigned` record ([`take_moved`]), which the
    /// frontier waits for: a recovery would otherwise send the token in the old slot, below
    /// a frontier this node already reported.
    ///
    /// [`take_moved`]: Self::take_moved
    pub fn note_moved(&mut self, id: MsgId, rck: u64, slot: u64) {
        let Some(d) = &mut self.durable else {
            return;
        };
        match d.assigned.iter().position(|a| *a == (id, rck, slot)) {
            Some(i) => {
                d.assigned.remove(i);
            }
            None => d.moved.push((id, rck, slot)),
        }
    }

    /// Durable mode: the slots taken back since the last call, to journal as `Unassigned`.
    pub fn take_moved(&mut self) -> Vec<(MsgId, u64, u64)> {
        self.durable
            .as_mut()
            .map(|d| std::mem::take(&mut d.moved))
            .unwrap_or_default()
    }

    /// Durable mode: slots below `below` are journalled; their tokens may go. Returns whether
    /// tokens wait to be sent, or a STORED frame for tokens sent early.
    pub fn logged_through(&mut self, below: u64) -> bool {
        if let Some(d) = &mut self.durable {
            d.logged_below = d.logged_below.max(below);
        }
        !self.to_send.is_empty() || self.stored_due().is_some()
    }

    /// Durable mode: the STORED frame owed to the receiver, `(from, below)`: tokens went
    /// early that the last one did not cover, and the journal now covers more.
    pub(super) fn stored_due(&self) -> Option<(u64, u64)> {
        let d = self.durable.as_ref()?;
        (d.early_below > d.told_below && d.logged_below > d.told_below)
            .then_some((d.run_from, d.logged_below))
    }

    /// Durable mode: a STORED frame up to `below` was written.
    pub(super) fn on_stored_told(&mut self, below: u64) {
        if let Some(d) = &mut self.durable {
            d.told_below = d.told_below.max(below);
        }
    }

    /// Durable mode: the token in slot `s` left early (ETOKEN).
    pub(super) fn on_sent_early(&mut self, s: u64) {
        if let Some(d) = &mut self.durable {
            d.early_below = d.early_below.max(s.saturating_add(1));
        }
    }

    /// Whether the token in slot `s` may go out (durable mode: its slot is journalled).
    #[inline]
    pub(super) fn is_logged(&self, s: u64) -> bool {
        self.durable.as_ref().is_none_or(|d| s < d.logged_below)
    }

    /// Durable mode: the frontier may not pass `cap` (a settled message's verdict is not
    /// stored yet), or any slot again (`None`).
    pub fn set_frontier_cap(&mut self, cap: Option<u64>) {
        if let Some(d) = &mut self.durable {
            d.frontier_cap = cap;
        }
    }

    /// Restores a message a restarted node recovered from its journal: a token in its
    /// original slot and incarnation, to be sent again, or a message waiting for an envelope.
    pub fn restore(&mut self, id: MsgId, payload: Payload, assigned: Option<(u64, u64)>) {
        self.bytes += payload.len();
        self.note_busy();
        let msg = Queued {
            id,
            payload,
            // Recovered: whether it was a flow's or a reply is not in the journal, so it
            // goes as a flow's message does: never early (`docs/wire.md`, ETOKEN: its
            // receiver would hold it for a word its sender, giving it up, may never send
            // again, after handing it over before a crash), reported held while untaken.
            reported: true,
            // For the same reason, its receiver is asked to keep its own copy.
            senders_copy: false,
            // Nor whether it was a reply: its embedding keeps a recovered reply's payload.
            reply: false,
        };
        match assigned {
            Some((rck, slot)) => {
                // It may have left before the crash (its slot was stored first), whole: a
                // verdict for its incarnation must not put it back in the queue as never
                // sent, and giving it up is in doubt, even once it goes in fragments (the
                // restarted node starts from the base datagram size) not all of which left.
                let mut tok = Token::new(rck, msg);
                tok.sends = 1;
                tok.whole_left = true;
                self.tokens.insert(slot, tok);
                self.to_send.push_back(slot);
            }
            None => self.queue.push_back(msg),
        }
    }

    /// How many slots to ask for now: enough for the envelope goal plus every queued message,
    /// but never more than the slot window allows (`n = N' + |msg| - |env|`, capped, where
    /// `N'` is [`envelope_goal`](Self::envelope_goal)), so receivers do not hold slots for
    /// nothing. A receiver may grant fewer (its limits); the rest is asked for next.
    /// Messages sent again ask beyond the window (`again`): the window may have shrunk
    /// below the tokens a receiver holds untaken, waiting for them. Tokens the receiver
    /// holds whole and untaken leave the window once nothing else is in flight
    /// ([`held_outside_window`](Self::held_outside_window)): its application may wait for
    /// a message queued behind them.
    pub fn wanted_slots(&self, cfg: &Config) -> u64 {
        let window = self.slot_window(cfg);
        self.wanted_within(window, self.envelope_goal(cfg, window))
    }

    /// [`wanted_slots`](Self::wanted_slots) under a slot window and goal worked out once.
    fn wanted_within(&self, window: u64, goal: u64) -> u64 {
        let env = self.envelopes();
        let busy = env + self.tokens.len() as u64;
        let want = (goal + self.queue.len() as u64).saturating_sub(env);
        let again = if self.resend_rule {
            (self.again as u64).saturating_sub(env)
        } else {
            0
        };
        let room = window.saturating_sub(busy).max(again);
        if room >= want || self.queue.is_empty() {
            return want.min(room);
        }
        // The window is full while messages wait: perhaps of tokens the receiver holds.
        let held = self.held_outside_window();
        want.min(window.saturating_sub(busy - held).max(again))
    }

    /// Tokens the receiver holds whole and untaken (HELD, or every byte GOT: its
    /// application has not taken them), counted only while they are all that keeps the
    /// slot window full: nothing of this record is in flight or waiting to go. Otherwise
    /// 0, at no cost: a verdict or a loss will move the window, and a sender whose tokens
    /// are in flight never counts (the count is a walk over the tokens). They leave the
    /// window as they left the flight: the receiver bounds what it holds by its untaken
    /// limits, and its application may be waiting for a message queued behind them (an
    /// ordered channel's gap, a message a restarted sender recovered without a slot)
    /// ([`Rules::held_outside_slot_window`]).
    fn held_outside_window(&self) -> u64 {
        if !self.held_rule || self.flight.bytes > 0 || !self.to_send.is_empty() {
            return 0;
        }
        let held = self
            .tokens
            .iter()
            .filter(|(_, t)| t.is_held_whole())
            .count();
        held as u64
    }

    /// The slots to ask for now ([`wanted_slots`](Self::wanted_slots)), if it is time to ask:
    /// messages wait, or envelopes fell below the low watermark, moved up with the
    /// [envelope goal](Self::envelope_goal) (`N' - (N - low)`). The slot window and the goal
    /// are worked out once.
    pub fn slots_to_ask(&self, cfg: &Config) -> Option<u64> {
        let window = self.slot_window(cfg);
        let goal = self.envelope_goal(cfg, window);
        let f = &cfg.flow;
        let low = goal - (f.envelope_target - f.envelope_low);
        let due = !self.queue.is_empty() || self.envelopes() < low;
        due.then(|| self.wanted_within(window, goal))
    }

    /// Tokens the congestion window holds at the current token size: the sender's measure of
    /// the path's bandwidth-delay product (BBR keeps about twice the product in its window),
    /// or `None` without congestion control.
    fn window_tokens(&self) -> Option<u64> {
        // Before the first token, each is taken to fill a datagram of the path's size.
        let size = match self.token_size {
            0 => self.mtud.size() as u64,
            t => t,
        };
        self.cc.is_enabled().then(|| self.cc.window() / size.max(1))
    }

    /// The most slots worth holding: tokens in flight fill the congestion window, and enough
    /// envelopes wait for the next round trip of sending while a REQSLOTS is out (as TCP's
    /// receive window grows with the product it measures): twice the congestion window in
    /// tokens (four times while the window doubles each round, as in startup: the slots
    /// asked for now arrive when it has), plus `N`, capped by
    /// [`Config::flow.window`](crate::proto::FlowConfig::window).
    /// Without congestion control, the configured window.
    /// A receiver that granted less than asked showed a lower limit: the window stays at
    /// what it allowed (see [`SlotRequest`](crate::proto::send::request::SlotRequest)).
    pub fn slot_window(&self, cfg: &Config) -> u64 {
        // While the window doubles each round, slots asked for now arrive when it has
        // doubled: room for twice what the next round will send.
        let times = if self.cc.is_growing() { 4 } else { 2 };
        let w = match self.window_tokens() {
            Some(tokens) => cfg.flow.window.min(
                tokens
                    .saturating_mul(times)
                    .saturating_add(cfg.flow.envelope_target),
            ),
            None => cfg.flow.window,
        };
        self.req.ceiling().map_or(w, |c| w.min(c.max(1)))
    }

    /// `N'`, the envelopes to keep ready: the configured `N`, or, on a path whose measured
    /// bandwidth-delay product holds more tokens, twice that product (a REQSLOTS answered one
    /// round trip later then arrives before the envelopes run out, even for a sender that is
    /// not saturated). Never more than the slot window. The product is BBR's bandwidth
    /// estimate times the smoothed round trip; without BBR, `N`.
    /// `window` is the [slot window](Self::slot_window).
    pub fn envelope_goal(&self, cfg: &Config, window: u64) -> u64 {
        let n = cfg.flow.envelope_target;
        let bdp = match (self.cc.bandwidth(), self.rtt.smoothed()) {
            (Some(bw), Some(srtt)) if self.token_size > 0 && cfg.flow.autotune => {
                let bytes = u128::from(bw) * srtt.as_nanos() / 1_000_000_000;
                u64::try_from(bytes / u128::from(self.token_size)).unwrap_or(u64::MAX)
            }
            _ => 0,
        };
        bdp.saturating_mul(2).max(n).min(window.max(n))
    }

    /// GOT(r, s, ranges) from the receiver: the bytes it holds of the message in slot `s`.
    /// Transmissions now wholly held leave the flight and feed the RTT, the delivery rate
    /// and loss detection as acknowledged tokens do. Returns whether the message became
    /// whole at the receiver (its credit is given back).
    ///
    /// A message held whole waits for its verdict (the receiver acknowledges it when its
    /// application takes it, once): with `await_verdict`
    /// ([`Rules::whole_awaits_verdict`](crate::proto::Rules::whole_awaits_verdict)) the
    /// retransmission timer runs for it, even when the GOT came before any copy left in
    /// this life of the node (a late copy, after a restart), so that a lost ACK is asked
    /// for again by a probe.
    pub fn on_got(
        &mut self,
        now: Instant,
        (r, s): (u64, u64),
        ranges: impl Iterator<Item = std::ops::Range<u64>>,
        (keep_own, await_verdict): (bool, bool),
        cfg: &Config,
    ) -> bool {
        let rck = self.rck;
        let Some(tok) = self.tokens.get_mut(s) else {
            return false;
        };
        if tok.incarnation(rck, keep_own) != r {
            return false;
        }
        let Some(o) = &mut tok.frag else {
            return false;
        };
        let was_whole = o.is_whole();
        let held_before = o.held_bytes();
        let mut acked: Vec<Sent> = Vec::new();
        let mut spurious = Vec::new();
        let at = (now, self.rtt.min());
        let forget = self.forget_dropped_rule;
        if o.on_got(ranges, &mut acked, at, &mut spurious, forget) && !tok.queued {
            // The receiver dropped what it held: what it lacks goes again.
            tok.queued = true;
            self.to_send.push_back(s);
        }
        let held_whole = o.is_whole();
        let whole = !was_whole && held_whole;
        if held_whole && await_verdict && o.last_sent().is_none() {
            // Held whole before this life sent any of it: time the verdict from now.
            o.set_last_sent(Some(now));
        }
        let stranded = held_whole && await_verdict && !self.timers.is_set(Timer::Rto);
        let charge = (whole && o.is_charged()).then(|| Outgoing::charge_of(o.total()));
        if let Some(c) = charge {
            o.uncharge();
            self.credit.give_back(tok.rck, c);
        }
        let srtt = self.rtt.smoothed().unwrap_or_default();
        for l in spurious {
            let resent = l.resent_at.is_some();
            self.flight.on_spurious(now, l.at, l.size, resent, srtt);
        }
        // Only the newest transmission a GOT newly covers can show reordering: older ones it
        // covers too were answered by a GOT that was lost (GOT is cumulative per message).
        let newest = acked.last().map(|s| s.seq);
        // What the receiver newly holds, counted on what it holds: bytes declared lost and
        // not sent again yet count too (under long holds most bytes are, when they arrive).
        let newly = o.held_bytes().saturating_sub(held_before);
        if newly > 0 {
            let window = cfg.timers.reassembly_timeout / 4;
            self.held.on_held(now, newly, window);
        }
        for sent in &acked {
            tok.flight = tok.flight.saturating_sub(sent.size);
            self.flight.bytes = self.flight.bytes.saturating_sub(sent.size);
            let is_newest = Some(newest == Some(sent.seq));
            if self
                .flight
                .on_fragment_arrived(now, sent, is_newest, self.rtt.min())
            {
                self.mtud.on_acked(sent.reach as usize);
            }
        }
        if stranded {
            let at = now + self.timer_delay(cfg);
            self.timers.set(Timer::Rto, Some(at));
        }
        whole
    }

    /// GOT showed the receiver holding part of the message in slot `s`, charged against
    /// the grant it made: a message this life of the node has not charged (recovered from
    /// the journal, started by the life before) is charged here too
    /// (`Rules::got_charges_partials`), so that both sides count the same credit.
    pub fn charge_partial(&mut self, s: u64) {
        let Some(tok) = self.tokens.get_mut(s) else {
            return;
        };
        let Some(o) = tok.frag.as_mut() else {
            return;
        };
        if o.is_charged() || !o.is_partial_there() {
            return;
        }
        self.charges += 1;
        o.set_charge(self.charges);
        self.credit
            .charge_held(tok.rck, Outgoing::charge_of(o.total()));
        self.note_in_progress(s, self.charges);
    }

    /// HELD(r, rg) from the receiver: the messages in those slots are held whole, untaken.
    /// A token sent whole leaves the flight and counts as arrived (the RTT, the delivery
    /// rate and loss detection see it as an acknowledged one), and is not sent again but
    /// asked about at a timeout ([`Token::probe_held`]); a fragmented one is handled as a
    /// GOT of every byte ([`on_got`](Self::on_got)). Its verdict still waits for the ACK.
    /// Returns whether a fragmented message became whole at the receiver (its credit is
    /// given back).
    ///
    /// [`Token::probe_held`]: crate::proto::send::token::Token::probe_held
    pub fn on_held(
        &mut self,
        now: Instant,
        (r, rg): (u64, std::ops::Range<u64>),
        (keep_own, await_verdict): (bool, bool),
        cfg: &Config,
    ) -> bool {
        let rck = self.rck;
        let mut frags: smallvec::SmallVec<[(u64, u64); 4]> = smallvec::SmallVec::new();
        let mut held = false;
        let (flight, rtt, mtud) = (&mut self.flight, &self.rtt, &mut self.mtud);
        for (s, tok) in self.tokens.range_mut(rg) {
            if tok.incarnation(rck, keep_own) != r || tok.held {
                continue;
            }
            if let Some(o) = &tok.frag {
                frags.push((s, o.total()));
                continue;
            }
            if tok.sends == 0 {
                // Never sent (a forgery): it goes, and the answer to that copy counts. Held
                // without a send, it would pass for never sent, and a deadline would call
                // it not delivered. (A token restored after a restart counts as sent.)
                continue;
            }
            if tok.sends == 1 {
                if let Some(reach) = flight.sent.reach(tok.seq) {
                    mtud.on_acked(reach as usize);
                }
            }
            flight.on_held(now, tok, rtt);
            tok.held = true;
            held = true;
            if await_verdict && tok.last_sent(&flight.sent).is_none() {
                // Held before this life sent it (a restored token, a late answer): time the
                // verdict from now.
                tok.held_unsent(now);
            }
        }
        if held && await_verdict && !self.timers.is_set(Timer::Rto) {
            let at = now + self.timer_delay(cfg);
            self.timers.set(Timer::Rto, Some(at));
        }
        let mut whole = false;
        for (s, total) in frags {
            let all = std::iter::once(0..total);
            whole |= self.on_got(now, (r, s), all, (keep_own, await_verdict), cfg);
        }
        whole
    }

    /// Turns an envelope into a token for `msg`; the caller schedules its transmission.
    #[inline]
    pub fn make_token(&mut self, slot: u64, rck: u64, msg: Queued) {
        if let Some(d) = &mut self.durable {
            d.assigned.push((msg.id, rck, slot));
        }
        self.tokens.insert(slot, Token::new(rck, msg));
        self.to_send.push_back(slot);
        self.idle_since = None;
    }

    /// Turns as many queued messages into tokens as there are envelopes. Returns how many.
    pub fn fill_envelopes(&mut self) -> usize {
        let Some(rck) = self.rck else { return 0 };
        let mut made = 0;
        while !self.queue.is_empty() {
            let Some(slot) = self.take_envelope() else {
                break;
            };
            let Some(msg) = self.queue.pop_front() else {
                break;
            };
            self.again = self.again.saturating_sub(1);
            self.make_token(slot, rck, msg);
            made += 1;
        }
        made
    }

    /// True when the record has neither a queued message nor a token.
    #[inline]
    pub fn is_quiet(&self) -> bool {
        self.queue.is_empty() && self.tokens.is_empty()
    }

    /// Marks the record idle from `now` if it has become quiet.
    #[inline]
    pub fn note_if_idle(&mut self, now: Instant) {
        if self.is_quiet() && self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// The next slot number to ask for (one past the last envelope).
    #[inline]
    pub fn sck(&self) -> u64 {
        self.sck
    }

    /// Whether a token was sent, so that the slot window counts tokens of their measured
    /// size (before, of a datagram's: see `window_tokens`).
    #[inline]
    pub fn knows_token_size(&self) -> bool {
        self.token_size > 0
    }

    /// Whether a REQSLOTS is outstanding.
    #[inline]
    pub fn is_requesting(&self) -> bool {
        self.req.is_outstanding()
    }

    /// Unacknowledged tokens.
    #[inline]
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// Messages waiting for an envelope.
    #[inline]
    pub fn queued_count(&self) -> usize {
        self.queue.len()
    }

    /// Path MTU discovery of this destination.
    #[inline]
    pub fn mtud(&self) -> &Mtud {
        &self.mtud
    }

    /// Path MTU discovery of this destination, to feed.
    #[inline]
    pub fn mtud_mut(&mut self) -> &mut Mtud {
        &mut self.mtud
    }

    /// The datagram being handled carries the receiver's receipt time `at` (RECEIVED), or
    /// none: its acknowledgements' delivery-rate sample is bounded by it.
    #[inline]
    pub fn on_receipt_time(&mut self, at: Option<u16>) {
        self.flight.rate.on_receipt_time(at);
    }

    /// Path MTU discovery changed the datagram size (a probe acknowledged, a black hole's
    /// fallback): the congestion controller counts in the new one.
    pub fn mss_changed(&mut self) {
        self.cc.set_mss(self.mtud.size() as u64);
    }

    /// The round-trip estimate of this destination.
    #[inline]
    pub fn rtt(&self) -> &Rtt {
        &self.rtt
    }

    /// The deadline the node's timer queue holds for this record (the node's to manage).
    #[inline]
    pub fn armed_mut(&mut self) -> &mut Option<Instant> {
        &mut self.armed
    }

    /// Whether the node's timer queue holds `t` for this record.
    #[inline]
    pub fn is_armed_at(&self, t: Instant) -> bool {
        self.armed == Some(t)
    }

    /// Draws the timer jitter for the next timeouts (a fraction of 2^16).
    #[inline]
    pub fn set_jitter(&mut self, jitter: u16) {
        self.jitter = jitter;
    }

    /// What the record knows of the path: congestion window, bytes in flight, pacing rate,
    /// bandwidth and RTT estimates, slots held and the slot window.
    pub fn path_stats(&self, cfg: &Config) -> PathStats {
        PathStats {
            slots: self.envelopes() + self.tokens.len() as u64,
            envelopes: self.envelopes(),
            slot_window: self.slot_window(cfg),
            window: self.cc.window(),
            in_flight: self.flight.bytes,
            pacing_rate: self.cc.pacing_rate(),
            bandwidth: self.cc.bandwidth(),
            min_rtt: self.cc.min_rtt(),
            srtt: self.rtt.smoothed(),
            rtt_var: self.rtt.smoothed().map(|_| self.rtt.var()),
            datagram: self.mtud.size(),
        }
    }

    /// Asks for `n` slots at `sck` in the next datagram (a new request).
    #[inline]
    pub fn ask_slots(&mut self, n: u64) {
        self.req.ask(n);
    }

    /// Sends the outstanding REQSLOTS again at once (a cookie came back for it). Returns
    /// whether there was one waiting for its answer.
    pub fn ask_again_now(&mut self) -> bool {
        self.req.again_now()
    }

    /// Takes message `id` (it waits for an envelope, or uses the first free one at once when
    /// nothing is queued before it). Returns whether it became a token.
    /// `frontier_rule` off (the checker's self-test) freezes the frontier before the token.
    pub fn enqueue(
        &mut self,
        id: MsgId,
        payload: Payload,
        (reported, senders_copy, reply): (bool, bool, bool),
        frontier_rule: bool,
    ) -> bool {
        let msg = Queued {
            id,
            payload,
            reported,
            senders_copy,
            reply,
        };
        self.bytes += msg.payload.len();
        self.note_busy();
        let envelope = match self.rck {
            Some(rck) if self.queue.is_empty() => self.take_envelope().map(|e| (e, rck)),
            _ => None,
        };
        match envelope {
            Some((slot, rck)) => {
                if !frontier_rule && !self.req.is_outstanding() {
                    // The defect: l computed as if this token did not exist yet.
                    let l = self.frontier();
                    self.req.freeze_frontier(l);
                }
                self.make_token(slot, rck, msg);
                true
            }
            None => {
                self.queue.push_back(msg);
                false
            }
        }
    }

    /// After a send: a frozen frontier (the self-test's defect) lasts only as long as the
    /// request it was frozen for.
    #[inline]
    pub fn end_send(&mut self) {
        self.req.end_send();
    }

    /// Puts the messages waiting for credit back in the sending order.
    #[inline]
    pub fn resume_credit_waiters(&mut self) {
        for (slot, _) in self.credit.take_waiting() {
            self.to_send.push_back(slot);
        }
    }

    /// Whether credit was given back since the last call while messages wait for it:
    /// they may go now (rule `credit_return_resumes`).
    #[inline]
    pub fn credit_returned_to_waiters(&mut self) -> bool {
        self.credit.take_returned() && self.credit.has_waiting()
    }

    /// Whether messages wait for reassembly credit.
    #[inline]
    pub fn has_credit_waiters(&self) -> bool {
        self.credit.has_waiting()
    }

    /// Whether tokens wait with nothing to wake them: tokens neither queued to send nor
    /// waiting for credit and no timer of the record's own armed (a token in flight, or
    /// held at the receiver for its verdict, is asked about at a retransmission timeout);
    /// or messages waiting for credit with no REQCREDIT due or outstanding (whose answer,
    /// or timer, tries them again), no credit given back since the last look, and no
    /// message in progress outside the waiting ones (whose credit, given back when it is
    /// whole or settled, lets them go). Never true (a check, in debug builds): it is a
    /// sender left with messages that never get a verdict.
    pub fn tokens_stranded(&self) -> bool {
        let waiting = |s: u64| self.credit.is_waiting(s);
        if self.to_send.is_empty()
            && self.timers.earliest().is_none()
            && self.tokens.iter().any(|(s, _)| !waiting(s))
        {
            return true;
        }
        self.credit.waits_unprompted()
            && !self
                .tokens
                .iter()
                .any(|(s, t)| t.frag.as_ref().is_some_and(|o| o.is_charged()) && !waiting(s))
    }

    /// What [`tokens_stranded`](Self::tokens_stranded) looked at, for a failed check.
    pub fn stranded_debug(&self) -> String {
        let tokens: Vec<_> = self
            .tokens
            .iter()
            .map(|(s, t)| (s, t.sends, t.queued, t.flight, t.held, t.frag.is_some()))
            .collect();
        format!(
            "tokens (slot, sends, queued, flight, held, fragmented) {tokens:?}, to send {:?}, \
             timers {:?}, credit {:?}",
            self.to_send, self.timers, self.credit
        )
    }

    /// CREDIT(r, limit) from the receiver: returns whether messages waiting for credit may
    /// now go (the grant grew, for the current incarnation).
    #[inline]
    pub fn on_credit(&mut self, r: u64, limit: u64) -> bool {
        // The current incarnation's, or one a message waits in (one a restarted durable
        // receiver delivers a handed-over message into again): never a grant nobody asked
        // for.
        (self.rck == Some(r) || self.credit.is_waiting_in(r)) && self.credit.on_credit(r, limit)
    }

    /// The application will have fragmented messages holding up to `want` bytes in
    /// progress: reassembly credit for them (within `cap`) is asked for with the next
    /// token sent.
    pub fn ask_credit(&mut self, want: u64, cap: u64) {
        self.credit.ask_for(self.rck, want.min(cap));
    }

    /// A message was queued: the record is busy, not idle.
    #[inline]
    pub fn note_busy(&mut self) {
        self.idle_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::send::loss::answers_original;
    use std::time::Duration;

    /// A durable sender record with the default configuration, made now.
    fn durable_record() -> (Config, Instant, SRecord) {
        let cfg = Config::default();
        let t0 = Instant::now();
        let mut rec = SRecord::new(100, t0, &cfg, &Rules::ALL);
        rec.set_durable();
        (cfg, t0, rec)
    }

    /// Found by the simulator (a duplicate after crashes of both sides): a token recovered
    /// from the journal may have left before the crash, so a DOUBT, RETRY or LOST for its
    /// incarnation must not put it back in the queue as never sent (a fresh slot would
    /// deliver it a second time), and giving it up is in doubt.
    #[test]
    fn a_recovered_token_counts_as_sent() {
        let (_, t0, mut rec) = durable_record();
        rec.restore(MsgId(5), Payload::from(&b"m"[..]), Some((7, 42)));
        rec.restore(MsgId(6), Payload::from(&b"n"[..]), None);
        let (again, _) = rec.requeue_unsent(7, true);
        assert_eq!(again, 0, "requeued as never sent");
        assert_eq!((rec.token_count(), rec.queued_count()), (1, 1));
        assert_eq!(
            rec.abandon(t0, MsgId(5), &Rules::ALL).map(|(_, v, _)| v),
            Some(crate::proto::Abandoned::InDoubt)
        );
    }

    /// A restarted node starts from the base datagram size: a recovered token that left
    /// whole before the crash in larger datagrams goes in fragments now. Given up before
    /// they all left, it is still in doubt (that whole copy may have been delivered).
    #[test]
    fn a_recovered_token_cut_into_fragments_is_in_doubt() {
        let (_, t0, mut rec) = durable_record();
        rec.restore(MsgId(5), Payload::from(vec![1u8; 5000]), Some((7, 42)));
        let tok = rec.tokens.get_mut(42).expect("restored");
        tok.frag = Some(Box::new(Outgoing::new(5000)));
        assert!(!tok.frag.as_ref().is_some_and(|o| o.all_sent()));
        assert_eq!(
            rec.abandon(t0, MsgId(5), &Rules::ALL).map(|(_, v, _)| v),
            Some(crate::proto::Abandoned::InDoubt)
        );
    }

    /// A HELD for a token that never left (a forger's) changes nothing: held without a
    /// send, the token would never go, and giving it up would call it not delivered. One
    /// for a restored token (which may have left before the crash) holds it, and its
    /// verdict is timed from then.
    #[test]
    fn a_held_for_a_token_that_never_left_is_ignored() {
        let (cfg, t0, mut rec) = durable_record();
        rec.make_token(
            43,
            7,
            Queued {
                id: MsgId(9),
                payload: Payload::from(&b"m"[..]),
                reported: true,
                senders_copy: false,
                reply: false,
            },
        );
        rec.restore(MsgId(5), Payload::from(&b"n"[..]), Some((7, 42)));
        rec.on_held(t0, (7, 40..50), (true, true), &cfg);
        let held = |rec: &SRecord, s: u64| rec.tokens.get(s).is_some_and(|t| t.held);
        assert!(!held(&rec, 43), "never sent: not held");
        assert!(held(&rec, 42), "restored: held");
        assert!(rec.timers.is_set(Timer::Rto), "its verdict timed");
        assert_eq!(
            rec.abandon(t0, MsgId(9), &Rules::ALL).map(|(_, v, _)| v),
            Some(crate::proto::Abandoned::NotDelivered)
        );
    }

    /// The measured budget counts what the receiver newly holds, however it got there:
    /// bytes declared lost whose resend has not left yet count when a GOT shows them held.
    /// (Counted on the transmissions in flight a GOT settles, as first written, a path that
    /// holds datagrams back for longer than the reordering window showed a fraction of what
    /// arrived: here 1 000 bytes of 3 000.)
    #[test]
    fn bytes_held_after_their_loss_was_declared_count_as_held() {
        let cfg = Config::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rec = SRecord::new(100, t0, &cfg, &Rules::ALL);
        rec.make_token(
            43,
            7,
            Queued {
                id: MsgId(9),
                payload: Payload::from(vec![1u8; 3000]),
                reported: false,
                senders_copy: false,
                reply: false,
            },
        );
        let rate = crate::proto::send::congestion::DeliveryRate::default().on_sent(t0, 0);
        let tok = rec.tokens.get_mut(43).expect("made");
        let o = tok.frag.insert(Box::new(Outgoing::new(3000)));
        for (seq, start) in [(1, 0), (2, 1000), (3, 2000)] {
            o.on_sent(start..start + 1000, seq, t0, 1020, rate, 0);
        }
        o.on_lost(1, t0 + ms(20));
        o.on_lost(2, t0 + ms(20));
        let window = cfg.timers.reassembly_timeout / 4;
        let now = t0 + ms(300);
        rec.on_got(now, (7, 43), std::iter::once(0..3000), (true, true), &cfg);
        assert_eq!(rec.held.held(now, window), 3000);
        // A GOT that shows nothing new counts nothing.
        rec.on_got(now, (7, 43), std::iter::once(0..3000), (true, true), &cfg);
        assert_eq!(rec.held.held(now, window), 3000);
    }

    /// Makes a token of `len` bytes (a fragmented message) in `slot`, incarnation 7.
    fn fragmented_token(rec: &mut SRecord, slot: u64, len: u64) {
        rec.make_token(
            slot,
            7,
            Queued {
                id: MsgId(slot),
                payload: Payload::from(vec![0u8; len as usize]),
                reported: false,
                senders_copy: false,
                reply: false,
            },
        );
        rec.tokens.get_mut(slot).unwrap().frag = Some(Box::new(Outgoing::new(len)));
    }

    /// Charges the message in `slot` against reassembly credit: the newest in progress.
    fn charge(rec: &mut SRecord, slot: u64) {
        rec.charges += 1;
        let no = rec.charges;
        let o = rec
            .tokens
            .get_mut(slot)
            .and_then(|t| t.frag.as_mut())
            .unwrap();
        o.set_charge(no);
        rec.note_in_progress(slot, no);
    }

    /// A message given back (its receiver held it whole) and charged again (its partial
    /// was dropped and it starts over) counts once among the messages in progress, at its
    /// latest charge. Counted at its earlier place too, the message charged between the
    /// two waited behind it although it is the older charge.
    #[test]
    fn a_message_charged_again_counts_once_among_those_in_progress() {
        let cfg = Config::default();
        let mut rec = SRecord::new(100, Instant::now(), &cfg, &Rules::ALL);
        let len = 10_000u64;
        for s in [10, 11] {
            fragmented_token(&mut rec, s, len);
            charge(&mut rec, s);
        }
        // Slot 10's charge given back, then made again: the newest charge now.
        rec.tokens
            .get_mut(10)
            .unwrap()
            .frag
            .as_mut()
            .unwrap()
            .uncharge();
        charge(&mut rec, 10);
        let budget = Outgoing::charge_of(len) * 3 / 2;
        assert!(
            rec.within_progress(11, budget),
            "the older charge goes first"
        );
        assert!(!rec.within_progress(10, budget), "the newer one waits");
        assert_eq!(
            rec.in_progress.len(),
            2,
            "the stale entry dropped at the front"
        );
    }

    /// Rule `progress_past_all_sent`: an older message in progress whose every byte has
    /// left keeps no newer one waiting, and the newer ones waiting for it are tried again
    /// when its last byte leaves. Off, the newer one waits until the older is whole.
    #[test]
    fn a_message_all_in_flight_keeps_no_newer_one_waiting() {
        let cfg = Config::default();
        let len = 10_000u64;
        for rule in [true, false] {
            let mut rec = SRecord::new(100, Instant::now(), &cfg, &Rules::ALL);
            rec.past_sent_rule = rule;
            for s in [10, 11] {
                fragmented_token(&mut rec, s, len);
                charge(&mut rec, s);
            }
            let budget = Outgoing::charge_of(len) * 3 / 2;
            assert!(!rec.within_progress(11, budget), "10 has bytes to send");
            rec.credit.wait_for_progress(11, 7);
            rec.to_send.clear();
            rec.on_fragment_sent(Instant::now(), 10, 0..len / 2, len / 2, 0);
            assert!(rec.to_send.is_empty(), "10 still has bytes to send");
            rec.on_fragment_sent(Instant::now(), 10, len / 2..len, len / 2, 0);
            assert_eq!(rec.within_progress(11, budget), rule);
            assert_eq!(rec.to_send.contains(&11), rule, "11 tried again");
            assert_eq!(rec.credit.is_waiting(11), !rule);
        }
    }

    #[test]
    fn only_an_answer_too_early_for_the_retransmission_proves_a_loss_spurious() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let min = Some(ms(10));
        assert!(answers_original(t0, None, min), "not sent again yet");
        assert!(answers_original(t0 + ms(9), Some(t0), min), "too soon");
        assert!(!answers_original(t0 + ms(10), Some(t0), min), "either copy");
        assert!(
            !answers_original(t0 + ms(1), Some(t0), None),
            "no RTT known"
        );
    }
}
