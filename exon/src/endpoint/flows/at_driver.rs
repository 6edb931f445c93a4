//! Ordered flows at the driver: each channel's and stream's reorder buffer, fed by the
//! deliveries of ordered envelopes; released messages go to the application (channels
//! through `recv`, streams to their reader), messages held ahead of their turn stay untaken
//! (so unacknowledged) in the node. Also the endpoint-wide state of flows: the run, the
//! channels' senders, and the streams waiting to be accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::endpoint::api::error::Error;
use crate::endpoint::api::shared::Shared;
use crate::endpoint::driver::outgoing::Submit;
use crate::endpoint::flows::broken::Broken;
use crate::endpoint::flows::by_peer::ByPeer;
use crate::endpoint::flows::config::FlowConfig;
use crate::endpoint::flows::out::{FlowOut, StreamOut};
use crate::endpoint::flows::positions::{send_lane, stream_slots, Positions, StreamKey, Take};
use crate::endpoint::flows::resume::{self, ResumedFlows, ResumedOut, ResumedStream, StreamParts};
use crate::endpoint::flows::slots::{MarkSlots, Slot};
use crate::endpoint::flows::stalls::Stalls;
use crate::endpoint::flows::stream_in::StreamIn;
use crate::envelope::{Flow, Place};
use crate::ordered::position::{self, RecvPosition};
use crate::ordered::{Arrival, Reorder, Step, Window};
use crate::proto::journal::Mark;
use crate::proto::{DeliveryId, NodeId, Rules};

mod questions;

/// The maps looked up per message (a channel's or a stream's state): foldhash, randomly
/// seeded per map, not SipHash; their sizes are bounded (`max_channels`, `max_streams`).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Stream ids this endpoint uses (the wire allows up to [`MAX_STREAM_ID`](crate::envelope::MAX_STREAM_ID)): below 2^28, a
/// stream's flow is a 4-byte varint, and a chunk's envelope (up to 2^30 chunks) fits the
/// payload's inline head ([`HEAD_MAX`](crate::proto::HEAD_MAX)), so no chunk is copied.
/// Ids start at a random point below half of it: 2^27 streams before they wrap.
const STREAM_IDS: u64 = 1 << 28;

/// A stream opened by a peer, for [`Endpoint::accept_stream`](crate::endpoint::Endpoint::accept_stream).
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) peer: NodeId,
    pub(crate) id: u64,
    pub(crate) out: Arc<FlowOut>,
    pub(crate) inbox: Arc<StreamIn>,
}

/// What every shard of an endpoint shares about flows.
#[derive(Debug)]
pub(crate) struct OrderedShared {
    /// This run of the endpoint (random at each start).
    run: u32,
    /// The next stream id this endpoint opens (random start: a late message for a stream
    /// of an earlier run names no stream of this one).
    next_stream: AtomicU64,
    /// Durable mode: ids of the streams this endpoint opened before a restart and made
    /// again at bind: a new stream skips them.
    recovered_ids: Mutex<std::collections::HashSet<u64>>,
    /// The senders of channels, by destination and channel: one numbering per channel for
    /// the whole run, however many `Channel` values the application makes.
    channels: Mutex<FastMap<(NodeId, u16), Arc<FlowOut>>>,
    /// Streams opened by peers, to be accepted: at most `max_streams` wait (a stream that
    /// ended at once has left the driver's table, but still waits here).
    accept: mpsc::Sender<Accepted>,
    config: FlowConfig,
    /// The rules in force (`advertise_flow_window`, `hold_beyond_window`).
    rules: Rules,
    /// Durable mode: channels keep their positions in the journal's marks.
    durable: bool,
    /// Durable mode: the sending sides of channels recovered at bind, until made again.
    resumed: Mutex<HashMap<(NodeId, u16), ResumedOut>>,
    /// Durable mode: the runs of the streams' sending sides recovered at bind (a stream
    /// goes on in the run it had: its chunks may still come).
    resumed_stream_runs: Mutex<HashMap<StreamKey, u32>>,
    /// Durable mode, `Rules::reserve_flow_marks`: the room for flows' marks.
    slots: Option<MarkSlots>,
}

impl OrderedShared {
    #[cfg(test)]
    pub(crate) fn new(
        accept: mpsc::Sender<Accepted>,
        config: FlowConfig,
        rules: Rules,
    ) -> Arc<OrderedShared> {
        Self::new_durable(accept, config, rules, None, 0)
    }

    /// As [`new`](Self::new); `resumed` (durable mode): the channels' sending sides
    /// recovered from the journal; `max_marks`: the marks each journal keeps at most
    /// ([`Limits::max_marks`](crate::proto::Limits::max_marks)).
    pub(crate) fn new_durable(
        accept: mpsc::Sender<Accepted>,
        config: FlowConfig,
        rules: Rules,
        resumed: Option<HashMap<(NodeId, u16), ResumedOut>>,
        max_marks: usize,
    ) -> Arc<OrderedShared> {
        use ring::rand::SecureRandom;
        let mut seed = [0u8; 12];
        let _ = ring::rand::SystemRandom::new().fill(&mut seed);
        let run = u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]]);
        let mut s = [0u8; 8];
        s.copy_from_slice(&seed[4..]);
        let start = u64::from_le_bytes(s) % (STREAM_IDS / 2);
        Arc::new(OrderedShared {
            run,
            next_stream: AtomicU64::new(start),
            recovered_ids: Mutex::default(),
            channels: Mutex::default(),
            accept,
            config,
            rules,
            durable: resumed.is_some(),
            slots: (resumed.is_some() && rules.reserve_flow_marks)
                .then(|| MarkSlots::new(max_marks)),
            resumed: Mutex::new(resumed.unwrap_or_default()),
            resumed_stream_runs: Mutex::default(),
        })
    }

    /// Durable mode: reserves room for the marks `slots` of a new flow
    /// ([`Rules::reserve_flow_marks`]), or says there is none.
    pub(crate) fn reserve_marks(&self, slots: &[Slot]) -> Result<(), Error> {
        match &self.slots {
            Some(s) if !s.reserve(slots) => Err(Error::TooManyFlows { max: s.max() }),
            _ => Ok(()),
        }
    }

    /// Durable mode: the marks `slots` are forgotten (or were never written): their room
    /// is free again.
    pub(crate) fn release_marks(&self, slots: &[Slot]) {
        if let Some(s) = &self.slots {
            s.release(slots);
        }
    }

    /// Durable mode: marks a journal holds already, or a recovered flow's, take their room
    /// whatever is left.
    pub(crate) fn hold_marks(&self, slots: impl IntoIterator<Item = Slot>) {
        if let Some(s) = &self.slots {
            s.hold(slots);
        }
    }

    /// A new stream's receiving side (durable: its takes wait for the next read).
    pub(crate) fn stream_in(&self, shared: Arc<Shared>) -> StreamIn {
        if self.durable {
            StreamIn::durable(shared, 0, false)
        } else {
            StreamIn::new(shared)
        }
    }

    /// Durable mode: makes again the streams recovered at bind, for the driver `driver()`
    /// whose messages take their ids from `shared`.
    pub(crate) fn make_streams(
        &self,
        streams: HashMap<StreamKey, ResumedStream>,
        driver: impl Fn() -> Box<dyn Submit>,
        shared: &Arc<Shared>,
    ) -> Vec<StreamParts> {
        let inbox = |offset, ended| StreamIn::durable(shared.clone(), offset, ended);
        let out = |(peer, id, mine): StreamKey, inbox| {
            let flow = Flow::Stream {
                id,
                opener_sent: mine,
            };
            let stream = Some((self.stream_out(shared.max_payload()), inbox));
            let (window, awaits) = (self.config.stream(), self.advertises());
            FlowOut::new(
                peer,
                flow,
                self.run,
                window,
                awaits,
                driver(),
                shared.clone(),
                stream,
            )
        };
        let mut ids = self.recovered_ids.lock().unwrap_or_else(|p| p.into_inner());
        ids.extend(streams.keys().filter(|k| k.2).map(|k| k.1));
        drop(ids);
        let mut runs = self
            .resumed_stream_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (key, s) in &streams {
            if let Some(o) = &s.out {
                runs.insert(*key, o.resume.pos.run);
            }
        }
        resume::make_streams(streams, inbox, out)
    }

    /// A new stream's sending side `out` (durable: it keeps its position with each chunk).
    pub(crate) fn stream_out_durable(&self, out: FlowOut, key: StreamKey) -> FlowOut {
        if self.durable {
            out.with_durable(send_lane(key), None)
        } else {
            out
        }
    }

    /// Durable mode: the channels recovered at bind and not made again yet.
    pub(crate) fn resumed_channels(&self) -> Vec<(NodeId, u16)> {
        let r = self.resumed.lock().unwrap_or_else(|p| p.into_inner());
        r.keys().copied().collect()
    }

    /// Whether receivers advertise their windows and senders wait for them
    /// ([`Rules::advertise_flow_window`]).
    pub(crate) fn advertises(&self) -> bool {
        self.rules.advertise_flow_window
    }

    /// The flows' configuration.
    pub(crate) fn config(&self) -> &FlowConfig {
        &self.config
    }

    /// A stream's sending setup, for an endpoint whose largest payload is `max_payload`.
    pub(crate) fn stream_out(&self, max_payload: usize) -> StreamOut {
        StreamOut {
            chunk: self.config.stream_chunk.clamp(1, max_payload.max(1)),
            buffer: self.config.stream_buffer.max(1),
            deadline: self.config.stream_deadline,
        }
    }

    /// This run.
    pub(crate) fn run(&self) -> u32 {
        self.run
    }

    /// A new stream id: none of a stream recovered at bind.
    pub(crate) fn next_stream(&self) -> u64 {
        let ids = self.recovered_ids.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let id = self.next_stream.fetch_add(1, Ordering::Relaxed) % STREAM_IDS;
            if !ids.contains(&id) {
                return id;
            }
        }
    }

    /// Whether run `run` of stream `key` (this endpoint's sending side of it) is one of this
    /// endpoint's, whose chunks may still be sent: this endpoint's run, or the run of the
    /// stream's sending side its journal recovered (durable mode). Any other is of an
    /// earlier run of the endpoint, which forgot the stream (no journal).
    pub(crate) fn has_stream_run(&self, key: StreamKey, run: u32) -> bool {
        if run == self.run {
            return true;
        }
        let runs = self
            .resumed_stream_runs
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        runs.get(&key) == Some(&run)
    }

    /// The sender of channel `n` to `to`, made by `make` the first time.
    /// Durable mode: the channel goes on from where it stood before a restart (its
    /// position, and its messages recovered without a verdict), keeping its position with
    /// each new message; a new one needs room for its mark ([`Error::TooManyFlows`]).
    pub(crate) fn channel(
        &self,
        to: NodeId,
        n: u16,
        make: impl FnOnce() -> FlowOut,
    ) -> Result<Arc<FlowOut>, Error> {
        let mut m = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(out) = m.get(&(to, n)) {
            return Ok(out.clone());
        }
        let mut pending = None;
        let lane = position::lane(Flow::Channel(n).code(), true);
        self.reserve_marks(&[(to, lane)])?;
        let mut out = make();
        if self.durable {
            let r = self
                .resumed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(to, n));
            out = out.with_durable(lane, r.as_ref().map(|r| &r.resume));
            pending = r.map(|r| r.pending);
        }
        let out = Arc::new(out);
        m.insert((to, n), out.clone());
        drop(m);
        if let Some(p) = pending {
            // Verdicts of its recovered messages heard meanwhile, then the next ones.
            p.ready(out.clone());
            out.send_owed_gaps();
        }
        Ok(out)
    }

    /// The sender of channel `n` to `to`, if one was made.
    fn channel_out(&self, to: NodeId, n: u16) -> Option<Arc<FlowOut>> {
        let m = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(to, n)).cloned()
    }

    /// Whether run `run` of channel `n` to `to` is one of this endpoint's, whose messages
    /// may still be sent: the channel's run or one it replaced lately; with no channel made,
    /// the run of the channel recovered from the journal and not made again yet (durable
    /// mode: its messages are being sent again) or this endpoint's run. A run it never had
    /// is of an earlier run of the endpoint (or of a durable flow it did not resume): none
    /// of its messages will come any more.
    pub(crate) fn has_channel_run(&self, to: NodeId, n: u16, run: u32) -> bool {
        if let Some(out) = self.channel_out(to, n) {
            return out.had_run(run);
        }
        let resumed = self.resumed.lock().unwrap_or_else(|p| p.into_inner());
        let recovered = resumed.get(&(to, n)).map(|r| r.resume.pos.run);
        run == self.run || recovered == Some(run)
    }
}

/// A delivered message held or released by a flow.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) id: DeliveryId,
    pub(crate) body: Bytes,
}

/// A stream's receiving state at the driver.
struct RecvStream {
    reorder: Reorder<Held>,
    inbox: Arc<StreamIn>,
    out: Arc<FlowOut>,
    /// The writer's run last asked about when the writer showed another run (see
    /// `questions.rs`), and the questions about it left to ask while the
    /// stream stands still (a question may be lost in doubt: the first goes to slots of the
    /// writer's incarnation before its restart).
    asked: Option<u32>,
    asks_left: u8,
}

/// Where a channel's released message goes.
pub(crate) enum ChannelOut {
    /// Number `seq` of channel `channel`, in order.
    Message { channel: u16, seq: u64, held: Held },
    /// Number `seq` was given up by its sender.
    Gap { channel: u16, seq: u64, held: Held },
    /// Outside the channel's order (a run this receiver does not know).
    Stale { channel: u16, seq: u64, held: Held },
}

/// What the driver does for an ordered delivery, besides what the flow did itself.
pub(crate) enum Action {
    /// Hand to the application.
    Channel(ChannelOut),
    /// Take (acknowledge) and drop.
    Take(DeliveryId),
    /// Tell `to` that the stream it names `flow` is unknown here (reset).
    Reset { to: NodeId, place: Place },
    /// Ask `to` whether its run `place.run` of channel `place.flow` still lives: it
    /// stalled here before number `place.seq`.
    Query { to: NodeId, place: Place },
    /// Tell `to` that run `place.run` of channel `place.flow` from here is over.
    Over { to: NodeId, place: Place },
    /// Advertise this receiver's window to `to`, the sender of `flow` (as `to` names it)
    /// in run `run`.
    Window {
        to: NodeId,
        flow: Flow,
        run: u32,
        window: Window,
    },
    /// Durable mode: forget the marks `lanes` of `peer` (a stream gone).
    ForgetMarks { peer: NodeId, lanes: [u64; 2] },
    /// Make and accept a stream opened by `peer`, whose first chunk is `held`.
    NewStream {
        peer: NodeId,
        id: u64,
        first: Place,
        held: Held,
        last: bool,
    },
}

/// The flows of one driver shard.
pub(crate) struct Flows {
    shared: Arc<OrderedShared>,
    channels: FastMap<(NodeId, u16), Reorder<Held>>,
    /// Streams by peer, id, and whether this endpoint opened them.
    streams: ByPeer<(u64, bool), RecvStream>,
    steps: Vec<Step<Held>>,
    max_channels: usize,
    max_streams: usize,
    /// This endpoint's windows as a receiver, advertised to senders: a message at or
    /// beyond the next number due plus `messages` was sent by a sender that does not keep
    /// to them (counted in `beyond_window`, and held untaken all the same).
    channel_window: Window,
    stream_window: Window,
    /// Rules: advertise the windows; hold what is beyond them (off: take and drop what is
    /// four windows ahead, the old defect).
    advertise: bool,
    hold: bool,
    /// Sending sides of streams whose receiving side ended before their receiver's window
    /// came (weak: a stream's state is the application's; pruned when full).
    awaiting_window: HashMap<(NodeId, u64, bool), Weak<FlowOut>>,
    /// The run each channel's sender was last told to replace (one reset per run).
    resets_sent: HashMap<(NodeId, u16), u32>,
    /// Ordered messages that arrived at or beyond their flow's next number due plus this
    /// receiver's window (held untaken for their turn like any other).
    pub(crate) beyond_window: u64,
    /// Counters: streams reset by peers, or for being unknown here.
    pub(crate) resets: u64,
    /// Channel messages released out of order (of a run this receiver does not know).
    pub(crate) stale: u64,
    /// Channel messages beyond `max_channels` flows, left untaken.
    pub(crate) refused: u64,
    /// Durable mode: channels keep their positions in the journal's marks, with the takes.
    durable: bool,
    /// Durable mode: deliveries of flows released to the application and not yet taken,
    /// whose takes keep their flow's position; and the streams' positions.
    positions: Positions,
    /// Durable mode: channels resumed at bind whose senders have not been told this
    /// receiver's window since (they are at their first arrival).
    unadvertised: std::collections::HashSet<(NodeId, u16)>,
    /// Channels and streams holding messages ahead of their turn, watched for a run that
    /// stopped.
    stalls: Option<Stalls>,
    /// The run each peer last started a flow in (a new stream, a channel's new run), as
    /// far as streams from it are open here: another one may be of a restart that forgot
    /// them (pruned when it outgrows `max_streams`).
    peer_runs: FastMap<NodeId, u32>,
    /// Counters: queries sent about stalled runs, and runs drained on their sender's
    /// answer that they are over.
    pub(crate) queries: u64,
    pub(crate) overs: u64,
}

impl Flows {
    pub(crate) fn new(shared: Arc<OrderedShared>) -> Flows {
        let c = shared.config().clone();
        let rules = shared.rules;
        Flows {
            shared,
            channels: FastMap::default(),
            streams: ByPeer::default(),
            steps: Vec::new(),
            max_channels: c.max_channels,
            max_streams: c.max_streams,
            channel_window: c.channel(),
            stream_window: c.stream(),
            advertise: rules.advertise_flow_window,
            hold: rules.hold_beyond_window,
            awaiting_window: HashMap::new(),
            resets_sent: HashMap::new(),
            beyond_window: 0,
            resets: 0,
            stale: 0,
            refused: 0,
            durable: false,
            positions: Positions::default(),
            unadvertised: Default::default(),
            stalls: c.stall_query_after.map(Stalls::new),
            peer_runs: FastMap::default(),
            queries: 0,
            overs: 0,
        }
    }

    /// Durable mode: channels keep their positions in the journal's `marks`, and go on from
    /// where the marks say they stood (the node's marks, recovered at bind).
    pub(crate) fn resume<'a>(&mut self, marks: impl Iterator<Item = (NodeId, u64, &'a Bytes)>) {
        self.durable = true;
        let marks: Vec<_> = marks.map(|(p, l, v)| (p, l, v.clone())).collect();
        // Their room is theirs (a peer's channel, not yet heard from, goes on with it).
        self.shared
            .hold_marks(marks.iter().map(|(p, l, _)| (*p, *l)));
        for (from, n, pos) in ResumedFlows::from_marks(&marks).inbound {
            self.channels
                .insert((from, n), Reorder::started(pos.run, pos.next));
            self.unadvertised.insert((from, n));
        }
    }

    /// Durable mode: what the take of `id` keeps with it, if it is a durable flow's: a
    /// channel's position (its run and the next number due, so the numbers released before
    /// are not waited for again after a restart), or a stream's (the chunk after it, and
    /// the bytes taken).
    pub(crate) fn take_mark(&mut self, id: &DeliveryId) -> Option<Mark> {
        let (from, n) = match self.positions.take(id)? {
            Take::Mark(m) => return Some(m),
            Take::Channel(from, n) => (from, n),
        };
        let r = self.channels.get(&(from, n))?;
        let pos = RecvPosition {
            run: r.run()?,
            next: r.next(),
            offset: 0,
            ended: false,
        };
        Some(Mark {
            lane: position::lane(Flow::Channel(n).code(), false),
            value: pos.encode(),
        })
    }

    /// Whether any take may keep a position ([`take_mark`](Self::take_mark)).
    pub(crate) fn has_marks(&self) -> bool {
        !self.positions.is_empty()
    }

    /// Durable mode: a stream recovered at bind goes on: its receiving side from `recv`
    /// (where its reading stood), or from its start.
    pub(crate) fn resume_stream(
        &mut self,
        key: StreamKey,
        out: Arc<FlowOut>,
        inbox: Arc<StreamIn>,
        recv: Option<RecvPosition>,
    ) {
        // Both its sides had their room before the restart: kept (one may have no mark yet).
        self.shared.hold_marks(stream_slots(key));
        let reorder = match recv {
            Some(p) if p.ended => {
                // Read to its end before: nothing more comes; its sending side may still
                // wait for the peer's window.
                self.positions.resume_stream(key, p);
                self.keep_awaiting(key, &out);
                return;
            }
            Some(p) => {
                self.positions.resume_stream(key, p);
                Reorder::started(p.run, p.next)
            }
            None => Reorder::new(),
        };
        let s = RecvStream {
            reorder,
            inbox,
            out,
            asked: None,
            asks_left: 0,
        };
        self.streams.insert(key.0, (key.1, key.2), s);
    }

    /// What every shard of the endpoint shares about flows.
    pub(crate) fn ordered(&self) -> &Arc<OrderedShared> {
        &self.shared
    }

    /// Streams open at this shard.
    pub(crate) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Appends the peers whose streams this endpoint still reads from (their writing has
    /// not ended): they owe it bytes, so keepalives keep it reachable by them.
    pub(crate) fn reading_from(&self, out: &mut Vec<NodeId>) {
        out.extend(self.streams.peers());
    }

    /// Registers a stream this endpoint opened, so its peer's chunks find it.
    pub(crate) fn register(
        &mut self,
        peer: NodeId,
        id: u64,
        out: Arc<FlowOut>,
        inbox: Arc<StreamIn>,
    ) {
        let s = RecvStream {
            reorder: Reorder::new(),
            inbox,
            out,
            asked: None,
            asks_left: 0,
        };
        self.streams.insert(peer, (id, true), s);
    }

    /// The application is done with a stream: its state goes, what it held is taken.
    pub(crate) fn forget(&mut self, peer: NodeId, id: u64, mine: bool, actions: &mut Vec<Action>) {
        self.awaiting_window.remove(&(peer, id, mine));
        if self.durable {
            // A durable stream's positions go with it.
            let lanes = self.positions.forget_stream((peer, id, mine));
            actions.push(Action::ForgetMarks { peer, lanes });
        }
        if let Some(mut s) = self.streams.remove(peer, &(id, mine)) {
            s.reorder.drain(&mut self.steps);
            for step in self.steps.drain(..) {
                actions.push(Action::Take(step_item(step).id));
            }
        }
    }

    /// Whether a new stream from a peer may be accepted.
    pub(crate) fn has_room_for_stream(&self) -> bool {
        self.streams.len() < self.max_streams
    }

    /// An ordered message (or gap) from `from`, at `now`.
    pub(crate) fn on_ordered(
        &mut self,
        now: Instant,
        from: NodeId,
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) -> Result<(), Arrival<Held>> {
        match place.flow {
            Flow::Channel(n) => self.on_channel(now, from, n, place, arrival, actions),
            Flow::Stream { id, opener_sent } => {
                self.on_stream(now, from, (id, !opener_sent), place, arrival, actions);
                Ok(())
            }
        }
    }

    /// Whether channel `n` from `from` has its reorder buffer, made now if there is room:
    /// below `max_channels`, and in durable mode room for its position's mark (without it
    /// the channel's messages are not delivered at all).
    fn has_channel(&mut self, from: NodeId, n: u16) -> bool {
        if self.channels.contains_key(&(from, n)) {
            return true;
        }
        let lane = position::lane(Flow::Channel(n).code(), false);
        if self.channels.len() >= self.max_channels
            || (self.durable && self.shared.reserve_marks(&[(from, lane)]).is_err())
        {
            return false;
        }
        self.channels.insert((from, n), Reorder::new());
        true
    }

    /// Returns the arrival back when its flow cannot be made (too many): the driver leaves
    /// it untaken.
    fn on_channel(
        &mut self,
        now: Instant,
        from: NodeId,
        n: u16,
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) -> Result<(), Arrival<Held>> {
        if !self.has_channel(from, n) {
            self.refused += 1;
            return Err(arrival);
        }
        let Some(r) = self.channels.get_mut(&(from, n)) else {
            return Err(arrival);
        };
        let known = r.run() == Some(place.run);
        if known && place.seq < r.next() && is_redelivery(&arrival) {
            // Durable mode: released before a restart, not taken: handed out again.
            self.released_again(from, n, place.seq, arrival, actions);
            return Ok(());
        }
        let window = u64::from(self.channel_window.messages.max(1));
        if known && place.seq >= r.next().saturating_add(window) {
            // Its sender does not keep to this receiver's window (it has not learned it,
            // or ignores it): held untaken all the same, so never acknowledged before the
            // application has it. The core's untaken limits bound what such a peer holds.
            self.beyond_window += 1;
            if !self.hold && place.seq >= r.next().saturating_add(4 * window) {
                // Rule off: the old defect, taken (acknowledged) and dropped.
                actions.push(Action::Take(item_of(arrival).id));
                return Ok(());
            }
        }
        r.on_arrival(place.run, place.seq, arrival, &mut self.steps);
        if r.held() > 0 {
            // Held ahead of its turn: watched for a run that stalls.
            if let Some(s) = self.stalls.as_mut() {
                s.holds(now, (from, Flow::Channel(n)));
            }
        }
        let resumed = self.unadvertised.remove(&(from, n));
        let started = !known && r.run() == Some(place.run);
        if self.advertise && (!known || resumed) && r.run() == Some(place.run) {
            // The sender's run starts here: tell it this receiver's window.
            actions.push(Action::Window {
                to: from,
                flow: Flow::Channel(n),
                run: place.run,
                window: self.channel_window,
            });
        }
        let stale = self.channel_actions(from, n, actions);
        if stale
            && !known
            && place.seq != 0
            && self.resets_sent.insert((from, n), place.run) != Some(place.run)
        {
            // The sender's run is unknown here: it should start a new one.
            actions.push(Action::Reset { to: from, place });
        }
        if started {
            self.ask_about_other_runs(now, from, place.run, actions);
        }
        Ok(())
    }

    /// What the steps channel `n` from `from` took say to do, in `actions`: messages and
    /// gaps handed over in order (durable mode: their flow's position kept for their takes),
    /// discards taken, stale ones (of a run not known here) handed over out of the order.
    /// Returns whether any was stale.
    fn channel_actions(&mut self, from: NodeId, n: u16, actions: &mut Vec<Action>) -> bool {
        let mut stale = false;
        for step in self.steps.drain(..) {
            if self.durable {
                if let Step::Deliver { item, .. } | Step::Gap { item, .. } = &step {
                    self.positions.channel(item.id, from, n);
                }
            }
            actions.push(match step {
                Step::Deliver { seq, item, .. } => Action::Channel(ChannelOut::Message {
                    channel: n,
                    seq,
                    held: item,
                }),
                Step::Gap { seq, item } => Action::Channel(ChannelOut::Gap {
                    channel: n,
                    seq,
                    held: item,
                }),
                Step::Discard(item) => Action::Take(item.id),
                Step::Stale {
                    item, gap: true, ..
                } => {
                    // A gap of a run not known here: nothing to deliver, but the sender
                    // should start a new run all the same.
                    stale = true;
                    Action::Take(item.id)
                }
                Step::Stale {
                    seq,
                    item,
                    gap: false,
                } => {
                    stale = true;
                    self.stale += 1;
                    Action::Channel(ChannelOut::Stale {
                        channel: n,
                        seq,
                        held: item,
                    })
                }
            });
        }
        stale
    }

    /// Durable mode: number `seq` of channel `n` from `from`, released before a restart
    /// and not taken, handed to the application again (flagged as a redelivery).
    fn released_again(
        &mut self,
        from: NodeId,
        n: u16,
        seq: u64,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) {
        let (Arrival::Message { item, .. } | Arrival::Gap(item)) = &arrival;
        self.positions.channel(item.id, from, n);
        actions.push(Action::Channel(match arrival {
            Arrival::Message { item, .. } => ChannelOut::Message {
                channel: n,
                seq,
                held: item,
            },
            Arrival::Gap(item) => ChannelOut::Gap {
                channel: n,
                seq,
                held: item,
            },
        }));
    }

    fn on_stream(
        &mut self,
        now: Instant,
        from: NodeId,
        (id, mine): (u64, bool),
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) {
        let key = (from, id, mine);
        let Some(s) = self.streams.get_mut(from, &(id, mine)) else {
            self.on_unknown_stream(now, from, (id, mine), place, arrival, actions);
            return;
        };
        let window = u64::from(self.stream_window.messages.max(1));
        let known = s.reorder.run() == Some(place.run);
        if known && place.seq >= s.reorder.next().saturating_add(window) {
            // As for a channel: held untaken for its turn, counted.
            self.beyond_window += 1;
            if !self.hold && place.seq >= s.reorder.next().saturating_add(4 * window) {
                // Rule off: the old defect, taken (acknowledged) and the stream aborted.
                actions.push(Action::Take(item_of(arrival).id));
                s.out.reset(true);
                self.forget(from, id, mine, actions);
                return;
            }
        }
        s.reorder
            .on_arrival(place.run, place.seq, arrival, &mut self.steps);
        if s.reorder.held() > 0 {
            // Held ahead of its turn: watched for a run that stalls, as a channel's.
            if let Some(stalls) = self.stalls.as_mut() {
                stalls.holds(now, (from, place.flow));
            }
        }
        let started = !known && s.reorder.run() == Some(place.run);
        if self.advertise && started {
            // The peer's first chunk of a stream this endpoint opened: its writing
            // starts, tell it this receiver's window.
            actions.push(Action::Window {
                to: from,
                flow: place.flow.reversed(),
                run: place.run,
                window: self.stream_window,
            });
        }
        let mut ended = false;
        let run = place.run;
        for step in self.steps.drain(..) {
            match step {
                Step::Deliver { item, last, seq } => {
                    if self.durable {
                        let len = item.body.len();
                        self.positions.chunk(item.id, key, (run, seq), len, last);
                    }
                    s.inbox.push(item.body, item.id, last);
                    ended |= last;
                }
                Step::Gap { item, .. } => {
                    // A chunk given up: the stream cannot go on.
                    actions.push(Action::Take(item.id));
                    s.out.reset(true);
                    ended = true;
                }
                Step::Discard(item) | Step::Stale { item, .. } => {
                    actions.push(Action::Take(item.id))
                }
            }
        }
        if ended {
            // Nothing more comes on this flow: its state goes (the stream object keeps
            // the inbox), but its sending side may still wait for the peer's window.
            if let Some(s) = self.streams.remove(from, &(id, mine)) {
                self.keep_awaiting(key, &s.out);
            }
        }
        if started {
            self.ask_about_other_runs(now, from, run, actions);
        }
    }

    /// A chunk of stream `id` from `from` that has no receiving side here: a new stream's
    /// first (the driver makes it, or refuses it), else taken and the stream reset at its
    /// peer (it was aborted here, or this endpoint restarted since).
    fn on_unknown_stream(
        &mut self,
        now: Instant,
        from: NodeId,
        (id, mine): (u64, bool),
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) {
        let Arrival::Message { item, last } = arrival else {
            // A gap of an unknown stream: the stream was aborted.
            actions.push(Action::Take(item_of(arrival).id));
            return;
        };
        if !mine && place.seq == 0 {
            self.ask_about_other_runs(now, from, place.run, actions);
            actions.push(Action::NewStream {
                peer: from,
                id,
                first: place,
                held: item,
                last,
            });
            return;
        }
        actions.push(Action::Take(item.id));
        self.resets += 1;
        actions.push(Action::Reset {
            to: from,
            place: Place {
                flow: place.flow.reversed(),
                run: place.run,
                seq: 0,
            },
        });
    }

    /// Keeps a stream's sending side findable by its peer's window once its receiving side
    /// is gone, if it still waits for it.
    fn keep_awaiting(&mut self, key: (NodeId, u64, bool), out: &Arc<FlowOut>) {
        if !self.advertise || out.knows_peer_window() || out.broken().is_some() {
            return;
        }
        if self.awaiting_window.len() >= self.max_streams {
            self.awaiting_window.retain(|_, w| w.strong_count() > 0);
            if self.awaiting_window.len() >= self.max_streams {
                return; // it goes on one chunk at a time
            }
        }
        self.awaiting_window.insert(key, Arc::downgrade(out));
    }

    /// A peer's window for one of this endpoint's flows to it (`flow` as this endpoint,
    /// the sender, names it). Durable mode: returns the flow's sending mark lane, whose
    /// mark keeps the window with the advert's take ([`Rules::mark_flow_window`]).
    pub(crate) fn on_window(
        &mut self,
        from: NodeId,
        flow: Flow,
        run: u32,
        window: Window,
    ) -> Option<u64> {
        let lane = match flow {
            Flow::Channel(n) => {
                if let Some(out) = self.shared.channel_out(from, n) {
                    out.on_peer_window(run, window);
                }
                position::lane(flow.code(), true)
            }
            Flow::Stream { id, opener_sent } => {
                // The window's sender opened the stream, or this endpoint did.
                let key = (from, id, !opener_sent);
                if let Some(s) = self.streams.get(from, &(id, !opener_sent)) {
                    s.out.on_peer_window(run, window);
                } else if let Some(out) = self.awaiting_window.remove(&key) {
                    if let Some(out) = out.upgrade() {
                        out.on_peer_window(run, window);
                    }
                }
                send_lane(key)
            }
        };
        (self.durable && self.shared.rules.mark_flow_window).then_some(lane)
    }

    /// A stream's abort from its peer.
    pub(crate) fn on_reset(&mut self, from: NodeId, place: Place, actions: &mut Vec<Action>) {
        match place.flow {
            Flow::Channel(n) => {
                // Our channel's run is unknown there: start a new one.
                if let Some(out) = self.shared.channel_out(from, n) {
                    out.restart_run(place.run);
                }
            }
            Flow::Stream { id, opener_sent } => {
                if let Some(s) = self.streams.get(from, &(id, !opener_sent)) {
                    self.resets += 1;
                    s.out.break_with(Broken::Reset);
                }
                self.forget(from, id, !opener_sent, actions);
            }
        }
    }

    /// Makes the receiving side of a new stream from `peer`, whose first chunk (number 0
    /// of the peer's run) is `first`, and queues it to be accepted. Gives the chunk back when
    /// nobody accepts streams, or `max_streams` already wait (the caller resets it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        &mut self,
        peer: NodeId,
        id: u64,
        first: Place,
        held: Held,
        last: bool,
        out: Arc<FlowOut>,
        inbox: Arc<StreamIn>,
        actions: &mut Vec<Action>,
    ) -> Result<(), Held> {
        let accepted = Accepted {
            peer,
            id,
            out: out.clone(),
            inbox: inbox.clone(),
        };
        if self.shared.accept.try_send(accepted).is_err() {
            return Err(held);
        }
        if self.durable {
            // Its take keeps the stream's position: known here after a restart.
            let key = (peer, id, false);
            let len = held.body.len();
            self.positions
                .chunk(held.id, key, (first.run, 0), len, last);
        }
        inbox.push(held.body, held.id, last);
        if self.advertise && !last {
            // The opener's writing goes on: tell it this receiver's window.
            actions.push(Action::Window {
                to: peer,
                flow: first.flow.reversed(),
                run: first.run,
                window: self.stream_window,
            });
        }
        if last {
            // Nothing more comes from the opener; this side may still write.
            self.keep_awaiting((peer, id, false), &out);
        } else {
            let reorder = Reorder::started(first.run, 1);
            self.streams.insert(
                peer,
                (id, false),
                RecvStream {
                    reorder,
                    inbox,
                    out,
                    asked: None,
                    asks_left: 0,
                },
            );
        }
        Ok(())
    }
}

fn step_item(s: Step<Held>) -> Held {
    match s {
        Step::Deliver { item, .. }
        | Step::Gap { item, .. }
        | Step::Discard(item)
        | Step::Stale { item, .. } => item,
    }
}

fn item_of(a: Arrival<Held>) -> Held {
    match a {
        Arrival::Message { item, .. } | Arrival::Gap(item) => item,
    }
}

/// Whether an arrival is a delivery handed out again after a restart.
fn is_redelivery(a: &Arrival<Held>) -> bool {
    match a {
        Arrival::Message { item, .. } | Arrival::Gap(item) => item.id.is_redelivery(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const PEER: NodeId = NodeId::from_const(5);

    pub(super) fn flows(window: u32) -> Flows {
        flows_with(window, Rules::ALL)
    }

    fn flows_with(window: u32, rules: Rules) -> Flows {
        let config = FlowConfig {
            channel_window: window,
            ..FlowConfig::default()
        };
        Flows::new(OrderedShared::new(mpsc::channel(1).0, config, rules))
    }

    /// The tests' clock: every arrival is at its start unless said.
    pub(super) fn t0() -> Instant {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *T0.get_or_init(Instant::now)
    }

    pub(super) fn arrive(f: &mut Flows, run: u32, seq: u64) -> Vec<Action> {
        let place = Place {
            flow: Flow::Channel(3),
            run,
            seq,
        };
        let item = Held {
            id: DeliveryId::for_test(PEER, seq),
            body: Bytes::from_static(b"m"),
        };
        let mut actions = Vec::new();
        let arrival = Arrival::Message { item, last: false };
        assert!(f
            .on_ordered(t0(), PEER, place, arrival, &mut actions)
            .is_ok());
        actions
    }

    pub(super) fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::Channel(ChannelOut::Message { .. }) => "message",
                Action::Channel(ChannelOut::Gap { .. }) => "gap",
                Action::Channel(ChannelOut::Stale { .. }) => "stale",
                Action::Take(_) => "take",
                Action::Reset { .. } => "reset",
                Action::Query { .. } => "query",
                Action::Over { .. } => "over",
                Action::Window { .. } => "window",
                Action::NewStream { .. } => "stream",
                Action::ForgetMarks { .. } => "forget",
            })
            .collect()
    }

    /// A message however far beyond this receiver's window is held untaken for its turn,
    /// never taken (acknowledged) and dropped: its sender may not know the window, or not
    /// keep to it, and an acknowledged message must reach the application. (The core's
    /// untaken limits bound what a peer holds that way.)
    #[test]
    fn a_message_far_beyond_the_window_is_held_not_dropped() {
        let mut f = flows(2);
        assert_eq!(kinds(&arrive(&mut f, 1, 0)), ["window", "message"]);
        assert!(arrive(&mut f, 1, 8).is_empty(), "held");
        assert!(arrive(&mut f, 1, 9).is_empty(), "held, beyond four windows");
        assert!(arrive(&mut f, 1, 1000).is_empty(), "held, however far");
        assert_eq!(f.beyond_window, 3);
        for seq in 1..8 {
            arrive(&mut f, 1, seq);
        }
        // 8 and 9 were released behind 1..=7, in order.
        assert_eq!(f.channels[&(PEER, 3)].next(), 10);
    }

    /// With the rule off, the old defect: a message four windows ahead is taken and dropped.
    #[test]
    fn without_the_rule_a_message_far_beyond_the_window_is_taken_and_dropped() {
        let mut rules = Rules::ALL;
        rules.hold_beyond_window = false;
        let mut f = flows_with(2, rules);
        assert_eq!(kinds(&arrive(&mut f, 1, 0)), ["window", "message"]);
        assert!(arrive(&mut f, 1, 8).is_empty());
        assert_eq!(kinds(&arrive(&mut f, 1, 9)), ["take"]);
    }

    /// The receiver advertises its window once per sender's run, when the run starts.
    #[test]
    fn the_window_is_advertised_when_a_run_starts() {
        let mut f = flows(5);
        let actions = arrive(&mut f, 1, 0);
        let Some(Action::Window {
            to,
            flow,
            run,
            window,
        }) = actions.first()
        else {
            panic!("no window advertised");
        };
        assert_eq!(
            (*to, *flow, *run, window.messages),
            (PEER, Flow::Channel(3), 1, 5)
        );
        assert_eq!(kinds(&arrive(&mut f, 1, 1)), ["message"], "once per run");
        assert_eq!(
            kinds(&arrive(&mut f, 2, 0)),
            ["window", "message"],
            "a new run"
        );
        let mut rules = Rules::ALL;
        rules.advertise_flow_window = false;
        let mut f = flows_with(5, rules);
        assert_eq!(kinds(&arrive(&mut f, 1, 0)), ["message"], "rule off");
    }

    /// A stream recovered at bind keeps its id: a new stream opened since never gets it.
    #[test]
    fn a_new_stream_skips_the_ids_of_recovered_streams() {
        let s = OrderedShared::new(mpsc::channel(1).0, FlowConfig::default(), Rules::ALL);
        let first = s.next_stream();
        let shared = Arc::new(Shared::for_test());
        let recv = RecvPosition {
            run: 1,
            next: 1,
            offset: 0,
            ended: false,
        };
        let streams = [first + 1, first + 2]
            .map(|id| {
                (
                    (PEER, id, true),
                    ResumedStream {
                        out: None,
                        recv: Some(recv),
                    },
                )
            })
            .into();
        let (tx, _rx) = crate::endpoint::driver::mailbox::mailbox::<
            crate::endpoint::driver::command::Command,
        >();
        let driver = || -> Box<dyn Submit> { Box::new(tx.downgrade()) };
        assert_eq!(s.make_streams(streams, driver, &shared).len(), 2);
        assert_eq!(s.next_stream(), first + 3);
    }

    #[test]
    fn an_unknown_run_is_delivered_unordered_and_its_sender_told_once() {
        let mut f = flows(8);
        assert_eq!(kinds(&arrive(&mut f, 7, 3)), ["stale", "reset"]);
        assert_eq!(kinds(&arrive(&mut f, 7, 4)), ["stale"], "one reset per run");
        // The sender's new run starts at 0 and is in order.
        assert_eq!(kinds(&arrive(&mut f, 8, 0)), ["window", "message"]);
        assert_eq!(kinds(&arrive(&mut f, 8, 1)), ["message"]);
        assert_eq!(f.stale, 2);
    }
}
