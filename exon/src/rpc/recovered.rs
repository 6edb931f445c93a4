//! Calls that survive their caller: a durable caller's requests recovered from its journal
//! after a restart, handed to the application with their replies to come
//! ([`Endpoint::take_recovered_calls`], `docs/rpc.md`, "Calls that survive their caller").

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::client::{outcome, ReplyWait};
use super::error::CallError;
use crate::endpoint::Endpoint;
use crate::proto::{MsgId, NodeId};

/// A call of an earlier run of a durable caller, recovered from its journal after a restart
/// (what [`RecoveredSend`](crate::endpoint::RecoveredSend) is for a plain message): its
/// request was stored and not acknowledged before the restart, it is being sent again under
/// the stable id it had, and its call is open again under the call id it had, so the
/// server's reply comes to [`reply`](Self::reply), which resolves as
/// [`Handle::call`](crate::endpoint::Handle::call)'s future would have.
///
/// Not recovered (yet): a call whose request the server had acknowledged before the
/// restart and whose reply had not come; its reply is discarded (`docs/rpc.md`).
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
/// server acknowledges it or it gets another verdict; once acknowledged, its reply is
/// waited for [`EndpointConfig::call_deadline`](crate::endpoint::EndpointConfig::call_deadline),
/// then the call ends [`CallError::NoReply`] (a reply the caller received before the
/// restart, its request's acknowledgement not yet in, does not come again).
pub struct CallReply(Pin<Box<dyn Future<Output = Result<Bytes, CallError>> + Send>>);

impl fmt::Debug for CallReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallReply")
    }
}

impl Future for CallReply {
    type Output = Result<Bytes, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl Endpoint {
    /// Durable mode: the calls recovered from the journal when the endpoint was bound:
    /// requests sent before a restart and not acknowledged, being sent again (a request
    /// runs once at the server, as before the restart), each with its call open again, so
    /// that the server's reply reaches [`RecoveredCall::reply`] exactly once (not
    /// [`EndpointStats::replies_discarded`](crate::endpoint::EndpointStats::replies_discarded)).
    /// New calls take call ids above theirs. Empty after the first call, and on an endpoint
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
                redelivery: r.reply_stored,
                reply: CallReply(Box::pin(outcome(r.guard, r.reply, r.receipt, wait))),
            })
            .collect()
    }
}
