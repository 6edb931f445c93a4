//! The request/reply applications ([`Scenario::rpc`](crate::Scenario::rpc)): callers send
//! requests in envelopes and follow each call with a `CallState` (its request's verdict,
//! its reply, its deadline); servers execute each request when it is delivered and answer
//! it a handler's time later with `Node::reply`. The oracle sees every step.

use bytes::Bytes;
use exon::call::{CallState, Ended, Learned};
use exon::envelope::Envelope;
use exon::proto::{DeliveryId, MsgId, SendError};
use rand::Rng;

use super::host::Answer;
use super::ids::node_id;
use super::queue::{nanos, What};
use super::Sim;
use crate::oracle::{answer_of, Execution, ReplyFate, Stable, ViolationKind};
use crate::workload::{is_whole, read_payload, write_payload, Kind, MsgKey, ID_LEN};

/// The stable id of delivery `id`, as the oracle keeps it.
fn stable(id: &DeliveryId) -> Stable {
    let (from, r, s) = id.stable();
    (from.get(), r, s)
}

/// Server `i`'s reply to call `call` of `caller` (its answer drawn from the seed), as
/// message `seq` of `i`, in its envelope.
fn reply_envelope(
    rpc: &crate::RpcModel,
    seed: u64,
    (i, caller, call): (usize, usize, u64),
    seq: u64,
) -> exon::proto::Payload {
    let (outcome, answer) = rpc.answer(seed, i, caller, call);
    let key = MsgKey {
        sender: i as u32,
        seq,
    };
    let mut body = Vec::with_capacity(ID_LEN + answer.len());
    write_payload(&mut body, key, Kind::Reply, ID_LEN);
    body.extend_from_slice(&answer);
    Envelope::reply(call, outcome, body.into())
}

impl Sim {
    /// The RPC application of node `i` answers what it owes, then makes the calls its
    /// quota allows (to random servers).
    pub(super) fn rpc_pump(&mut self, i: usize) {
        self.hosts[i].pump_scheduled = false;
        if self.hosts[i].node.is_none() {
            return; // resumed by the restart
        }
        self.answer(i);
        let (Some(rpc), wl) = (self.sc.rpc.clone(), self.sc.workload.clone()) else {
            return;
        };
        let servers = rpc.servers_for(i, self.hosts.len());
        let now = self.instant();
        let mut sent = 0;
        while self.hosts[i].quota > 0 && sent < wl.burst && !servers.is_empty() {
            if rpc.message_one_in > 0 && self.rng.gen_range(0..rpc.message_one_in) == 0 {
                if !self.plain_message(i) {
                    break;
                }
                sent += 1;
                continue;
            }
            let to = servers[self.rng.gen_range(0..servers.len())];
            let Some(node) = self.hosts[i].node.as_mut() else {
                break;
            };
            if node.pending_to(node_id(to)) >= wl.max_pending {
                break;
            }
            let call = self.oracle.next_call(i);
            let key = MsgKey {
                sender: i as u32,
                seq: self.oracle.next_seq(i),
            };
            let mut body = Vec::with_capacity(wl.len_of(key));
            write_payload(&mut body, key, Kind::Request, wl.len_of(key));
            let Ok(id) = node.send(now, node_id(to), Envelope::request(call, body.into())) else {
                break; // backpressure or the clock: again at the next round
            };
            let key = self.oracle.on_submit(i, to, self.now);
            self.oracle.on_call(i, to, key);
            let h = &mut self.hosts[i];
            h.msg_keys.insert(id.0, key.seq);
            h.calls.insert(id.0, call);
            h.open.insert(call, (CallState::new(), id));
            h.quota -= 1;
            sent += 1;
            let boot = h.restarts;
            // The request is given up at its call's deadline (before the call's own
            // event at that instant: the endpoint's call ends on its request's verdict).
            if let Some(d) = rpc.request_deadline(self.sc.deadline) {
                let what = What::GiveUp {
                    node: i as u32,
                    to: to as u32,
                    id: id.0,
                    boot,
                    seq: u64::MAX,
                };
                self.queue.push(self.now + nanos(d), what);
            }
            let t = self.now + nanos(rpc.call_deadline);
            let what = What::CallDeadline {
                node: i as u32,
                call,
                boot,
            };
            self.queue.push(t, what);
            // The run lasts until every call could end.
            self.last_activity = self.last_activity.max(t);
        }
        self.drain(i);
        self.schedule_pump(i, self.now + nanos(wl.interval));
    }

    /// Node `i` sends a plain message (in an envelope) to a random other node; false if
    /// the node refused it for now.
    pub(super) fn plain_message(&mut self, i: usize) -> bool {
        let n = self.hosts.len();
        let to = (i + self.rng.gen_range(1..n)) % n;
        let wl = &self.sc.workload;
        let key = MsgKey {
            sender: i as u32,
            seq: self.oracle.next_seq(i),
        };
        let mut body = Vec::with_capacity(wl.len_of(key));
        write_payload(&mut body, key, Kind::Data, wl.len_of(key));
        let now = self.instant();
        let Some(node) = self.hosts[i].node.as_mut() else {
            return false;
        };
        if node.pending_to(node_id(to)) >= wl.max_pending {
            return false;
        }
        let Ok(id) = node.send(now, node_id(to), Envelope::message(body.into())) else {
            return false;
        };
        let key = self.oracle.on_submit(i, to, self.now);
        let h = &mut self.hosts[i];
        h.msg_keys.insert(id.0, key.seq);
        h.quota -= 1;
        self.last_activity = self.last_activity.max(self.now);
        if let Some(d) = self.sc.deadline {
            let what = What::GiveUp {
                node: i as u32,
                to: to as u32,
                id: id.0,
                boot: h.restarts,
                seq: u64::MAX,
            };
            self.queue.push(self.now + nanos(d), what);
        }
        true
    }

    /// A delivery to node `i`'s RPC application: a request is executed at once (the
    /// oracle records it) and answered after the handler's time; a reply is taken at once
    /// and may end its call; a plain message is taken at once.
    pub(super) fn rpc_delivered(&mut self, i: usize, from: usize, payload: Bytes, id: DeliveryId) {
        let again = id.is_redelivery();
        let env = match Envelope::open(payload.clone()) {
            Ok(e) => e,
            Err(e) => {
                let what =
                    format!("node{i} got a message from node{from} that is no envelope: {e}");
                self.oracle
                    .violate(ViolationKind::NeverSent, None, self.now, what);
                return;
            }
        };
        let body = match &env {
            Envelope::Message(b)
            | Envelope::Request { body: b, .. }
            | Envelope::Reply { body: b, .. } => b.clone(),
            Envelope::Ordered { .. }
            | Envelope::Gap(_)
            | Envelope::Reset(_)
            | Envelope::Query(_)
            | Envelope::Over(_)
            | Envelope::Window { .. } => {
                let what = format!("node{i} got an ordered message from node{from}, never sent");
                self.oracle
                    .violate(ViolationKind::NeverSent, None, self.now, what);
                return;
            }
        };
        // The application acts on whatever its node hands it, even a delivery the message
        // oracle finds wrong (a duplicate): the RPC oracle judges the calls on their own.
        let checked = self.oracle.on_handover(i, from, &body, again, self.now);
        let Some((key, _)) = checked.or_else(|| read_payload(&body)) else {
            return;
        };
        let now = self.instant();
        match env {
            Envelope::Request { call, .. } => {
                if !is_whole(&body, key, self.sc.workload.len_of(key)) {
                    let what = format!("node{i} delivered {} bytes, not the request", body.len());
                    self.oracle
                        .violate(ViolationKind::Corrupted, Some(key), self.now, what);
                }
                let answer = match &self.sc.rpc {
                    Some(rpc) => rpc.answer(self.sc.seed, i, from, call),
                    None => return,
                };
                let e = Execution {
                    server: i,
                    caller: from,
                    call,
                    stable: stable(&id),
                    redelivery: again,
                };
                self.oracle.on_executed(e, answer, self.now);
                self.hosts[i].inbox.push((id, from, payload));
                if self.sc.take_delay.is_zero() {
                    self.rpc_take(i);
                } else if !self.hosts[i].take_scheduled {
                    self.hosts[i].take_scheduled = true;
                    let t = self.now + nanos(self.sc.take_delay);
                    self.last_activity = self.last_activity.max(t);
                    self.queue.push(t, What::Take(i as u32));
                }
            }
            Envelope::Reply { call, outcome, .. } => {
                self.take_now(i, id, &body, now);
                let fate = self
                    .oracle
                    .on_reply(i, from, call, stable(&id), again, self.now);
                if fate == ReplyFate::Fresh {
                    let end = match self.hosts[i].open.get_mut(&call) {
                        Some((st, _)) => st.learn(Learned::Reply(outcome, answer_of(&body))),
                        None => None,
                    };
                    if let Some(end) = end {
                        self.end_call(i, call, end);
                    }
                }
                self.drain(i);
            }
            Envelope::Message(_) => {
                if !is_whole(&body, key, self.sc.workload.len_of(key)) {
                    let what = format!("node{i} delivered {} bytes, not the message", body.len());
                    self.oracle
                        .violate(ViolationKind::Corrupted, Some(key), self.now, what);
                }
                self.take_now(i, id, &body, now);
                self.drain(i);
            }
            Envelope::Ordered { .. }
            | Envelope::Gap(_)
            | Envelope::Reset(_)
            | Envelope::Query(_)
            | Envelope::Over(_)
            | Envelope::Window { .. } => {}
        }
    }

    /// Node `i` sends once more, as plain messages of their own, the replies told in doubt
    /// (as the endpoint's driver does); those refused for now wait for the next round.
    /// Returns whether any went.
    fn resend_replies(&mut self, i: usize, rpc: &crate::RpcModel) -> bool {
        let now = self.instant();
        let mut sent = false;
        let mut left = Vec::new();
        for (to, call) in std::mem::take(&mut self.hosts[i].resend_replies) {
            let Some(node) = self.hosts[i].node.as_mut() else {
                break;
            };
            let reply = reply_envelope(rpc, self.sc.seed, (i, to, call), self.oracle.next_seq(i));
            match node.send(now, node_id(to), reply) {
                Ok(msg) => {
                    let key = self.oracle.on_submit(i, to, self.now);
                    self.oracle.on_reply_resent(to, call, key);
                    self.hosts[i].msg_keys.insert(msg.0, key.seq);
                    sent = true;
                }
                Err(_) => left.push((to, call)),
            }
        }
        self.hosts[i].resend_replies.extend(left);
        sent
    }

    /// The application of node `i` takes delivery `id` (whose body is `body`) at once.
    fn take_now(&mut self, i: usize, id: DeliveryId, body: &[u8], now: std::time::Instant) {
        if let Some(node) = self.hosts[i].node.as_mut() {
            node.handle_taken(now, id);
        }
        self.oracle.on_taken(i, body, self.now);
    }

    /// The handlers of node `i` finished: every request in its buffer is answered.
    pub(super) fn rpc_take(&mut self, i: usize) {
        self.hosts[i].take_scheduled = false;
        for (id, from, payload) in std::mem::take(&mut self.hosts[i].inbox) {
            if let Ok(Envelope::Request { call, body }) = Envelope::open(payload) {
                self.hosts[i].answers.push(Answer {
                    id,
                    from,
                    call,
                    body,
                });
            }
        }
        self.answer(i);
    }

    /// Node `i` answers the requests it executed with `Node::reply` (or, with
    /// [`RpcModel::replies_together`](crate::RpcModel::replies_together), each run of them
    /// from one caller with `Node::reply_many`); those refused for now (backpressure, the
    /// clock not stored) wait for the next round.
    fn answer(&mut self, i: usize) {
        let Some(rpc) = self.sc.rpc.clone() else {
            return;
        };
        let mut left = Vec::new();
        let mut sent = self.resend_replies(i, &rpc);
        let mut answers = std::mem::take(&mut self.hosts[i].answers)
            .into_iter()
            .peekable();
        while let Some(a) = answers.next() {
            if self.hosts[i].node.is_none() {
                break;
            }
            let from = a.from;
            let mut run = vec![a];
            if rpc.replies_together {
                run.extend(std::iter::from_fn(|| answers.next_if(|b| b.from == from)));
            }
            sent |= self.answer_run(i, &rpc, run, &mut left);
        }
        let retry = !left.is_empty() || !self.hosts[i].resend_replies.is_empty();
        self.hosts[i].answers = left;
        if sent {
            self.last_activity = self.last_activity.max(self.now);
        }
        self.drain(i);
        if retry {
            let t = self.now + nanos(self.sc.workload.interval);
            self.schedule_pump(i, t);
        }
    }

    /// Node `i` answers `run` (requests from one caller): one `Node::reply` for a run of
    /// one, else `Node::reply_many` until what is left is answered or refused. Refused
    /// ones for now go to `left`. Returns whether any reply went.
    fn answer_run(
        &mut self,
        i: usize,
        rpc: &crate::RpcModel,
        run: Vec<Answer>,
        left: &mut Vec<Answer>,
    ) -> bool {
        let now = self.instant();
        let mut sent = false;
        let mut run: std::collections::VecDeque<Answer> = run.into();
        while !run.is_empty() {
            if self.hosts[i].node.is_none() {
                break;
            }
            let ids: Vec<DeliveryId> = run.iter().map(|a| a.id).collect();
            // The oracle numbers the replies as they are sent, in order, from `base`.
            let base = self.oracle.next_seq(i);
            let mut replies: std::collections::VecDeque<exon::proto::Payload> = run
                .iter()
                .zip(base..)
                .map(|(a, seq)| reply_envelope(rpc, self.sc.seed, (i, a.from, a.call), seq))
                .collect();
            let Some(node) = self.hosts[i].node.as_mut() else {
                break;
            };
            let result = if run.len() == 1 {
                let reply = replies.pop_front().expect("one reply");
                node.reply(now, ids[0], reply)
            } else {
                node.reply_many(now, &ids, &mut replies)
            };
            match result {
                Ok(first) => {
                    let answered = run.len() - replies.len();
                    for (k, a) in run.drain(..answered).enumerate() {
                        self.on_answered(i, &a, MsgId(first.0 + k as u64));
                    }
                    sent = true;
                }
                Err(SendError::NotWaiting) => {
                    let a = run.pop_front().expect("a run is never empty");
                    let what = format!(
                        "node{i} could not answer call {} of node{}: not waiting",
                        a.call, a.from
                    );
                    self.oracle
                        .violate(ViolationKind::UnknownCall, None, self.now, what);
                }
                Err(_) => {
                    // Refused for now (the caller's queue full, the clock not stored): so
                    // would every reply to the same caller be, one `reply` each.
                    left.extend(run.drain(..));
                }
            }
        }
        sent
    }

    /// Node `i`'s reply `msg` to request `a` left: the oracle and the host learn it.
    fn on_answered(&mut self, i: usize, a: &Answer, msg: MsgId) {
        let key = self.oracle.on_submit(i, a.from, self.now);
        self.oracle.on_reply_sent(a.from, a.call, key);
        let h = &mut self.hosts[i];
        h.msg_keys.insert(msg.0, key.seq);
        if h.node
            .as_ref()
            .is_some_and(|n| n.rules().resend_doubted_replies)
        {
            h.reply_calls.insert(msg.0, (a.from, a.call, true));
        }
        self.oracle.on_taken(i, &a.body, self.now);
    }

    /// Node `i`'s application learns `l` about its message `id`: if it is the request of an
    /// open call, the call's state learns it (and the call may end).
    pub(super) fn rpc_verdict(&mut self, i: usize, id: MsgId, l: Learned) {
        let h = &mut self.hosts[i];
        let Some(&call) = h.calls.get(&id.0) else {
            return;
        };
        let end = match h.open.get_mut(&call) {
            Some((st, _)) => st.learn(l),
            None => None,
        };
        if let Some(end) = end {
            self.end_call(i, call, end);
        }
    }

    /// Call `call` of node `i` (made in its incarnation `boot`) reached its deadline.
    pub(super) fn call_deadline(&mut self, i: usize, call: u64, boot: u32) {
        let h = &mut self.hosts[i];
        if h.restarts != boot {
            return;
        }
        let end = match h.open.get_mut(&call) {
            Some((st, _)) => st.learn(Learned::Deadline),
            None => None,
        };
        if let Some(end) = end {
            self.end_call(i, call, end);
        }
    }

    /// Call `call` of node `i` ended: the application forgets it, the oracle checks the end.
    fn end_call(&mut self, i: usize, call: u64, end: Ended) {
        let h = &mut self.hosts[i];
        if let Some((_, msg)) = h.open.remove(&call) {
            h.calls.remove(&msg.0);
        }
        self.oracle.on_call_ended(i, call, &end, self.now);
    }
}
