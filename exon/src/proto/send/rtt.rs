//! Round-trip time estimation and the retransmission timeout (RFC 6298 style, with Karn's rule).

use std::time::Duration;

use crate::proto::Config;

/// Smoothed RTT, its variance, and the exponential backoff of one sender record.
///
/// Callers apply Karn's rule: they feed [`Rtt::sample`] only with round trips of frames that
/// were sent once, never with those of retransmitted frames, and take one sample per verdict
/// frame (the round trip of the newest transmission it acknowledges), not one per token.
/// Kept in integer nanoseconds.
#[derive(Debug, Clone)]
pub struct Rtt {
    srtt: Option<u64>,
    rttvar: u64,
    latest: Option<u64>,
    /// The smallest sample ever taken.
    min: Option<u64>,
    backoff: u32,
    /// Bumped by every change of the estimate or the backoff: what the timeouts derive from
    /// it may be kept until it moves.
    version: u64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Rtt {
    /// No sample yet: the timeout starts from [`Config::timers.initial_rtt`](crate::proto::TimerConfig::initial_rtt).
    pub fn new() -> Self {
        Rtt {
            srtt: None,
            rttvar: 0,
            latest: None,
            min: None,
            backoff: 0,
            version: 0,
        }
    }

    /// Smoothed round-trip time, if any sample was taken.
    pub fn smoothed(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// The latest sample, if any.
    pub fn latest(&self) -> Option<Duration> {
        self.latest.map(Duration::from_nanos)
    }

    /// The smallest sample taken: no datagram and its answer make the round trip sooner
    /// (what tells an acknowledgement of a first transmission from one of a retransmission).
    pub fn min(&self) -> Option<Duration> {
        self.min.map(Duration::from_nanos)
    }

    /// The RTT variation (RFC 6298's `RTTVAR`).
    pub fn var(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// Number of consecutive timeouts without a fresh sample.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// Records a round trip of a frame sent exactly once; resets the backoff.
    pub fn sample(&mut self, rtt: Duration) {
        // Round trips beyond an hour are clamped: they only matter as "very long".
        let rtt = nanos(rtt).min(3_600_000_000_000);
        self.latest = Some(rtt);
        self.min = Some(self.min.map_or(rtt, |m| m.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.backoff = 0;
        self.version += 1;
    }

    /// Doubles the timeout for the next attempt (up to [`Config::timers.max_rto`](crate::proto::TimerConfig::max_rto)).
    pub fn on_timeout(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
        self.version += 1;
    }

    /// Changes so far of the estimate or the backoff: [`pto`](Self::pto) and
    /// [`rto`](Self::rto) (for a given configuration) are the same while it is.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The probe timeout (RFC 9002 §6.2): the timeout without the [`Config::timers.min_rto`](crate::proto::TimerConfig::min_rto)
    /// floor (at least the timer granularity), for the first expiry, which only sends a
    /// probe.
    pub fn pto(&self, cfg: &Config) -> Duration {
        let Some(srtt) = self.srtt else {
            return self.rto(cfg);
        };
        let base = srtt
            .saturating_add(
                self.rttvar
                    .saturating_mul(4)
                    .max(nanos(cfg.timers.timer_granularity)),
            )
            .saturating_add(nanos(cfg.acks.delay))
            .clamp(
                nanos(cfg.timers.timer_granularity),
                nanos(cfg.timers.max_rto),
            );
        Duration::from_nanos(
            base.saturating_mul(1 << self.backoff)
                .min(nanos(cfg.timers.max_rto)),
        )
    }

    /// Current retransmission timeout, backoff included, within `[min_rto, max_rto]`: the
    /// smoothed RTT, four variances (at least the timer granularity) and the longest the
    /// receiver may delay its ACK ([`Config::acks.delay`](crate::proto::AckConfig::delay), assumed the same at both ends), as
    /// RFC 9002's probe timeout.
    pub fn rto(&self, cfg: &Config) -> Duration {
        self.rto_and_ceiling(cfg).0
    }

    /// [`rto`](Self::rto) and the ceiling its backoff stops at: `max_backoff`, or the
    /// timeout itself where that is longer, at most `max_rto`. The record's jitter keeps
    /// the timeout at or below this ceiling
    /// (the node's `stretch_within`).
    pub fn rto_and_ceiling(&self, cfg: &Config) -> (Duration, Duration) {
        let base = match self.srtt {
            None => nanos(cfg.timers.initial_rtt).saturating_mul(2),
            Some(srtt) => srtt
                .saturating_add(
                    self.rttvar
                        .saturating_mul(4)
                        .max(nanos(cfg.timers.timer_granularity)),
                )
                .saturating_add(nanos(cfg.acks.delay)),
        };
        let (min, max) = (nanos(cfg.timers.min_rto), nanos(cfg.timers.max_rto));
        let base = base.clamp(min, max);
        // Backed off up to `max_backoff` (or the timeout itself where that is longer).
        let cap = nanos(cfg.timers.max_backoff).max(base).min(max);
        (
            Duration::from_nanos(base.saturating_mul(1 << self.backoff).min(cap)),
            Duration::from_nanos(cap),
        )
    }
}

impl Default for Rtt {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn first_sample_sets_srtt_and_half_variance() {
        let cfg = Config::default();
        let mut r = Rtt::new();
        r.sample(ms(100));
        assert_eq!(r.smoothed(), Some(ms(100)));
        assert_eq!(r.rto(&cfg), ms(100) + ms(200) + cfg.acks.delay);
    }

    #[test]
    fn smoothing_follows_rfc6298_gains() {
        let mut r = Rtt::new();
        r.sample(ms(100));
        r.sample(ms(200));
        // srtt = 7/8*100 + 1/8*200 = 112.5 ms; rttvar = 3/4*50 + 1/4*100 = 62.5 ms
        assert_eq!(r.smoothed(), Some(Duration::from_micros(112_500)));
        assert_eq!(r.rttvar, 62_500_000);
        r.sample(ms(50));
        r.sample(ms(70));
        assert_eq!(r.min(), Some(ms(50)), "the smallest sample");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_a_sample_resets_it() {
        let cfg = {
            let mut c = Config::default();
            c.timers.max_rto = ms(1000);
            c.timers.max_backoff = ms(1000);
            c.acks.delay = Duration::ZERO;
            c
        };
        let mut r = Rtt::new();
        r.sample(ms(40)); // rto = 40 + 80 = 120 ms
        assert_eq!(r.rto(&cfg), ms(120));
        r.on_timeout();
        assert_eq!(r.rto(&cfg), ms(240));
        r.on_timeout();
        r.on_timeout();
        assert_eq!(r.rto(&cfg), ms(960));
        r.on_timeout();
        assert_eq!(r.rto(&cfg), ms(1000), "capped at max_rto");
        for _ in 0..100 {
            r.on_timeout();
        }
        assert_eq!(r.rto(&cfg), ms(1000), "no overflow after many timeouts");
        r.sample(ms(40));
        assert_eq!(r.backoff(), 0);
    }

    /// The backoff stops at `max_backoff`, or at the timeout itself where that is longer
    /// (a long path is never tried again sooner than its own timeout).
    #[test]
    fn backoff_stops_at_max_backoff_or_the_timeout_itself() {
        let mut cfg = Config::default();
        cfg.acks.delay = Duration::ZERO;
        let mut r = Rtt::new();
        r.sample(ms(40)); // rto = 120 ms
        for _ in 0..3 {
            r.on_timeout();
        }
        assert_eq!(r.rto(&cfg), ms(400), "960 ms capped at max_backoff");
        let mut long = Rtt::new();
        long.sample(ms(300)); // rto = 300 + 600 = 900 ms
        long.on_timeout();
        assert_eq!(long.rto(&cfg), ms(900), "not below the timeout itself");
        cfg.timers.max_backoff = cfg.timers.max_rto;
        assert_eq!(long.rto(&cfg), ms(1800), "backed off up to max_rto");
    }

    #[test]
    fn the_probe_timeout_has_no_floor_but_the_granularity() {
        let cfg = {
            let mut c = Config::default();
            c.timers.min_rto = ms(5);
            c.acks.delay = ms(0);
            c
        };
        let mut r = Rtt::new();
        assert_eq!(r.pto(&cfg), r.rto(&cfg), "no sample: the timeout");
        r.sample(Duration::from_micros(20));
        // 20 us + max(4 * 10 us, 1 ms).
        assert_eq!(r.pto(&cfg), Duration::from_micros(1020));
        assert_eq!(r.rto(&cfg), ms(5));
    }

    #[test]
    fn rto_respects_the_floor() {
        let cfg = {
            let mut c = Config::default();
            c.timers.min_rto = ms(5);
            c
        };
        let mut r = Rtt::new();
        r.sample(Duration::from_micros(20));
        assert_eq!(r.rto(&cfg), ms(5));
    }
}
