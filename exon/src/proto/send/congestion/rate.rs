//! Delivery-rate estimation (as in draft-cheng-iccrg-delivery-rate-estimation): each token
//! remembers how much had been delivered when it was sent; when it is acknowledged, the
//! bytes delivered in between over the time it took give one rate sample. The sample is
//! also bounded by the rate the bytes were sent at (the bytes sent over the send interval,
//! not the bytes delivered): bytes sent long before and delivered late, after a reordering
//! delay, would otherwise count as delivered within the interval and inflate the sample
//! past anything the path carried. And it is bounded by the receiver's own receipt
//! interval where the receiver tells its receipt times (RECEIVED): acknowledgements that
//! queue on the way back and arrive bunched (ACK compression) would otherwise make the
//! acknowledgement interval shorter than the time the bytes took to arrive.

use std::time::{Duration, Instant};

use super::rate_of;
use crate::proto::wire::frame::RECEIPT_UNIT_MICROS;

/// What the estimator was when a datagram of tokens (or a fragment) was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendState {
    /// When the datagram was sent.
    sent_at: Instant,
    /// Bytes delivered over the record's life at that moment.
    delivered: u64,
    /// When the last of those bytes was acknowledged.
    delivered_at: Instant,
    /// When the first token of the current flight was sent.
    first_sent_at: Instant,
    /// Whether the sender was application-limited (or slot-limited) then.
    app_limited: bool,
    /// Bytes sent over the record's life before this transmission.
    sent: u64,
    /// Bytes sent over the record's life before the transmission sent at `first_sent_at`.
    first_sent: u64,
    /// The receiver's receipt time (RECEIVED) that came with the acknowledgement at
    /// `delivered_at`, if it came with one.
    delivered_rx: Option<u16>,
}

impl SendState {
    /// When the datagram was sent.
    #[inline]
    pub fn sent_at(&self) -> Instant {
        self.sent_at
    }
}

/// One delivery-rate sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RateSample {
    /// Bytes per second.
    pub delivery_rate: u64,
    /// The sample was taken while the sender did not keep the path busy: it may be below
    /// what the path can carry.
    pub app_limited: bool,
    /// Bytes delivered when the acknowledged token was sent (to count round trips).
    pub prior_delivered: u64,
    /// The interval the sample covers.
    pub interval: Duration,
    /// The rate the interval's bytes were sent at, lost ones included (0: not known).
    pub send_rate: u64,
}

/// The delivery-rate estimator of one sender record.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeliveryRate {
    delivered: u64,
    delivered_at: Option<Instant>,
    first_sent_at: Option<Instant>,
    /// While non-zero: samples are app-limited until `delivered` passes it.
    app_limited_until: u64,
    /// Bytes sent over the record's life ([`count_sent`](Self::count_sent)).
    sent: u64,
    /// `sent` when the transmission sent at `first_sent_at` left.
    first_sent: u64,
    /// The newest token acknowledged since the last sample.
    newest: Option<SendState>,
    /// The receipt time of the datagram whose acknowledgements are being handled (its
    /// RECEIVED frame), if it has one.
    receipt: Option<u16>,
    /// The receipt time that came with the acknowledgement at `delivered_at`.
    delivered_rx: Option<u16>,
}

impl DeliveryRate {
    /// Bytes delivered over the record's life.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// A token is being sent with `in_flight` bytes already in flight: its snapshot.
    pub fn on_sent(&mut self, now: Instant, in_flight: u64) -> SendState {
        if in_flight == 0 || self.first_sent_at.is_none() {
            self.first_sent_at = Some(now);
            self.first_sent = self.sent;
            self.delivered_at = Some(now);
            // Measured from a send, not a receipt: no receipt interval for it.
            self.delivered_rx = None;
        }
        SendState {
            sent_at: now,
            delivered: self.delivered,
            delivered_at: self.delivered_at.unwrap_or(now),
            first_sent_at: self.first_sent_at.unwrap_or(now),
            app_limited: self.app_limited_until > 0,
            sent: self.sent,
            first_sent: self.first_sent,
            delivered_rx: self.delivered_rx,
        }
    }

    /// The datagram whose acknowledgements come next carries the receiver's receipt time
    /// `at` (RECEIVED), or none.
    #[inline]
    pub fn on_receipt_time(&mut self, at: Option<u16>) {
        self.receipt = at;
    }

    /// `bytes` left in a transmission whose snapshot [`on_sent`](Self::on_sent) took.
    #[inline]
    pub fn count_sent(&mut self, bytes: u64) {
        self.sent = self.sent.saturating_add(bytes);
    }

    /// `bytes` of a token sent with snapshot `st` were acknowledged at `now` (`None`: its
    /// snapshot is no longer kept; its bytes count as delivered, and it is no sample).
    pub fn on_acked(&mut self, now: Instant, st: Option<&SendState>, bytes: u64) {
        self.delivered = self.delivered.saturating_add(bytes);
        self.delivered_at = Some(now);
        self.delivered_rx = match (self.receipt, self.delivered_rx) {
            // A datagram's acknowledgements that overtook this one's told a later time: the
            // bytes delivered so far were all received by then.
            (Some(new), Some(old)) if is_before(new, old) => Some(old),
            (new, _) => new,
        };
        let Some(st) = st else { return };
        let newer = self
            .newest
            .is_none_or(|n| (st.delivered, st.sent_at) > (n.delivered, n.sent_at));
        if newer {
            self.newest = Some(*st);
            self.first_sent_at = Some(st.sent_at);
            self.first_sent = st.sent;
        }
    }

    /// The sender has nothing to send (or no slot to send it in) with `in_flight` bytes out:
    /// samples are app-limited until those are delivered.
    pub fn mark_app_limited(&mut self, in_flight: u64) {
        self.app_limited_until = self.delivered.saturating_add(in_flight).max(1);
    }

    /// The sample of the acknowledgements since the last call, if any. A sample over an empty
    /// interval has a rate of 0 (the controller must not use it); one shorter than the
    /// minimum RTT is the controller's to judge (ACK compression can inflate it where the
    /// receiver tells no receipt times). The receipt interval counts for at most `slack`
    /// more than the acknowledgement interval (a smoothed RTT: acknowledgements cannot
    /// bunch up by more than they queue), so that a receiver's restart (its clock starts
    /// again) or a peer's odd times lower one sample at most that much.
    pub fn take_sample(&mut self, slack: Duration) -> Option<RateSample> {
        let st = self.newest.take()?;
        if self.app_limited_until > 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let now = self.delivered_at?;
        let send_elapsed = st.sent_at.saturating_duration_since(st.first_sent_at);
        let ack_elapsed = now.saturating_duration_since(st.delivered_at);
        let rx_elapsed = match (st.delivered_rx, self.delivered_rx) {
            (Some(then), Some(now_rx)) => receipt_interval(then, now_rx),
            _ => Duration::ZERO,
        };
        let rx_elapsed = rx_elapsed.min(ack_elapsed.saturating_add(slack));
        let interval = send_elapsed.max(ack_elapsed).max(rx_elapsed);
        let bytes = self.delivered.saturating_sub(st.delivered);
        let mut rate = if interval.is_zero() {
            0
        } else {
            rate_of(bytes, interval)
        };
        // Never above the rate the interval's bytes were sent at.
        let sent = st.sent.saturating_sub(st.first_sent);
        let mut send_rate = 0;
        if !send_elapsed.is_zero() && sent > 0 {
            send_rate = rate_of(sent, send_elapsed);
            rate = rate.min(send_rate);
        }
        Some(RateSample {
            delivery_rate: rate,
            app_limited: st.app_limited,
            prior_delivered: st.delivered,
            interval,
            send_rate,
        })
    }
}

/// The receiver's time between receipt times `from` and `to` (RECEIVED), at most: one unit
/// less than they differ by, since each is rounded down to its unit; none when `to` is
/// before `from`. Times wrap every 2^16 units (about two seconds) and are read as at most
/// half that apart, so a longer interval reads short or negative and bounds nothing.
fn receipt_interval(from: u16, to: u16) -> Duration {
    if is_before(to, from) {
        return Duration::ZERO;
    }
    // Less than half the range after `from`.
    let units = u64::from(to.wrapping_sub(from).saturating_sub(1));
    Duration::from_micros(units * RECEIPT_UNIT_MICROS)
}

/// Whether receipt time `a` is before `b`, read modulo 2^16 as less than half that apart
/// (exactly half: before).
fn is_before(a: u16, b: u16) -> bool {
    a.wrapping_sub(b) >= 0x8000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_steady_flight_measures_its_rate() {
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        // 1000-byte tokens, one per ms, each acknowledged 10 ms after it was sent.
        let mut sent = std::collections::VecDeque::new();
        let mut last = None;
        for i in 0..100u64 {
            let now = t0 + ms(i);
            while sent.front().is_some_and(|(at, _)| *at + ms(10) <= now) {
                let (at, st) = sent.pop_front().unwrap();
                r.on_acked(at + ms(10), Some(&st), 1000);
                last = r.take_sample(Duration::MAX);
            }
            sent.push_back((now, r.on_sent(now, sent.len() as u64 * 1000)));
            r.count_sent(1000);
        }
        assert_eq!(r.delivered(), 90_000);
        let s = last.unwrap();
        assert!((990_000..=1_010_000).contains(&s.delivery_rate), "{s:?}");
        assert!(!s.app_limited);
        assert!(
            r.take_sample(Duration::MAX).is_none(),
            "one sample per batch"
        );
    }

    /// Reordering as the testbed's emulator makes it: half the tokens held back by 0-20 ms
    /// more than the 10 ms path. Bursts of late and on-time acknowledgements come in
    /// within one interval; bounded by the rate the bytes were sent at, no sample exceeds
    /// it. Without the bound samples reach about twice the rate sent, and the bandwidth
    /// filter keeps the highest.
    #[test]
    fn bytes_delivered_late_do_not_inflate_the_rate() {
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        // (when acknowledged, its snapshot); 1000-byte tokens, one per ms: 1 MB/s.
        let mut acks: Vec<(Instant, SendState)> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut top, mut samples) = (0, 0);
        for i in 0..2000u64 {
            let now = t0 + ms(i);
            acks.sort_by_key(|a| a.0);
            while acks.first().is_some_and(|a| a.0 <= now) {
                let (at, st) = acks.remove(0);
                r.on_acked(at, Some(&st), 1000);
                if let Some(s) = r
                    .take_sample(Duration::MAX)
                    .filter(|s| s.interval >= ms(10))
                {
                    top = top.max(s.delivery_rate);
                    samples += 1;
                }
            }
            let st = r.on_sent(now, acks.len() as u64 * 1000);
            r.count_sent(1000);
            let late = if random() % 2 == 0 {
                random() % 20_000
            } else {
                0
            };
            acks.push((now + ms(10) + Duration::from_micros(late), st));
        }
        assert!(samples > 1500, "{samples} samples");
        assert!(top <= 1_050_000, "a sample of {top} B/s at 1 MB/s sent");
    }

    /// ACK compression: 1000-byte tokens sent at 1.5 MB/s through a 1 MB/s bottleneck,
    /// their acknowledgements back through a queue that fills and drains every 100 ms (50 ms
    /// of delay shrinking to none), so they arrive at up to twice the rate the bytes did.
    /// The receiver's receipt times (RECEIVED) keep every sample at the bottleneck's rate;
    /// without them samples reach the rate the bytes were sent at.
    #[test]
    fn acknowledgements_that_arrive_bunched_do_not_inflate_the_rate() {
        let top = |receipts: bool| {
            let t0 = Instant::now();
            let us = Duration::from_micros;
            let mut r = DeliveryRate::default();
            // (when acknowledged, receipt time in µs, snapshot).
            let mut acks: Vec<(u64, u64, SendState)> = Vec::new();
            let (mut rx, mut top, mut samples) = (0u64, 0, 0);
            for i in 0..3000u64 {
                let sent = i * 667;
                acks.sort_by_key(|a| a.0);
                while acks.first().is_some_and(|a| a.0 <= sent) {
                    let (at, got, st) = acks.remove(0);
                    let unit = (got / RECEIPT_UNIT_MICROS) as u16;
                    r.on_receipt_time(receipts.then_some(unit));
                    r.on_acked(t0 + us(at), Some(&st), 1000);
                    if let Some(s) = r.take_sample(ms(60)).filter(|s| s.interval >= ms(10)) {
                        top = top.max(s.delivery_rate);
                        samples += 1;
                    }
                }
                let st = r.on_sent(t0 + us(sent), acks.len() as u64 * 1000);
                r.count_sent(1000);
                rx = (rx + 1000).max(sent + 5000);
                let extra = 50_000 - (rx % 100_000) / 2;
                acks.push((rx + 5000 + extra, rx, st));
            }
            assert!(samples > 1000, "{samples} samples");
            top
        };
        let (with, without) = (top(true), top(false));
        assert!(
            with <= 1_020_000,
            "{with} B/s through 1 MB/s with receipt times"
        );
        assert!(
            without >= 1_300_000,
            "{without} B/s without: the case is not made"
        );
    }

    /// A receipt time counts one unit less than it differs by (each is rounded down), wraps
    /// (a longer interval bounds nothing), and never counts for more than `slack` beyond the
    /// acknowledgement interval (a receiver that restarted, its times from a new start).
    #[test]
    fn receipt_intervals_are_never_longer_than_the_receiver_took() {
        let unit = Duration::from_micros(RECEIPT_UNIT_MICROS);
        assert_eq!(receipt_interval(5, 5), Duration::ZERO);
        assert_eq!(receipt_interval(5, 6), Duration::ZERO);
        assert_eq!(receipt_interval(5, 15), unit * 9);
        assert_eq!(receipt_interval(u16::MAX, 9), unit * 9);
        assert_eq!(receipt_interval(9, 5), Duration::ZERO, "before: none");
        assert_eq!(
            receipt_interval(0, 0x8000),
            Duration::ZERO,
            "half the range: none"
        );
        assert_eq!(receipt_interval(0, 0x7fff), unit * 0x7ffe);
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        let st = r.on_sent(t0, 0);
        r.on_receipt_time(Some(100));
        r.on_acked(t0 + ms(10), Some(&st), 1000);
        r.take_sample(ms(5));
        let st = r.on_sent(t0 + ms(10), 1000);
        // Receipt times from a receiver's new start: 20 000 units later.
        r.on_receipt_time(Some(20_100));
        r.on_acked(t0 + ms(20), Some(&st), 1000);
        let s = r.take_sample(ms(5)).unwrap();
        assert_eq!(s.interval, ms(15), "{s:?}");
        // An acknowledgement overtaken by a later one (its time before the newest seen)
        // does not move the receipt time back: the next sample spans 1 000 units (1 100
        // if it did).
        r.on_receipt_time(Some(20_000));
        r.on_acked(t0 + ms(21), None, 1000);
        let st = r.on_sent(t0 + ms(21), 1000);
        r.on_receipt_time(Some(21_101));
        r.on_acked(t0 + ms(22), Some(&st), 1000);
        let s = r.take_sample(ms(500)).unwrap();
        assert_eq!(s.interval, unit * 1000, "{s:?}");
    }

    #[test]
    fn app_limited_marks_samples_until_the_flight_is_delivered() {
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        r.mark_app_limited(0);
        let st = r.on_sent(t0, 0);
        r.on_acked(t0 + ms(10), Some(&st), 500);
        let s = r.take_sample(Duration::MAX).unwrap();
        assert!(s.app_limited);
        let st = r.on_sent(t0 + ms(10), 0);
        r.on_acked(t0 + ms(20), Some(&st), 500);
        assert!(!r.take_sample(Duration::MAX).unwrap().app_limited);
    }

    #[test]
    fn an_empty_interval_gives_no_rate_and_huge_counts_do_not_overflow() {
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        let st = r.on_sent(t0, 0);
        r.on_acked(t0, Some(&st), 1);
        assert_eq!(
            r.take_sample(Duration::MAX).unwrap().delivery_rate,
            0,
            "zero interval"
        );
        let st = r.on_sent(t0 + ms(1), 0);
        r.on_acked(t0 + ms(2), Some(&st), u64::MAX);
        r.on_acked(t0 + ms(2), Some(&st), u64::MAX);
        assert_eq!(r.delivered(), u64::MAX);
        assert!(r.take_sample(Duration::MAX).unwrap().delivery_rate > 0);
    }
}
