//! Receipts without an allocation each: one slab of verdict cells per shard, a cell taken
//! per send and given back once both the receipt and the driver are done with it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::endpoint::api::error::ReceiptError;

/// The verdict cells of one shard's single sends ([`Handle::send`]), shared by the
/// receipts (the application's end) and the driver (which resolves them).
///
/// A cell is taken by [`open`](Self::open) and given back when both ends are done: the
/// receipt has read its verdict, or was dropped, and the driver has resolved it, or
/// dropped its end (which resolves it as unacknowledged). So no end ever finds its cell
/// reused under it; the generation each end keeps is checked all the same. The slab grows
/// to the most receipts outstanding at once (messages whose verdict is not known yet, or
/// known and not read) and keeps its cells for reuse.
///
/// [`Handle::send`]: crate::endpoint::Handle::send
#[derive(Debug, Default)]
pub(crate) struct ReceiptSlab {
    cells: Mutex<Cells>,
}

#[derive(Debug, Default)]
struct Cells {
    cells: Vec<Cell>,
    /// Indices of free cells.
    free: Vec<u32>,
}

#[derive(Debug)]
struct Cell {
    /// Bumped each time the cell is given back.
    generation: u32,
    state: State,
}

#[derive(Debug)]
enum State {
    Free,
    /// No verdict yet: the waker of the receipt's last poll, if any; `dropped` once the
    /// receipt is gone (the verdict then only gives the cell back).
    Waiting {
        waker: Option<Waker>,
        dropped: bool,
    },
    /// The verdict, not read yet.
    Done(Result<(), ReceiptError>),
}

impl ReceiptSlab {
    /// A new, empty slab.
    pub(crate) fn new() -> Arc<ReceiptSlab> {
        Arc::new(ReceiptSlab::default())
    }

    fn lock(&self) -> MutexGuard<'_, Cells> {
        // A panic while the lock was held leaves no cell half-written (every change is
        // one assignment): go on with the data.
        self.cells.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a cell: the receipt's end and the driver's.
    pub(crate) fn open(self: &Arc<Self>) -> (SlabReceipt, SlotAck) {
        let mut c = self.lock();
        let waiting = State::Waiting {
            waker: None,
            dropped: false,
        };
        let (index, generation) = match c.free.pop() {
            Some(i) => {
                let cell = &mut c.cells[i as usize];
                cell.state = waiting;
                (i, cell.generation)
            }
            None => {
                let i = u32::try_from(c.cells.len()).expect("fewer than 2^32 receipts at once");
                c.cells.push(Cell {
                    generation: 0,
                    state: waiting,
                });
                (i, 0)
            }
        };
        drop(c);
        let at = At { index, generation };
        (
            SlabReceipt {
                slab: self.clone(),
                at,
                verdict: None,
            },
            SlotAck {
                slab: Some(self.clone()),
                at,
            },
        )
    }

    /// Cells in use (taken and not given back).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        let c = self.lock();
        c.cells.len() - c.free.len()
    }

    /// Cells the slab has grown to.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.lock().cells.len()
    }
}

impl Cells {
    /// The cell at `at`, if it is still the one its end took.
    fn cell(&mut self, at: At) -> Option<&mut Cell> {
        self.cells
            .get_mut(at.index as usize)
            .filter(|c| c.generation == at.generation && !matches!(c.state, State::Free))
    }

    /// Resolves the cell at `at` with `verdict` (the first verdict stands): the waker to
    /// wake once the lock is let go, if the receipt waits.
    fn settle(&mut self, at: At, verdict: Result<(), ReceiptError>) -> Option<Waker> {
        let cell = self.cell(at)?;
        let waker = match &mut cell.state {
            State::Waiting { dropped: true, .. } => {
                // Nobody will read it.
                self.give_back(at);
                return None;
            }
            State::Waiting { waker, .. } => waker.take(),
            State::Done(_) | State::Free => return None,
        };
        cell.state = State::Done(verdict);
        waker
    }

    fn give_back(&mut self, at: At) {
        if let Some(cell) = self.cell(at) {
            cell.state = State::Free;
            cell.generation = cell.generation.wrapping_add(1);
            self.free.push(at.index);
        }
    }
}

/// Where a cell is, and which taking of it.
#[derive(Debug, Clone, Copy)]
struct At {
    index: u32,
    generation: u32,
}

/// The receipt's end of a cell.
#[derive(Debug)]
pub(crate) struct SlabReceipt {
    slab: Arc<ReceiptSlab>,
    at: At,
    /// The verdict once read (the cell is given back then): a poll after that returns it
    /// again.
    verdict: Option<Result<(), ReceiptError>>,
}

impl SlabReceipt {
    /// The verdict, once the driver has resolved the cell; until then, `cx`'s waker is
    /// woken when it does.
    pub(crate) fn poll_verdict(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ReceiptError>> {
        if let Some(v) = self.verdict {
            return Poll::Ready(v);
        }
        let mut c = self.slab.lock();
        let Some(cell) = c.cell(self.at) else {
            // Never happens: the cell is ours until we read it.
            return Poll::Ready(Err(ReceiptError::Unacknowledged));
        };
        match &mut cell.state {
            State::Done(v) => {
                let v = *v;
                c.give_back(self.at);
                self.verdict = Some(v);
                Poll::Ready(v)
            }
            State::Waiting { waker, .. } => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            State::Free => Poll::Ready(Err(ReceiptError::Unacknowledged)),
        }
    }
}

impl Drop for SlabReceipt {
    fn drop(&mut self) {
        if self.verdict.is_some() {
            return;
        }
        let mut c = self.slab.lock();
        let Some(cell) = c.cell(self.at) else {
            return;
        };
        match &mut cell.state {
            State::Done(_) => c.give_back(self.at),
            State::Waiting { waker, dropped } => {
                *waker = None;
                *dropped = true;
            }
            State::Free => {}
        }
    }
}

/// The driver's end of a cell. Dropped unresolved (the endpoint stopped), it resolves the
/// message as [`ReceiptError::Unacknowledged`], as a dropped oneshot sender does. Two
/// words: it travels in every send's command.
#[derive(Debug)]
pub(crate) struct SlotAck {
    /// `None` once resolved.
    slab: Option<Arc<ReceiptSlab>>,
    at: At,
}

impl SlotAck {
    /// Resolves the receipt with `verdict` (the first verdict stands).
    pub(crate) fn resolve(mut self, verdict: Result<(), ReceiptError>) {
        self.settle(verdict);
    }

    fn settle(&mut self, verdict: Result<(), ReceiptError>) {
        let Some(slab) = self.slab.take() else {
            return;
        };
        let waker = slab.lock().settle(self.at, verdict);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Cells settled as acknowledged together: consecutive ones of one slab take its lock once
/// (a verdict frame acknowledges many messages of one shard), in runs of at most
/// [`SlotRun::MAX`] so that their wakers wait on the stack.
#[derive(Debug, Default)]
pub(crate) struct SlotRun {
    slab: Option<Arc<ReceiptSlab>>,
    ats: smallvec::SmallVec<[At; SlotRun::MAX]>,
}

impl SlotRun {
    /// The most cells settled under one taking of the lock.
    const MAX: usize = 16;

    /// Resolves `ack` as acknowledged, with the run.
    pub(crate) fn acknowledge(&mut self, mut ack: SlotAck) {
        let Some(slab) = ack.slab.take() else {
            return;
        };
        let other = self.slab.as_ref().is_some_and(|s| !Arc::ptr_eq(s, &slab));
        if other || self.ats.len() == Self::MAX {
            self.flush();
        }
        self.slab.get_or_insert(slab);
        self.ats.push(ack.at);
    }

    /// Resolves the run gathered.
    pub(crate) fn flush(&mut self) {
        let Some(slab) = self.slab.take() else {
            return;
        };
        let mut wakers = smallvec::SmallVec::<[Waker; SlotRun::MAX]>::new();
        {
            let mut c = slab.lock();
            wakers.extend(self.ats.drain(..).filter_map(|at| c.settle(at, Ok(()))));
        }
        for w in wakers {
            w.wake();
        }
    }
}

impl Drop for SlotRun {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Drop for SlotAck {
    fn drop(&mut self) {
        self.settle(Err(ReceiptError::Unacknowledged));
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
        assert_eq!(slab.capacity(), 1);
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
        assert_eq!(slab.capacity(), 1, "one cell, reused each time");
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
        assert_eq!(slab.capacity(), 100);
    }
}
