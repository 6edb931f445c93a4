//! Byte streams over ordered flows: [`Stream`] is tokio's `AsyncRead` and `AsyncWrite`, so
//! existing protocols (codecs, HTTP, gRPC) run over exon unchanged, and a stream lives
//! through link failures of any length and address changes of either end.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::endpoint::api::handle::Handle;
use crate::endpoint::flows::out::FlowOut;
use crate::endpoint::flows::stream_in::StreamIn;
use crate::proto::NodeId;

/// A reliable, ordered, bidirectional byte stream to one peer, over exon's exactly-once
/// messages ([`Handle::open_stream`], [`Endpoint::accept_stream`](crate::endpoint::Endpoint::accept_stream)).
///
/// * **Bytes**: every byte written is read by the peer once, in order. Writes are buffered
///   and coalesce into chunks of up to
///   [`FlowConfig::stream_chunk`](crate::endpoint::FlowConfig::stream_chunk) bytes (one exon message
///   each); a partial chunk goes at once when nothing is in flight, else when the chunk fills
///   or on `flush` (so small writes coalesce while a chunk is in flight, and a lone write is
///   never held). Writes that never wait still give way to the task's neighbours every
///   256 KiB (a `Pending` that wakes itself at once), so a writer sharing a thread with the
///   endpoint's driver does not hold it back.
/// * **Flow control**: a chunk is acknowledged when the peer's application has read it to
///   its end, and at most [`FlowConfig::stream_window_bytes`](crate::endpoint::FlowConfig) are
///   unacknowledged: a peer that stops reading stops the writer, and holds at most a window.
/// * **Outages**: nothing times out by default. A stream waits out a link failure of any
///   length, and either end may change address (or be reached through another); the
///   application sees a pause. [`set_deadline`](Self::set_deadline) bounds how long a chunk
///   may wait: past it, the stream breaks with `TimedOut` (a peer gone for good).
/// * **Half-close**: `shutdown` (`AsyncWriteExt::shutdown`) sends what is buffered and ends
///   this side's writing; the peer reads to its end (`Ok(0)`) and may go on writing.
///   [`finished`](Self::finished) waits until the peer has read everything written.
/// * **Close**: drop the stream once it is shut down and read to its end. Dropping it
///   earlier aborts it: the peer's reads and writes fail with `ConnectionReset`, and bytes
///   not yet read on either side are dropped (a cancelled transfer).
/// * **Restarts**: on durable endpoints a stream goes on across restarts of either end
///   ([`Endpoint::take_recovered_streams`](crate::endpoint::Endpoint::take_recovered_streams),
///   [`read_offset`](Self::read_offset), [`write_offset`](Self::write_offset); a chunk
///   read to its end counts as read once the application reads again). Otherwise a stream
///   does not survive a restart of either endpoint: the other end's next write or read
///   fails with `ConnectionReset` (or its deadline).
#[derive(Debug)]
pub struct Stream {
    handle: Handle,
    peer: NodeId,
    id: u64,
    /// Whether this endpoint opened it.
    mine: bool,
    out: Arc<FlowOut>,
    inbox: Arc<StreamIn>,
    /// Bytes written since the writing task last gave way ([`YIELD_EVERY`]).
    unyielded: usize,
}

/// Bytes a stream's writes take before the writing task gives way to the others once (a
/// `Pending` that wakes itself): on a runtime of one thread the driver shares it, and a
/// writer that filled a 4 MiB window in one go kept the driver from sending and from reading
/// the acknowledgements meanwhile (about 3 ms at a stream's start on loopback).
const YIELD_EVERY: usize = 256 << 10;

impl Stream {
    pub(crate) fn new(
        handle: Handle,
        peer: NodeId,
        id: u64,
        mine: bool,
        out: Arc<FlowOut>,
        inbox: Arc<StreamIn>,
    ) -> Stream {
        Stream {
            handle,
            peer,
            id,
            mine,
            out,
            inbox,
            unyielded: 0,
        }
    }

    /// The peer.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// The stream's id, in its opener's numbering.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this end opened the stream.
    pub fn is_opener(&self) -> bool {
        self.mine
    }

    /// The bytes of the peer's side before the next byte read: the bytes read so far (on
    /// a stream recovered after a restart, counted from the stream's start: reading goes
    /// on here, after the bytes read and dealt with before the restart).
    pub fn read_offset(&self) -> u64 {
        self.inbox.offset()
    }

    /// The bytes written on this side so far, from the stream's start (on a stream
    /// recovered after a restart: the bytes written and stored before it; the application
    /// writes the rest from there).
    pub fn write_offset(&self) -> u64 {
        self.out.written()
    }

    /// Bounds how long each chunk written from now on may go unacknowledged (unread by the
    /// peer); past it the stream breaks: reads and writes fail with `TimedOut`, and the peer
    /// is told. `None` (the default): no bound, the stream waits out any outage.
    pub fn set_deadline(&self, deadline: Option<Duration>) {
        self.out.set_deadline(deadline);
    }

    /// Waits until the writing side is shut down and the peer has read every byte
    /// written; the stream's error if it broke first.
    pub async fn finished(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| match self.out.poll_done(cx.waker()) {
            Some(r) => Poll::Ready(r.map_err(|b| b.io())),
            None => Poll::Pending,
        })
        .await
    }

    /// Aborts the stream now: the peer's reads and writes fail with `ConnectionReset`.
    pub fn reset(self) {
        // Drop does it.
    }

    /// Whether the stream is shut down and read to its end (dropping it then is a clean
    /// close).
    pub fn is_closed(&self) -> bool {
        self.out.is_finished() && self.inbox.at_end()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.inbox.poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if self.unyielded >= YIELD_EVERY {
            self.unyielded = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        match self.out.write(buf, cx.waker()) {
            Ok(0) => {
                self.unyielded = 0;
                Poll::Pending
            }
            Ok(n) => {
                self.unyielded += n;
                Poll::Ready(Ok(n))
            }
            Err(b) => Poll::Ready(Err(b.io())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.out.flush(cx.waker()) {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => Poll::Pending,
            Err(b) => Poll::Ready(Err(b.io())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.out.finish(cx.waker()) {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => Poll::Pending,
            Err(b) => Poll::Ready(Err(b.io())),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.is_closed() {
            self.out.reset(true);
        }
        self.inbox.drop_reader();
        self.handle.forget_stream(self.peer, self.id, self.mine);
    }
}
