//! The oracle's checks of the request/reply workload: every call's claim (how its caller
//! saw it end) is true of what its server executed, no request is executed twice in effect,
//! no call gets two replies, and an acknowledged request's reply reaches its caller.

use bytes::Bytes;
use exon::call::Ended;
use exon::envelope::Outcome;

use super::{Oracle, ViolationKind};
use crate::workload::MsgKey;

/// A delivery's stable id (`DeliveryId::stable`): sender, receiver incarnation, slot.
pub type Stable = (u64, u64, u64);

/// How a call ended for its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    /// With its reply.
    Reply,
    /// Not executed.
    NotExecuted,
    /// In doubt.
    InDoubt,
    /// Executed, no reply in time.
    NoReply,
    /// Its caller crashed first (its application forgot the call).
    Crashed,
}

/// What the oracle knows of one call.
#[derive(Debug, Clone)]
pub(super) struct Call {
    server: u32,
    /// The request's message.
    key: MsgKey,
    /// Stable ids of the deliveries the server executed (re-runs of one included once).
    executed: Vec<Stable>,
    /// The answer its server gave.
    answer: Option<(Outcome, Vec<u8>)>,
    /// Stable ids of the reply deliveries the caller's application got.
    replies: Vec<Stable>,
    /// The reply messages its server sent.
    reply_keys: Vec<MsgKey>,
    /// Flagged re-runs by a server whose journal was found damaged: each may answer with a
    /// reply of its own (the damage may have cut the record of the reply sent before).
    damaged_reruns: u32,
    /// Replies its server sent once more after the one before was told in doubt (rule
    /// `resend_doubted_replies`): a caller that had the earlier copy discards this one.
    resent: u32,
    ended: Option<CallEnd>,
}

/// One execution of a request by its server's application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// The server.
    pub server: usize,
    /// The caller.
    pub caller: usize,
    /// The caller's id of the call.
    pub call: u64,
    /// The stable id of the request's delivery.
    pub stable: Stable,
    /// Whether the delivery was flagged as a redelivery after a restart of the server.
    pub redelivery: bool,
}

/// What became of a reply that reached its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFate {
    /// The call is open: the reply ends it.
    Fresh,
    /// The call had ended: the reply is discarded.
    Discarded,
    /// A flagged redelivery of a reply the caller got already (its store absorbs it).
    Absorbed,
    /// A violation (recorded): not a reply to any call of this caller, or a second one.
    Refused,
}

/// Counters of the request/reply workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcCounts {
    /// Calls made.
    pub calls: u64,
    /// Calls ended with their reply.
    pub replies: u64,
    /// Of those, replies saying the handler failed.
    pub failed: u64,
    /// Calls ended not executed.
    pub not_executed: u64,
    /// Calls ended in doubt.
    pub in_doubt: u64,
    /// Calls ended executed without their reply.
    pub no_reply: u64,
    /// Calls forgotten by a crash of their caller.
    pub forgotten: u64,
    /// Requests executed (re-runs not counted).
    pub executions: u64,
    /// Flagged re-runs of a request executed before a crash of its server, absorbed.
    pub reruns: u64,
    /// Replies that came after their call had ended.
    pub discarded: u64,
    /// Of those, second replies sent by a re-run at a server whose journal was found
    /// damaged (it lost the record of the reply it sent before): the caller discards them.
    pub damage_replies: u64,
    /// Replies a server sent once more, the one before told in doubt.
    pub resent_replies: u64,
}

/// The calls of every caller, indexed by caller then call id.
#[derive(Debug, Default)]
pub(super) struct Calls {
    calls: Vec<Vec<Call>>,
    counts: RpcCounts,
}

impl Oracle {
    /// Counters of the request/reply workload.
    pub fn rpc_counts(&self) -> RpcCounts {
        self.rpc.counts
    }

    /// The id the next call of `caller` gets.
    pub fn next_call(&self, caller: usize) -> u64 {
        self.rpc.calls.get(caller).map_or(0, |v| v.len() as u64)
    }

    fn call_mut(&mut self, caller: usize, call: u64) -> Option<&mut Call> {
        self.rpc
            .calls
            .get_mut(caller)?
            .get_mut(usize::try_from(call).ok()?)
    }

    /// `caller` made its next call, to `server`, with request message `key`.
    pub fn on_call(&mut self, caller: usize, server: usize, key: MsgKey) -> u64 {
        if self.rpc.calls.len() <= caller {
            self.rpc.calls.resize_with(caller + 1, Vec::new);
        }
        let v = &mut self.rpc.calls[caller];
        v.push(Call {
            server: server as u32,
            key,
            executed: Vec::new(),
            answer: None,
            replies: Vec::new(),
            reply_keys: Vec::new(),
            damaged_reruns: 0,
            resent: 0,
            ended: None,
        });
        self.rpc.counts.calls += 1;
        v.len() as u64 - 1
    }

    /// A server executes a call (see [`Execution`]) and answers `answer`. Returns false
    /// (and a violation) if there is no such call. A flagged re-run of a delivery executed
    /// before is absorbed (the server's store has its effect); any other second execution
    /// is a violation, as is one of a call its caller was told was not executed.
    pub fn on_executed(&mut self, e: Execution, answer: (Outcome, Vec<u8>), now: u64) -> bool {
        let Execution {
            server,
            caller,
            call,
            stable,
            redelivery: flagged,
        } = e;
        let damaged = self.damaged.get(server).copied().unwrap_or(false);
        let Some(c) = self.call_mut(caller, call) else {
            let what = format!("node{server} executed call {call} of node{caller}, never made");
            self.violate(ViolationKind::UnknownCall, None, now, what);
            return false;
        };
        if c.server as usize != server {
            let what = format!(
                "node{server} executed call {call} of node{caller}, made to node{}",
                c.server
            );
            let key = c.key;
            self.violate(ViolationKind::UnknownCall, Some(key), now, what);
            return false;
        }
        let key = c.key;
        if flagged && c.executed.contains(&stable) {
            if damaged {
                c.damaged_reruns += 1;
            }
            self.rpc.counts.reruns += 1;
            return true;
        }
        c.executed.push(stable);
        c.answer.get_or_insert(answer);
        let (times, ended) = (c.executed.len(), c.ended);
        self.rpc.counts.executions += 1;
        if times > 1 {
            let what = format!(
                "node{server} executed call {call} of node{caller} {times} times{}",
                if flagged {
                    " (with another stable id)"
                } else {
                    " (unflagged)"
                }
            );
            self.violate(ViolationKind::ExecutedTwice, Some(key), now, what);
        }
        if ended == Some(CallEnd::NotExecuted) {
            let what =
                format!("node{server} executed call {call} of node{caller}, ended not executed");
            self.violate(
                ViolationKind::ExecutedAfterNotExecuted,
                Some(key),
                now,
                what,
            );
        }
        true
    }

    /// A server sent message `key` as its reply to call `call` of `caller`.
    pub fn on_reply_sent(&mut self, caller: usize, call: u64, key: MsgKey) {
        if let Some(c) = self.call_mut(caller, call) {
            c.reply_keys.push(key);
        }
    }

    /// A server sent message `key` as its reply to call `call` of `caller` once more, the
    /// reply before told in doubt (its caller lost the incarnation that envelope was of).
    pub fn on_reply_resent(&mut self, caller: usize, call: u64, key: MsgKey) {
        if let Some(c) = self.call_mut(caller, call) {
            c.reply_keys.push(key);
            c.resent += 1;
            self.rpc.counts.resent_replies += 1;
        }
    }

    /// The application of `caller` got the reply to its call `call` from `from` (delivery
    /// `stable`, flagged as a redelivery or not).
    pub fn on_reply(
        &mut self,
        caller: usize,
        from: usize,
        call: u64,
        stable: Stable,
        flagged: bool,
        now: u64,
    ) -> ReplyFate {
        let Some(c) = self.call_mut(caller, call) else {
            let what =
                format!("node{caller} got a reply from node{from} to call {call}, never made");
            self.violate(ViolationKind::UnknownCall, None, now, what);
            return ReplyFate::Refused;
        };
        let key = c.key;
        if c.server as usize != from {
            let what = format!(
                "node{caller} got a reply to call {call} from node{from}, made to node{}",
                c.server
            );
            self.violate(ViolationKind::UnknownCall, Some(key), now, what);
            return ReplyFate::Refused;
        }
        if flagged && c.replies.contains(&stable) {
            return ReplyFate::Absorbed;
        }
        c.replies.push(stable);
        let (n, ended) = (c.replies.len(), c.ended);
        // A server found damaged lost the record of the reply it sent, ran the flagged
        // request again (its store absorbed it) and answered again: a new message, which
        // the caller's call, ended by the first, discards.
        if n > 1 && n - 1 <= c.damaged_reruns as usize && ended.is_some() {
            self.rpc.counts.discarded += 1;
            self.rpc.counts.damage_replies += 1;
            return ReplyFate::Discarded;
        }
        // A reply told in doubt and sent once more that had reached the caller after all:
        // its call, ended by the first copy, discards the second.
        if n > 1 && n - 1 <= (c.damaged_reruns + c.resent) as usize && ended.is_some() {
            self.rpc.counts.discarded += 1;
            return ReplyFate::Discarded;
        }
        if n > 1 {
            let what = format!("node{caller} got {n} replies to call {call}");
            self.violate(ViolationKind::ReplyTwice, Some(key), now, what);
            return ReplyFate::Refused;
        }
        if ended.is_some() {
            self.rpc.counts.discarded += 1;
            return ReplyFate::Discarded;
        }
        ReplyFate::Fresh
    }

    /// Call `call` of `caller` ended as `end`: checks that the claim is true.
    pub fn on_call_ended(&mut self, caller: usize, call: u64, end: &Ended, now: u64) {
        let Some(c) = self.call_mut(caller, call) else {
            let what = format!("node{caller} ended call {call}, never made");
            self.violate(ViolationKind::UnknownCall, None, now, what);
            return;
        };
        let key = c.key;
        let executed = !c.executed.is_empty();
        let (kind, wrong) = match end {
            Ended::Reply(outcome, body) => {
                let right = c
                    .answer
                    .as_ref()
                    .is_some_and(|(o, b)| o == outcome && b[..] == body[..]);
                (
                    CallEnd::Reply,
                    (!right).then(|| {
                        format!(
                            "ended with a reply that is not its server's answer: {outcome:?} {:?}",
                            String::from_utf8_lossy(body)
                        )
                    }),
                )
            }
            Ended::NotExecuted => (
                CallEnd::NotExecuted,
                executed.then(|| String::from("ended not executed, but it was executed")),
            ),
            Ended::InDoubt => (CallEnd::InDoubt, None),
            Ended::NoReply => (
                CallEnd::NoReply,
                (!executed).then(|| {
                    String::from("ended executed without reply, but it was never executed")
                }),
            ),
        };
        if c.ended.is_some() {
            let what = format!("node{caller} ended call {call} twice");
            self.violate(ViolationKind::UnknownCall, Some(key), now, what);
            return;
        }
        c.ended = Some(kind);
        let k = &mut self.rpc.counts;
        match end {
            Ended::Reply(Outcome::Answered, _) => k.replies += 1,
            Ended::Reply(..) => {
                k.replies += 1;
                k.failed += 1;
            }
            Ended::NotExecuted => k.not_executed += 1,
            Ended::InDoubt => k.in_doubt += 1,
            Ended::NoReply => k.no_reply += 1,
        }
        if let Some(what) = wrong {
            let v = match kind {
                CallEnd::Reply => ViolationKind::WrongReply,
                CallEnd::NotExecuted => ViolationKind::ExecutedAfterNotExecuted,
                _ => ViolationKind::NoReplyNotExecuted,
            };
            self.violate(
                v,
                Some(key),
                now,
                format!("node{caller} call {call}: {what}"),
            );
        }
    }

    /// The application of `caller` crashed: its open calls are forgotten (no claim made).
    pub fn on_caller_crashed(&mut self, caller: usize) {
        let Some(v) = self.rpc.calls.get_mut(caller) else {
            return;
        };
        for c in v.iter_mut().filter(|c| c.ended.is_none()) {
            c.ended = Some(CallEnd::Crashed);
            self.rpc.counts.forgotten += 1;
        }
    }

    /// The end-of-run checks of the request/reply workload, once the network healed and
    /// everything settled: every call ended (unless its caller forgot it in a crash), and
    /// the reply of every acknowledged request reached its caller (in the call or after
    /// it), unless a restart of a node without a journal, or a damaged journal, excuses it.
    pub(super) fn finish_rpc(&mut self, now: u64) {
        let mut bad = Vec::new();
        for (caller, v) in self.rpc.calls.iter().enumerate() {
            for (call, c) in v.iter().enumerate() {
                let server = c.server as usize;
                if c.ended.is_none() {
                    bad.push((
                        ViolationKind::CallNotEnded,
                        c.key,
                        format!("node{caller} call {call} never ended"),
                    ));
                }
                let rec = self.rec(c.key);
                let acked = rec.is_some_and(|r| r.acked);
                // A restart that could not vouch for what came before it (durable mode
                // switched on, the journal lost, the directory restored) after the
                // request was taken loses the reply its server stored with the take (the
                // ACK goes once both are stored, and may reach the caller after that
                // restart); after the call was made, the call its caller had not stored.
                let unvouched = |node: usize, since: u64| {
                    self.unvouched_at
                        .get(node)
                        .is_some_and(|&t| t != super::NONE && t >= since)
                };
                let after_restart = rec.is_some_and(|r| {
                    let taken = if r.taken_at == super::NONE {
                        r.acked_at
                    } else {
                        r.taken_at.min(r.acked_at)
                    };
                    unvouched(server, taken) || unvouched(caller, r.sent_at)
                });
                // A reply its server was told is in doubt (checked apart: an unvouched
                // restart of the caller, its reply sent in an envelope from before it): lost
                // with a truthful verdict at both ends (the call ends executed, no reply).
                let reply_doubted = c
                    .reply_keys
                    .iter()
                    .any(|k| self.rec(*k).is_some_and(|r| r.doubted));
                let excused = if self.durable {
                    self.damaged[server] || self.damaged[caller] || after_restart || reply_doubted
                } else {
                    self.restarted[server] || self.restarted[caller]
                };
                if acked && c.replies.is_empty() && !excused {
                    bad.push((ViolationKind::ReplyLost, c.key, format!("node{caller} call {call}: acknowledged (executed), its reply never came")));
                }
            }
        }
        for (kind, key, what) in bad {
            self.violate(kind, Some(key), now, format!("after quiescence: {what}"));
        }
    }
}

/// The body of a reply without its message header: the server's answer.
pub fn answer_of(body: &Bytes) -> Bytes {
    body.slice(crate::workload::ID_LEN.min(body.len())..)
}
