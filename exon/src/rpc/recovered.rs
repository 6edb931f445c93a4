//! Calls that survive their caller: a durable caller's requests recovered from its journal
//! after a restart, handed to the application with their replies to come
//! ([`Endpoint::take_recovered_calls`], `docs/rpc.md`, "Calls that survive their caller").

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::calls::CallGuard;
use super::client::{ended, ReplyWait, Verdicts};
use super::error::CallError;
use super::outcome::CallOutcome;
use crate::endpoint::Endpoint;
use crate::proto::{MsgId, NodeId};

/// A call of an earlier run of a durable caller, recovered from its journal after a restart
/// (what [`RecoveredSend`](crate::endpoint::RecoveredSend) is for a plain message): a call
/// that had not taken its reply when the process stopped. Its call is open again under the
/// call id it had, so the server's reply comes to [`reply`](Self::reply), which resolves as
/// [`Handle::call`](crate::endpoint::Handle::call)'s future would have.
///
/// Two kinds, told apart by [`acknowledged`](Self::acknowledged):
/// - the request was stored and not acknowledged before the restart: it is being sent
///   again under the stable id it had (it runs once at the server, as before);
/// - the server had acknowledged the request (it ran, and its reply was on its way): the
///   journal kept it until its call ended (the rule
///   [`hold_call_requests`](crate::proto::Rules::hold_call_requests)); it is not sent
///   again, and only its reply is waited for.
///
/// A call whose reply was taken before the restart (the reply handed to the call's future,
/// its take stored) is not recovered; nor is one that ended without it (its deadline, an
/// error, its future dropped) once its release was stored.
#[derive(Debug)]
pub struct RecoveredCall {
    /// The request's stable id: the [`Receipt::id`](crate::endpoint::Receipt::id) it had
    /// (and the [`Request::stable_id`](crate::rpc::Request::stable_id) the server sees).
    pub id: MsgId,
    /// The call's id, as the request's envelope carries it (`docs/wire.md`).
    pub call_id: u64,
    /// The node called.
    pub to: NodeId,
    /// The request, so the application knows which of its calls this is.
    pub request: Bytes,
    /// The server acknowledged the request before the restart: it was executed, and is not
    /// sent again; [`reply`](Self::reply) waits for its reply only (for
    /// [`EndpointConfig::call_deadline`](crate::endpoint::EndpointConfig::call_deadline),
    /// then [`CallError::NoReply`]). False: the request is being sent again.
    pub acknowledged: bool,
    /// The reply was in the caller's journal already, received and not yet taken when the
    /// process stopped: it may have reached the call's future before the restart (as a
    /// message flagged [`Message::is_redelivery`](crate::endpoint::Message::is_redelivery)
    /// may have been handed out). An application that keeps what replies did looks the call
    /// up in its own store first.
    pub redelivery: bool,
    /// The call's result: the reply, or a [`CallError`] that says whether the request was
    /// executed ([`CallError::executed`]). Dropping it ends the call (a reply coming later
    /// is discarded and counted, as for a dropped call).
    pub reply: CallReply,
}

/// The result of a [`RecoveredCall`]: resolves with the reply or a [`CallError`], as a
/// call does. A recovered request has no deadline (none is stored): it is sent until the
/// server acknowledges it or it gets another verdict; once acknowledged (before the
/// restart, [`RecoveredCall::acknowledged`], or after), its reply is waited for
/// [`EndpointConfig::call_deadline`](crate::endpoint::EndpointConfig::call_deadline) from
/// the first poll that finds it acknowledged, then the call ends [`CallError::NoReply`]
/// (executed). The reply reaches it exactly once: a server sends it until the caller took
/// it, and a reply the caller had received and not taken before the restart is handed out
/// again ([`RecoveredCall::redelivery`]). The call ends (and the journal lets its request
/// go) when this resolves or is dropped; [`acked`](Self::acked) keeps it open until the
/// application acknowledges the outcome.
pub struct CallReply(Pin<Box<dyn Future<Output = Ended> + Send>>);

/// A call's result, and its guard: the call ends when it is dropped.
type Ended = (Result<Bytes, CallError>, CallGuard);

impl CallReply {
    /// The recovered call's result, the call left open until the application acknowledges
    /// it, as [`Handle::call_acked`](crate::endpoint::Handle::call_acked)'s.
    pub async fn acked(self) -> CallOutcome {
        let (result, guard) = self.0.await;
        CallOutcome::new(result, guard)
    }
}

impl fmt::Debug for CallReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallReply")
    }
}

impl Future for CallReply {
    type Output = Result<Bytes, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The call ends with the result (its guard dropped).
        self.0.as_mut().poll(cx).map(|(result, _guard)| result)
    }
}

impl Endpoint {
    /// Durable mode: the calls recovered from the journal when the endpoint was bound: calls
    /// made before a restart that had not taken their reply, each open again, so that the
    /// server's reply reaches [`RecoveredCall::reply`] exactly once (not
    /// [`EndpointStats::replies_discarded`](crate::endpoint::EndpointStats::replies_discarded)).
    /// Their requests not yet acknowledged are being sent again (a request runs once at the
    /// server, as before the restart); those acknowledged ([`RecoveredCall::acknowledged`])
    /// wait for their replies only.
    /// No new call takes their call ids. Empty after the first call, and on an endpoint
    /// that is not durable. The calls are open from bind on: their replies wait for this.
    pub fn take_recovered_calls(&mut self) -> Vec<RecoveredCall> {
        let wait = ReplyWait::AfterAck(self.calls().deadline);
        self.take_recovered_requests()
            .into_iter()
            .map(|r| RecoveredCall {
                id: r.receipt.id(),
                call_id: r.guard.id(),
                to: r.to,
                request: r.body,
                acknowledged: r.acknowledged,
                redelivery: r.reply_stored,
                reply: CallReply(Box::pin(ended(r.guard, Verdicts::Receipt(r.receipt), wait))),
            })
            .collect()
    }
}
