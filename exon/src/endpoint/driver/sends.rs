//! The driver's side of the handles' sends: admitted to the core, or kept waiting while the
//! destination's queue is full; the messages in the core until their verdict, and their
//! deadlines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use crate::endpoint::api::error::Error;
use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::receipts::{Ack, Acks};
use crate::endpoint::api::shared::Shared;
use crate::endpoint::driver::outgoing::Outgoing;
use crate::endpoint::driver::seqmap::SeqMap;
use crate::endpoint::driver::trace::{debug_in_peer, Throttle};
use crate::endpoint::flows::window_mark::keep_window;
use crate::endpoint::paths::Paths;
use crate::proto::{Abandoned, MsgId, MsgIds, Node, NodeId, Payload, SendError};
use crate::rpc::calls::Calls;

mod together;

pub(crate) use together::Run;

/// A message in the core, not yet acknowledged.
struct Unacked {
    /// The endpoint's id of the message (its receipt's).
    id: MsgId,
    to: NodeId,
    ack: Ack,
    /// Durable mode: told the stable id once the message is stored.
    stored: Option<tokio::sync::oneshot::Sender<MsgId>>,
}

/// The id under which a waiting send's deadline is kept (no core message has it).
const NOT_IN_CORE: MsgId = MsgId(u64::MAX);

/// Flows' notes (resets, questions about runs and their answers, windows) that may wait
/// for room to one destination. A peer's messages draw notes (a question is answered, an
/// unknown stream reset), and a peer that takes nothing keeps its destination full: past
/// this, a new note to it is dropped (counted). Each kind tolerates that: a question is
/// asked again at its asker's next look, and a dropped answer with it; a writer's next
/// chunk on a stream reset here is reset again; a writer that never learned a window keeps
/// to its own, and its receiver holds what comes beyond its window untaken. Only a reset
/// of a stream this endpoint aborted, dropped, leaves its peer's reader to its stream
/// deadline, and only while that peer takes nothing.
pub(crate) const NOTES_WAITING_PER_PEER: usize = 64;
/// The same for all destinations together.
pub(crate) const NOTES_WAITING: usize = 1024;

/// The sends the driver took from the handles, from their arrival to their verdict.
pub(crate) struct Sends {
    shared: Arc<Shared>,
    /// The endpoint's calls: a durable node's requests are held until their call ends.
    calls: Arc<Calls>,
    /// Messages in the core by the core's id.
    acks: SeqMap<Unacked>,
    /// Sends waiting for room in the core, per destination (each such destination is in
    /// `blocked`).
    waiters: HashMap<NodeId, VecDeque<Outgoing>, foldhash::fast::RandomState>,
    /// Deadlines of messages in the core: (deadline, core id, destination), earliest first
    /// (entries of settled messages are skipped, and pruned when they pile up).
    deadlines: BinaryHeap<Reverse<(Instant, MsgId, NodeId)>>,
    /// Destinations whose queue is full, as published in `shared`.
    blocked: HashSet<NodeId, foldhash::fast::RandomState>,
    /// Send credits taken from the channel this turn, returned at the end of the turn.
    credits_taken: usize,
    /// The endpoint is closing: sends are refused.
    closed: bool,
    /// Flows' notes among `waiters`, counted.
    notes: Notes,
    /// Rate limit of the warning about sends to peers with no address.
    no_address: Throttle,
    /// The last destination found with an address, and the paths' count of forgotten
    /// addresses then (`warn_if_no_address`).
    addressed: Option<(NodeId, u64)>,
    /// The buffers of sends handed over together.
    scratch: together::Scratch,
}

impl Sends {
    pub(crate) fn new(shared: Arc<Shared>, calls: Arc<Calls>) -> Sends {
        Sends {
            shared,
            calls,
            acks: SeqMap::default(),
            waiters: HashMap::default(),
            deadlines: BinaryHeap::new(),
            blocked: HashSet::default(),
            credits_taken: 0,
            closed: false,
            notes: Notes::default(),
            no_address: Throttle::default(),
            addressed: None,
            scratch: together::Scratch::default(),
        }
    }

    /// One send from a handle (holding its credit if it did not wait for an answer).
    pub(crate) fn on_send(&mut self, t: Instant, out: Outgoing, node: &mut Node, paths: &Paths) {
        if out.holds_credit() {
            self.credits_taken += self.shared.credit_weight(out.payload_len()) as usize;
        }
        self.on_send_credited(t, out, node, paths);
    }

    /// A batch of sends to one destination, holding `credits` credits: in one call of the
    /// core when they may go together (`together.rs`).
    pub(crate) fn on_batch(
        &mut self,
        t: Instant,
        messages: Vec<Outgoing>,
        credits: usize,
        node: &mut Node,
        paths: &Paths,
    ) {
        self.credits_taken += credits;
        self.on_run(t, &mut VecDeque::from(messages), node, paths);
    }

    /// Warns (rate-limited) of sends to `to` while it has no known address.
    fn warn_if_no_address(&mut self, t: Instant, node: &Node, paths: &Paths, to: NodeId) {
        // The last destination found with an address keeps it until one is forgotten: no
        // look-up per send to it (a server's replies go one by one, mostly to one peer).
        let seen = (to, paths.forgotten());
        if self.addressed == Some(seen) {
            return;
        }
        if paths.address(to).is_some() {
            self.addressed = Some(seen);
            return;
        }
        if let Some(suppressed) = self.no_address.allow(t) {
            tracing::warn!(
                id = %node.id(),
                peer = %to,
                suppressed,
                "sending to a peer with no known address (add_peer it, or wait for a \
                 datagram from it)"
            );
        }
    }

    /// `out` is in the core as message `core_id`: kept until its verdict, its deadline
    /// watched. Always inline: called for each message of a run, and `out` is large.
    #[inline(always)]
    fn keep(&mut self, out: Outgoing, core_id: MsgId) {
        self.keep_with(out, core_id, false);
    }

    /// [`keep`](Self::keep); `again`: a server's reply, sent once more if it is told in
    /// doubt, with the payload the core hands back ([`settle_in_doubt`](Self::settle_in_doubt)).
    #[inline(always)]
    fn keep_with(&mut self, out: Outgoing, core_id: MsgId, again: bool) {
        let (id, to) = (out.id(), out.to());
        if let Some(d) = out.deadline() {
            self.deadlines.push(Reverse((d, core_id, to)));
        }
        let (mut ack, stored) = out.queued_stored();
        if again {
            ack = Ack::Reply(None);
        }
        self.acks.insert(
            core_id,
            Unacked {
                id,
                to,
                ack,
                stored,
            },
        );
    }

    /// Gives back the credits of the sends taken this turn.
    /// Refuses `out` (the journal failed), returning its send credit.
    pub(crate) fn refuse(&mut self, out: Outgoing, e: Error) {
        if out.holds_credit() {
            self.credits_taken += self.shared.credit_weight(out.payload_len()) as usize;
        }
        out.refuse(e);
    }

    /// Refuses a batch (the journal failed), returning its send credits.
    pub(crate) fn refuse_batch(&mut self, messages: Vec<Outgoing>, credits: usize, e: Error) {
        self.credits_taken += credits;
        for out in messages {
            out.refuse(e);
        }
    }

    pub(crate) fn return_credits(&mut self) {
        if self.credits_taken > 0 {
            self.shared.return_credits(self.credits_taken);
            self.credits_taken = 0;
        }
    }

    /// A send whose credit is counted already.
    fn on_send_credited(&mut self, t: Instant, out: Outgoing, node: &mut Node, paths: &Paths) {
        if self.closed {
            return out.refuse(Error::Closed);
        }
        let to = out.to();
        let queued = self.waiters.get(&to).is_some_and(|w| !w.is_empty());
        if !queued && !node.is_full(to, out.payload_len()) {
            self.admit(t, out, node, paths);
            return;
        }
        if out.waits_for_answer() {
            return out.refuse(SendError::QueueFull(to).into());
        }
        if out.is_note() && !self.notes.may_wait(to) {
            self.notes.dropped += 1;
            debug_in_peer(to, || {
                tracing::debug!(msg = %out.id(), "destination queue full, too many notes wait: dropped");
            });
            return;
        }
        debug_in_peer(to, || {
            tracing::debug!(msg = %out.id(), "destination queue full: the send waits");
        });
        self.block(to);
        if let Some(d) = out.deadline() {
            // Wakes `expire_deadlines` then, which also gives up waiting sends.
            self.deadlines.push(Reverse((d, NOT_IN_CORE, to)));
        }
        self.wait(out, false);
    }

    /// `out` waits for room to its destination: at the back of its queue, or at its front
    /// (`first`: it was next already).
    fn wait(&mut self, out: Outgoing, first: bool) {
        self.notes.count_in(&out);
        let q = self.waiters.entry(out.to()).or_default();
        if first {
            q.push_front(out);
        } else {
            q.push_back(out);
        }
    }

    /// Hands a send to the core.
    /// Hands `out` to the core. Returns false when it must wait (a durable node's clock is
    /// not stored yet): it is back at the head of its destination's waiters.
    fn admit(&mut self, t: Instant, mut out: Outgoing, node: &mut Node, paths: &Paths) -> bool {
        if out.deadline().is_some_and(|d| d <= t) {
            // Given up before it reached the core: certainly not delivered.
            out.give_up();
            return true;
        }
        let (to, id) = (out.to(), out.id());
        let payload = out.take_payload();
        let len = payload.len();
        // Only a durable node whose clock is not stored ahead of it may refuse for want of a
        // stored clock (`ClockNotStored`: its clock has reached the stored high-water
        // mark), and the message then waits with its payload and mark: kept for that case
        // alone (a clone of a payload made from a `Vec` allocates, as does a mark's).
        let may_wait = node.is_durable() && node.clock() >= node.clock_high_water();
        let kept = may_wait.then(|| payload.clone());
        let mark = out.take_mark().map(|m| keep_window(node, to, m));
        let kept_mark = if may_wait { mark.clone() } else { None };
        // A reply is sent once more if it is told in doubt: its caller restarted and lost
        // the incarnation whose envelope carried it (no call would ever have it otherwise;
        // a second copy is discarded by the caller). The core hands its payload back then.
        let mut again = false;
        let sent = match out.answers() {
            Some(request) => {
                again = node.rules().resend_doubted_replies;
                node.reply(t, request, payload)
            }
            // An ordered flow's message may wait untaken at its receiver (held for its turn,
            // or unread): its arrival is reported before its verdict. A durable flow's
            // keeps its position in its journal record.
            None if out.is_flow() => match mark {
                Some(m) => node.send_marked(t, to, payload, true, m),
                None => node.send_reported(t, to, payload),
            },
            None => match (out.key(), out.call()) {
                (Some(key), _) => node.send_keyed(t, to, key, payload),
                // A request: held in a durable node's journal until its call ends.
                (None, Some(_)) => node.send_held(t, to, payload),
                (None, None) => node.send(t, to, payload),
            },
        };
        match sent {
            Err(SendError::ClockNotStored) => {
                // Durable ids come from the stored clock: at start, and rarely after.
                let Some(payload) = kept else {
                    // Only a durable node refuses so; refuse rather than lose the payload.
                    out.refuse(SendError::ClockNotStored.into());
                    return true;
                };
                out.put_payload(payload);
                out.put_mark(kept_mark);
                self.block(to);
                self.wait(out, true);
                return false;
            }
            Ok(core_id) => {
                debug_in_peer(to, || tracing::debug!(msg = %id, len, "message queued"));
                if let Some(call) = out.call().filter(|_| node.is_durable()) {
                    if !self.calls.hold(call, core_id) {
                        // The call ended meanwhile (its future dropped): nothing to hold for.
                        node.release(core_id);
                    }
                }
                if let Some(want) = out.credit_ahead() {
                    node.ask_credit(to, want);
                }
                self.warn_if_no_address(t, node, paths, to);
                self.keep_with(out, core_id, again);
                if node.is_full(to, 0) {
                    self.block(to);
                }
            }
            Err(e) => out.refuse(e.into()),
        }
        true
    }

    /// Publishes that sends to `to` must wait for the driver.
    fn block(&mut self, to: NodeId) {
        if self.blocked.insert(to) {
            self.shared.set_blocked(to, true);
        }
    }

    /// Admits waiting sends while there is room, and unblocks destinations with room and
    /// nobody waiting. Returns whether any send was admitted.
    pub(crate) fn admit_waiters(&mut self, t: Instant, node: &mut Node, paths: &Paths) -> bool {
        if self.blocked.is_empty() {
            return false;
        }
        let mut admitted = false;
        let peers: Vec<NodeId> = self.blocked.iter().copied().collect();
        for to in peers {
            while let Some(len) = self
                .waiters
                .get(&to)
                .and_then(|q| q.front())
                .map(Outgoing::payload_len)
            {
                if node.is_full(to, len) {
                    break;
                }
                let Some(w) = self.waiters.get_mut(&to).and_then(|q| q.pop_front()) else {
                    break;
                };
                self.notes.count_out(&w);
                if !self.admit(t, w, node, paths) {
                    break;
                }
                admitted = true;
            }
            if self.waiters.get(&to).is_some_and(|q| q.is_empty()) {
                self.waiters.remove(&to);
            }
            if !self.waiters.contains_key(&to) && !node.is_full(to, 0) {
                self.blocked.remove(&to);
                self.shared.set_blocked(to, false);
            }
        }
        admitted
    }

    /// The verdict of the core's message `core_id` came: its receipt resolves. Returns the
    /// endpoint's id of the message, if it was still waiting for one.
    pub(crate) fn settle(
        &mut self,
        core_id: MsgId,
        verdict: Result<(), ReceiptError>,
    ) -> Option<MsgId> {
        let u = self.acks.remove(core_id)?;
        u.ack.resolve(verdict);
        Some(u.id)
    }

    /// The core's message `core_id` was told in doubt: its receipt resolves so, or, a
    /// server's reply sent for the first time, its payload (`handed`, what the core gave
    /// back with the verdict, or the copy kept of a recovered reply) comes back to be sent
    /// again (as a message of its own: a caller that has its call takes the first reply
    /// it gets and discards any other). Returns the endpoint's id of the message, if it
    /// was still waiting for its verdict, and that payload.
    pub(crate) fn settle_in_doubt(
        &mut self,
        core_id: MsgId,
        handed: Option<Box<Payload>>,
    ) -> (Option<MsgId>, Option<Payload>) {
        let Some(u) = self.acks.remove(core_id) else {
            return (None, None);
        };
        match u.ack {
            Ack::Reply(kept) => (Some(u.id), kept.or(handed).map(|p| *p)),
            ack => {
                ack.resolve(Err(ReceiptError::InDoubt));
                (Some(u.id), None)
            }
        }
    }

    /// The core's messages `core_ids` were acknowledged: their receipts resolve, a run of
    /// one batch's messages with one update of the batch. Returns the endpoint's ids of
    /// the first and last message found.
    pub(crate) fn settle_acknowledged(&mut self, core_ids: MsgIds) -> Option<(MsgId, MsgId)> {
        let mut acks = Acks::default();
        let mut found: Option<(MsgId, MsgId)> = None;
        self.acks.remove_run(core_ids, |u| {
            acks.acknowledge(u.ack);
            found = Some((found.map_or(u.id, |(first, _)| first), u.id));
        });
        acks.flush();
        found
    }

    /// The earliest deadline (possibly of a message settled since).
    /// Durable mode: message `core_id` is on stable storage.
    pub(crate) fn on_stored(&mut self, core_id: MsgId) {
        if let Some(tx) = self.acks.get_mut(core_id).and_then(|u| u.stored.take()) {
            let _ = tx.send(core_id);
        }
    }

    /// Durable mode: a message recovered from the journal, whose verdict goes to `ack`.
    pub(crate) fn recovered(&mut self, core_id: MsgId, to: NodeId, ack: Ack) {
        let u = Unacked {
            id: core_id,
            to,
            ack,
            stored: None,
        };
        self.acks.insert(core_id, u);
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((d, _, _))| *d)
    }

    /// Gives up every message whose deadline passed by `t`: the core forgets it and says
    /// whether a copy ever left; sends still waiting for room were never sent.
    pub(crate) fn expire_deadlines(&mut self, t: Instant, node: &mut Node) {
        if self.next_deadline().is_none_or(|d| d > t) {
            return;
        }
        while let Some(&Reverse((d, core_id, to))) = self.deadlines.peek() {
            if d > t {
                break;
            }
            self.deadlines.pop();
            if !self.acks.contains_key(core_id) {
                continue; // settled already
            }
            let verdict = match node.abandon(t, to, core_id) {
                Some(Abandoned::NotDelivered) => ReceiptError::NotDelivered,
                Some(Abandoned::InDoubt) => ReceiptError::InDoubt,
                // Durable mode: the verdict comes as an event once its record is stored.
                Some(Abandoned::Pending) | None => continue,
            };
            self.settle(core_id, Err(verdict));
        }
        if self.deadlines.len() > 2 * self.acks.len() + 1024 {
            let acks = &self.acks;
            self.deadlines
                .retain(|Reverse((_, id, _))| *id == NOT_IN_CORE || acks.contains_key(*id));
        }
        if !self.waiters.is_empty() {
            for q in self.waiters.values_mut() {
                while let Some(i) = q.iter().position(|w| w.deadline().is_some_and(|d| d <= t)) {
                    if let Some(w) = q.remove(i) {
                        self.notes.count_out(&w);
                        w.give_up();
                    }
                }
            }
        }
    }

    /// Whether every message handed to the core has its verdict.
    pub(crate) fn all_settled(&self) -> bool {
        self.acks.is_empty()
    }

    /// Messages in the core without a verdict.
    pub(crate) fn outstanding(&self) -> usize {
        self.acks.len()
    }

    /// The messages without a verdict, by the endpoint's id.
    pub(crate) fn unacknowledged(&self) -> Vec<(NodeId, MsgId)> {
        let mut v: Vec<(NodeId, MsgId)> = self.acks.values().map(|u| (u.to, u.id)).collect();
        v.sort_by_key(|(_, id)| *id);
        v
    }

    /// Refuses every waiting send, and every send from now on.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        for (_, q) in self.waiters.drain() {
            for w in q {
                w.refuse(Error::Closed);
            }
        }
        self.notes = Notes {
            dropped: self.notes.dropped,
            ..Notes::default()
        };
    }

    /// Flows' notes waiting for room now, and dropped so far because too many waited.
    pub(crate) fn notes(&self) -> (usize, u64) {
        (self.notes.all, self.notes.dropped)
    }
}

/// The flows' notes among the waiting sends, counted to bound them (see
/// [`NOTES_WAITING_PER_PEER`]).
#[derive(Default)]
struct Notes {
    /// Per destination (no entry at zero).
    per_peer: HashMap<NodeId, usize, foldhash::fast::RandomState>,
    /// For all destinations.
    all: usize,
    /// Notes dropped because too many waited already.
    dropped: u64,
}

impl Notes {
    /// Whether one more note to `to` may wait.
    fn may_wait(&self, to: NodeId) -> bool {
        self.all < NOTES_WAITING
            && self
                .per_peer
                .get(&to)
                .is_none_or(|n| *n < NOTES_WAITING_PER_PEER)
    }

    /// `out` starts waiting.
    fn count_in(&mut self, out: &Outgoing) {
        if out.is_note() {
            *self.per_peer.entry(out.to()).or_default() += 1;
            self.all += 1;
        }
    }

    /// `out` no longer waits (admitted or given up).
    fn count_out(&mut self, out: &Outgoing) {
        if !out.is_note() {
            return;
        }
        self.all = self.all.saturating_sub(1);
        if let Some(n) = self.per_peer.get_mut(&out.to()) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&out.to());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Payload;

    fn note(to: u64) -> Outgoing {
        Outgoing::note(NodeId::from_const(to), Payload::default(), MsgId(0), None)
    }

    #[test]
    fn notes_wait_up_to_their_caps_per_peer_and_in_all() {
        let mut n = Notes::default();
        let peers = NOTES_WAITING / NOTES_WAITING_PER_PEER;
        for p in 0..peers as u64 {
            for _ in 0..NOTES_WAITING_PER_PEER {
                assert!(n.may_wait(NodeId::from_const(p + 1)));
                n.count_in(&note(p + 1));
            }
            assert!(
                !n.may_wait(NodeId::from_const(p + 1)),
                "peer {p} past its cap"
            );
        }
        // Every peer's cap spent adds up to the cap for all: nobody else may wait.
        assert!(!n.may_wait(NodeId::from_const(peers as u64 + 1)));
        n.count_out(&note(1));
        assert!(n.may_wait(NodeId::from_const(1)));
        assert!(n.may_wait(NodeId::from_const(peers as u64 + 1)));
        assert!(!n.may_wait(NodeId::from_const(2)));
        // A send that is not a note is not counted.
        let plain = Outgoing::ordered(
            NodeId::from_const(2),
            Payload::default(),
            MsgId(0),
            Ack::None,
            None,
        );
        n.count_in(&plain);
        assert_eq!(n.all, NOTES_WAITING - 1);
        for _ in 0..NOTES_WAITING_PER_PEER - 1 {
            n.count_out(&note(1));
        }
        assert!(!n.per_peer.contains_key(&NodeId::from_const(1)));
    }
}
