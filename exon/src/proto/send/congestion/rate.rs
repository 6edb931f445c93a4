//! Delivery-rate estimation (as in draft-cheng-iccrg-delivery-rate-estimation): each token
//! remembers how much had been delivered when it was sent; when it is acknowledged, the
//! bytes delivered in between over the time it took give one rate sample.

use std::time::{Duration, Instant};

use super::rate_of;

/// What a token remembers of the estimator when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendState {
    /// When the token was sent.
    sent_at: Instant,
    /// Bytes delivered over the record's life at that moment.
    delivered: u64,
    /// When the last of those bytes was acknowledged.
    delivered_at: Instant,
    /// When the first token of the current flight was sent.
    first_sent_at: Instant,
    /// Whether the sender was application-limited (or slot-limited) then.
    app_limited: bool,
}

impl SendState {
    /// When the token was sent.
    #[cfg(test)]
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
}

/// The delivery-rate estimator of one sender record.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeliveryRate {
    delivered: u64,
    delivered_at: Option<Instant>,
    first_sent_at: Option<Instant>,
    /// While non-zero: samples are app-limited until `delivered` passes it.
    app_limited_until: u64,
    /// The newest token acknowledged since the last sample.
    newest: Option<SendState>,
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
            self.delivered_at = Some(now);
        }
        SendState {
            sent_at: now,
            delivered: self.delivered,
            delivered_at: self.delivered_at.unwrap_or(now),
            first_sent_at: self.first_sent_at.unwrap_or(now),
            app_limited: self.app_limited_until > 0,
        }
    }

    /// `bytes` of a token sent with snapshot `st` were acknowledged at `now` (`None`: its
    /// snapshot is no longer kept; its bytes count as delivered, and it is no sample).
    pub fn on_acked(&mut self, now: Instant, st: Option<&SendState>, bytes: u64) {
        self.delivered = self.delivered.saturating_add(bytes);
        self.delivered_at = Some(now);
        let Some(st) = st else { return };
        let newer = self
            .newest
            .is_none_or(|n| (st.delivered, st.sent_at) > (n.delivered, n.sent_at));
        if newer {
            self.newest = Some(*st);
            self.first_sent_at = Some(st.sent_at);
        }
    }

    /// The sender has nothing to send (or no slot to send it in) with `in_flight` bytes out:
    /// samples are app-limited until those are delivered.
    pub fn mark_app_limited(&mut self, in_flight: u64) {
        self.app_limited_until = self.delivered.saturating_add(in_flight).max(1);
    }

    /// The sample of the acknowledgements since the last call, if any. A sample over an empty
    /// interval has a rate of 0 (the controller must not use it); one shorter than the
    /// minimum RTT is the controller's to judge (ACK compression can inflate it).
    pub fn take_sample(&mut self) -> Option<RateSample> {
        let st = self.newest.take()?;
        if self.app_limited_until > 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let now = self.delivered_at?;
        let send_elapsed = st.sent_at.saturating_duration_since(st.first_sent_at);
        let ack_elapsed = now.saturating_duration_since(st.delivered_at);
        let interval = send_elapsed.max(ack_elapsed);
        let bytes = self.delivered.saturating_sub(st.delivered);
        Some(RateSample {
            delivery_rate: if interval.is_zero() {
                0
            } else {
                rate_of(bytes, interval)
            },
            app_limited: st.app_limited,
            prior_delivered: st.delivered,
            interval,
        })
    }
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
                last = r.take_sample();
            }
            sent.push_back((now, r.on_sent(now, sent.len() as u64 * 1000)));
        }
        assert_eq!(r.delivered(), 90_000);
        let s = last.unwrap();
        assert!((990_000..=1_010_000).contains(&s.delivery_rate), "{s:?}");
        assert!(!s.app_limited);
        assert!(r.take_sample().is_none(), "one sample per batch");
    }

    #[test]
    fn app_limited_marks_samples_until_the_flight_is_delivered() {
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        r.mark_app_limited(0);
        let st = r.on_sent(t0, 0);
        r.on_acked(t0 + ms(10), Some(&st), 500);
        let s = r.take_sample().unwrap();
        assert!(s.app_limited);
        let st = r.on_sent(t0 + ms(10), 0);
        r.on_acked(t0 + ms(20), Some(&st), 500);
        assert!(!r.take_sample().unwrap().app_limited);
    }

    #[test]
    fn an_empty_interval_gives_no_rate_and_huge_counts_do_not_overflow() {
        let t0 = Instant::now();
        let mut r = DeliveryRate::default();
        let st = r.on_sent(t0, 0);
        r.on_acked(t0, Some(&st), 1);
        assert_eq!(r.take_sample().unwrap().delivery_rate, 0, "zero interval");
        let st = r.on_sent(t0 + ms(1), 0);
        r.on_acked(t0 + ms(2), Some(&st), u64::MAX);
        r.on_acked(t0 + ms(2), Some(&st), u64::MAX);
        assert_eq!(r.delivered(), u64::MAX);
        assert!(r.take_sample().unwrap().delivery_rate > 0);
    }
}
