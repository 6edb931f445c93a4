//! The verdict of one message of an ordered flow on its way back from the driver to its
//! flow ([`FlowAck`]), and the flow's side of it ([`FlowVerdicts`], which `flow_out`'s
//! `FlowOut` implements).

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::receipt_slab::SlotAck;

/// What a verdict is about.
#[derive(Debug)]
pub(crate) enum AckKind {
    /// A channel's message, whose receipt waits.
    Message(Option<ReceiptEnd>),
    /// The gap sent for a message given up.
    Gap,
    /// A stream's chunk.
    Chunk,
}

/// Where a channel message's receipt hears its verdict.
#[derive(Debug)]
pub(crate) enum ReceiptEnd {
    /// A cell of its flow's slab (a message sent since the endpoint started).
    Slot(SlotAck),
    /// A oneshot of its own (a message recovered from the journal).
    Once(oneshot::Sender<Result<(), ReceiptError>>),
}

impl ReceiptEnd {
    fn resolve(self, verdict: Result<(), ReceiptError>) {
        match self {
            ReceiptEnd::Slot(s) => s.resolve(verdict),
            ReceiptEnd::Once(tx) => {
                let _ = tx.send(verdict);
            }
        }
    }
}

/// A flow that hears the verdicts of its messages.
pub(crate) trait FlowVerdicts: Send + Sync + std::fmt::Debug {
    /// Message `seq` of run `run`, a `kind`, has its verdict.
    fn on_verdict(
        self: Arc<Self>,
        run: u32,
        seq: u64,
        kind: &AckKind,
        verdict: Result<(), ReceiptError>,
    );
}

/// The verdict of one message of a flow, on its way back to the flow.
#[derive(Debug)]
pub(crate) struct FlowAck {
    /// The flow; taken when the verdict is applied, or when the message never reached the
    /// driver: dropping it then does nothing.
    out: Option<Arc<dyn FlowVerdicts>>,
    run: u32,
    seq: u64,
    kind: AckKind,
}

impl FlowAck {
    /// The verdict of message `seq` of run `run` of flow `out`.
    pub(crate) fn new(out: Arc<dyn FlowVerdicts>, run: u32, seq: u64, kind: AckKind) -> FlowAck {
        FlowAck {
            out: Some(out),
            run,
            seq,
            kind,
        }
    }

    /// Applies the verdict to the flow (and to the message's receipt).
    pub(crate) fn resolve(mut self, verdict: Result<(), ReceiptError>) {
        self.apply(verdict);
    }

    /// The message never reached the driver: nothing to tell (its sender knows).
    pub(crate) fn disarm(mut self) {
        self.out = None;
    }

    fn apply(&mut self, verdict: Result<(), ReceiptError>) {
        let Some(out) = self.out.take() else {
            return;
        };
        if let AckKind::Message(tx) = &mut self.kind {
            if let Some(tx) = tx.take() {
                tx.resolve(verdict);
            }
        }
        out.on_verdict(self.run, self.seq, &self.kind, verdict);
    }
}

impl Drop for FlowAck {
    fn drop(&mut self) {
        // Dropped unresolved: the driver stopped.
        self.apply(Err(ReceiptError::Unacknowledged));
    }
}
