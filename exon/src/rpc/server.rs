//! The server's side: [`Handle::serve`] runs a handler (an async function or any
//! `tower::Service`) for each request, exactly once, and sends its reply in the same step
//! that acknowledges the request.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tower_service::Service;

use super::error::Failure;
use super::queue::RequestRx;
use crate::endpoint::{Error, Handle, Request};
use crate::envelope::{Envelope, Outcome};

/// A handler's answer to a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    body: Bytes,
}

impl Response {
    /// A response carrying `body`.
    pub fn new(body: impl Into<Bytes>) -> Response {
        Response { body: body.into() }
    }

    /// A response carrying `value` encoded as typed payloads are (bincode), for
    /// [`Handle::call_typed`].
    #[cfg(feature = "serde")]
    pub fn typed<T: serde::Serialize + ?Sized>(
        value: &T,
    ) -> Result<Response, crate::endpoint::PayloadError> {
        Ok(Response::new(crate::endpoint::encode(value)?))
    }

    /// The response's bytes.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

impl From<Bytes> for Response {
    fn from(body: Bytes) -> Response {
        Response { body }
    }
}

/// How a server runs ([`Handle::serve_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeConfig {
    /// Requests handled at once, at most: more wait in the endpoint (unacknowledged, so
    /// their callers' deadlines keep running). Default 1024.
    pub concurrency: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig { concurrency: 1024 }
    }
}

impl ServeConfig {
    /// Sets [`concurrency`](Self::concurrency) (at least 1).
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
}

/// An async function as a `tower::Service` (what [`Handle::serve`] runs).
#[derive(Debug, Clone)]
pub struct HandlerFn<F>(pub F);

impl<F, Fut, E> Service<Request> for HandlerFn<F>
where
    F: FnMut(Request) -> Fut,
    Fut: Future<Output = Result<Response, E>>,
{
    type Response = Response;
    type Error = E;
    type Future = Fut;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), E>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Fut {
        (self.0)(req)
    }
}

impl Handle {
    /// Serves requests with `handler`, an async function of the [`Request`] (the caller's
    /// node id, the bytes, the stable id) to its [`Response`] or an error (anything
    /// [`Into<Failure>`]: any `std::error::Error`, or a [`Failure`] made typed), which the
    /// caller gets as [`CallError::Failed`](super::CallError::Failed). A handler that
    /// panics is reported to its caller as [`CallError::Panicked`](super::CallError::Panicked)
    /// and the server goes on. Runs until the endpoint closes; see
    /// [`serve_with`](Self::serve_with).
    pub async fn serve<F, Fut, E>(&self, handler: F) -> Result<(), Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, E>>,
        E: Into<Failure>,
    {
        self.serve_with(HandlerFn(handler), ServeConfig::default())
            .await
    }

    /// Serves requests with `service`, any `tower::Service<Request, Response = Response>`
    /// (so tower's server-side layers apply), with [`ServeConfig::default`].
    pub async fn serve_service<S>(&self, service: S) -> Result<(), Error>
    where
        S: Service<Request, Response = Response>,
        S::Error: Into<Failure>,
    {
        self.serve_with(service, ServeConfig::default()).await
    }

    /// Serves requests with `service`: each request delivered to this endpoint reaches it
    /// exactly once, at most `cfg.concurrency` at a time (the service's `poll_ready` is
    /// awaited before each), and its answer goes back as the reply. The request is
    /// acknowledged to its caller only with the reply queued, in one step (durable mode:
    /// one journal record), so an acknowledged request was executed and its reply is on its
    /// way. Requests that arrived before `serve` was called (or after a restart of a
    /// durable endpoint) are served first.
    ///
    /// Runs until the endpoint closes (`Ok`); [`Error::Closed`] if it is closed already.
    /// One server at a time: a second `serve` takes over new requests.
    ///
    /// # Cancel safety
    /// Dropping the future stops serving without losing a request: those waiting, and those
    /// whose handler had not returned, are held by the endpoint (unacknowledged) until the
    /// next `serve`. A handler dropped mid-way may have had effects: it is run again then,
    /// with the same [`stable_id`](Request::stable_id).
    pub async fn serve_with<S>(&self, mut service: S, cfg: ServeConfig) -> Result<(), Error>
    where
        S: Service<Request, Response = Response>,
        S::Error: Into<Failure>,
    {
        let rx = self.serve_requests()?;
        let mut queue = Queue {
            handle: self.clone(),
            rx,
        };
        let mut handlers = Handlers::default();
        let mut replies = Replies::new(self);
        let mut ready = false;
        let limit = cfg.concurrency.max(1);
        loop {
            tokio::select! {
                biased;
                Some((pending, result)) = handlers.running.next(), if !handlers.running.is_empty() => {
                    replies.answer_pending(pending, result);
                    // Every handler that finished meanwhile: their replies leave together.
                    while let Some(Some((pending, result))) = handlers.running.next().now_or_never() {
                        replies.answer_pending(pending, result);
                    }
                }
                r = std::future::poll_fn(|cx| service.poll_ready(cx)),
                    if !ready && handlers.running.len() < limit =>
                {
                    match r {
                        Ok(()) => ready = true,
                        Err(e) => {
                            // A service that is not ready fails the next request (and is
                            // asked again for the one after).
                            let Some(req) = queue.rx.recv().await else { break };
                            replies.answer(req, Ok(Err(e.into())));
                        }
                    }
                }
                r = queue.rx.recv(), if ready => {
                    let Some(req) = r else { break };
                    ready = false;
                    start(&mut service, req, &mut handlers, &mut replies);
                    // The requests already there, while the service is ready at once: one
                    // wake-up of this task and one command to the driver for all of them.
                    while handlers.running.len() < limit {
                        match std::future::poll_fn(|cx| service.poll_ready(cx)).now_or_never() {
                            Some(Ok(())) => {}
                            // Not ready, or failing: the select's branch above asks again.
                            _ => break,
                        }
                        match queue.rx.try_recv() {
                            Some(req) => {
                                start(&mut service, req, &mut handlers, &mut replies)
                            }
                            None => {
                                ready = true;
                                break;
                            }
                        }
                    }
                }
            }
            replies.flush();
        }
        // The endpoint closed: the handlers still running answer into a closed endpoint.
        while let Some((pending, result)) = handlers.running.next().await {
            replies.answer_pending(pending, result);
        }
        replies.flush();
        Ok(())
    }
}

/// A handler's future, guarded against panics.
type Guarded<F> = futures_util::future::CatchUnwind<AssertUnwindSafe<F>>;

/// The handlers running (not ready at once), and the box of the last handler that finished
/// at once, emptied and kept for the next request: a handler ready at once (the usual one)
/// costs no allocation. (One box is enough: a handler that finishes at once gives back the
/// box it took; one that does not keeps its box until it ends.)
struct Handlers<F> {
    running: FuturesUnordered<Run<F>>,
    spare: Option<Pin<Box<Option<F>>>>,
}

impl<F> Default for Handlers<F> {
    fn default() -> Self {
        Handlers {
            running: FuturesUnordered::new(),
            spare: None,
        }
    }
}

/// Calls `service` with `req`: a handler ready at once is answered now, without a task in
/// `handlers.running` (a turn of the loop less per request), and its box is kept for the
/// next; one that is not is polled there, with the server task's waker.
fn start<S>(
    service: &mut S,
    req: Request,
    handlers: &mut Handlers<Guarded<S::Future>>,
    replies: &mut Replies,
) where
    S: Service<Request, Response = Response>,
    S::Error: Into<Failure>,
{
    // What the reply needs (and, for a handler that waits, what goes back to the endpoint
    // if the server stops first): a handler ready at once holds no `Pending`, and no
    // reference to the handle.
    let copy = req.clone();
    match std::panic::catch_unwind(AssertUnwindSafe(|| service.call(req))) {
        Ok(fut) => {
            let mut slot = handlers.spare.take().unwrap_or_else(|| Box::pin(None));
            slot.set(Some(AssertUnwindSafe(fut).catch_unwind()));
            let polled = slot.as_mut().as_pin_mut().and_then(|f| f.now_or_never());
            match polled {
                Some(result) => {
                    // Emptied where it lies: the handler's future is dropped now.
                    slot.set(None);
                    handlers.spare = Some(slot);
                    replies.answer(copy, result)
                }
                None => handlers.running.push(Run {
                    pending: Some(Pending::new(&replies.handle, copy)),
                    fut: slot,
                }),
            }
        }
        Err(panic) => replies.answer::<S::Error>(copy, Err(panic)),
    }
}

/// Replies made and not yet handed to the driver: they go in one command per turn of the
/// server's loop.
struct Replies {
    /// Shared with the [`Pending`] of every handler that waits (one reference count each,
    /// not a handle's several; a handler ready at once takes none).
    handle: Arc<Handle>,
    out: Vec<crate::endpoint::Outgoing>,
}

impl Replies {
    fn new(handle: &Handle) -> Replies {
        Replies {
            handle: Arc::new(handle.clone()),
            out: Vec::new(),
        }
    }

    /// The result of a handler that waited, as the reply to its request.
    fn answer_pending<E: Into<Failure>>(
        &mut self,
        mut pending: Pending,
        result: Result<Result<Response, E>, Box<dyn std::any::Any + Send>>,
    ) {
        if let Some(req) = pending.req.take() {
            self.answer(req, result);
        }
    }

    /// A handler's result, as the reply to request `req`.
    fn answer<E: Into<Failure>>(
        &mut self,
        req: Request,
        result: Result<Result<Response, E>, Box<dyn std::any::Any + Send>>,
    ) {
        let (call, delivery) = req.reply_to();
        let (outcome, body) = match result {
            Ok(Ok(r)) => (Outcome::Answered, r.body),
            Ok(Err(e)) => (Outcome::Failed, e.into().body().clone()),
            Err(panic) => (Outcome::Panicked, Bytes::from(panic_message(&*panic))),
        };
        let max = self.handle.shared_of(req.from()).max_payload();
        let (outcome, body) = if body.len() > max {
            let why = format!(
                "reply of {} bytes exceeds the largest message ({max})",
                body.len()
            );
            (Outcome::Failed, Failure::message(why).body().clone())
        } else {
            (outcome, body)
        };
        let payload = Envelope::reply(call, outcome, body);
        self.out
            .push(self.handle.reply_out(req.from(), delivery, payload));
    }

    /// Hands the replies made to the driver.
    fn flush(&mut self) {
        if self.out.is_empty() {
            return;
        }
        if self
            .handle
            .send_replies(std::mem::take(&mut self.out))
            .is_err()
        {
            tracing::debug!("endpoint closed: replies not sent");
        }
    }
}

/// The text of a panic's payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        String::new()
    }
}

/// The requests handed to a server: on drop (the server stopped), those still queued go
/// back to the endpoint, held for the next server.
struct Queue {
    handle: Handle,
    rx: RequestRx,
}

impl Drop for Queue {
    fn drop(&mut self) {
        for req in self.rx.close() {
            self.handle.requeue(req);
        }
    }
}

/// A request whose handler runs: on drop without an answer (the server stopped), it goes
/// back to the endpoint.
struct Pending {
    handle: Arc<Handle>,
    req: Option<Request>,
}

impl Pending {
    fn new(handle: &Arc<Handle>, req: Request) -> Pending {
        Pending {
            handle: handle.clone(),
            req: Some(req),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(req) = self.req.take() {
            self.handle.requeue(req);
        }
    }
}

/// A running handler and its request.
struct Run<F> {
    pending: Option<Pending>,
    /// Never empty while the run is polled.
    fut: Pin<Box<Option<F>>>,
}

impl<F: Future> Future for Run<F> {
    type Output = (Pending, F::Output);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self
            .fut
            .as_mut()
            .as_pin_mut()
            .expect("polled after completion");
        let out = std::task::ready!(fut.poll(cx));
        let pending = self.pending.take().expect("polled after completion");
        Poll::Ready((pending, out))
    }
}

// `Run` holds its future pinned in a box: it is `Unpin` whatever the future.
impl<F> Unpin for Run<F> {}
