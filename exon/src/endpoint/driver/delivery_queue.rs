//! A driver shard's delivered messages on their way to the application
//! ([`delivery_queue`]): bounded; the driver pushes a turn's deliveries under one lock, the
//! application takes every waiting one in a single swap and counts each out as it hands it
//! on.
//!
//! It replaces a bounded channel, which paid a slot write, a slot read, a permit's return
//! under the channel's lock and three moves of the message per delivery (about 300
//! instructions, `endpoint_cost`).

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;

/// What the two sides share.
struct Inner<T> {
    state: Mutex<State<T>>,
    /// Messages pushed and not yet handed out by the receiver (waiting here, or in the
    /// receiver's batch): at most `cap`.
    outstanding: AtomicUsize,
    cap: usize,
    /// Woken when `outstanding` drops below `cap`, and when the receiver goes.
    room: Notify,
}

struct State<T> {
    items: VecDeque<T>,
    /// The receiver waiting for the queue to be not empty.
    waker: Option<Waker>,
    /// The receiver closed or dropped: pushes are refused.
    rx_closed: bool,
    /// The sender dropped: once the queue is empty, nothing more comes.
    tx_closed: bool,
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // No push or swap panics half-way: a poisoned lock holds a whole queue.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A new queue holding at most `cap` (at least 1) messages not yet handed out.
pub(crate) fn delivery_queue<T>(cap: usize) -> (DeliveryTx<T>, DeliveryRx<T>) {
    let inner = Arc::new(Inner {
        state: Mutex::new(State {
            items: VecDeque::new(),
            waker: None,
            rx_closed: false,
            tx_closed: false,
        }),
        outstanding: AtomicUsize::new(0),
        cap: cap.max(1),
        room: Notify::new(),
    });
    let rx = DeliveryRx {
        inner: inner.clone(),
        batch: VecDeque::new(),
    };
    (DeliveryTx { inner }, rx)
}

/// What [`DeliveryTx::push_from`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Every message went in.
    All,
    /// The queue is full: the rest wait.
    Full,
    /// The receiver is gone: nothing goes in.
    Closed,
}

/// The driver's side.
pub(crate) struct DeliveryTx<T> {
    inner: Arc<Inner<T>>,
}

impl<T> DeliveryTx<T> {
    /// Moves messages from the front of `from` into the queue while it has room, under one
    /// lock, calling `went` with each one first. All of them at once when they fit (a swap
    /// of the two queues when the queue is empty, else one append): no message is moved
    /// one by one.
    pub(crate) fn push_from(&self, from: &mut VecDeque<T>, mut went: impl FnMut(&T)) -> Pushed {
        if from.is_empty() {
            return Pushed::All;
        }
        let waker = {
            let mut s = self.inner.lock();
            if s.rx_closed {
                return Pushed::Closed;
            }
            let used = self.inner.outstanding.load(Ordering::Acquire);
            let room = self.inner.cap.saturating_sub(used).min(from.len());
            from.iter().take(room).for_each(&mut went);
            if room == from.len() {
                if s.items.is_empty() {
                    std::mem::swap(&mut s.items, from);
                } else {
                    s.items.append(from);
                }
            } else {
                s.items.extend(from.drain(..room));
            }
            self.inner.outstanding.fetch_add(room, Ordering::AcqRel);
            if room > 0 {
                s.waker.take()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
        if from.is_empty() {
            Pushed::All
        } else {
            Pushed::Full
        }
    }

    /// Whether the receiver is gone (nothing pushed will be handed out).
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.lock().rx_closed
    }

    /// Waits until the queue has room, or the receiver is gone (a future that holds the
    /// queue, not this sender).
    pub(crate) fn room(&self) -> impl std::future::Future<Output = ()> + Send + 'static
    where
        T: Send + 'static,
    {
        let inner = self.inner.clone();
        async move {
            loop {
                let mut notified = pin!(inner.room.notified());
                // Registered before the look: room made in between is not missed.
                notified.as_mut().enable();
                if inner.outstanding.load(Ordering::Acquire) < inner.cap || inner.lock().rx_closed {
                    return;
                }
                notified.await;
            }
        }
    }
}

impl<T> Drop for DeliveryTx<T> {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.inner.lock();
            s.tx_closed = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The application's side.
pub(crate) struct DeliveryRx<T> {
    inner: Arc<Inner<T>>,
    /// Taken from the queue in one swap, handed out one at a time.
    batch: VecDeque<T>,
}

impl<T> DeliveryRx<T> {
    /// Whether a message is ready for [`pop`](Self::pop): `Ready(false)` once the sender
    /// is gone and nothing is left (or after [`close`](Self::close)).
    #[inline]
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.batch.is_empty() {
            return self.refill(cx);
        }
        Poll::Ready(true)
    }

    /// The next message, counted out, if one is ready (after
    /// [`poll_ready`](Self::poll_ready) said so): apart from the readiness, so that the
    /// caller decides before the message is moved out (one move fewer).
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        let item = self.batch.pop_front();
        self.handed_out(usize::from(item.is_some()));
        item
    }

    /// The next message, or `None` once the sender is gone and nothing is left (or after
    /// [`close`](Self::close)).
    #[cfg(test)]
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        match self.poll_ready(cx) {
            Poll::Ready(true) => Poll::Ready(self.pop()),
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Up to `limit` messages appended to `buf`: how many, 0 once the sender is gone and
    /// nothing is left (or with `limit` 0).
    pub(crate) fn poll_recv_many(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<T>,
        limit: usize,
    ) -> Poll<usize> {
        if limit == 0 {
            return Poll::Ready(0);
        }
        match self.poll_ready(cx) {
            Poll::Ready(true) => {}
            Poll::Ready(false) => return Poll::Ready(0),
            Poll::Pending => return Poll::Pending,
        }
        let n = limit.min(self.batch.len());
        buf.extend(self.batch.drain(..n));
        self.handed_out(n);
        Poll::Ready(n)
    }

    /// Counts `n` messages out; wakes the driver if that made room.
    #[inline]
    fn handed_out(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.inner.outstanding.fetch_sub(n, Ordering::AcqRel);
        if before >= self.inner.cap && before - n < self.inner.cap {
            self.inner.room.notify_one();
        }
    }

    /// Takes what waits into the (empty) batch: `Ready(true)` if it got any,
    /// `Ready(false)` once nothing ever will, else registers to be woken.
    fn refill(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut s = self.inner.lock();
        if s.rx_closed {
            return Poll::Ready(false);
        }
        std::mem::swap(&mut s.items, &mut self.batch);
        if !self.batch.is_empty() {
            return Poll::Ready(true);
        }
        if s.tx_closed {
            return Poll::Ready(false);
        }
        if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Stops taking: pushes are refused from now on, and what waits (here and in the
    /// queue) is dropped, never handed out.
    pub(crate) fn close(&mut self) {
        let left = {
            let mut s = self.inner.lock();
            s.rx_closed = true;
            s.waker = None;
            std::mem::take(&mut s.items)
        };
        drop(left);
        self.batch.clear();
        // A driver waiting for room sees the receiver gone.
        self.inner.room.notify_one();
    }
}

impl<T> Drop for DeliveryRx<T> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<T> std::fmt::Debug for DeliveryRx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryRx")
            .field("batch", &self.batch.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    fn pending(items: impl IntoIterator<Item = u32>) -> VecDeque<u32> {
        items.into_iter().collect()
    }

    /// At most `cap` messages are out at once (in the queue or in the receiver's batch);
    /// handing one out makes room for one more; order is kept.
    #[test]
    fn at_most_cap_out_and_order_kept() {
        let (tx, mut rx) = delivery_queue::<u32>(3);
        let mut from = pending(0..5);
        let mut went = Vec::new();
        assert_eq!(tx.push_from(&mut from, |t| went.push(*t)), Pushed::Full);
        assert_eq!(went, [0, 1, 2]);
        assert_eq!(rx.poll_recv(&mut cx()), Poll::Ready(Some(0)));
        assert_eq!(tx.push_from(&mut from, |t| went.push(*t)), Pushed::Full);
        assert_eq!(went, [0, 1, 2, 3], "room for one: the one handed out");
        let mut buf = Vec::new();
        assert_eq!(rx.poll_recv_many(&mut cx(), &mut buf, 10), Poll::Ready(2));
        assert_eq!(buf, [1, 2], "the batch taken before, first");
        assert_eq!(tx.push_from(&mut from, |t| went.push(*t)), Pushed::All);
        assert_eq!(rx.poll_recv_many(&mut cx(), &mut buf, 10), Poll::Ready(2));
        assert_eq!(buf, [1, 2, 3, 4]);
        assert_eq!(rx.poll_recv(&mut cx()), Poll::Pending);
        drop(tx);
        assert_eq!(
            rx.poll_recv(&mut cx()),
            Poll::Ready(None),
            "the sender gone"
        );
    }

    /// Pushes that fit go in whole (a swap into an empty queue, an append behind what
    /// waits), each told first, in order.
    #[test]
    fn whole_pushes_keep_order_behind_what_waits() {
        let (tx, mut rx) = delivery_queue::<u32>(10);
        let mut went = Vec::new();
        let mut from = pending(0..2);
        assert_eq!(tx.push_from(&mut from, |t| went.push(*t)), Pushed::All);
        assert!(from.is_empty());
        from.extend([2, 3, 4]);
        assert_eq!(tx.push_from(&mut from, |t| went.push(*t)), Pushed::All);
        assert!(from.is_empty());
        assert_eq!(went, [0, 1, 2, 3, 4]);
        let mut buf = Vec::new();
        assert_eq!(rx.poll_recv_many(&mut cx(), &mut buf, 10), Poll::Ready(5));
        assert_eq!(buf, [0, 1, 2, 3, 4]);
        from.extend(5..16);
        assert_eq!(tx.push_from(&mut from, |t| went.push(*t)), Pushed::Full);
        assert_eq!(from, [15], "one more than the room waits");
    }

    /// A closed receiver refuses pushes, drops what waited, and hands out nothing more; a
    /// driver waiting for room wakes.
    #[test]
    fn a_closed_receiver_refuses_and_drops() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (tx, mut rx) = delivery_queue::<Arc<()>>(1);
        let item = Arc::new(());
        let mut from: VecDeque<_> = [item.clone(), item.clone()].into();
        assert_eq!(tx.push_from(&mut from, |_| {}), Pushed::Full);
        rt.block_on(async {
            let wait = tokio::spawn(async move {
                tx.room().await;
                tx
            });
            tokio::task::yield_now().await;
            rx.close();
            let tx = tokio::time::timeout(std::time::Duration::from_secs(5), wait)
                .await
                .expect("woken")
                .unwrap();
            assert!(tx.is_closed());
            assert_eq!(tx.push_from(&mut from, |_| {}), Pushed::Closed);
        });
        drop(from);
        assert_eq!(Arc::strong_count(&item), 1, "what waited was dropped");
        assert_eq!(rx.poll_recv(&mut cx()), Poll::Ready(None));
    }

    /// Across threads: every message once, in order, with the queue full most of the time
    /// (the driver waits for room, the receiver for messages).
    #[test]
    fn every_message_once_in_order_across_threads() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let (tx, mut rx) = delivery_queue::<u32>(8);
        rt.block_on(async {
            let driver = tokio::spawn(async move {
                let mut from = pending(0..50_000);
                while tx.push_from(&mut from, |_| {}) != Pushed::All {
                    tx.room().await;
                }
            });
            let mut next = 0;
            while let Some(i) = std::future::poll_fn(|cx| rx.poll_recv(cx)).await {
                assert_eq!(i, next);
                next += 1;
            }
            assert_eq!(next, 50_000);
            driver.await.unwrap();
        });
    }
}
