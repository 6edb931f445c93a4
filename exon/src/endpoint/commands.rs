//! The driver's handling of commands: sends (admitted to the core, or kept waiting while the
//! destination's queue is full), peers, counters and close.

use std::time::Instant;

use super::driver::{Driver, Unacked};
use super::handle::{Command, Outgoing, Reply};
use super::trace::{debug_in_peer, peer_span};
use super::{DatagramSocket, Error, ReceiptError};
use crate::proto::{Abandoned, MsgId, NodeId, SendError};

impl<S: DatagramSocket> Driver<S> {
    pub(crate) fn on_command(&mut self, c: Command, t: Instant) {
        match c {
            Command::Send(out) => self.on_send(t, out),
            Command::SendBatch { messages, credits } => {
                self.credits_taken += credits;
                for out in messages {
                    self.on_send_credited(t, out);
                }
            }
            Command::AddPeer(id, addr) => {
                peer_span(id).in_scope(|| tracing::debug!(%addr, "peer address set"));
                self.peers.configure(id, addr);
            }
            Command::AddPeerKey(id, key, reply) => {
                let r = self.node.add_peer_key(id, key);
                peer_span(id).in_scope(|| match &r {
                    Ok(()) => tracing::debug!("peer key set"),
                    Err(e) => tracing::warn!(error = %e, "peer key refused"),
                });
                let _ = reply.send(r);
            }
            Command::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            Command::Close { timeout, reply } => {
                self.close_replies.push(reply);
                let deadline = t + timeout;
                match self.closing {
                    Some(d) if d <= deadline => {}
                    _ => self.start_close(deadline),
                }
            }
        }
    }

    fn on_send(&mut self, t: Instant, out: Outgoing) {
        if matches!(out.reply, Reply::None) {
            self.credits_taken += self.shared.credit_weight(out.payload.len()) as usize;
        }
        self.on_send_credited(t, out);
    }

    /// A send whose credit is counted already.
    fn on_send_credited(&mut self, t: Instant, out: Outgoing) {
        if self.closing.is_some() {
            return refuse(out, Error::Closed);
        }
        let to = out.to;
        let queued = self.waiters.get(&to).is_some_and(|w| !w.is_empty());
        if !queued && !self.node.is_full(to, out.payload.len()) {
            return self.admit(t, out);
        }
        if matches!(out.reply, Reply::Try(_)) {
            return refuse(out, SendError::QueueFull(to).into());
        }
        debug_in_peer(to, || {
            tracing::debug!(msg = %out.id, "destination queue full: the send waits");
        });
        self.block(to);
        if let Some(d) = out.deadline {
            // Wakes `expire_deadlines` then, which also gives up waiting sends.
            self.deadlines.push(std::cmp::Reverse((d, NOT_IN_CORE, to)));
        }
        self.waiters.entry(to).or_default().push_back(out);
    }

    /// Hands a send to the core.
    fn admit(&mut self, t: Instant, out: Outgoing) {
        let Outgoing {
            to,
            payload,
            id,
            ack,
            reply,
            deadline,
        } = out;
        if deadline.is_some_and(|d| d <= t) {
            // Given up before it reached the core: certainly not delivered.
            return refuse_parts(reply, ack, None);
        }
        let len = payload.len();
        match self.node.send(t, to, payload) {
            Ok(core_id) => {
                debug_in_peer(to, || tracing::debug!(msg = %id, len, "message queued"));
                if let Some(d) = deadline {
                    self.deadlines.push(std::cmp::Reverse((d, core_id, to)));
                }
                if self.peers.get(to).is_none() {
                    if let Some(suppressed) = self.warnings.no_address.allow(t) {
                        tracing::warn!(
                            id = %self.node.id(),
                            peer = %to,
                            suppressed,
                            "sending to a peer with no known address (add_peer it, or wait \
                             for a datagram from it)"
                        );
                    }
                }
                self.acks.insert(core_id, Unacked { id, to, ack });
                if let Reply::Try(r) = reply {
                    let _ = r.send(Ok(()));
                }
                if self.node.is_full(to, 0) {
                    self.block(to);
                }
            }
            Err(e) => refuse_parts(reply, ack, Some(e.into())),
        }
    }

    /// Publishes that sends to `to` must wait for the driver.
    fn block(&mut self, to: NodeId) {
        if self.blocked.insert(to) {
            self.shared.set_blocked(to, true);
        }
    }

    /// Admits waiting sends while there is room, and unblocks destinations with room and
    /// nobody waiting. Returns whether any send was admitted.
    pub(crate) fn admit_waiters(&mut self, t: Instant) -> bool {
        let mut admitted = false;
        let peers: Vec<NodeId> = self.blocked.iter().copied().collect();
        for to in peers {
            while let Some(len) = self
                .waiters
                .get(&to)
                .and_then(|q| q.front())
                .map(|w| w.payload.len())
            {
                if self.node.is_full(to, len) {
                    break;
                }
                let Some(w) = self.waiters.get_mut(&to).and_then(|q| q.pop_front()) else {
                    break;
                };
                self.admit(t, w);
                admitted = true;
            }
            if self.waiters.get(&to).is_some_and(|q| q.is_empty()) {
                self.waiters.remove(&to);
            }
            if !self.waiters.contains_key(&to) && !self.node.is_full(to, 0) {
                self.blocked.remove(&to);
                self.shared.set_blocked(to, false);
            }
        }
        admitted
    }

    /// Gives up every message whose deadline passed by `t`: the core forgets it and says
    /// whether a copy ever left; sends still waiting for room were never sent.
    pub(crate) fn expire_deadlines(&mut self, t: Instant) {
        while let Some(&std::cmp::Reverse((d, core_id, to))) = self.deadlines.peek() {
            if d > t {
                break;
            }
            self.deadlines.pop();
            if !self.acks.contains_key(core_id) {
                continue; // settled already
            }
            let verdict = match self.node.abandon(t, to, core_id) {
                Some(Abandoned::NotDelivered) => ReceiptError::NotDelivered,
                Some(Abandoned::InDoubt) => ReceiptError::InDoubt,
                None => continue,
            };
            if let Some(u) = self.acks.remove(core_id) {
                u.ack.resolve(Err(verdict));
            }
        }
        if self.deadlines.len() > 2 * self.acks.len() + 1024 {
            let acks = &self.acks;
            self.deadlines.retain(|std::cmp::Reverse((_, id, _))| {
                *id == NOT_IN_CORE || acks.contains_key(*id)
            });
        }
        if !self.waiters.is_empty() {
            for q in self.waiters.values_mut() {
                while let Some(i) = q.iter().position(|w| w.deadline.is_some_and(|d| d <= t)) {
                    if let Some(w) = q.remove(i) {
                        refuse_parts(w.reply, w.ack, None);
                    }
                }
            }
        }
    }

    pub(crate) fn start_close(&mut self, deadline: Instant) {
        tracing::info!(
            id = %self.node.id(),
            outstanding = self.acks.len(),
            "endpoint closing"
        );
        self.closing = Some(deadline);
        self.shared.close();
        for (_, q) in self.waiters.drain() {
            for w in q {
                refuse(w, Error::Closed);
            }
        }
    }
}

/// The id under which a waiting send's deadline is kept (no core message has it).
const NOT_IN_CORE: MsgId = MsgId(u64::MAX);

/// Tells the sender that the message was refused: through its answer if it waits for one,
/// otherwise through its receipt.
fn refuse(out: Outgoing, e: Error) {
    refuse_parts(out.reply, out.ack, Some(e));
}

/// Resolves a message never handed to the core: refused with `e`, or (`None`) given up at
/// its deadline, not delivered.
fn refuse_parts(reply: Reply, ack: super::receipts::Ack, e: Option<Error>) {
    match (reply, e) {
        (Reply::None, Some(e)) => {
            ack.resolve(Err(ReceiptError::Refused(e)));
        }
        (Reply::Try(r), Some(e)) => {
            let _ = r.send(Err(e));
        }
        (reply, None) => {
            if let Reply::Try(r) = reply {
                let _ = r.send(Ok(()));
            }
            ack.resolve(Err(ReceiptError::NotDelivered));
        }
    }
}
