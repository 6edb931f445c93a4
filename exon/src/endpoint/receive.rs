//! The driver's receive side: buffers filled in batches (each may hold several datagrams
//! coalesced by GRO), split into datagrams for the node, or for the shard that owns their
//! source.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use tokio::sync::mpsc;

use super::family::canonical;
use super::handle::EndpointStats;
use super::route::{Forward, Route};
use super::socket::DatagramSocket;
use super::socket::RecvMeta;
use crate::proto::Node;

/// Most receive buffers filled per call.
const RECV_BATCH: usize = 32;
/// Receive buffers split off from, kept for reuse once the parts split off them are gone.
const SPARES: usize = 16;
/// Memory for receive buffers per endpoint (fewer, larger buffers with GRO).
const RECV_MEMORY: usize = 512 * 1024;

/// Where received datagrams come from: the socket's batches, and (sharded) the datagrams
/// other shards pass on.
pub(crate) struct Inbound {
    rx: RxBufs,
    /// Receive buffers filled so far: each one's key for the node (`set_receive_buffer`).
    rx_buffers: u64,
    /// The other shards of a sharded endpoint.
    route: Option<Route>,
}

impl Inbound {
    /// Buffers for datagrams of up to `max_datagram` bytes, `segments` per buffer.
    pub(crate) fn new(max_datagram: usize, segments: usize, route: Option<Route>) -> Inbound {
        Inbound {
            rx: RxBufs::new(max_datagram, segments),
            rx_buffers: 0,
            route,
        }
    }

    /// The two sources to wait on together: the receive buffers, and the queue of
    /// datagrams forwarded by other shards (while any may still send).
    pub(crate) fn sources(&mut self) -> (&mut RxBufs, Option<&mut mpsc::Receiver<Forward>>) {
        (&mut self.rx, self.route.as_mut().and_then(Route::incoming))
    }

    /// A batch from the socket if one is ready now, without waiting.
    pub(crate) fn recv_now<S: DatagramSocket>(&mut self, socket: &S) -> Option<io::Result<usize>> {
        self.rx.recv_now(socket)
    }

    /// Datagrams another shard forwarded, if some are there now.
    pub(crate) fn try_forwarded(&mut self) -> Option<Forward> {
        self.route.as_mut().and_then(Route::try_incoming)
    }

    /// Every other shard has stopped.
    pub(crate) fn forwarding_closed(&mut self) {
        if let Some(r) = self.route.as_mut() {
            r.close_incoming();
        }
    }

    /// Splits a received batch into its datagrams: each goes to `each` (with the node), or
    /// to the shard that owns its source.
    pub(crate) fn on_batch(
        &mut self,
        r: io::Result<usize>,
        node: &mut Node,
        stats: &mut EndpointStats,
        mut each: impl FnMut(&mut Node, &mut EndpointStats, BytesMut, SocketAddr),
    ) {
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                // ICMP errors (ConnectionRefused and friends) are reported here on some
                // systems: they say nothing reliable, and UDP goes on.
                stats.recv_errors += 1;
                tracing::debug!(error = %e, "socket receive error (ignored)");
                return;
            }
        };
        stats.recv_calls += 1;
        for i in 0..n {
            let (mut data, m) = self.rx.take(i);
            // A datagram split off its receive buffer (not copied) keeps all of it alive
            // while any part is held: the node copies small deliveries out beyond a budget.
            let shared = self.rx.is_shared(data.len());
            self.rx_buffers = self.rx_buffers.wrapping_add(1);
            let size = if shared { self.rx.size() } else { 0 };
            node.set_receive_buffer(self.rx_buffers, size);
            // The one place received addresses enter: an IPv4 peer seen through a
            // dual-stack socket (`::ffff:a.b.c.d`) is its IPv4 address from here on.
            let from = canonical(m.addr);
            let stride = if m.stride == 0 {
                data.len().max(1)
            } else {
                m.stride
            };
            loop {
                // Each datagram is its own (unshared) part of the buffer: a sealed node
                // opens it in place.
                let one = data.split_to(stride.min(data.len()));
                let one = match self.route.as_mut() {
                    Some(route) => route.keep_elsewhere(one, from),
                    None => Some(one),
                };
                if let Some(one) = one {
                    each(node, stats, one, from);
                }
                if data.is_empty() {
                    break;
                }
            }
        }
        if let Some(route) = self.route.as_mut() {
            route.flush(stats);
        }
    }
}

/// The driver's receive buffers: `count` buffers of `size` bytes.
///
/// A buffer filled at least half is not copied: its datagrams go to the node as a part split
/// off the buffer (the payloads delivered from them are slices of it). The buffer then
/// waits among the spares, and its memory is taken back for a later receive once every part
/// is gone; a new buffer is made only when no spare is free. A buffer filled less is copied
/// out (so a small datagram never holds a large buffer's memory: what a sender can make this
/// endpoint hold stays within twice what it sent) and kept.
pub(crate) struct RxBufs {
    /// Each `size` bytes long when ready for a receive; shorter after a split.
    bufs: Vec<BytesMut>,
    /// Buffers split off from, oldest first, at most `SPARES`: each is taken back once the
    /// parts split off it are gone.
    spares: VecDeque<BytesMut>,
    size: usize,
    count: usize,
    meta: [RecvMeta; RECV_BATCH],
}

impl RxBufs {
    /// Buffers for datagrams of at most `max_datagram` bytes, `segments` per buffer. One byte
    /// more than the largest datagram, so that an oversized one shows as such.
    pub(crate) fn new(max_datagram: usize, segments: usize) -> RxBufs {
        let size = (max_datagram * segments.max(1)).clamp(max_datagram + 1, 1 << 16);
        let size = size.max(max_datagram + 1);
        let count = (RECV_MEMORY / size).clamp(1, RECV_BATCH);
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        RxBufs {
            bufs: (0..count).map(|_| BytesMut::zeroed(size)).collect(),
            spares: VecDeque::new(),
            size,
            count,
            meta: [RecvMeta::single(unspecified, 0); RECV_BATCH],
        }
    }

    /// The size of each receive buffer (a datagram handed on may share it with others).
    fn size(&self) -> usize {
        self.size
    }

    /// Makes every buffer `size` bytes long again: one split off from waits among the
    /// spares, and is replaced by the oldest spare no longer in use, or a new buffer.
    fn restore(&mut self) {
        for i in 0..self.bufs.len() {
            if self.bufs[i].len() == self.size {
                continue;
            }
            let mut used = std::mem::take(&mut self.bufs[i]);
            used.clear();
            if self.spares.len() == SPARES {
                // Freed with its last part.
                self.spares.pop_front();
            }
            self.spares.push_back(used);
            let size = self.size;
            let free = self.spares.iter_mut().position(|b| b.try_reclaim(size));
            self.bufs[i] = match free.and_then(|k| self.spares.remove(k)) {
                Some(mut b) => {
                    // SAFETY: every buffer here was made by `BytesMut::zeroed(self.size)`
                    // and only ever shortened by `split_to` and `clear`. `try_reclaim`
                    // (which never allocates) succeeded on it empty, with no other part of
                    // its allocation alive, so it points at the start of that allocation of
                    // `self.size` bytes, all initialised by `zeroed` (and overwritten only
                    // with received bytes since).
                    unsafe { b.set_len(size) };
                    b
                }
                None => BytesMut::zeroed(size),
            };
        }
    }

    /// Receives a batch (cancel safe, as the socket's `recv_batch`).
    pub(crate) async fn recv<S: DatagramSocket>(&mut self, socket: &S) -> io::Result<usize> {
        self.restore();
        let mut chunks = self.bufs.iter_mut();
        let mut bufs: [IoSliceMut<'_>; RECV_BATCH] = std::array::from_fn(|_| {
            IoSliceMut::new(chunks.next().map_or(&mut [][..], |b| &mut b[..]))
        });
        socket
            .recv_batch(&mut bufs[..self.count], &mut self.meta[..self.count])
            .await
    }

    /// A batch if one is ready now, without waiting.
    fn recv_now<S: DatagramSocket>(&mut self, socket: &S) -> Option<io::Result<usize>> {
        let mut fut = pin!(self.recv(socket));
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    /// Whether `take` hands `len` received bytes over as a part of their buffer (shared with
    /// whatever else is split off it) rather than as a copy of their own.
    fn is_shared(&self, len: usize) -> bool {
        len.min(self.size) * 2 >= self.size
    }

    /// The datagrams of buffer `i` in one allocation: split off the buffer if it is at
    /// least half full, else copied.
    fn take(&mut self, i: usize) -> (BytesMut, RecvMeta) {
        let m = self.meta[i];
        let len = m.len.min(self.size);
        if self.is_shared(len) {
            (self.bufs[i].split_to(len), m)
        } else {
            (BytesMut::from(&self.bufs[i][..len]), m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers of 1000 bytes; buffer 0 "received" `len` bytes of `fill`.
    fn received(len: usize, fill: u8) -> RxBufs {
        let mut rx = RxBufs::new(999, 1);
        assert_eq!(rx.size, 1000);
        rx.bufs[0][..len].fill(fill);
        rx.meta[0] = RecvMeta::single(SocketAddr::from(([127, 0, 0, 1], 9)), len);
        rx
    }

    #[test]
    fn a_full_buffer_is_split_off_and_its_memory_taken_back_once_free() {
        let mut rx = received(800, 7);
        let at = rx.bufs[0].as_ptr();
        let (part, _) = rx.take(0);
        assert_eq!(part.as_ptr(), at, "split, not copied");
        assert_eq!(&part[..], &[7; 800][..]);
        drop(part);
        rx.restore();
        assert_eq!(rx.bufs[0].len(), 1000);
        assert_eq!(rx.bufs[0].as_ptr(), at, "the same memory again");
    }

    #[test]
    fn a_buffer_still_in_use_is_replaced_and_its_part_left_intact() {
        let mut rx = received(600, 7);
        let at = rx.bufs[0].as_ptr();
        let (part, _) = rx.take(0);
        rx.restore();
        assert_eq!(rx.bufs[0].len(), 1000);
        assert_ne!(rx.bufs[0].as_ptr(), at);
        rx.bufs[0].fill(9);
        assert_eq!(&part[..], &[7; 600][..]);
        // Once the part is gone, the spare comes back at the next split.
        drop(part);
        rx.bufs[0][..900].fill(1);
        rx.meta[0].len = 900;
        let (second, _) = rx.take(0);
        rx.restore();
        assert_eq!(rx.bufs[0].as_ptr(), at, "the spare, taken back");
        assert_eq!(&second[..], &[1; 900][..]);
        assert_eq!(rx.spares.len(), 1);
    }

    #[test]
    fn spares_are_bounded() {
        let mut rx = received(600, 7);
        let mut held = Vec::new();
        for i in 0..3 * SPARES as u8 {
            rx.bufs[0][..600].fill(i);
            rx.meta[0].len = 600;
            held.push(rx.take(0).0);
            rx.restore();
            assert!(rx.spares.len() <= SPARES);
        }
        // Every part still holds its own bytes: no buffer in use was received into again.
        for (i, p) in held.iter().enumerate() {
            assert_eq!(&p[..], &[i as u8; 600][..]);
        }
    }

    #[test]
    fn a_small_datagram_is_copied_and_the_buffer_kept() {
        let mut rx = received(40, 5);
        let at = rx.bufs[0].as_ptr();
        let (part, _) = rx.take(0);
        assert_ne!(part.as_ptr(), at);
        assert_eq!(&part[..], &[5; 40][..]);
        rx.restore();
        assert_eq!(rx.bufs[0].as_ptr(), at);
        assert_eq!(rx.bufs[0].len(), 1000);
    }
}
