//! Latency percentiles: an HDR histogram of microseconds.

use std::time::Duration;

/// Latencies in an HDR histogram of microseconds (3 significant digits: memory does not grow
/// with the number of samples, and a quantile is read without sorting).
#[derive(Debug, Clone)]
pub struct Latencies(hdrhistogram::Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        // 1 us to one hour; a longer latency is counted as one hour. (A histogram made with
        // `new` starts tiny, and `saturating_record` does not grow it.)
        Latencies(
            hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .expect("valid bounds and precision"),
        )
    }
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.0.saturating_record(us);
    }

    /// Adds every latency of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.0.add(&other.0);
    }

    /// Number of latencies recorded.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q` quantile (0..=1), in microseconds; NaN if nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.value_at_quantile(q) as f64
    }
}

impl Extend<Duration> for Latencies {
    fn extend<I: IntoIterator<Item = Duration>>(&mut self, iter: I) {
        for d in iter {
            self.record(d);
        }
    }
}

impl FromIterator<Duration> for Latencies {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Self {
        let mut l = Latencies::default();
        l.extend(iter);
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_recorded_latencies() {
        let l: Latencies = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(l.len(), 100);
        assert_eq!(l.quantile_us(0.5), 50.0);
        assert_eq!(l.quantile_us(0.99), 99.0);
        assert!(Latencies::default().quantile_us(0.5).is_nan());
    }
}
