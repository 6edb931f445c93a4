//! The driver's side of one message handed over by a handle or a flow ([`Outgoing`]): what
//! it carries, whom it answers, and how its sender hears that it was queued or refused;
//! and [`Submit`], the narrow way in for the flows, which never build driver commands.

use tokio::sync::oneshot;

use crate::endpoint::api::error::{Error, ReceiptError};
use crate::endpoint::api::receipts::Ack;
use crate::proto::journal::Mark;
use crate::proto::{DeliveryId, MsgId, NodeId, Payload};

/// Whether a send waits for the driver's answer.
pub(crate) enum Reply {
    /// No: the send already returned its receipt (it held a send credit).
    None,
    /// Yes (`try_send`), answered at once: in the core's queue, or refused.
    Try(oneshot::Sender<Result<(), Error>>),
    /// Yes (`send_keyed`), answered once the core took the message under the application's
    /// key or refused it (a full queue makes it wait, as a `send`). Boxed, as few sends are
    /// keyed and every send's `Outgoing` stays small.
    Keyed(Box<(oneshot::Sender<Result<(), Error>>, u64)>),
    /// No, as [`None`](Self::None) (it holds a send credit): a message of a keyed batch
    /// (`send_keyed_batch`), under this key; refused through its receipt.
    KeyedBatch(u64),
    /// No, and it holds no send credit: a server's reply (bounded by the requests the
    /// node holds, each waiting for its reply).
    Uncredited,
    /// No, as [`None`](Self::None) (it holds a send credit): the request of call `0`, held
    /// in a durable node's journal until the call ends (`Node::send_held`).
    Request(u64),
    /// No, and it holds no send credit, as [`Uncredited`](Self::Uncredited): a stream's
    /// opener, after which its flow sends chunks of several fragments holding up to this
    /// many bytes in progress; the core asks for that much reassembly credit with it
    /// (`Node::ask_credit`).
    CreditAhead(u64),
    /// No, and it holds no send credit, as [`Uncredited`](Self::Uncredited): a flow's note
    /// (a reset, a question about a run or its answer, a window), whose verdict nobody
    /// hears. Bounded while it waits for room (`Sends`'s note caps), as nothing else
    /// bounds how many a peer's messages can draw.
    Note,
}

/// A message for the driver to hand to the core.
pub(crate) struct Outgoing {
    to: NodeId,
    payload: Payload,
    /// The endpoint's id for the message (the one its receipt shows).
    id: MsgId,
    kind: Kind,
    /// Where the message's storing is told (durable mode), or a durable flow's position:
    /// boxed, so that every send's `Outgoing` fits the 128 bytes a move copies inline (see
    /// `a_send_command_stays_small`).
    side: Option<Box<Side>>,
}

/// A message's verdict and wait, or the request a reply answers: one field for both, since
/// a reply has neither verdict nor deadline (so a reply's request travels inline, without
/// an allocation each).
enum Kind {
    /// A handle's or a flow's message.
    Sent {
        ack: Ack,
        reply: Reply,
        /// When the endpoint gives the message up, if not acknowledged by then.
        deadline: Option<std::time::Instant>,
    },
    /// A server's reply: the request it answers, taken in the same step ([`Node::reply`]).
    /// Nobody waits for its verdict, and it holds no send credit.
    ///
    /// [`Node::reply`]: crate::proto::Node::reply
    Answers(DeliveryId),
}

/// What some messages carry beside their payload: one field for all, since no message
/// carries two (a flow's message is never told it is stored).
pub(crate) enum Side {
    /// Durable mode: told the message's stable id once it is on stable storage.
    Stored(oneshot::Sender<MsgId>),
    /// A durable flow's message: the flow's position, kept in the message's own journal
    /// record ([`Node::send_marked`](crate::proto::Node::send_marked)).
    Marked(Mark),
}

impl Outgoing {
    /// A handle's message ([`Handle::send`] and the like): `reply` says whether its sender
    /// waits for the driver's answer; `stored` (durable mode) is told its stable id once it
    /// is on stable storage.
    ///
    /// [`Handle::send`]: crate::endpoint::Handle::send
    #[inline]
    pub(crate) fn send(
        to: NodeId,
        payload: Payload,
        id: MsgId,
        ack: Ack,
        reply: Reply,
        deadline: Option<std::time::Instant>,
        stored: Option<oneshot::Sender<MsgId>>,
    ) -> Outgoing {
        Outgoing {
            to,
            payload,
            id,
            kind: Kind::Sent {
                ack,
                reply,
                deadline,
            },
            side: stored.map(|tx| Box::new(Side::Stored(tx))),
        }
    }

    /// A server's reply `payload` to the request delivered as `request` from `to`, which it
    /// takes in the same step. Holds no send credit, and has no deadline: it is sent until
    /// acknowledged (or the endpoint closes); nobody waits for its verdict (the caller
    /// learns the outcome, the server has nothing to wait for).
    pub(crate) fn reply(to: NodeId, request: DeliveryId, payload: Payload, id: MsgId) -> Outgoing {
        Outgoing {
            to,
            payload,
            id,
            kind: Kind::Answers(request),
            side: None,
        }
    }

    /// A server's reply told in doubt, sent once more as a message of its own: holds no send
    /// credit (as the reply did), has no deadline, and nobody hears its verdict (a second
    /// doubt ends it).
    pub(crate) fn reply_again(to: NodeId, payload: Payload, id: MsgId) -> Outgoing {
        Outgoing {
            to,
            payload,
            id,
            kind: Kind::Sent {
                ack: Ack::None,
                reply: Reply::Uncredited,
                deadline: None,
            },
            side: None,
        }
    }

    /// A message of an ordered flow (a channel's message, a stream's chunk, a gap or a
    /// reset), bounded by its flow's window rather than by send credits.
    pub(crate) fn ordered(
        to: NodeId,
        payload: Payload,
        id: MsgId,
        ack: Ack,
        deadline: Option<std::time::Instant>,
    ) -> Outgoing {
        Outgoing {
            to,
            payload,
            id,
            kind: Kind::Sent {
                ack,
                reply: Reply::Uncredited,
                deadline,
            },
            side: None,
        }
    }

    /// A flow's note to `to` (a reset, a question about a run or its answer, a window):
    /// nobody hears its verdict; given up at `deadline` if any.
    pub(crate) fn note(
        to: NodeId,
        payload: Payload,
        id: MsgId,
        deadline: Option<std::time::Instant>,
    ) -> Outgoing {
        let mut out = Outgoing::ordered(to, payload, id, Ack::None, deadline);
        if let Kind::Sent { reply, .. } = &mut out.kind {
            *reply = Reply::Note;
        }
        out
    }

    /// Whether it is a flow's note ([`note`](Self::note)).
    pub(crate) fn is_note(&self) -> bool {
        matches!(self.reply_kind(), Some(Reply::Note))
    }

    /// An [`ordered`](Self::ordered) message made a stream's opener: its flow's chunks to
    /// come, of several fragments, hold up to `want` bytes in progress, and the core asks
    /// for that much reassembly credit with it.
    pub(crate) fn with_credit_ahead(mut self, want: u64) -> Outgoing {
        if let Kind::Sent { reply, .. } = &mut self.kind {
            *reply = Reply::CreditAhead(want);
        }
        self
    }

    /// Whether its sender waits for the driver's answer, and how (a reply: no).
    fn reply_kind(&self) -> Option<&Reply> {
        match &self.kind {
            Kind::Sent { reply, .. } => Some(reply),
            Kind::Answers(_) => None,
        }
    }

    /// The reassembly credit to ask for with it, if any.
    pub(crate) fn credit_ahead(&self) -> Option<u64> {
        match self.reply_kind() {
            Some(Reply::CreditAhead(want)) => Some(*want),
            _ => None,
        }
    }

    /// The same, keeping `mark` with it in its journal record (a durable flow's position).
    pub(crate) fn with_mark(mut self, mark: Mark) -> Outgoing {
        self.side = Some(Box::new(Side::Marked(mark)));
        self
    }

    /// Takes out the mark a durable flow's message keeps with it.
    pub(crate) fn take_mark(&mut self) -> Option<Mark> {
        // Looked at in place first: another side stays in its box (no allocation again).
        if !matches!(self.side.as_deref(), Some(Side::Marked(_))) {
            return None;
        }
        match self.side.take().map(|s| *s) {
            Some(Side::Marked(m)) => Some(m),
            _ => None,
        }
    }

    /// Gives the mark back (the core could not take the message yet).
    pub(crate) fn put_mark(&mut self, mark: Option<Mark>) {
        if let Some(m) = mark {
            self.side = Some(Box::new(Side::Marked(m)));
        }
    }

    /// Its verdict's destination, its payload and deadline (unit tests of flows).
    #[cfg(test)]
    pub(crate) fn into_parts(self) -> (Ack, Payload, Option<std::time::Instant>) {
        match self.kind {
            Kind::Sent { ack, deadline, .. } => (ack, self.payload, deadline),
            Kind::Answers(_) => (Ack::None, self.payload, None),
        }
    }

    /// A message that never reached the driver: its flow is not told (it knows).
    pub(crate) fn disarm(self) {
        if let Kind::Sent {
            ack: Ack::Flow(f), ..
        } = self.kind
        {
            f.disarm();
        }
    }

    /// Whether it is an ordered flow's message (its flow hears its verdict).
    pub(crate) fn is_flow(&self) -> bool {
        matches!(
            self.kind,
            Kind::Sent {
                ack: Ack::Flow(_),
                ..
            }
        )
    }

    /// The request this message answers, if it is a reply.
    pub(crate) fn answers(&self) -> Option<DeliveryId> {
        match self.kind {
            Kind::Answers(d) => Some(d),
            Kind::Sent { .. } => None,
        }
    }

    /// Whether it holds a send credit, returned when the driver takes it.
    pub(crate) fn holds_credit(&self) -> bool {
        matches!(
            self.reply_kind(),
            Some(Reply::None | Reply::KeyedBatch(_) | Reply::Request(_))
        )
    }

    /// The destination.
    pub(crate) fn to(&self) -> NodeId {
        self.to
    }

    /// The endpoint's id for the message.
    pub(crate) fn id(&self) -> MsgId {
        self.id
    }

    /// Gives the message its endpoint id (replies take theirs when handed over together).
    pub(crate) fn set_id(&mut self, id: MsgId) {
        self.id = id;
    }

    /// The payload's length.
    pub(crate) fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// When the endpoint gives the message up.
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        match self.kind {
            Kind::Sent { deadline, .. } => deadline,
            Kind::Answers(_) => None,
        }
    }

    /// Whether the sender waits for the driver's answer at once, refused rather than kept
    /// waiting by a full queue ([`Handle::try_send`](crate::endpoint::Handle::try_send)).
    pub(crate) fn waits_for_answer(&self) -> bool {
        matches!(self.reply_kind(), Some(Reply::Try(_)))
    }

    /// The call whose request this is ([`Handle::call`](crate::endpoint::Handle::call)).
    pub(crate) fn call(&self) -> Option<u64> {
        match self.reply_kind() {
            Some(Reply::Request(call)) => Some(*call),
            _ => None,
        }
    }

    /// The application's key ([`Handle::send_keyed`](crate::endpoint::Handle::send_keyed)).
    pub(crate) fn key(&self) -> Option<u64> {
        match self.reply_kind() {
            Some(Reply::Keyed(k)) => Some(k.1),
            Some(Reply::KeyedBatch(key)) => Some(*key),
            _ => None,
        }
    }

    /// Takes the payload out, to hand it to the core.
    #[inline]
    pub(crate) fn take_payload(&mut self) -> Payload {
        std::mem::take(&mut self.payload)
    }

    /// Gives the payload back (the core could not take the message yet).
    pub(crate) fn put_payload(&mut self, payload: Payload) {
        self.payload = payload;
    }

    /// The message is in the core's queue: a waiting sender hears so; the acknowledgement
    /// is to come through the returned end.
    pub(crate) fn queued(self) -> Ack {
        self.queued_stored().0
    }

    /// As [`queued`](Self::queued), with where to say the message is stored (durable mode).
    /// Inline for a plain send (nobody waits for its answer, nothing beside it).
    #[inline(always)]
    pub(crate) fn queued_stored(self) -> (Ack, Option<oneshot::Sender<MsgId>>) {
        match self {
            Outgoing {
                kind:
                    Kind::Sent {
                        ack,
                        reply: reply @ Reply::None,
                        ..
                    },
                side: side @ None,
                ..
            } => {
                // Both hold nothing (matched so): no drop code for them to run.
                std::mem::forget((reply, side));
                (ack, None)
            }
            other => other.queued_stored_rest(),
        }
    }

    /// [`queued_stored`](Self::queued_stored) of a send with an answer or a side.
    #[inline(never)]
    fn queued_stored_rest(self) -> (Ack, Option<oneshot::Sender<MsgId>>) {
        let Kind::Sent { ack, reply, .. } = self.kind else {
            return (Ack::None, None);
        };
        match reply {
            Reply::Try(r) => {
                let _ = r.send(Ok(()));
            }
            Reply::Keyed(k) => {
                let _ = k.0.send(Ok(()));
            }
            Reply::None
            | Reply::Uncredited
            | Reply::Note
            | Reply::CreditAhead(_)
            | Reply::KeyedBatch(_)
            | Reply::Request(_) => {}
        }
        let stored = match self.side.map(|s| *s) {
            Some(Side::Stored(tx)) => Some(tx),
            _ => None,
        };
        (ack, stored)
    }

    /// Tells the sender that the message was refused: through its answer if it waits for
    /// one, otherwise through its receipt.
    pub(crate) fn refuse(self, e: Error) {
        let Kind::Sent { ack, reply, .. } = self.kind else {
            return; // a reply: nobody waits for its verdict
        };
        match reply {
            Reply::None
            | Reply::Uncredited
            | Reply::Note
            | Reply::CreditAhead(_)
            | Reply::KeyedBatch(_)
            | Reply::Request(_) => ack.resolve(Err(ReceiptError::Refused(e))),
            Reply::Try(r) => {
                let _ = r.send(Err(e));
            }
            Reply::Keyed(k) => {
                let _ = k.0.send(Err(e));
            }
        }
    }

    /// The message is given up at its deadline before it reached the core: certainly not
    /// delivered.
    pub(crate) fn give_up(self) {
        self.queued().resolve(Err(ReceiptError::NotDelivered));
    }
}

/// How an ordered flow hands its messages to the driver of its peer's shard (weak: a flow
/// does not keep the endpoint running). The flows reach the driver only through this.
pub(crate) trait Submit: Send + Sync + std::fmt::Debug {
    /// Whether the driver is still there to take messages (a handle keeps it).
    fn is_open(&self) -> bool;
    /// Hands `out` to the driver; false when the driver is gone, and `out` is then
    /// disarmed: its flow is not told (the caller knows, and may hold the flow's lock).
    fn submit(&self, out: Outgoing) -> bool;
}
