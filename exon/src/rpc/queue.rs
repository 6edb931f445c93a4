//! The requests on their way from the driver shards to the server (each shard's
//! [`Requests`], the server's [`RequestRx`]): each shard pushes a turn's requests under
//! one lock, the server takes every waiting one in a single swap.
//!
//! It replaces an unbounded channel, which paid a slot write, a permit and a read per
//! request (about 200 instructions a call, `endpoint_cost --rpc`).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::request::Request;

/// What the shards and the server share.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Request>,
    /// The server waiting for requests.
    waker: Option<Waker>,
    /// Shards that may still push ([`RequestTx`]s alive).
    senders: usize,
    /// The server stopped: pushes are refused.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No push or swap panics half-way: a poisoned lock holds a whole queue.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A new queue, with one sender for each of `shards` driver shards.
pub(crate) fn request_queue(shards: usize) -> (Vec<RequestTx>, RequestRx) {
    let shared = Arc::new(Shared::default());
    shared.lock().senders = shards;
    let txs = (0..shards)
        .map(|_| RequestTx {
            shared: shared.clone(),
        })
        .collect();
    let rx = RequestRx {
        shared,
        batch: VecDeque::new(),
    };
    (txs, rx)
}

/// A driver shard's side.
#[derive(Debug)]
pub(crate) struct RequestTx {
    shared: Arc<Shared>,
}

impl RequestTx {
    /// Moves every request of `from` to the server, waking it: `false` (and `from` left
    /// as it was) when the server stopped.
    pub(crate) fn push_all(&self, from: &mut VecDeque<Request>) -> bool {
        if from.is_empty() {
            return true;
        }
        let waker = {
            let mut s = self.shared.lock();
            if s.closed {
                return false;
            }
            if s.items.is_empty() {
                std::mem::swap(&mut s.items, from);
            } else {
                s.items.append(from);
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }
}

impl Drop for RequestTx {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            s.senders -= 1;
            if s.senders > 0 {
                return;
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The server's side.
#[derive(Debug)]
pub(crate) struct RequestRx {
    shared: Arc<Shared>,
    /// Taken from the queue, not yet handed to the server.
    batch: VecDeque<Request>,
}

impl RequestRx {
    /// The next request; `None` once every shard stopped pushing (the endpoint stopped, or
    /// another server took over) and none is left.
    pub(crate) async fn recv(&mut self) -> Option<Request> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Request>> {
        if let Some(r) = self.batch.pop_front() {
            return Poll::Ready(Some(r));
        }
        let mut s = self.shared.lock();
        std::mem::swap(&mut s.items, &mut self.batch);
        if let Some(r) = self.batch.pop_front() {
            return Poll::Ready(Some(r));
        }
        if s.senders == 0 {
            return Poll::Ready(None);
        }
        if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The next request if one is there, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Request> {
        if let Some(r) = self.batch.pop_front() {
            return Some(r);
        }
        let mut s = self.shared.lock();
        std::mem::swap(&mut s.items, &mut self.batch);
        drop(s);
        self.batch.pop_front()
    }

    /// The server stops: pushes are refused from now on, and the requests not handed to
    /// it yet are returned (for their shards to hold them for the next server).
    pub(crate) fn close(&mut self) -> VecDeque<Request> {
        let mut s = self.shared.lock();
        s.closed = true;
        s.waker = None;
        let mut left = std::mem::take(&mut self.batch);
        left.append(&mut s.items);
        left
    }
}

impl Drop for RequestRx {
    fn drop(&mut self) {
        // What is left is dropped: the server's own `Drop` hands it back first.
        self.shared.lock().closed = true;
    }
}

/// A driver's requests: handed to the server at the end of each turn, or held until one
/// serves.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    server: Option<RequestTx>,
    /// This turn's requests for the server.
    turn: VecDeque<Request>,
    /// Requests delivered while no server was there (or handed back by one that stopped).
    held: VecDeque<Request>,
}

impl Requests {
    /// A delivered request: to the server with the turn's others, or held.
    pub(crate) fn push(&mut self, r: Request) {
        if self.server.is_some() {
            self.turn.push_back(r);
        } else {
            self.held.push_back(r);
        }
    }

    /// The turn is over: its requests go to the server (held if it stopped).
    pub(crate) fn flush(&mut self) {
        let Some(tx) = &self.server else {
            return;
        };
        if !tx.push_all(&mut self.turn) {
            self.server = None;
            self.held.append(&mut self.turn);
        }
    }

    /// A server starts: the held requests go to it first.
    pub(crate) fn serve(&mut self, tx: RequestTx) {
        self.flush();
        self.server = Some(tx);
        let mut held = std::mem::take(&mut self.held);
        held.append(&mut self.turn);
        self.turn = held;
        self.flush();
    }

    /// Requests held for want of a server.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{DeliveryId, NodeId};
    use crate::rpc::wakes::Wakes;
    use bytes::Bytes;
    use std::task::Poll;

    const PEER: NodeId = NodeId::from_const(3);

    fn req(call: u64) -> Request {
        Request::new(PEER, call, Bytes::new(), DeliveryId::for_test(PEER, call))
    }

    fn calls(q: &VecDeque<Request>) -> Vec<u64> {
        q.iter().map(|r| r.reply_to().0).collect()
    }

    /// Requests pushed in batches by two shards reach the server each once, in each
    /// shard's order; the server learns the end once both shards are gone.
    #[test]
    fn requests_reach_the_server_once_and_the_end_comes_with_the_last_shard() {
        let (mut txs, mut rx) = request_queue(2);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(rx.poll_recv(&mut cx).is_pending());
        let mut a: VecDeque<Request> = (0..3).map(req).collect();
        assert!(txs[0].push_all(&mut a));
        assert!(a.is_empty());
        let mut b: VecDeque<Request> = (10..12).map(req).collect();
        assert!(txs[1].push_all(&mut b));
        let mut got = Vec::new();
        while let Some(r) = rx.try_recv() {
            got.push(r.reply_to().0);
        }
        assert_eq!(got, [0, 1, 2, 10, 11]);
        drop(txs.pop());
        assert!(rx.poll_recv(&mut cx).is_pending(), "one shard left");
        let mut c: VecDeque<Request> = [req(20)].into();
        assert!(txs[0].push_all(&mut c));
        drop(txs.pop());
        assert!(matches!(rx.poll_recv(&mut cx), Poll::Ready(Some(r)) if r.reply_to().0 == 20));
        assert!(matches!(rx.poll_recv(&mut cx), Poll::Ready(None)));
    }

    /// A server that stops gets back what it was not handed, and later pushes are
    /// refused with the requests left with the shard.
    #[test]
    fn a_stopped_server_hands_back_the_rest_and_refuses_pushes() {
        let (txs, mut rx) = request_queue(1);
        let mut a: VecDeque<Request> = (0..4).map(req).collect();
        assert!(txs[0].push_all(&mut a));
        assert_eq!(rx.try_recv().map(|r| r.reply_to().0), Some(0));
        let mut b: VecDeque<Request> = [req(7)].into();
        assert!(txs[0].push_all(&mut b));
        assert_eq!(calls(&rx.close()), [1, 2, 3, 7]);
        let mut c: VecDeque<Request> = [req(8)].into();
        assert!(!txs[0].push_all(&mut c));
        assert_eq!(calls(&c), [8], "left with the shard");
    }

    #[test]
    fn a_push_wakes_the_waiting_server() {
        let (txs, mut rx) = request_queue(1);
        let count = Wakes::new();
        let waker = count.waker();
        assert!(rx.poll_recv(&mut Context::from_waker(&waker)).is_pending());
        let mut a: VecDeque<Request> = [req(1)].into();
        assert!(txs[0].push_all(&mut a));
        assert_eq!(count.count(), 1);
        drop(txs);
        assert_eq!(count.count(), 1, "not waiting: no second wake");
    }
}
