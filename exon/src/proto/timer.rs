//! The node's timer queue: one armed deadline per half-connection record, lazily cancelled.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use super::NodeId;

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
}
