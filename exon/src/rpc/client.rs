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
        // The task's waker, registered with the call as it opens (the table locked once):
        // the call's first wait need not look into the table.
        let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        let opened = WakerKey::of(&waker);
        let guard = self.calls().open_waking(to, Some(waker));
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
            Verdicts::InCall {
                armed: false,
                opened: Some(opened),
            },
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

/// Which waker a task polls with (its data and vtable addresses, as
/// [`Waker::will_wake`](std::task::Waker::will_wake) compares them), kept as plain numbers
/// so that a call's future stays `Send`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WakerKey(usize, usize);

impl WakerKey {
    /// The key of `w`.
    pub(crate) fn of(w: &std::task::Waker) -> WakerKey {
        WakerKey(w.data() as usize, w.vtable() as *const _ as usize)
    }
}

/// Where a call learns its request's verdict.
#[derive(Debug)]
pub(crate) enum Verdicts {
    /// In its own cell of the table of calls, beside its reply (its request was sent with
    /// the call's [`CallAck`](crate::rpc::calls::CallAck)). `armed`: the last poll returned
    /// the verdict and left this poll's waker in the table, so the next look for the
    /// reply alone, in the same poll of the task, is answered without the table's lock (a
    /// reply coming since woke that waker). `opened`: the waker the call was opened with
    /// ([`Calls::open_waking`](crate::rpc::calls::Calls::open_waking)): the first poll,
    /// with that same waker, does not look either. Whatever the call must learn since it
    /// opened (its reply, its request's verdict) woke that waker, so the task is polled
    /// again and looks then.
    InCall {
        armed: bool,
        opened: Option<WakerKey>,
    },
    /// Through a receipt (a call recovered from the journal).
    Receipt(Receipt),
}

impl Verdicts {
    /// What `guard`'s call learned: its reply first, then (with `verdict`) its request's
    /// verdict.
    fn poll(&mut self, guard: &CallGuard, verdict: bool, cx: &mut Context<'_>) -> Poll<CallEvent> {
        match self {
            Verdicts::InCall { armed, opened } => {
                if opened.take() == Some(WakerKey::of(cx.waker())) {
                    return Poll::Pending;
                }
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
    // Made only once the request is acknowledged (its timer registered with the runtime
    // only for the few calls whose reply does not come with the acknowledgement, or soon
    // after it): a call that ends with its reply makes none.
    let mut sleep = std::pin::pin!(None::<tokio::time::Sleep>);
    let ended = loop {
        let waiting = !call.is_acknowledged();
        let learned = tokio::select! {
            biased;
            e = std::future::poll_fn(|cx| verdicts.poll(&guard, waiting, cx)) => match e {
                CallEvent::Reply(r) => Learned::Reply(r.outcome, r.body),
                CallEvent::Verdict(Ok(())) => {
                    let until = match wait {
                        ReplyWait::Until(d) => d,
                        ReplyWait::AfterAck(d) => saturating_after(Instant::now(), d),
                    };
                    #[cfg(test)]
                    tests::SLEEPS.with(|n| n.set(n.get() + 1));
                    sleep.set(Some(tokio::time::sleep_until(until)));
                    Learned::Acknowledged
                }
                CallEvent::Verdict(Err(ReceiptError::NotDelivered)) => Learned::NotDelivered,
                CallEvent::Verdict(Err(ReceiptError::Refused(e))) => {
                    guard.stop_waiting();
                    return (Err(CallError::Refused(e)), guard);
                }
                CallEvent::Verdict(Err(_)) => Learned::InDoubt,
            },
            _ = std::future::poll_fn(|cx| match sleep.as_mut().as_pin_mut() {
                Some(s) => s.poll(cx),
                None => Poll::Pending,
            }), if !waiting => Learned::Deadline,
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

    thread_local! {
        /// Deadline timers made by calls' futures polled on this thread.
        pub(super) static SLEEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn sleeps() -> u64 {
        SLEEPS.with(|n| n.get())
    }

    fn reply(body: &'static [u8]) -> ReplyIn {
        ReplyIn {
            outcome: Outcome::Answered,
            body: Bytes::from_static(body),
        }
    }

    /// What a call's future ends with.
    type CallEnd = (Result<Bytes, CallError>, CallGuard);

    /// A waker counting its wakes, and the count.
    fn counted() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    /// A call opened with `waker` registered, as `call_open` opens one, and its future.
    fn opened(
        calls: &Arc<Calls>,
        waker: &Waker,
        until: Instant,
    ) -> (
        u64,
        crate::rpc::calls::CallAck,
        Pin<Box<impl Future<Output = CallEnd>>>,
    ) {
        let guard = calls.open_waking(PEER, Some(waker.clone()));
        let (id, ack) = (guard.id(), guard.ack());
        let verdicts = Verdicts::InCall {
            armed: false,
            opened: Some(WakerKey::of(waker)),
        };
        (
            id,
            ack,
            Box::pin(ended(guard, verdicts, ReplyWait::Until(until))),
        )
    }

    /// The usual call: opened with its task's waker, its request's acknowledgement and
    /// its reply come in one turn of the driver (the server's ACK rides with its reply).
    /// The first wait does not look into the table (the waker is registered already), the
    /// acknowledgement wakes the call, whose one look reads the reply and takes the call
    /// out of the table: four locks of the table in all (open, acknowledgement, reply,
    /// look) and none when the call's guard goes.
    #[tokio::test]
    async fn a_call_looks_into_the_table_once_and_its_end_takes_no_lock() {
        let calls = Calls::new(Duration::from_secs(60));
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let far = Instant::now() + Duration::from_secs(60);
        let (id, ack, mut call) = opened(&calls, &waker, far);
        assert!(call.as_mut().poll(&mut cx).is_pending(), "nothing came");
        assert_eq!(calls.looks(), 0, "registered when the call opened");

        ack.resolve(Ok(()));
        let handed = calls.on_reply(id, PEER, reply(b"done"), DeliveryId::for_test(PEER, 1));
        assert!(handed.handed);
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "woken once");
        let guard = match call.as_mut().poll(&mut cx) {
            Poll::Ready((Ok(body), guard)) => {
                assert_eq!(&body[..], b"done");
                guard
            }
            other => panic!("not ended with its reply: {:?}", other.map(|r| r.0)),
        };
        assert_eq!(calls.looks(), 1);
        assert_eq!(sleeps(), 0, "no deadline timer made");
        assert_eq!(calls.locks(), 4, "open, ack, reply, look");
        drop(guard);
        assert_eq!(calls.locks(), 4, "the guard's drop took no lock");
        assert_eq!(calls.waiting(), 0, "the reply read ended the call");
        let again = calls.on_reply(id, PEER, reply(b"x"), DeliveryId::for_test(PEER, 2));
        assert!(!again.handed, "a second reply finds no call");
    }

    /// A call whose future is first polled by another task than the one that opened it:
    /// the reply that came meanwhile woke the opener's waker, not this task's, so the
    /// first poll looks (the skip holds only for the waker the call was opened with).
    #[tokio::test]
    async fn a_call_polled_first_by_another_task_looks() {
        let calls = Calls::new(Duration::from_secs(60));
        let (opener, poller) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let (a, b) = (Waker::from(opener.clone()), Waker::from(poller.clone()));
        let far = Instant::now() + Duration::from_secs(60);
        let (id, ack, mut call) = opened(&calls, &a, far);
        ack.resolve(Ok(()));
        let handed = calls.on_reply(id, PEER, reply(b"done"), DeliveryId::for_test(PEER, 1));
        assert!(handed.handed);
        assert_eq!(opener.0.load(Ordering::Relaxed), 1);
        match call.as_mut().poll(&mut Context::from_waker(&b)) {
            Poll::Ready((Ok(body), _)) => assert_eq!(&body[..], b"done"),
            other => panic!("the reply was missed: {:?}", other.map(|r| r.0)),
        }
        assert_eq!(poller.0.load(Ordering::Relaxed), 0);
    }

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
        let verdicts = Verdicts::InCall {
            armed: false,
            opened: None,
        };
        let mut call = Box::pin(ended(guard, verdicts, ReplyWait::Until(far)));
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(call.as_mut().poll(&mut cx).is_pending(), "nothing came");
        assert_eq!(calls.looks(), 1, "opened without a waker: it looks");

        ack.resolve(Ok(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "woken by the ack");
        assert!(
            call.as_mut().poll(&mut cx).is_pending(),
            "the reply is to come"
        );
        assert_eq!(
            calls.looks(),
            2,
            "the acknowledgement's look left the waker for the reply"
        );
        let handed = calls.on_reply(id, PEER, reply(b"done"), DeliveryId::for_test(PEER, 1));
        assert!(handed.handed);
        assert_eq!(count.0.load(Ordering::Relaxed), 2, "woken by the reply");
        assert!(matches!(
            call.as_mut().poll(&mut cx),
            Poll::Ready((Ok(_), _))
        ));
    }

    /// Deadlines: an acknowledged call whose reply never comes ends at its deadline with
    /// `NoReply`; a deadline that passes while the request is still on its way leaves the
    /// call to its request's verdict, and an acknowledgement coming later wakes the call,
    /// which ends with `NoReply`; a verdict short of an acknowledgement wakes the call and
    /// ends it.
    #[tokio::test(start_paused = true)]
    async fn a_call_ends_at_its_deadline_or_its_verdict_after_it() {
        let (count, waker) = counted();
        let mut cx = Context::from_waker(&waker);
        let calls = Calls::new(Duration::from_secs(60));
        let until = Instant::now() + Duration::from_secs(2);
        let (_id, ack, mut call) = opened(&calls, &waker, until);
        assert!(call.as_mut().poll(&mut cx).is_pending());
        ack.resolve(Ok(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "woken by the ack");
        assert!(
            call.as_mut().poll(&mut cx).is_pending(),
            "the reply may come"
        );
        assert_eq!(sleeps(), 1, "the deadline's timer made at the ack");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(count.0.load(Ordering::Relaxed), 2, "woken by the deadline");
        match call.as_mut().poll(&mut cx) {
            Poll::Ready((Err(CallError::NoReply), _)) => {}
            other => panic!("not ended at its deadline: {:?}", other.map(|r| r.0)),
        }

        let until = Instant::now() + Duration::from_secs(2);
        let (_id, ack, mut call) = opened(&calls, &waker, until);
        assert!(call.as_mut().poll(&mut cx).is_pending());
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(
            call.as_mut().poll(&mut cx).is_pending(),
            "past its deadline, the call waits for its request's verdict"
        );
        let woken = count.0.load(Ordering::Relaxed);
        ack.resolve(Ok(()));
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            woken + 1,
            "woken by the ack"
        );
        match call.as_mut().poll(&mut cx) {
            Poll::Ready((Err(CallError::NoReply), _)) => {}
            other => panic!("not ended by the ack: {:?}", other.map(|r| r.0)),
        }

        let far = Instant::now() + Duration::from_secs(60);
        let (_id, ack, mut call) = opened(&calls, &waker, far);
        assert!(call.as_mut().poll(&mut cx).is_pending());
        let woken = count.0.load(Ordering::Relaxed);
        ack.resolve(Err(ReceiptError::NotDelivered));
        assert_eq!(
            count.0.load(Ordering::Relaxed),
            woken + 1,
            "woken by the verdict"
        );
        match call.as_mut().poll(&mut cx) {
            Poll::Ready((Err(CallError::NotExecuted), _)) => {}
            other => panic!("not ended by its verdict: {:?}", other.map(|r| r.0)),
        }
    }
}
