//! The receiver-side half-connection record (R record): the slots one source may fill.

use std::time::Instant;

use crate::proto::recv::assembler::Assembler;
use crate::proto::recv::delivery::Held;
use crate::proto::wire::frame::Verdict;
use crate::proto::wire::ranges::RangeSet;
use crate::proto::Config;

/// Receiver-side record for one source, as in the paper's type `R`.
///
/// `rck` is this record's incarnation, taken from the node clock when the record was created
/// and never reused. `sck` is one past the highest slot ever created for the source in this
/// incarnation. Slots are kept as ranges.
#[derive(Debug)]
pub(crate) struct RRecord {
    /// Sender clock: one past the last slot created.
    sck: u64,
    /// Receiver clock: this incarnation's number.
    rck: u64,
    /// Slots not yet filled or waived.
    slots: RangeSet,
    /// The highest frontier that waived free slots (never filled): below it a slot that is
    /// not free may be one never delivered (`Rules::doubt_below_forgotten`).
    waived_below: u64,
    /// Last time any datagram from the source arrived.
    last_heard: Instant,
    /// Probes sent since the source was last heard.
    probes: u32,
    /// When the last of those probes was sent.
    last_probe: Option<Instant>,
    /// The deadline this record armed in the node's timer queue.
    armed: Option<Instant>,
    /// Probe jitter, a fraction of 2^16 of a quarter interval (re-drawn at every probe).
    jitter: u16,
    /// A token was delivered into this incarnation (it can no longer be evicted).
    proven: bool,
    /// Slots delivered and not yet taken by the application: not acknowledged yet.
    held: Held,
    /// A datagram asked for an immediate ACK (ACK-NOW, or a duplicate) while deliveries
    /// were held: their ACK goes at once when the application has taken them all.
    ack_now: bool,
    /// The slots the last ACK frame to the source acknowledged for the first time: repeated
    /// once in the next ACK frame, so that one lost ACK datagram does not make the sender
    /// declare (and resend) tokens that arrived.
    acked_last: RangeSet,
    /// A token delivered before came again since the last probe: an ACK may have been lost,
    /// and the next probe carries the last one again (`Rules::probe_repeats_ack`).
    resent: bool,
    /// The last verdict answered to the source's tokens of an incarnation not this
    /// record's (at most [`MAX_TOLD_RANGES`] ranges), repeated by the next probe
    /// (`Rules::probe_repeats_old_verdicts`). Boxed: most records never hold one.
    told: Option<Box<Told>>,
    /// The last grant SLOTS(s, rck, n) answered: while its slots are all still free (the
    /// sender sent no token into them), the next probe repeats it
    /// (`Rules::probe_repeats_grant`).
    granted_last: Option<(u64, u64)>,
    /// The slots of messages in progress whose GOT was answered since the last probe (at
    /// most [`MAX_GOT_REPEATED`], the latest kept): the next probe answers their GOT again
    /// (`Rules::probe_repeats_got`).
    got_since_probe: Vec<u64>,
    /// Messages arriving in fragments, and the reassembly memory granted to the source.
    assembler: Assembler,
}

/// Most ranges of slots a record keeps of the verdicts it told its source without a record
/// ([`RRecord::note_told`]); slots beyond are not repeated (they are answered again when
/// their tokens come again).
pub(crate) const MAX_TOLD_RANGES: usize = 4;

/// Most messages in progress whose GOT a probe repeats ([`RRecord::note_got`]).
pub(crate) const MAX_GOT_REPEATED: usize = 4;

/// A verdict told for slots of an incarnation `r` no live record holds.
#[derive(Debug)]
pub(crate) struct Told {
    /// The verdict.
    pub v: Verdict,
    /// The incarnation its slots belong to (not the record's own).
    pub r: u64,
    /// The slots.
    pub slots: RangeSet,
}

/// What a REQSLOTS did to a record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Slots were granted from the request's `s`: this many (at most what was asked, fewer
    /// when the record's cap leaves less room; possibly none new, for a repeated request).
    /// Answer SLOTS with this `n`.
    Granted(u64),
    /// Nothing asked (`n = 0`): no answer.
    Waived,
    /// Refused: the record holds its cap of slots, and none from `s` on.
    OverCap,
}

impl RRecord {
    /// A new incarnation `rck` for a source whose first request starts at `s`.
    pub fn new(s: u64, rck: u64, now: Instant) -> Self {
        RRecord {
            sck: s,
            rck,
            slots: RangeSet::new(),
            waived_below: 0,
            last_heard: now,
            probes: 0,
            last_probe: None,
            armed: None,
            jitter: 0,
            proven: false,
            held: Held::default(),
            ack_now: false,
            acked_last: RangeSet::new(),
            resent: false,
            told: None,
            granted_last: None,
            got_since_probe: Vec::new(),
            assembler: Assembler::default(),
        }
    }

    /// Applies REQSLOTS(s, n, l): waives every slot below `l`, then creates the slots in
    /// `max(sck, s) .. s + n` that do not exist yet, as many as the record's cap of
    /// `max_slots` leaves room for: a receiver grants what it allows, and the sender, told
    /// how many in SLOTS, asks again for the rest. `s + n` was checked not to overflow.
    ///
    /// Slots below `s` that were never created are not created: the sender's clock is already
    /// past them, so it can never hold an envelope for them in this incarnation.
    pub fn request(&mut self, s: u64, n: u64, l: u64, max_slots: u64) -> Grant {
        self.waive_below(l);
        if n == 0 {
            return Grant::Waived;
        }
        let start = self.sck.max(s);
        let room = max_slots.saturating_sub(self.slots.count());
        let end = (s + n).min(start.saturating_add(room));
        if end > start {
            self.slots.insert(start..end);
            self.sck = end;
        }
        // What the sender may use from `s` on: every slot of this incarnation from `s` up to
        // `sck` was created for it (a repeated request is granted again).
        let granted = self.sck.saturating_sub(s).min(n);
        if granted == 0 {
            return Grant::OverCap;
        }
        self.granted_last = Some((s, granted));
        Grant::Granted(granted)
    }

    /// Waives every free slot below the sender's frontier `l` (REQSLOTS(_, _, l)): the
    /// sender holds no token for them. Remembers `l` if any went, never filled.
    fn waive_below(&mut self, l: u64) {
        self.assembler.drop_below(l);
        if self.slots.remove_below(l) > 0 {
            self.waived_below = self.waived_below.max(l);
        }
    }

    /// The early delivery in slot `s` was dropped unseen (its sender's frontier passed it
    /// before it said the token was stored): the slot counts as waived, never delivered,
    /// though it is not free (`maybe_waived`).
    pub fn dropped_unseen(&mut self, s: u64) {
        self.waived_below = self.waived_below.max(s.saturating_add(1));
    }

    /// Whether slot `s`, not free, may have been waived rather than filled: it lies below
    /// a frontier that waived free slots. Only a sender restored from an older copy of
    /// its directory sends a token there (an honest sender holds none below its frontier).
    #[inline]
    pub fn maybe_waived(&self, s: u64) -> bool {
        s < self.waived_below
    }

    /// Fills slot `s` if this token is for this incarnation and the slot is free. Returns
    /// true when the payload must be delivered.
    pub fn fill(&mut self, s: u64, r: u64) -> bool {
        let filled = r == self.rck && self.slots.remove(s);
        if filled {
            // A TOKEN filled the slot of a message that was also coming in fragments.
            self.assembler.drop_slot(s);
        }
        filled
    }

    /// True when the record holds nothing: no free slot and no delivery waiting for the
    /// application. It can then be removed (a later TOKEN for it is a duplicate of a taken
    /// message: ACK, rule 4).
    #[inline]
    pub fn is_spent(&self) -> bool {
        self.slots.is_empty() && self.held.is_empty()
    }

    /// When the next probe is due, if the record holds slots.
    #[cfg(test)]
    pub fn deadline(&self, cfg: &Config) -> Option<Instant> {
        self.deadline_also(cfg, false)
    }

    /// When the next probe is due, if the record holds slots or `also` (its source owes
    /// word of deliveries held for it: `Rules::parked_early_probes`).
    pub fn deadline_also(&self, cfg: &Config, also: bool) -> Option<Instant> {
        if self.slots.is_empty() && !also {
            return None;
        }
        let since = self
            .last_probe
            .unwrap_or(self.last_heard)
            .max(self.last_heard);
        Some(since + self.probe_delay(cfg))
    }

    /// The incarnation `rck` this record's slots belong to.
    #[inline]
    pub fn rck(&self) -> u64 {
        self.rck
    }

    /// The sender's clock: one past the highest slot granted.
    #[inline]
    pub fn sck(&self) -> u64 {
        self.sck
    }

    /// The free slots.
    #[inline]
    pub fn slots(&self) -> &RangeSet {
        &self.slots
    }

    /// The slots delivered and not yet taken by the application.
    #[inline]
    pub fn held(&self) -> &Held {
        &self.held
    }

    /// Whether a token was ever delivered into this record.
    #[inline]
    pub fn is_proven(&self) -> bool {
        self.proven
    }

    /// Unanswered probes since the source was last heard from.
    #[inline]
    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// When the source was last heard from.
    #[inline]
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// Reassembly of this source's fragmented messages.
    #[inline]
    pub fn assembler(&self) -> &Assembler {
        &self.assembler
    }

    /// Reassembly of this source's fragmented messages, to feed.
    #[inline]
    pub fn assembler_mut(&mut self) -> &mut Assembler {
        &mut self.assembler
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

    /// A token was delivered into slot `s`: the record is proven, and with `hold` the slot
    /// is held until the application takes the message.
    #[inline]
    pub fn on_delivered(&mut self, s: u64, hold: bool) {
        self.proven = true;
        if hold {
            self.held.hold(s);
        }
    }

    /// The application took the delivery in slot `s`: returns whether it was held, and
    /// whether the sender's request for an immediate ACK is now due (every delivery taken).
    pub fn on_taken(&mut self, s: u64) -> Option<bool> {
        if !self.held.release(s) {
            return None;
        }
        let urgent = self.ack_now && self.held.is_empty();
        if urgent {
            self.ack_now = false;
        }
        Some(urgent)
    }

    /// The sender asked for an ACK without delay: owed once every held delivery is taken.
    #[inline]
    pub fn want_ack_now(&mut self) {
        self.ack_now |= !self.held.is_empty();
    }

    /// The ACK ranges just sent, to repeat once in the next ACK frame.
    #[inline]
    pub fn set_acked_last(&mut self, fresh: RangeSet) {
        self.acked_last = fresh;
    }

    /// A token delivered before came again.
    #[inline]
    pub fn resent(&mut self) {
        self.resent = true;
    }

    /// The ACK ranges last sent, for a probe, when a token delivered before came again
    /// since the last probe that carried them (at most once per such arrival).
    #[inline]
    pub fn acks_for_probe(&mut self) -> Option<&RangeSet> {
        let resent = std::mem::take(&mut self.resent);
        (resent && !self.acked_last.is_empty()).then_some(&self.acked_last)
    }

    /// Verdict `v` was answered for slot `s` of incarnation `r`, which no live record
    /// holds: kept for the next probe to repeat. A verdict of another kind or incarnation
    /// takes the place of what was kept.
    pub fn note_told(&mut self, v: Verdict, r: u64, s: u64) {
        let told = self.told.get_or_insert_with(|| {
            Box::new(Told {
                v,
                r,
                slots: RangeSet::new(),
            })
        });
        if told.v != v || told.r != r {
            **told = Told {
                v,
                r,
                slots: RangeSet::new(),
            };
        }
        if told.slots.range_count() < MAX_TOLD_RANGES || !told.slots.would_add_range(s..s + 1) {
            told.slots.insert(s..s + 1);
        }
    }

    /// GOT was answered for the message in progress in slot `s`: kept for the next probe.
    pub fn note_got(&mut self, s: u64) {
        if self.got_since_probe.contains(&s) {
            return;
        }
        if self.got_since_probe.len() >= MAX_GOT_REPEATED {
            self.got_since_probe.remove(0);
        }
        self.got_since_probe.push(s);
    }

    /// Takes the slots whose GOT a probe repeats, with the ranges of bytes held of each
    /// (those no longer in progress left out).
    pub fn take_got(&mut self) -> Vec<(u64, RangeSet)> {
        let slots = std::mem::take(&mut self.got_since_probe);
        slots
            .into_iter()
            .filter_map(|s| Some((s, self.assembler.have(s)?.clone())))
            .collect()
    }

    /// The last grant `(s, n)`, for a probe to repeat, while none of its slots was used or
    /// waived (its SLOTS may have been lost: the sender holds no slot of it).
    pub fn grant_to_repeat(&self) -> Option<(u64, u64)> {
        self.granted_last
            .filter(|&(s, n)| self.slots.contains_range(s..s.saturating_add(n)))
    }

    /// Takes what [`note_told`](Self::note_told) kept, for a probe to repeat once.
    #[inline]
    pub fn take_told(&mut self) -> Option<Box<Told>> {
        self.told.take()
    }

    /// Takes the ACK ranges last sent (to repeat them once).
    #[inline]
    pub fn take_acked_last(&mut self) -> RangeSet {
        std::mem::take(&mut self.acked_last)
    }

    /// Draws the timer jitter for the next probes (a fraction of 2^16).
    #[inline]
    pub fn set_jitter(&mut self, jitter: u16) {
        self.jitter = jitter;
    }

    /// The source was heard from: probing starts over.
    #[inline]
    pub fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.probes = 0;
        self.last_probe = None;
    }

    /// A probe was sent at `now`.
    #[inline]
    pub fn probed(&mut self, now: Instant) {
        self.probes = self.probes.saturating_add(1);
        self.last_probe = Some(now);
    }

    /// Delay from the last probe (or the last time the source was heard) to the next probe:
    /// the probe interval, doubled for each unanswered probe, capped.
    pub fn probe_delay(&self, cfg: &Config) -> std::time::Duration {
        let mut d = cfg.timers.probe_interval;
        for _ in 0..self.probes {
            d = d.saturating_mul(2);
            if d >= cfg.timers.max_probe_interval {
                d = cfg.timers.max_probe_interval;
                break;
            }
        }
        let ceiling = cfg.timers.max_probe_interval;
        crate::proto::node::timer::stretch_within(d, ceiling, self.jitter)
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn rec() -> RRecord {
        RRecord::new(10, 7, crate::test_time::origin())
    }

    #[test]
    fn request_creates_slots_once_even_when_repeated() {
        let cfg = Config::default();
        let mut r = rec();
        assert_eq!(
            r.request(10, 5, 10, cfg.limits.max_slots_per_record),
            Grant::Granted(5)
        );
        assert_eq!(r.slots.ranges(), &[10..15]);
        // A duplicate request creates nothing new.
        assert_eq!(
            r.request(10, 5, 10, cfg.limits.max_slots_per_record),
            Grant::Granted(5)
        );
        assert_eq!(r.slots.count(), 5);
        // A larger request from the same s extends the range.
        r.request(10, 8, 10, cfg.limits.max_slots_per_record);
        assert_eq!(r.slots.ranges(), &[10..18]);
        assert_eq!(r.sck, 18);
    }

    #[test]
    fn frontier_waives_slots_below_it() {
        let cfg = Config::default();
        let mut r = rec();
        r.request(10, 5, 10, cfg.limits.max_slots_per_record);
        assert_eq!(
            r.request(15, 0, 13, cfg.limits.max_slots_per_record),
            Grant::Waived
        );
        assert_eq!(r.slots.ranges(), &[13..15]);
    }

    #[test]
    fn a_gap_in_the_sender_clock_does_not_create_slots_below_s() {
        let cfg = Config::default();
        let mut r = rec();
        r.request(10, 5, 10, cfg.limits.max_slots_per_record);
        r.request(1 << 40, 5, 12, cfg.limits.max_slots_per_record);
        assert_eq!(r.slots.ranges(), &[12..15, (1 << 40)..(1 << 40) + 5]);
        assert_eq!(r.slots.count(), 8);
    }

    #[test]
    fn slot_cap_grants_what_fits_then_refuses_without_changing_the_slots() {
        let mut r = rec();
        assert_eq!(r.request(10, 6, 10, 8), Grant::Granted(6));
        // Room for two more: two are granted, and the sender is told so.
        assert_eq!(r.request(16, 3, 10, 8), Grant::Granted(2));
        assert_eq!(r.slots.ranges(), &[10..18]);
        assert_eq!(r.sck, 18);
        // Full: refused, nothing changes.
        assert_eq!(r.request(18, 3, 10, 8), Grant::OverCap);
        assert_eq!(r.slots.count(), 8);
        assert_eq!(r.sck, 18);
        // The same request repeated at the cap is granted again as it was.
        assert_eq!(r.request(16, 3, 10, 8), Grant::Granted(2));
        // Slots filled or waived make room again.
        assert!(r.fill(10, 7));
        assert_eq!(r.request(18, 3, 13, 8), Grant::Granted(3));
        assert_eq!(r.slots.ranges(), &[13..21]);
    }

    #[test]
    fn token_needs_matching_incarnation_and_free_slot() {
        let cfg = Config::default();
        let mut r = rec();
        r.request(10, 2, 10, cfg.limits.max_slots_per_record);
        assert!(!r.fill(10, 8), "other incarnation");
        assert!(r.fill(10, 7));
        assert!(!r.fill(10, 7), "slot already filled");
        assert!(!r.fill(12, 7), "slot never created");
    }

    #[test]
    fn probes_are_spaced_from_the_previous_probe_not_from_last_heard() {
        let cfg = {
            let mut c = Config::default();
            c.timers.probe_interval = std::time::Duration::from_secs(1);
            c.timers.max_probe_interval = std::time::Duration::from_secs(4);
            c
        };
        let t0 = crate::test_time::origin();
        let mut r = RRecord::new(10, 7, t0);
        r.request(10, 2, 10, cfg.limits.max_slots_per_record);
        let mut at = r.deadline(&cfg).unwrap();
        let mut gaps = Vec::new();
        for _ in 0..6 {
            r.probed(at);
            let next = r.deadline(&cfg).unwrap();
            assert!(next > at, "a probe must move the deadline forward");
            gaps.push((next - at).as_secs());
            at = next;
        }
        assert_eq!(gaps, [2, 4, 4, 4, 4, 4]);
        r.heard(at);
        assert_eq!(
            r.deadline(&cfg),
            Some(at + std::time::Duration::from_secs(1))
        );
    }

    #[test]
    fn probe_interval_backs_off_to_the_cap() {
        let cfg = {
            let mut c = Config::default();
            c.timers.probe_interval = std::time::Duration::from_secs(1);
            c.timers.max_probe_interval = std::time::Duration::from_secs(5);
            c
        };
        let mut r = rec();
        assert_eq!(r.probe_delay(&cfg).as_secs(), 1);
        r.probes = 2;
        assert_eq!(r.probe_delay(&cfg).as_secs(), 4);
        r.probes = 200;
        assert_eq!(r.probe_delay(&cfg).as_secs(), 5);
    }
}
