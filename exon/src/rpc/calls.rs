//! The caller's side of request/reply shared by handles and drivers: call ids, and the
//! calls waiting for their reply.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::shards::steering::shard_of;
use crate::envelope::Outcome;
use crate::proto::{DeliveryId, MsgId, NodeId};

/// A reply as it reached the caller.
#[derive(Debug)]
pub(crate) struct ReplyIn {
    pub(crate) outcome: Outcome,
    pub(crate) body: Bytes,
}

/// Calls in flight of one endpoint (every shard shares it).
#[derive(Debug)]
pub(crate) struct Calls {
    /// The next call id's sequence part.
    next: AtomicU64,
    /// Deadline of calls that give none.
    pub(crate) deadline: std::time::Duration,
    /// The calls waiting for their reply.
    waiting: Mutex<Table>,
    /// Durable mode: the calls with a held request that ended, for the driver shard that
    /// owns the node called (its node holds the request) to release their requests (and
    /// take their replies): one list per shard.
    released: Mutex<Vec<Vec<Ended>>>,
    /// Notified when a shard's list in `released` gets one.
    released_notify: Box<[tokio::sync::Notify]>,
    /// Per shard: a call to a peer of that shard was opened since the shard's driver last
    /// looked ([`Calls::take_opened`]), so that it watches its peers for keepalives.
    opened: Box<[AtomicBool]>,
    /// Looks into the table by calls' futures ([`CallGuard::poll_event`]), counted.
    #[cfg(test)]
    looks: AtomicU64,
    /// Locks of the table, counted.
    #[cfg(test)]
    locks: AtomicU64,
}

/// Where an open call's reply stands.
#[derive(Debug)]
enum ReplyState {
    /// Not come.
    Waiting,
    /// Come, not yet read by the call's future.
    Came(ReplyIn),
    /// Read by the call's future: a second reply is not handed.
    Read,
    /// The call's future stopped waiting without it (the call stays open until its guard
    /// goes): a reply coming now is not handed.
    Stopped,
}

/// An open call.
#[derive(Debug)]
struct Waiter {
    /// Its id.
    id: u64,
    /// The node called.
    to: NodeId,
    /// Its reply.
    reply: ReplyState,
    /// Its request's verdict, come and not read yet (a call whose request was sent with
    /// a [`CallAck`]).
    verdict: Option<Result<(), ReceiptError>>,
    /// The call's future, waiting for either.
    waker: Option<Waker>,
    /// Durable mode: its request, held in the journal (`Node::send_held`) until the call
    /// ends: the core's id of the message.
    held: Option<MsgId>,
    /// Durable mode: its reply's delivery, handed to the call and taken when the call ends.
    delivery: Option<DeliveryId>,
}

/// Open calls. A new call's id names its cell: `(sequence << INDEX_BITS | index) ^ mask`,
/// so that a reply finds its call without a lookup (and the id of a call that ended names
/// no cell any more, its sequence having moved on). The mask, drawn for each run of the
/// endpoint, keeps the ids of two runs apart even where their sequences meet: a reply to a
/// call of an earlier run (exon delivers it to the new incarnation) names a call of this
/// one only by a chance of one in 2^62 per call made. Calls reopened after a restart keep
/// the ids they had, and sit in `others` by id, as new calls do past `INDEX_LIMIT` cells.
#[derive(Debug, Default)]
struct Table {
    /// This run's mask of call ids (below [`CALL_ID_LIMIT`]).
    mask: u64,
    /// Cells by index; `None` is free.
    cells: Vec<Option<Waiter>>,
    /// Free cells' indices.
    free: Vec<u32>,
    /// Calls not in a cell: recovered ones, and new ones beyond `INDEX_LIMIT` cells.
    others: HashMap<u64, Waiter, foldhash::fast::RandomState>,
}

/// Bits of a call id naming its cell.
const INDEX_BITS: u32 = 24;
/// The index value that names no cell: the call is in [`Table::others`].
const INDEX_LIMIT: u64 = (1 << INDEX_BITS) - 1;

/// Where an open call sits in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Cell(u32),
    Other,
}

impl Place {
    /// Where call `id` would sit, under `mask`.
    fn of(id: u64, mask: u64) -> Place {
        match (id ^ mask) & INDEX_LIMIT {
            INDEX_LIMIT => Place::Other,
            i => Place::Cell(i as u32),
        }
    }
}

impl Table {
    /// Open call `id`, if it is.
    fn get_mut(&mut self, id: u64) -> Option<&mut Waiter> {
        if let Place::Cell(i) = Place::of(id, self.mask) {
            if let Some(Some(w)) = self.cells.get_mut(i as usize) {
                if w.id == id {
                    return Some(w);
                }
            }
        }
        self.others.get_mut(&id)
    }

    /// Removes open call `id`, if it is.
    fn remove(&mut self, id: u64) -> Option<Waiter> {
        if let Place::Cell(i) = Place::of(id, self.mask) {
            if let Some(cell) = self.cells.get_mut(i as usize) {
                if cell.as_ref().is_some_and(|w| w.id == id) {
                    self.free.push(i);
                    return cell.take();
                }
            }
        }
        self.others.remove(&id)
    }

    /// A free cell's index, if the table has room for one more.
    fn free_cell(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        let i = self.cells.len() as u64;
        (i < INDEX_LIMIT).then(|| {
            self.cells.push(None);
            i as u32
        })
    }

    /// Open calls.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.cells.len() - self.free.len() + self.others.len()
    }
}

/// A call with a held request that ended: its request to release, with the take of its
/// reply if it got one (`Node::take_reply`), else alone (`Node::release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The core's id of the request.
    pub(crate) request: MsgId,
    /// The reply's delivery, not taken yet.
    pub(crate) reply: Option<DeliveryId>,
}

/// What the driver does with a reply's delivery ([`Calls::on_reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Takes it now, releasing this held request with it, if any.
    Now(Option<MsgId>),
    /// Leaves it untaken: its call has a held request and got the reply; both go when the
    /// call ends ([`Calls::take_ended`]), so that a crash before then hands the reply out
    /// again to the call recovered after the restart.
    AtEnd,
}

/// What became of a reply ([`Calls::on_reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replied {
    /// It reached its call.
    pub(crate) handed: bool,
    /// When its delivery is taken.
    pub(crate) take: Take,
}

/// Call ids stay below this (they travel as varints, at most 8 bytes).
const CALL_ID_LIMIT: u64 = 1 << 62;
/// Sequences stay below this (a call id is one shifted, with its cell's index).
const SEQ_LIMIT: u64 = CALL_ID_LIMIT >> INDEX_BITS;

impl Calls {
    /// A table whose call ids start at a random point: a reply to a call made before a
    /// restart of this endpoint (it can come: exon delivers it to the new incarnation)
    /// finds no call with its id, rather than a new call that reused it.
    #[cfg(test)]
    pub(crate) fn new(deadline: std::time::Duration) -> Arc<Calls> {
        Self::sharded(deadline, 1)
    }

    /// As [`new`](Self::new), for an endpoint of `shards` driver shards (at least one).
    pub(crate) fn sharded(deadline: std::time::Duration, shards: usize) -> Arc<Calls> {
        let shards = shards.max(1);
        let random = std::collections::hash_map::RandomState::new();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let (seed, mask) = (random.hash_one(now), random.hash_one((now, 1u8)));
        let table = Table {
            mask: mask % CALL_ID_LIMIT,
            ..Table::default()
        };
        // Half the sequence space below the start: 2^37 calls before the ids wrap.
        Arc::new(Calls {
            next: AtomicU64::new(seed % (SEQ_LIMIT / 2)),
            deadline,
            waiting: Mutex::new(table),
            released: Mutex::new(vec![Vec::new(); shards]),
            released_notify: (0..shards).map(|_| tokio::sync::Notify::new()).collect(),
            opened: (0..shards).map(|_| AtomicBool::new(false)).collect(),
            #[cfg(test)]
            looks: AtomicU64::new(0),
            #[cfg(test)]
            locks: AtomicU64::new(0),
        })
    }

    /// [`open_waking`](Self::open_waking) with no waker registered.
    #[cfg(test)]
    pub(crate) fn open(self: &Arc<Self>, to: NodeId) -> CallGuard {
        self.open_waking(to, None)
    }

    /// Opens a call to node `to`; the guard has its id, waits for its reply
    /// ([`CallGuard::poll_event`]), and closes it. The id is one no call waiting now has
    /// (a call recovered after a restart keeps its id, which no new call takes:
    /// [`reopen`](Self::reopen)). `waker` (that of the task making the call) is registered
    /// in the call's cell under the same lock: the call's future need not look into the
    /// table before anything came, since whatever comes wakes it
    /// (the call future's `Verdicts::InCall { opened }`).
    pub(crate) fn open_waking(self: &Arc<Self>, to: NodeId, waker: Option<Waker>) -> CallGuard {
        let mut t = self.lock();
        let place = t.free_cell();
        let id = loop {
            let seq = self.next.fetch_add(1, Ordering::Relaxed) % SEQ_LIMIT;
            let id = (seq << INDEX_BITS | place.map_or(INDEX_LIMIT, u64::from)) ^ t.mask;
            // Only a recovered call (or one of the rare calls past the cells) can have it.
            if t.others.is_empty() || !t.others.contains_key(&id) {
                break id;
            }
        };
        let w = Waiter {
            id,
            to,
            reply: ReplyState::Waiting,
            verdict: None,
            waker,
            held: None,
            delivery: None,
        };
        match place {
            Some(i) => t.cells[i as usize] = Some(w),
            None => {
                t.others.insert(id, w);
            }
        }
        drop(t);
        self.mark_opened(to);
        CallGuard {
            calls: self.clone(),
            id,
            open: AtomicBool::new(true),
        }
    }

    /// Durable mode: opens again call `id` to node `to`, a call of an earlier run whose
    /// request was recovered from the journal (`register`: the rule `recover_calls`; off,
    /// the call is not in the table and its reply finds none), `held` in the journal
    /// under that id. No new call takes its id.
    pub(crate) fn reopen(
        self: &Arc<Self>,
        id: u64,
        to: NodeId,
        register: bool,
        held: Option<MsgId>,
    ) -> CallGuard {
        let id = id % CALL_ID_LIMIT;
        if register {
            let w = Waiter {
                id,
                to,
                reply: ReplyState::Waiting,
                verdict: None,
                waker: None,
                held,
                delivery: None,
            };
            self.lock().others.insert(id, w);
            self.mark_opened(to);
        }
        CallGuard {
            calls: self.clone(),
            id,
            open: AtomicBool::new(true),
        }
    }

    /// Durable mode: call `id`'s request is held in the journal as message `msg`
    /// (`Node::send_held`), until the call ends. Returns false when the call has ended
    /// already: the caller releases `msg` itself.
    pub(crate) fn hold(&self, id: u64, msg: MsgId) -> bool {
        match self.lock().get_mut(id) {
            Some(w) => {
                w.held = Some(msg);
                true
            }
            None => false,
        }
    }

    /// A reply to call `id` came from node `from` in delivery `delivery`: handed to its
    /// caller if `from` is the node called. Not handed when nobody waits for it (the call
    /// ended: its future was dropped, or its deadline passed; or it got its reply), nor
    /// when `from` is another node: call ids are sequential, so a peer that saw this
    /// endpoint's calls to it can guess the ids of its calls to others, and its reply must
    /// not end them. A call with a held request keeps the reply's delivery, to take it when
    /// the call ends.
    pub(crate) fn on_reply(
        &self,
        id: u64,
        from: NodeId,
        reply: ReplyIn,
        delivery: DeliveryId,
    ) -> Replied {
        let refused = Replied {
            handed: false,
            take: Take::Now(None),
        };
        let mut t = self.lock();
        let Some(w) = t.get_mut(id).filter(|w| w.to == from) else {
            return refused;
        };
        match w.reply {
            ReplyState::Waiting => {}
            // A second reply: the call has its answer.
            ReplyState::Came(_) | ReplyState::Read => return refused,
            ReplyState::Stopped => {
                // Not handed, and taken at once, with its held request's release.
                let held = w.held;
                t.remove(id);
                return Replied {
                    handed: false,
                    take: Take::Now(held),
                };
            }
        }
        // Kept under the lock: the call's end (`close`) sees the reply kept.
        w.reply = ReplyState::Came(reply);
        let take = if w.held.is_some() {
            w.delivery = Some(delivery);
            Take::AtEnd
        } else {
            // Nothing to release at the end: the call is left for its future to read.
            Take::Now(None)
        };
        let waker = w.waker.take();
        drop(t);
        if let Some(waker) = waker {
            waker.wake();
        }
        Replied { handed: true, take }
    }

    /// Call `id`'s request has its verdict (sent with a [`CallAck`]): told to its future.
    fn on_verdict(&self, id: u64, verdict: Result<(), ReceiptError>) {
        let mut t = self.lock();
        let Some(w) = t.get_mut(id) else {
            return;
        };
        w.verdict = Some(verdict);
        let waker = w.waker.take();
        drop(t);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The requests of calls `ids` were acknowledged: each call is told, all under one
    /// lock of the table, and woken after it.
    fn on_acknowledged(&self, ids: &[u64]) {
        let mut wakers: smallvec::SmallVec<[Waker; RUN]> = smallvec::SmallVec::new();
        let mut t = self.lock();
        for &id in ids {
            if let Some(w) = t.get_mut(id) {
                w.verdict = Some(Ok(()));
                wakers.extend(w.waker.take());
            }
        }
        drop(t);
        for waker in wakers {
            waker.wake();
        }
    }

    /// What call `id` learned: its reply first, then (with `verdict`) its request's
    /// verdict; else `cx` is woken when either comes. A verdict returned leaves `cx`'s waker registered too, for the reply a call
    /// goes on waiting for (see [`CallGuard::poll_event`]). A reply read ends a call that
    /// holds nothing in the journal: it leaves the table under this lock (`open` cleared,
    /// so that its guard's drop need not lock again); a second reply then finds no call,
    /// as it would find one that read its reply.
    fn poll_event(
        &self,
        id: u64,
        open: &AtomicBool,
        verdict: bool,
        cx: &mut Context<'_>,
    ) -> Poll<CallEvent> {
        #[cfg(test)]
        self.looks.fetch_add(1, Ordering::Relaxed);
        let mut t = self.lock();
        let Some(w) = t.get_mut(id) else {
            return Poll::Pending;
        };
        if matches!(w.reply, ReplyState::Came(_)) {
            let ends = w.held.is_none();
            if let ReplyState::Came(r) = std::mem::replace(&mut w.reply, ReplyState::Read) {
                if ends {
                    t.remove(id);
                    open.store(false, Ordering::Relaxed);
                }
                return Poll::Ready(CallEvent::Reply(r));
            }
        }
        let event = if verdict { w.verdict.take() } else { None };
        match &w.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => w.waker = Some(cx.waker().clone()),
        }
        match event {
            Some(v) => Poll::Ready(CallEvent::Verdict(v)),
            None => Poll::Pending,
        }
    }

    /// How many times calls' futures looked into the table.
    #[cfg(test)]
    pub(crate) fn looks(&self) -> u64 {
        self.looks.load(Ordering::Relaxed)
    }

    /// How many times the table was locked.
    #[cfg(test)]
    pub(crate) fn locks(&self) -> u64 {
        self.locks.load(Ordering::Relaxed)
    }

    /// Call `id`'s future stopped waiting for its reply (the call ended without it, and
    /// stays open until its guard goes): a reply coming now is not handed.
    fn stop_waiting(&self, id: u64) {
        if let Some(w) = self.lock().get_mut(id) {
            if matches!(w.reply, ReplyState::Waiting) {
                w.reply = ReplyState::Stopped;
            }
            w.waker = None;
        }
    }

    /// Durable mode: the calls with a held request that ended since the last call, of the
    /// nodes that driver shard `shard` owns.
    pub(crate) fn take_ended(&self, shard: usize) -> Vec<Ended> {
        let mut v = self.released.lock().unwrap_or_else(|e| e.into_inner());
        v.get_mut(shard).map(std::mem::take).unwrap_or_default()
    }

    /// Completes when a call with a held request to a node driver shard `shard` owns ended.
    pub(crate) fn ended_notified(&self, shard: usize) -> tokio::sync::futures::Notified<'_> {
        let i = shard.min(self.released_notify.len() - 1);
        self.released_notify[i].notified()
    }

    /// Call `id` ended: it leaves the table, and its held request, if any, is to release
    /// (with its reply's take).
    fn close(&self, id: u64) {
        let Some(w) = self.lock().remove(id) else {
            return;
        };
        if let Some(request) = w.held {
            let ended = Ended {
                request,
                reply: w.delivery,
            };
            let shard = shard_of(w.to, self.released_notify.len());
            let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
            released[shard].push(ended);
            drop(released);
            self.released_notify[shard].notify_one();
        }
    }

    /// A call to `to` opened: its shard's driver is told (a plain store, no locked
    /// instruction, when the flag is set already).
    #[inline]
    fn mark_opened(&self, to: NodeId) {
        let flag = &self.opened[shard_of(to, self.opened.len())];
        if !flag.load(Ordering::Relaxed) {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a call to a peer of `shard` was opened since the last call (clears it).
    pub(crate) fn take_opened(&self, shard: usize) -> bool {
        let flag = &self.opened[shard.min(self.opened.len() - 1)];
        let opened = flag.load(Ordering::Relaxed);
        if opened {
            flag.store(false, Ordering::Relaxed);
        }
        opened
    }

    /// The peers of `shard` that open calls wait for a reply from, each once, sorted, in
    /// `out` (cleared first).
    pub(crate) fn awaited(&self, shard: usize, out: &mut Vec<NodeId>) {
        out.clear();
        let n = self.opened.len();
        let t = self.lock();
        let waiting =
            |w: &&Waiter| matches!(w.reply, ReplyState::Waiting) && shard_of(w.to, n) == shard;
        out.extend(t.cells.iter().flatten().filter(waiting).map(|w| w.to));
        out.extend(t.others.values().filter(waiting).map(|w| w.to));
        drop(t);
        out.sort_unstable();
        out.dedup();
    }

    /// Calls waiting for a reply now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        #[cfg(test)]
        self.locks.fetch_add(1, Ordering::Relaxed);
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a call learned ([`CallGuard::poll_event`]).
#[derive(Debug)]
pub(crate) enum CallEvent {
    /// Its reply.
    Reply(ReplyIn),
    /// Its request's verdict.
    Verdict(Result<(), ReceiptError>),
}

/// The driver's end of a call's request: its verdict goes to the call
/// (the driver's `Ack::Call`). Dropped without a verdict (the
/// endpoint stopped), it tells the call [`ReceiptError::Unacknowledged`], as a receipt's
/// end does.
#[derive(Debug)]
pub(crate) struct CallAck {
    calls: Option<Arc<Calls>>,
    id: u64,
}

impl CallAck {
    /// Tells the call its request's verdict.
    pub(crate) fn resolve(mut self, verdict: Result<(), ReceiptError>) {
        if let Some(calls) = self.calls.take() {
            calls.on_verdict(self.id, verdict);
        }
    }
}

impl Drop for CallAck {
    fn drop(&mut self) {
        if let Some(calls) = self.calls.take() {
            calls.on_verdict(self.id, Err(ReceiptError::Unacknowledged));
        }
    }
}

/// Calls told their requests' acknowledgement together at most ([`CallRun`]).
const RUN: usize = 32;

/// Acknowledgements of calls' requests told together: the calls of one table, up to
/// [`RUN`] at a time, under one lock of it (a verdict frame acknowledges the requests of
/// many calls at once). Dropped, it tells what it holds.
#[derive(Debug, Default)]
pub(crate) struct CallRun {
    calls: Option<Arc<Calls>>,
    ids: smallvec::SmallVec<[u64; RUN]>,
}

impl CallRun {
    /// Tells `ack`'s call its request was acknowledged, with the run.
    pub(crate) fn acknowledge(&mut self, mut ack: CallAck) {
        let Some(calls) = ack.calls.take() else {
            return;
        };
        if self.ids.len() == RUN || self.calls.as_ref().is_some_and(|c| !Arc::ptr_eq(c, &calls)) {
            self.flush();
        }
        self.ids.push(ack.id);
        self.calls.get_or_insert(calls);
    }

    /// Tells the calls gathered.
    pub(crate) fn flush(&mut self) {
        if let Some(calls) = self.calls.take() {
            calls.on_acknowledged(&self.ids);
        }
        self.ids.clear();
    }
}

impl Drop for CallRun {
    fn drop(&mut self) {
        self.flush();
    }
}

/// An open call: where its reply is waited for; dropping it (the call's future dropped, or
/// ended) forgets the call, so that a reply coming later is discarded and counted.
#[derive(Debug)]
pub(crate) struct CallGuard {
    calls: Arc<Calls>,
    id: u64,
    /// The call is in the table (cleared when reading its reply took it out).
    open: AtomicBool,
}

impl CallGuard {
    /// The call's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// What the call learned: its reply, or (with `verdict`) its request's verdict, as
    /// [`CallAck`] told it; a call the table does not hold (a recovered one not
    /// registered) learns nothing. With a verdict, `cx`'s waker stays registered as if the
    /// call had been polled for its reply and found none: a call that goes on waiting for
    /// its reply in the same poll of its task need not look again then.
    pub(crate) fn poll_event(&self, verdict: bool, cx: &mut Context<'_>) -> Poll<CallEvent> {
        self.calls.poll_event(self.id, &self.open, verdict, cx)
    }

    /// Where the verdict of the call's request goes: into the call, whose future learns it
    /// with its reply in one place (no receipt).
    pub(crate) fn ack(&self) -> CallAck {
        CallAck {
            calls: Some(self.calls.clone()),
            id: self.id,
        }
    }

    /// The call's future is done waiting without its reply; the call stays open (its
    /// held request kept) until this guard is dropped, and a reply coming meanwhile is
    /// not handed.
    pub(crate) fn stop_waiting(&self) {
        self.calls.stop_waiting(self.id);
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if *self.open.get_mut() {
            self.calls.close(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::wakes::Wakes;

    fn reply() -> ReplyIn {
        ReplyIn {
            outcome: Outcome::Answered,
            body: Bytes::new(),
        }
    }

    const PEER: NodeId = NodeId::from_const(7);

    /// The sequence and cell index of a new call's id in `calls`.
    fn parts(calls: &Calls, id: u64) -> (u64, u64) {
        let plain = id ^ calls.lock().mask;
        (plain >> INDEX_BITS, plain & INDEX_LIMIT)
    }

    /// The id of a new call of sequence `seq` in cell `index` of `calls`.
    fn id_of(calls: &Calls, seq: u64, index: u64) -> u64 {
        (seq << INDEX_BITS | index) ^ calls.lock().mask
    }

    /// What the call learned, if anything (polled once, with a waker that does nothing).
    fn try_event(guard: &CallGuard, verdict: bool) -> Option<CallEvent> {
        let mut cx = Context::from_waker(Waker::noop());
        match guard.poll_event(verdict, &mut cx) {
            Poll::Ready(e) => Some(e),
            Poll::Pending => None,
        }
    }

    /// The call's reply, if it came.
    fn try_reply(guard: &CallGuard) -> Option<ReplyIn> {
        match try_event(guard, false) {
            Some(CallEvent::Reply(r)) => Some(r),
            Some(e) => panic!("a verdict not asked for: {e:?}"),
            None => None,
        }
    }

    /// A shard's driver learns that calls to its peers were opened, once, and finds the
    /// peers its open calls still wait for a reply from (each once, sorted): not those of
    /// another shard, nor a call whose reply came.
    #[test]
    fn a_shard_finds_the_peers_its_calls_wait_for() {
        let calls = Calls::sharded(std::time::Duration::from_secs(1), 2);
        let peers: Vec<NodeId> = (1..=8).map(|n| NodeId::new(n).unwrap()).collect();
        let shard = shard_of(peers[0], 2);
        let mine: Vec<NodeId> = peers
            .iter()
            .copied()
            .filter(|p| shard_of(*p, 2) == shard)
            .collect();
        assert!(!calls.take_opened(shard), "nothing opened yet");
        let guards: Vec<CallGuard> = peers
            .iter()
            .flat_map(|p| [calls.open(*p), calls.open(*p)])
            .collect();
        assert!(calls.take_opened(shard));
        assert!(!calls.take_opened(shard), "told once");
        let mut out = Vec::new();
        calls.awaited(shard, &mut out);
        assert_eq!(out, mine);
        // Both calls to the first peer got their replies: it is awaited no more.
        let first: Vec<&CallGuard> = guards.iter().take(2).collect();
        for g in &first {
            let replied = calls.on_reply(g.id(), peers[0], reply(), d(0));
            assert!(replied.handed);
        }
        calls.awaited(shard, &mut out);
        assert_eq!(out, mine[1..]);
    }

    /// The request's verdict reaches its call through the call's ack, once, after the reply
    /// if both came (a call holding its request in the journal stays open after its reply
    /// is read; one holding nothing ends then), and only when asked for; an ack dropped
    /// without a verdict (the endpoint stopped) tells the call `Unacknowledged`; one of a
    /// call that ended tells nobody.
    #[test]
    fn a_requests_verdict_reaches_its_call_beside_its_reply() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let plain = calls.open(PEER);
        plain.ack().resolve(Err(ReceiptError::InDoubt));
        assert!(calls.on_reply(plain.id(), PEER, reply(), d(1)).handed);
        assert!(try_reply(&plain).is_some());
        assert!(try_event(&plain, true).is_none(), "ended by its reply");
        assert!(calls.lock().get_mut(plain.id()).is_none());
        drop(plain);
        let guard = calls.open(PEER);
        assert!(calls.hold(guard.id(), MsgId(3)));
        guard.ack().resolve(Err(ReceiptError::InDoubt));
        assert!(calls.on_reply(guard.id(), PEER, reply(), d(1)).handed);
        assert!(
            try_reply(&guard).is_some(),
            "the reply first, the verdict left"
        );
        assert!(matches!(
            try_event(&guard, true),
            Some(CallEvent::Verdict(Err(ReceiptError::InDoubt)))
        ));
        assert!(try_event(&guard, true).is_none(), "told once");
        let second = calls.open(PEER);
        drop(second.ack());
        assert!(matches!(
            try_event(&second, true),
            Some(CallEvent::Verdict(Err(ReceiptError::Unacknowledged)))
        ));
        let ack = second.ack();
        let id = second.id();
        drop(second);
        ack.resolve(Ok(()));
        assert_eq!(calls.waiting(), 1, "the ended call is not back");
        assert!(calls.lock().get_mut(id).is_none());
        drop(guard);
        assert_eq!(calls.waiting(), 0);
    }

    /// Acknowledgements gathered in a run (two tables interleaved, more than a run holds,
    /// a call ended meanwhile) reach every waiting call once, each woken once; a run
    /// dropped before its flush tells what it holds.
    #[test]
    fn a_run_of_acknowledgements_reaches_every_call_of_both_tables() {
        let (a, b) = (
            Calls::new(std::time::Duration::from_secs(1)),
            Calls::new(std::time::Duration::from_secs(1)),
        );
        let mut run = CallRun::default();
        let mut open = Vec::new();
        for i in 0..(2 * RUN + 5) {
            let calls = if i % 5 < 3 { &a } else { &b };
            let guard = calls.open(PEER);
            let wakes = Wakes::new();
            let waker = wakes.waker();
            assert!(guard
                .poll_event(true, &mut Context::from_waker(&waker))
                .is_pending());
            run.acknowledge(guard.ack());
            if i == 7 {
                // Ended before its acknowledgement is told: nobody to tell.
                drop(guard);
                continue;
            }
            open.push((i, guard, wakes));
        }
        let last = a.open(PEER);
        run.acknowledge(last.ack());
        drop(run);
        for (i, _, wakes) in &open {
            assert_eq!(wakes.count(), 1, "call {i} woken once");
        }
        for (_, guard, _) in open.iter().chain([(0, last, Wakes::new())].iter()) {
            assert!(
                matches!(try_event(guard, true), Some(CallEvent::Verdict(Ok(())))),
                "call {} told",
                guard.id()
            );
            assert!(try_event(guard, true).is_none(), "told once");
        }
    }

    fn d(slot: u64) -> DeliveryId {
        DeliveryId::for_test(PEER, slot)
    }

    #[test]
    fn a_reply_reaches_its_open_call_once() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let guard = calls.open(PEER);
        assert!(try_reply(&guard).is_none(), "not come yet");
        assert!(calls.on_reply(guard.id(), PEER, reply(), d(1)).handed);
        assert!(try_reply(&guard).is_some());
        assert!(try_reply(&guard).is_none(), "read once");
        assert!(
            !calls.on_reply(guard.id(), PEER, reply(), d(1)).handed,
            "a second reply finds no call"
        );
    }

    /// The call's future waits with its task's waker, which the reply wakes (once, and
    /// only the last waker polled with).
    #[test]
    fn a_reply_wakes_the_future_waiting_for_it() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let guard = calls.open(PEER);
        let (old, new) = (Wakes::new(), Wakes::new());
        for w in [&old, &new] {
            let waker = w.waker();
            assert!(guard
                .poll_event(true, &mut Context::from_waker(&waker))
                .is_pending());
        }
        assert!(calls.on_reply(guard.id(), PEER, reply(), d(1)).handed);
        assert_eq!(old.count(), 0, "a waker replaced is not woken");
        assert_eq!(new.count(), 1);
        assert!(try_reply(&guard).is_some());
        assert!(!calls.on_reply(guard.id(), PEER, reply(), d(2)).handed);
        assert_eq!(new.count(), 1, "a second reply wakes nobody");
    }

    #[test]
    fn a_dropped_call_discards_its_reply() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let guard = calls.open(PEER);
        let id = guard.id();
        drop(guard);
        assert_eq!(calls.waiting(), 0);
        assert!(!calls.on_reply(id, PEER, reply(), d(1)).handed);
    }

    #[test]
    fn a_reply_from_another_node_leaves_the_call_waiting() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let guard = calls.open(PEER);
        let other = NodeId::from_const(8);
        assert!(
            !calls.on_reply(guard.id(), other, reply(), d(1)).handed,
            "not the node called"
        );
        assert!(try_reply(&guard).is_none(), "the call did not end");
        assert!(
            calls.on_reply(guard.id(), PEER, reply(), d(1)).handed,
            "its own reply still comes"
        );
        assert!(try_reply(&guard).is_some());
    }

    #[test]
    fn a_reopened_call_gets_its_reply_and_keeps_its_id_to_itself() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let old = calls.open(PEER);
        let (seq, index) = parts(&calls, old.id());
        let recovered = id_of(&calls, seq + 1, index);
        let guard = calls.reopen(recovered, PEER, true, None);
        assert_eq!(guard.id(), recovered);
        drop(old);
        for _ in 0..10 {
            // The first takes the recovered call's sequence and the same (freed) cell.
            let new = calls.open(PEER);
            assert_ne!(
                new.id(),
                recovered,
                "no new call takes a recovered one's id"
            );
        }
        assert!(calls.on_reply(recovered, PEER, reply(), d(1)).handed);
        assert!(try_reply(&guard).is_some());
    }

    #[test]
    fn a_call_ended_without_its_reply_releases_its_held_request_once() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let guard = calls.open(PEER);
        let id = guard.id();
        assert!(calls.hold(id, MsgId(5)));
        assert!(
            calls.take_ended(0).is_empty(),
            "held while the call is open"
        );
        drop(guard);
        let ended = Ended {
            request: MsgId(5),
            reply: None,
        };
        assert_eq!(calls.take_ended(0), [ended]);
        assert!(calls.take_ended(0).is_empty());
        // A request held after its call ended: refused, for the driver to release.
        assert!(!calls.hold(id, MsgId(6)));
        // A recovered call, reopened with its held request, releases it the same way.
        let guard = calls.reopen(id + 7, PEER, true, Some(MsgId(7)));
        drop(guard);
        assert_eq!(calls.take_ended(0)[0].request, MsgId(7));
    }

    /// Each shard's node holds the requests to the peers it owns: an ended call's release
    /// goes to that shard only (another shard's node could hold another message under the
    /// same id: durable ids are drawn per shard).
    #[test]
    fn an_ended_call_is_released_by_the_shard_that_owns_its_peer() {
        let calls = Calls::sharded(std::time::Duration::from_secs(1), 2);
        let peers: Vec<NodeId> = (1..40).map(NodeId::from_const).collect();
        let owner = |p: NodeId| shard_of(p, 2);
        let (a, b) = (
            *peers.iter().find(|&&p| owner(p) == 0).unwrap(),
            *peers.iter().find(|&&p| owner(p) == 1).unwrap(),
        );
        for (peer, msg) in [(a, 1), (b, 2)] {
            let guard = calls.open(peer);
            assert!(calls.hold(guard.id(), MsgId(msg)));
        }
        let ended = |m| Ended {
            request: MsgId(m),
            reply: None,
        };
        assert_eq!(calls.take_ended(1), [ended(2)]);
        assert_eq!(calls.take_ended(0), [ended(1)]);
        assert!(calls.take_ended(0).is_empty() && calls.take_ended(1).is_empty());
    }

    #[test]
    fn a_held_call_takes_its_reply_when_it_ends() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let guard = calls.open(PEER);
        assert!(calls.hold(guard.id(), MsgId(9)));
        let other = NodeId::from_const(8);
        let refused = Replied {
            handed: false,
            take: Take::Now(None),
        };
        assert_eq!(calls.on_reply(guard.id(), other, reply(), d(1)), refused);
        let kept = Replied {
            handed: true,
            take: Take::AtEnd,
        };
        assert_eq!(calls.on_reply(guard.id(), PEER, reply(), d(2)), kept);
        assert!(try_reply(&guard).is_some());
        assert_eq!(
            calls.on_reply(guard.id(), PEER, reply(), d(3)),
            refused,
            "a second reply is not handed, and taken at once"
        );
        assert!(calls.take_ended(0).is_empty(), "taken when the call ends");
        drop(guard);
        let ended = Ended {
            request: MsgId(9),
            reply: Some(d(2)),
        };
        assert_eq!(calls.take_ended(0), [ended]);
        // A reply whose call's future stopped waiting (its guard not dropped yet): not
        // handed, and taken at once with the held request's release.
        let guard = calls.open(PEER);
        assert!(calls.hold(guard.id(), MsgId(10)));
        guard.stop_waiting();
        let gone = Replied {
            handed: false,
            take: Take::Now(Some(MsgId(10))),
        };
        assert_eq!(calls.on_reply(guard.id(), PEER, reply(), d(4)), gone);
        drop(guard);
        assert!(calls.take_ended(0).is_empty());
        // A call with no held request (not durable) has its reply taken at once.
        let guard = calls.open(PEER);
        let plain = Replied {
            handed: true,
            take: Take::Now(None),
        };
        assert_eq!(calls.on_reply(guard.id(), PEER, reply(), d(5)), plain);
        drop(guard);
        assert_eq!(calls.waiting(), 0);
    }

    #[test]
    fn a_new_call_never_takes_the_id_of_a_waiting_one() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let first = calls.open(PEER);
        // The counter wraps onto the waiting call's sequence (as after 2^38 calls).
        calls
            .next
            .store(parts(&calls, first.id()).0, Ordering::Relaxed);
        let second = calls.open(PEER);
        assert_ne!(first.id(), second.id());
        // And onto a recovered call's id, which sits outside the cells: the next call
        // would take it (its sequence, and the cell `second` frees last).
        let (seq, index) = parts(&calls, second.id());
        let recovered = calls.reopen(id_of(&calls, seq + 5, index), PEER, true, None);
        calls.next.store(seq + 5, Ordering::Relaxed);
        drop((first, second));
        let mut ids: Vec<u64> = (0..4).map(|_| calls.open(PEER)).map(|g| g.id()).collect();
        ids.push(recovered.id());
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 5);
    }

    #[test]
    fn ids_are_distinct_and_tables_start_apart() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let a = calls.open(PEER);
        let b = calls.open(PEER);
        assert_ne!(a.id(), b.id());
        assert!(a.id() < CALL_ID_LIMIT);
        let other = Calls::new(std::time::Duration::from_secs(1));
        let c = other.open(PEER);
        assert_ne!(
            a.id(),
            c.id(),
            "a restarted endpoint does not reuse call ids"
        );
        // Even where the two runs' sequences meet, in the same cell: the masks differ, and
        // a reply to the earlier run's call finds none in the later run.
        other.next.store(parts(&calls, a.id()).0, Ordering::Relaxed);
        drop(c);
        let e = other.open(PEER);
        assert_eq!(parts(&other, e.id()), parts(&calls, a.id()));
        assert_ne!(e.id(), a.id());
        assert!(!other.on_reply(a.id(), PEER, reply(), d(1)).handed);
        assert!(a.id() < CALL_ID_LIMIT && e.id() < CALL_ID_LIMIT);
    }
}
