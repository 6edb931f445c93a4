//! Pacing: tokens leave at the congestion controller's rate, in bursts of at most a quantum.
//!
//! A token bucket: credit grows at the pacing rate up to the quantum (the larger of two
//! datagrams and what the rate sends in [`BURST_INTERVAL`]) and each token spends its size.
//! When the credit does not cover the next token, [`Pacer::delay`] says when it will; the
//! sender arms that instant as a timer only while it is blocked.
//!
//! Embeddings wake late (tokio's timers have a 1 ms grain, and a loaded machine adds more):
//! a wake-up after the instant asked for may send what the lateness owed on top of the
//! quantum, up to one more quantum, so the average rate holds.

use std::time::{Duration, Instant};

use crate::proto::send::congestion::bytes_in;

/// The longest burst, in time at the pacing rate: coarser than the timers of most
/// embeddings (tokio's are 1 ms), so a late wake-up costs no throughput.
pub(crate) const BURST_INTERVAL: Duration = Duration::from_millis(2);
/// The smallest burst, in datagrams.
const MIN_BURST_DATAGRAMS: u64 = 2;

/// The pacer of one destination.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pacer {
    credit: u64,
    last: Option<Instant>,
    /// The instant the last [`Pacer::delay`] asked to be woken at, while blocked.
    wake: Option<Instant>,
    /// Extra burst allowed for the lateness of the last wake-up, until the next block.
    bonus: u64,
    /// The last quantum computed, with the rate and datagram size it is for (the pacer runs
    /// for every token; the rate changes far less often).
    quantum_of: (u64, u64, u64),
}

impl Pacer {
    /// Burst size at `rate` for datagrams of `mss` bytes.
    fn quantum(&mut self, rate: u64, mss: u64) -> u64 {
        let (r, m, q) = self.quantum_of;
        if (r, m) == (rate, mss) {
            return q;
        }
        let q = bytes_in(rate, BURST_INTERVAL).max(MIN_BURST_DATAGRAMS.saturating_mul(mss));
        self.quantum_of = (rate, mss, q);
        q
    }

    fn refill(&mut self, now: Instant, rate: u64, mss: u64) {
        let quantum = self.quantum(rate, mss);
        if let Some(t) = self.wake.take() {
            self.bonus = bytes_in(rate, now.saturating_duration_since(t)).min(quantum);
        }
        let cap = quantum.saturating_add(self.bonus);
        let add = match self.last {
            None => cap,
            // Tokens of one burst share an instant: nothing accrued since the last.
            Some(t) if t == now => 0,
            Some(t) => bytes_in(rate, now.saturating_duration_since(t)),
        };
        self.credit = self.credit.saturating_add(add).min(cap);
        self.last = Some(now);
    }

    /// `None` if `size` bytes may leave now at `rate` bytes per second (no rate: no pacing);
    /// otherwise the instant they may.
    pub fn delay(
        &mut self,
        now: Instant,
        rate: Option<u64>,
        size: u64,
        mss: u64,
    ) -> Option<Instant> {
        let rate = rate?.max(1);
        // The tokens of one burst share an instant: with nothing changed since the last
        // call (same instant, rate and datagram size, no wake-up in between), `refill`
        // would add nothing, and the credit alone decides.
        if self.admits_from_credit(now, Some(rate), size, mss) {
            return None;
        }
        self.delay_full(now, rate, size, mss)
    }

    /// Whether [`delay`](Self::delay) would let `size` bytes go at once from its credit
    /// alone (its shortcut), asking nothing of the clock: what a frame admitted without
    /// asking the pacer must satisfy.
    pub fn admits_from_credit(&self, now: Instant, rate: Option<u64>, size: u64, mss: u64) -> bool {
        let Some(rate) = rate.map(|r| r.max(1)) else {
            return true;
        };
        let (r, m, q) = self.quantum_of;
        let unchanged = self.last == Some(now) && self.wake.is_none() && (r, m) == (rate, mss);
        unchanged && self.credit >= size.min(q)
    }

    /// [`delay`](Self::delay) without its shortcut.
    fn delay_full(&mut self, now: Instant, rate: u64, size: u64, mss: u64) -> Option<Instant> {
        self.refill(now, rate, mss);
        let need = size.min(self.quantum(rate, mss));
        if self.credit >= need {
            return None;
        }
        let missing = u128::from(need - self.credit);
        let nanos = (missing * 1_000_000_000).div_ceil(u128::from(rate));
        let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        let at = now
            .checked_add(wait)
            .unwrap_or(now + Duration::from_secs(3600));
        self.wake = Some(at);
        self.bonus = 0;
        Some(at)
    }

    /// The credit: bytes that may leave before the next refill.
    #[inline]
    pub fn credit(&self) -> u64 {
        self.credit
    }

    /// `size` bytes left.
    #[inline]
    pub fn on_sent(&mut self, size: u64) {
        self.credit = self.credit.saturating_sub(size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_are_bounded_and_the_rate_is_kept() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        let rate = 1_000_000; // 1 MB/s: 2000 bytes per 2 ms, so the quantum is 2 datagrams.
        let mss = 1000;
        let mut now = t0;
        let mut sent = 0u64;
        let mut burst = 0;
        let mut max_burst = 0;
        while now < t0 + Duration::from_secs(1) {
            match p.delay(now, Some(rate), mss, mss) {
                None => {
                    p.on_sent(mss);
                    sent += mss;
                    burst += 1;
                    max_burst = max_burst.max(burst);
                }
                Some(t) => {
                    assert!(t > now);
                    now = t;
                    burst = 0;
                }
            }
        }
        assert!(max_burst <= 2, "burst {max_burst}");
        assert!((990_000..=1_003_000).contains(&sent), "sent {sent}");
    }

    #[test]
    fn a_late_wake_up_may_send_what_the_lateness_owed_up_to_one_more_quantum() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        let (rate, mss) = (1_000_000, 1000);
        let burst = |p: &mut Pacer, now| {
            let mut n = 0;
            while p.delay(now, Some(rate), mss, mss).is_none() {
                p.on_sent(mss);
                n += 1;
            }
            n
        };
        assert_eq!(burst(&mut p, t0), 2, "a full quantum at first");
        let at = p.delay(t0, Some(rate), mss, mss).unwrap();
        assert_eq!(at, t0 + Duration::from_millis(1));
        // Woken 1 ms late: 2 ms of credit, and the lateness lets all of it go.
        assert_eq!(burst(&mut p, at + Duration::from_millis(1)), 2);
        // Woken 10 ms late: capped at two quanta.
        let at = p
            .delay(at + Duration::from_millis(1), Some(rate), mss, mss)
            .unwrap();
        assert_eq!(burst(&mut p, at + Duration::from_millis(10)), 4);
    }

    proptest::proptest! {
        /// The shortcut for the tokens of one burst answers as the full computation does,
        /// and leaves the pacer in the same state, whatever the instants, rates, datagram
        /// sizes and token sizes.
        #[test]
        fn the_bursts_shortcut_answers_as_the_full_computation(
            steps in proptest::collection::vec(
                (0u64..3, 0usize..3, 0usize..2, 1u64..3000, proptest::bool::ANY),
                1..200,
            ),
        ) {
            let t0 = Instant::now();
            let (mut fast, mut full) = (Pacer::default(), Pacer::default());
            let mut now = t0;
            for (advance_us, rate, mss, size, send) in steps {
                // Mostly the same instant, as the tokens of one burst are.
                now += Duration::from_micros(if advance_us == 2 { 700 } else { 0 });
                let rate = [1_000_000, 50_000_000, 1][rate];
                let mss = [1200, 65_000][mss];
                let a = fast.delay(now, Some(rate), size, mss);
                let b = full.delay_full(now, rate, size, mss);
                proptest::prop_assert_eq!(a, b);
                if a.is_none() && send {
                    fast.on_sent(size);
                    full.on_sent(size);
                }
                proptest::prop_assert_eq!(fast.credit, full.credit);
            }
        }
    }

    #[test]
    fn no_rate_no_pacing_and_extreme_values_are_safe() {
        let t0 = Instant::now();
        let mut p = Pacer::default();
        assert_eq!(p.delay(t0, None, u64::MAX, 1200), None);
        assert!(p
            .delay(t0, Some(1), u64::MAX, u64::MAX)
            .is_none_or(|t| t >= t0));
        let mut p = Pacer::default();
        assert!(p.delay(t0, Some(u64::MAX), u64::MAX, 1200).is_none());
        p.on_sent(u64::MAX);
    }
}
