//! The caller's side: [`Handle::call`] and its variants, and how a call's outcome is told
//! from its request's verdict and its reply.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::endpoint::deadline::saturating_after;

use super::error::{CallError, Failure};
use crate::call::{CallState, Ended, Learned};
use crate::endpoint::{Handle, Receipt, ReceiptError};
use crate::envelope::{Envelope, Outcome};
use crate::proto::{NodeId, Payload};
use crate::rpc::calls::{CallEvent, CallGuard};
use crate::rpc::outcome::CallOutcome;

impl Handle {
    /// Calls node `to` with `request` and waits for its reply: the request is executed by
    /// the server's handler exactly once, or the error says what is true
    /// ([`CallError::executed`]). The deadline is
    /// [`EndpointConfig::call_deadline`](crate::endpoint::EndpointConfig::call_deadline).
    ///
    /// Many calls may be in flight at once, from any number of tasks; each waits only for
    /// its own reply.
    ///
    /// On a durable endpoint the call survives a restart of this process until the future
    /// returns (`Endpoint::take_recovered_calls`); an application that stores what the reply
    /// did and must not lose it to a crash in between uses
    /// [`call_acked`](Self::call_acked).
    ///
    /// # Cancel safety
    /// Dropping the call's future does not cancel the request (once sent, it is delivered
    /// exactly once, and executed); its reply, if it comes, is discarded and counted in
    /// [`EndpointStats::replies_discarded`](crate::endpoint::EndpointStats::replies_discarded).
    /// A future dropped before its request was handed over sent nothing.
    pub async fn call(&self, to: NodeId, request: impl Into<Bytes>) -> Result<Bytes, CallError> {
        let within = self.calls().deadline;
        self.call_within(to, request, within).await
    }

    /// Like [`call`](Self::call), with a deadline `within` from now: the request is given up
    /// if the server has not acknowledged it by then ([`CallError::NotExecuted`] when no copy
    /// of it left, [`CallError::InDoubt`] when one did), and a request executed whose reply
    /// has not come by then ends the call with [`CallError::NoReply`]. A `within` past what
    /// the clock can represent waits as long as it goes.
    ///
    /// # Cancel safety
    /// As [`call`](Self::call).
    pub async fn call_within(
        &self,
        to: NodeId,
        request: impl Into<Bytes>,
        within: Duration,
    ) -> Result<Bytes, CallError> {
        let body = request.into();
        self.check(to, &body).map_err(CallError::Refused)?;
        self.call_sealed(to, within, |call| Ok(Envelope::request(call, body)))
            .await
    }

    /// Makes a call whose request `seal(call id)` puts in its envelope.
    async fn call_sealed(
        &self,
        to: NodeId,
        within: Duration,
        seal: impl FnOnce(u64) -> Result<Payload, CallError>,
    ) -> Result<Bytes, CallError> {
        self.call_open(to, within, seal).await.ack()
    }

    /// [`call_sealed`](Self::call_sealed), its call left open in the outcome.
    pub(crate) async fn call_open(
        &self,
        to: NodeId,
        within: Duration,
        seal: impl FnOnce(u64) -> Result<Payload, CallError>,
    ) -> CallOutcome {
        // One reading of the clock for the call's deadline and its request's.
        let now = Instant::now();
        let deadline = saturating_after(now, within);
        let send_deadline = now.into_std().checked_add(within);
        let guard = self.calls().open(to);
        let payload = match seal(guard.id()) {
            Ok(p) => p,
            Err(e) => return CallOutcome::new(Err(e), guard),
        };
        let sent = self.send_request(to, payload, send_deadline, &guard).await;
        if let Err(e) = sent {
            return CallOutcome::new(Err(CallError::Refused(e)), guard);
        }
        let (result, guard) = ended(
            guard,
            Verdicts::InCall { armed: false },
            ReplyWait::Until(deadline),
        )
        .await;
        CallOutcome::new(result, guard)
    }

    /// Encodes `request` with bincode, [`call`](Self::call)s, and decodes the reply as a
    /// `Resp` (the server answers with [`Response::typed`](super::Response::typed)). A
    /// handler's typed error reads back with [`Failure::decode`].
    ///
    /// # Cancel safety
    /// As [`call`](Self::call).
    #[cfg(feature = "serde")]
    pub async fn call_typed<Req, Resp>(&self, to: NodeId, request: &Req) -> Result<Resp, CallError>
    where
        Req: serde::Serialize + ?Sized,
        Resp: serde::de::DeserializeOwned,
    {
        let within = self.calls().deadline;
        self.call_typed_within(to, request, within).await
    }

    /// [`call_typed`](Self::call_typed) with a deadline, as [`call_within`](Self::call_within).
    ///
    /// # Cancel safety
    /// As [`call`](Self::call).
    #[cfg(feature = "serde")]
    pub async fn call_typed_within<Req, Resp>(
        &self,
        to: NodeId,
        request: &Req,
        within: Duration,
    ) -> Result<Resp, CallError>
    where
        Req: serde::Serialize + ?Sized,
        Resp: serde::de::DeserializeOwned,
    {
        // Encoded straight behind its envelope, in one buffer.
        let reply = self
            .call_sealed(to, within, |call| {
                let head = Envelope::request(call, Bytes::new());
                let (sealed, len) = crate::endpoint::encode_after(head.head(), request)
                    .map_err(|e| CallError::Encode(e.to_string()))?;
                self.check_len(to, len).map_err(CallError::Refused)?;
                Ok(sealed.into())
            })
            .await?;
        crate::endpoint::decode(&reply).map_err(|e| CallError::Decode(e.to_string()))
    }
}

/// How long a call waits for the reply of a request its server acknowledged.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReplyWait {
    /// Until the call's deadline.
    Until(Instant),
    /// For this long after the acknowledgement (a call recovered after a restart, which
    /// has no deadline of its own).
    AfterAck(Duration),
}

/// Where a call learns its request's verdict.
#[derive(Debug)]
pub(crate) enum Verdicts {
    /// In its own cell of the table of calls, beside its reply (its request was sent with
    /// the call's [`CallAck`](crate::rpc::calls::CallAck)). `armed`: the last poll returned
    /// the verdict and left this poll's waker in the table, so the next look for the
    /// reply alone, in the same poll of the task, is answered without the table's lock (a
    /// reply coming since woke that waker).
    InCall { armed: bool },
    /// Through a receipt (a call recovered from the journal).
    Receipt(Receipt),
}

impl Verdicts {
    /// What `guard`'s call learned: its reply first, then (with `verdict`) its request's
    /// verdict.
    fn poll(&mut self, guard: &CallGuard, verdict: bool, cx: &mut Context<'_>) -> Poll<CallEvent> {
        match self {
            Verdicts::InCall { armed } => {
                if std::mem::take(armed) && !verdict {
                    return Poll::Pending;
                }
                let p = guard.poll_event(verdict, cx);
                *armed = matches!(p, Poll::Ready(CallEvent::Verdict(_)));
                p
            }
            Verdicts::Receipt(receipt) => match guard.poll_event(false, cx) {
                Poll::Pending if verdict => Pin::new(receipt)
                    .poll(cx)
                    .map(|v| CallEvent::Verdict(v.map(drop))),
                p => p,
            },
        }
    }
}

/// Waits for whichever tells the call's outcome first: the reply (the request was
/// executed), or the request's verdict. A verdict short of an acknowledgement ends the
/// call; an acknowledgement (the server took the request with its reply queued) leaves
/// the reply to wait for until the deadline ([`CallState`], [`ReplyWait`]). Returns the
/// call's guard with the result: the call ends when it is dropped.
pub(crate) async fn ended(
    guard: CallGuard,
    mut verdicts: Verdicts,
    wait: ReplyWait,
) -> (Result<Bytes, CallError>, CallGuard) {
    let mut call = CallState::new();
    let deadline = match wait {
        ReplyWait::Until(d) => d,
        // Unused until the acknowledgement sets it.
        ReplyWait::AfterAck(_) => Instant::now(),
    };
    // Armed (polled) only once the request is acknowledged; reset where the wait starts
    // then (a recovered call).
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    let ended = loop {
        let waiting = !call.is_acknowledged();
        let learned = tokio::select! {
            biased;
            e = std::future::poll_fn(|cx| verdicts.poll(&guard, waiting, cx)) => match e {
                CallEvent::Reply(r) => Learned::Reply(r.outcome, r.body),
                CallEvent::Verdict(Ok(())) => {
                    if let ReplyWait::AfterAck(d) = wait {
                        sleep.as_mut().reset(saturating_after(Instant::now(), d));
                    }
                    Learned::Acknowledged
                }
                CallEvent::Verdict(Err(ReceiptError::NotDelivered)) => Learned::NotDelivered,
                CallEvent::Verdict(Err(ReceiptError::Refused(e))) => {
                    guard.stop_waiting();
                    return (Err(CallError::Refused(e)), guard);
                }
                CallEvent::Verdict(Err(_)) => Learned::InDoubt,
            },
            _ = &mut sleep, if !waiting => Learned::Deadline,
        };
        if let Some(e) = call.learn(learned) {
            break e;
        }
    };
    if !matches!(ended, Ended::Reply(..)) {
        guard.stop_waiting();
    }
    let result = match ended {
        Ended::Reply(Outcome::Answered, body) => Ok(body),
        Ended::Reply(Outcome::Failed, body) => Err(CallError::Failed(Failure::raw(body))),
        Ended::Reply(Outcome::Panicked, body) => Err(CallError::Panicked(
            String::from_utf8_lossy(&body).into_owned(),
        )),
        Ended::NotExecuted => Err(CallError::NotExecuted),
        Ended::InDoubt => Err(CallError::InDoubt),
        Ended::NoReply => Err(CallError::NoReply),
    };
    (result, guard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::DeliveryId;
    use crate::rpc::calls::{Calls, ReplyIn};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    const PEER: NodeId = NodeId::from_const(9);

    /// A call whose request is acknowledged and whose reply comes later: the poll that
    /// learns the acknowledgement goes on waiting without looking into the table again
    /// (two looks where there were three), and the reply coming after wakes the call all
    /// the same, which then ends with it.
    #[tokio::test]
    async fn an_acknowledged_call_waits_for_its_reply_without_a_second_look() {
        let calls = Calls::new(Duration::from_secs(60));
        let guard = calls.open(PEER);
        let (id, ack) = (guard.id(), guard.ack());
        let far = Instant::now() + Duration::from_secs(60);
        let mut call = Box::pin(ended(
            guard,
            Verdicts::InCall { armed: false },
            ReplyWait::Until(far),
        ));
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(call.as_mut().poll(&mut cx).is_pending(), "nothing came");
        assert_eq!(calls.looks(), 1);

        ack.resolve(Ok(()));
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            1,
            "woken by the acknowledgement"
        );
        assert!(
            call.as_mut().poll(&mut cx).is_pending(),
            "the reply is still to come"
        );
        assert_eq!(
            calls.looks(),
            2,
            "the acknowledgement's look left the waker for the reply"
        );

        let reply = ReplyIn {
            outcome: Outcome::Answered,
            body: Bytes::from_static(b"done"),
        };
        assert!(
            calls
                .on_reply(id, PEER, reply, DeliveryId::for_test(PEER, 1))
                .handed
        );
        assert_eq!(count.0.load(Ordering::Relaxed), 2, "woken by the reply");
        match call.as_mut().poll(&mut cx) {
            Poll::Ready((Ok(body), _guard)) => assert_eq!(&body[..], b"done"),
            other => panic!(
                "the call did not end with its reply: {:?}",
                other.map(|r| r.0)
            ),
        }
    }
}
