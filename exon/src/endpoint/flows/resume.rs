//! Durable flows after a restart: where each channel stood, from the journal's marks and
//! the messages recovered without a verdict, for the endpoint to go on with it (the
//! sender's numbering and window, the receiver's next number due).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::receipts::Ack;
use crate::endpoint::flows::ack::{AckKind, FlowAck, FlowVerdicts};
use crate::endpoint::flows::out::FlowOut;
use crate::envelope::{Flow, Place};
use crate::ordered::position::{from_lane, RecvPosition, SendPosition};
use crate::proto::NodeId;

/// What a verdict was about, kept while its flow is not made yet.
#[derive(Debug, Clone, Copy)]
enum Tag {
    Message,
    Gap,
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
                        _ => Tag::Message,
                    };
                    st.0.push((run, seq, tag, verdict));
                    return;
                }
            }
        };
        out.on_verdict(run, seq, kind, verdict);
    }
}

/// A durable channel's sending side as recovered.
#[derive(Debug)]
pub(crate) struct ResumedOut {
    /// Where it stood.
    pub(crate) pos: SendPosition,
    /// Its messages and gaps of that run without a verdict: number and bytes (0: a gap).
    pub(crate) unsettled: Vec<(u64, usize)>,
    /// Where their verdicts wait for the flow.
    pub(crate) pending: Arc<PendingFlow>,
}

/// What a durable endpoint's channels recovered at bind.
#[derive(Debug, Default)]
pub(crate) struct ResumedFlows {
    /// Channels this endpoint sends on, by destination and number.
    pub(crate) out: HashMap<(NodeId, u16), ResumedOut>,
    /// Channels this endpoint receives: the sender, the number, and the position.
    pub(crate) inbound: Vec<(NodeId, u16, RecvPosition)>,
}

impl ResumedFlows {
    /// The flows the journal's marks name (other marks, and damaged ones, are ignored).
    pub(crate) fn from_marks(marks: &[(NodeId, u64, Bytes)]) -> ResumedFlows {
        let mut r = ResumedFlows::default();
        for (peer, lane, value) in marks {
            let (code, sending) = from_lane(*lane);
            let Some(Flow::Channel(n)) = Flow::from_code(code) else {
                continue;
            };
            if sending {
                if let Some(pos) = SendPosition::decode(value) {
                    r.out.insert((*peer, n), resumed_out(pos));
                }
            } else if let Some(pos) = RecvPosition::decode(value) {
                r.inbound.push((*peer, n, pos));
            }
        }
        r
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
            })
        });
        if place.run == r.pos.run {
            r.pos.next = r.pos.next.max(place.seq + 1);
            r.unsettled.push((place.seq, body.unwrap_or(0)));
        }
        let kind = match body {
            Some(_) => AckKind::Message(receipt),
            None => AckKind::Gap,
        };
        Ack::Flow(Box::new(FlowAck::new(
            r.pending.clone(),
            place.run,
            place.seq,
            kind,
        )))
    }
}

fn resumed_out(pos: SendPosition) -> ResumedOut {
    ResumedOut {
        pos,
        unsettled: Vec::new(),
        pending: Arc::default(),
    }
}
