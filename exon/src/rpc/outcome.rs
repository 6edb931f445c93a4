//! Calls left open until the application is done with their result
//! ([`Handle::call_acked`], [`CallReply::acked`](super::CallReply::acked)): what a durable caller needs for its own
//! effects of replies to be exactly-once across its crashes (`docs/rpc.md`, "Calls that
//! survive their caller").

use bytes::Bytes;

use super::calls::CallGuard;
use super::error::CallError;
use crate::endpoint::Handle;
use crate::envelope::Envelope;
use crate::proto::NodeId;

/// How a call ended, the call still open: a durable caller keeps it in its journal (its
/// request, and its reply untaken) until this is [`ack`](Self::ack)ed or dropped. A
/// process that stops before then gets the call back after its restart
/// ([`Endpoint::take_recovered_calls`](crate::endpoint::Endpoint::take_recovered_calls)),
/// its reply handed out again and flagged
/// ([`RecoveredCall::redelivery`](crate::rpc::RecoveredCall::redelivery)). So an
/// application that stores what the reply did, and only then acknowledges, loses no reply
/// to a crash; on a flagged one it looks the call up in its store first.
///
/// On an endpoint that is not durable, nothing is kept: acknowledging is dropping.
#[derive(Debug)]
#[must_use = "dropping it ends the call: acknowledge it once its result is stored"]
pub struct CallOutcome {
    result: Result<Bytes, CallError>,
    /// The open call (none for a call refused before it was opened).
    guard: Option<CallGuard>,
}

impl CallOutcome {
    pub(crate) fn new(result: Result<Bytes, CallError>, guard: CallGuard) -> CallOutcome {
        CallOutcome {
            result,
            guard: Some(guard),
        }
    }

    /// The call's result: the reply, or the error that says whether the request was
    /// executed ([`CallError::executed`]), as [`Handle::call`] returns it.
    pub fn result(&self) -> &Result<Bytes, CallError> {
        &self.result
    }

    /// The application is done with the call (what its result asked for is stored): the
    /// call ends, and a durable caller's journal lets it go (its request is released, its
    /// reply taken and acknowledged to the server). Returns the result.
    pub fn ack(self) -> Result<Bytes, CallError> {
        let CallOutcome { result, guard } = self;
        drop(guard);
        result
    }
}

impl Handle {
    /// As [`call`](Self::call), the call left open until the application acknowledges its
    /// [`CallOutcome`]: on a durable endpoint, a crash before then recovers the call after
    /// the restart, its reply flagged as handed out before. Use it where the reply's effect
    /// goes to a store of the application's own and must survive crashes exactly once.
    ///
    /// # Cancel safety
    /// As [`call`](Self::call).
    pub async fn call_acked(&self, to: NodeId, request: impl Into<Bytes>) -> CallOutcome {
        let within = self.calls().deadline;
        let body = request.into();
        if let Err(e) = self.check(to, &body) {
            return CallOutcome {
                result: Err(CallError::Refused(e)),
                guard: None,
            };
        }
        self.call_open(to, within, |call| Ok(Envelope::request(call, body)))
            .await
    }
}
