//! [`Client`]: calls to one node as a `tower::Service`, ready when the destination's queue
//! has room.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tower_service::Service;

use super::error::CallError;
use crate::endpoint::{Error, Handle};
use crate::proto::NodeId;

/// Calls to node `to` as a `tower::Service<Bytes, Response = Bytes, Error = CallError>`
/// ([`Handle::client`]). `poll_ready` reflects exon's back-pressure: it is pending while the
/// destination's queue is full (no room for another message in the core), and fails with
/// [`CallError::Refused`] once the endpoint closes. Cheap to clone (each clone waits for
/// room on its own).
///
/// # Layers
/// tower's `timeout`, `limit` (concurrency, rate), `balance` (over several servers, with
/// [`in_flight`](Self::in_flight) or tower's `PendingRequests` as the load) and `buffer`
/// layers apply as they are. Prefer [`with_deadline`](Self::with_deadline) to a timeout
/// layer: a deadline tells what happened ([`CallError`]), a timeout only that time ran
/// out. **Never tower's `retry` layer**: a retry sends a new request, which the server
/// executes again. Retry yourself, and only when [`CallError::executed`] is `Some(false)`.
pub struct Client {
    handle: Handle,
    to: NodeId,
    within: Option<Duration>,
    in_flight: Arc<AtomicUsize>,
    /// Waiting for the destination to have room (`poll_ready`).
    room: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl Clone for Client {
    fn clone(&self) -> Client {
        Client {
            handle: self.handle.clone(),
            to: self.to,
            within: self.within,
            in_flight: self.in_flight.clone(),
            room: None,
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("to", &self.to)
            .field("within", &self.within)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Handle {
    /// Calls to node `to` as a `tower::Service` (see [`Client`]).
    pub fn client(&self, to: NodeId) -> Client {
        Client {
            handle: self.clone(),
            to,
            within: None,
            in_flight: Arc::default(),
            room: None,
        }
    }
}

impl Client {
    /// Calls made through this client (and its clones) get deadline `within`, instead of
    /// [`EndpointConfig::call_deadline`](crate::endpoint::EndpointConfig::call_deadline).
    pub fn with_deadline(mut self, within: Duration) -> Client {
        self.within = Some(within);
        self
    }

    /// The node called.
    pub fn to(&self) -> NodeId {
        self.to
    }

    /// Calls of this client and its clones not finished: a load for balancers.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

impl Service<Bytes> for Client {
    type Response = Bytes;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<Bytes, CallError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        loop {
            let shared = self.handle.shared_of(self.to);
            if shared.is_closing() {
                self.room = None;
                return Poll::Ready(Err(CallError::Refused(Error::Closed)));
            }
            if !shared.is_blocked(self.to) {
                self.room = None;
                return Poll::Ready(Ok(()));
            }
            // Blocked: wait for room (the only case that needs a shared handle of its own).
            let to = self.to;
            let shared = shared.clone();
            let room = self
                .room
                .get_or_insert_with(|| Box::pin(async move { shared.wait_for_room(to).await }));
            std::task::ready!(room.as_mut().poll(cx));
            self.room = None;
        }
    }

    fn call(&mut self, request: Bytes) -> Self::Future {
        let (handle, to, within) = (self.handle.clone(), self.to, self.within);
        let guard = InFlight::new(self.in_flight.clone());
        Box::pin(async move {
            let _guard = guard;
            match within {
                Some(w) => handle.call_within(to, request, w).await,
                None => handle.call(to, request).await,
            }
        })
    }
}

/// Counts a call in flight until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(n: Arc<AtomicUsize>) -> InFlight {
        n.fetch_add(1, Ordering::Relaxed);
        InFlight(n)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
