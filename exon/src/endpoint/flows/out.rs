//! The sending side of one ordered flow (a channel, or one direction of a stream): its
//! [`Sequencer`], the bytes a stream holds before they go as a chunk, and the writers
//! waiting for room. Verdicts come back to it from the driver (`FlowAck`); a message given
//! up is replaced by its gap (channels) or aborts the stream (streams).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::receipt_slab::{ReceiptSlab, SlabReceipt};
use crate::endpoint::api::receipts::Ack;
use crate::endpoint::api::shared::Shared;
use crate::endpoint::deadline::deadline_in;
use crate::endpoint::driver::outgoing::{Outgoing, Submit};
use crate::endpoint::flows::ack::{AckKind, FlowAck, FlowVerdicts, ReceiptEnd};
use crate::endpoint::flows::broken::Broken;
use crate::endpoint::flows::stream_in::StreamIn;
use crate::endpoint::flows::write_buf::WriteBuf;
use crate::envelope::{Envelope, Flow, Place};
use crate::ordered::position::SendPosition;
use crate::ordered::{Sequencer, Settled, Window};
use crate::proto::journal::Mark;
use crate::proto::{MsgId, NodeId, Payload};

/// A stream's end of writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fin {
    Open,
    /// `shutdown` asked for it: the last chunk goes once the buffer is out.
    Wanted,
    /// The last chunk is handed to the driver.
    Sent,
}

/// How a stream's sending side is set up.
#[derive(Debug, Clone)]
pub(crate) struct StreamOut {
    /// Largest chunk.
    pub(crate) chunk: usize,
    /// Most bytes written and not yet in a chunk.
    pub(crate) buffer: usize,
    /// Deadline of each chunk.
    pub(crate) deadline: Option<Duration>,
}

/// One flow's sending side, shared by its senders and the acknowledgements in the driver.
#[derive(Debug)]
pub(crate) struct FlowOut {
    to: NodeId,
    /// The flow as its receiver names it.
    flow: Flow,
    /// The driver of `to`'s shard (weak: a flow does not keep the endpoint running).
    driver: Box<dyn Submit>,
    /// Ids of the messages.
    ids: Arc<Shared>,
    /// A stream's receiving side, broken with it.
    inbox: Option<Arc<StreamIn>>,
    stream: Option<StreamOut>,
    /// Whether each run waits for its receiver's window (`Rules::advertise_flow_window`).
    awaits_window: bool,
    /// A durable flow's mark lane: each new message keeps the flow's position with it in
    /// its journal record ([`SendPosition`]).
    durable: Option<u64>,
    /// The verdict cells of a channel's messages' receipts.
    receipts: Arc<ReceiptSlab>,
    state: Mutex<OutState>,
}

#[derive(Debug)]
struct OutState {
    seq: Sequencer,
    broken: Option<Broken>,
    wakers: Vec<Waker>,
    /// Deadline of each message (a stream's chunks), from its hand-over.
    deadline: Option<Duration>,
    /// A stream's bytes written and not yet in a chunk.
    buf: WriteBuf,
    /// Bytes of `buf` a flush sends now, whatever the coalescing.
    flush: usize,
    fin: Fin,
    /// A stream's chunks without a verdict, kept to be sent again if one comes back in
    /// doubt: the receiver's record of this node was lost (evicted during a long outage)
    /// while its stream state lives on, and that state tells a copy from a first arrival.
    chunks: BTreeMap<u64, Chunk>,
    /// A stream's bytes put in chunks so far (over restarts, for a durable stream).
    offset: u64,
    /// A durable channel resumed after a restart: the numbers that may have been given up
    /// with their gaps lost in the crash, whose gaps are sent again ([`send_owed_gaps`]).
    ///
    /// [`send_owed_gaps`]: FlowOut::send_owed_gaps
    owed: Vec<u64>,
    /// A channel's runs replaced since it started (its receiver restarted), the latest
    /// [`RETIRED_RUNS`]: their messages without a verdict are still sent, so they live.
    retired: Vec<u32>,
}

/// Replaced runs a channel remembers ([`FlowOut::had_run`]).
const RETIRED_RUNS: usize = 16;

/// Where a durable flow's sending side goes on from after a restart.
#[derive(Debug, Clone)]
pub(crate) struct Resume {
    /// Where it stood.
    pub(crate) pos: SendPosition,
    /// Its messages, gaps and chunks of that run without a verdict: number and bytes
    /// (0: a gap).
    pub(crate) unsettled: Vec<(u64, usize)>,
    /// A stream's chunks among them: number, bytes, whether the last.
    pub(crate) chunks: Vec<(u64, Bytes, bool)>,
}

/// A stream's chunk handed over and not yet acknowledged.
#[derive(Debug, Clone)]
struct Chunk {
    body: Bytes,
    last: bool,
    /// Given up at this point (the stream's deadline from its first hand-over).
    deadline: Option<Instant>,
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl FlowOut {
    /// A flow to `to` named `flow` by its receiver, of run `run`, with window `window`
    /// (and, `awaits_window`, the receiver's once it advertises it: one message at a time
    /// until then).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        to: NodeId,
        flow: Flow,
        run: u32,
        window: Window,
        awaits_window: bool,
        driver: Box<dyn Submit>,
        ids: Arc<Shared>,
        stream: Option<(StreamOut, Arc<StreamIn>)>,
    ) -> FlowOut {
        let deadline = stream.as_ref().and_then(|(s, _)| s.deadline);
        let (stream, inbox) = match stream {
            Some((s, i)) => (Some(s), Some(i)),
            None => (None, None),
        };
        FlowOut {
            to,
            flow,
            driver,
            ids,
            inbox,
            stream,
            awaits_window,
            durable: None,
            receipts: ReceiptSlab::new(),
            state: Mutex::new(OutState {
                seq: sequencer(run, window, awaits_window),
                broken: None,
                wakers: Vec::new(),
                deadline,
                buf: WriteBuf::default(),
                flush: 0,
                fin: Fin::Open,
                chunks: BTreeMap::new(),
                offset: 0,
                owed: Vec::new(),
                retired: Vec::new(),
            }),
        }
    }

    /// Makes the flow durable, its position kept under mark lane `lane`; `resume`: where it
    /// stood before a restart, and its messages and gaps recovered without a verdict
    /// (number and bytes; 0 for a gap), and a stream's chunks among them.
    pub(crate) fn with_durable(mut self, lane: u64, resume: Option<&Resume>) -> FlowOut {
        self.durable = Some(lane);
        if let Some(r) = resume {
            let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
            let window = st.seq.window();
            let pos = r.pos;
            let peer = pos.peer_window.or((!self.awaits_window).then_some(window));
            // A channel: every number from the base on that it does not hold may have
            // been given up with its gap lost; it owes them gaps (0 bytes each).
            let held: std::collections::BTreeSet<u64> =
                r.unsettled.iter().map(|&(seq, _)| seq).collect();
            if self.stream.is_none() {
                st.owed = (pos.base..pos.next).filter(|n| !held.contains(n)).collect();
            }
            let owed = st.owed.iter().map(|&n| (n, 0));
            let unsettled = r.unsettled.iter().copied().chain(owed);
            st.seq = Sequencer::resume(pos.run, pos.next, window, peer, unsettled);
            st.offset = pos.offset;
            if pos.ended {
                st.seq.end();
                st.fin = Fin::Sent;
            }
            for (seq, body, last) in &r.chunks {
                let chunk = Chunk {
                    body: body.clone(),
                    last: *last,
                    deadline: None,
                };
                st.chunks.insert(*seq, chunk);
            }
        }
        self
    }

    /// A durable channel resumed after a restart sends the gaps it owes (a number given up
    /// before the crash may have lost its gap in it; one released at the receiver already
    /// is discarded there). Each counts in the window until acknowledged.
    pub(crate) fn send_owed_gaps(self: &Arc<Self>) {
        let mut st = self.lock();
        for seq in std::mem::take(&mut st.owed) {
            let gap = Envelope::gap(self.place(&st, seq));
            if self.hand(&st, gap, seq, AckKind::Gap, None, None).is_none() {
                st.broken = Some(Broken::Closed);
                return;
            }
        }
    }

    /// A durable flow's position once message `seq` is accepted, to keep with it.
    fn position(&self, st: &OutState, seq: u64) -> Option<Mark> {
        let lane = self.durable?;
        let pos = SendPosition {
            run: st.seq.run(),
            next: seq + 1,
            offset: st.offset,
            peer_window: st.seq.peer_window().filter(|_| self.awaits_window),
            ended: st.seq.is_ended(),
            base: st.seq.lowest_unsettled().unwrap_or(seq),
        };
        Some(Mark {
            lane,
            value: pos.encode(),
        })
    }

    /// A stream's bytes written: put in chunks (over restarts, for a durable stream) and
    /// buffered.
    pub(crate) fn written(&self) -> u64 {
        let st = self.lock();
        st.offset + st.buf.len() as u64
    }

    /// The number the flow's next message gets, and a stream's bytes before it.
    pub(crate) fn next_position(&self) -> (u64, u64) {
        let st = self.lock();
        (st.seq.next(), st.offset)
    }

    fn lock(&self) -> MutexGuard<'_, OutState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The destination.
    pub(crate) fn to(&self) -> NodeId {
        self.to
    }

    /// Sets the deadline of the messages handed over from now on.
    pub(crate) fn set_deadline(&self, d: Option<Duration>) {
        self.lock().deadline = d;
    }

    /// Why the flow is broken, if it is.
    pub(crate) fn broken(&self) -> Option<Broken> {
        self.lock().broken
    }

    /// Breaks the flow (first reason wins) and wakes its writers and reader.
    pub(crate) fn break_with(&self, why: Broken) {
        let wakers = {
            let mut st = self.lock();
            if st.broken.is_none() {
                st.broken = Some(why);
            }
            std::mem::take(&mut st.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
        if let Some(inbox) = &self.inbox {
            inbox.reset(why);
        }
    }

    /// Hands message `seq` to the driver; false if the driver is gone.
    fn hand(
        self: &Arc<Self>,
        st: &OutState,
        payload: Payload,
        seq: u64,
        kind: AckKind,
        deadline: Option<Instant>,
        mark: Option<Mark>,
    ) -> Option<MsgId> {
        let out = self.outgoing(st, payload, seq, kind, deadline)?;
        self.submit(out, mark)
    }

    /// Message `seq` for the driver, unless the driver is gone.
    fn outgoing(
        self: &Arc<Self>,
        st: &OutState,
        payload: Payload,
        seq: u64,
        kind: AckKind,
        deadline: Option<Instant>,
    ) -> Option<Outgoing> {
        if !self.driver.is_open() {
            return None;
        }
        let id = self.ids.next_ids(1);
        let ack = Ack::Flow(Box::new(FlowAck::new(
            self.clone(),
            st.seq.run(),
            seq,
            kind,
        )));
        Some(Outgoing::ordered(self.to, payload, id, ack, deadline))
    }

    /// Hands `out` to the driver with `mark`; its id, or `None` if the driver is gone.
    fn submit(&self, mut out: Outgoing, mark: Option<Mark>) -> Option<MsgId> {
        let id = out.id();
        if let Some(m) = mark {
            out = out.with_mark(m);
        }
        // Not resolved through the flow if the driver is gone: the caller holds its lock.
        self.driver.submit(out).then_some(id)
    }

    // ---- Channels -----------------------------------------------------------------------

    /// A channel's message: numbered and handed to the driver if the window has room
    /// (`Ok(None)` without room: `waker` is woken when there may be). The receipt's end
    /// comes back.
    pub(crate) fn try_send_message(
        self: &Arc<Self>,
        body: &mut Option<Bytes>,
        deadline: Option<Duration>,
        waker: &Waker,
    ) -> Result<Option<(MsgId, SlabReceipt)>, Broken> {
        let mut st = self.lock();
        if let Some(b) = st.broken {
            return Err(b);
        }
        let len = body.as_ref().map_or(0, Bytes::len);
        if !st.seq.has_room(len) {
            if !st.wakers.iter().any(|w| w.will_wake(waker)) {
                st.wakers.push(waker.clone());
            }
            return Ok(None);
        }
        let Some(seq) = st.seq.assign(len, false) else {
            return Ok(None);
        };
        let place = self.place(&st, seq);
        let (rx, tx) = self.receipts.open();
        let payload = Envelope::ordered(place, false, body.take().unwrap_or_default());
        let deadline = deadline.and_then(deadline_in);
        let mark = self.position(&st, seq);
        let kind = AckKind::Message(Some(ReceiptEnd::Slot(tx)));
        let Some(id) = self.hand(&st, payload, seq, kind, deadline, mark) else {
            st.seq.unassign(seq);
            st.broken = Some(Broken::Closed);
            return Err(Broken::Closed);
        };
        Ok(Some((id, rx)))
    }

    fn place(&self, st: &OutState, seq: u64) -> Place {
        Place {
            flow: self.flow,
            run: st.seq.run(),
            seq,
        }
    }

    // ---- Streams ------------------------------------------------------------------------

    /// A stream's bytes: takes what the buffer has room for (0 and `waker` kept when
    /// none), and sends the chunks that may go.
    pub(crate) fn write(self: &Arc<Self>, data: &[u8], waker: &Waker) -> Result<usize, Broken> {
        let Some(cfg) = &self.stream else {
            return Ok(0);
        };
        let mut st = self.lock();
        if let Some(b) = st.broken {
            return Err(b);
        }
        if st.fin != Fin::Open {
            return Err(Broken::Closed);
        }
        let room = cfg.buffer.saturating_sub(st.buf.len());
        let n = room.min(data.len());
        st.buf.extend(&data[..n], cfg.chunk);
        self.pump(&mut st, cfg);
        if n == 0 {
            self.keep(&mut st, waker);
        }
        Ok(n)
    }

    /// Asks that everything written go now; true once it is all handed to the driver.
    pub(crate) fn flush(self: &Arc<Self>, waker: &Waker) -> Result<bool, Broken> {
        let Some(cfg) = &self.stream else {
            return Ok(true);
        };
        let mut st = self.lock();
        if let Some(b) = st.broken {
            return Err(b);
        }
        st.flush = st.buf.len();
        self.pump(&mut st, cfg);
        if st.buf.is_empty() {
            return Ok(true);
        }
        self.keep(&mut st, waker);
        Ok(false)
    }

    /// Ends the stream's writing; true once its last chunk is handed to the driver.
    pub(crate) fn finish(self: &Arc<Self>, waker: &Waker) -> Result<bool, Broken> {
        let Some(cfg) = &self.stream else {
            return Ok(true);
        };
        let mut st = self.lock();
        if st.fin == Fin::Sent {
            return Ok(true);
        }
        if let Some(b) = st.broken {
            return Err(b);
        }
        st.fin = Fin::Wanted;
        st.flush = st.buf.len();
        self.pump(&mut st, cfg);
        if st.fin == Fin::Sent {
            return Ok(true);
        }
        self.keep(&mut st, waker);
        Ok(false)
    }

    /// Whether the stream's writing was ended (`shutdown`).
    pub(crate) fn is_finished(&self) -> bool {
        self.lock().fin == Fin::Sent
    }

    /// Waits (registers `waker`) until every chunk is acknowledged; the error if the stream
    /// broke first.
    pub(crate) fn poll_done(&self, waker: &Waker) -> Option<Result<(), Broken>> {
        let mut st = self.lock();
        if st.fin == Fin::Sent && st.seq.is_idle() {
            return Some(Ok(()));
        }
        if let Some(b) = st.broken {
            return Some(Err(b));
        }
        self.keep(&mut st, waker);
        None
    }

    /// Sends an empty first chunk: the stream's opening, seen by the peer at once. When the
    /// stream's chunks do not fit a base-size datagram, the opener asks the peer for the
    /// reassembly credit of four of them ([`credit_ahead`]), so that the first chunks need
    /// not wait a round trip for it once the peer's window is known.
    pub(crate) fn open(self: &Arc<Self>) -> Result<(), Broken> {
        let mut st = self.lock();
        let Some(seq) = st.seq.assign(0, false) else {
            return Ok(());
        };
        let chunk = Chunk {
            body: Bytes::new(),
            last: false,
            deadline: st.deadline.and_then(deadline_in),
        };
        let mark = self.position(&st, seq);
        let payload = Envelope::ordered(self.place(&st, seq), false, Bytes::new());
        let ahead = self.stream.as_ref().and_then(|c| credit_ahead(c.chunk));
        let sent = self
            .outgoing(&st, payload, seq, AckKind::Chunk, chunk.deadline)
            .and_then(|out| {
                let out = match ahead {
                    Some(want) => out.with_credit_ahead(want),
                    None => out,
                };
                self.submit(out, mark)
            });
        st.chunks.insert(seq, chunk);
        if sent.is_none() {
            st.broken = Some(Broken::Closed);
            return Err(Broken::Closed);
        }
        Ok(())
    }

    /// Hands chunk `seq` to the driver and keeps it until its verdict; false if the driver
    /// is gone.
    fn send_chunk(self: &Arc<Self>, st: &mut OutState, seq: u64, body: Bytes, last: bool) -> bool {
        let deadline = st.deadline.and_then(deadline_in);
        let chunk = Chunk {
            body,
            last,
            deadline,
        };
        st.offset += chunk.body.len() as u64;
        let mark = self.position(st, seq);
        let sent = self.resend(st, seq, &chunk, mark);
        st.chunks.insert(seq, chunk);
        sent
    }

    /// (Re)sends chunk `seq`, under its own deadline (a new one with its flow's position).
    fn resend(self: &Arc<Self>, st: &OutState, seq: u64, c: &Chunk, mark: Option<Mark>) -> bool {
        let place = self.place(st, seq);
        let payload = Envelope::ordered(place, c.last, c.body.clone());
        self.hand(st, payload, seq, AckKind::Chunk, c.deadline, mark)
            .is_some()
    }

    /// Aborts the stream: tells the peer (unless it told us), breaks both sides.
    pub(crate) fn reset(self: &Arc<Self>, tell_peer: bool) {
        if tell_peer && self.broken() != Some(Broken::Reset) {
            self.send_reset();
        }
        self.break_with(Broken::Reset);
    }

    /// Sends the stream's abort to its peer (acknowledged by nobody).
    pub(crate) fn send_reset(&self) {
        if !self.driver.is_open() {
            return;
        }
        let run = self.lock().seq.run();
        let place = Place {
            flow: self.flow,
            run,
            seq: 0,
        };
        let out = Outgoing::note(self.to, Envelope::reset(place), self.ids.next_ids(1), None);
        self.driver.submit(out);
    }

    fn keep(&self, st: &mut OutState, waker: &Waker) {
        if !st.wakers.iter().any(|w| w.will_wake(waker)) {
            st.wakers.push(waker.clone());
        }
    }

    /// Sends the chunks that may go: full ones, and a partial one when flushed, ending, or
    /// when nothing is unacknowledged (small writes coalesce while a chunk is in flight).
    fn pump(self: &Arc<Self>, st: &mut OutState, cfg: &StreamOut) {
        let chunk = cfg.chunk;
        while st.broken.is_none() && st.fin != Fin::Sent {
            let len = st.buf.next_len();
            let ending = st.fin == Fin::Wanted && st.buf.len() <= chunk;
            let go = if st.buf.is_empty() {
                ending
            } else {
                st.buf.len() >= chunk || st.flush > 0 || ending || st.seq.is_idle()
            };
            if !go || !st.seq.has_room(len) {
                return;
            }
            let Some(seq) = st.seq.assign(len, ending) else {
                return;
            };
            let body = st.buf.take_chunk();
            st.flush = st.flush.saturating_sub(len);
            if !self.send_chunk(st, seq, body, ending) {
                st.broken = Some(Broken::Closed);
                return;
            }
            if ending {
                st.fin = Fin::Sent;
            }
        }
    }

    /// A verdict of one of the flow's messages, from the driver.
    fn verdict(
        self: &Arc<Self>,
        run: u32,
        seq: u64,
        kind: &AckKind,
        verdict: Result<(), ReceiptError>,
    ) {
        let given_up = matches!(
            verdict,
            Err(ReceiptError::NotDelivered | ReceiptError::InDoubt)
        );
        let mut st = self.lock();
        if run != st.seq.run() {
            return; // of a run replaced since (its receiver restarted)
        }
        match (kind, verdict) {
            (AckKind::Gap, Ok(())) => st.seq.on_gap(seq),
            (_, Ok(())) => {
                st.chunks.remove(&seq);
                st.seq.on_verdict(seq, true);
            }
            (AckKind::Chunk, Err(ReceiptError::InDoubt)) => {
                // In doubt: the receiver lost its record of us (a long outage), not the
                // stream (a restarted receiver answers with a reset). Sent again, the chunk
                // is told from a copy by the stream's numbering, so it is read once. Past
                // the stream's deadline, the stream is given up instead.
                let chunk = st.chunks.get(&seq).cloned();
                let expired = chunk
                    .as_ref()
                    .is_none_or(|c| c.deadline.is_some_and(|d| d <= now()));
                if expired {
                    drop(st);
                    self.reset_after(Broken::TimedOut);
                    return;
                }
                if let Some(c) = chunk {
                    if !self.resend(&st, seq, &c, None) {
                        st.broken = Some(Broken::Closed);
                    }
                }
            }
            (AckKind::Message(_), Err(_)) if given_up => {
                if st.seq.on_verdict(seq, false) == Settled::SendGap {
                    let place = self.place(&st, seq);
                    let gap = Envelope::gap(place);
                    if self.hand(&st, gap, seq, AckKind::Gap, None, None).is_none() {
                        st.broken = Some(Broken::Closed);
                    }
                }
            }
            (AckKind::Chunk, Err(_)) if given_up => {
                drop(st);
                self.reset_after(Broken::TimedOut);
                return;
            }
            (_, Err(_)) => {
                drop(st);
                self.break_with(Broken::Closed);
                return;
            }
        }
        if let Some(cfg) = &self.stream {
            self.pump(&mut st, cfg);
        }
        let wakers = std::mem::take(&mut st.wakers);
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// A channel's receiver does not know its run (it restarted): the channel starts a new
    /// run, whose first message travels alone. Messages of the old run without a verdict
    /// keep their receipts; they count no more against the window.
    pub(crate) fn restart_run(&self, run: u32) {
        let wakers = {
            let mut st = self.lock();
            if st.seq.run() != run || self.stream.is_some() {
                return;
            }
            let window = st.seq.window();
            // The receiver restarted: its window may have changed, it advertises it anew.
            st.seq = sequencer(next_run(run), window, self.awaits_window);
            if st.retired.len() == RETIRED_RUNS {
                st.retired.remove(0);
            }
            st.retired.push(run);
            std::mem::take(&mut st.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Whether `run` is this channel's run, or one it replaced lately (see
    /// [`restart_run`](Self::restart_run)): a run whose messages may still be sent.
    pub(crate) fn had_run(&self, run: u32) -> bool {
        let st = self.lock();
        st.seq.run() == run || st.retired.contains(&run)
    }

    /// The receiver advertised its window for run `run`: from now on the flow keeps to the
    /// smaller of its own and that one (a window for a run replaced since is ignored).
    pub(crate) fn on_peer_window(self: &Arc<Self>, run: u32, window: Window) {
        let mut st = self.lock();
        if st.seq.run() != run || !self.awaits_window {
            return;
        }
        st.seq.on_peer_window(window);
        if let Some(cfg) = &self.stream {
            self.pump(&mut st, cfg);
        }
        let wakers = std::mem::take(&mut st.wakers);
        drop(st);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Whether the receiver's window is known (or not awaited).
    pub(crate) fn knows_peer_window(&self) -> bool {
        self.lock().seq.peer_window().is_some()
    }

    /// A chunk was given up: the stream is broken for `why`, and its peer told.
    fn reset_after(self: &Arc<Self>, why: Broken) {
        if self.broken().is_none() {
            self.send_reset();
        }
        self.break_with(why);
    }
}

/// The reassembly credit a stream of `chunk`-byte chunks asks for when it opens: four
/// chunks in their envelopes, when a chunk does not fit one base-size datagram (on paths
/// where it does not fit the datagrams in use either, each goes in fragments); none
/// otherwise.
fn credit_ahead(chunk: usize) -> Option<u64> {
    let len = chunk.saturating_add(crate::envelope::MAX_OVERHEAD);
    let room = crate::proto::payload_room_each(crate::proto::BASE_DATAGRAM_SIZE, 1);
    (len > room).then(|| 4 * len as u64)
}

/// A flow's numbering of run `run`, waiting for its receiver's window or not.
fn sequencer(run: u32, window: Window, awaits_window: bool) -> Sequencer {
    let s = Sequencer::new(run, window);
    if awaits_window {
        s.expect_peer_window()
    } else {
        s
    }
}

/// A run different from `run` and from the runs before it (SplitMix64's mixer, on 32 bits).
fn next_run(run: u32) -> u32 {
    let mut z = u64::from(run).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

impl FlowVerdicts for FlowOut {
    fn on_verdict(
        self: Arc<Self>,
        run: u32,
        seq: u64,
        kind: &AckKind,
        verdict: Result<(), ReceiptError>,
    ) {
        self.verdict(run, seq, kind, verdict);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::endpoint::driver::command::Command;
    use crate::endpoint::driver::mailbox::{mailbox, MailboxRx, MailboxTx};

    const PEER: NodeId = NodeId::from_const(9);

    /// A stream's sending side whose driver is `rx` (and `tx`, kept alive).
    fn stream(
        deadline: Option<Duration>,
    ) -> (Arc<FlowOut>, MailboxTx<Command>, MailboxRx<Command>) {
        stream_of(deadline, 1000)
    }

    /// The same, with chunks of `chunk` bytes.
    pub(crate) fn stream_of(
        deadline: Option<Duration>,
        chunk: usize,
    ) -> (Arc<FlowOut>, MailboxTx<Command>, MailboxRx<Command>) {
        let (tx, rx) = mailbox();
        let shared = Arc::new(Shared::for_test());
        let inbox = Arc::new(StreamIn::new(shared.clone()));
        let cfg = StreamOut {
            chunk,
            buffer: 10_000,
            deadline,
        };
        let flow = Flow::Stream {
            id: 1,
            opener_sent: true,
        };
        let out = FlowOut::new(
            PEER,
            flow,
            7,
            Window::default(),
            false,
            Box::new(tx.downgrade()),
            shared,
            Some((cfg, inbox)),
        );
        (Arc::new(out), tx, rx)
    }

    /// The next message handed to the driver: its envelope opened, and its verdict's end.
    fn next(rx: &mut MailboxRx<Command>) -> (Envelope, Ack) {
        let Ok(Command::Send(out)) = rx.try_recv() else {
            panic!("no message handed over");
        };
        let (ack, payload, _) = out.into_parts();
        (
            Envelope::open(payload.to_bytes()).expect("an envelope"),
            ack,
        )
    }

    fn waker() -> Waker {
        futures_util::task::noop_waker()
    }

    /// A stream whose chunks go in fragments asks for their reassembly credit with its
    /// opener; one whose chunks fit a base-size datagram asks for none.
    #[tokio::test]
    async fn the_opener_asks_credit_for_chunks_that_go_in_fragments() {
        let (out, _tx, mut rx) = stream(None);
        out.open().unwrap();
        let Ok(Command::Send(opener)) = rx.try_recv() else {
            panic!("no opener");
        };
        assert_eq!(
            opener.credit_ahead(),
            None,
            "1 000-byte chunks fit one datagram"
        );
        let default = crate::endpoint::default_stream_chunk();
        let want = credit_ahead(default).expect("default chunks go in fragments");
        assert_eq!(want, 4 * (default + crate::envelope::MAX_OVERHEAD) as u64);
        let (out, _tx, mut rx) = stream_of(None, default);
        out.open().unwrap();
        let Ok(Command::Send(opener)) = rx.try_recv() else {
            panic!("no opener");
        };
        assert_eq!(
            opener.credit_ahead(),
            Some(want),
            "the opener carries the ask"
        );
        let room = crate::proto::payload_room_each(crate::proto::BASE_DATAGRAM_SIZE, 1);
        assert_eq!(credit_ahead(room - crate::envelope::MAX_OVERHEAD), None);
        assert!(credit_ahead(room - crate::envelope::MAX_OVERHEAD + 1).is_some());
    }

    #[tokio::test]
    async fn a_chunk_in_doubt_is_sent_again_with_its_number() {
        let (out, _tx, mut rx) = stream(None);
        out.open().unwrap();
        let (_, ack) = next(&mut rx);
        ack.resolve(Ok(()));
        assert_eq!(out.write(b"abc", &waker()), Ok(3));
        let (first, ack) = next(&mut rx);
        // The receiver lost its record of us: the same chunk goes again, same number.
        ack.resolve(Err(ReceiptError::InDoubt));
        let (again, ack) = next(&mut rx);
        assert_eq!(first, again);
        let Envelope::Ordered { place, body, .. } = again else {
            panic!("a chunk");
        };
        assert_eq!((place.seq, &body[..]), (1, &b"abc"[..]));
        ack.resolve(Ok(()));
        assert_eq!(out.broken(), None);
        assert!(rx.try_recv().is_err(), "nothing more");
    }

    /// A durable channel resumed after a restart owes a gap to every number from its
    /// mark's base to its next that it does not hold (given up before the crash, its gap
    /// maybe lost in it), and keeps its messages' numbering.
    #[tokio::test]
    async fn a_resumed_channel_sends_the_gaps_it_may_owe() {
        let (tx, mut rx) = mailbox();
        let shared = Arc::new(Shared::for_test());
        let flow = Flow::Channel(0);
        let driver = Box::new(tx.downgrade());
        let out = FlowOut::new(
            PEER,
            flow,
            7,
            Window::default(),
            false,
            driver,
            shared,
            None,
        );
        let pos = SendPosition {
            run: 7,
            next: 6,
            offset: 0,
            peer_window: None,
            ended: false,
            base: 2,
        };
        let resume = Resume {
            pos,
            unsettled: vec![(3, 10)],
            chunks: Vec::new(),
        };
        let out = Arc::new(out.with_durable(1, Some(&resume)));
        out.send_owed_gaps();
        let mut gaps = Vec::new();
        while let Ok(Command::Send(o)) = rx.try_recv() {
            let (ack, payload, _) = o.into_parts();
            let Ok(Envelope::Gap(place)) = Envelope::open(payload.to_bytes()) else {
                panic!("a gap");
            };
            assert_eq!(place.run, 7);
            gaps.push(place.seq);
            ack.resolve(Ok(()));
        }
        assert_eq!(gaps, vec![2, 4, 5]);
        assert_eq!(out.next_position().0, 6, "the numbering goes on");
    }

    #[tokio::test]
    async fn a_chunk_in_doubt_past_the_deadline_breaks_the_stream() {
        let (out, _tx, mut rx) = stream(Some(Duration::ZERO));
        out.open().unwrap();
        let (_, ack) = next(&mut rx);
        ack.resolve(Err(ReceiptError::InDoubt));
        assert_eq!(out.broken(), Some(Broken::TimedOut));
        let (reset, _) = next(&mut rx);
        assert!(
            matches!(reset, Envelope::Reset(_)),
            "the peer is told: {reset:?}"
        );
    }
}
