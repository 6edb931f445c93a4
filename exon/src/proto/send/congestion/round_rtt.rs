//! The round trips one round of the controller measured: their smallest, and how far the
//! rest usually sit above it (the path's jitter), so that a jittery path is not taken for a
//! queue building.

use std::time::Duration;

/// Weight of a round in the smoothed spread: 1/8.
const SPREAD_SHIFT: u32 = 3;
/// Fewest samples a round's judgement rests on: a round with fewer (a small window, one
/// sample per verdict frame) carries them into the next. On a path that jitters, the
/// smallest of a few samples sits far above the propagation delay by chance alone.
pub(crate) const MIN_SAMPLES: u32 = 16;

/// The RTT samples of the round in progress (with those of earlier rounds, until there are
/// [`MIN_SAMPLES`]), and the spread of recent rounds.
#[derive(Debug, Default, Clone)]
pub(crate) struct RoundRtt {
    /// The smallest sample of the round in progress.
    min: Option<Duration>,
    /// The sum (nanoseconds) and number of its samples.
    sum: u128,
    count: u32,
    /// How far a round's mean sat above its smallest sample, smoothed over about eight
    /// rounds (nanoseconds); `None` before a round with two samples ended.
    spread: Option<u64>,
}

impl RoundRtt {
    /// One sample of the round in progress.
    pub fn sample(&mut self, rtt: Duration) {
        self.min = Some(self.min.map_or(rtt, |m| m.min(rtt)));
        self.sum += rtt.as_nanos();
        self.count = self.count.saturating_add(1);
    }

    /// The smallest sample of the round in progress (and of the rounds before it whose
    /// samples it carries).
    pub fn min(&self) -> Option<Duration> {
        self.min
    }

    /// How far recent rounds' samples sat above their smallest, on average: on a path that
    /// jitters, a round's smallest sample sits that far above the propagation delay
    /// without any queue (`Duration::ZERO` before it is known).
    pub fn spread(&self) -> Duration {
        Duration::from_nanos(self.spread.unwrap_or(0))
    }

    /// The round ends: with [`MIN_SAMPLES`] or more, its spread joins the smoothed one and
    /// the next round starts empty; with fewer, the next round carries them.
    pub fn end_round(&mut self) {
        if self.count < MIN_SAMPLES {
            return;
        }
        if let Some(min) = self.min {
            let mean = self.sum / u128::from(self.count);
            let above = u64::try_from(mean.saturating_sub(min.as_nanos())).unwrap_or(u64::MAX);
            self.spread = Some(match self.spread {
                None => above,
                Some(s) => s - (s >> SPREAD_SHIFT) + (above >> SPREAD_SHIFT),
            });
        }
        self.min = None;
        self.sum = 0;
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_steady_path_has_no_spread_and_a_jittery_one_has_its_own() {
        let mut steady = RoundRtt::default();
        let mut jittery = RoundRtt::default();
        for round in 0..40u64 {
            for i in 0..10u64 {
                // A standing queue: every sample the same.
                steady.sample(ms(30));
                // Jitter: samples from 10 to 46 ms, the smallest near the floor.
                jittery.sample(ms(10 + (i * 7 + round) % 37));
            }
            assert_eq!(steady.min(), Some(ms(30)));
            steady.end_round();
            jittery.end_round();
        }
        assert_eq!(steady.spread(), Duration::ZERO);
        let s = jittery.spread();
        assert!(s > ms(10) && s < ms(25), "{s:?}");
        assert_eq!(jittery.min(), None, "a new round starts empty");
    }

    #[test]
    fn a_round_of_few_samples_carries_them_into_the_next() {
        let mut r = RoundRtt::default();
        r.sample(ms(10));
        r.end_round();
        assert_eq!(r.spread(), Duration::ZERO);
        assert_eq!(r.min(), Some(ms(10)), "carried");
        for _ in 1..MIN_SAMPLES {
            r.sample(ms(30));
        }
        assert_eq!(r.min(), Some(ms(10)));
        r.end_round();
        // Mean (10 + 15 x 30) / 16 = 28.75 ms, 18.75 above the smallest.
        assert_eq!(r.spread(), Duration::from_micros(18_750));
        assert_eq!(r.min(), None);
    }
}
