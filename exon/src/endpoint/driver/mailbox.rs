//! A driver shard's mailbox ([`mailbox`]): handles push commands under a short lock, and
//! the driver takes every waiting one in a single swap, woken only when the mailbox goes
//! from empty to not empty.
//!
//! It replaces an unbounded channel, which paid a slot write, a waker and a slot read per
//! command (about 250 instructions a send, `endpoint_cost`). The order is the order of the
//! pushes: one queue for every kind of command, so a send never passes an earlier
//! `add_peer` or `close`.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::graveyard::Graveyard;
use crate::proto::Payload;

/// What the two sides share.
struct Inner<T> {
    /// The pushed and not yet taken, oldest first.
    queue: Mutex<Queue<T>>,
    /// Woken when the queue goes from empty to not empty, and when the last sender goes.
    notify: Notify,
    /// The strong senders alive: none left (with the queue empty) is the end of input.
    senders: AtomicUsize,
}

/// The queue and whether its receiver is gone.
struct Queue<T> {
    items: VecDeque<T>,
    /// The receiver was dropped: pushes are refused.
    closed: bool,
    /// Acknowledged payloads the driver left for the pushes to free, one each.
    dead: Graveyard,
}

impl<T> Inner<T> {
    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        // A push or a swap cannot panic half-way: a poisoned lock holds a whole queue.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A new mailbox: its sending and receiving sides.
pub(crate) fn mailbox<T>() -> (MailboxTx<T>, MailboxRx<T>) {
    let inner = Arc::new(Inner {
        queue: Mutex::new(Queue {
            items: VecDeque::new(),
            closed: false,
            dead: Graveyard::default(),
        }),
        notify: Notify::new(),
        senders: AtomicUsize::new(1),
    });
    let rx = MailboxRx {
        inner: inner.clone(),
        taken: VecDeque::new(),
    };
    (MailboxTx { inner }, rx)
}

/// The sending side (cloneable): while one is alive, the receiver waits for more.
pub(crate) struct MailboxTx<T> {
    inner: Arc<Inner<T>>,
}

impl<T> MailboxTx<T> {
    /// Pushes `item`; gives it back when the receiver is gone. Always inline: a send's
    /// command is built in place rather than copied into a call. Takes one of the
    /// payloads the driver buried ([`MailboxRx::bury`]) under the same lock, and frees it
    /// after: on the pushing thread, after its own allocations.
    #[inline(always)]
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        let (was_empty, dead) = {
            let mut q = self.inner.lock();
            if q.closed {
                return Err(item);
            }
            let was_empty = q.items.is_empty();
            q.items.push_back(item);
            (was_empty, q.dead.pop())
        };
        drop(dead);
        if was_empty {
            self.inner.notify.notify_one();
        }
        Ok(())
    }

    /// A sender that does not keep the receiver waiting.
    pub(crate) fn downgrade(&self) -> WeakMailboxTx<T> {
        WeakMailboxTx {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Clone for MailboxTx<T> {
    fn clone(&self) -> Self {
        self.inner.senders.fetch_add(1, Ordering::Relaxed);
        MailboxTx {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Drop for MailboxTx<T> {
    fn drop(&mut self) {
        if self.inner.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The last one: the receiver, once it has taken what waits, sees the end.
            self.inner.notify.notify_one();
        }
    }
}

impl<T> std::fmt::Debug for MailboxTx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailboxTx").finish_non_exhaustive()
    }
}

/// A sending side that does not count as one: it pushes only while a strong sender lives.
pub(crate) struct WeakMailboxTx<T> {
    inner: Arc<Inner<T>>,
}

impl<T> WeakMailboxTx<T> {
    /// A strong sender, unless none is left.
    pub(crate) fn upgrade(&self) -> Option<MailboxTx<T>> {
        let mut n = self.inner.senders.load(Ordering::Acquire);
        loop {
            if n == 0 {
                return None;
            }
            match self.inner.senders.compare_exchange_weak(
                n,
                n + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(MailboxTx {
                        inner: self.inner.clone(),
                    })
                }
                Err(now) => n = now,
            }
        }
    }

    /// How many strong senders are alive.
    pub(crate) fn strong_count(&self) -> usize {
        self.inner.senders.load(Ordering::Acquire)
    }
}

impl<T> std::fmt::Debug for WeakMailboxTx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakMailboxTx").finish_non_exhaustive()
    }
}

impl<T> Clone for WeakMailboxTx<T> {
    fn clone(&self) -> Self {
        WeakMailboxTx {
            inner: self.inner.clone(),
        }
    }
}

/// Why [`MailboxRx::try_recv`] returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TryRecvError {
    /// Nothing waits now.
    Empty,
    /// Nothing waits and no strong sender is left: nothing ever will.
    Disconnected,
}

/// The receiving side (the driver's).
pub(crate) struct MailboxRx<T> {
    inner: Arc<Inner<T>>,
    /// Taken from the queue in one swap, handed out one at a time.
    taken: VecDeque<T>,
}

impl<T> MailboxRx<T> {
    /// The oldest item pushed and not yet received, without waiting. Takes every waiting
    /// item under one lock when those taken before are all handed out.
    #[cfg(test)]
    pub(crate) fn try_recv(&mut self) -> Result<T, TryRecvError> {
        // `front` returns a queue holding an item.
        self.front()?.pop_front().ok_or(TryRecvError::Empty)
    }

    /// The items taken and not yet received, oldest first, never empty: the driver takes
    /// them from the front, one at a time or a run of them in place (sends handed to the
    /// core together move from here straight to their last place, with no copy into a run
    /// of their own). When those taken before are all handed out, takes every waiting item
    /// under one lock. `Err` as [`try_recv`](Self::try_recv)'s when nothing waits.
    #[inline]
    pub(crate) fn front(&mut self) -> Result<&mut VecDeque<T>, TryRecvError> {
        if self.taken.is_empty() {
            // Read before looking: a sender that left did so after its last push.
            let no_senders = self.inner.senders.load(Ordering::Acquire) == 0;
            {
                let mut q = self.inner.lock();
                // Ours is empty: the queue gets its capacity back.
                std::mem::swap(&mut q.items, &mut self.taken);
            }
            if self.taken.is_empty() {
                return Err(if no_senders {
                    TryRecvError::Disconnected
                } else {
                    TryRecvError::Empty
                });
            }
        }
        Ok(&mut self.taken)
    }

    /// Leaves payloads of `released` (acknowledged messages', each small) for the next
    /// pushes to free, one each, as many as the graveyard has room for: the rest stays in
    /// `released`, and with `expire` those no push took go to `stale`, for the caller to
    /// free outside the lock (`Graveyard::bury`). Returns how many wait.
    pub(crate) fn bury(
        &self,
        released: &mut Vec<Payload>,
        stale: &mut Vec<Payload>,
        expire: bool,
    ) -> usize {
        self.inner.lock().dead.bury(released, stale, expire)
    }

    /// Waits until an item waits ([`front`](Self::front) is not empty: `true`), or until
    /// nothing waits and no strong sender is left (`false`). Cancel safe: it takes nothing.
    pub(crate) async fn ready(&mut self) -> bool {
        loop {
            match self.front() {
                Ok(_) => return true,
                Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => {}
            }
            let inner = self.inner.clone();
            let mut notified = pin!(inner.notify.notified());
            // Registered before the second look: a push in between is not missed.
            notified.as_mut().enable();
            match self.front() {
                Ok(_) => return true,
                Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => {}
            }
            notified.await;
        }
    }

    /// The oldest item not yet received, waiting for one; `None` once nothing waits and no
    /// strong sender is left. Cancel safe: an item is taken only by the call that returns
    /// it.
    #[cfg(test)]
    pub(crate) async fn recv(&mut self) -> Option<T> {
        if self.ready().await {
            self.try_recv().ok()
        } else {
            None
        }
    }
}

impl<T> Drop for MailboxRx<T> {
    fn drop(&mut self) {
        // Pushes from now on are refused; what waits is dropped here (a command's reply
        // channel tells its sender the driver is gone), outside the lock.
        let left = {
            let mut q = self.inner.lock();
            q.closed = true;
            (std::mem::take(&mut q.items), q.dead.take_all())
        };
        drop(left);
    }
}

impl<T> std::fmt::Debug for MailboxRx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MailboxRx").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items come out in the order they went in, from every sender, each exactly once,
    /// across threads pushing while the receiver takes (each thread's own order kept).
    #[test]
    fn every_item_once_in_each_senders_order() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (tx, mut rx) = mailbox::<(usize, u64)>();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        tx.send((t, i)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let got = rt.block_on(async {
            let mut next = [0u64; 4];
            let mut n = 0;
            while let Some((t, i)) = rx.recv().await {
                assert_eq!(i, next[t], "thread {t}'s order");
                next[t] += 1;
                n += 1;
            }
            n
        });
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            got, 80_000,
            "every item, and the end once every sender left"
        );
    }

    /// One sender's commands keep their order whatever their kind: the property the
    /// driver needs (a send after an `add_peer` never passes it).
    #[test]
    fn one_queue_keeps_the_order_of_pushes() {
        let (tx, mut rx) = mailbox::<&'static str>();
        for s in ["add_peer", "send", "close"] {
            tx.send(s).unwrap();
        }
        let got: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(got, ["add_peer", "send", "close"]);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "a sender is alive");
        drop(tx);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    /// A weak sender pushes while a strong one lives, and cannot revive a mailbox whose
    /// senders all left; a dropped receiver refuses pushes and drops what waited.
    #[test]
    fn weak_senders_and_a_dropped_receiver() {
        let (tx, rx) = mailbox::<Arc<()>>();
        let weak = tx.downgrade();
        assert_eq!(weak.strong_count(), 1);
        let item = Arc::new(());
        weak.upgrade().unwrap().send(item.clone()).unwrap();
        assert_eq!(Arc::strong_count(&item), 2, "waiting in the mailbox");
        drop(rx);
        assert_eq!(Arc::strong_count(&item), 1, "dropped with the receiver");
        assert!(
            tx.send(item.clone()).is_err(),
            "refused once the receiver is gone"
        );
        drop(tx);
        assert!(weak.upgrade().is_none(), "no strong sender left");
        assert_eq!(weak.strong_count(), 0);
    }

    /// A receiver waiting on an empty mailbox wakes for a push from another thread, and
    /// for the last sender leaving.
    #[test]
    fn a_waiting_receiver_wakes_for_a_push_and_for_the_end() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (tx, mut rx) = mailbox::<u32>();
        rt.block_on(async {
            let pusher = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                tx.send(7).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
                drop(tx);
            });
            let within = std::time::Duration::from_secs(5);
            let first = tokio::time::timeout(within, rx.recv()).await;
            assert_eq!(first, Ok(Some(7)));
            let end = tokio::time::timeout(within, rx.recv()).await;
            assert_eq!(end, Ok(None));
            pusher.join().unwrap();
        });
    }
}
