//! The receiving side of one stream: the chunks released in order by the driver, read by
//! the application; a chunk read to its end is taken, which acknowledges it to the writer
//! (so a reader that stops reading stops the writer: the writer's window fills).

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
}

impl StreamIn {
    pub(crate) fn new(shared: Arc<Shared>) -> StreamIn {
        StreamIn {
            shared,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, InState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A chunk released in order (`last`: the peer's final one).
    pub(crate) fn push(&self, body: Bytes, id: DeliveryId, last: bool) {
        let mut st = self.lock();
        if st.dropped || st.reset.is_some() || body.is_empty() {
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
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            front.advance(n);
            read = true;
            if front.is_empty() {
                if let Some((_, id)) = st.chunks.pop_front() {
                    self.shared.ack(id);
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
