//! The receiving side of one stream: the chunks released in order by the driver, read by
//! the application; a chunk read to its end is taken, which acknowledges it to the writer
//! (so a reader that stops reading stops the writer: the writer's window fills). On a
//! durable endpoint, a chunk read to its end is taken when the application reads again:
//! by then it has done what it does with the bytes, and a restart resumes after them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};

use crate::endpoint::api::shared::Shared;
use crate::endpoint::flows::broken::Broken;
use crate::proto::DeliveryId;

/// A stream's receiving side, shared by the driver (which pushes) and the stream (which
/// reads).
#[derive(Debug)]
pub(crate) struct StreamIn {
    /// The shard of the stream's peer: takes are reported there.
    shared: Arc<Shared>,
    state: Mutex<InState>,
}

#[derive(Debug, Default)]
struct InState {
    chunks: VecDeque<(Bytes, DeliveryId)>,
    /// The peer's last chunk was released: after `chunks`, the end.
    fin: bool,
    reset: Option<Broken>,
    waker: Option<Waker>,
    /// The application dropped the stream: chunks are taken as they come.
    dropped: bool,
    /// Durable mode: chunks read to their end are taken at the next read.
    defer: bool,
    /// Chunks read to their end, not yet taken (durable mode).
    done: Vec<DeliveryId>,
    /// Bytes of the stream before the next byte read (after a restart, from the bytes
    /// taken before it).
    offset: u64,
}

impl StreamIn {
    pub(crate) fn new(shared: Arc<Shared>) -> StreamIn {
        StreamIn {
            shared,
            state: Mutex::default(),
        }
    }

    /// A durable stream's receiving side: chunks read to their end are taken at the next
    /// read; reading goes on at byte `offset`, at the end already if `ended`.
    pub(crate) fn durable(shared: Arc<Shared>, offset: u64, ended: bool) -> StreamIn {
        let st = InState {
            defer: true,
            offset,
            fin: ended,
            ..InState::default()
        };
        StreamIn {
            shared,
            state: Mutex::new(st),
        }
    }

    /// Bytes of the stream before the next byte read.
    pub(crate) fn offset(&self) -> u64 {
        self.lock().offset
    }

    /// Takes the chunks read to their end and not yet taken (durable mode).
    fn take_done(&self, st: &mut InState) {
        for id in st.done.drain(..) {
            self.shared.ack(id);
        }
    }

    fn lock(&self) -> MutexGuard<'_, InState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A chunk released in order (`last`: the peer's final one).
    pub(crate) fn push(&self, body: Bytes, id: DeliveryId, last: bool) {
        let mut st = self.lock();
        // (Durable: an empty chunk behind others waits for its turn, so chunks are taken
        // in order.)
        let queued = st.defer && !(st.chunks.is_empty() && st.done.is_empty());
        if st.dropped || st.reset.is_some() || (body.is_empty() && !queued) {
            // Nobody will read it (or nothing to read): taken now.
            self.shared.ack(id);
        } else {
            st.chunks.push_back((body, id));
        }
        st.fin |= last;
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// The stream is aborted: reads fail, and what was not read is taken.
    pub(crate) fn reset(&self, why: Broken) {
        let mut st = self.lock();
        if st.fin && st.chunks.is_empty() {
            return; // read to its end already: the abort changes nothing here
        }
        if st.reset.is_none() {
            st.reset = Some(why);
        }
        self.take_done(&mut st);
        for (_, id) in st.chunks.drain(..) {
            self.shared.ack(id);
        }
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// The application dropped the stream: what it did not read is taken.
    pub(crate) fn drop_reader(&self) {
        let mut st = self.lock();
        st.dropped = true;
        self.take_done(&mut st);
        for (_, id) in st.chunks.drain(..) {
            self.shared.ack(id);
        }
    }

    /// Whether the peer's end was read.
    pub(crate) fn at_end(&self) -> bool {
        let st = self.lock();
        st.fin && st.chunks.is_empty()
    }

    /// Reads into `buf`: `Ok(0)` at the end, the abort's error once reset.
    pub(crate) fn poll_read(
        &self,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let mut st = self.lock();
        // The application reads again: what it read to the end before is dealt with.
        self.take_done(&mut st);
        if let Some(why) = st.reset {
            return Poll::Ready(Err(why.io()));
        }
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let mut read = false;
        while buf.remaining() > 0 {
            let Some((front, _)) = st.chunks.front_mut() else {
                break;
            };
            if front.is_empty() {
                // An empty chunk queued behind others (durable mode): taken in its turn,
                // at once when every chunk before it is taken (it has no bytes to deal
                // with; and as the stream's end, no read would come after it).
                if let Some((_, id)) = st.chunks.pop_front() {
                    if st.done.is_empty() {
                        self.shared.ack(id);
                    } else {
                        st.done.push(id);
                    }
                }
                continue;
            }
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            front.advance(n);
            let emptied = front.is_empty();
            st.offset += n as u64;
            read = true;
            if emptied {
                if let Some((_, id)) = st.chunks.pop_front() {
                    if st.defer {
                        st.done.push(id);
                    } else {
                        self.shared.ack(id);
                    }
                }
            }
        }
        if read || st.fin {
            return Poll::Ready(Ok(()));
        }
        if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            st.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}
