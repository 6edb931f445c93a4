//! Logging helpers of the driver: warnings that the network or the application can repeat
//! at message rate are let through at most once per interval, with the count of those held
//! back, so that a flood of one cause gives a few lines, not one per message.

use std::time::{Duration, Instant};

use crate::proto::NodeId;

/// The span of the debug events about one peer (inside the endpoint's span), so that a
/// subscriber can filter or group a peer's traffic: `endpoint{id=n1}:peer{peer=n2}`.
pub(crate) fn peer_span(peer: NodeId) -> tracing::Span {
    tracing::debug_span!("peer", peer = %peer)
}

/// Runs `log` (debug events only) in `peer`'s span, and only when debug events can be
/// enabled at all: the per-message events then cost one comparison when they are off,
/// instead of a span made and entered for nothing.
#[inline]
pub(crate) fn debug_in_peer(peer: NodeId, log: impl FnOnce()) {
    if tracing::level_enabled!(tracing::Level::DEBUG) {
        peer_span(peer).in_scope(log);
    }
}

/// Shortest time between two lines of one rate-limited warning.
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// One rate-limited warning: lets the first occurrence through, then at most one per
/// interval, each reporting how many were held back since the previous one.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    next: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// A throttle letting one line through per `interval`.
    pub(crate) const fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            next: None,
            suppressed: 0,
        }
    }

    /// Whether to log an occurrence at `now`: `Some(held back since the last line)` if so,
    /// `None` if this one is held back (and counted).
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.next {
            Some(next) if now < next => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.next = Some(now + self.interval);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(WARN_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_held_back() {
        let t = Instant::now();
        let mut th = Throttle::new(Duration::from_secs(10));
        assert_eq!(th.allow(t), Some(0));
        for i in 1..1000 {
            assert_eq!(th.allow(t + Duration::from_millis(i)), None);
        }
        assert_eq!(th.allow(t + Duration::from_secs(10)), Some(999));
        assert_eq!(th.allow(t + Duration::from_secs(11)), None);
        assert_eq!(th.allow(t + Duration::from_secs(30)), Some(1));
    }
}
