//! State shared by the handles and the driver, so that a `send` needs no round trip to the
//! driver: closing flag, message ids, destinations whose queue is full (and a notification
//! when one has room again), and send credits.

use std::collections::{BTreeSet, HashSet};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, Semaphore};

use crate::endpoint::api::own_line::OwnLine;
use crate::proto::{MsgId, NodeId};

/// What handles and the driver share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Largest payload the core accepts.
    max_payload: usize,
    /// Deadline of sends that give none.
    default_deadline: Option<std::time::Duration>,
    /// Set once the endpoint closes: new sends are refused at once.
    closing: AtomicBool,
    /// The next message id handed out (taken for every send: on lines of its own).
    next_id: OwnLine<AtomicU64>,
    /// Destinations whose queue is full: sends to them wait for the driver's answer.
    blocked: Mutex<PeerSet>,
    /// Size of `blocked`, read without the lock on the fast path.
    blocked_len: AtomicUsize,
    /// Notified when a destination leaves `blocked`, and on close.
    room: Notify,
    /// Credits for sends that do not wait for the driver: one per send command in the
    /// channel, returned when the driver takes it. Closed when the endpoint closes.
    credits: Semaphore,
    /// The number of credits there are (see [`Shared::credit_weight`]).
    credit_cap: usize,
    /// Delivered messages the application took from the endpoint, counted in channel order
    /// (the driver acknowledges that many), with [`STOPPED`] set once the driver stopped:
    /// from then on nothing more is taken (or acknowledged).
    taken: AtomicU64,
    /// Notified when the application takes a message while the driver waits for takes
    /// ([`taken_waiter`](Self::taken_waiter)), and when it acknowledges one.
    taken_notify: Notify,
    /// The driver is about to wait or waits (set by [`Shared::wait_for_takes`], cleared by
    /// the first take after it): only that take notifies. A busy driver counts takes at
    /// its next turn anyway, so a take costs no wake-up while it runs.
    taken_waiter: AtomicBool,
    /// Node ids with a known address (added, or learned from their datagrams): a send to
    /// any other fails at once.
    known: Mutex<PeerSet>,
    /// A direct-mapped cache of `known`, read without the lock on the send path: a slot holds
    /// a known id (or [`EMPTY`]). Written only under the lock of `known`, so a peer forgotten
    /// (which clears its slot under the lock) is never left cached.
    hot: [AtomicU64; HOT_SLOTS],
    /// Deliveries the application acknowledged (ack-after-processing mode), for the driver.
    acked: Mutex<Vec<crate::proto::DeliveryId>>,
    /// Peers reported unreachable, published to watchers (one set for every shard of an
    /// endpoint: each shard adds and removes only the peers it owns).
    unreachable: Arc<tokio::sync::watch::Sender<BTreeSet<NodeId>>>,
    /// The size of the send buffer (the credits' total).
    send_buffer: usize,
    /// Durable mode: receipts learn when their message is stored.
    durable: AtomicBool,
}

/// Bytes of payload one send credit stands for.
const CREDIT_BYTES: usize = 64 * 1024;

/// A set of node ids hashed as the core's maps are.
type PeerSet = HashSet<NodeId, foldhash::fast::RandomState>;

/// The bit of `Shared::taken` that says the driver stopped.
const STOPPED: u64 = 1 << 63;

/// Slots of the cache of known peers.
const HOT_SLOTS: usize = 64;
/// An empty slot of that cache: above [`NodeId::MAX`], so never a node id.
const EMPTY: u64 = u64::MAX;

/// The cache slot of `peer`.
fn hot_slot(peer: NodeId) -> usize {
    (peer.get().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % HOT_SLOTS
}

impl Shared {
    /// The state of one driver shard; `unreachable` is the endpoint's watch of unreachable
    /// peers, shared by its shards.
    pub(crate) fn new(
        max_payload: usize,
        send_buffer: usize,
        default_deadline: Option<std::time::Duration>,
        unreachable: Arc<tokio::sync::watch::Sender<BTreeSet<NodeId>>>,
    ) -> Shared {
        Shared {
            max_payload,
            default_deadline,
            closing: AtomicBool::new(false),
            next_id: OwnLine(AtomicU64::new(0)),
            blocked: Mutex::new(PeerSet::default()),
            blocked_len: AtomicUsize::new(0),
            room: Notify::new(),
            credits: Semaphore::new(send_buffer.max(1)),
            credit_cap: send_buffer.max(1),
            taken: AtomicU64::new(0),
            taken_notify: Notify::new(),
            taken_waiter: AtomicBool::new(false),
            known: Mutex::new(PeerSet::default()),
            hot: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            acked: Mutex::new(Vec::new()),
            unreachable,
            send_buffer: send_buffer.max(1),
            durable: AtomicBool::new(false),
        }
    }

    /// A shard's state for unit tests (1000-byte payloads, 8 send credits).
    #[cfg(test)]
    pub(crate) fn for_test() -> Shared {
        let watch = Arc::new(tokio::sync::watch::Sender::new(BTreeSet::new()));
        Shared::new(1000, 8, None, watch)
    }

    /// Durable mode: receipts learn when their message is stored.
    pub(crate) fn set_durable(&self) {
        self.durable.store(true, Ordering::Relaxed);
    }

    /// Whether the endpoint is durable.
    #[inline]
    pub(crate) fn is_durable(&self) -> bool {
        self.durable.load(Ordering::Relaxed)
    }

    /// Largest payload the core accepts.
    #[inline]
    pub(crate) fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Deadline of sends that give none.
    #[inline]
    pub(crate) fn default_deadline(&self) -> Option<std::time::Duration> {
        self.default_deadline
    }

    /// The size of the send buffer, in credits.
    pub(crate) fn send_buffer(&self) -> usize {
        self.send_buffer
    }

    /// Takes `n` send credits if they are at hand: `Some(true)` when taken, `Some(false)`
    /// once the endpoint is closing, `None` when too few are left (wait with
    /// [`take_credits`](Self::take_credits)).
    #[inline]
    pub(crate) fn try_take_credits(&self, n: u32) -> Option<bool> {
        match self.credits.try_acquire_many(n) {
            Ok(permit) => {
                permit.forget();
                Some(true)
            }
            Err(tokio::sync::TryAcquireError::Closed) => Some(false),
            Err(tokio::sync::TryAcquireError::NoPermits) => None,
        }
    }

    /// Takes `n` send credits, waiting for them; false once the endpoint is closing.
    pub(crate) async fn take_credits(&self, n: u32) -> bool {
        // Credits at hand (the common case): taken without a future to poll.
        if let Some(taken) = self.try_take_credits(n) {
            return taken;
        }
        match self.credits.acquire_many(n).await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Gives back `n` credits (the driver took their sends from the channel).
    pub(crate) fn return_credits(&self, n: usize) {
        self.credits.add_permits(n);
    }

    /// Wakes when the application takes a message (or acknowledges one).
    pub(crate) fn taken_notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.taken_notify.notified()
    }

    /// Whether `peer` is reported unreachable.
    pub(crate) fn is_unreachable(&self, peer: NodeId) -> bool {
        self.unreachable.borrow().contains(&peer)
    }

    /// A watch of the peers reported unreachable.
    pub(crate) fn watch_unreachable(&self) -> tokio::sync::watch::Receiver<BTreeSet<NodeId>> {
        self.unreachable.subscribe()
    }

    /// Credits a send of `len` bytes takes: one per started 64 KiB, so that the channel to
    /// the driver holds at most `send_buffer` small messages or `send_buffer` × 64 KiB of
    /// large ones (never more credits than exist).
    #[inline]
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
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.insert(peer);
        self.hot[hot_slot(peer)].store(peer.get(), Ordering::Release);
    }

    /// `peer`'s address was forgotten (pruned with its records): sends to it are refused
    /// again until it is added or speaks.
    pub(crate) fn forget(&self, peer: NodeId) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.remove(&peer);
        let _ = self.hot[hot_slot(peer)].compare_exchange(
            peer.get(),
            EMPTY,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The peers with a known address, in no particular order.
    pub(crate) fn known_peers(&self) -> Vec<NodeId> {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.iter().copied().collect()
    }

    /// Whether `peer` has a known address: one atomic load when it is cached (the send
    /// path), the lock of the set otherwise.
    #[inline]
    pub(crate) fn is_known(&self, peer: NodeId) -> bool {
        let slot = &self.hot[hot_slot(peer)];
        slot.load(Ordering::Acquire) == peer.get() || self.is_known_locked(peer, slot)
    }

    /// [`is_known`](Self::is_known) of a peer not in its hot slot: looked up under the
    /// set's lock, and cached in `slot` when known.
    #[inline(never)]
    fn is_known_locked(&self, peer: NodeId, slot: &AtomicU64) -> bool {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let is = known.contains(&peer);
        if is {
            slot.store(peer.get(), Ordering::Release);
        }
        is
    }

    /// The application took the next `n` messages from the delivery queue (all or none).
    /// Returns false if the driver has stopped: the messages were reported as never taken,
    /// and are not handed out. Atomic against [`stop_taking`](Self::stop_taking): each
    /// message is either counted as taken (and acknowledged) or reported undelivered, never
    /// both.
    pub(crate) fn take_many(&self, n: u64) -> bool {
        // One step against `stop_taking`: a take after the stop sees the stop in the count
        // it added to (never read again: the driver reported the final count).
        let before = self.taken.fetch_add(n, Ordering::SeqCst);
        if before & STOPPED != 0 {
            return false;
        }
        // After the count (both sequentially consistent): a driver that set the flag
        // before this load reads the new count in `wait_for_takes`, or is woken here.
        if self.taken_waiter.load(Ordering::SeqCst)
            && self.taken_waiter.swap(false, Ordering::SeqCst)
        {
            self.taken_notify.notify_one();
        }
        true
    }

    /// The driver is about to wait: a take from now on wakes it. Returns the takes counted
    /// so far (with [`STOPPED`] masked), read after the flag is set, so that a take the
    /// caller has not seen yet is either in it or notifies.
    pub(crate) fn wait_for_takes(&self) -> u64 {
        self.taken_waiter.store(true, Ordering::SeqCst);
        self.taken.load(Ordering::SeqCst) & !STOPPED
    }

    /// The driver woke: takes need not wake it until it waits again.
    pub(crate) fn done_waiting_for_takes(&self) {
        self.taken_waiter.store(false, Ordering::Relaxed);
    }

    /// Messages taken so far.
    pub(crate) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Acquire) & !STOPPED
    }

    /// Stops counting takes; returns the final count.
    pub(crate) fn stop_taking(&self) -> u64 {
        self.taken.fetch_or(STOPPED, Ordering::AcqRel) & !STOPPED
    }

    /// The first of `n` fresh consecutive message ids (unique within the endpoint when
    /// taken from its first shard, increasing).
    #[inline]
    pub(crate) fn next_ids(&self, n: u64) -> MsgId {
        MsgId(self.next_id.fetch_add(n, Ordering::Relaxed))
    }

    #[inline]
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
    #[inline]
    pub(crate) fn is_blocked(&self, to: NodeId) -> bool {
        self.blocked_len.load(Ordering::Acquire) != 0 && self.is_in_blocked(to)
    }

    /// Whether `to` is in the set of blocked destinations (looked up under its lock).
    #[inline(never)]
    fn is_in_blocked(&self, to: NodeId) -> bool {
        self.lock().contains(&to)
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

    fn lock(&self) -> MutexGuard<'_, PeerSet> {
        self.blocked.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Closes the shared state when the driver goes away, however it goes (a dropped runtime
/// included), so that no sender waits for credits forever.
pub(crate) struct CloseOnDrop(Arc<Shared>);

impl CloseOnDrop {
    pub(crate) fn new(shared: Arc<Shared>) -> CloseOnDrop {
        CloseOnDrop(shared)
    }
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared::for_test()
    }

    #[test]
    fn a_forgotten_peer_is_not_left_in_the_cache() {
        let s = shared();
        let (a, b) = (NodeId::from_const(7), NodeId::from_const(8));
        assert!(!s.is_known(a));
        s.know(a);
        s.know(b);
        assert!(s.is_known(a) && s.is_known(b));
        s.forget(a);
        assert!(!s.is_known(a), "the cached slot was cleared");
        assert!(s.is_known(b));
        // Ids sharing a slot: each is answered right, through the set when not cached.
        let same: Vec<NodeId> = (100..10_000)
            .map(NodeId::from_const)
            .filter(|p| hot_slot(*p) == hot_slot(b))
            .take(3)
            .collect();
        for p in &same {
            assert!(!s.is_known(*p));
            s.know(*p);
        }
        for p in &same {
            assert!(s.is_known(*p));
        }
        s.forget(same[1]);
        assert!(!s.is_known(same[1]));
        assert!(s.is_known(same[0]) && s.is_known(same[2]));
    }

    #[test]
    fn ids_come_in_consecutive_runs() {
        let s = shared();
        assert_eq!(s.next_ids(1), MsgId(0));
        assert_eq!(s.next_ids(5), MsgId(1));
        assert_eq!(s.next_ids(1), MsgId(6));
    }

    fn notified_now(s: &Shared) -> bool {
        use std::future::Future;
        let mut n = std::pin::pin!(s.taken_notified());
        let waker = std::task::Waker::noop();
        n.as_mut()
            .poll(&mut std::task::Context::from_waker(waker))
            .is_ready()
    }

    #[test]
    fn a_take_wakes_the_driver_only_when_it_waits_for_takes() {
        let s = shared();
        // A busy driver (not waiting): takes are counted, nobody is woken.
        assert!(s.take_many(2));
        assert!(!notified_now(&s), "no wake-up while the driver runs");
        // About to wait: it reads the count after raising its flag, so it sees those two.
        assert_eq!(s.wait_for_takes(), 2);
        assert!(s.take_many(1));
        assert!(notified_now(&s), "the first take after the flag wakes it");
        // The flag went with that wake-up: the next take is seen at the next turn.
        assert!(s.take_many(1));
        assert!(!notified_now(&s));
        assert_eq!(s.taken(), 4);
        // Woken for something else: the flag is down again.
        s.wait_for_takes();
        s.done_waiting_for_takes();
        assert!(s.take_many(1));
        assert!(!notified_now(&s));
    }

    #[test]
    fn a_take_after_the_stop_is_refused_and_not_counted() {
        let s = shared();
        assert!(s.take_many(3));
        assert_eq!(s.stop_taking(), 3);
        assert!(!s.take_many(2), "the driver reported the rest undelivered");
        assert!(!s.take_many(1));
    }

    #[test]
    fn concurrent_takes_and_a_stop_count_each_message_once() {
        // Every take the counter accepted is in the count the stop returns; none after.
        for _ in 0..50 {
            let s = Arc::new(shared());
            let takers: Vec<_> = (0..3)
                .map(|_| {
                    let s = s.clone();
                    std::thread::spawn(move || (0..2_000).filter(|_| s.take_many(1)).count())
                })
                .collect();
            std::thread::yield_now();
            let stopped = s.stop_taking();
            let accepted: usize = takers.into_iter().map(|t| t.join().unwrap()).sum();
            assert_eq!(stopped as usize, accepted);
        }
    }
}
