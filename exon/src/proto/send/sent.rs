//! What the sender keeps per datagram that carried TOKENs to a destination, rather than per
//! token: when it left, the delivery-rate snapshot of its transmission and how far its
//! frames reached, by the datagram's sequence number.
//!
//! Every token written whole into one datagram shares that datagram's sequence number (see
//! [`LossDetector`](super::loss::LossDetector)) and the instant it left, so the snapshot the
//! delivery-rate estimator takes is the same for all of them: it is taken once, when the
//! datagram's first token is written, and a token keeps only the sequence number. Its send
//! time (loss detection's time rule, the RTT sample, the retransmission timer) and its
//! reach (path MTU discovery: an acknowledged token proves its whole datagram arrived, a
//! lost one that its datagram did not) are read here by that number.

use std::collections::VecDeque;
use std::time::Instant;

use crate::proto::send::congestion::SendState;

/// One datagram that carried TOKENs.
#[derive(Debug, Clone, Copy)]
struct Datagram {
    /// The delivery-rate snapshot taken when its first token was written (its send time
    /// with it).
    state: SendState,
    /// How far the sender record's frames reached into it (its TOKENs and any frame after
    /// them), in bytes, the authentication tag counted: noted once the record's part of the
    /// datagram is written.
    reach: u32,
}

/// Datagrams kept beyond a multiple of the tokens before the log looks for what it may
/// forget, and beyond the hard bound.
const SLACK: usize = 64;

/// The most datagrams kept, per token of the record (plus [`SLACK`] times 16), at every
/// push: a token acknowledged later than that many datagrams after its last transmission
/// feeds the delivered count, not a sample. Never reached unless a token waits for its
/// verdict while four times as many datagrams as there are tokens leave after it.
const MAX_PER_TOKEN: usize = 4;

/// The datagrams that carried TOKENs, by sequence number: dense from `base` (the detector
/// numbers only datagrams that carried a TOKEN).
#[derive(Debug, Default)]
pub(crate) struct SentLog {
    /// The sequence number of `snaps[0]`.
    base: u64,
    snaps: VecDeque<Datagram>,
    /// The length past which [`push`](Self::push) asks to be told the oldest datagram a
    /// token still refers to (doubled after each answer, so the asking costs O(1) a push).
    check_at: usize,
}

impl SentLog {
    /// Whether datagram `seq` has its snapshot already (a token written into it before).
    #[inline]
    pub fn has(&self, seq: u64) -> bool {
        seq.checked_sub(self.base)
            .is_some_and(|i| i < self.snaps.len() as u64)
    }

    /// Records datagram `seq`'s snapshot (the record holds `tokens` tokens). A sequence
    /// number that does not follow the last one starts the log again from it. Returns
    /// whether the log has grown enough to be told, by [`keep_from`](Self::keep_from) and
    /// [`forget_below`](Self::forget_below), the oldest datagram a token of the record still
    /// refers to: always once it holds more than the hard bound ([`MAX_PER_TOKEN`]), so a
    /// record that forgets when asked never holds more than one datagram beyond it.
    #[inline]
    pub fn push(&mut self, seq: u64, st: SendState, tokens: usize) -> bool {
        if self.base.checked_add(self.snaps.len() as u64) != Some(seq) {
            self.snaps.clear();
            self.base = seq;
        }
        self.snaps.push_back(Datagram {
            state: st,
            reach: 0,
        });
        self.snaps.len() > self.check_at.min(hard_bound(tokens))
    }

    /// Datagram `seq`, the newest (its snapshot taken), reaches `reach` bytes with the
    /// frames written into it so far. Any other datagram is left as it is.
    #[inline]
    pub fn note_reach(&mut self, seq: u64, reach: u32) {
        if self.base.checked_add(self.snaps.len() as u64) == seq.checked_add(1) {
            if let Some(d) = self.snaps.back_mut() {
                d.reach = d.reach.max(reach);
            }
        }
    }

    /// The first datagram to keep when `oldest` is the oldest one a token of the record
    /// (`tokens` of them) still refers to (`None`: none does): that one, unless more than
    /// the hard bound ([`MAX_PER_TOKEN`]) would stay, when only the newest three quarters
    /// of the bound stay (so the next look is a quarter of the bound away: O(1) a push,
    /// amortised). Datagrams from `oldest` up to it go although a token names them: their
    /// tokens keep their send time themselves (the record pins it in each).
    pub fn keep_from(&self, oldest: Option<u64>, tokens: usize) -> u64 {
        let end = self.base + self.snaps.len() as u64;
        let keep = oldest.unwrap_or(end).clamp(self.base, end);
        let hard = hard_bound(tokens) as u64;
        if end - keep > hard {
            end - (hard - hard / 4)
        } else {
            keep
        }
    }

    /// Forgets the datagrams before `from` (from [`keep_from`](Self::keep_from)).
    pub fn forget_below(&mut self, from: u64, tokens: usize) {
        let end = self.base + self.snaps.len() as u64;
        let from = from.clamp(self.base, end);
        let gone = (from - self.base) as usize;
        self.snaps.drain(..gone);
        self.base = from;
        let soft = tokens.saturating_mul(2).saturating_add(SLACK);
        self.check_at = soft.max(self.snaps.len().saturating_mul(2));
    }

    /// [`forget_below`](Self::forget_below) what [`keep_from`](Self::keep_from) says.
    #[cfg(test)]
    pub fn forget_before(&mut self, oldest: Option<u64>, tokens: usize) {
        let from = self.keep_from(oldest, tokens);
        self.forget_below(from, tokens);
    }

    #[inline]
    fn datagram(&self, seq: u64) -> Option<&Datagram> {
        let i = seq.checked_sub(self.base)?;
        self.snaps.get(usize::try_from(i).ok()?)
    }

    /// The snapshot of datagram `seq`, if still kept.
    #[inline]
    pub fn get(&self, seq: u64) -> Option<&SendState> {
        self.datagram(seq).map(|d| &d.state)
    }

    /// When datagram `seq` left, if it is still kept.
    #[inline]
    pub fn sent_exactly_at(&self, seq: u64) -> Option<Instant> {
        self.datagram(seq).map(|d| d.state.sent_at())
    }

    /// When datagram `seq` left: its own instant if still kept; for one forgotten, the
    /// oldest kept datagram's, which left after it. Only the last resort of a token's send
    /// time (`Token::last_sent`), whose record pins the instant in every token whose
    /// datagram it forgets; `None` for a number the log never had (none sent yet in its
    /// numbering).
    #[inline]
    pub fn sent_at(&self, seq: u64) -> Option<Instant> {
        if seq < self.base {
            return self.snaps.front().map(|d| d.state.sent_at());
        }
        self.sent_exactly_at(seq)
    }

    /// How far datagram `seq`'s TOKEN frames reached (see [`note_reach`](Self::note_reach)),
    /// if it is still kept.
    #[inline]
    pub fn reach(&self, seq: u64) -> Option<u32> {
        self.datagram(seq).map(|d| d.reach)
    }

    /// Datagrams kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.snaps.len()
    }
}

/// The most datagrams the log keeps for a record of `tokens` tokens.
#[inline]
fn hard_bound(tokens: usize) -> usize {
    tokens
        .saturating_mul(MAX_PER_TOKEN)
        .saturating_add(SLACK * 16)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::proto::send::congestion::DeliveryRate;

    #[test]
    fn snapshots_are_kept_while_a_token_refers_to_them_and_bounded() {
        let t0 = Instant::now();
        let mut rate = DeliveryRate::default();
        let mut log = SentLog::default();
        assert!(log.get(0).is_none());
        for seq in 0..10u64 {
            assert!(!log.has(seq));
            let at = t0 + Duration::from_millis(seq);
            log.push(seq, rate.on_sent(at, seq), 100);
            assert!(log.has(seq));
        }
        assert_eq!(
            log.get(3).map(|s| s.sent_at()),
            Some(t0 + Duration::from_millis(3))
        );
        assert!(log.get(10).is_none() && log.get(u64::MAX).is_none());
        // One token still refers to datagram 5: everything from it is kept, however many
        // datagrams leave after it (up to the hard bound).
        let mut asked = 0;
        for seq in 10..1400u64 {
            if log.push(seq, rate.on_sent(t0, 1), 100) {
                asked += 1;
                log.forget_before(Some(5), 100);
            }
        }
        assert!(
            log.has(5) && !log.has(4),
            "kept from the oldest referred to"
        );
        assert!(asked < 10, "asked {asked} times: the threshold doubles");
        // Past the hard bound (4 a token and 1 024), the oldest go all the same, down to
        // three quarters of the bound, and every push beyond the bound asks for a look.
        let hard = 10 * MAX_PER_TOKEN + SLACK * 16;
        assert!(log.keep_from(Some(5), 10) > 5, "past the bound");
        log.forget_before(Some(5), 10);
        assert_eq!(log.len(), hard - hard / 4);
        assert!(log.has(1399) && !log.has(5));
        let mut asked = 0;
        for seq in 1400..4000u64 {
            if log.push(seq, rate.on_sent(t0, 1), 10) {
                asked += 1;
                log.forget_before(Some(5), 10);
            }
            assert!(log.len() <= hard, "never past the bound once asked");
        }
        assert!(log.has(3999));
        assert!(asked <= 2600 / (hard / 4) + 1, "asked {asked} times");
        // Fewer tokens, a lower bound: kept to at the next look.
        log.push(4000, rate.on_sent(t0, 1), 1);
        log.forget_before(Some(5), 1);
        assert!(log.len() <= MAX_PER_TOKEN + SLACK * 16);
        assert!(log.has(4000));
        // No token refers to any: all go.
        log.forget_before(None, 0);
        assert_eq!(log.len(), 0);
        // A gap (a new life of the record's numbering) starts again.
        log.push(500, rate.on_sent(t0, 1), 1);
        log.push(502, rate.on_sent(t0, 1), 1);
        assert_eq!(log.len(), 1);
        assert!(log.get(500).is_none() && log.has(502));
    }

    /// A datagram keeps when it left and the furthest its TOKEN frames reached; once
    /// forgotten, its exact time and reach are unknown, and the timers judge a token that
    /// still names it from the oldest datagram kept, which left after it (late, never early).
    #[test]
    fn a_datagram_keeps_its_send_time_and_its_furthest_reach() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut rate = DeliveryRate::default();
        let mut log = SentLog::default();
        assert_eq!(log.sent_at(0), None, "nothing sent yet");
        for seq in 0..3u64 {
            log.push(seq, rate.on_sent(t0 + ms(seq * 10), 0), 10);
            log.note_reach(seq, 100);
            log.note_reach(seq, 700 + seq as u32);
            log.note_reach(seq, 300);
        }
        // Only the datagram being written takes a reach.
        log.note_reach(0, 5000);
        log.note_reach(7, 5000);
        assert_eq!(log.reach(0), Some(700));
        assert_eq!(log.reach(2), Some(702));
        assert_eq!(log.sent_exactly_at(1), Some(t0 + ms(10)));
        assert_eq!(log.sent_at(1), Some(t0 + ms(10)));
        assert_eq!((log.sent_at(3), log.reach(3)), (None, None));
        log.forget_before(Some(2), 10);
        assert_eq!((log.sent_exactly_at(1), log.reach(1)), (None, None));
        assert_eq!(log.sent_at(1), Some(t0 + ms(20)), "the oldest kept: later");
        assert_eq!(log.sent_at(2), Some(t0 + ms(20)));
    }
}
