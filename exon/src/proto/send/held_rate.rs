//! What the receiver came to hold of fragmented messages lately: the measured bound of the
//! progress budget (`Rules::progress_measured`).

use std::time::{Duration, Instant};

/// Buckets the window is cut into: the sum over the window is exact to one bucket.
const BUCKETS: usize = 8;

/// Bytes of fragmented messages the receiver newly held (GOT), counted over a sliding
/// window, and since when fragmented messages have been in progress without a break.
///
/// The congestion controller's bandwidth estimate says what the path could move; under
/// heavy reordering or loss most of what moves is sent again, and what the receiver
/// actually comes to hold can be a small fraction of it. Messages in progress are whole
/// before their receiver drops them as stale only if the budget follows the second.
#[derive(Debug, Default)]
pub(crate) struct HeldRate {
    /// Newly held bytes per bucket, the bucket of index `i` at `i % BUCKETS`.
    buckets: [u64; BUCKETS],
    /// Index (since `origin`, in bucket widths) of the newest bucket counted.
    newest: u64,
    /// When counting began: bucket 0 starts there.
    origin: Option<Instant>,
    /// Since when messages have been in progress without a break.
    busy_since: Option<Instant>,
}

impl HeldRate {
    /// The bucket index of `now` for a window of `window`.
    fn index(&mut self, now: Instant, window: Duration) -> u64 {
        let origin = *self.origin.get_or_insert(now);
        let width = (window / BUCKETS as u32).max(Duration::from_millis(1));
        let i = now.saturating_duration_since(origin).as_nanos() / width.as_nanos();
        u64::try_from(i).unwrap_or(u64::MAX)
    }

    /// Moves the window on to bucket `i`, emptying the buckets it passes.
    fn advance(&mut self, i: u64) {
        if i <= self.newest {
            return;
        }
        let gone = (i - self.newest).min(BUCKETS as u64);
        for k in 1..=gone {
            self.buckets[((self.newest + k) % BUCKETS as u64) as usize] = 0;
        }
        self.newest = i;
    }

    /// The receiver newly holds `bytes` of a fragmented message (a GOT showed them).
    pub fn on_held(&mut self, now: Instant, bytes: u64, window: Duration) {
        let i = self.index(now, window);
        self.advance(i);
        let b = &mut self.buckets[(self.newest % BUCKETS as u64) as usize];
        *b = b.saturating_add(bytes);
    }

    /// Bytes newly held over the last `window` (to a bucket).
    pub fn held(&mut self, now: Instant, window: Duration) -> u64 {
        let i = self.index(now, window);
        self.advance(i);
        self.buckets.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// The measured bound on the bytes of messages to have in progress at `now`: twice
    /// what the receiver came to hold over the last `window`, once messages have been in
    /// progress (`busy`) for a whole window without a break; `None` before (no measure yet:
    /// a message started now cannot have waited long).
    pub fn bound(&mut self, now: Instant, window: Duration, busy: bool) -> Option<u64> {
        if !busy {
            self.busy_since = None;
            return None;
        }
        let since = *self.busy_since.get_or_insert(now);
        if now.saturating_duration_since(since) < window {
            return None;
        }
        Some(self.held(now, window).saturating_mul(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(8);

    #[test]
    fn counts_what_was_held_within_the_window_only() {
        let t = Instant::now();
        let mut h = HeldRate::default();
        h.on_held(t, 1000, W);
        h.on_held(t + Duration::from_secs(4), 500, W);
        assert_eq!(h.held(t + Duration::from_secs(5), W), 1500);
        // Nine seconds on, the first bucket has left the window.
        assert_eq!(h.held(t + Duration::from_secs(9), W), 500);
        assert_eq!(h.held(t + Duration::from_secs(100), W), 0);
    }

    #[test]
    fn binds_only_after_a_whole_window_in_progress() {
        let t = Instant::now();
        let mut h = HeldRate::default();
        assert_eq!(h.bound(t, W, true), None);
        h.on_held(t + Duration::from_secs(1), 3000, W);
        assert_eq!(h.bound(t + Duration::from_secs(7), W, true), None);
        assert_eq!(h.bound(t + Duration::from_secs(8), W, true), Some(6000));
        // A break in progress starts the measure again.
        assert_eq!(h.bound(t + Duration::from_secs(9), W, false), None);
        assert_eq!(h.bound(t + Duration::from_secs(10), W, true), None);
    }
}
