//! Sends to one destination handed to the core in one call ([`Node::send_many`]): a
//! [`Handle::send_batch`](crate::endpoint::Handle::send_batch), or a run of consecutive
//! [`Handle::send`](crate::endpoint::Handle::send)s at the front of the driver's command
//! mailbox, handed over from where they wait there; and a server's replies of one turn to
//! one caller ([`Node::reply_many`]). Each message keeps what it has when sent alone: its
//! receipt, its deadline, its debug event, and its wait for room when the destination's
//! queue fills in the middle.

use std::collections::VecDeque;
use std::time::Instant;

use super::Sends;
use crate::endpoint::driver::outgoing::Outgoing;
use crate::endpoint::driver::trace::debug_in_peer;
use crate::endpoint::paths::Paths;
use crate::proto::{MsgId, Node, NodeId};

/// Reused buffers of the sends handed over together, so that a turn allocates nothing once
/// they have grown.
#[derive(Default)]
pub(super) struct Scratch {
    /// Their payloads, as `send_many` takes them.
    payloads: VecDeque<crate::proto::Payload>,
    /// Their payloads' lengths (for the debug events, when those can be on).
    lens: Vec<usize>,
    /// Replies: the requests they answer, as `reply_many` takes them.
    requests: Vec<crate::proto::DeliveryId>,
}

/// A run of sends at the front of a queue of `T`s (the driver's commands, or a batch's
/// messages): how to reach each one's [`Outgoing`] in place, and how to take it out.
pub(crate) trait Run: Sized {
    /// The send this item holds (every item of a run holds one).
    fn send_mut(&mut self) -> Option<&mut Outgoing>;
    /// The send, taken out.
    fn into_send(self) -> Option<Outgoing>;
}

impl Run for Outgoing {
    #[inline]
    fn send_mut(&mut self) -> Option<&mut Outgoing> {
        Some(self)
    }
    #[inline]
    fn into_send(self) -> Option<Outgoing> {
        Some(self)
    }
}

impl Sends {
    /// Hands over the run of plain sends to one destination (no reply, no ordered flow; the
    /// node without a journal) at the front of `queue`, at most `max`, which hold their
    /// credits: a lone one as any other send, several in one call, taken from the queue as
    /// the core takes them (each moves once, into its entry of the unacknowledged).
    /// Returns how many it took: none when the front is no such send. One look at each
    /// send finds the run, its credits and whether a deadline passed in it.
    #[inline]
    pub(crate) fn send_run<T: Run>(
        &mut self,
        t: Instant,
        queue: &mut VecDeque<T>,
        max: usize,
        node: &mut Node,
        paths: &Paths,
    ) -> usize {
        if node.is_durable() {
            return 0;
        }
        let (mut to, mut n, mut credits, mut passed) = (None, 0, 0, false);
        for item in queue.iter_mut().take(max) {
            let Some(out) = item.send_mut() else { break };
            if out.answers().is_some() || out.is_flow() || *to.get_or_insert(out.to()) != out.to() {
                break;
            }
            if out.holds_credit() {
                credits += self.shared.credit_weight(out.payload_len()) as usize;
            }
            passed |= out.deadline().is_some_and(|d| d <= t);
            n += 1;
        }
        match (n, to) {
            (0, _) | (_, None) => return 0,
            (1, _) => {
                if let Some(out) = queue.pop_front().and_then(Run::into_send) {
                    self.on_send(t, out, node, paths);
                }
            }
            (_, Some(to)) => {
                self.credits_taken += credits;
                self.hand_run(t, to, queue, n, passed, node, paths);
            }
        }
        n
    }

    /// The sends of `queue` (a batch's, taken out of it), whose credits are counted
    /// already: in one call of the core when they may go together, else one by one.
    pub(super) fn on_run(
        &mut self,
        t: Instant,
        queue: &mut VecDeque<Outgoing>,
        node: &mut Node,
        paths: &Paths,
    ) {
        let n = queue.len();
        let to = queue.front().map(Outgoing::to).filter(|_| n > 1);
        let plain = |o: &Outgoing, to| o.to() == to && o.answers().is_none() && !o.is_flow();
        let reply = |o: &Outgoing, to| o.to() == to && o.answers().is_some();
        match to {
            Some(to) if queue.iter().all(|o| plain(o, to)) => {
                let passed = queue.iter().any(|o| o.deadline().is_some_and(|d| d <= t));
                self.hand_run(t, to, queue, n, passed, node, paths);
            }
            // A server's replies of one turn, to one caller.
            Some(to) if self.may_go_together(to, node) && queue.iter().all(|o| reply(o, to)) => {
                self.reply_together(t, to, queue, node, paths);
            }
            _ => {
                for out in queue.drain(..) {
                    self.on_send_credited(t, out, node, paths);
                }
            }
        }
    }

    /// Whether sends to `to` may go to the core in one call: the endpoint open, the node
    /// without a journal, nobody waiting for `to` before them.
    #[inline]
    fn may_go_together(&self, to: NodeId, node: &Node) -> bool {
        !self.closed && !node.is_durable() && self.waiters.get(&to).is_none_or(|w| w.is_empty())
    }

    /// The first `n` sends of `queue`, plain messages to `to` holding their credits
    /// (`passed`: a deadline passed among them): in one call when they may go together
    /// (the endpoint open, the node without a journal, nobody waiting for `to` before
    /// them), else one by one.
    #[allow(clippy::too_many_arguments)]
    fn hand_run<T: Run>(
        &mut self,
        t: Instant,
        to: NodeId,
        queue: &mut VecDeque<T>,
        n: usize,
        passed: bool,
        node: &mut Node,
        paths: &Paths,
    ) {
        if !self.may_go_together(to, node) {
            for out in queue.drain(..n).filter_map(Run::into_send) {
                self.on_send_credited(t, out, node, paths);
            }
        } else if passed {
            // Given up before they reached the core: certainly not delivered. The rest go
            // on as a run of their own (rare: taken out of the queue first).
            let mut rest = VecDeque::with_capacity(n);
            for out in queue.drain(..n).filter_map(Run::into_send) {
                if out.deadline().is_some_and(|d| d <= t) {
                    out.give_up();
                } else {
                    rest.push_back(out);
                }
            }
            self.on_run(t, &mut rest, node, paths);
        } else {
            self.send_together(t, to, queue, n, node, paths);
        }
    }

    /// Hands the first `n` sends of `queue` to the core in one call; those it did not take
    /// wait for room, or are refused with their reason.
    fn send_together<T: Run>(
        &mut self,
        t: Instant,
        to: NodeId,
        queue: &mut VecDeque<T>,
        n: usize,
        node: &mut Node,
        paths: &Paths,
    ) {
        let mut s = std::mem::take(&mut self.scratch);
        // The payloads go to the core; the messages stay where they are until it took
        // them. Their lengths are kept only for the debug events, when those can be on.
        let debug = tracing::level_enabled!(tracing::Level::DEBUG);
        for out in queue.range_mut(..n).filter_map(Run::send_mut) {
            let payload = out.take_payload();
            if debug {
                s.lens.push(payload.len());
            }
            s.payloads.push_back(payload);
        }
        // `send_many` takes from the front and leaves the rest (all of them when it fails).
        let first = node.send_many(t, to, &mut s.payloads);
        let accepted = n - s.payloads.len();
        if let Ok(first) = first {
            self.warn_if_no_address(t, node, paths, to);
            let taken = queue.drain(..accepted).filter_map(Run::into_send);
            for (i, out) in taken.enumerate() {
                if let Some(len) = s.lens.get(i) {
                    debug_in_peer(
                        to,
                        || tracing::debug!(msg = %out.id(), len, "message queued"),
                    );
                }
                self.keep(out, MsgId(first.0 + i as u64));
            }
            if node.is_full(to, 0) {
                self.block(to);
            }
        }
        let left = queue.drain(..n - accepted).filter_map(Run::into_send);
        for (mut out, payload) in left.zip(s.payloads.drain(..)) {
            out.put_payload(payload);
            self.on_send_credited(t, out, node, paths);
        }
        s.lens.clear();
        self.scratch = s;
    }

    /// Hands the replies of `queue`, all to `to`, to the core in one call
    /// ([`Node::reply_many`]); each it took is kept as `admit` keeps a reply (to be sent
    /// once more, with the payload the core hands back, if it is told in doubt), and those
    /// it did not take go one by one, each answered, refused or waiting as alone.
    fn reply_together(
        &mut self,
        t: Instant,
        to: NodeId,
        queue: &mut VecDeque<Outgoing>,
        node: &mut Node,
        paths: &Paths,
    ) {
        let mut s = std::mem::take(&mut self.scratch);
        let resend = node.rules().resend_doubted_replies;
        let debug = tracing::level_enabled!(tracing::Level::DEBUG);
        for out in queue.iter_mut() {
            let payload = out.take_payload();
            if debug {
                s.lens.push(payload.len());
            }
            s.requests.extend(out.answers());
            s.payloads.push_back(payload);
        }
        let n = queue.len();
        // `reply_many` takes from the front and leaves the rest (all of them when it fails).
        let first = node.reply_many(t, &s.requests, &mut s.payloads);
        let accepted = n - s.payloads.len();
        if let Ok(first) = first {
            self.warn_if_no_address(t, node, paths, to);
            for (i, out) in queue.drain(..accepted).enumerate() {
                if let Some(len) = s.lens.get(i) {
                    debug_in_peer(
                        to,
                        || tracing::debug!(msg = %out.id(), len, "message queued"),
                    );
                }
                self.keep_with(out, MsgId(first.0 + i as u64), resend);
            }
            if node.is_full(to, 0) {
                self.block(to);
            }
        }
        let left = queue.drain(..);
        for (mut out, payload) in left.zip(s.payloads.drain(..)) {
            out.put_payload(payload);
            self.on_send_credited(t, out, node, paths);
        }
        s.requests.clear();
        s.lens.clear();
        self.scratch = s;
    }
}
