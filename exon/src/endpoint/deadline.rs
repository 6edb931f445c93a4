//! Instants from durations the application gives (a send's deadline, a call's wait, a
//! close's timeout): past what the clock can represent, never, rather than a panic.

use std::time::{Duration, Instant};

/// As far ahead as a saturated instant goes: about 31 years.
const FAR: Duration = Duration::from_secs(1 << 30);

/// When something started now with a deadline `within` from now is given up: `None`
/// (never) for a `within` past what the clock can represent.
pub(crate) fn deadline_in(within: Duration) -> Option<Instant> {
    tokio::time::Instant::now().into_std().checked_add(within)
}

/// `t + d`, or as far after `t` as the clock goes when that overflows.
pub(crate) fn saturating_after<T>(t: T, d: Duration) -> T
where
    T: Copy + CheckedAdd,
{
    t.checked_add_duration(d)
        .or_else(|| t.checked_add_duration(FAR))
        .unwrap_or(t)
}

/// The instants [`saturating_after`] takes: std's and tokio's.
pub(crate) trait CheckedAdd: Sized {
    /// `self + d`, unless it overflows.
    fn checked_add_duration(self, d: Duration) -> Option<Self>;
}

impl CheckedAdd for Instant {
    fn checked_add_duration(self, d: Duration) -> Option<Self> {
        self.checked_add(d)
    }
}

impl CheckedAdd for tokio::time::Instant {
    fn checked_add_duration(self, d: Duration) -> Option<Self> {
        self.checked_add(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_past_the_clock_saturate_or_mean_never() {
        assert!(deadline_in(Duration::MAX).is_none());
        let soon = deadline_in(Duration::from_secs(1)).expect("representable");
        assert!(soon > Instant::now());
        let t = Instant::now();
        let far = saturating_after(t, Duration::MAX);
        assert!(
            far >= t + Duration::from_secs(1 << 29),
            "saturated far ahead"
        );
        assert_eq!(
            saturating_after(t, Duration::from_secs(5)),
            t + Duration::from_secs(5)
        );
        let tt = tokio::time::Instant::now();
        assert!(saturating_after(tt, Duration::MAX) > tt);
    }
}
