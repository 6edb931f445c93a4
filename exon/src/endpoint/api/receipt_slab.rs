//! Receipts without an allocation or a lock each: one slab of verdict cells per shard (or
//! channel), a cell taken per send and given back by whichever end finishes with it last,
//! each end's step one atomic operation on the cell.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;

use crate::endpoint::api::error::{Error, ReceiptError};
use crate::endpoint::api::own_line::OwnLine;
use crate::endpoint::api::verdict_code as code;

/// Cells of the first chunk; chunk `k` holds `FIRST << k`.
const FIRST: u32 = 64;
/// Chunks at most: `FIRST * (2^CHUNKS - 1)` cells, every index below [`NIL`].
const CHUNKS: usize = 26;
/// No cell: the end of the free list.
const NIL: u32 = u32::MAX;

/// A cell's state: its verdict's code in the low bits (`PENDING` until the driver settles
/// it; the reason of a `REFUSED` is in [`ReceiptSlab::refusals`]), and two flags.
const VERDICT: u32 = 0b111;
/// No verdict yet.
const PENDING: u32 = code::PENDING as u32;
/// Refused (see [`VERDICT`]).
const REFUSED: u32 = code::REFUSED as u32;
/// The receipt is done with the cell (dropped, or it read the verdict).
const GONE: u32 = 1 << 3;
/// The receipt registered a waker (it waits).
const WAKER: u32 = 1 << 4;

/// The verdict cells of one shard's single sends ([`Handle::send`]) or of one channel's
/// messages, shared by the receipts (the application's end) and the driver (which
/// resolves them).
///
/// A cell is taken by [`open`](Self::open) and given back by the end that finishes last:
/// the driver when it settles a cell whose receipt is gone, the receipt when it reads its
/// verdict or is dropped after the driver settled it. Each end marks what it did with one
/// atomic operation on the cell's state, whose previous value says whether the other end
/// is done. So no end ever finds its cell reused under it. Free cells form a stack linked
/// through the cells, its top swapped by compare-and-swap with a tag against a stale top.
/// Cells live in chunks allocated once and never moved, so the slab grows (to the most
/// receipts outstanding at once) while both ends read cells without a lock.
///
/// An open cell holds one reference of the slab's `Arc` for both its ends (see
/// [`SlabRef`]): taken by `open`, given up by the end that gives the cell back, after it
/// did. A receipt that waits holds one more while the driver may still wake it. So the
/// slab outlives every end that can still touch it, at one count up and one down a
/// message rather than one of each for each end.
///
/// Its parts that both ends write for every message (the free stack's top) or read for
/// every message (the chunks) are on lines of their own, apart from each other and from
/// the `Arc`'s counts, which each receipt changes.
///
/// [`Handle::send`]: crate::endpoint::Handle::send
pub(crate) struct ReceiptSlab {
    /// Chunk `k` holds cells `FIRST * (2^k - 1) ..` and `FIRST << k` of them.
    chunks: OwnLine<[OnceLock<Box<[Cell]>>; CHUNKS]>,
    /// The top of the free stack: its index in the low 32 bits ([`NIL`]: empty), a tag
    /// bumped by every change in the high 32 (so a pop that read an old top fails).
    free: OwnLine<AtomicU64>,
    /// Chunks allocated; held while the slab grows (rarely).
    grown: Mutex<usize>,
    /// The reasons of refusals not read yet, by cell (rare: a refusal is an error of the
    /// application's or a failed journal).
    refusals: Mutex<Vec<(u32, Error)>>,
}

/// One message's verdict on its way from the driver to its receipt.
#[derive(Default)]
struct Cell {
    /// The verdict code and the flags above.
    state: AtomicU32,
    /// The next free cell, while this one is free.
    next: AtomicU32,
    /// The waiting receipt's waker (flag [`WAKER`]).
    waker: AtomicWaker,
}

impl std::fmt::Debug for ReceiptSlab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptSlab").finish_non_exhaustive()
    }
}

/// `tag` and `index` as the free stack's top.
fn top(tag: u64, index: u32) -> u64 {
    (tag << 32) | u64::from(index)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is one step: a poisoned one holds whole data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ReceiptSlab {
    /// A new, empty slab (its first cells are allocated by the first [`open`](Self::open)).
    pub(crate) fn new() -> Arc<ReceiptSlab> {
        Arc::new(ReceiptSlab {
            chunks: OwnLine(std::array::from_fn(|_| OnceLock::new())),
            free: OwnLine(AtomicU64::new(top(0, NIL))),
            grown: Mutex::new(0),
            refusals: Mutex::new(Vec::new()),
        })
    }

    /// Takes a cell: the receipt's end and the driver's, sharing the cell's one reference
    /// of the slab.
    #[inline]
    pub(crate) fn open(self: &Arc<Self>) -> (SlabReceipt, SlotAck) {
        let index = self.pop().unwrap_or_else(|| self.grow());
        let slab = SlabRef::take(self);
        let cell = self.cell(index).map(NonNull::from);
        (
            SlabReceipt {
                slab,
                cell,
                index,
                read: code::PENDING,
                refusal: None,
                waker_ref: false,
            },
            SlotAck {
                slab: Some(slab),
                index,
            },
        )
    }

    /// The cell at `index` (always one handed out: its chunk exists).
    #[inline]
    fn cell(&self, index: u32) -> Option<&Cell> {
        let n = u64::from(index) + u64::from(FIRST);
        let k = (63 - n.leading_zeros() - FIRST.trailing_zeros()) as usize;
        let at = n - (u64::from(FIRST) << k);
        self.chunks.get(k)?.get()?.get(at as usize)
    }

    /// A free cell off the stack, if any.
    fn pop(&self) -> Option<u32> {
        let mut t = self.free.load(Ordering::Acquire);
        loop {
            let (index, next) = self.peek(t)?;
            match self.take_top(t, next) {
                Ok(()) => return Some(index),
                Err(now) => t = now,
            }
        }
    }

    /// The cell at the top `t` of the free stack and the one below it, unless empty. Stale
    /// if another end popped it meanwhile: [`take_top`](Self::take_top) fails then.
    fn peek(&self, t: u64) -> Option<(u32, u32)> {
        let index = t as u32;
        if index == NIL {
            return None;
        }
        Some((index, self.cell(index)?.next.load(Ordering::Relaxed)))
    }

    /// Makes `next` the top if the top is still `t` (its tag too): else the top now.
    fn take_top(&self, t: u64, next: u32) -> Result<(), u64> {
        let tag = (t >> 32).wrapping_add(1);
        self.free
            .compare_exchange_weak(t, top(tag, next), Ordering::Acquire, Ordering::Acquire)
            .map(drop)
    }

    /// Pushes the free cells `first ..= last`, linked already through their `next`.
    fn push(&self, first: u32, last: u32) {
        let Some(end) = self.cell(last) else {
            return;
        };
        let mut t = self.free.load(Ordering::Relaxed);
        loop {
            end.next.store(t as u32, Ordering::Relaxed);
            match self.free.compare_exchange_weak(
                t,
                top((t >> 32).wrapping_add(1), first),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => t = now,
            }
        }
    }

    /// A new chunk of cells: one for the caller, the others onto the free stack.
    #[cold]
    fn grow(&self) -> u32 {
        let mut grown = lock(&self.grown);
        // Another end may have grown the slab, or given cells back, meanwhile.
        if let Some(i) = self.pop() {
            return i;
        }
        let k = *grown;
        assert!(k < CHUNKS, "fewer than 2^32 receipts at once");
        let len = FIRST << k;
        let base = FIRST * ((1 << k) - 1);
        let cells: Box<[Cell]> = (0..len).map(|_| Cell::default()).collect();
        for (i, c) in cells.iter().enumerate() {
            c.next.store(base + i as u32 + 1, Ordering::Relaxed);
        }
        let _ = self.chunks[k].set(cells);
        *grown = k + 1;
        self.push(base + 1, base + len - 1);
        base
    }

    /// The driver's verdict for cell `index` (settled once: its [`SlotAck`] is used up),
    /// `me` being this slab as the cell's ends hold it.
    /// Returns the cell, readied for its next taker, when its receipt is gone: the caller
    /// pushes it.
    #[inline]
    fn settle(&self, me: SlabRef, index: u32, verdict: Result<(), ReceiptError>) -> Option<&Cell> {
        let cell = self.cell(index)?;
        let (code, refusal) = code::of(verdict);
        if let Some(e) = refusal {
            lock(&self.refusals).push((index, e));
        }
        let code = u32::from(code);
        let was = cell.state.fetch_or(code, Ordering::AcqRel);
        if was & GONE == 0 {
            if was & WAKER != 0 {
                // The receipt may read the verdict, give the cell back and let its
                // reference go from here on: the waker's reference (the receipt took it
                // before raising the flag, and left it to us) keeps the slab meanwhile.
                cell.waker.wake();
                // SAFETY: the flag's reference is ours (see `SlabReceipt::poll_verdict`),
                // and this end touches neither the slab nor the cell after it.
                unsafe { me.give_up() };
            }
            return None;
        }
        // Nobody reads it.
        self.reset(index, cell, was | code);
        if was & WAKER != 0 {
            // It waited once, and left the waker's reference to us: given up (the
            // cell's, which our caller gives up after the cell is back, keeps the slab).
            // SAFETY: the flag's reference is ours, and is not touched after.
            unsafe { me.give_up() };
        }
        Some(cell)
    }

    /// Readies `cell` (at `index`), which both ends are done with, for its next taker;
    /// `state` is its state as the last end left it.
    #[inline]
    fn reset(&self, index: u32, cell: &Cell, state: u32) {
        if state & WAKER != 0 {
            drop(cell.waker.take());
        }
        if state & VERDICT == REFUSED {
            // Not read (a read takes it out): nothing to find.
            lock(&self.refusals).retain(|(i, _)| *i != index);
        }
        cell.state.store(PENDING, Ordering::Relaxed);
    }

    /// Gives back `cell` (at `index`), left in `state` by the end finishing last.
    fn give_back(&self, index: u32, cell: &Cell, state: u32) {
        self.reset(index, cell, state);
        self.push(index, index);
    }

    /// The verdict of a settled cell's state `state`.
    fn verdict(&self, index: u32, state: u32) -> Result<(), ReceiptError> {
        let found = code::verdict((state & VERDICT) as u8, || {
            let mut r = lock(&self.refusals);
            let at = r.iter().position(|(i, _)| *i == index);
            at.map_or(Error::Closed, |p| r.remove(p).1)
        });
        found.unwrap_or(Err(ReceiptError::Unacknowledged))
    }

    /// Cells in use (taken and not given back).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        let mut free = 0;
        let mut i = self.free.load(Ordering::Acquire) as u32;
        while let Some(c) = (i != NIL).then(|| self.cell(i)).flatten() {
            free += 1;
            i = c.next.load(Ordering::Relaxed);
        }
        self.capacity() - free
    }

    /// Cells the slab has grown to.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        let k = *lock(&self.grown);
        (FIRST as usize) * ((1 << k) - 1)
    }
}

/// A cell's hold on its slab: a pointer that one reference of the slab's `Arc` keeps
/// valid. Both ends of an open cell share one such reference (taken by
/// [`ReceiptSlab::open`]); the end that gives the cell back gives it up, after its last
/// touch of the slab. A receipt that raises [`WAKER`] takes one more first, which the
/// driver gives up once it has woken it (or the receipt itself, if the verdict was there
/// first).
#[derive(Debug, Clone, Copy)]
struct SlabRef(NonNull<ReceiptSlab>);

// SAFETY: a `SlabRef` is a shared reference to a `ReceiptSlab` (whose fields are atomics,
// locks and write-once chunks: `Send` and `Sync`), kept alive by a counted reference.
unsafe impl Send for SlabRef {}
unsafe impl Sync for SlabRef {}

impl SlabRef {
    /// A new reference of `slab`.
    fn take(slab: &Arc<ReceiptSlab>) -> SlabRef {
        // Counted, and given up by `give_up`.
        let raw = Arc::into_raw(Arc::clone(slab)).cast_mut();
        SlabRef(NonNull::new(raw).expect("an Arc's pointer is never null"))
    }

    /// One more reference of the slab, for a holder of one.
    fn take_again(self) -> SlabRef {
        // SAFETY: a reference is held for `self` (the type's rule), so the count is at
        // least one, and the pointer is `Arc::into_raw`'s.
        unsafe { Arc::increment_strong_count(self.0.as_ptr()) };
        self
    }

    /// The slab.
    fn get(&self) -> &ReceiptSlab {
        // SAFETY: a reference is held for every `SlabRef` in use (see the type), and the
        // `Arc`'s value lives while one is.
        unsafe { self.0.as_ref() }
    }

    /// Gives up one reference.
    ///
    /// # Safety
    /// The caller holds one reference of its own for this slab (the cell's or a
    /// waker's), gives it up here, and touches the slab through it no more.
    unsafe fn give_up(self) {
        // SAFETY: the pointer came from `Arc::into_raw` (`take`), and the reference given
        // up is one counted for it (the caller's contract).
        unsafe { Arc::decrement_strong_count(self.0.as_ptr()) }
    }
}

/// The receipt's end of a cell.
#[derive(Debug)]
pub(crate) struct SlabReceipt {
    slab: SlabRef,
    /// The cell (in a chunk that never moves while the slab lives): always there for a
    /// cell handed out.
    cell: Option<NonNull<Cell>>,
    index: u32,
    /// The verdict's code once read (the cell is given back then; `PENDING` before): a
    /// poll after that returns it again. A code, not the verdict, so that a receipt (moved
    /// with every send's result) stays small.
    read: u8,
    /// A refusal's reason, once read (rare: boxed).
    refusal: Option<Box<Error>>,
    /// It took a reference for its waker (raised [`WAKER`]): the driver gives it up
    /// once it has woken it.
    waker_ref: bool,
}

// SAFETY: its pointers are to the slab and one of its cells (atomics and an
// `AtomicWaker`: `Send` and `Sync`), kept valid by the cell's reference.
unsafe impl Send for SlabReceipt {}
unsafe impl Sync for SlabReceipt {}

/// The cell `c` points to, for as long as the pointer is borrowed.
///
/// # Safety
/// `c` is a receipt's cell that it has not given back: the cell's chunk lives as long as
/// the slab, which the cell's reference keeps until then.
unsafe fn cell_at(c: &Option<NonNull<Cell>>) -> Option<&Cell> {
    // SAFETY: the caller's contract.
    c.as_ref().map(|c| unsafe { c.as_ref() })
}

impl SlabReceipt {
    /// The verdict, once the driver has resolved the cell; until then, `cx`'s waker is
    /// woken when it does.
    pub(crate) fn poll_verdict(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ReceiptError>> {
        if self.read != code::PENDING {
            let refusal = || self.refusal.as_deref().copied().unwrap_or(Error::Closed);
            let v = code::verdict(self.read, refusal);
            return Poll::Ready(v.unwrap_or(Err(ReceiptError::Unacknowledged)));
        }
        let at = self.cell;
        // SAFETY: no verdict read yet, so the cell is not given back.
        let Some(cell) = (unsafe { cell_at(&at) }) else {
            // Never happens: the cell is ours until we read it.
            return Poll::Ready(Err(ReceiptError::Unacknowledged));
        };
        let mut state = cell.state.load(Ordering::Acquire);
        let mut own_waker_ref = false;
        if state & VERDICT == PENDING {
            if !self.waker_ref {
                // A reference for the driver's wake, which may touch the cell after this
                // end gave it back: ours again below if the verdict is there first.
                let _ = SlabRef::take_again(self.slab);
                self.waker_ref = true;
            }
            // Registered before the flag is set: a driver that sees the flag finds it.
            cell.waker.register(cx.waker());
            let was = cell.state.fetch_or(WAKER, Ordering::AcqRel);
            // The flag raised now, on a verdict already there: the driver saw no flag,
            // so the waker's reference stays ours.
            own_waker_ref = was & WAKER == 0 && was & VERDICT != PENDING;
            state = was;
            if state & VERDICT == PENDING {
                return Poll::Pending;
            }
        }
        let v = self.slab.get().verdict(self.index, state);
        let (read, refusal) = code::of(v);
        (self.read, self.refusal) = (read, refusal.map(Box::new));
        // The driver is done with it, and so are we (a refusal's reason is read).
        self.slab
            .get()
            .give_back(self.index, cell, state & !VERDICT);
        // SAFETY: the cell's reference (we gave the cell back), and the waker's if the
        // driver never saw the flag; neither the slab nor the cell is touched after.
        unsafe {
            if own_waker_ref {
                self.slab.give_up();
            }
            self.slab.give_up();
        }
        Poll::Ready(v)
    }
}

impl Drop for SlabReceipt {
    #[inline]
    fn drop(&mut self) {
        if self.read != code::PENDING {
            return;
        }
        // SAFETY: no verdict read, so the cell is not given back.
        let Some(cell) = (unsafe { cell_at(&self.cell) }) else {
            return;
        };
        let was = cell.state.fetch_or(GONE, Ordering::AcqRel);
        if was & VERDICT != PENDING {
            // Settled and unread: the driver left the cell to us.
            self.slab.get().give_back(self.index, cell, was);
            // SAFETY: the cell's reference: the cell is given back, and nothing is
            // touched after.
            unsafe { self.slab.give_up() };
        }
    }
}

/// The driver's end of a cell. Dropped unresolved (the endpoint stopped), it resolves the
/// message as [`ReceiptError::Unacknowledged`], as a dropped oneshot sender does. Two
/// words: it travels in every send's command.
#[derive(Debug)]
pub(crate) struct SlotAck {
    /// `None` once resolved.
    slab: Option<SlabRef>,
    index: u32,
}

impl SlotAck {
    /// Resolves the receipt with `verdict`.
    pub(crate) fn resolve(mut self, verdict: Result<(), ReceiptError>) {
        self.settle(verdict);
    }

    fn settle(&mut self, verdict: Result<(), ReceiptError>) {
        if let Some(slab) = self.slab.take() {
            if slab.get().settle(slab, self.index, verdict).is_some() {
                slab.get().push(self.index, self.index);
                // SAFETY: the cell's reference: the receipt is gone and the cell given
                // back; nothing is touched after.
                unsafe { slab.give_up() };
            }
        }
    }
}

impl Drop for SlotAck {
    fn drop(&mut self) {
        self.settle(Err(ReceiptError::Unacknowledged));
    }
}

/// Cells settled as acknowledged together: those of one slab in a row that their receipts
/// left to the driver go back to the free stack in one swap (a verdict frame acknowledges
/// many messages of one shard).
#[derive(Debug, Default)]
pub(crate) struct SlotRun {
    slab: Option<SlabRef>,
    /// The cells to give back, linked through their `next`: the first and the last.
    freed: Option<(u32, u32)>,
    /// How many: the references the run gives up once they are back.
    refs: u32,
}

impl SlotRun {
    /// Resolves `ack` as acknowledged, with the run.
    #[inline]
    pub(crate) fn acknowledge(&mut self, mut ack: SlotAck) {
        let Some(slab) = ack.slab.take() else {
            return;
        };
        let Some(cell) = slab.get().settle(slab, ack.index, Ok(())) else {
            return;
        };
        if self.slab.is_some_and(|s| s.0 != slab.0) {
            self.flush();
        }
        self.freed = Some(match self.freed {
            Some((first, last)) => {
                cell.next.store(first, Ordering::Relaxed);
                (ack.index, last)
            }
            None => (ack.index, ack.index),
        });
        // The cell's reference is the run's until the cell is back.
        self.refs += 1;
        self.slab.get_or_insert(slab);
    }

    /// Gives back the cells gathered.
    pub(crate) fn flush(&mut self) {
        let slab = self.slab.take();
        if let (Some(slab), Some((first, last))) = (slab, self.freed.take()) {
            slab.get().push(first, last);
            // SAFETY: the references of the cells gathered, each given back just now;
            // nothing is touched after.
            for _ in 0..std::mem::take(&mut self.refs) {
                unsafe { slab.give_up() };
            }
        }
    }
}

impl Drop for SlotRun {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    async fn verdict(r: &mut SlabReceipt) -> Result<(), ReceiptError> {
        poll_fn(|cx| r.poll_verdict(cx)).await
    }

    #[test]
    fn the_drivers_end_is_two_words() {
        assert_eq!(std::mem::size_of::<SlotAck>(), 16);
    }

    #[tokio::test]
    async fn a_verdict_reaches_a_waiting_receipt_and_the_cell_is_reused() {
        let slab = ReceiptSlab::new();
        let (mut r, ack) = slab.open();
        let waiter = tokio::spawn(async move { verdict(&mut r).await });
        tokio::task::yield_now().await;
        ack.resolve(Err(ReceiptError::InDoubt));
        assert_eq!(waiter.await.unwrap(), Err(ReceiptError::InDoubt));
        assert_eq!(slab.in_use(), 0);
        // The cell is taken again, under a new generation.
        let (mut r2, ack2) = slab.open();
        assert_eq!(slab.capacity(), FIRST as usize, "the first chunk only");
        ack2.resolve(Ok(()));
        assert_eq!(verdict(&mut r2).await, Ok(()));
        // Read again: the same verdict.
        assert_eq!(verdict(&mut r2).await, Ok(()));
    }

    /// Acknowledgements of two slabs' cells, interleaved, more than a run holds: every
    /// waiting receipt is woken with its verdict, every dropped one's cell comes back, and a
    /// run dropped before its flush resolves what it holds.
    #[tokio::test]
    async fn a_run_settles_every_cell_of_both_slabs() {
        let (a, b) = (ReceiptSlab::new(), ReceiptSlab::new());
        let mut waiting = Vec::new();
        let mut run = SlotRun::default();
        for i in 0..50 {
            let slab = if i % 7 < 4 { &a } else { &b };
            let (mut r, ack) = slab.open();
            if i % 3 == 0 {
                drop(r);
            } else {
                waiting.push(tokio::spawn(async move { verdict(&mut r).await }));
            }
            tokio::task::yield_now().await;
            run.acknowledge(ack);
        }
        let (mut last, ack) = a.open();
        run.acknowledge(ack);
        drop(run);
        // A run dropped unflushed would leave these waiting for ever: bounded, so the test
        // fails rather than hangs.
        let within = std::time::Duration::from_secs(5);
        let got = tokio::time::timeout(within, verdict(&mut last)).await;
        assert_eq!(got, Ok(Ok(())));
        drop(last);
        for w in waiting {
            let got = tokio::time::timeout(within, w).await.expect("woken");
            assert_eq!(got.unwrap(), Ok(()));
        }
        assert_eq!((a.in_use(), b.in_use()), (0, 0));
    }

    /// The slab's count of references: the handles' one, and one for each open cell.
    fn refs(slab: &Arc<ReceiptSlab>) -> usize {
        Arc::strong_count(slab)
    }

    /// Every way a cell's two ends can finish (either first, the receipt waiting or not,
    /// dropped waiting, a run's settle) takes the slab's count up by one while the cell is
    /// open and back down once it is back: no end outlives the slab, and none keeps it.
    #[tokio::test]
    async fn an_open_cell_holds_the_slab_once_whichever_end_finishes() {
        let slab = ReceiptSlab::new();
        let (r, ack) = slab.open();
        assert_eq!(refs(&slab), 2, "one for the cell's two ends");
        ack.resolve(Ok(()));
        assert_eq!(refs(&slab), 2, "the receipt still holds it");
        drop(r);
        assert_eq!(refs(&slab), 1);

        let (r, ack) = slab.open();
        drop(r);
        assert_eq!(refs(&slab), 2, "the driver's end still holds it");
        ack.resolve(Ok(()));
        assert_eq!(refs(&slab), 1);

        // A receipt that waits takes one more for the driver's wake.
        let (mut r, ack) = slab.open();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(r.poll_verdict(&mut cx).is_pending());
        assert!(r.poll_verdict(&mut cx).is_pending());
        assert_eq!(refs(&slab), 3, "the cell's and the waker's, once");
        ack.resolve(Err(ReceiptError::InDoubt));
        assert_eq!(refs(&slab), 2, "the driver woke it and gave the waker's up");
        assert_eq!(
            r.poll_verdict(&mut cx),
            Poll::Ready(Err(ReceiptError::InDoubt))
        );
        assert_eq!(refs(&slab), 1);
        drop(r);
        assert_eq!(refs(&slab), 1);

        // Waited, then dropped before the verdict: the driver gives up both.
        let (mut r, ack) = slab.open();
        assert!(r.poll_verdict(&mut cx).is_pending());
        drop(r);
        assert_eq!(refs(&slab), 3);
        ack.resolve(Ok(()));
        assert_eq!(refs(&slab), 1);

        // Through a run: the cells' references go when the run gives the cells back.
        let mut run = SlotRun::default();
        let mut waiting = Vec::new();
        for i in 0..6 {
            let (mut r, ack) = slab.open();
            if i % 2 == 0 {
                drop(r);
            } else {
                assert!(r.poll_verdict(&mut cx).is_pending());
                waiting.push(r);
            }
            run.acknowledge(ack);
        }
        assert_eq!(
            refs(&slab),
            1 + 3 + 3,
            "the run's three, and the waiting three"
        );
        run.flush();
        assert_eq!(refs(&slab), 1 + 3);
        for mut r in waiting {
            assert_eq!(r.poll_verdict(&mut cx), Poll::Ready(Ok(())));
        }
        assert_eq!(refs(&slab), 1);
        // The driver's end dropped unresolved: the receipt reads `Unacknowledged`.
        let (mut r, ack) = slab.open();
        drop(ack);
        assert_eq!(
            r.poll_verdict(&mut cx),
            Poll::Ready(Err(ReceiptError::Unacknowledged))
        );
        assert_eq!(refs(&slab), 1);
        assert_eq!(slab.in_use(), 0);
    }

    /// The handles gone (the endpoint dropped) while messages are open: the slab stays
    /// until the last end of the last cell is done, and not after.
    #[test]
    fn the_slab_outlives_its_handles_while_a_cell_is_open() {
        let slab = ReceiptSlab::new();
        let weak = Arc::downgrade(&slab);
        let (r1, ack1) = slab.open();
        let (mut r2, ack2) = slab.open();
        drop(slab);
        assert!(weak.upgrade().is_some());
        ack1.resolve(Ok(()));
        drop(r1);
        assert!(weak.upgrade().is_some(), "the second cell holds it");
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(r2.poll_verdict(&mut cx).is_pending());
        drop(ack2);
        assert!(
            weak.upgrade().is_some(),
            "the receipt has not read its verdict"
        );
        assert_eq!(
            r2.poll_verdict(&mut cx),
            Poll::Ready(Err(ReceiptError::Unacknowledged))
        );
        assert!(weak.upgrade().is_none(), "freed with the last end");
        drop(r2);
    }

    #[tokio::test]
    async fn every_cell_comes_back_whichever_end_finishes_first() {
        let slab = ReceiptSlab::new();
        // Resolved, then the receipt dropped unread.
        let (r, ack) = slab.open();
        ack.resolve(Ok(()));
        drop(r);
        // The receipt dropped, then resolved.
        let (r, ack) = slab.open();
        drop(r);
        ack.resolve(Ok(()));
        // The driver's end dropped unresolved (the endpoint stopped): unacknowledged.
        let (mut r, ack) = slab.open();
        drop(ack);
        assert_eq!(verdict(&mut r).await, Err(ReceiptError::Unacknowledged));
        drop(r);
        assert_eq!(slab.in_use(), 0);
        assert_eq!(slab.in_use(), 0);
        assert_eq!(slab.capacity(), FIRST as usize, "the first chunk, reused");
    }

    #[tokio::test]
    async fn cells_grow_to_the_receipts_outstanding_and_no_further() {
        let slab = ReceiptSlab::new();
        let pairs: Vec<_> = (0..100).map(|_| slab.open()).collect();
        assert_eq!(slab.in_use(), 100);
        for (i, (mut r, ack)) in pairs.into_iter().enumerate() {
            ack.resolve(if i % 2 == 0 {
                Ok(())
            } else {
                Err(ReceiptError::NotDelivered)
            });
            let want = if i % 2 == 0 {
                Ok(())
            } else {
                Err(ReceiptError::NotDelivered)
            };
            assert_eq!(verdict(&mut r).await, want);
        }
        assert_eq!(slab.in_use(), 0);
        for _ in 0..10 {
            let (r, ack) = slab.open();
            ack.resolve(Ok(()));
            drop(r);
        }
        // Chunks double: at most twice what was outstanding, and no more after.
        assert_eq!(slab.capacity(), 64 + 128);
    }

    /// A refusal's reason reaches the receipt that reads it, and one dropped unread leaves
    /// nothing behind.
    #[tokio::test]
    async fn a_refusal_keeps_its_reason_until_read_or_dropped() {
        let slab = ReceiptSlab::new();
        let refused = Err(ReceiptError::Refused(Error::Storage));
        let (mut r, ack) = slab.open();
        ack.resolve(refused);
        assert_eq!(verdict(&mut r).await, refused);
        assert_eq!(
            verdict(&mut r).await,
            refused,
            "read again: the same reason"
        );
        let (r, ack) = slab.open();
        ack.resolve(refused);
        drop(r);
        assert!(lock(&slab.refusals).is_empty());
        assert_eq!(slab.in_use(), 0);
    }

    /// A taker that read the top, then lost its turn while others took that cell and the
    /// next and gave the first back, finds the top changed (its tag) and does not make the
    /// taken second cell the top: the stack's classic ABA.
    #[test]
    fn a_stale_top_is_refused_even_when_its_cell_is_back_on_top() {
        let slab = ReceiptSlab::new();
        drop(slab.open());
        let stale = slab.free.load(Ordering::Acquire);
        let (x, y) = slab.peek(stale).unwrap();
        assert_eq!(slab.pop(), Some(x));
        assert_eq!(slab.pop(), Some(y));
        slab.push(x, x);
        assert_eq!(slab.free.load(Ordering::Acquire) as u32, x, "x back on top");
        // Spurious failures aside (`_weak`), it must never succeed.
        for _ in 0..100 {
            assert!(
                slab.take_top(stale, y).is_err(),
                "taken cell {y} made the top"
            );
        }
        assert_eq!(slab.pop(), Some(x));
        assert_ne!(slab.pop(), Some(y));
    }

    /// Threads take and give back cells at once, each end finishing first in turn: no cell
    /// is ever handed to two takers at once (the free stack's tag), and all come back.
    #[test]
    fn concurrent_takers_never_share_a_cell() {
        // Fewer under Miri, which checks every access of the interleavings it runs.
        const ROUNDS: usize = if cfg!(miri) { 300 } else { 20_000 };
        let slab = ReceiptSlab::new();
        let taken: Arc<Vec<std::sync::atomic::AtomicBool>> =
            Arc::new((0..4096).map(|_| Default::default()).collect());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (slab, taken) = (slab.clone(), taken.clone());
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..ROUNDS {
                        let (r, ack) = slab.open();
                        let was = taken[r.index as usize].swap(true, Ordering::SeqCst);
                        assert!(!was, "cell {} handed out twice", r.index);
                        held.push((r, ack));
                        if held.len() > (i + t) % 7 {
                            let (r, ack) = held.swap_remove(0);
                            taken[r.index as usize].store(false, Ordering::SeqCst);
                            if i % 2 == 0 {
                                drop(r);
                                ack.resolve(Ok(()));
                            } else {
                                ack.resolve(Ok(()));
                                drop(r);
                            }
                        }
                    }
                    for (r, _) in &held {
                        taken[r.index as usize].store(false, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(slab.in_use(), 0);
        assert!(slab.capacity() <= 4 * FIRST as usize, "{}", slab.capacity());
        assert_eq!(
            Arc::strong_count(&slab),
            1,
            "every cell's reference given up"
        );
    }

    /// A driver thread settles (one by one and in runs) while the receipts' threads read
    /// or drop them, racing: every read verdict is the one settled, every waiter is
    /// woken, every cell comes back.
    #[test]
    fn the_two_ends_race_and_every_verdict_arrives() {
        const ROUNDS: u64 = if cfg!(miri) { 100 } else { 3000 };
        let slab = ReceiptSlab::new();
        let (tx, rx) = std::sync::mpsc::channel::<(u64, SlotAck)>();
        let want = |n: u64| match n % 4 {
            0 | 1 => Ok(()),
            2 => Err(ReceiptError::InDoubt),
            _ => Err(ReceiptError::Refused(Error::Closed)),
        };
        let driver = std::thread::spawn(move || {
            let mut run = SlotRun::default();
            for (n, ack) in rx {
                match want(n) {
                    Ok(()) if n % 8 == 0 => ack.resolve(Ok(())),
                    Ok(()) => run.acknowledge(ack),
                    v => ack.resolve(v),
                }
                if n % 5 == 0 {
                    run.flush();
                }
            }
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let readers: Vec<_> = (0..3u64)
            .map(|t| {
                let (slab, tx) = (slab.clone(), tx.clone());
                rt.spawn(async move {
                    for i in 0..ROUNDS {
                        let n = t * 1_000_000 + i;
                        let (mut r, ack) = slab.open();
                        tx.send((n, ack)).unwrap();
                        if i % 3 == 0 {
                            drop(r);
                        } else {
                            let within = std::time::Duration::from_secs(10);
                            let got = tokio::time::timeout(within, verdict(&mut r)).await;
                            assert_eq!(got, Ok(want(n)), "message {n}");
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        rt.block_on(async {
            for r in readers {
                r.await.unwrap();
            }
        });
        driver.join().unwrap();
        drop(rt);
        assert_eq!(slab.in_use(), 0);
        assert_eq!(
            Arc::strong_count(&slab),
            1,
            "every cell's reference given up"
        );
        assert!(lock(&slab.refusals).is_empty());
    }
}
