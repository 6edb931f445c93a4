//! The reassembly credit a receiver granted this sender, per receiver incarnation, and the
//! messages waiting for it.
//!
//! A live receiver record grants credit for its own incarnation. A durable receiver that
//! restarted with a message of an earlier incarnation handed over and not taken
//! (`Rules::deliver_from_senders_copy`) grants credit for that one too, while its sender
//! already holds slots of a newer one: so the sender keeps a grant per incarnation, the
//! newest [`MAX_GRANTS`] of them.

use std::collections::VecDeque;
use std::time::Instant;

/// Most incarnations a sender keeps a grant for (the current one, and open ones of a
/// restarted receiver); the oldest grant goes beyond.
pub(crate) const MAX_GRANTS: usize = 4;

/// Credit granted under one receiver incarnation.
#[derive(Debug, Clone, Copy)]
struct Grant {
    r: u64,
    limit: u64,
    used: u64,
}

/// Reassembly credit: bytes of fragmented messages the receiver lets this sender have in
/// progress at once, per receiver incarnation.
#[derive(Debug, Default)]
pub(crate) struct Credit {
    /// Grants, oldest first, one per incarnation, at most [`MAX_GRANTS`].
    grants: VecDeque<Grant>,
    /// What the last REQCREDIT asked for.
    asked: u64,
    /// A REQCREDIT must go out.
    due: bool,
    /// When the last REQCREDIT went out.
    asked_at: Option<Instant>,
    /// The incarnation the last REQCREDIT named: what was asked for (`asked`) covers a
    /// message waiting in another incarnation only once a REQCREDIT names that one.
    asked_in: Option<u64>,
    /// Slots of messages waiting for credit, oldest first, with the incarnation each was
    /// made under.
    waiting: VecDeque<(u64, u64)>,
    /// The message (slot, incarnation) a REQCREDIT asking ahead names, when none waits.
    ahead: Option<(u64, u64)>,
    /// Credit was given back since the last look ([`take_returned`](Self::take_returned)):
    /// messages waiting for it may go.
    returned: bool,
}

impl Credit {
    fn grant(&self, r: u64) -> Option<&Grant> {
        self.grants.iter().find(|g| g.r == r)
    }

    fn grant_mut(&mut self, r: u64) -> Option<&mut Grant> {
        self.grants.iter_mut().find(|g| g.r == r)
    }

    /// Bytes of credit left in incarnation `r`.
    #[cfg(test)]
    pub fn room(&self, r: u64) -> u64 {
        self.grant(r).map_or(0, |g| g.limit.saturating_sub(g.used))
    }

    /// Takes `charge` bytes of credit in incarnation `r`; false if there is no room.
    pub fn take(&mut self, r: u64, charge: u64) -> bool {
        match self.grant_mut(r) {
            Some(g) if g.limit.saturating_sub(g.used) >= charge => {
                g.used += charge;
                true
            }
            _ => false,
        }
    }

    /// A message in `slot` of incarnation `r` just took credit: a grant now more than three
    /// quarters used is asked to double (within `cap`) before any message has to wait for
    /// it, so a sender that keeps its credit busy does not stall a round trip at every
    /// doubling (`Rules::credit_doubles`).
    pub fn ask_ahead(&mut self, slot: u64, r: u64, cap: u64) {
        let Some(g) = self.grant(r) else {
            return;
        };
        let want = g.limit.saturating_mul(2).min(cap);
        if g.used > g.limit / 4 * 3 && want > g.limit && want > self.asked {
            self.asked = want;
            self.due = true;
            self.ahead = Some((slot, r));
        }
    }

    /// The application will have fragmented messages holding up to `want` bytes in
    /// progress (a stream whose chunks do not fit one datagram): unless incarnation `r`'s
    /// grant (the current one, if any) or what was asked for covers it, a REQCREDIT for
    /// `want` goes with the next token sent ([`name_ahead`](Self::name_ahead)), rather
    /// than a round trip later when the first such message waits for it.
    pub fn ask_for(&mut self, r: Option<u64>, want: u64) {
        let have = r.and_then(|r| self.grant(r)).map_or(0, |g| g.limit);
        if want > have && want > self.asked {
            self.asked = want;
            self.due = true;
        }
    }

    /// A token of slot `slot`, incarnation `r`, was just sent: a REQCREDIT asked for ahead
    /// with no message to name names it (its receiver grants for `r`, or answers for that
    /// slot when it no longer holds `r`).
    pub fn name_ahead(&mut self, slot: u64, r: u64) {
        if self.due && self.ahead.is_none() && self.waiting.is_empty() {
            self.ahead = Some((slot, r));
        }
    }

    /// Counts `charge` bytes the receiver charged to its grant in incarnation `r` for a
    /// partial this sender did not start in this life: used even beyond the limit (no new
    /// message starts until enough is given back), under a grant of no bytes until a
    /// CREDIT comes if none is held yet.
    pub fn charge_held(&mut self, r: u64, charge: u64) {
        if self.grant(r).is_none() {
            self.grants.push_back(Grant {
                r,
                limit: 0,
                used: 0,
            });
            if self.grants.len() > MAX_GRANTS {
                self.grants.pop_front();
            }
        }
        if let Some(g) = self.grant_mut(r) {
            g.used = g.used.saturating_add(charge);
        }
    }

    /// Gives back `charge` bytes (the message is whole at the receiver, or settled).
    ///
    /// Messages waiting are told so ([`take_returned`](Self::take_returned)) even when
    /// incarnation `r`'s grant is gone (the receiver lost `r`, [`reset`](Self::reset)):
    /// they may wait for the messages in progress rather than for credit, and a message of
    /// a lost incarnation that leaves progress lets them go as any other does (a sender
    /// kept eight messages waiting behind one settled after its grant was reset, with no
    /// timer, for good: `exon-sim` seed 728284345684668549,
    /// `tokens_to_a_restarted_receiver_keep_a_timer`).
    pub fn give_back(&mut self, r: u64, charge: u64) {
        if let Some(g) = self.grant_mut(r) {
            g.used = g.used.saturating_sub(charge);
        }
        self.returned |= charge > 0;
    }

    /// Whether credit was given back since the last call (and forgets it): a verdict that
    /// settles a message in progress frees its credit as a GOT making it whole does, and
    /// the messages waiting for that credit must be tried again. Nothing else would try
    /// them: a CREDIT that answered in full left no REQCREDIT outstanding, so no timer.
    pub fn take_returned(&mut self) -> bool {
        std::mem::take(&mut self.returned)
    }

    /// Whether a message of incarnation `r` waits for credit (so a CREDIT for `r` was
    /// asked for, whatever the sender's current incarnation).
    pub fn is_waiting_in(&self, r: u64) -> bool {
        self.waiting.iter().any(|&(_, w)| w == r)
    }

    /// CREDIT(r, limit) arrived. Returns whether waiting messages may go now.
    pub fn on_credit(&mut self, r: u64, limit: u64) -> bool {
        let limit = match self.grant_mut(r) {
            Some(g) => {
                g.limit = g.limit.max(limit);
                g.limit
            }
            None => {
                self.grants.push_back(Grant { r, limit, used: 0 });
                if self.grants.len() > MAX_GRANTS {
                    self.grants.pop_front();
                }
                self.asked = 0;
                limit
            }
        };
        if limit >= self.asked && self.asked_in.is_none_or(|a| a == r) {
            // Answered in full; otherwise (or while the ask named another incarnation)
            // the timer asks again.
            self.asked_at = None;
        }
        !self.waiting.is_empty()
    }

    /// Whether messages are in progress: credit is charged for some.
    pub fn in_use(&self) -> bool {
        self.grants.iter().any(|g| g.used > 0)
    }

    /// Whether a message charged `charge` bytes may start now that the path moves about
    /// `budget` bytes before its receiver would drop a partial that made no progress: one
    /// message always may; more only while the charges in progress (every incarnation's)
    /// stay within the budget.
    pub fn fits_progress(&self, charge: u64, budget: u64) -> bool {
        let used: u64 = self.grants.iter().map(|g| g.used).sum();
        used == 0 || used.saturating_add(charge) <= budget
    }

    /// A message in `slot` of incarnation `r` waits for the messages in progress, not for
    /// credit: it asks for none (it is tried again when credit comes back, as a message
    /// waiting for credit is).
    pub fn wait_for_progress(&mut self, slot: u64, r: u64) {
        self.waiting.push_back((slot, r));
    }

    /// A message in `slot` of incarnation `r` needing `charge` bytes waits for credit;
    /// asks for more if what was asked for does not cover it. What it asks for is at least
    /// twice the grant it ran out of (`Rules::credit_doubles`): a sender that keeps messages
    /// in progress all the time (a stream on a long path, whose fragments are in flight for
    /// a round trip or more) gets the credit its rate needs in a few round trips, as slow
    /// start doubles a window, instead of one more message per round trip. It asks only when
    /// it runs short (here, or ahead: [`ask_ahead`](Self::ask_ahead)), so a grant stays
    /// within about three times what its messages in progress hold.
    pub fn wait(&mut self, slot: u64, r: u64, charge: u64, cap: u64, double: bool) {
        self.waiting.push_back((slot, r));
        let (used, limit) = self.grant(r).map_or((0, 0), |g| (g.used, g.limit));
        let grown = if double { limit.saturating_mul(2) } else { 0 };
        let want = used
            .saturating_add(charge)
            .max(grown)
            .max(self.asked)
            .min(cap.max(charge));
        // A message of an incarnation without a grant asks at once: if that incarnation
        // is gone, the answer is its verdict (see `due`). So does one whose incarnation the
        // last ask did not name: what that ask asked for is another incarnation's (a grant
        // of none, kept from the partials of a life before, would otherwise wait for good,
        // no ask outstanding and no timer).
        if want > self.asked || self.grant(r).is_none() || self.asked_in != Some(r) {
            self.asked = want;
            self.due = true;
        }
    }

    /// Keeps the waiting messages whose slot `live` says still holds a token (the others
    /// were settled or given up).
    pub fn retain_waiting(&mut self, mut live: impl FnMut(u64) -> bool) {
        self.waiting.retain(|(s, _)| live(*s));
    }

    /// Forgets the waiting messages in `slots` (they went back to the queue).
    pub fn drop_waiting(&mut self, slots: &[u64]) {
        self.waiting.retain(|(s, _)| !slots.contains(s));
    }

    /// Takes every waiting slot (to be tried again).
    pub fn take_waiting(&mut self) -> VecDeque<(u64, u64)> {
        std::mem::take(&mut self.waiting)
    }

    /// Whether messages wait for credit.
    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether the message in `slot` waits here.
    pub fn is_waiting(&self, slot: u64) -> bool {
        self.waiting.iter().any(|&(s, _)| s == slot)
    }

    /// Whether messages wait while nothing here will try them again: no REQCREDIT due or
    /// outstanding, no credit given back since the last look. They then wait for the
    /// messages in progress ([`wait_for_progress`](Self::wait_for_progress)).
    pub fn waits_unprompted(&self) -> bool {
        self.has_waiting() && !self.due && self.asked_at.is_none() && !self.returned
    }

    /// The REQCREDIT to write now, if one is due: the incarnation and slot of the oldest
    /// waiting message (a receiver that lost that incarnation answers with its verdict), or
    /// with none waiting, of the message an ask ahead named; and the bytes wanted.
    #[inline]
    pub fn due(&self) -> Option<(u64, u64, u64)> {
        // The flag first: asked on every datagram, and almost never due.
        if !self.due {
            return None;
        }
        let &(s, r) = self.waiting.front().or(self.ahead.as_ref())?;
        Some((r, s, self.asked))
    }

    /// The REQCREDIT was written at `now`.
    pub fn on_asked(&mut self, now: Instant) {
        if let Some((r, _, _)) = self.due() {
            self.asked_in = Some(r);
        }
        self.due = false;
        self.ahead = None;
        self.asked_at = Some(now);
    }

    /// When the unanswered REQCREDIT was sent, if one is outstanding.
    pub fn asked_at(&self) -> Option<Instant> {
        self.asked_at.filter(|_| self.has_waiting())
    }

    /// The REQCREDIT went unanswered: ask again. With `rotate`, it names the next waiting
    /// message this time: a receiver that lost the incarnation answers a REQCREDIT with the
    /// named message's verdict, and one that withholds that verdict (it holds the message
    /// untaken, its application waiting for another of the waiting messages) answers for
    /// the others. Whether the sender holds a grant in that incarnation says nothing of it:
    /// a grant made before the receiver restarted stays with the sender (rotating only
    /// without a grant left a stream stalled for good, `exon-sim` seed 659 of
    /// `credit_rotates_even_with_a_grant`). A live receiver grants whatever is named.
    pub fn ask_again(&mut self, rotate: bool) {
        if self.waiting.is_empty() {
            return;
        }
        if rotate {
            self.waiting.rotate_left(1);
        }
        self.due = true;
        self.asked_at = None;
    }

    /// The receiver lost incarnation `r` (DOUBT, RETRY, LOST): its grant goes with it, and
    /// an ask ahead naming it. What was asked for stays while a message of another
    /// incarnation waits (the ask is the most any waiting message needs); with none, the
    /// next ask starts afresh. A REQCREDIT due stays due: a message of `r` that left and
    /// waits for credit again gets its verdict from it.
    pub fn reset(&mut self, r: u64) {
        self.grants.retain(|g| g.r != r);
        if self.ahead.is_some_and(|(_, a)| a == r) {
            self.ahead = None;
        }
        if self.waiting.iter().all(|&(_, w)| w == r) {
            self.asked = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `scripts/sim-campaign.py` (campaign 91, seed 841090675): a restarted sender
    /// kept a grant of none in an old incarnation (charged for a partial of its life before,
    /// given back since), and its asks had gone to the current incarnation, answered in
    /// full. A message recovered in the old incarnation then waited for credit with nothing
    /// asked for it, no ask outstanding and no timer: for good.
    #[test]
    fn a_message_waiting_in_an_incarnation_the_last_ask_did_not_name_asks() {
        let t0 = Instant::now();
        let mut c = Credit::default();
        // The current incarnation's grant, asked to double ahead and answered in full.
        c.on_credit(20, 131_072);
        assert!(c.take(20, 120_000));
        c.ask_ahead(1, 20, 1 << 24);
        assert_eq!(c.due(), Some((20, 1, 262_144)));
        c.on_asked(t0);
        c.on_credit(20, 262_144);
        assert_eq!(c.asked_at(), None);
        c.give_back(20, 120_000);
        // A grant of none in the old incarnation, from a partial of the life before.
        c.charge_held(14, 5_000);
        c.give_back(14, 5_000);
        assert!(!c.take(14, 5_000));
        c.wait(38, 14, 5_000, 1 << 24, true);
        assert_eq!(c.due().map(|(r, s, _)| (r, s)), Some((14, 38)));
        c.on_asked(t0);
        // A full grant in the current incarnation does not answer the ask for the old one:
        // the timer asks again.
        c.on_credit(20, 262_144);
        assert_eq!(c.asked_at(), Some(t0));
        // Its own answer does.
        c.on_credit(14, 262_144);
        assert_eq!(c.asked_at(), None);
        assert!(c.take(14, 5_000));
    }

    #[test]
    fn credit_is_per_incarnation_and_given_back() {
        let t0 = crate::test_time::origin();
        let mut c = Credit::default();
        assert_eq!(c.room(7), 0);
        c.wait(3, 7, 100_000, 1 << 24, true);
        assert_eq!(c.due(), Some((7, 3, 100_000)));
        c.on_asked(t0);
        assert!(c.on_credit(7, 150_000));
        assert!(c.take(7, 100_000));
        assert!(!c.take(7, 100_000), "only 50 000 left");
        assert_eq!(c.room(8), 0, "another incarnation");
        c.give_back(7, 100_000);
        assert_eq!(c.room(7), 150_000);
        c.reset(7);
        assert_eq!(c.room(7), 0, "lost with its incarnation");
    }

    /// A partial the receiver holds from the sender's life before counts as used, even
    /// beyond the grant, and under a grant of nothing when none was made yet: no new
    /// message starts until enough is given back.
    #[test]
    fn partials_of_a_life_before_count_as_used() {
        let mut c = Credit::default();
        c.charge_held(7, 100_000);
        assert_eq!(c.room(7), 0);
        c.on_credit(7, 150_000);
        assert_eq!(c.room(7), 50_000, "the grant, less the partial held");
        c.charge_held(7, 100_000);
        assert!(!c.take(7, 1), "beyond the grant: nothing starts");
        c.give_back(7, 100_000);
        assert_eq!(c.room(7), 50_000);
    }

    /// The receiver loses one incarnation while a message of another (a restarted durable
    /// receiver's open one) waits for credit: the ask for that message keeps what it needs.
    /// Zeroing what was asked, as before, made every ask after it a REQCREDIT for 0 bytes,
    /// which no grant answers with room: the message waited for ever.
    #[test]
    fn losing_one_incarnation_keeps_the_ask_of_another() {
        let t0 = crate::test_time::origin();
        let mut c = Credit::default();
        c.on_credit(8, 10_000);
        c.wait(1, 7, 60_000, 1 << 20, false);
        c.wait(2, 8, 100_000, 1 << 20, false);
        c.on_asked(t0);
        c.reset(7);
        c.drop_waiting(&[1]);
        c.ask_again(false);
        assert_eq!(c.due(), Some((8, 2, 100_000)), "the waiting message's need");
    }

    #[test]
    fn a_sender_out_of_credit_asks_for_twice_its_grant_up_to_the_cap() {
        let t0 = crate::test_time::origin();
        let mut c = Credit::default();
        c.wait(1, 7, 40_000, 1 << 20, true);
        assert_eq!(c.due(), Some((7, 1, 40_000)), "the first: what it needs");
        c.on_asked(t0);
        c.on_credit(7, 40_000);
        assert!(c.take(7, 40_000));
        c.wait(2, 7, 40_000, 1 << 20, true);
        assert_eq!(c.due(), Some((7, 1, 80_000)), "then twice the grant");
        c.on_asked(t0);
        c.on_credit(7, 80_000);
        c.take_waiting();
        assert!(c.take(7, 40_000));
        c.wait(3, 7, 40_000, 1 << 20, true);
        assert_eq!(c.due().map(|d| d.2), Some(160_000));
        c.on_asked(t0);
        c.on_credit(7, 700_000);
        c.take_waiting();
        c.wait(4, 7, 800_000, 1 << 20, true);
        assert_eq!(c.due().map(|d| d.2), Some(1 << 20), "never past the cap");
        // Without the rule: only the message that waits.
        let mut c = Credit::default();
        c.on_credit(7, 80_000);
        assert!(c.take(7, 80_000));
        c.wait(2, 7, 40_000, 1 << 20, false);
        assert_eq!(c.due().map(|d| d.2), Some(120_000));
    }

    #[test]
    fn a_grant_mostly_used_is_asked_to_double_ahead() {
        let t0 = crate::test_time::origin();
        let mut c = Credit::default();
        c.ask_ahead(1, 7, 1 << 20);
        assert_eq!(c.due(), None, "no grant yet: nothing to double");
        c.on_credit(7, 100_000);
        assert!(c.take(7, 40_000));
        c.ask_ahead(1, 7, 1 << 20);
        assert!(c.take(7, 30_000));
        c.ask_ahead(1, 7, 1 << 20);
        assert_eq!(c.due(), None, "less than three quarters used");
        assert!(c.take(7, 10_000));
        c.ask_ahead(2, 7, 1 << 20);
        assert_eq!(c.due(), Some((7, 2, 200_000)), "named by the last message");
        c.on_asked(t0);
        assert_eq!(c.asked_at(), None, "not timed: no message waits");
        c.ask_ahead(3, 7, 1 << 20);
        assert_eq!(c.due(), None, "asked once");
        c.on_credit(7, 200_000);
        assert!(c.take(7, 100_000));
        c.ask_ahead(4, 7, 250_000);
        assert_eq!(c.due(), Some((7, 4, 250_000)), "within the cap");
        c.reset(7);
        assert_eq!(c.due(), None, "gone with its incarnation");
    }

    #[test]
    fn credit_asked_for_ahead_goes_with_the_next_token() {
        let t0 = crate::test_time::origin();
        let mut c = Credit::default();
        c.ask_for(None, 130_000);
        assert_eq!(c.due(), None, "no message to name yet");
        c.name_ahead(4, 7);
        assert_eq!(c.due(), Some((7, 4, 130_000)));
        c.on_asked(t0);
        c.name_ahead(5, 7);
        assert_eq!(c.due(), None, "asked once");
        c.on_credit(7, 130_000);
        c.ask_for(Some(7), 100_000);
        c.name_ahead(6, 7);
        assert_eq!(c.due(), None, "the grant covers it");
    }

    #[test]
    fn a_grant_for_an_open_incarnation_stands_beside_the_current_one() {
        // A restarted receiver grants for incarnation 7 (still open) while the sender
        // already holds slots of 9: both grants stand, neither undoes the other.
        let mut c = Credit::default();
        c.wait(3, 7, 50_000, 1 << 24, true);
        assert!(c.is_waiting_in(7) && !c.is_waiting_in(9));
        assert!(c.on_credit(9, 20_000));
        assert!(c.on_credit(7, 60_000));
        assert!(c.on_credit(9, 20_000));
        assert_eq!(c.room(7), 60_000);
        assert_eq!(c.room(9), 20_000);
        assert!(c.take(7, 50_000));
        assert!(c.take(9, 20_000));
        // Bounded: the oldest grants go.
        for r in 10..10 + MAX_GRANTS as u64 {
            c.on_credit(r, 1);
        }
        assert_eq!(c.room(7), 0);
        assert_eq!(c.grants.len(), MAX_GRANTS);
    }

    #[test]
    fn messages_start_while_those_in_progress_fit_the_budget_and_one_always_may() {
        let mut c = Credit::default();
        c.on_credit(7, 1 << 20);
        assert_eq!(c.room(7), 1 << 20);
        // Nothing in progress: one starts even above the budget.
        assert!(c.fits_progress(300_000, 100_000));
        assert!(c.take(7, 300_000));
        assert!(
            !c.fits_progress(100_000, 350_000),
            "300 000 + 100 000 > 350 000"
        );
        assert!(c.fits_progress(50_000, 350_000));
        // Waiting for progress asks for no credit, and goes with the credit given back.
        c.wait_for_progress(4, 7);
        assert_eq!(c.due(), None);
        c.give_back(7, 300_000);
        assert!(c.take_returned() && c.has_waiting());
        assert_eq!(c.take_waiting().len(), 1);
        assert!(c.fits_progress(100_000, 350_000));
    }

    /// Found by the property test (`tokens_to_a_restarted_receiver_keep_a_timer`): a
    /// message of a lost incarnation, in progress when its grant was reset, is settled
    /// later; the messages of the new incarnation waiting behind it must hear of it, or
    /// nothing tries them again.
    #[test]
    fn credit_given_back_to_a_reset_grant_still_lets_the_waiting_go() {
        let mut c = Credit::default();
        c.on_credit(1, 16_384);
        assert!(
            c.take(1, 16_384),
            "the old incarnation's message in progress"
        );
        c.reset(1);
        c.on_credit(7, 32_768);
        assert!(c.take(7, 16_384));
        c.wait_for_progress(8, 7);
        assert!(c.waits_unprompted(), "waits for the message in progress");
        assert!(!c.take_returned());
        c.give_back(1, 16_384);
        assert!(!c.waits_unprompted());
        assert!(c.take_returned() && c.has_waiting());
        c.give_back(1, 0);
        assert!(!c.take_returned(), "nothing given back, nothing to tell");
    }
}
