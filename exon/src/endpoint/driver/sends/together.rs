//! Sends to one destination handed to the core in one call ([`Node::send_many`]): a
//! [`Handle::send_batch`](crate::endpoint::Handle::send_batch), or a run of consecutive
//! [`Handle::send`](crate::endpoint::Handle::send)s the driver gathered from its command
//! channel. Each message keeps what it has when sent alone: its receipt, its deadline, its
//! debug event, and its wait for room when the destination's queue fills in the middle.

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
    /// The run of plain sends gathered from the command mailbox, all to one destination.
    run: Vec<Outgoing>,
    /// Their payloads, as `send_many` takes them.
    payloads: std::collections::VecDeque<crate::proto::Payload>,
    /// Their payloads' lengths (for the debug events, when those can be on).
    lens: Vec<usize>,
}

impl Sends {
    /// Whether the send `out` may join a run handed to the core together: a plain message
    /// (no reply, no ordered flow) from a node without a journal.
    pub(crate) fn may_gather(out: &Outgoing, node: &Node) -> bool {
        out.answers().is_none() && !out.is_flow() && !node.is_durable()
    }

    /// Takes the plain send `out` (see [`may_gather`](Self::may_gather)) into the run being
    /// gathered, after handing over the run gathered so far if it goes elsewhere.
    #[inline]
    pub(crate) fn gather(&mut self, t: Instant, out: Outgoing, node: &mut Node, paths: &Paths) {
        if self.scratch.run.first().is_some_and(|f| f.to() != out.to()) {
            self.flush_run(t, node, paths);
        }
        self.scratch.run.push(out);
    }

    /// Hands over the run gathered: a lone send as any other, several in one call. Called
    /// before any other command is handled, and at the end of the turn's commands.
    pub(crate) fn flush_run(&mut self, t: Instant, node: &mut Node, paths: &Paths) {
        if self.scratch.run.len() <= 1 {
            if let Some(out) = self.scratch.run.pop() {
                self.on_send(t, out, node, paths);
            }
            return;
        }
        let mut run = std::mem::take(&mut self.scratch.run);
        for out in run.iter().filter(|o| o.holds_credit()) {
            self.credits_taken += self.shared.credit_weight(out.payload_len()) as usize;
        }
        self.on_run(t, &mut run, node, paths);
        self.scratch.run = run;
    }

    /// Whether no gathered send waits to be handed over.
    pub(crate) fn run_is_empty(&self) -> bool {
        self.scratch.run.is_empty()
    }

    /// Sends (taken out of `messages`, in order) whose credits are counted already: in one
    /// call of the core when they may go together, else one by one.
    pub(super) fn on_run(
        &mut self,
        t: Instant,
        messages: &mut Vec<Outgoing>,
        node: &mut Node,
        paths: &Paths,
    ) {
        match self.together(messages, node) {
            Some(to) => self.send_together(t, to, messages, node, paths),
            None => {
                for out in messages.drain(..) {
                    self.on_send_credited(t, out, node, paths);
                }
            }
        }
    }

    /// The destination of `messages` if they may go in one call: several plain messages to
    /// one destination nobody waits before, the endpoint open and the node without a
    /// journal.
    fn together(&self, messages: &[Outgoing], node: &Node) -> Option<NodeId> {
        let to = messages.first()?.to();
        let plain = |o: &Outgoing| o.to() == to && o.answers().is_none() && !o.is_flow();
        let ok = !self.closed
            && !node.is_durable()
            && messages.len() > 1
            && messages.iter().all(plain)
            && self.waiters.get(&to).is_none_or(|w| w.is_empty());
        ok.then_some(to)
    }

    /// Hands `messages` to the core in one call (those whose deadline passed are given up
    /// first); those it did not take wait for room, or are refused with their reason.
    fn send_together(
        &mut self,
        t: Instant,
        to: NodeId,
        messages: &mut Vec<Outgoing>,
        node: &mut Node,
        paths: &Paths,
    ) {
        let mut s = std::mem::take(&mut self.scratch);
        if messages
            .iter()
            .any(|o| o.deadline().is_some_and(|d| d <= t))
        {
            // Given up before they reached the core: certainly not delivered.
            for out in messages.extract_if(.., |o| o.deadline().is_some_and(|d| d <= t)) {
                out.give_up();
            }
        }
        // The payloads go to the core; the messages stay where they are until it took
        // them (each moved once, into its entry of the unacknowledged).
        // Their lengths are kept only for the debug events, when those can be on.
        let debug = tracing::level_enabled!(tracing::Level::DEBUG);
        for out in messages.iter_mut() {
            let payload = out.take_payload();
            if debug {
                s.lens.push(payload.len());
            }
            s.payloads.push_back(payload);
        }
        // `send_many` takes from the front and leaves the rest (all of them when it fails).
        let first = node.send_many(t, to, &mut s.payloads);
        let accepted = messages.len() - s.payloads.len();
        if let Ok(first) = first {
            self.warn_if_no_address(t, node, paths, to);
            for (i, out) in messages.drain(..accepted).enumerate() {
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
        for (mut out, payload) in messages.drain(..).zip(s.payloads.drain(..)) {
            out.put_payload(payload);
            self.on_send_credited(t, out, node, paths);
        }
        s.lens.clear();
        self.scratch = s;
    }
}
