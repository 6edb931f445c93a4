//! Receipts, and how the driver resolves the verdict of a message: one [`Receipt`] per
//! message ([`Handle::send`](crate::endpoint::Handle::send)), or one shared slot table per batch
//! ([`Handle::send_batch`](crate::endpoint::Handle::send_batch), [`BatchReceipt`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::endpoint::api::error::Error;
use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::receipt_slab::{SlabReceipt, SlotAck, SlotRun};
use crate::endpoint::flows::ack::FlowAck;
use crate::proto::{MsgId, NodeId};
use crate::rpc::calls::{CallAck, CallRun};

/// Where the driver sends a message's verdict.
pub(crate) enum Ack {
    /// A single send's receipt.
    One(oneshot::Sender<Result<(), ReceiptError>>),
    /// A single send's receipt, a cell of its shard's slab.
    Slot(SlotAck),
    /// Message `index` of a batch.
    Batch(BatchSlot),
    /// Nobody waits for the verdict (a flow's note).
    None,
    /// A server's reply: nobody waits for its verdict (its caller learns the outcome), and
    /// it is sent once more if it is told in doubt (its caller lost the incarnation whose
    /// envelope carried it: see `Sends::settle_in_doubt`), with the payload the core hands
    /// back with that verdict, or, for a reply recovered from a durable node's journal
    /// (which the restarted core does not know for a reply), the copy kept here. Boxed:
    /// recovered replies are few, and every `Ack` stays small.
    Reply(Option<Box<crate::proto::Payload>>),
    /// A message of an ordered flow: its flow learns the verdict (and its receipt, if any).
    Flow(Box<FlowAck>),
    /// A call's request: its call learns the verdict.
    Call(CallAck),
}

impl Ack {
    /// Resolves the message's receipt with `verdict`. Dropping an `Ack` without resolving it
    /// resolves the receipt as [`ReceiptError::Unacknowledged`].
    pub(crate) fn resolve(self, verdict: Result<(), ReceiptError>) {
        match self {
            Ack::One(tx) => {
                let _ = tx.send(verdict);
            }
            Ack::Slot(slot) => slot.resolve(verdict),
            Ack::Batch(slot) => slot.resolve(verdict),
            Ack::None | Ack::Reply(_) => {}
            Ack::Flow(f) => f.resolve(verdict),
            Ack::Call(c) => c.resolve(verdict),
        }
    }
}

use crate::endpoint::api::verdict_code as code;
use code::{OK, PENDING};

/// What a batch's receipt and the driver share: one allocation for the verdicts of every
/// message of the batch, and one completion signal.
struct BatchState {
    /// One verdict code per message.
    codes: Box<[AtomicU8]>,
    /// Messages not resolved yet.
    pending: AtomicUsize,
    /// The reasons of the (rare) refusals, by index.
    refusals: Mutex<Vec<(u32, Error)>>,
    /// Fired by whoever resolves the last message.
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl BatchState {
    fn resolve(&self, index: u32, verdict: Result<(), ReceiptError>) {
        let (code, refusal) = code::of(verdict);
        if let Some(e) = refusal {
            self.refusals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((index, e));
        }
        let Some(c) = self.codes.get(index as usize) else {
            return;
        };
        if c.compare_exchange(PENDING, code, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return; // resolved already: the first verdict stands
        }
        self.settle(1);
    }

    /// Messages `first .. first + n` acknowledged together: one update of the count of
    /// pending messages and one completion check for the whole run.
    fn acknowledge_run(&self, first: u32, n: u32) {
        let (start, end) = (first as usize, first as usize + n as usize);
        let Some(codes) = self.codes.get(start..end) else {
            return;
        };
        let settled = codes
            .iter()
            .filter(|c| {
                // Resolved already: the first verdict stands.
                c.compare_exchange(PENDING, OK, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
            .count();
        self.settle(settled);
    }

    /// `n` more messages resolved: the receipt is woken when none is left.
    fn settle(&self, n: usize) {
        if n > 0 && self.pending.fetch_sub(n, Ordering::AcqRel) == n {
            if let Some(tx) = self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
                let _ = tx.send(());
            }
        }
    }

    fn verdict(&self, index: usize) -> Option<Result<(), ReceiptError>> {
        let c = self.codes.get(index)?.load(Ordering::Acquire);
        code::verdict(c, || {
            let r = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
            r.iter()
                .find(|(i, _)| *i as usize == index)
                .map_or(Error::Closed, |(_, e)| *e)
        })
    }
}

/// The driver's end of one message of a batch. Dropped unresolved (the endpoint stopped),
/// it resolves the message as [`ReceiptError::Unacknowledged`], as a dropped oneshot does
/// for a single receipt.
pub(crate) struct BatchSlot {
    state: Arc<BatchState>,
    index: u32,
    resolved: bool,
}

impl BatchSlot {
    fn resolve(mut self, verdict: Result<(), ReceiptError>) {
        self.resolved = true;
        self.state.resolve(self.index, verdict);
    }
}

impl Drop for BatchSlot {
    fn drop(&mut self) {
        if !self.resolved {
            self.state
                .resolve(self.index, Err(ReceiptError::Unacknowledged));
        }
    }
}

/// Acknowledgements resolved together: consecutive messages of one batch update its
/// shared state once per run ([`Acks::flush`] ends the last run).
#[derive(Default)]
pub(crate) struct Acks {
    /// The batch of the run being gathered, its first index and its length.
    run: Option<(Arc<BatchState>, u32, u32)>,
    /// Single sends' cells, settled a run of one slab at a time.
    slots: SlotRun,
    /// Calls' requests, told a run of one table at a time.
    calls: CallRun,
}

impl Acks {
    /// Resolves `ack` as acknowledged, at once or with the run of its batch.
    #[inline]
    pub(crate) fn acknowledge(&mut self, ack: Ack) {
        let mut slot = match ack {
            Ack::Batch(slot) => slot,
            Ack::Slot(s) => return self.slots.acknowledge(s),
            Ack::Call(c) => return self.calls.acknowledge(c),
            ack => return ack.resolve(Ok(())),
        };
        // The run resolves it (dropping the slot leaves the batch to the run).
        slot.resolved = true;
        if let Some((s, first, n)) = &mut self.run {
            if Arc::ptr_eq(s, &slot.state) && first.checked_add(*n) == Some(slot.index) {
                *n += 1;
                return;
            }
        }
        self.flush();
        self.run = Some((slot.state.clone(), slot.index, 1));
    }

    /// Resolves the run being gathered.
    pub(crate) fn flush(&mut self) {
        if let Some((state, first, n)) = self.run.take() {
            state.acknowledge_run(first, n);
        }
        self.slots.flush();
        self.calls.flush();
    }
}

impl Drop for Acks {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Makes the shared state of a batch of `len` messages with ids `first..first + len` to
/// `to`: the receipt, and the driver's slots (one per message, in order).
pub(crate) fn batch(to: NodeId, first: MsgId, len: usize) -> (BatchReceipt, Vec<BatchSlot>) {
    let (tx, rx) = oneshot::channel();
    let state = Arc::new(BatchState {
        codes: (0..len).map(|_| AtomicU8::new(PENDING)).collect(),
        pending: AtomicUsize::new(len),
        refusals: Mutex::new(Vec::new()),
        done: Mutex::new((len > 0).then_some(tx)),
    });
    let slots = (0..len)
        .map(|i| BatchSlot {
            state: state.clone(),
            index: i as u32,
            resolved: false,
        })
        .collect();
    let receipt = BatchReceipt {
        to,
        first,
        state,
        done: rx,
    };
    (receipt, slots)
}

/// The receipt of a batch sent with [`Handle::send_batch`](crate::endpoint::Handle::send_batch): the
/// verdicts of all its messages in one allocation, with one wake-up when the last is known.
/// Awaiting it yields the [`BatchVerdicts`]; each message's verdict means what a
/// [`Receipt`](crate::endpoint::Receipt)'s does (acknowledged exactly once, in doubt, not delivered,
/// unacknowledged, refused).
///
/// Dropping it never cancels the messages.
///
/// # Cancel safety
/// Cancel safe: it can be polled again after a poll was dropped.
#[must_use = "a receipt does nothing unless awaited (dropping it does not cancel the messages)"]
pub struct BatchReceipt {
    to: NodeId,
    first: MsgId,
    state: Arc<BatchState>,
    done: oneshot::Receiver<()>,
}

impl std::fmt::Debug for BatchReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchReceipt")
            .field("to", &self.to)
            .field("first", &self.first)
            .field("len", &self.len())
            .field("pending", &self.pending())
            .finish()
    }
}

impl BatchReceipt {
    /// The destination node.
    pub fn to(&self) -> NodeId {
        self.to
    }

    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.state.codes.len()
    }

    /// True for an empty batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The id of message `index` of the batch: the batch's ids are consecutive, in the order
    /// of the payloads.
    pub fn id(&self, index: usize) -> Option<MsgId> {
        (index < self.len()).then(|| MsgId(self.first.0 + index as u64))
    }

    /// Messages whose verdict is not known yet.
    pub fn pending(&self) -> usize {
        self.state.pending.load(Ordering::Acquire)
    }

    /// The verdict of message `index` if known already.
    pub fn try_verdict(&self, index: usize) -> Option<Result<MsgId, ReceiptError>> {
        let id = self.id(index)?;
        self.state.verdict(index).map(|v| v.map(|()| id))
    }

    fn verdicts(&self) -> BatchVerdicts {
        BatchVerdicts {
            first: self.first,
            state: self.state.clone(),
        }
    }
}

impl Future for BatchReceipt {
    type Output = BatchVerdicts;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BatchVerdicts> {
        if self.pending() == 0 {
            return Poll::Ready(self.verdicts());
        }
        match Pin::new(&mut self.done).poll(cx) {
            // Fired, or dropped: every slot resolved (a dropped slot resolves as
            // unacknowledged before the sender goes).
            Poll::Ready(_) => Poll::Ready(self.verdicts()),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The verdicts of every message of a batch, once all are known.
#[derive(Clone)]
pub struct BatchVerdicts {
    first: MsgId,
    state: Arc<BatchState>,
}

impl std::fmt::Debug for BatchVerdicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchVerdicts")
            .field("len", &self.len())
            .field("acknowledged", &self.acknowledged())
            .finish()
    }
}

impl BatchVerdicts {
    /// Messages in the batch.
    pub fn len(&self) -> usize {
        self.state.codes.len()
    }

    /// True for an empty batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The verdict of message `index` (its id when acknowledged), as a
    /// [`Receipt`](crate::endpoint::Receipt) would resolve.
    pub fn get(&self, index: usize) -> Option<Result<MsgId, ReceiptError>> {
        let v = self
            .state
            .verdict(index)
            .unwrap_or(Err(ReceiptError::Unacknowledged));
        (index < self.len()).then(|| v.map(|()| MsgId(self.first.0 + index as u64)))
    }

    /// Every verdict, in the order of the payloads.
    pub fn iter(&self) -> impl Iterator<Item = Result<MsgId, ReceiptError>> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Messages acknowledged.
    pub fn acknowledged(&self) -> usize {
        self.state
            .codes
            .iter()
            .filter(|c| c.load(Ordering::Acquire) == OK)
            .count()
    }

    /// True when every message was acknowledged.
    pub fn all_acknowledged(&self) -> bool {
        self.acknowledged() == self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(i: u64) -> NodeId {
        NodeId::from_const(i)
    }

    /// Every send returns a receipt through its future and its result: it was 96 bytes
    /// while its cell's end kept a read verdict whole (a refusal's reason inline).
    #[test]
    fn a_receipt_stays_small() {
        let size = std::mem::size_of::<Receipt>();
        assert!(size <= 64, "Receipt is {size} bytes");
    }

    #[tokio::test]
    async fn a_batch_resolves_once_every_slot_has_its_verdict() {
        let (receipt, slots) = batch(node(2), MsgId(10), 4);
        assert_eq!(receipt.len(), 4);
        assert_eq!(receipt.id(3), Some(MsgId(13)));
        assert_eq!(receipt.id(4), None);
        let mut slots = slots.into_iter();
        let verdicts = [
            Ok(()),
            Err(ReceiptError::InDoubt),
            Err(ReceiptError::Refused(Error::Closed)),
        ];
        for v in verdicts {
            slots.next().unwrap().resolve(v);
        }
        assert_eq!(receipt.pending(), 1);
        assert_eq!(receipt.try_verdict(0), Some(Ok(MsgId(10))));
        assert_eq!(receipt.try_verdict(3), None);
        // The last one dropped unresolved (the endpoint stopped): unacknowledged.
        drop(slots);
        let v = receipt.await;
        let all: Vec<_> = v.iter().collect();
        assert_eq!(
            all,
            [
                Ok(MsgId(10)),
                Err(ReceiptError::InDoubt),
                Err(ReceiptError::Refused(Error::Closed)),
                Err(ReceiptError::Unacknowledged),
            ]
        );
        assert_eq!(v.acknowledged(), 1);
        assert!(!v.all_acknowledged());
    }

    #[tokio::test]
    async fn the_first_verdict_of_a_message_stands() {
        let (receipt, slots) = batch(node(2), MsgId(0), 1);
        let state = receipt.state.clone();
        state.resolve(0, Ok(()));
        // A later (impossible in the driver) second verdict changes nothing.
        state.resolve(0, Err(ReceiptError::InDoubt));
        drop(slots);
        let v = receipt.await;
        assert!(v.all_acknowledged());
        assert_eq!(state.pending.load(Ordering::Acquire), 0);
    }

    /// Acknowledgements resolved in runs: consecutive slots of one batch in one update,
    /// interleaved batches and gaps apart, a slot resolved already untouched.
    #[tokio::test]
    async fn runs_of_acknowledgements_resolve_each_slot_once() {
        let (r1, slots1) = batch(node(2), MsgId(0), 6);
        let (r2, slots2) = batch(node(2), MsgId(6), 2);
        let mut s1: Vec<Option<BatchSlot>> = slots1.into_iter().map(Some).collect();
        let mut s2: Vec<Option<BatchSlot>> = slots2.into_iter().map(Some).collect();
        // Slot 2 of the first batch was resolved in doubt before.
        s1[2].take().unwrap().resolve(Err(ReceiptError::InDoubt));
        let mut acks = Acks::default();
        for i in [0, 1] {
            acks.acknowledge(Ack::Batch(s1[i].take().unwrap()));
        }
        acks.acknowledge(Ack::Batch(s2[0].take().unwrap()));
        for i in [3, 5] {
            acks.acknowledge(Ack::Batch(s1[i].take().unwrap()));
        }
        acks.flush();
        assert_eq!(r1.pending(), 1, "slot 4 alone is left");
        assert_eq!(r2.pending(), 1);
        assert_eq!(r1.try_verdict(4), None);
        acks.acknowledge(Ack::Batch(s1[4].take().unwrap()));
        drop(acks); // the run ends with the gatherer
        let v = r1.await;
        let all: Vec<_> = v.iter().collect();
        assert_eq!(
            all,
            [
                Ok(MsgId(0)),
                Ok(MsgId(1)),
                Err(ReceiptError::InDoubt),
                Ok(MsgId(3)),
                Ok(MsgId(4)),
                Ok(MsgId(5)),
            ]
        );
        drop(s2);
        let v2: Vec<_> = r2.await.iter().collect();
        assert_eq!(v2, [Ok(MsgId(6)), Err(ReceiptError::Unacknowledged)]);
    }

    #[tokio::test]
    async fn an_empty_batch_is_ready_at_once() {
        let (receipt, slots) = batch(node(2), MsgId(0), 0);
        assert!(slots.is_empty());
        assert!(receipt.await.is_empty());
    }
}

/// Resolves with the message's verdict: `Ok` once the receiving application took the
/// message (it left the peer's [`recv`](crate::endpoint::Endpoint::recv)), exactly once; otherwise a
/// [`ReceiptError`] saying what is known (in doubt, unacknowledged, refused).
///
/// Dropping a receipt never cancels the message: the endpoint keeps the obligation and
/// retransmits until acknowledged (or until it is closed).
///
/// # Cancel safety
/// Cancel safe: a receipt can be polled again after a poll was dropped (in `select!`, or
/// under a timeout), and the verdict is not lost meanwhile.
#[derive(Debug)]
#[must_use = "a receipt does nothing unless awaited (dropping it does not cancel the message)"]
pub struct Receipt {
    id: MsgId,
    to: NodeId,
    rx: VerdictIn,
    /// Durable mode: the stable id, once the message is stored.
    stored: Option<oneshot::Receiver<MsgId>>,
}

impl Receipt {
    /// The receipt of message `id` to `to`, whose verdict comes through its slab cell `rx`
    /// (and, durable mode, its stable id through `stored`).
    pub(crate) fn new(
        id: MsgId,
        to: NodeId,
        rx: SlabReceipt,
        stored: Option<oneshot::Receiver<MsgId>>,
    ) -> Receipt {
        Receipt {
            id,
            to,
            rx: VerdictIn::Slab(rx),
            stored,
        }
    }

    /// The message's id: unique within this endpoint and increasing in the order of the
    /// sends (the endpoint's own numbering, not the core's).
    pub fn id(&self) -> MsgId {
        self.id
    }

    /// The destination node.
    pub fn to(&self) -> NodeId {
        self.to
    }

    /// Durable mode: waits until the message is on stable storage, and returns its stable
    /// id: a restart of this endpoint sends it again, and after it the receipt
    /// [`Endpoint::take_recovered`](crate::endpoint::Endpoint::take_recovered) gives for it carries this
    /// id. Writes reach the disk in the order of the sends, so once one message is stored,
    /// every message sent before it is. A receipt of a recovered message is stored already.
    ///
    /// Errors: [`Error::NotDurable`] on an endpoint that is not durable; [`Error::Closed`]
    /// when the endpoint stopped (or refused the message) before it was stored. Cancel
    /// safe.
    pub async fn stored(&mut self) -> Result<MsgId, Error> {
        let Some(rx) = &mut self.stored else {
            return Err(Error::NotDurable);
        };
        let id = rx.await.map_err(|_| Error::Closed)?;
        // Stored: later calls answer at once.
        let (tx, again) = oneshot::channel();
        let _ = tx.send(id);
        self.stored = Some(again);
        Ok(id)
    }

    /// The receipt of a channel's message, whose verdict comes through its flow's slab
    /// cell `rx` (never told it is stored: channels are not kept across restarts).
    pub(crate) fn from_channel(id: MsgId, to: NodeId, rx: SlabReceipt) -> Receipt {
        Receipt {
            id,
            to,
            rx: VerdictIn::Slab(rx),
            stored: None,
        }
    }

    /// A receipt for a message recovered from the journal after a restart (stored already).
    pub(crate) fn recovered(
        id: MsgId,
        to: NodeId,
        rx: oneshot::Receiver<Result<(), ReceiptError>>,
    ) -> Receipt {
        let (tx, stored) = oneshot::channel();
        let _ = tx.send(id);
        Receipt {
            id,
            to,
            rx: VerdictIn::Once(rx),
            stored: Some(stored),
        }
    }
}

impl Future for Receipt {
    type Output = Result<MsgId, ReceiptError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let verdict = match &mut self.rx {
            VerdictIn::Slab(r) => r.poll_verdict(cx),
            VerdictIn::Once(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(ReceiptError::Unacknowledged))),
        };
        verdict.map(|v| v.map(|()| id))
    }
}

/// Where a [`Receipt`]'s verdict comes from.
#[derive(Debug)]
enum VerdictIn {
    /// A cell of a slab: its shard's (a single send) or its channel's.
    Slab(SlabReceipt),
    /// A oneshot of its own (a message recovered from the journal).
    Once(oneshot::Receiver<Result<(), ReceiptError>>),
}
