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

use crate::endpoint::api::stats::EndpointStats;
use crate::endpoint::io::family::canonical;
use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::io::socket::RecvMeta;
use crate::endpoint::shards::route::{Forward, Route};
use crate::proto::Node;

/// Most receive buffers filled per call.
const RECV_BATCH: usize = 32;
/// Receive buffers split off from, kept for reuse once the parts split off them are gone.
const SPARES: usize = 16;
/// Memory for receive buffers per endpoint (fewer, larger buffers with GRO).
const RECV_MEMORY: usize = 512 * 1024;
/// Received bytes after which a turn of the driver that takes datagrams in slices (the
/// application answers what it is handed: `driver/turns.rs`) ends once it has something for the
/// application (an event of the node): the rest of the batch waits for the next turn,
/// after the driver has handed it over, let the application answer, and sent what both
/// called for. Input with nothing for the application (fragments of a large message,
/// acknowledgements) is taken on in the same turn.
pub(crate) const TURN_BYTES: usize = 16 * 1024;

/// Where received datagrams come from: the socket's batches, and (sharded) the datagrams
/// other shards pass on.
pub(crate) struct Inbound {
    rx: RxBufs,
    /// Receive buffers filled so far: each one's key for the node (`set_receive_buffer`).
    rx_buffers: u64,
    /// The other shards of a sharded endpoint.
    route: Option<Route>,
    /// Buffers of the last batch not yet handed to the node: `next..end`.
    next: usize,
    end: usize,
}

impl Inbound {
    /// Buffers for datagrams of up to `max_datagram` bytes, `segments` per buffer.
    pub(crate) fn new(max_datagram: usize, segments: usize, route: Option<Route>) -> Inbound {
        Inbound {
            rx: RxBufs::new(max_datagram, segments),
            rx_buffers: 0,
            route,
            next: 0,
            end: 0,
        }
    }

    /// Whether buffers of the last batch wait for the node: the socket is read again only
    /// once they are all taken.
    pub(crate) fn has_pending(&self) -> bool {
        self.next < self.end
    }

    /// The two sources to wait on together: the receive buffers, and the queue of
    /// datagrams forwarded by other shards (while any may still send).
    pub(crate) fn sources(&mut self) -> (&mut RxBufs, Option<&mut mpsc::Receiver<Forward>>) {
        (&mut self.rx, self.route.as_mut().and_then(Route::incoming))
    }

    /// A batch from the socket if one is ready now, without waiting (none while buffers of
    /// the last one wait).
    pub(crate) fn recv_now<S: DatagramSocket>(&mut self, socket: &S) -> Option<io::Result<usize>> {
        if self.has_pending() {
            return None;
        }
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

    /// Takes a received batch: its buffers wait for [`take_pending`](Self::take_pending).
    pub(crate) fn on_batch(&mut self, r: io::Result<usize>, stats: &mut EndpointStats) {
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
        (self.next, self.end) = (0, n.min(self.rx.count));
    }

    /// Splits the waiting buffers of the last batch into their datagrams: all of them, or
    /// with `slice` until [`TURN_BYTES`] are taken and the node has an event for the
    /// application. Each datagram goes to `each` (with the node), or to the shard that owns
    /// its source.
    pub(crate) fn take_pending(
        &mut self,
        node: &mut Node,
        stats: &mut EndpointStats,
        each: impl FnMut(&mut Node, &mut EndpointStats, BytesMut, SocketAddr),
        slice: bool,
    ) {
        self.take_some(node, stats, each, |n| slice && n.has_events());
    }

    /// [`take_pending`](Self::take_pending), with `busy` saying when the node has something
    /// for the application.
    fn take_some(
        &mut self,
        node: &mut Node,
        stats: &mut EndpointStats,
        mut each: impl FnMut(&mut Node, &mut EndpointStats, BytesMut, SocketAddr),
        busy: impl Fn(&Node) -> bool,
    ) {
        let mut taken = 0;
        while self.next < self.end && (taken < TURN_BYTES || !busy(node)) {
            let i = self.next;
            self.next += 1;
            let (mut data, m) = self.rx.take(i);
            taken += data.len();
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

    /// A socket with a datagram always ready.
    struct Ready;

    impl DatagramSocket for Ready {
        async fn send_to(&self, buf: &[u8], _: SocketAddr) -> io::Result<usize> {
            Ok(buf.len())
        }

        async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
            Ok((buf.len().min(1), SocketAddr::from(([127, 0, 0, 1], 9))))
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok(SocketAddr::from(([127, 0, 0, 1], 8)))
        }
    }

    /// An inbound side with `n` buffers of `len` bytes received.
    fn batch_of(n: usize, len: usize) -> (Inbound, usize) {
        let mut inbound = Inbound::new(len, 1, None);
        let n = n.min(inbound.rx.count);
        for i in 0..n {
            inbound.rx.bufs[i][..len].fill(i as u8);
            inbound.rx.meta[i] = RecvMeta::single(SocketAddr::from(([127, 0, 0, 1], 9)), len);
        }
        (inbound, n)
    }

    fn node() -> Node {
        use crate::proto::{Config, NodeId, Security};
        Node::new(
            NodeId::from_const(1),
            Security::InsecurePlaintext,
            Config::default(),
            0,
        )
        .unwrap()
    }

    /// A turn takes input until it has something for the application and `TURN_BYTES` are
    /// in; the rest of the batch waits, whole and in order, and the socket is not read
    /// meanwhile. Input with nothing for the application is all taken at once.
    #[test]
    fn a_turn_stops_taking_input_once_it_has_something_for_the_application() {
        let (mut node, mut stats) = (node(), EndpointStats::default());
        let len = TURN_BYTES * 3 / 4;
        let (mut inbound, n) = batch_of(5, len);
        assert_eq!(n, 5, "room for five buffers");
        let mut seen = Vec::new();
        let mut each = |_: &mut Node, _: &mut EndpointStats, d: BytesMut, _| seen.push(d[0]);
        // Busy from the first datagram on: two buffers make TURN_BYTES.
        inbound.on_batch(Ok(n), &mut stats);
        inbound.take_some(&mut node, &mut stats, &mut each, |_| true);
        assert!(inbound.has_pending());
        assert!(
            inbound.recv_now(&Ready).is_none(),
            "no read while buffers wait"
        );
        inbound.take_some(&mut node, &mut stats, &mut each, |_| true);
        inbound.take_some(&mut node, &mut stats, &mut each, |_| true);
        assert!(!inbound.has_pending());
        assert!(
            inbound.recv_now(&Ready).is_some(),
            "read again once all are taken"
        );
        assert_eq!(seen, [0, 1, 2, 3, 4], "every datagram once, in order");
        assert_eq!(stats.recv_calls, 1);
        // Never busy: the whole batch in one turn.
        let (mut inbound, n) = batch_of(5, len);
        let mut count = 0;
        inbound.on_batch(Ok(n), &mut stats);
        inbound.take_some(&mut node, &mut stats, |_, _, _, _| count += 1, |_| false);
        assert_eq!((count, inbound.has_pending()), (5, false));
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
