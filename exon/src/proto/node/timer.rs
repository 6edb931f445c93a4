//! The node's timer queue: one armed deadline per half-connection record, lazily cancelled.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::proto::NodeId;

/// Which map a timer's record lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// A sender-side (S) record: retransmission, REQSLOTS re-send, idle discard.
    Sender,
    /// A receiver-side (R) record: the slow probe.
    Receiver,
}

/// A min-heap of `(deadline, record)` entries.
///
/// Each record remembers the deadline it armed. An entry whose deadline no longer matches
/// its record's is stale and skipped; a record pushes a new entry only when it needs to fire
/// *earlier* than its armed one, so the heap holds at most about one entry per record.
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, Side, NodeId)>>,
}

impl TimerQueue {
    /// Arms `want` for a record whose armed deadline is `*armed`.
    pub fn arm(
        &mut self,
        armed: &mut Option<Instant>,
        want: Option<Instant>,
        side: Side,
        peer: NodeId,
    ) {
        if let Some(w) = want {
            if armed.is_none_or(|a| w < a) {
                self.heap.push(Reverse((w, side, peer)));
                *armed = Some(w);
            }
        }
    }

    /// Earliest entry, stale or not.
    pub fn peek(&self) -> Option<(Instant, Side, NodeId)> {
        self.heap.peek().map(|Reverse(e)| *e)
    }

    /// Removes the earliest entry.
    pub fn pop(&mut self) -> Option<(Instant, Side, NodeId)> {
        self.heap.pop().map(|Reverse(e)| e)
    }

    /// Gives memory back once the entries are far fewer than the room for them.
    pub fn shrink(&mut self) {
        if self.heap.capacity() > 4 * self.heap.len() + 256 {
            self.heap.shrink_to(2 * self.heap.len());
        }
    }

    /// Drops the stale entries (those `current` refuses) and gives memory back, once they
    /// outnumber the records (`live`) by far: records evicted before their timers came due
    /// (a flood of forged ids) leave one each, and only time would take them out.
    pub fn compact(&mut self, live: usize, current: impl Fn(Instant, Side, NodeId) -> bool) {
        if self.heap.len() <= 2 * live + 256 {
            return;
        }
        self.heap
            .retain(|Reverse((t, side, peer))| current(*t, *side, *peer));
        if self.heap.capacity() > 4 * self.heap.len() + 256 {
            self.heap.shrink_to(2 * self.heap.len());
        }
    }
}

/// `d` stretched by `jitter / 2^18` (so by less than a quarter): the per-record timer
/// jitter, in integer arithmetic (this runs for every message).
pub fn stretch(d: std::time::Duration, jitter: u16) -> std::time::Duration {
    d.saturating_add(jitter_of(d, jitter))
}

/// `d` jittered without passing `ceiling`: stretched as [`stretch`] while that stays at or
/// below it; a `d` at the ceiling is shortened by the same fraction instead (so timers
/// held at a ceiling still spread), and one just below it goes at the ceiling. A documented
/// ceiling ("tried again at least this often") holds with the jitter.
pub fn stretch_within(
    d: std::time::Duration,
    ceiling: std::time::Duration,
    jitter: u16,
) -> std::time::Duration {
    if d >= ceiling {
        return ceiling.saturating_sub(jitter_of(ceiling, jitter));
    }
    stretch(d, jitter).min(ceiling)
}

/// The jitter's share of `d`: `d * jitter / 2^18`.
fn jitter_of(d: std::time::Duration, jitter: u16) -> std::time::Duration {
    let extra = (d.as_nanos() * u128::from(jitter)) >> 18;
    std::time::Duration::from_nanos(u64::try_from(extra).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{stretch, stretch_within};

    /// Below its ceiling a delay is stretched by the jitter (by less than a quarter); it never
    /// passes the ceiling, and one held at the ceiling still spreads, below it.
    #[test]
    fn jitter_never_takes_a_delay_past_its_ceiling() {
        let ceiling = Duration::from_millis(400);
        for jitter in [0u16, 1, 1000, 30_000, u16::MAX] {
            for ms in [1u64, 100, 320, 399, 400, 800, 2000] {
                let d = Duration::from_millis(ms);
                let j = stretch_within(d, ceiling, jitter);
                assert!(j <= ceiling, "{d:?} with jitter {jitter}: {j:?}");
                if stretch(d, jitter) <= ceiling {
                    assert_eq!(j, stretch(d, jitter), "below the ceiling, as before");
                }
                if d >= ceiling {
                    assert!(j >= ceiling * 3 / 4, "at most a quarter below: {j:?}");
                }
            }
        }
        let held: Vec<_> = [0u16, 20_000, u16::MAX]
            .map(|j| stretch_within(ceiling, ceiling, j))
            .into();
        assert!(held[0] > held[1] && held[1] > held[2], "spread: {held:?}");
    }
}
