//! The driver's socket I/O: receive buffers filled in batches (each may hold several
//! datagrams coalesced by GRO), and transmission gathering consecutive datagrams to one
//! address into segmented sends (GSO).

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::BytesMut;

use super::driver::Driver;
use super::peers::{Learned, NoRoute};
use super::trace::{debug_in_peer, peer_span};
use super::{Acker, DatagramSocket, Message, ReceiptError, RecvMeta};
use crate::proto::frame::CookieReply;
use crate::proto::Event;

/// Most receive buffers filled per call.
const RECV_BATCH: usize = 32;
/// Receive buffers split off from, kept for reuse once the parts split off them are gone.
const SPARES: usize = 16;
/// Memory for receive buffers per endpoint (fewer, larger buffers with GRO).
const RECV_MEMORY: usize = 512 * 1024;
/// Largest UDP payload of one segmented send over IPv4 (the whole batch travels as one IP
/// packet until it is segmented).
const MAX_SEGMENTED: usize = 65_507;

/// Whether a send failed because the datagram is larger than the path or the interface
/// carries (EMSGSIZE).
fn is_too_big(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EMSGSIZE)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
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
    pub(crate) fn size(&self) -> usize {
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
    pub(crate) fn recv_now<S: DatagramSocket>(&mut self, socket: &S) -> Option<io::Result<usize>> {
        let mut fut = pin!(self.recv(socket));
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(r) => Some(r),
            Poll::Pending => None,
        }
    }

    /// Whether `take` hands `len` received bytes over as a part of their buffer (shared with
    /// whatever else is split off it) rather than as a copy of their own.
    pub(crate) fn is_shared(&self, len: usize) -> bool {
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

/// Consecutive datagrams to one address, sent as one segmented batch.
#[derive(Default)]
struct Batch {
    addr: Option<SocketAddr>,
    segment: usize,
    count: usize,
    bytes: usize,
    /// The last datagram is shorter than `segment`: nothing can follow it.
    closed: bool,
}

impl Batch {
    fn accepts(&self, addr: SocketAddr, size: usize, max_segments: usize) -> bool {
        self.count == 0
            || (self.addr == Some(addr)
                && !self.closed
                && size <= self.segment
                && self.count < max_segments
                && self.bytes + size <= MAX_SEGMENTED)
    }

    fn push(&mut self, addr: SocketAddr, size: usize) {
        if self.count == 0 {
            *self = Batch {
                addr: Some(addr),
                segment: size,
                ..Batch::default()
            };
        }
        self.closed = size < self.segment;
        self.count += 1;
        self.bytes += size;
    }
}

impl<S: DatagramSocket> Driver<S> {
    /// Handles a received batch: every datagram of every filled buffer.
    pub(crate) fn on_datagrams(&mut self, t: Instant, r: io::Result<usize>) {
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                // ICMP errors (ConnectionRefused and friends) are reported here on some
                // systems: they say nothing reliable, and UDP goes on.
                self.stats.recv_errors += 1;
                tracing::debug!(error = %e, "socket receive error (ignored)");
                return;
            }
        };
        self.stats.recv_calls += 1;
        for i in 0..n {
            let (mut data, m) = self.rx.take(i);
            // A datagram split off its receive buffer (not copied) keeps all of it alive
            // while any part is held: the node copies small deliveries out beyond a budget.
            let shared = self.rx.is_shared(data.len());
            self.rx_buffers = self.rx_buffers.wrapping_add(1);
            let size = if shared { self.rx.size() } else { 0 };
            self.node.set_receive_buffer(self.rx_buffers, size);
            let stride = if m.stride == 0 {
                data.len().max(1)
            } else {
                m.stride
            };
            loop {
                // Each datagram is its own (unshared) part of the buffer: a sealed node
                // opens it in place.
                let one = data.split_to(stride.min(data.len()));
                if let Some(one) = self.forward_elsewhere(one, m.addr) {
                    self.on_datagram(t, one, m.addr);
                }
                if data.is_empty() {
                    break;
                }
            }
        }
        self.flush_forwards();
    }

    pub(crate) fn on_datagram(&mut self, t: Instant, data: BytesMut, from: SocketAddr) {
        let cookies = self.node.is_sealed() && self.node.rules().address_cookies;
        if cookies && CookieReply::is_one(&data) {
            return self.on_cookie_reply(&data, from);
        }
        // Only a datagram the node took whole (and, sealed, authenticated) vouches for its
        // source's address; a sealed peer moves only to an address that answered a
        // challenge sent there.
        let len = data.len();
        let acc = if cookies {
            let seen = self.cookies.look(t, &data, from);
            let busy = self.node.stats().rejects.key_budget;
            let acc = self.node.handle_datagram_vouched(t, data, seen.vouch);
            if self.node.stats().rejects.key_budget > busy {
                // Refused for want of key-agreement budget: under load.
                self.cookies.refused(t, self.node.id(), &seen, from);
            }
            acc
        } else {
            self.node.handle_datagram_buf(t, data)
        };
        let Some(acc) = acc else {
            return;
        };
        let node = &self.node;
        match self.peers.learn(acc, from, len, t, |p| node.has_record(p)) {
            Learned::New => {
                peer_span(acc.from)
                    .in_scope(|| tracing::debug!(addr = %from, "peer address learned"));
                self.stats.address_updates += 1;
                self.shared.know(acc.from);
                // Path validation: until the peer answers from there, the address gets at
                // most three times what came from it.
                let token = self.node.challenge(acc.from);
                self.peers.set_challenge(acc.from, token);
            }
            Learned::Moved => {
                peer_span(acc.from).in_scope(|| {
                    tracing::debug!(addr = %from, "peer moved: the new address answered");
                });
                self.stats.address_updates += 1;
            }
            // Sent by the next flush, to that address alone.
            Learned::Challenge => self.challenges_due.push(acc.from),
            Learned::Full => self.stats.address_book_full += 1,
            Learned::Unchanged => {}
        }
        for p in self.peers.take_pruned() {
            self.shared.forget(p);
        }
    }

    /// A COOKIE_REPLY from `from`: taken when it is for this node, from a peer it sends to
    /// at that very address.
    fn on_cookie_reply(&mut self, data: &[u8], from: SocketAddr) {
        let taken = CookieReply::decode(data).is_ok_and(|r| {
            r.dst == self.node.id()
                && self.peers.get(r.src) == Some(from)
                && self.node.handle_cookie(r.src, r.cookie)
        });
        if taken {
            self.cookies.stats.replies_taken += 1;
        } else {
            self.cookies.stats.replies_dropped += 1;
        }
    }

    /// Sends the COOKIE_REPLYs queued since the last flush (each smaller than the datagram
    /// it answers, within the limits of `cookies.rs`).
    async fn send_cookie_replies(&mut self) {
        let mut buf = Vec::with_capacity(64);
        for (addr, reply) in std::mem::take(&mut self.cookies.queued) {
            buf.clear();
            reply.encode(&mut buf);
            self.stats.send_calls += 1;
            if let Err(e) = self.socket.send_to(&buf, addr).await {
                self.stats.send_errors += 1;
                tracing::debug!(error = %e, %addr, "socket send error (ignored)");
            }
        }
    }

    /// Sends up to the budget of datagrams, gathering consecutive ones to one address into
    /// segmented sends, then takes the node's events. Returns whether datagrams are left.
    pub(crate) async fn flush(&mut self, t: Instant) -> bool {
        if !self.challenges_due.is_empty() {
            self.send_challenges(t).await;
        }
        if !self.cookies.queued.is_empty() {
            self.send_cookie_replies().await;
        }
        let max_segments = self.socket.max_send_segments().max(1);
        let mut batch = Batch::default();
        let mut sent = 0;
        self.tx_buf.clear();
        let mut more = false;
        loop {
            if sent >= self.cfg.transmit_budget {
                more = true;
                break;
            }
            let start = self.tx_buf.len();
            let Some(tx) = self.node.poll_transmit(t, &mut self.tx_buf) else {
                break;
            };
            sent += 1;
            let addr = match self.peers.send_to(tx.destination, tx.size) {
                Ok(addr) => addr,
                Err(why) => {
                    self.tx_buf.truncate(start);
                    if why == NoRoute::Amplification {
                        // Repaired like a loss once the address is validated.
                        self.stats.amplification_drops += 1;
                    } else {
                        self.stats.unknown_peer_drops += 1;
                        tracing::trace!(peer = %tx.destination, "no address: datagram dropped");
                    }
                    continue;
                }
            };
            if !batch.accepts(addr, tx.size, max_segments) {
                self.send_batch(&batch, start).await;
                self.tx_buf.copy_within(start.., 0);
                self.tx_buf.truncate(tx.size);
                batch = Batch::default();
            }
            batch.push(addr, tx.size);
        }
        if batch.count > 0 {
            self.send_batch(&batch, self.tx_buf.len()).await;
        }
        more | self.take_events(t)
    }

    /// Sends the challenges owed to candidate addresses, each to its candidate alone (not
    /// to the address the peer's other datagrams go to: an answer must prove the peer
    /// receives at the candidate), within the anti-amplification limit.
    async fn send_challenges(&mut self, t: Instant) {
        let due = std::mem::take(&mut self.challenges_due);
        for &peer in &due {
            self.tx_buf.clear();
            let made = self.node.poll_challenge(peer, &mut self.tx_buf);
            match self
                .peers
                .challenge_sent(peer, made.map(|(token, tx)| (token, tx.size)), t)
            {
                Ok(addr) => {
                    self.stats.path_challenges += 1;
                    if let Err(e) = self.socket.send_to(&self.tx_buf, addr).await {
                        self.stats.send_errors += 1;
                        tracing::debug!(error = %e, %addr, "socket send error (ignored)");
                    }
                    self.stats.send_calls += 1;
                }
                Err(NoRoute::Amplification) => self.stats.amplification_drops += 1,
                Err(NoRoute::Unknown) => {}
            }
        }
        self.challenges_due = due;
        self.challenges_due.clear();
    }

    /// Sends `tx_buf[..len]`, the datagrams of `batch`.
    async fn send_batch(&mut self, batch: &Batch, len: usize) {
        let Some(addr) = batch.addr else { return };
        let buf = &self.tx_buf[..len];
        let r = if batch.count == 1 {
            self.socket.send_to(buf, addr).await.map(drop)
        } else {
            self.socket.send_segments(buf, batch.segment, addr).await
        };
        self.stats.send_calls += 1;
        if let Err(e) = r {
            if is_too_big(&e) {
                // Larger than the path or interface takes (fragmentation is forbidden): an
                // MTU probe, or a datagram past a path that shrank. Lost, like any
                // datagram: path MTU discovery and retransmission repair it.
                self.stats.oversize_drops += batch.count as u64;
                tracing::trace!(%addr, size = batch.segment, "datagram too large for the path");
                return;
            }
            self.stats.send_errors += 1;
            tracing::debug!(error = %e, %addr, "socket send error (ignored)");
        }
    }

    /// Takes the node's events: deliveries to hand over, acknowledgements to report; then
    /// admits waiting sends. Returns whether any was admitted (it has datagrams to send).
    fn take_events(&mut self, t: Instant) -> bool {
        while let Some(e) = self.node.poll_event() {
            match e {
                Event::Delivered { from, payload, id } => {
                    debug_in_peer(from, || {
                        tracing::debug!(len = payload.len(), "message delivered");
                    });
                    let acker = self
                        .cfg
                        .ack_after_processing
                        .then(|| Acker::new(self.shared.clone(), id));
                    self.pending
                        .push_back((Message::new(from, payload, acker), id));
                }
                Event::Acknowledged { id, to } => {
                    if let Some(u) = self.acks.remove(id) {
                        debug_in_peer(to, || {
                            tracing::debug!(msg = %u.id, "message acknowledged");
                        });
                        u.ack.resolve(Ok(()));
                    }
                }
                Event::PeerUnreachable { peer } => {
                    tracing::warn!(%peer, "peer unreachable");
                    self.shared.set_unreachable(peer, true);
                }
                Event::PeerReachable { peer } => {
                    tracing::info!(%peer, "peer reachable again");
                    self.shared.set_unreachable(peer, false);
                }
                Event::InDoubt { id, to } => {
                    if let Some(suppressed) = self.warnings.in_doubt.allow(t) {
                        tracing::warn!(
                            id = %self.node.id(),
                            peer = %to,
                            suppressed,
                            "receiver lost the message's incarnation: in doubt"
                        );
                    }
                    if let Some(u) = self.acks.remove(id) {
                        debug_in_peer(to, || tracing::debug!(msg = %u.id, "message in doubt"));
                        u.ack.resolve(Err(ReceiptError::InDoubt));
                    }
                }
                Event::NotDelivered { id, to } => {
                    peer_span(to).in_scope(|| {
                        tracing::warn!("message larger than the receiver takes: not delivered");
                    });
                    if let Some(u) = self.acks.remove(id) {
                        u.ack.resolve(Err(ReceiptError::NotDelivered));
                    }
                }
            }
        }
        !self.blocked.is_empty() && self.admit_waiters(t)
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
