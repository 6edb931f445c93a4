//! Loss detection from acknowledgements, per destination (RFC 9002 §6.1, adapted).
//!
//! Every datagram that carries tokens to a destination gets a sequence number from its S
//! record, and each token transmission in it takes that number; the record keeps the
//! transmissions in the order they were sent. A token is lost when it is still
//! unacknowledged and either a token sent [`PACKET_THRESHOLD`] datagrams after it was
//! acknowledged, or one sent in a later datagram was and it was sent more than the time
//! threshold (9/8 of the RTT) ago. Counting datagrams, not tokens, keeps a datagram of many
//! small tokens that arrives a little late from being declared lost. Only acknowledgements of tokens sent once advance the
//! largest acknowledged sequence number: an ACK names a slot, not a transmission, so for a
//! token sent twice it is unknown which copy arrived.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Datagrams sent after an unacknowledged token, one of whose tokens was acknowledged, that
/// make it lost.
pub(crate) const PACKET_THRESHOLD: u64 = 3;

/// What loss detection decides about the oldest transmission still tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judgement {
    /// Lost: send it again.
    Lost,
    /// Not lost yet; lost at this instant unless acknowledged first.
    LostAt(Instant),
    /// Nothing sent after it was acknowledged yet.
    Unknown,
}

/// The transmissions of one S record, oldest first, and the largest acknowledged.
#[derive(Debug, Clone, Default)]
pub(crate) struct LossDetector {
    /// `(sequence number, slot)` per transmission, in sending order. Entries of tokens
    /// acknowledged or sent again are skipped when they reach the front.
    order: VecDeque<(u64, u64)>,
    next_seq: u64,
    largest_acked: Option<u64>,
}

impl LossDetector {
    /// Records a transmission of the token in `slot` in the current datagram; returns its
    /// sequence number (the datagram's).
    pub fn on_sent(&mut self, slot: u64) -> u64 {
        let seq = self.next_seq;
        self.order.push_back((seq, slot));
        seq
    }

    /// The sequence number the datagram being written takes.
    pub fn current_seq(&self) -> u64 {
        self.next_seq
    }

    /// The datagram being written is complete: the next tokens go in another one.
    pub fn end_datagram(&mut self) {
        if self.order.back().is_some_and(|e| e.0 == self.next_seq) {
            self.next_seq += 1;
        }
    }

    /// The transmission `seq` of a token sent only once was acknowledged.
    pub fn on_acked(&mut self, seq: u64) {
        if seq <= self.next_seq && self.largest_acked.is_none_or(|l| seq > l) {
            self.largest_acked = Some(seq);
        }
    }

    /// The oldest transmission tracked: `(seq, slot)`.
    pub fn front(&self) -> Option<(u64, u64)> {
        self.order.front().copied()
    }

    /// Stops tracking the oldest transmission.
    pub fn pop_front(&mut self) {
        self.order.pop_front();
    }

    /// Judges transmission `seq`, sent at `sent_at` and still unacknowledged, at `now`, with
    /// the time threshold `delay`.
    pub fn judge(&self, seq: u64, sent_at: Instant, now: Instant, delay: Duration) -> Judgement {
        let Some(largest) = self.largest_acked.filter(|l| *l > seq) else {
            return Judgement::Unknown;
        };
        if largest - seq >= PACKET_THRESHOLD {
            return Judgement::Lost;
        }
        match sent_at.checked_add(delay) {
            Some(at) if at <= now => Judgement::Lost,
            Some(at) => Judgement::LostAt(at),
            None => Judgement::Unknown,
        }
    }

    /// Drops the entries `live` says are stale once they are many more than `tokens` (a
    /// token stuck at the front cannot make the queue grow without bound).
    pub fn compact(&mut self, tokens: usize, mut live: impl FnMut(u64, u64) -> bool) {
        if self.order.len() > 2 * tokens + 64 {
            self.order.retain(|&(seq, slot)| live(seq, slot));
        }
    }

    /// Transmissions tracked.
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        self.order.len()
    }
}

/// The time threshold: 9/8 of the larger of the smoothed and the latest RTT, at least
/// `granularity`.
pub(crate) fn loss_delay(srtt: Duration, latest: Duration, granularity: Duration) -> Duration {
    srtt.max(latest)
        .checked_mul(9)
        .map_or(Duration::MAX, |d| d / 8)
        .max(granularity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn packet_and_time_thresholds() {
        let t0 = Instant::now();
        let mut d = LossDetector::default();
        for slot in 10..16 {
            d.on_sent(slot);
            d.end_datagram();
        }
        // Tokens sharing a datagram share its number.
        d.on_sent(16);
        d.on_sent(17);
        assert_eq!(d.tracked(), 8);
        assert_eq!(d.order.back(), Some(&(6, 17)));
        assert_eq!(d.front(), Some((0, 10)));
        assert_eq!(d.judge(0, t0, t0, ms(10)), Judgement::Unknown);
        d.on_acked(1);
        assert_eq!(d.judge(0, t0, t0, ms(10)), Judgement::LostAt(t0 + ms(10)));
        assert_eq!(d.judge(0, t0, t0 + ms(10), ms(10)), Judgement::Lost);
        d.on_acked(3);
        assert_eq!(
            d.judge(0, t0, t0, ms(10)),
            Judgement::Lost,
            "3 acked after it"
        );
        assert_eq!(d.judge(1, t0, t0, ms(10)), Judgement::LostAt(t0 + ms(10)));
        // Acknowledgements never move the largest backwards, nor past what was sent.
        d.on_acked(2);
        d.on_acked(7);
        d.on_acked(1 << 60);
        assert_eq!(d.judge(0, t0, t0, ms(10)), Judgement::Lost);
        assert_eq!(d.judge(3, t0, t0, ms(10)), Judgement::Unknown);
        d.pop_front();
        assert_eq!(d.front(), Some((1, 11)));
    }

    #[test]
    fn compaction_bounds_the_queue() {
        let mut d = LossDetector::default();
        for slot in 0..1000 {
            d.on_sent(slot);
            d.end_datagram();
            d.compact(1, |_, s| s == 0);
        }
        assert!(d.tracked() <= 2 + 64 + 1);
        assert_eq!(d.front(), Some((0, 0)));
    }

    #[test]
    fn delay_is_nine_eighths_of_the_larger_rtt() {
        assert_eq!(loss_delay(ms(8), ms(16), ms(1)), ms(18));
        assert_eq!(loss_delay(ms(0), ms(0), ms(1)), ms(1));
        assert_eq!(loss_delay(Duration::MAX, ms(0), ms(1)), Duration::MAX);
    }
}
