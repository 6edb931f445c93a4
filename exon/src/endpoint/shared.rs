//! State shared by the handles and the driver, so that a `send` needs no round trip to the
//! driver: closing flag, message ids, destinations whose queue is full (and a notification
//! when one has room again), and send credits.

use std::collections::{BTreeSet, HashSet};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore};

use crate::proto::{MsgId, NodeId};

/// What handles and the driver share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Largest payload the core accepts.
    pub(crate) max_payload: usize,
    /// Deadline of sends that give none.
    pub(crate) default_deadline: Option<std::time::Duration>,
    /// Set once the endpoint closes: new sends are refused at once.
    closing: AtomicBool,
    /// The next message id handed out.
    next_id: AtomicU64,
    /// Destinations whose queue is full: sends to them wait for the driver's answer.
    blocked: Mutex<HashSet<NodeId>>,
    /// Size of `blocked`, read without the lock on the fast path.
    blocked_len: AtomicUsize,
    /// Notified when a destination leaves `blocked`, and on close.
    room: Notify,
    /// Credits for sends that do not wait for the driver: one per send command in the
    /// channel, returned when the driver takes it. Closed when the endpoint closes.
    pub(crate) credits: Semaphore,
    /// The number of credits there are (see [`Shared::credit_weight`]).
    credit_cap: usize,
    /// Delivered messages the application took from the endpoint, counted in channel order
    /// (the driver acknowledges that many), with [`STOPPED`] set once the driver stopped:
    /// from then on nothing more is taken (or acknowledged).
    taken: AtomicU64,
    /// Notified when the application takes a message.
    pub(crate) taken_notify: Notify,
    /// Node ids with a known address (added, or learned from their datagrams): a send to
    /// any other fails at once.
    known: Mutex<HashSet<NodeId>>,
    /// Deliveries the application acknowledged (ack-after-processing mode), for the driver.
    acked: Mutex<Vec<crate::proto::DeliveryId>>,
    /// Peers reported unreachable, published to watchers.
    pub(crate) unreachable: tokio::sync::watch::Sender<BTreeSet<NodeId>>,
}

/// Bytes of payload one send credit stands for.
const CREDIT_BYTES: usize = 64 * 1024;

/// The bit of `Shared::taken` that says the driver stopped.
const STOPPED: u64 = 1 << 63;

impl Shared {
    pub(crate) fn new(
        max_payload: usize,
        send_buffer: usize,
        default_deadline: Option<std::time::Duration>,
    ) -> Shared {
        Shared {
            max_payload,
            default_deadline,
            closing: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            blocked: Mutex::new(HashSet::new()),
            blocked_len: AtomicUsize::new(0),
            room: Notify::new(),
            credits: Semaphore::new(send_buffer.max(1)),
            credit_cap: send_buffer.max(1),
            taken: AtomicU64::new(0),
            taken_notify: Notify::new(),
            known: Mutex::new(HashSet::new()),
            acked: Mutex::new(Vec::new()),
            unreachable: tokio::sync::watch::Sender::new(BTreeSet::new()),
        }
    }

    /// Credits a send of `len` bytes takes: one per started 64 KiB, so that the channel to
    /// the driver holds at most `send_buffer` small messages or `send_buffer` × 64 KiB of
    /// large ones (never more credits than exist).
    pub(crate) fn credit_weight(&self, len: usize) -> u32 {
        let w = 1 + len / CREDIT_BYTES;
        w.min(self.credit_cap) as u32
    }

    /// The application acknowledged delivery `id` (ack-after-processing mode).
    pub(crate) fn ack(&self, id: crate::proto::DeliveryId) {
        self.acked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(id);
        self.taken_notify.notify_one();
    }

    /// Takes the acknowledgements made since the last call.
    pub(crate) fn take_acked(&self, into: &mut Vec<crate::proto::DeliveryId>) {
        let mut v = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        if !v.is_empty() {
            std::mem::swap(&mut *v, into);
        }
    }

    /// Publishes that `peer` is (`true`) or is no longer unreachable.
    pub(crate) fn set_unreachable(&self, peer: NodeId, unreachable: bool) {
        self.unreachable.send_if_modified(|set| {
            if unreachable {
                set.insert(peer)
            } else {
                set.remove(&peer)
            }
        });
    }

    /// `peer` has a known address from now on.
    pub(crate) fn know(&self, peer: NodeId) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(peer);
    }

    /// `peer`'s address was forgotten (pruned with its records): sends to it are refused
    /// again until it is added or speaks.
    pub(crate) fn forget(&self, peer: NodeId) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&peer);
    }

    /// Whether `peer` has a known address.
    pub(crate) fn is_known(&self, peer: NodeId) -> bool {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&peer)
    }

    /// The application took the next message from the delivery channel. Returns false if
    /// the driver has stopped: the message was reported as never taken, and is not handed
    /// out. Atomic against [`stop_taking`](Self::stop_taking): each message is either
    /// counted as taken (and acknowledged) or reported undelivered, never both.
    pub(crate) fn take_one(&self) -> bool {
        let ok = self
            .taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                (v & STOPPED == 0).then_some(v + 1)
            })
            .is_ok();
        if ok {
            self.taken_notify.notify_one();
        }
        ok
    }

    /// Messages taken so far.
    pub(crate) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Acquire) & !STOPPED
    }

    /// Stops counting takes; returns the final count.
    pub(crate) fn stop_taking(&self) -> u64 {
        self.taken.fetch_or(STOPPED, Ordering::AcqRel) & !STOPPED
    }

    /// A fresh message id (unique within the endpoint, increasing).
    pub(crate) fn next_id(&self) -> MsgId {
        MsgId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Refuses new sends from now on, and wakes senders waiting for credits or room.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.credits.close();
        self.room.notify_waiters();
    }

    /// Waits while `to` is blocked (its queue full) and the endpoint open.
    pub(crate) async fn wait_for_room(&self, to: NodeId) {
        if !self.is_blocked(to) {
            return;
        }
        loop {
            let mut notified = pin!(self.room.notified());
            // Registered before the check: an unblocking in between is not missed.
            notified.as_mut().enable();
            if !self.is_blocked(to) || self.is_closing() {
                return;
            }
            notified.await;
        }
    }

    /// Whether sends to `to` must wait for the driver (its queue is full).
    pub(crate) fn is_blocked(&self, to: NodeId) -> bool {
        self.blocked_len.load(Ordering::Acquire) != 0 && self.lock().contains(&to)
    }

    /// Marks `to` as full (`true`) or as having room again (`false`).
    pub(crate) fn set_blocked(&self, to: NodeId, blocked: bool) {
        let mut set = self.lock();
        if blocked {
            set.insert(to);
        } else {
            set.remove(&to);
        }
        self.blocked_len.store(set.len(), Ordering::Release);
        drop(set);
        if !blocked {
            self.room.notify_waiters();
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<NodeId>> {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Closes the shared state when the driver goes away, however it goes (a dropped runtime
/// included), so that no sender waits for credits forever.
pub(crate) struct CloseOnDrop(pub(crate) std::sync::Arc<Shared>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}
