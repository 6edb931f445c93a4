//! The endpoint ([`Endpoint`]): its handle and its delivered messages, one stream per
//! driver shard ([`Deliveries`]).

use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

use crate::endpoint::api::handle::Handle;
use crate::endpoint::api::message::Message;
use crate::endpoint::api::shared::Shared;
use crate::endpoint::driver::delivery_queue::DeliveryRx;
use crate::endpoint::flows::at_driver::Accepted;
use crate::endpoint::flows::stream::Stream;
use crate::endpoint::storage::durable::{RecoveredRequest, RecoveredSend, Recovery};

/// An exactly-once messaging endpoint: a node id bound to a datagram socket.
///
/// Build one with [`Endpoint::bind`] or [`Endpoint::builder`]. It dereferences to its
/// [`Handle`] (send, add peers, close); [`recv`](Self::recv) and the
/// [`Stream`](futures_core::Stream) implementation yield delivered messages. Must be created
/// inside a tokio runtime (current-thread or multi-thread), which runs its driver task.
///
/// Dropping every handle and the endpoint lets the driver linger
/// ([`EndpointConfig::linger`](crate::endpoint::EndpointConfig::linger)) to get outstanding messages acknowledged, then stop.
#[derive(Debug)]
pub struct Endpoint {
    handle: Handle,
    /// One delivery stream per shard.
    rx: Vec<Deliveries>,
    /// The stream polled first next time (shards take turns).
    next: usize,
    /// Durable mode: the messages recovered from the journal at bind.
    recovered: Vec<RecoveredSend>,
    /// Durable mode: the requests recovered from the journal at bind, their calls open.
    recovered_calls: Vec<RecoveredRequest>,
    /// Durable mode: the streams made again at bind.
    recovered_streams: Vec<crate::endpoint::Stream>,
    /// Durable mode: the journal was found damaged at bind.
    journal_damaged: bool,
    /// Streams opened by peers.
    accept: mpsc::Receiver<Accepted>,
}

/// The delivered messages of one driver shard: what [`Endpoint::into_deliveries`] splits an
/// endpoint into, so that each shard's messages can be taken by a task of its own (on a
/// multi-thread runtime, one per core). Taking a message acknowledges it as
/// [`Endpoint::recv`] does.
#[derive(Debug)]
pub struct Deliveries {
    rx: DeliveryRx<Message>,
    shared: Arc<Shared>,
    done: bool,
}

impl Deliveries {
    /// The delivered messages of one shard, from its delivery queue.
    pub(crate) fn new(rx: DeliveryRx<Message>, shared: Arc<Shared>) -> Deliveries {
        Deliveries {
            rx,
            shared,
            done: false,
        }
    }

    /// The next message of this shard, or `None` once it has stopped.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Endpoint::recv`].
    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next message of this shard (taken, as with [`recv`](Self::recv)).
    #[inline]
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        if self.done {
            return Poll::Ready(None);
        }
        // Counted as taken before it is moved out: a driver that stopped reported it
        // undelivered, and it is not handed out.
        match self.rx.poll_ready(cx) {
            Poll::Ready(true) if self.take(1) => Poll::Ready(self.rx.pop()),
            Poll::Ready(_) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Deliveries {
    /// Takes up to `limit` messages of this shard at once, appending them to `buf`: waits
    /// for the first, then takes what is already there. Returns how many it took; 0 only
    /// once the shard has stopped (or with `limit` 0). Cheaper per message than
    /// [`recv`](Self::recv) (one count of takes and one wake-up of the driver per call),
    /// with the same meaning: each message taken is acknowledged as taken.
    ///
    /// # Cancel safety
    /// Cancel safe: a call dropped before it returns takes nothing.
    pub async fn recv_many(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        std::future::poll_fn(|cx| self.poll_recv_many(cx, buf, limit)).await
    }

    /// Polls for up to `limit` messages (see [`recv_many`](Self::recv_many)).
    pub fn poll_recv_many(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut Vec<Message>,
        limit: usize,
    ) -> Poll<usize> {
        if self.done || limit == 0 {
            return Poll::Ready(0);
        }
        let before = buf.len();
        match self.rx.poll_recv_many(cx, buf, limit) {
            Poll::Ready(0) => {
                self.done = true;
                Poll::Ready(0)
            }
            Poll::Ready(n) => {
                if self.take(n as u64) {
                    Poll::Ready(n)
                } else {
                    buf.truncate(before);
                    Poll::Ready(0)
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Counts `n` messages just received from the queue as taken; false if the driver
    /// has stopped (they were reported undelivered: they are not handed out, and nothing
    /// more will be).
    fn take(&mut self, n: u64) -> bool {
        if self.shared.take_many(n) {
            return true;
        }
        self.rx.close();
        self.done = true;
        false
    }
}

impl futures_core::Stream for Deliveries {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Endpoint {
    /// An endpoint whose driver shards are started: its handle, one delivery stream per
    /// shard, and what durable mode recovered at bind.
    pub(crate) fn started(
        handle: Handle,
        rx: Vec<Deliveries>,
        (recovered, journal_damaged): (Recovery, bool),
        accept: mpsc::Receiver<Accepted>,
    ) -> Endpoint {
        Endpoint {
            handle,
            rx,
            next: 0,
            recovered: recovered.sends,
            recovered_calls: recovered.calls,
            recovered_streams: recovered.streams,
            journal_damaged,
            accept,
        }
    }

    /// A cloneable handle for sending from other tasks.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// The next delivered message, or `None` once the endpoint has stopped.
    ///
    /// Taking a message is what acknowledges it: its sender's [`Receipt`](crate::endpoint::Receipt) resolves only
    /// after the message left `recv` (or the stream). Messages still in the endpoint's
    /// buffer when it stops are never handed out nor acknowledged: the
    /// [`CloseReport::undelivered`](crate::endpoint::CloseReport::undelivered) count says how many, and their senders see them as
    /// unacknowledged or in doubt, never as acknowledged.
    ///
    /// # Cancel safety
    /// Cancel safe: a `recv` dropped before it returns takes nothing (the message stays
    /// first in the buffer and is not acknowledged).
    pub async fn recv(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next delivered message (what the `Stream` implementation does). A
    /// message returned here counts as taken, as with [`recv`](Self::recv).
    #[inline]
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        let n = self.rx.len();
        if n == 1 {
            // One shard (the default): no turn to keep, no division per message.
            return self.rx[0].poll_recv(cx);
        }
        let mut open = false;
        for k in 0..n {
            let i = (self.next + k) % n;
            match self.rx[i].poll_recv(cx) {
                Poll::Ready(Some(m)) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Some(m));
                }
                Poll::Ready(None) => {}
                Poll::Pending => open = true,
            }
        }
        if open {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    }

    /// Takes up to `limit` delivered messages at once, appending them to `buf` (see
    /// [`Deliveries::recv_many`]): waits for the first, then takes what is already there,
    /// from the shards in turn. Returns how many it took; 0 only once the endpoint has
    /// stopped (or with `limit` 0).
    ///
    /// # Cancel safety
    /// Cancel safe: a call dropped before it returns takes nothing.
    pub async fn recv_many(&mut self, buf: &mut Vec<Message>, limit: usize) -> usize {
        std::future::poll_fn(|cx| {
            let n = self.rx.len();
            let (mut open, mut took) = (false, 0);
            for k in 0..n {
                if took == limit {
                    break;
                }
                let i = (self.next + k) % n;
                match self.rx[i].poll_recv_many(cx, buf, limit - took) {
                    Poll::Ready(0) => {}
                    Poll::Ready(m) => {
                        took += m;
                        self.next = (i + 1) % n;
                        open = true;
                    }
                    Poll::Pending => open = true,
                }
            }
            if took > 0 || !open || limit == 0 {
                Poll::Ready(took)
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Durable mode: the messages recovered from the journal when the endpoint was bound
    /// (accepted before a restart and not acknowledged), each with its payload and a
    /// receipt carrying the stable id ([`Receipt::id`](crate::endpoint::Receipt::id), [`Receipt::stored`](crate::endpoint::Receipt::stored)) it had before
    /// the restart: they are being sent again, and each receipt resolves with the message's
    /// verdict. Also the messages whose verdict the journal stored and had not recorded
    /// as reported before the restart ([`RecoveredSend::settled`]: not sent again, the
    /// receipt resolves with that verdict at once; it may have been reported before the
    /// crash too, the same). Empty after the first call, and on an endpoint that is not
    /// durable. With several driver shards, what every shard's journal recovered (each
    /// message sent again by the shard that owns its destination; two shards may give the
    /// same id to messages to different peers: a message is its destination and its id).
    /// Requests recovered are calls: see
    /// [`take_recovered_calls`](Self::take_recovered_calls).
    pub fn take_recovered(&mut self) -> Vec<RecoveredSend> {
        std::mem::take(&mut self.recovered)
    }

    /// Durable mode: the streams this endpoint had open before a restart, going on
    /// (`docs/channels.md`, "Durable streams"): each resumes where its two sides stood in
    /// the journal. Reading goes on at [`Stream::read_offset`](crate::endpoint::Stream::read_offset)
    /// (the bytes read before the restart and dealt with: a durable stream's bytes count as
    /// read once the application reads again after them); writing at
    /// [`Stream::write_offset`](crate::endpoint::Stream::write_offset) (the bytes written
    /// and stored before the restart: write the rest from there). The peer's end goes on
    /// unchanged. A stream dropped here is aborted, as any stream. Empty after the first
    /// call, and on an endpoint that is not durable.
    pub fn take_recovered_streams(&mut self) -> Vec<crate::endpoint::Stream> {
        std::mem::take(&mut self.recovered_streams)
    }

    /// The requests recovered at bind, their calls open
    /// ([`take_recovered_calls`](Self::take_recovered_calls) hands them out).
    pub(crate) fn take_recovered_requests(&mut self) -> Vec<RecoveredRequest> {
        std::mem::take(&mut self.recovered_calls)
    }

    /// Durable mode: whether the journal was found damaged when the endpoint was bound
    /// (records it had made durable were lost: a bad sector, bit rot). Then every message
    /// recovered from it resolves in doubt ([`ReceiptError::InDoubt`](crate::endpoint::ReceiptError::InDoubt)), tokens of earlier
    /// incarnations are answered DOUBT, and a message the application was told was stored
    /// before the restart that is neither recovered nor resolved is **in doubt**, not
    /// settled: its records may be among those lost. With several driver shards: whether
    /// any shard's journal was (what the others hold is unaffected: each holds other
    /// peers). False on an endpoint that is not durable.
    pub fn journal_damaged(&self) -> bool {
        self.journal_damaged
    }

    /// The next byte stream a peer opened ([`Handle::open_stream`]), or `None` once the
    /// endpoint stopped. Streams opened while nobody accepts wait here (up to
    /// [`FlowConfig::max_streams`](crate::endpoint::FlowConfig::max_streams); more are reset).
    ///
    /// # Cancel safety
    /// Cancel safe: a stream is taken only when this returns it.
    pub async fn accept_stream(&mut self) -> Option<Stream> {
        let a = self.accept.recv().await?;
        Some(Stream::new(
            self.handle.clone(),
            a.peer,
            a.id,
            false,
            a.out,
            a.inbox,
        ))
    }

    /// Splits the endpoint into its handle and one stream of deliveries per driver shard
    /// (one stream unless [`EndpointConfig::shards`](crate::endpoint::EndpointConfig::shards) is above 1), so that each shard's
    /// messages can be taken by its own task.
    pub fn into_deliveries(self) -> (Handle, Vec<Deliveries>) {
        (self.handle, self.rx)
    }
}

impl Deref for Endpoint {
    type Target = Handle;

    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl futures_core::Stream for Endpoint {
    type Item = Message;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        self.get_mut().poll_recv(cx)
    }
}
