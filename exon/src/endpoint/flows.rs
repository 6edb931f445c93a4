//! Ordered flows at the driver: each channel's and stream's reorder buffer, fed by the
//! deliveries of ordered envelopes; released messages go to the application (channels
//! through `recv`, streams to their reader), messages held ahead of their turn stay untaken
//! (so unacknowledged) in the node. Also the endpoint-wide state of flows: the run, the
//! channels' senders, and the streams waiting to be accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::flow_config::FlowConfig;
use super::flow_out::{Broken, FlowOut, StreamOut};
use super::stream_in::StreamIn;
use crate::envelope::{Flow, Place};
use crate::ordered::{Arrival, Reorder, Step};
use crate::proto::{DeliveryId, NodeId};

/// Stream ids this endpoint uses (the wire allows up to [`MAX_STREAM_ID`](crate::envelope::MAX_STREAM_ID)): below 2^28, a
/// stream's flow is a 4-byte varint, and a chunk's envelope (up to 2^30 chunks) fits the
/// payload's inline head ([`HEAD_MAX`](crate::proto::HEAD_MAX)), so no chunk is copied.
/// Ids start at a random point below half of it: 2^27 streams before they wrap.
const STREAM_IDS: u64 = 1 << 28;

/// A stream opened by a peer, for [`Endpoint::accept_stream`](super::Endpoint::accept_stream).
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
    /// The senders of channels, by destination and channel: one numbering per channel for
    /// the whole run, however many `Channel` values the application makes.
    channels: Mutex<HashMap<(NodeId, u16), Arc<FlowOut>>>,
    /// Streams opened by peers, to be accepted: at most `max_streams` wait (a stream that
    /// ended at once has left the driver's table, but still waits here).
    accept: mpsc::Sender<Accepted>,
    config: FlowConfig,
}

impl OrderedShared {
    pub(crate) fn new(accept: mpsc::Sender<Accepted>, config: FlowConfig) -> Arc<OrderedShared> {
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
            channels: Mutex::default(),
            accept,
            config,
        })
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

    /// A new stream id.
    pub(crate) fn next_stream(&self) -> u64 {
        self.next_stream.fetch_add(1, Ordering::Relaxed) % STREAM_IDS
    }

    /// The sender of channel `n` to `to`, made by `make` the first time.
    pub(crate) fn channel(
        &self,
        to: NodeId,
        n: u16,
        make: impl FnOnce() -> FlowOut,
    ) -> Arc<FlowOut> {
        let mut m = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        m.entry((to, n)).or_insert_with(|| Arc::new(make())).clone()
    }

    /// The sender of channel `n` to `to`, if one was made.
    fn channel_out(&self, to: NodeId, n: u16) -> Option<Arc<FlowOut>> {
        let m = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(to, n)).cloned()
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
    channels: HashMap<(NodeId, u16), Reorder<Held>>,
    /// Streams by peer, id, and whether this endpoint opened them.
    streams: HashMap<(NodeId, u64, bool), RecvStream>,
    steps: Vec<Step<Held>>,
    max_channels: usize,
    max_streams: usize,
    /// How far ahead of the next number due a message may be: beyond four of this
    /// endpoint's windows no sender that keeps to a window sends, so such a message is a
    /// peer's violation (it would hold untaken room without bound).
    channel_ahead: u64,
    stream_ahead: u64,
    /// The run each channel's sender was last told to replace (one reset per run).
    resets_sent: HashMap<(NodeId, u16), u32>,
    /// Messages beyond the window (taken and dropped; a stream's aborts it).
    pub(crate) beyond_window: u64,
    /// Counters: streams reset by peers, or for being unknown here.
    pub(crate) resets: u64,
    /// Channel messages released out of order (of a run this receiver does not know).
    pub(crate) stale: u64,
    /// Channel messages beyond `max_channels` flows, left untaken.
    pub(crate) refused: u64,
}

impl Flows {
    pub(crate) fn new(shared: Arc<OrderedShared>) -> Flows {
        let c = shared.config().clone();
        Flows {
            shared,
            channels: HashMap::new(),
            streams: HashMap::new(),
            steps: Vec::new(),
            max_channels: c.max_channels,
            max_streams: c.max_streams,
            channel_ahead: 4 * u64::from(c.channel_window.max(1)),
            stream_ahead: 4 * u64::from(c.stream_window.max(1)),
            resets_sent: HashMap::new(),
            beyond_window: 0,
            resets: 0,
            stale: 0,
            refused: 0,
        }
    }

    /// Streams open at this shard.
    pub(crate) fn streams(&self) -> usize {
        self.streams.len()
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
        };
        self.streams.insert((peer, id, true), s);
    }

    /// The application is done with a stream: its state goes, what it held is taken.
    pub(crate) fn forget(&mut self, peer: NodeId, id: u64, mine: bool, actions: &mut Vec<Action>) {
        if let Some(mut s) = self.streams.remove(&(peer, id, mine)) {
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

    /// An ordered message (or gap) from `from`.
    pub(crate) fn on_ordered(
        &mut self,
        from: NodeId,
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) -> Result<(), Arrival<Held>> {
        match place.flow {
            Flow::Channel(n) => self.on_channel(from, n, place, arrival, actions),
            Flow::Stream { id, opener_sent } => {
                self.on_stream(from, id, !opener_sent, place, arrival, actions);
                Ok(())
            }
        }
    }

    /// Returns the arrival back when its flow cannot be made (too many): the driver leaves
    /// it untaken.
    fn on_channel(
        &mut self,
        from: NodeId,
        n: u16,
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) -> Result<(), Arrival<Held>> {
        let len = self.channels.len();
        let r = match self.channels.entry((from, n)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                if len >= self.max_channels {
                    self.refused += 1;
                    return Err(arrival);
                }
                e.insert(Reorder::new())
            }
        };
        let known = r.run() == Some(place.run);
        if known && place.seq >= r.next().saturating_add(self.channel_ahead) {
            self.beyond_window += 1;
            actions.push(Action::Take(item_of(arrival).id));
            return Ok(());
        }
        r.on_arrival(place.run, place.seq, arrival, &mut self.steps);
        let mut stale = false;
        for step in self.steps.drain(..) {
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
        if stale
            && !known
            && place.seq != 0
            && self.resets_sent.insert((from, n), place.run) != Some(place.run)
        {
            // The sender's run is unknown here: it should start a new one.
            actions.push(Action::Reset { to: from, place });
        }
        Ok(())
    }

    fn on_stream(
        &mut self,
        from: NodeId,
        id: u64,
        mine: bool,
        place: Place,
        arrival: Arrival<Held>,
        actions: &mut Vec<Action>,
    ) {
        let key = (from, id, mine);
        if !self.streams.contains_key(&key) {
            let Arrival::Message { item, last } = arrival else {
                // A gap of an unknown stream: the stream was aborted.
                actions.push(Action::Take(item_of(arrival).id));
                return;
            };
            if !mine && place.seq == 0 {
                // A new stream: the driver makes it, or refuses it.
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
            return;
        }
        let Some(s) = self.streams.get_mut(&key) else {
            return;
        };
        let far = s.reorder.next().saturating_add(self.stream_ahead);
        if s.reorder.run() == Some(place.run) && place.seq >= far {
            self.beyond_window += 1;
            actions.push(Action::Take(item_of(arrival).id));
            s.out.reset(true);
            self.forget(from, id, mine, actions);
            return;
        }
        s.reorder
            .on_arrival(place.run, place.seq, arrival, &mut self.steps);
        let mut ended = false;
        for step in self.steps.drain(..) {
            match step {
                Step::Deliver { item, last, .. } => {
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
            // the inbox).
            self.streams.remove(&key);
        }
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
                let key = (from, id, !opener_sent);
                if let Some(s) = self.streams.get(&key) {
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
        inbox.push(held.body, held.id, last);
        if !last {
            let reorder = Reorder::started(first.run, 1);
            self.streams.insert(
                (peer, id, false),
                RecvStream {
                    reorder,
                    inbox,
                    out,
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

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: NodeId = NodeId::from_const(5);

    fn flows(window: u32) -> Flows {
        let config = FlowConfig {
            channel_window: window,
            ..FlowConfig::default()
        };
        Flows::new(OrderedShared::new(mpsc::channel(1).0, config))
    }

    fn arrive(f: &mut Flows, run: u32, seq: u64) -> Vec<Action> {
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
        assert!(f.on_ordered(PEER, place, arrival, &mut actions).is_ok());
        actions
    }

    fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions
            .iter()
            .map(|a| match a {
                Action::Channel(ChannelOut::Message { .. }) => "message",
                Action::Channel(ChannelOut::Gap { .. }) => "gap",
                Action::Channel(ChannelOut::Stale { .. }) => "stale",
                Action::Take(_) => "take",
                Action::Reset { .. } => "reset",
                Action::NewStream { .. } => "stream",
            })
            .collect()
    }

    #[test]
    fn a_message_far_beyond_the_window_is_dropped_not_held() {
        let mut f = flows(2);
        assert_eq!(kinds(&arrive(&mut f, 1, 0)), ["message"]);
        // Within four windows of the next number: held (untaken) for its turn.
        assert!(arrive(&mut f, 1, 8).is_empty());
        // Beyond: no sender keeping to a window sends it; it would hold room forever.
        assert_eq!(kinds(&arrive(&mut f, 1, 9)), ["take"]);
        assert_eq!(f.beyond_window, 1);
    }

    #[test]
    fn an_unknown_run_is_delivered_unordered_and_its_sender_told_once() {
        let mut f = flows(8);
        assert_eq!(kinds(&arrive(&mut f, 7, 3)), ["stale", "reset"]);
        assert_eq!(kinds(&arrive(&mut f, 7, 4)), ["stale"], "one reset per run");
        // The sender's new run starts at 0 and is in order.
        assert_eq!(kinds(&arrive(&mut f, 8, 0)), ["message"]);
        assert_eq!(kinds(&arrive(&mut f, 8, 1)), ["message"]);
        assert_eq!(f.stale, 2);
    }
}
