//! A receiver's flows (channels and streams) that hold messages ahead of their turn and stop
//! moving: their senders are asked whether the run still lives (`Envelope::Query`), and a
//! run its sender says is over (`Envelope::Over`: it restarted without a journal) is
//! drained (a channel's) or broken (a stream's).
//!
//! The time here only decides when to ask; the answer comes from the sender, which knows
//! its runs: a live sender never calls its own run over, and a durable one keeps the runs it
//! resumed. So a run is never drained while its missing numbers may still come.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::envelope::Flow;
use crate::proto::NodeId;

/// A flow as its receiver keys it: the sender and the flow as the receiver names it (a
/// stream's `opener_sent` says whether the sender opened it).
pub(crate) type FlowKey = (NodeId, Flow);

/// Where a flow's order stands: its run and the next number due.
pub(crate) type Standing = (u32, u64);

/// The flows holding messages ahead of their turn, and where each stood at the last look.
#[derive(Debug)]
pub(crate) struct Stalls {
    /// How long a flow may hold messages without its next number coming before its
    /// sender is asked about the run.
    after: Duration,
    /// The next look, while some flow holds messages.
    at: Option<Instant>,
    /// Flows that held messages at the last arrival or look, and where they stood at the
    /// last look (`None`: not looked at yet).
    holding: HashMap<FlowKey, Option<Standing>, foldhash::fast::RandomState>,
}

impl Stalls {
    /// Asks about a run stalled for `after`.
    pub(crate) fn new(after: Duration) -> Stalls {
        Stalls {
            after,
            at: None,
            holding: Default::default(),
        }
    }

    /// Flow `key` holds messages ahead of their turn (an arrival left it so at `now`).
    pub(crate) fn holds(&mut self, now: Instant, key: FlowKey) {
        self.holding.entry(key).or_insert(None);
        if self.at.is_none() {
            self.at = now.checked_add(self.after);
        }
    }

    /// When to look next, if any flow holds messages.
    pub(crate) fn next_look(&self) -> Option<Instant> {
        self.at
    }

    /// Looks at the flows holding messages, if it is time at `now`: `standing` says where
    /// one stands (`None`: it holds nothing now, or is gone). Returns the flows that stood
    /// still since the last look (their senders are to be asked) with where they stand.
    pub(crate) fn look(
        &mut self,
        now: Instant,
        standing: impl Fn(FlowKey) -> Option<Standing>,
    ) -> Vec<(FlowKey, Standing)> {
        if self.at.is_none_or(|at| at > now) {
            return Vec::new();
        }
        let mut stalled = Vec::new();
        self.holding.retain(|&key, last| {
            let Some(now_at) = standing(key) else {
                return false;
            };
            if *last == Some(now_at) {
                stalled.push((key, now_at));
            }
            *last = Some(now_at);
            true
        });
        self.at = if self.holding.is_empty() {
            None
        } else {
            now.checked_add(self.after)
        };
        stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId::from_const(5);

    fn ch(n: u16) -> FlowKey {
        (A, Flow::Channel(n))
    }

    fn number(k: FlowKey) -> u16 {
        match k.1 {
            Flow::Channel(n) => n,
            Flow::Stream { .. } => 0,
        }
    }

    /// A channel is reported only once it stood still over a whole interval; one that
    /// moved, or holds nothing any more, is not; the looks stop when nothing is held.
    #[test]
    fn only_a_channel_that_stood_still_a_whole_interval_is_asked_about() {
        let t0 = Instant::now();
        let every = Duration::from_secs(5);
        let mut s = Stalls::new(every);
        assert_eq!(s.next_look(), None);
        s.holds(t0, ch(1));
        s.holds(t0, ch(2));
        assert_eq!(s.next_look(), Some(t0 + every));
        let standing = |k: FlowKey| match number(k) {
            1 => Some((7, 3)),
            _ => Some((7, 10)),
        };
        assert!(s.look(t0 + every / 2, standing).is_empty(), "not yet");
        assert!(
            s.look(t0 + every, standing).is_empty(),
            "first look: no before"
        );
        // Channel 2 moved on; channel 1 did not.
        let second = |k: FlowKey| match number(k) {
            1 => Some((7, 3)),
            _ => Some((7, 11)),
        };
        assert_eq!(s.look(t0 + 2 * every, second), [(ch(1), (7, 3))]);
        // Channel 2 holds nothing now; channel 1 still stands: asked again.
        let third = |k: FlowKey| (number(k) == 1).then_some((7, 3));
        assert_eq!(s.look(t0 + 3 * every, third), [(ch(1), (7, 3))]);
        assert!(s.look(t0 + 4 * every, |_| None).is_empty());
        assert_eq!(s.next_look(), None, "nothing held: no more looks");
    }
}
