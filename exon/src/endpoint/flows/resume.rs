//! Durable flows after a restart: where each channel and stream stood, from the journal's
//! marks and the messages recovered without a verdict, for the endpoint to go on with it
//! (the sender's numbering, window and bytes, the receiver's next number due and bytes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::receipts::Ack;
use crate::endpoint::flows::ack::{AckKind, FlowAck, FlowVerdicts, ReceiptEnd};
use crate::endpoint::flows::out::{FlowOut, Resume};
use crate::endpoint::flows::positions::{send_lane, StreamKey};
use crate::endpoint::flows::stream_in::StreamIn;
use crate::envelope::{Flow, Place};
use crate::ordered::position::{from_lane, RecvPosition, SendPosition};
use crate::proto::NodeId;

/// What a verdict was about, kept while its flow is not made yet.
#[derive(Debug, Clone, Copy)]
enum Tag {
    Message,
    Gap,
    Chunk,
}

/// Verdicts heard before their flow's sending side was made again.
type Waiting = Vec<(u32, u64, Tag, Result<(), ReceiptError>)>;

/// The sending side of a recovered flow, as its recovered messages' verdicts see it: they
/// wait here until the endpoint makes the flow again (at bind), then go to it.
#[derive(Debug, Default)]
pub(crate) struct PendingFlow {
    state: Mutex<(Waiting, Option<Arc<FlowOut>>)>,
}

impl PendingFlow {
    /// The flow is made: the verdicts heard so far go to it, the next ones straight.
    pub(crate) fn ready(&self, out: Arc<FlowOut>) {
        let waiting = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.1 = Some(out.clone());
            std::mem::take(&mut st.0)
        };
        for (run, seq, tag, verdict) in waiting {
            let kind = match tag {
                Tag::Message => AckKind::Message(None),
                Tag::Gap => AckKind::Gap,
                Tag::Chunk => AckKind::Chunk,
            };
            out.clone().on_verdict(run, seq, &kind, verdict);
        }
    }
}

impl FlowVerdicts for PendingFlow {
    fn on_verdict(
        self: Arc<Self>,
        run: u32,
        seq: u64,
        kind: &AckKind,
        verdict: Result<(), ReceiptError>,
    ) {
        let out = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match &st.1 {
                Some(out) => out.clone(),
                None => {
                    let tag = match kind {
                        AckKind::Gap => Tag::Gap,
                        AckKind::Chunk => Tag::Chunk,
                        AckKind::Message(_) => Tag::Message,
                    };
                    st.0.push((run, seq, tag, verdict));
                    return;
                }
            }
        };
        out.on_verdict(run, seq, kind, verdict);
    }
}

/// A durable flow's sending side as recovered.
#[derive(Debug)]
pub(crate) struct ResumedOut {
    /// Where it goes on from.
    pub(crate) resume: Resume,
    /// Where its recovered messages' verdicts wait for the flow.
    pub(crate) pending: Arc<PendingFlow>,
}

/// A durable stream as recovered: its sending side (if it sent anything durable) and its
/// receiving side (if it took anything).
#[derive(Debug)]
pub(crate) struct ResumedStream {
    /// The sending side.
    pub(crate) out: Option<ResumedOut>,
    /// The receiving side's position.
    pub(crate) recv: Option<RecvPosition>,
}

/// What a durable endpoint's ordered flows recovered at bind.
#[derive(Debug, Default)]
pub(crate) struct ResumedFlows {
    /// Channels this endpoint sends on, by destination and number.
    pub(crate) out: HashMap<(NodeId, u16), ResumedOut>,
    /// Channels this endpoint receives: the sender, the number, and the position.
    pub(crate) inbound: Vec<(NodeId, u16, RecvPosition)>,
    /// Streams, by peer, id, and whether this endpoint opened them.
    pub(crate) streams: HashMap<StreamKey, ResumedStream>,
}

impl ResumedFlows {
    /// The flows the journal's marks name (other marks, and damaged ones, are ignored).
    pub(crate) fn from_marks(marks: &[(NodeId, u64, Bytes)]) -> ResumedFlows {
        let mut r = ResumedFlows::default();
        for (peer, lane, value) in marks {
            let (code, sending) = from_lane(*lane);
            match (Flow::from_code(code), sending) {
                (Some(Flow::Channel(n)), true) => {
                    if let Some(pos) = SendPosition::decode(value) {
                        r.out.insert((*peer, n), resumed_out(pos));
                    }
                }
                (Some(Flow::Channel(n)), false) => {
                    if let Some(pos) = RecvPosition::decode(value) {
                        r.inbound.push((*peer, n, pos));
                    }
                }
                (Some(Flow::Stream { id, opener_sent }), true) => {
                    if let Some(pos) = SendPosition::decode(value) {
                        r.stream(*peer, id, opener_sent).out = Some(resumed_out(pos));
                    }
                }
                (Some(Flow::Stream { id, opener_sent }), false) => {
                    if let Some(pos) = RecvPosition::decode(value) {
                        r.stream(*peer, id, !opener_sent).recv = Some(pos);
                    }
                }
                (None, _) => {}
            }
        }
        r
    }

    fn stream(&mut self, peer: NodeId, id: u64, mine: bool) -> &mut ResumedStream {
        self.streams
            .entry((peer, id, mine))
            .or_insert(ResumedStream {
                out: None,
                recv: None,
            })
    }

    /// A channel message (or gap: `body` `None`) to `to` recovered without a verdict: it
    /// counts in its flow's window, and its verdict goes to the flow (and to `receipt`,
    /// for a message). Returns its acknowledgement's end.
    pub(crate) fn recovered(
        &mut self,
        to: NodeId,
        n: u16,
        place: Place,
        body: Option<usize>,
        receipt: Option<tokio::sync::oneshot::Sender<Result<(), ReceiptError>>>,
    ) -> Ack {
        let r = self.out.entry((to, n)).or_insert_with(|| {
            // No mark (written before marks, or with the rule off): the message says.
            resumed_out(SendPosition {
                run: place.run,
                next: place.seq + 1,
                offset: 0,
                peer_window: None,
                ended: false,
                base: place.seq,
            })
        });
        if place.run == r.resume.pos.run {
            r.resume.pos.next = r.resume.pos.next.max(place.seq + 1);
            r.resume.pos.base = r.resume.pos.base.min(place.seq);
            r.resume.unsettled.push((place.seq, body.unwrap_or(0)));
        }
        let kind = match body {
            Some(_) => AckKind::Message(receipt.map(ReceiptEnd::Once)),
            None => AckKind::Gap,
        };
        Ack::Flow(Box::new(FlowAck::new(
            r.pending.clone(),
            place.run,
            place.seq,
            kind,
        )))
    }

    /// A stream's chunk to `to` recovered without a verdict, of stream `id` (`mine`: opened
    /// by this endpoint): it joins its stream's sending side if the stream's mark names its
    /// run, and its verdict goes to it. `None`: not a stream that goes on (its chunk is
    /// sent again alone, as a message nobody waits for).
    pub(crate) fn recovered_chunk(
        &mut self,
        to: NodeId,
        (id, mine): (u64, bool),
        place: Place,
        body: Bytes,
        last: bool,
    ) -> Option<Ack> {
        let s = self.streams.get_mut(&(to, id, mine))?;
        let r = s.out.as_mut().filter(|r| r.resume.pos.run == place.run)?;
        if place.seq >= r.resume.pos.next {
            return None; // not kept with its mark: cannot be
        }
        r.resume.unsettled.push((place.seq, body.len()));
        r.resume.chunks.push((place.seq, body, last));
        Some(Ack::Flow(Box::new(FlowAck::new(
            r.pending.clone(),
            place.run,
            place.seq,
            AckKind::Chunk,
        ))))
    }
}

fn resumed_out(pos: SendPosition) -> ResumedOut {
    ResumedOut {
        resume: Resume {
            pos,
            unsettled: Vec::new(),
            chunks: Vec::new(),
        },
        pending: Arc::default(),
    }
}

/// A durable stream made again at bind: for the driver (its receiving side goes on from
/// `recv`) and the application (a [`Stream`](crate::endpoint::Stream)).
pub(crate) struct StreamParts {
    pub(crate) key: StreamKey,
    pub(crate) out: Arc<FlowOut>,
    pub(crate) inbox: Arc<StreamIn>,
    pub(crate) recv: Option<RecvPosition>,
}

/// Makes again the durable streams recovered at bind: `inbox(offset, ended)` makes a
/// receiving side, `out(key, inbox)` a sending side (before it goes on from where it
/// stood).
pub(crate) fn make_streams(
    streams: HashMap<StreamKey, ResumedStream>,
    inbox: impl Fn(u64, bool) -> StreamIn,
    out: impl Fn(StreamKey, Arc<StreamIn>) -> FlowOut,
) -> Vec<StreamParts> {
    let mut parts = Vec::with_capacity(streams.len());
    for (key, s) in streams {
        let (offset, ended) = s.recv.map_or((0, false), |p| (p.offset, p.ended));
        let inbox = Arc::new(inbox(offset, ended));
        let resume = s.out.as_ref().map(|o| &o.resume);
        let made = Arc::new(out(key, inbox.clone()).with_durable(send_lane(key), resume));
        if let Some(o) = s.out {
            o.pending.ready(made.clone());
        }
        parts.push(StreamParts {
            key,
            out: made,
            inbox,
            recv: s.recv,
        });
    }
    parts
}
