//! Loss detection from acknowledgements, per destination (RFC 9002 §6.1, with RACK's
//! adaptive reordering window, RFC 8985 §6.2, adapted).
//!
//! Every datagram that carries tokens to a destination gets a sequence number from its S
//! record, and each token transmission in it takes that number; the record keeps the
//! transmissions in the order they were sent. A token is lost when it is still
//! unacknowledged and either a token sent [`PACKET_THRESHOLD`] datagrams after it was
//! acknowledged (until the path is seen to reorder), or one sent in a later datagram was
//! and it was sent more than the time threshold ago (9/8 of the RTT, plus the reordering
//! window once reordering was seen). Counting datagrams, not tokens, keeps a datagram of many
//! small tokens that arrives a little late from being declared lost. Only acknowledgements
//! of tokens sent once advance the largest acknowledged sequence number: an ACK names a
//! slot, not a transmission, so for a token sent twice it is unknown which copy arrived.
//!
//! [`Reordering`] adapts both thresholds to a path that reorders
//! (`Rules::reordering_window`): a token sent once and acknowledged after a token sent in a
//! later datagram was (in an earlier verdict frame) was overtaken, and a loss later found
//! spurious (see `docs/wire.md`, "Loss recovery and reordering") shows the time threshold
//! was too tight.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Datagrams sent after an unacknowledged token, one of whose tokens was acknowledged, that
/// make it lost, until the path is seen to reorder.
pub(crate) const PACKET_THRESHOLD: u64 = 3;

/// The reordering window is at most this many smoothed RTTs. (RACK bounds it by one; the
/// paths this must survive hold datagrams back by twice the RTT, see `BENCHMARKS.md`,
/// "Reordering".)
const MAX_REO_SRTTS: u32 = 4;

/// The most the reordering window grows to, in quarters of the minimum RTT.
const MAX_REO_MULT: u32 = 64;

/// Loss recoveries without a spurious loss after which the reordering window goes back to
/// nothing and the packet threshold to [`PACKET_THRESHOLD`] (RACK's `reo_wnd_persist`).
pub(crate) const REO_PERSIST: u32 = 16;

/// What a destination's path taught about reordering: whether the packet threshold still
/// applies, and the reordering window (RACK's `reo_wnd`, in quarters of the minimum RTT),
/// shared by the detector of TOKENs and that of FRAGs.
///
/// As in RACK (RFC 8985 §6.2), the count of datagrams stops declaring losses once the path
/// was seen to reorder: that count is the reordering in datagrams, which grows with the
/// sending rate (20 ms held back is hundreds of datagrams at 100 Mbit/s), while the
/// reordering the window measures is in time. (Raising the threshold to the distance seen,
/// as Linux's `tcp_reordering` does without RACK, left most spurious losses in place in the
/// simulator: each new largest distance costs a burst of them.)
#[derive(Debug, Clone)]
pub(crate) struct Reordering {
    /// Off (`Rules::reordering_window` switched off), the thresholds stay at 3 datagrams
    /// and 9/8 of the RTT.
    pub adapt: bool,
    /// The path was seen to reorder: only the time threshold declares losses.
    seen: bool,
    /// The window is `mult` quarters of the minimum RTT (0 until reordering is seen)...
    mult: u32,
    /// ...or, if more, the longest a datagram seen overtaken came after the minimum RTT.
    extent: Duration,
    /// Loss recoveries since the last spurious loss.
    clean_recoveries: u32,
    /// When the window last grew (it grows at most once per round trip).
    widened_at: Option<Instant>,
}

impl Default for Reordering {
    fn default() -> Self {
        Reordering {
            adapt: true,
            seen: false,
            mult: 0,
            extent: Duration::ZERO,
            clean_recoveries: 0,
            widened_at: None,
        }
    }
}

impl Reordering {
    /// Datagrams acknowledged after an unacknowledged one that make it lost: 3, or none
    /// (`u64::MAX`) once the path was seen to reorder.
    pub fn packet_threshold(&self) -> u64 {
        if self.seen {
            u64::MAX
        } else {
            PACKET_THRESHOLD
        }
    }

    /// The reordering window added to the time threshold: `mult` quarters of `min_rtt`,
    /// or the longest lateness of a datagram seen overtaken if more, at most
    /// [`MAX_REO_SRTTS`] times `srtt`.
    pub fn window(&self, min_rtt: Duration, srtt: Duration) -> Duration {
        (min_rtt / 4)
            .checked_mul(self.mult)
            .unwrap_or(Duration::MAX)
            .max(self.extent)
            .min(srtt.saturating_mul(MAX_REO_SRTTS))
    }

    /// A transmission sent once was acknowledged after one sent in a later datagram was,
    /// `late` after the minimum RTT: the path reorders. The packet threshold stops applying,
    /// and the time threshold gets a window of at least a quarter of the minimum RTT and
    /// `late`.
    pub fn on_reordered(&mut self, late: Duration) {
        if !self.adapt {
            return;
        }
        self.seen = true;
        self.mult = self.mult.max(1);
        self.extent = self.extent.max(late);
    }

    /// A loss was spurious: the datagram declared lost had arrived. The window grows by a
    /// quarter of the minimum RTT (at most once per `srtt`, RACK's `reo_wnd_mult`).
    pub fn on_spurious(&mut self, now: Instant, srtt: Duration) {
        if !self.adapt {
            return;
        }
        self.on_reordered(Duration::ZERO);
        self.clean_recoveries = 0;
        let due = self
            .widened_at
            .is_none_or(|t| now.saturating_duration_since(t) >= srtt);
        if due {
            self.mult = (self.mult + 1).min(MAX_REO_MULT);
            self.widened_at = Some(now);
        }
    }

    /// A loss recovery began (losses declared of tokens sent after the last one began).
    /// After [`REO_PERSIST`] of them without a spurious loss, the thresholds go back to
    /// where they started.
    pub fn on_recovery(&mut self) {
        self.clean_recoveries += 1;
        if self.clean_recoveries >= REO_PERSIST {
            *self = Reordering {
                adapt: self.adapt,
                ..Reordering::default()
            };
        }
    }
}

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
    /// The largest acknowledged before the verdict frame being handled.
    settled_largest: Option<u64>,
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

    /// The transmission `seq` of a token sent only once was acknowledged. Returns whether
    /// it was overtaken: a verdict frame before this one acknowledged a later datagram
    /// (within one frame, acknowledgements come in slot order, which says nothing of the
    /// order of arrival).
    pub fn on_acked(&mut self, seq: u64) -> bool {
        if seq <= self.next_seq && self.largest_acked.is_none_or(|l| seq > l) {
            self.largest_acked = Some(seq);
        }
        self.settled_largest.is_some_and(|l| l > seq)
    }

    /// The verdict frame being handled is done: what it acknowledged counts as earlier.
    pub fn end_batch(&mut self) {
        self.settled_largest = self.largest_acked;
    }

    /// The oldest transmission tracked: `(seq, slot)`.
    pub fn front(&self) -> Option<(u64, u64)> {
        self.order.front().copied()
    }

    /// Stops tracking the oldest transmission.
    pub fn pop_front(&mut self) {
        self.order.pop_front();
    }

    /// Stops tracking, all at once, the oldest transmissions of tokens in slots below
    /// `first`: the record's lowest token is in `first`, so none of those is a token any
    /// more (settled). Tokens are mostly settled in the order they were sent, so this is
    /// most of what loss detection finds at the front, without a lookup each. Returns how
    /// many went.
    #[inline]
    pub fn drop_settled_below(&mut self, first: u64) -> usize {
        let (a, b) = self.order.as_slices();
        let n = match a.iter().position(|e| e.1 >= first) {
            Some(n) => n,
            None => a.len() + b.iter().position(|e| e.1 >= first).unwrap_or(b.len()),
        };
        if n > 0 {
            self.order.drain(..n);
        }
        n
    }

    /// Judges transmission `seq`, sent at `sent_at` and still unacknowledged, at `now`, with
    /// the time threshold `delay` and the packet threshold `threshold`.
    pub fn judge(
        &self,
        seq: u64,
        sent_at: Instant,
        now: Instant,
        delay: Duration,
        threshold: u64,
    ) -> Judgement {
        let Some(largest) = self.largest_acked.filter(|l| *l > seq) else {
            return Judgement::Unknown;
        };
        if largest - seq >= threshold {
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

/// Whether the first acknowledgement, at `now`, of something declared lost, answers the
/// transmission declared lost: its retransmission had not left (`resent_at` is `None`), or
/// left less than the smallest round trip ever measured (`min_rtt`) before, too recently
/// to have been answered. Either way the loss was spurious. (An acknowledgement that comes
/// later may answer either copy: it proves nothing, and the loss stands.)
pub(crate) fn answers_original(
    now: Instant,
    resent_at: Option<Instant>,
    min_rtt: Option<Duration>,
) -> bool {
    match (resent_at, min_rtt) {
        (None, _) => true,
        (Some(t), Some(m)) => now.saturating_duration_since(t) < m,
        (Some(_), None) => false,
    }
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
        assert_eq!(d.judge(0, t0, t0, ms(10), 3), Judgement::Unknown);
        d.on_acked(1);
        assert_eq!(
            d.judge(0, t0, t0, ms(10), 3),
            Judgement::LostAt(t0 + ms(10))
        );
        assert_eq!(d.judge(0, t0, t0 + ms(10), ms(10), 3), Judgement::Lost);
        d.on_acked(3);
        assert_eq!(
            d.judge(0, t0, t0, ms(10), 3),
            Judgement::Lost,
            "3 acked after it"
        );
        assert_eq!(
            d.judge(1, t0, t0, ms(10), 3),
            Judgement::LostAt(t0 + ms(10))
        );
        // Acknowledgements never move the largest backwards, nor past what was sent.
        d.on_acked(2);
        d.on_acked(7);
        d.on_acked(1 << 60);
        assert_eq!(d.judge(0, t0, t0, ms(10), 3), Judgement::Lost);
        assert_eq!(d.judge(3, t0, t0, ms(10), 3), Judgement::Unknown);
        d.pop_front();
        assert_eq!(d.front(), Some((1, 11)));
    }

    #[test]
    fn reordering_is_learnt_from_out_of_order_acks_and_spurious_losses() {
        let t0 = Instant::now();
        let mut d = LossDetector::default();
        for slot in 0..10 {
            d.on_sent(slot);
            d.end_datagram();
        }
        // Out of order within one verdict frame says nothing of arrival.
        assert!(!d.on_acked(5));
        assert!(!d.on_acked(2));
        d.end_batch();
        // A later frame acknowledging an older datagram: it was overtaken.
        assert!(d.on_acked(3));
        assert!(!d.on_acked(8));
        let mut r = Reordering::default();
        assert_eq!(r.packet_threshold(), PACKET_THRESHOLD);
        assert_eq!(r.window(ms(8), ms(10)), Duration::ZERO);
        r.on_reordered(ms(1));
        assert_eq!(r.packet_threshold(), u64::MAX, "time alone, as RACK");
        assert_eq!(r.window(ms(8), ms(10)), ms(2), "a quarter of the min RTT");
        let mut late = r.clone();
        late.on_reordered(ms(7));
        assert_eq!(late.window(ms(8), ms(10)), ms(7), "or how late it came");
        late.on_reordered(ms(70));
        assert_eq!(late.window(ms(8), ms(10)), ms(40), "at most 4 srtt");
        // Spurious losses widen it by a quarter, at most once per srtt.
        r.on_spurious(t0, ms(10));
        r.on_spurious(t0 + ms(5), ms(10));
        assert_eq!(r.window(ms(8), ms(10)), ms(4));
        r.on_spurious(t0 + ms(10), ms(10));
        assert_eq!(r.window(ms(8), ms(10)), ms(6));
        for i in 0..100 {
            r.on_spurious(t0 + ms(20 + 10 * i), ms(10));
        }
        assert_eq!(r.window(ms(8), ms(10)), ms(40), "at most 4 srtt");
        // Recoveries without a spurious loss: back to the start after 16.
        for _ in 0..REO_PERSIST - 1 {
            r.on_recovery();
        }
        assert_eq!(r.packet_threshold(), u64::MAX);
        r.on_recovery();
        assert_eq!(r.packet_threshold(), PACKET_THRESHOLD);
        assert_eq!(r.window(ms(8), ms(10)), Duration::ZERO);
        // Switched off (`Rules::reordering_window`), nothing moves.
        let mut off = Reordering {
            adapt: false,
            ..Reordering::default()
        };
        off.on_reordered(ms(5));
        off.on_spurious(t0, ms(10));
        assert_eq!(off.packet_threshold(), PACKET_THRESHOLD);
        assert_eq!(off.window(ms(8), ms(10)), Duration::ZERO);
    }

    #[test]
    fn transmissions_of_settled_tokens_go_at_once() {
        let mut d = LossDetector::default();
        for slot in [3, 4, 5, 9, 2, 10] {
            d.on_sent(slot);
        }
        assert_eq!(d.drop_settled_below(3), 0, "slot 3 is still a token");
        assert_eq!(d.drop_settled_below(6), 3);
        assert_eq!(d.front(), Some((0, 9)), "up to the first at or above");
        assert_eq!(d.drop_settled_below(11), 3, "the rest, 2 behind 9 included");
        assert_eq!(d.tracked(), 0);
        // Across the ring's wrap.
        for slot in 0..40 {
            d.on_sent(slot);
            if slot % 3 == 0 {
                d.pop_front();
            }
        }
        let left = d.tracked();
        let below = d.order.iter().take_while(|e| e.1 < 30).count();
        assert_eq!(d.drop_settled_below(30), below);
        assert_eq!(d.tracked(), left - below);
        assert!(d.front().is_some_and(|e| e.1 >= 30));
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
