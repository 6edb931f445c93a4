//! NewReno in the style of RFC 9002 §7: slow start, congestion avoidance, one halving per
//! round trip with losses (losses of tokens sent before the recovery started are ignored),
//! back to the minimum window after a retransmission timeout. A halving whose losses prove
//! spurious is undone (Eifel, RFC 4015): the window and threshold from before it return.

use std::time::{Duration, Instant};

use super::{rate_of, scale, AckEvent, LossEvent, SpuriousEvent};

/// Initial window, in datagrams.
const INITIAL_WINDOW: u64 = 10;
/// Smallest window, in datagrams.
const MIN_WINDOW: u64 = 2;

/// The NewReno controller of one destination.
#[derive(Debug, Clone)]
pub(crate) struct NewReno {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Bytes acknowledged in congestion avoidance, towards the next `mss` of window.
    acked_ca: u64,
    /// Tokens sent before this instant belong to the recovery period in progress.
    recovery_start: Option<Instant>,
    /// The window and threshold before the last halving, until it is undone or a timeout
    /// makes it final.
    before_cut: Option<(u64, u64)>,
    srtt: Duration,
}

impl NewReno {
    /// Datagrams are `mss` bytes from now on.
    pub fn set_mss(&mut self, mss: u64) {
        self.mss = mss.max(1);
        self.cwnd = self.cwnd.max(MIN_WINDOW * self.mss);
    }

    pub fn new(mss: u64, initial_rtt: Duration) -> Self {
        NewReno {
            mss,
            cwnd: INITIAL_WINDOW * mss,
            ssthresh: u64::MAX,
            acked_ca: 0,
            recovery_start: None,
            before_cut: None,
            srtt: initial_rtt,
        }
    }

    pub fn on_sent(&mut self, _now: Instant, _bytes: u64, _in_flight: u64) {}

    pub fn on_ack(&mut self, ev: &AckEvent) {
        if let Some(s) = ev.srtt {
            self.srtt = s;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd = self.cwnd.saturating_add(ev.acked);
        } else {
            self.acked_ca = self.acked_ca.saturating_add(ev.acked);
            if self.acked_ca >= self.cwnd {
                self.acked_ca -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(self.mss);
            }
        }
    }

    pub fn on_lost(&mut self, ev: &LossEvent) {
        if self.recovery_start.is_some_and(|t| ev.sent_at <= t) {
            return;
        }
        self.recovery_start = Some(ev.now);
        self.before_cut = Some((self.cwnd, self.ssthresh));
        self.cwnd = (self.cwnd / 2).max(MIN_WINDOW * self.mss);
        self.ssthresh = self.cwnd;
        self.acked_ca = 0;
    }

    /// A loss declared in the recovery period in progress was spurious: the halving that
    /// began it is undone (once), and the next loss starts a recovery of its own.
    pub fn on_spurious(&mut self, ev: &SpuriousEvent) {
        let Some(start) = self.recovery_start else {
            return;
        };
        if ev.lost_at < start {
            return;
        }
        if let Some((cwnd, ssthresh)) = self.before_cut.take() {
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = ssthresh;
            self.recovery_start = None;
        }
    }

    pub fn on_rto(&mut self, now: Instant) {
        self.before_cut = None;
        self.recovery_start = Some(now);
        self.ssthresh = (self.cwnd / 2).max(MIN_WINDOW * self.mss);
        self.cwnd = MIN_WINDOW * self.mss;
        self.acked_ca = 0;
    }

    pub fn window(&self) -> u64 {
        self.cwnd
    }

    /// Whether the window doubles each round (slow start).
    pub fn is_growing(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    pub fn pacing_rate(&self) -> Option<u64> {
        Some(scale(rate_of(self.cwnd, self.srtt), 5, 4).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(now: Instant, acked: u64) -> AckEvent {
        AckEvent {
            now,
            acked,
            in_flight: 0,
            rate: None,
            rtt: None,
            srtt: Some(Duration::from_millis(10)),
            delivered: 0,
            reorder: Duration::ZERO,
        }
    }

    #[test]
    fn slow_start_then_one_halving_per_recovery_then_linear_growth() {
        let t0 = Instant::now();
        let mut c = NewReno::new(1000, Duration::from_millis(100));
        assert_eq!(c.window(), 10_000);
        c.on_ack(&ack(t0, 10_000));
        assert_eq!(c.window(), 20_000, "slow start doubles per window");
        let lost = |sent_at| LossEvent {
            now: t0 + Duration::from_millis(20),
            lost: 1000,
            sent_at,
            in_flight: 0,
        };
        c.on_lost(&lost(t0));
        assert_eq!(c.window(), 10_000);
        c.on_lost(&lost(t0 + Duration::from_millis(1)));
        assert_eq!(c.window(), 10_000, "one cut per recovery period");
        c.on_ack(&ack(t0, 10_000));
        assert_eq!(
            c.window(),
            11_000,
            "congestion avoidance: one mss per window"
        );
        // 10 ms srtt: 11 000 bytes per 10 ms, times 1.25.
        assert_eq!(c.pacing_rate(), Some(1_375_000));
        c.on_rto(t0 + Duration::from_secs(1));
        assert_eq!(c.window(), 2000);
    }

    #[test]
    fn a_spurious_loss_undoes_its_halving() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = NewReno::new(1000, ms(100));
        c.on_ack(&ack(t0, 10_000));
        assert_eq!(c.window(), 20_000);
        let lost = |now, sent_at| LossEvent {
            now,
            lost: 1000,
            sent_at,
            in_flight: 0,
        };
        c.on_lost(&lost(t0 + ms(20), t0));
        assert_eq!(c.window(), 10_000);
        // A loss declared before this recovery began undoes nothing.
        c.on_spurious(&SpuriousEvent {
            lost: 1000,
            lost_at: t0 + ms(10),
        });
        assert_eq!(c.window(), 10_000);
        c.on_spurious(&SpuriousEvent {
            lost: 1000,
            lost_at: t0 + ms(20),
        });
        assert_eq!(c.window(), 20_000, "the window before the halving");
        assert_eq!(c.ssthresh, u64::MAX, "and slow start again");
        // Undone once; a later real loss halves again.
        c.on_spurious(&SpuriousEvent {
            lost: 1000,
            lost_at: t0 + ms(20),
        });
        assert_eq!(c.window(), 20_000);
        c.on_lost(&lost(t0 + ms(40), t0 + ms(30)));
        assert_eq!(c.window(), 10_000);
        // A timeout makes the cut final.
        c.on_rto(t0 + ms(50));
        c.on_spurious(&SpuriousEvent {
            lost: 1000,
            lost_at: t0 + ms(50),
        });
        assert_eq!(c.window(), 2000);
    }
}
