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
    let extra = (d.as_nanos() * u128::from(jitter)) >> 18;
    d.saturating_add(std::time::Duration::from_nanos(
        u64::try_from(extra).unwrap_or(u64::MAX),
    ))
}
