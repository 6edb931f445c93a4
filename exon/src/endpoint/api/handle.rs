//! The cloneable sending side of an endpoint ([`Handle`]): sends, peers, counters, close;
//! it reaches its driver shards through their command mailboxes.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::endpoint::api::error::Error;
use crate::endpoint::api::receipt_slab::ReceiptSlab;
use crate::endpoint::api::receipts::{self, Ack, BatchReceipt, Receipt};
use crate::endpoint::api::shared::Shared;
use crate::endpoint::api::stats::{CloseReport, EndpointStats};
use crate::endpoint::deadline::deadline_in;
use crate::endpoint::driver::command::Command;
use crate::endpoint::driver::mailbox::MailboxTx;
use crate::endpoint::driver::outgoing::{Outgoing, Reply};
use crate::endpoint::driver::trace::peer_span;
use crate::endpoint::flows::at_driver::OrderedShared;
use crate::endpoint::flows::out::FlowOut;
use crate::endpoint::io::family::Reach;
use crate::envelope::Envelope;
use crate::proto::{DeliveryId, MsgId, NodeId, Payload, PublicKey, SendError};
use crate::rpc::calls::{CallGuard, Calls};
use crate::rpc::queue::{request_queue, RequestRx};
use crate::rpc::request::Request;

/// When the endpoint gives a message up, if it has no verdict by then.
type Deadline = Option<std::time::Instant>;

/// A cloneable handle to an endpoint: send messages, add peers, read counters, close.
/// [`Endpoint`](crate::endpoint::Endpoint) dereferences to its handle.
#[derive(Debug, Clone)]
pub struct Handle {
    id: NodeId,
    local_addr: SocketAddr,
    /// The peer addresses the endpoint's socket can send to.
    reach: Reach,
    public_key: Option<PublicKey>,
    /// The driver shards, at least one; a peer belongs to `shards[shard_of(peer)]`.
    shards: Arc<[ShardLink]>,
    /// The calls in flight (one table for every shard).
    calls: Arc<Calls>,
    /// Ordered flows: the run, channels' senders, streams to accept (one for every shard).
    ordered: Arc<OrderedShared>,
}

/// A handle's way to one driver shard: its command mailbox and the state it shares.
#[derive(Debug)]
pub(crate) struct ShardLink {
    cmds: MailboxTx<Command>,
    shared: Arc<Shared>,
    /// The verdict cells of the shard's single sends.
    receipts: Arc<ReceiptSlab>,
}

impl ShardLink {
    pub(crate) fn new(cmds: MailboxTx<Command>, shared: Arc<Shared>) -> ShardLink {
        ShardLink {
            cmds,
            shared,
            receipts: ReceiptSlab::new(),
        }
    }
}

pub(crate) use crate::endpoint::shards::steering::shard_of;

impl Handle {
    /// The handle of an endpoint with node id `id` at `local_addr`, whose socket reaches
    /// what `reach` says, driven by `shards` (at least one), with the endpoint-wide calls
    /// in flight and ordered flows.
    pub(crate) fn new(
        id: NodeId,
        (local_addr, reach): (SocketAddr, Reach),
        public_key: Option<PublicKey>,
        shards: Vec<ShardLink>,
        (calls, ordered): (Arc<Calls>, Arc<OrderedShared>),
    ) -> Handle {
        Handle {
            id,
            local_addr,
            reach,
            public_key,
            shards: shards.into(),
            calls,
            ordered,
        }
    }

    /// The shard that owns `peer`.
    #[inline]
    fn shard(&self, peer: NodeId) -> &ShardLink {
        &self.shards[shard_of(peer, self.shards.len())]
    }

    /// The first shard: its state holds what the whole endpoint shares (message ids,
    /// default deadline, payload limit).
    #[inline]
    fn first(&self) -> &ShardLink {
        &self.shards[0]
    }

    /// The calls in flight of this endpoint.
    pub(crate) fn calls(&self) -> &Arc<Calls> {
        &self.calls
    }

    /// What the driver shard that owns `peer` shares with handles.
    pub(crate) fn shared_of(&self, peer: NodeId) -> &Arc<Shared> {
        &self.shard(peer).shared
    }

    /// A server starts: every driver shard hands its requests to the server's queue from
    /// now on ([`Error::Closed`] once the endpoint stopped).
    pub(crate) fn serve_requests(&self) -> Result<RequestRx, Error> {
        let (txs, rx) = request_queue(self.shards.len());
        for (shard, tx) in self.shards.iter().zip(txs) {
            shard
                .cmds
                .send(Command::Serve(tx))
                .map_err(|_| Error::Closed)?;
        }
        Ok(rx)
    }

    /// A request a server stopped without answering goes back to its driver shard, held
    /// for the next server (dropped once the endpoint stopped).
    pub(crate) fn requeue(&self, req: Request) {
        let _ = self.shard(req.from()).cmds.send(Command::Requeue(req));
    }

    /// A server's reply `payload` (in its envelope) to the request delivered as `request`
    /// from `to`, which it takes in the same step. Holds no send credit, and has no
    /// deadline: it is sent until acknowledged (or the endpoint closes). Its id comes with
    /// the others' when they are handed over ([`send_replies`](Self::send_replies)).
    pub(crate) fn reply_out(&self, to: NodeId, request: DeliveryId, payload: Payload) -> Outgoing {
        Outgoing::reply(to, request, payload, MsgId(0))
    }

    /// Hands replies ([`reply_out`](Self::reply_out)) to the driver: one command per shard,
    /// their ids taken together, in their order (one atomic step for all of them).
    pub(crate) fn send_replies(&self, mut replies: Vec<Outgoing>) -> Result<(), Error> {
        self.give_ids(&mut replies);
        if self.shards.len() == 1 {
            return self.shards[0]
                .cmds
                .send(Command::SendBatch {
                    messages: replies,
                    credits: 0,
                })
                .map_err(|_| Error::Closed);
        }
        let n = self.shards.len();
        replies.sort_by_key(|o| shard_of(o.to(), n));
        while let Some(last) = replies.last() {
            let shard = shard_of(last.to(), n);
            let cut = replies.partition_point(|o| shard_of(o.to(), n) < shard);
            let messages = replies.split_off(cut);
            self.shards[shard]
                .cmds
                .send(Command::SendBatch {
                    messages,
                    credits: 0,
                })
                .map_err(|_| Error::Closed)?;
        }
        Ok(())
    }

    /// Driver shards of this endpoint (see
    /// [`EndpointConfig::shards`](crate::endpoint::EndpointConfig::shards)).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// This endpoint's node id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The local socket address (in [canonical](crate::endpoint::canonical) form: a socket bound to
    /// an IPv4-mapped IPv6 address reports the IPv4 address).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Which peer addresses the endpoint's socket can send to: IPv4, IPv6 only, or both
    /// (a dual-stack socket, as [`Endpoint::bind`](crate::endpoint::Endpoint::bind) makes on `[::]`).
    pub fn reach(&self) -> Reach {
        self.reach
    }

    /// This endpoint's public key, for its peers' keyrings (`None` in plaintext mode).
    pub fn public_key(&self) -> Option<PublicKey> {
        self.public_key
    }

    /// Sends `payload` to node `to`, exactly once. Waits while the destination's queue is
    /// full (backpressure), then returns a [`Receipt`] that resolves on acknowledgement.
    ///
    /// The send is handed to the driver without waiting for its answer: up to
    /// [`EndpointConfig::send_buffer`](crate::endpoint::EndpointConfig::send_buffer) sends may be on
    /// their way to the core at once (more wait for the driver to take them), and sends that
    /// find the destination full on arrival wait in the driver, in order, until it has room.
    /// The rare refusal found only then (too many destinations, or a close racing the send)
    /// resolves the receipt with [`ReceiptError::Refused`](crate::endpoint::ReceiptError::Refused). A destination with no known
    /// address is refused at once with [`Error::UnknownPeer`].
    ///
    /// # Cancel safety
    /// Cancel safe: the message is handed over without any wait after the last await point,
    /// so a `send` dropped before it returned sent nothing, and one that returned its
    /// receipt sent the message (dropping the receipt does not cancel it).
    pub async fn send(&self, to: NodeId, payload: impl Into<Bytes>) -> Result<Receipt, Error> {
        let deadline = self.default_deadline_at();
        match self.try_send_message(to, payload.into(), deadline) {
            Ok(handed) => handed,
            Err(given_back) => self.hand_over_with_room(to, given_back, deadline).await,
        }
    }

    /// The steps of [`send`](Self::send) and [`send_within`](Self::send_within) that do
    /// not wait, inline in their futures (not a future inside each: every send moves its
    /// payload and receipt through one future fewer), the shard looked up once: the
    /// checks, then [`try_hand_over`](Self::try_hand_over) of the message in its envelope.
    #[inline]
    fn try_send_message(
        &self,
        to: NodeId,
        payload: Bytes,
        deadline: Option<std::time::Instant>,
    ) -> Result<Result<Receipt, Error>, (Payload, Reply)> {
        let shard = self.shard(to);
        if let Err(e) = self.check_in(shard, to, payload.len()) {
            return Ok(Err(e));
        }
        let payload = Envelope::message(payload);
        self.try_hand_over(shard, to, payload, Reply::None, deadline)
    }

    /// Like [`send`](Self::send), with a deadline `within` from now (instead of
    /// [`EndpointConfig::default_deadline`](crate::endpoint::EndpointConfig::default_deadline)): if the
    /// message is not acknowledged by then, the endpoint gives it up and the receipt
    /// resolves with [`ReceiptError::NotDelivered`](crate::endpoint::ReceiptError::NotDelivered) when no copy of it ever left (certain),
    /// or [`ReceiptError::InDoubt`](crate::endpoint::ReceiptError::InDoubt) when one did (it may still arrive, at most once).
    /// A `within` past what the clock can represent (`Duration::MAX`) is no deadline.
    ///
    /// # Cancel safety
    /// As [`send`](Self::send).
    pub async fn send_within(
        &self,
        to: NodeId,
        payload: impl Into<Bytes>,
        within: Duration,
    ) -> Result<Receipt, Error> {
        let deadline = deadline_in(within);
        match self.try_send_message(to, payload.into(), deadline) {
            Ok(handed) => handed,
            Err(given_back) => self.hand_over_with_room(to, given_back, deadline).await,
        }
    }

    /// The deadline of sends that give none.
    #[cfg(feature = "serde")]
    pub(crate) fn default_deadline(&self) -> Option<Duration> {
        self.first().shared.default_deadline()
    }

    /// When a send made now that gives no deadline is given up, if ever.
    #[inline]
    fn default_deadline_at(&self) -> Option<std::time::Instant> {
        self.first().shared.default_deadline().and_then(deadline_in)
    }

    /// The deadline of sends that give none (any build).
    pub(crate) fn default_deadline_any(&self) -> Option<Duration> {
        self.first().shared.default_deadline()
    }

    /// The application dropped stream `id` with `peer` (`mine`: opened here): its receiving
    /// state at the driver goes (ignored once the driver stopped).
    pub(crate) fn forget_stream(&self, peer: NodeId, id: u64, mine: bool) {
        let forget = Command::ForgetStream { peer, id, mine };
        let _ = self.shard(peer).cmds.send(forget);
    }

    /// The sending end of ordered channel `number` to node `to` (see [`Channel`]): its
    /// messages reach `to`'s application in the order sent. Every value for the same
    /// destination and number shares one numbering. Errors: [`Error::UnknownPeer`],
    /// [`Error::Closed`], sending to this endpoint itself, or (durable mode, a new
    /// channel) [`Error::TooManyFlows`].
    ///
    /// [`Channel`]: crate::endpoint::Channel
    pub fn channel(&self, to: NodeId, number: u16) -> Result<crate::endpoint::Channel, Error> {
        self.check_len(to, 0)?;
        let shard = self.shard(to);
        let ordered = &self.ordered;
        let out = ordered.channel(to, number, || {
            FlowOut::new(
                to,
                crate::envelope::Flow::Channel(number),
                ordered.run(),
                ordered.config().channel(),
                ordered.advertises(),
                Box::new(shard.cmds.downgrade()),
                self.first().shared.clone(),
                None,
            )
        })?;
        Ok(crate::endpoint::Channel::new(self.clone(), out, number))
    }

    /// Durable mode: makes again the channels recovered at bind, so they go on at once
    /// (their recovered messages' verdicts, the gaps of those given up).
    pub(crate) fn resume_channels(&self) {
        for (to, n) in self.ordered.resumed_channels() {
            let _ = self.channel(to, n);
        }
    }

    /// Durable mode: the streams made again at bind, for the application.
    pub(crate) fn streams_of(
        &self,
        parts: Vec<crate::endpoint::flows::resume::StreamParts>,
    ) -> Vec<crate::endpoint::Stream> {
        let stream = |p: crate::endpoint::flows::resume::StreamParts| {
            let (peer, id, mine) = p.key;
            crate::endpoint::Stream::new(self.clone(), peer, id, mine, p.out, p.inbox)
        };
        parts.into_iter().map(stream).collect()
    }

    /// Opens a byte stream to node `to` (see [`Stream`]). The peer learns of it at once
    /// (from [`accept_stream`](crate::endpoint::Endpoint::accept_stream)), before anything is
    /// written. Errors: [`Error::UnknownPeer`], [`Error::Closed`], opening one to this
    /// endpoint itself, or (durable mode) [`Error::TooManyFlows`].
    ///
    /// [`Stream`]: crate::endpoint::Stream
    pub fn open_stream(&self, to: NodeId) -> Result<crate::endpoint::Stream, Error> {
        self.check_len(to, 0)?;
        let shard = self.shard(to);
        let ordered = &self.ordered;
        let id = ordered.next_stream();
        let slots = crate::endpoint::flows::positions::stream_slots((to, id, true));
        ordered.reserve_marks(&slots)?;
        let inbox = Arc::new(ordered.stream_in(shard.shared.clone()));
        let out = FlowOut::new(
            to,
            crate::envelope::Flow::Stream {
                id,
                opener_sent: true,
            },
            ordered.run(),
            ordered.config().stream(),
            ordered.advertises(),
            Box::new(shard.cmds.downgrade()),
            self.first().shared.clone(),
            Some((
                ordered.stream_out(shard.shared.max_payload()),
                inbox.clone(),
            )),
        );
        let out = Arc::new(ordered.stream_out_durable(out, (to, id, true)));
        let open = Command::OpenStream {
            peer: to,
            id,
            out: out.clone(),
            inbox: inbox.clone(),
        };
        let closed = || {
            ordered.release_marks(&slots);
            Error::Closed
        };
        shard.cmds.send(open).map_err(|_| closed())?;
        out.open().map_err(|_| closed())?;
        Ok(crate::endpoint::Stream::new(
            self.clone(),
            to,
            id,
            true,
            out,
            inbox,
        ))
    }

    /// Sends a plain message already in its envelope. Handed over at once when the
    /// destination has room and the credits are at hand (no future polled for either),
    /// else once they are.
    #[cfg(feature = "serde")]
    pub(crate) async fn send_sealed(
        &self,
        to: NodeId,
        payload: Payload,
        within: Option<Duration>,
    ) -> Result<Receipt, Error> {
        let deadline = within.and_then(deadline_in);
        let reply = Reply::None;
        match self.try_hand_over(self.shard(to), to, payload, reply, deadline) {
            Ok(handed) => handed,
            Err(given_back) => self.hand_over_with_room(to, given_back, deadline).await,
        }
    }

    /// [`hand_over`](Self::hand_over) without waiting: `Err` gives the message back when the
    /// destination's queue is full or too few send credits are left.
    #[inline]
    fn try_hand_over(
        &self,
        shard: &ShardLink,
        to: NodeId,
        payload: Payload,
        reply: Reply,
        deadline: Option<std::time::Instant>,
    ) -> Result<Result<Receipt, Error>, (Payload, Reply)> {
        // A closure, not the method's name: its call is inlined with it (a method passed as
        // a function went through a call of its own, its arguments spilled).
        let hand = |h: &Self, s: &ShardLink, to, p, r, d| h.hand_over_in(s, to, p, r, d);
        self.try_hand_over_as(shard, to, (payload, reply), deadline, hand)
    }

    /// [`try_hand_over`](Self::try_hand_over), the message handed over by `hand` (with its
    /// receipt, or its verdict going elsewhere) once the room and credits are there.
    #[inline]
    fn try_hand_over_as<T>(
        &self,
        shard: &ShardLink,
        to: NodeId,
        (payload, reply): (Payload, Reply),
        deadline: Option<std::time::Instant>,
        hand: impl FnOnce(&Self, &ShardLink, NodeId, Payload, Reply, Deadline) -> Result<T, Error>,
    ) -> Result<Result<T, Error>, (Payload, Reply)> {
        let shared = &shard.shared;
        if shared.is_closing() {
            return Ok(Err(Error::Closed));
        }
        if shared.is_blocked(to) {
            return Err((payload, reply));
        }
        match shared.try_take_credits(shared.credit_weight(payload.len())) {
            Some(true) => Ok(hand(self, shard, to, payload, reply, deadline)),
            Some(false) => Ok(Err(Error::Closed)),
            None => Err((payload, reply)),
        }
    }

    /// [`hand_over`](Self::hand_over) of the message [`try_hand_over`](Self::try_hand_over)
    /// gave back, once the destination has room and the send credits are taken. (Its
    /// future is [`hand_over_with_room_as`](Self::hand_over_with_room_as)'s itself, not one
    /// around it: a send's future stays as small as before.)
    fn hand_over_with_room(
        &self,
        to: NodeId,
        given_back: (Payload, Reply),
        deadline: Option<std::time::Instant>,
    ) -> impl std::future::Future<Output = Result<Receipt, Error>> + '_ {
        self.hand_over_with_room_as(to, given_back, deadline, Self::hand_over_in)
    }

    /// [`hand_over_with_room`](Self::hand_over_with_room), the message handed over by
    /// `hand`, as [`try_hand_over_as`](Self::try_hand_over_as).
    async fn hand_over_with_room_as<T>(
        &self,
        to: NodeId,
        (payload, reply): (Payload, Reply),
        deadline: Option<std::time::Instant>,
        hand: impl FnOnce(&Self, &ShardLink, NodeId, Payload, Reply, Deadline) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let shard = self.shard(to);
        shard.shared.wait_for_room(to).await;
        if shard.shared.is_closing() {
            return Err(Error::Closed);
        }
        let weight = shard.shared.credit_weight(payload.len());
        if !shard.shared.take_credits(weight).await {
            return Err(Error::Closed);
        }
        hand(self, shard, to, payload, reply, deadline)
    }

    /// Sends call `call`'s request `payload` to node `to`, given up at `deadline` (none:
    /// kept until it has a verdict), as a message is sent, its verdict going to the call
    /// (no receipt: the call's future learns the verdict beside its reply).
    pub(crate) async fn send_request(
        &self,
        to: NodeId,
        payload: Payload,
        deadline: Deadline,
        call: &CallGuard,
    ) -> Result<(), Error> {
        let message = (payload, Reply::Request(call.id()));
        let hand = |h: &Self, shard: &ShardLink, to, payload, reply, deadline| {
            let id = h.first().shared.next_ids(1);
            let ack = Ack::Call(call.ack());
            let out = Outgoing::send(to, payload, id, ack, reply, deadline, None);
            shard
                .cmds
                .send(Command::Send(out))
                .map_err(|_| Error::Closed)
        };
        match self.try_hand_over_as(self.shard(to), to, message, deadline, hand) {
            Ok(handed) => handed,
            Err(given_back) => {
                self.hand_over_with_room_as(to, given_back, deadline, hand)
                    .await
            }
        }
    }

    /// Sends every payload of `payloads` to node `to`, exactly once each, in one hand-over
    /// to the driver: one command, one wait for room, and one shared receipt for the whole
    /// batch ([`BatchReceipt`], one allocation and one wake-up however many messages),
    /// where [`send`](Self::send) costs a mailbox push and a receipt per message. The
    /// messages get consecutive ids in the order of the payloads.
    ///
    /// All or nothing up front: if any payload is too large, the destination unknown, or
    /// the endpoint closing, nothing is sent and the error says why. Otherwise it waits, as
    /// `send` does, while the destination's queue is full and for up to
    /// [`send_buffer`](crate::endpoint::EndpointConfig::send_buffer) send credits; the messages then
    /// queue in the driver behind each other (and behind earlier sends) until the core has
    /// room. Each message's verdict means what a [`Receipt`]'s does.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`send`](Self::send): nothing is handed over before the last await
    /// point, and everything is once the call returns.
    pub async fn send_batch<I>(&self, to: NodeId, payloads: I) -> Result<BatchReceipt, Error>
    where
        I: IntoIterator,
        I::Item: Into<Bytes>,
    {
        self.batch(to, payloads, None).await
    }

    /// Durable mode: [`send_batch`](Self::send_batch) with keys, the `i`-th payload under
    /// key `first_key + i`, as [`send_keyed`](Self::send_keyed) sends one: an outbox's rows
    /// in key order, in one hand-over. A message whose key is not above the highest
    /// accepted for `to` is refused on its own (its verdict in the [`BatchReceipt`] is
    /// [`ReceiptError::Refused`](crate::endpoint::ReceiptError::Refused) with
    /// [`SendError::KeyNotAbove`](crate::proto::SendError::KeyNotAbove)); the others are
    /// sent. So a batch of rows sent again after a crash sends exactly those exon had not
    /// accepted. Errors as `send_batch`, plus
    /// [`SendError::NotDurable`](crate::proto::SendError::NotDurable) and
    /// [`SendError::KeysExhausted`](crate::proto::SendError::KeysExhausted).
    ///
    /// # Cancel safety
    /// As [`send_batch`](Self::send_batch).
    pub async fn send_keyed_batch<I>(
        &self,
        to: NodeId,
        first_key: u64,
        payloads: I,
    ) -> Result<BatchReceipt, Error>
    where
        I: IntoIterator,
        I::Item: Into<Bytes>,
    {
        self.batch(to, payloads, Some(first_key)).await
    }

    /// [`send_batch`](Self::send_batch), keyed from `first_key` if given.
    async fn batch<I>(
        &self,
        to: NodeId,
        payloads: I,
        first_key: Option<u64>,
    ) -> Result<BatchReceipt, Error>
    where
        I: IntoIterator,
        I::Item: Into<Bytes>,
    {
        let within = self.first().shared.default_deadline();
        let deadline = within.and_then(deadline_in);
        let payloads: Vec<Bytes> = payloads.into_iter().map(Into::into).collect();
        if let Some(k) = first_key {
            if !self.first().shared.is_durable() {
                return Err(SendError::NotDurable.into());
            }
            if k.checked_add(payloads.len() as u64).is_none() {
                return Err(SendError::KeysExhausted.into());
            }
        }
        for p in &payloads {
            self.check(to, p)?;
        }
        if payloads.is_empty() {
            self.check(to, &Bytes::new())?;
        }
        let payloads: Vec<Payload> = payloads.into_iter().map(Envelope::message).collect();
        let shard = self.shard(to);
        shard.shared.wait_for_room(to).await;
        if shard.shared.is_closing() {
            return Err(Error::Closed);
        }
        // One credit per message, at most the whole buffer (a larger batch waits for all of
        // it and is taken by the driver in one command).
        let credits = payloads
            .iter()
            .map(|p| shard.shared.credit_weight(p.len()) as usize)
            .sum::<usize>()
            .clamp(1, shard.shared.send_buffer());
        if !shard.shared.take_credits(credits as u32).await {
            return Err(Error::Closed);
        }
        let first = self.first().shared.next_ids(payloads.len() as u64);
        let (receipt, slots) = receipts::batch(to, first, payloads.len());
        let messages = payloads
            .into_iter()
            .zip(slots)
            .enumerate()
            .map(|(i, (payload, slot))| {
                let id = MsgId(first.0 + i as u64);
                Outgoing::send(
                    to,
                    payload,
                    id,
                    Ack::Batch(slot),
                    first_key.map_or(Reply::None, |k| Reply::KeyedBatch(k + i as u64)),
                    deadline,
                    None,
                )
            })
            .collect();
        shard
            .cmds
            .send(Command::SendBatch { messages, credits })
            .map_err(|_| Error::Closed)?;
        Ok(receipt)
    }

    /// Like [`send`](Self::send) but fails at once with
    /// [`SendError::QueueFull`](crate::proto::SendError::QueueFull) instead of waiting for
    /// queue space (it still awaits the driver's answer, which never waits on the network).
    ///
    /// # Cancel safety
    /// Not cancel safe: the message is handed over before the driver's answer is awaited, so
    /// a `try_send` dropped while waiting may still have sent it (with nobody holding its
    /// receipt). Use [`send`](Self::send) where cancellation matters.
    pub async fn try_send(&self, to: NodeId, payload: impl Into<Bytes>) -> Result<Receipt, Error> {
        let payload = payload.into();
        self.check(to, &payload)?;
        let payload = Envelope::message(payload);
        let (reply, answer) = oneshot::channel();
        let receipt = self.hand_over(to, payload, Reply::Try(reply), self.default_deadline_at())?;
        answer.await.map_err(|_| Error::Closed)??;
        Ok(receipt)
    }

    /// Durable mode: like [`send`](Self::send), under the application's `key` for the
    /// message (an outbox row's id, a sequence number), exactly once from the application's
    /// store: keys grow per destination, the journal keeps the highest key accepted for `to`,
    /// and a key not above it is refused with
    /// [`SendError::KeyNotAbove`](crate::proto::SendError::KeyNotAbove), across crashes and
    /// restarts, with no window. So an application that, after a crash, sends again every
    /// outbox row it holds no verdict for never makes a duplicate: a row whose message was
    /// accepted before the crash is refused (if it was not resolved, its message is among
    /// [`Endpoint::take_recovered`](crate::endpoint::Endpoint::take_recovered), with its
    /// key, and its verdict comes on that receipt), one that was not is accepted now. Keys
    /// out of order are refused the same way, never dropped silently. See
    /// `docs/durability.md`, "Exactly once from an outbox".
    ///
    /// Awaits the driver's answer (a full queue makes it wait, as `send` does), so the key
    /// is accepted or refused when this returns. Errors as `send`, plus
    /// [`SendError::KeyNotAbove`](crate::proto::SendError::KeyNotAbove), and
    /// [`SendError::NotDurable`](crate::proto::SendError::NotDurable) on an endpoint that is
    /// not durable.
    ///
    /// # Cancel safety
    /// Not cancel safe, and safe to retry: a `send_keyed` dropped while waiting may have
    /// sent the message; sending the same key again is then refused, never duplicated.
    pub async fn send_keyed(
        &self,
        to: NodeId,
        key: u64,
        payload: impl Into<Bytes>,
    ) -> Result<Receipt, Error> {
        let payload = payload.into();
        self.check(to, &payload)?;
        if !self.first().shared.is_durable() {
            return Err(SendError::NotDurable.into());
        }
        let (reply, answer) = oneshot::channel();
        let keyed = Reply::Keyed(Box::new((reply, key)));
        let deadline = self.default_deadline_at();
        let receipt = self.hand_over(to, Envelope::message(payload), keyed, deadline)?;
        answer.await.map_err(|_| Error::Closed)??;
        Ok(receipt)
    }

    /// The refusals decided without the driver (for the application's bytes, before the
    /// envelope).
    pub(crate) fn check(&self, to: NodeId, payload: &Bytes) -> Result<(), Error> {
        self.check_len(to, payload.len())
    }

    /// [`check`](Self::check) for an application payload of `len` bytes.
    pub(crate) fn check_len(&self, to: NodeId, len: usize) -> Result<(), Error> {
        self.check_in(self.shard(to), to, len)
    }

    /// [`check_len`](Self::check_len) with `to`'s shard looked up already.
    #[inline]
    fn check_in(&self, shard: &ShardLink, to: NodeId, len: usize) -> Result<(), Error> {
        let shared = &shard.shared;
        if shared.is_closing() {
            return Err(Error::Closed);
        }
        if to == self.id {
            return Err(SendError::ToSelf.into());
        }
        if !shared.is_known(to) {
            return Err(Error::UnknownPeer(to));
        }
        // The core has room for the envelope above this (`with_envelope_room`).
        let max = shared.max_payload();
        if len > max {
            return Err(SendError::PayloadTooLarge { len, max }.into());
        }
        Ok(())
    }

    /// Gives the message an id and hands it to the driver.
    fn hand_over(
        &self,
        to: NodeId,
        payload: Payload,
        reply: Reply,
        deadline: Option<std::time::Instant>,
    ) -> Result<Receipt, Error> {
        self.hand_over_in(self.shard(to), to, payload, reply, deadline)
    }

    /// [`hand_over`](Self::hand_over) to `to`'s shard `shard`. Inline: a send's payload
    /// and receipt are built where its future keeps them, not moved through a call.
    #[inline(always)]
    fn hand_over_in(
        &self,
        shard: &ShardLink,
        to: NodeId,
        payload: Payload,
        reply: Reply,
        deadline: Option<std::time::Instant>,
    ) -> Result<Receipt, Error> {
        let (rx, ack) = shard.receipts.open();
        let id = self.first().shared.next_ids(1);
        let (stored_tx, stored) = if self.first().shared.is_durable() {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let out = Outgoing::send(to, payload, id, Ack::Slot(ack), reply, deadline, stored_tx);
        shard
            .cmds
            .send(Command::Send(out))
            .map_err(|_| Error::Closed)?;
        Ok(Receipt::new(id, to, rx, stored))
    }

    /// Gives `messages` fresh consecutive ids, in their order, in one atomic step.
    fn give_ids(&self, messages: &mut [Outgoing]) {
        let first = self.first().shared.next_ids(messages.len() as u64);
        for (i, m) in messages.iter_mut().enumerate() {
            m.set_id(MsgId(first.0 + i as u64));
        }
    }

    /// Sets (or replaces) the address of node `id`. Addresses are also learned from valid
    /// datagrams, so a peer that changes address keeps being reached.
    ///
    /// An IPv4-mapped address (`::ffff:a.b.c.d`) is the IPv4 address. An address the
    /// endpoint's socket cannot send to (an IPv6 address on an IPv4 socket, an IPv4 one on
    /// an IPv6-only socket: see [`reach`](Self::reach)) is refused with a warning, and the
    /// peer's address stays what it was; [`try_add_peer`](Self::try_add_peer) returns the
    /// error instead.
    pub fn add_peer(&self, id: NodeId, addr: SocketAddr) {
        // A closed endpoint sends nothing anyway: only a refused address is worth a word.
        if let Err(e @ Error::OutOfReach { .. }) = self.try_add_peer(id, addr) {
            peer_span(id).in_scope(|| tracing::warn!(error = %e, "peer address refused"));
        }
    }

    /// Keeps this endpoint reachable by peer `id` while the two are quiet (`on`), or stops
    /// (`!on`): whenever nothing has come from `id` for a second, then two, four and every
    /// eight seconds, the endpoint sends it a keepalive (a datagram holding PING alone,
    /// `docs/wire.md`). A NAT in front of this endpoint then keeps its mapping, and if it
    /// moves the endpoint anyway, `id` learns the new address from the next keepalive. For
    /// an endpoint behind a NAT that receives messages or channels `id` sends it unasked
    /// (pushes): without keepalives, what `id` sends after the NAT forgot or moved this
    /// endpoint goes to the old address until this endpoint sends `id` something. Calls
    /// and streams need no such word: a caller pings the server its calls wait for, and a
    /// stream's reader its writer, on their own. One keepalive per silence of the peer, so
    /// one datagram every eight seconds at most while both are idle. [`Error::Closed`] once
    /// the endpoint has stopped.
    pub fn keep_reachable(&self, id: NodeId, on: bool) -> Result<(), Error> {
        self.shard(id)
            .cmds
            .send(Command::KeepReachable(id, on))
            .map_err(|_| Error::Closed)
    }

    /// [`add_peer`](Self::add_peer), saying why an address was refused:
    /// [`Error::OutOfReach`] for an address of a family the endpoint's socket cannot send
    /// to, [`Error::Closed`] once the endpoint has stopped.
    pub fn try_add_peer(&self, id: NodeId, addr: SocketAddr) -> Result<(), Error> {
        if !self.reach.reaches(addr) {
            return Err(Error::OutOfReach {
                addr,
                reach: self.reach,
            });
        }
        let shard = self.shard(id);
        shard.shared.know(id);
        shard
            .cmds
            .send(Command::AddPeer(id, addr))
            .map_err(|_| Error::Closed)
    }

    /// Adds (or replaces) the public key of node `id` in the endpoint's keyring, so that
    /// datagrams from it are accepted and messages to it can be sealed. No effect in
    /// plaintext mode. A new member is refused when the keyring holds
    /// [`Config::keys.max_keyring_size`](crate::proto::KeyConfig::max_keyring_size) peers already
    /// ([`Error::KeyringFull`]); [`Error::Closed`] once the endpoint is closed.
    pub async fn add_peer_key(&self, id: NodeId, key: PublicKey) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        self.shard(id)
            .cmds
            .send(Command::AddPeerKey(id, key, tx))
            .map_err(|_| Error::Closed)?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(crate::proto::crypto::KeyringError::Full { max })) => {
                Err(Error::KeyringFull { max })
            }
            Ok(Err(_)) | Err(_) => Err(Error::Closed),
        }
    }

    /// The peers this endpoint has an address for (set with [`add_peer`](Self::add_peer),
    /// or learned from their datagrams), in increasing id order.
    pub fn peers(&self) -> Vec<NodeId> {
        let mut all: Vec<NodeId> = self
            .shards
            .iter()
            .flat_map(|s| s.shared.known_peers())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Whether `peer` is reachable as far as this endpoint knows: false once messages to it
    /// waited [`Config::timers.unreachable_after`](crate::proto::TimerConfig::unreachable_after) without
    /// any datagram from it, true again at its next datagram. Being unreachable drops
    /// nothing: messages are retried until acknowledged or their deadline passes.
    pub fn is_reachable(&self, peer: NodeId) -> bool {
        !self.first().shared.is_unreachable(peer)
    }

    /// A watch of the peers currently unreachable (see [`is_reachable`](Self::is_reachable)):
    /// `changed().await` on it wakes at every change.
    pub fn unreachable_peers(&self) -> tokio::sync::watch::Receiver<BTreeSet<NodeId>> {
        self.first().shared.watch_unreachable()
    }

    /// The counters, or `None` if the endpoint has stopped.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only reads counters, and a cancelled call changes
    /// nothing.
    pub async fn stats(&self) -> Option<EndpointStats> {
        let mut asked = Vec::with_capacity(self.shards.len());
        for shard in self.shards.iter() {
            let (tx, rx) = oneshot::channel();
            shard.cmds.send(Command::Stats(tx)).ok()?;
            asked.push(rx);
        }
        let mut total = EndpointStats::default();
        for rx in asked {
            total.merge(&rx.await.ok()?);
        }
        Some(total)
    }

    /// Durable mode: settles `to`'s keys after the journal forgot some
    /// ([`SendError::KeysForgotten`](crate::proto::SendError::KeysForgotten): it was found
    /// damaged, or is new for an endpoint that ran before). Keys up to `floor` then count as
    /// accepted for `to` (sent again, they are refused with
    /// [`SendError::KeyNotAbove`](crate::proto::SendError::KeyNotAbove)) and
    /// [`send_keyed`](Self::send_keyed) to `to` above them goes again. Choose `floor` from
    /// what the application knows: the highest key its receiver's effects hold, or the
    /// highest it ever sent, taking the rows with no verdict as in doubt. The settlement is
    /// journalled before any keyed send after it (`docs/durability.md`, "Exactly once from
    /// an outbox"). On a journal that forgot nothing it only raises `to`'s floor.
    ///
    /// Fails with [`SendError::NotDurable`](crate::proto::SendError::NotDurable) on an
    /// endpoint that is not durable, or [`Error::Closed`].
    ///
    /// # Cancel safety
    /// Cancel safe and safe to retry: settling twice with one floor is settling once.
    pub async fn settle_keys(&self, to: NodeId, floor: u64) -> Result<(), Error> {
        let (reply, answer) = oneshot::channel();
        self.shard(to)
            .cmds
            .send(Command::SettleKeys { to, floor, reply })
            .map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)??;
        Ok(())
    }

    /// What this endpoint knows of the path to `peer`: RTT and its variation, congestion
    /// window, bytes in flight, pacing rate, bandwidth estimate, datagram size, slots held
    /// ([`PathStats`](crate::proto::PathStats)). `None` when no messages were sent to
    /// `peer` lately (its sender record is gone, or never was) or the endpoint has stopped.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only reads, and a cancelled call changes nothing.
    pub async fn path(&self, peer: NodeId) -> Option<crate::proto::PathStats> {
        let (tx, rx) = oneshot::channel();
        self.shard(peer).cmds.send(Command::Path(peer, tx)).ok()?;
        rx.await.ok().flatten()
    }

    /// Stops accepting sends (waiting senders get [`Error::Closed`]), waits until every
    /// outstanding message is acknowledged or `timeout` passes, stops the endpoint and reports
    /// what was left. Never hangs past `timeout` (plus one driver turn): it does not wait
    /// for the application to take buffered deliveries, which are counted in
    /// [`CloseReport::undelivered`]. Returns an empty report if the endpoint had already
    /// stopped. A `timeout` past what the clock can represent waits as long as it goes.
    ///
    /// # Cancel safety
    /// Cancel safe in the sense that matters: once called, the close goes on (with its
    /// deadline) even if this future is dropped; only the report is lost.
    pub async fn close(&self, timeout: Duration) -> CloseReport {
        // Every shard closes at once (with the same deadline); the report is their sum.
        let mut asked = Vec::with_capacity(self.shards.len());
        for shard in self.shards.iter() {
            let (reply, rx) = oneshot::channel();
            if shard.cmds.send(Command::Close { timeout, reply }).is_ok() {
                asked.push(rx);
            }
        }
        let mut total = CloseReport::default();
        for rx in asked {
            let r = rx.await.unwrap_or_default();
            total.unacknowledged.extend(r.unacknowledged);
            total.undelivered += r.undelivered;
            total.stats.merge(&r.stats);
        }
        total.unacknowledged.sort_by_key(|(_, id)| *id);
        total
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::endpoint::{Endpoint, EndpointConfig};
    use crate::proto::crypto::insecure_test_security;
    use crate::proto::NodeId;

    async fn endpoint(id: NodeId, peers: [NodeId; 2]) -> Endpoint {
        Endpoint::builder(id)
            .security(insecure_test_security(id, peers))
            .config(EndpointConfig::default())
            .bind("127.0.0.1:0")
            .await
            .unwrap()
    }

    /// Replies handed over together take one id each, consecutive, between the ids of the
    /// sends made before and after them.
    #[tokio::test]
    async fn replies_handed_over_together_take_an_id_each() {
        use crate::endpoint::driver::outgoing::Outgoing;
        use crate::envelope::{Envelope, Outcome};
        use crate::proto::DeliveryId;
        let (ia, ib) = (NodeId::from_const(1), NodeId::from_const(2));
        let a = endpoint(ia, [ia, ib]).await;
        a.add_peer(ib, "127.0.0.1:9".parse().unwrap());
        let before = a.send(ib, vec![1u8; 10]).await.unwrap().id();
        let replies: Vec<Outgoing> = (0..3)
            .map(|i| {
                let body = Envelope::reply(i, Outcome::Answered, bytes::Bytes::new());
                a.reply_out(ib, DeliveryId::for_test(ib, i + 1), body)
            })
            .collect();
        let mut numbered: Vec<Outgoing> = (0..3)
            .map(|i| {
                let body = Envelope::reply(i, Outcome::Answered, bytes::Bytes::new());
                a.reply_out(ib, DeliveryId::for_test(ib, i + 4), body)
            })
            .collect();
        a.give_ids(&mut numbered);
        let ids: Vec<u64> = numbered.iter().map(|o| o.id().0).collect();
        assert_eq!(
            ids,
            [1, 2, 3].map(|k| before.0 + k),
            "one id each, in order"
        );
        a.send_replies(replies).unwrap();
        let after = a.send(ib, vec![2u8; 10]).await.unwrap().id();
        assert_eq!(
            after.0,
            before.0 + 7,
            "three ids each time between the two sends"
        );
        a.close(Duration::from_millis(10)).await;
    }

    /// Over a real pair of endpoints, the receipts' slab reuses its cells round after
    /// round, and the cells of receipts dropped unread come back once their messages'
    /// verdicts do: sends cannot make it grow beyond what is outstanding at once.
    #[tokio::test]
    async fn the_receipt_slab_reuses_its_cells_and_dropped_receipts_give_theirs_back() {
        let (ia, ib) = (NodeId::from_const(1), NodeId::from_const(2));
        let a = endpoint(ia, [ia, ib]).await;
        let mut b = endpoint(ib, [ia, ib]).await;
        a.add_peer(ib, b.local_addr());
        const ROUND: usize = 1500;
        let reader = tokio::spawn(async move {
            for _ in 0..3 * ROUND {
                b.recv().await.expect("running");
            }
            b
        });
        let slab = a.shard(ib).receipts.clone();
        let mut sizes = Vec::new();
        for _ in 0..2 {
            let mut receipts = Vec::with_capacity(ROUND);
            for i in 0..ROUND {
                receipts.push(a.send(ib, vec![i as u8; 100]).await.unwrap());
            }
            for r in receipts {
                r.await.expect("acknowledged");
            }
            assert_eq!(slab.in_use(), 0, "every cell given back once read");
            sizes.push(slab.capacity());
        }
        // The slab grows by chunks that double: below twice what is outstanding.
        assert!(
            sizes[0] < 2 * ROUND && sizes[1] == sizes[0],
            "{sizes:?}: cells not reused"
        );
        // Receipts dropped at once: their cells come back with the verdicts.
        for i in 0..ROUND {
            drop(a.send(ib, vec![i as u8; 100]).await.unwrap());
        }
        let b = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("every message delivered")
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while slab.in_use() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} cells of dropped receipts never came back",
                slab.in_use()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            slab.capacity(),
            sizes[0],
            "dropped receipts reuse the cells too"
        );
        a.close(Duration::from_secs(1)).await;
        b.close(Duration::ZERO).await;
    }

    /// A deadline past what the clock can represent is no deadline: the send goes, and is
    /// acknowledged, where adding it to the clock would panic.
    #[tokio::test]
    async fn a_deadline_beyond_the_clock_means_none_and_no_panic() {
        let (ia, ib) = (NodeId::from_const(1), NodeId::from_const(2));
        let a = endpoint(ia, [ia, ib]).await;
        let mut b = endpoint(ib, [ia, ib]).await;
        a.add_peer(ib, b.local_addr());
        let r = a
            .send_within(ib, vec![7u8; 10], Duration::MAX)
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), b.recv()).await;
        assert_eq!(
            &got.expect("delivered").expect("running").payload[..],
            &[7u8; 10]
        );
        let verdict = tokio::time::timeout(Duration::from_secs(10), r).await;
        assert!(matches!(verdict, Ok(Ok(_))), "{verdict:?}");
        a.close(Duration::from_secs(1)).await;
        b.close(Duration::ZERO).await;
    }
}
