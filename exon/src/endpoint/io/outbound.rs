//! The driver's transmit side: datagrams gathered, consecutive ones to one address into
//! segmented sends (GSO), and the challenges and cookie replies that go out on their own.

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use crate::endpoint::api::stats::EndpointStats;
use crate::endpoint::io::family::{IpFamily, Reach};
use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::paths::book::NoRoute;
use crate::endpoint::paths::Paths;
use crate::proto::frame::CookieReply;
use crate::proto::Node;

/// Largest UDP payload of one segmented send (the whole batch travels as one IP packet
/// until it is segmented): IPv4's, the smaller of the two families'.
const MAX_SEGMENTED: usize = IpFamily::V4.max_udp_payload();

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

    /// Whether no datagram of the batch's size can join it any more.
    fn is_full(&self, max_segments: usize) -> bool {
        self.closed || self.count >= max_segments || self.bytes + self.segment > MAX_SEGMENTED
    }
}

/// The datagrams of one drain on their way to the socket.
pub(crate) struct Outbound {
    /// The datagrams of the run being handed over, one after the other: those before
    /// `from` are sent, the batch being gathered starts at `from`.
    buf: Vec<u8>,
    from: usize,
    batch: Batch,
    /// The size of the last datagram pushed (0: none yet), to size the next run.
    last: usize,
    /// Datagrams one segmented send carries at most.
    max_segments: usize,
    /// The peer addresses the socket can send to, and in what form.
    reach: Reach,
}

impl Outbound {
    pub(crate) fn new(max_datagram_size: usize, max_segments: usize, reach: Reach) -> Outbound {
        Outbound {
            buf: Vec::with_capacity(max_datagram_size),
            from: 0,
            batch: Batch::default(),
            last: 0,
            max_segments: max_segments.max(1),
            reach,
        }
    }

    /// `addr` as the socket takes it, or `None` (counted, and reported) when the socket
    /// cannot reach its family: an IPv6 peer from an IPv4 socket, say.
    fn on_wire(&self, stats: &mut EndpointStats, addr: SocketAddr) -> Option<SocketAddr> {
        let wire = self.reach.on_wire(addr);
        if wire.is_none() {
            stats.send_errors += 1;
            tracing::debug!(%addr, reach = %self.reach, "peer address out of the socket's reach");
        }
        wire
    }

    /// Starts gathering datagrams.
    pub(crate) fn begin(&mut self) {
        self.buf.clear();
        self.from = 0;
        self.batch = Batch::default();
    }

    /// Where the node appends the next run of datagrams; returns with the length before
    /// it. What was sent goes first (the batch still open moves to the front: at most one
    /// segmented send's bytes), so the buffer holds one run and one batch at most.
    pub(crate) fn buf(&mut self) -> (usize, &mut Vec<u8>) {
        if self.batch.count == 0 {
            self.buf.clear();
            self.from = 0;
        } else if self.from > 0 {
            self.buf.copy_within(self.from.., 0);
            self.buf.truncate(self.buf.len() - self.from);
            self.from = 0;
        }
        (self.buf.len(), &mut self.buf)
    }

    /// The datagram at `start` (`size` bytes) goes nowhere: it is taken out of the buffer
    /// (datagrams after it move up).
    pub(crate) fn discard(&mut self, start: usize, size: usize) {
        self.buf.drain(start..start + size);
    }

    /// The datagram at `start` (`size` bytes; more of the node's may follow it in the
    /// buffer) goes to `addr`: it joins the batch, or the batch leaves first and it starts
    /// the next; a batch that can take no more leaves at once. Nothing moves in the buffer
    /// (a run of large datagrams was copied forward once per datagram when the batch
    /// before each left: quadratic in the run).
    pub(crate) async fn push<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
        start: usize,
        addr: SocketAddr,
        size: usize,
    ) {
        if !self.batch.accepts(addr, size, self.max_segments) {
            self.send_batch(socket, stats, start).await;
            self.from = start;
            self.batch = Batch::default();
        }
        self.batch.push(addr, size);
        self.last = size;
        if self.batch.is_full(self.max_segments) {
            self.send_batch(socket, stats, start + size).await;
            self.from = start + size;
            self.batch = Batch::default();
        }
    }

    /// Datagrams the next run may hold: what the batch being gathered can still take, and
    /// no more than one segmented send carries of datagrams the size of the last one (a run
    /// of datagrams too large to go together would only wait in the buffer, out of cache).
    pub(crate) fn room(&self) -> usize {
        let left = self.max_segments.saturating_sub(self.batch.count);
        let fit = MAX_SEGMENTED.checked_div(self.last).unwrap_or(usize::MAX);
        left.min(fit).max(1)
    }

    /// Sends the batch gathered last.
    pub(crate) async fn finish<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
    ) {
        if self.batch.count > 0 {
            self.send_batch(socket, stats, self.buf.len()).await;
            self.from = self.buf.len();
            self.batch = Batch::default();
        }
    }

    /// Sends `buf[from..end]`, the datagrams of the batch.
    async fn send_batch<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
        end: usize,
    ) {
        let Some(addr) = self.batch.addr else { return };
        let Some(addr) = self.on_wire(stats, addr) else {
            return;
        };
        let batch = &self.batch;
        let buf = &self.buf[self.from..end];
        let r = if batch.count == 1 {
            socket.send_to(buf, addr).await.map(drop)
        } else {
            socket.send_segments(buf, batch.segment, addr).await
        };
        stats.send_calls += 1;
        if let Err(e) = r {
            if is_too_big(&e) {
                // Larger than the path or interface takes (fragmentation is forbidden): an
                // MTU probe, or a datagram past a path that shrank. Lost, like any
                // datagram: path MTU discovery and retransmission repair it.
                stats.oversize_drops += batch.count as u64;
                tracing::trace!(%addr, size = batch.segment, "datagram too large for the path");
                return;
            }
            stats.send_errors += 1;
            tracing::debug!(error = %e, %addr, "socket send error (ignored)");
        }
    }

    /// Sends the challenges owed to candidate addresses, each to its candidate alone (not
    /// to the address the peer's other datagrams go to: an answer must prove the peer
    /// receives at the candidate), within the anti-amplification limit.
    pub(crate) async fn send_challenges<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
        node: &mut Node,
        paths: &mut Paths,
        t: Instant,
    ) {
        let due = paths.take_challenges();
        for &peer in &due {
            self.buf.clear();
            let made = node.poll_challenge(peer, &mut self.buf);
            let route = paths.challenge_sent(peer, made.map(|(token, tx)| (token, tx.size)), t);
            self.send_challenge(socket, stats, route).await;
        }
        paths.return_challenges(due);
    }

    /// Sends the repeats of first contacts' challenges owed ([`Paths::sending_unvalidated`]),
    /// each in a datagram of its own to the peer's address, within the anti-amplification
    /// limit.
    pub(crate) async fn send_rechallenges<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
        node: &mut Node,
        paths: &mut Paths,
    ) {
        let due = paths.take_rechallenges();
        for &(peer, token) in &due {
            self.buf.clear();
            let Some(tx) = node.poll_rechallenge(peer, token, &mut self.buf) else {
                continue;
            };
            let route = paths.rechallenge_sent(peer, tx.size);
            self.send_challenge(socket, stats, route).await;
        }
        paths.return_rechallenges(due);
    }

    /// Sends the answers to peers' challenges due again at `t` (`paths/answers.rs`), each
    /// in a datagram of its own.
    pub(crate) async fn send_answers<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
        node: &mut Node,
        paths: &mut Paths,
        t: Instant,
    ) {
        if paths.next_answer_at().is_none_or(|at| at > t) {
            return;
        }
        let due = paths.take_answers(t);
        for &(peer, token) in &due {
            self.buf.clear();
            if let Some(tx) = node.poll_response(peer, token, &mut self.buf) {
                if self.send_alone(socket, stats, paths, peer, tx.size).await {
                    stats.path_responses += 1;
                }
            }
        }
        paths.return_answers(due);
    }

    /// Sends the keepalives owed at `t` (`paths/keepalive.rs`): a datagram holding PING
    /// alone to each peer `awaited` appends (calls wait for its reply, streams for its
    /// bytes) that has been silent a while.
    pub(crate) async fn send_keepalives<S: DatagramSocket>(
        &mut self,
        socket: &S,
        stats: &mut EndpointStats,
        node: &mut Node,
        paths: &mut Paths,
        awaited: impl FnOnce(&mut Vec<crate::proto::NodeId>),
        t: Instant,
    ) {
        if paths.next_keepalive_at().is_none_or(|at| at > t) {
            return;
        }
        let due = paths.take_keepalives(t, awaited);
        for &peer in &due {
            self.buf.clear();
            if let Some(tx) = node.poll_ping(peer, &mut self.buf) {
                if self.send_alone(socket, stats, paths, peer, tx.size).await {
                    stats.keepalives += 1;
                }
            }
        }
        paths.return_keepalives(due);
    }

    /// Sends the datagram of `size` bytes in `self.buf` to `peer`'s address, within the
    /// anti-amplification limit; returns whether it went (else counts why not).
    async fn send_alone<S: DatagramSocket>(
        &self,
        socket: &S,
        stats: &mut EndpointStats,
        paths: &mut Paths,
        peer: crate::proto::NodeId,
        size: usize,
    ) -> bool {
        match paths.send_to(peer, size) {
            Ok(addr) => {
                self.send_path_datagram(socket, stats, addr).await;
                true
            }
            Err(NoRoute::Amplification) => {
                stats.amplification_drops += 1;
                false
            }
            Err(NoRoute::Unknown) => false,
        }
    }

    /// Sends the challenge in `self.buf` where `route` says, or counts why it cannot go.
    async fn send_challenge<S: DatagramSocket>(
        &self,
        socket: &S,
        stats: &mut EndpointStats,
        route: Result<SocketAddr, NoRoute>,
    ) {
        match route {
            Ok(addr) => {
                stats.path_challenges += 1;
                self.send_path_datagram(socket, stats, addr).await;
            }
            Err(NoRoute::Amplification) => stats.amplification_drops += 1,
            Err(NoRoute::Unknown) => {}
        }
    }

    /// Sends the path datagram (a challenge or an answer) in `self.buf` to `addr`.
    async fn send_path_datagram<S: DatagramSocket>(
        &self,
        socket: &S,
        stats: &mut EndpointStats,
        addr: SocketAddr,
    ) {
        let Some(addr) = self.on_wire(stats, addr) else {
            return;
        };
        if let Err(e) = socket.send_to(&self.buf, addr).await {
            stats.send_errors += 1;
            tracing::debug!(error = %e, %addr, "socket send error (ignored)");
        }
        stats.send_calls += 1;
    }

    /// Sends COOKIE_REPLYs (each smaller than the datagram it answers, within the limits
    /// of `cookies.rs`).
    pub(crate) async fn send_cookie_replies<S: DatagramSocket>(
        &self,
        socket: &S,
        stats: &mut EndpointStats,
        replies: Vec<(SocketAddr, CookieReply)>,
    ) {
        if replies.is_empty() {
            return;
        }
        let mut buf = Vec::with_capacity(64);
        for (addr, reply) in replies {
            let Some(addr) = self.on_wire(stats, addr) else {
                continue;
            };
            buf.clear();
            reply.encode(&mut buf);
            stats.send_calls += 1;
            if let Err(e) = socket.send_to(&buf, addr).await {
                stats.send_errors += 1;
                tracing::debug!(error = %e, %addr, "socket send error (ignored)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A socket that records where each send went.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<SocketAddr>>);

    impl DatagramSocket for Recorder {
        async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
            self.0.lock().unwrap().push(target);
            Ok(buf.len())
        }

        async fn recv_from(&self, _buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
            std::future::pending().await
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok(SocketAddr::from(([0, 0, 0, 0], 1)))
        }
    }

    /// Pushes one datagram to `to` through an outbound that reaches `reach`; returns where
    /// the socket was asked to send it, and the send errors counted.
    async fn push_one(reach: Reach, to: &str) -> (Vec<SocketAddr>, u64) {
        let (socket, mut stats) = (Recorder::default(), EndpointStats::default());
        let mut out = Outbound::new(1200, 1, reach);
        out.begin();
        let (start, buf) = out.buf();
        buf.extend_from_slice(&[0; 100]);
        out.push(&socket, &mut stats, start, to.parse().unwrap(), 100)
            .await;
        out.finish(&socket, &mut stats).await;
        let sent = socket.0.lock().unwrap().clone();
        (sent, stats.send_errors)
    }

    #[tokio::test]
    async fn destinations_take_the_sockets_form_or_are_not_tried() {
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:9".parse().unwrap();
        assert_eq!(
            push_one(Reach::DualStack, "127.0.0.1:9").await,
            (vec![mapped], 0)
        );
        let v4: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(push_one(Reach::V4, "127.0.0.1:9").await, (vec![v4], 0));
        // Out of reach: nothing handed to the socket, one error counted.
        assert_eq!(push_one(Reach::V4, "[::1]:9").await, (vec![], 1));
        assert_eq!(push_one(Reach::V6Only, "127.0.0.1:9").await, (vec![], 1));
    }

    /// A socket that records each send: its bytes and its segment size.
    #[derive(Default)]
    struct Segments(Mutex<Vec<(Vec<u8>, usize)>>);

    impl DatagramSocket for Segments {
        async fn send_to(&self, buf: &[u8], _: SocketAddr) -> io::Result<usize> {
            self.0.lock().unwrap().push((buf.to_vec(), buf.len()));
            Ok(buf.len())
        }

        async fn send_segments(&self, buf: &[u8], segment: usize, _: SocketAddr) -> io::Result<()> {
            self.0.lock().unwrap().push((buf.to_vec(), segment));
            Ok(())
        }

        async fn recv_from(&self, _buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
            std::future::pending().await
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok(SocketAddr::from(([0, 0, 0, 0], 1)))
        }
    }

    #[tokio::test]
    async fn runs_of_any_size_leave_whole_in_order_and_in_batches_that_fit() {
        let (socket, mut stats) = (Segments::default(), EndpointStats::default());
        let mut out = Outbound::new(65_507, 64, Reach::V4);
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        // Runs as the driver writes them: (destination, datagram size, count).
        let runs = [
            (a, 65_507, 5),
            (a, 1_472, 50),
            (a, 1_472, 30),
            (b, 1_200, 3),
            (a, 65_507, 2),
            (a, 900, 1),
        ];
        let mut want = Vec::new();
        let mut tag = 0u8;
        out.begin();
        for (to, size, mut left) in runs {
            // The node writes what is left in runs of at most `room()` datagrams.
            while left > 0 {
                let n = left.min(out.room());
                left -= n;
                let (start, buf) = out.buf();
                assert!(
                    start <= MAX_SEGMENTED,
                    "at most one open batch stays behind"
                );
                for _ in 0..n {
                    tag = tag.wrapping_add(1);
                    buf.extend(std::iter::repeat_n(tag, size));
                    want.push(vec![tag; size]);
                }
                let mut at = start;
                for _ in 0..n {
                    out.push(&socket, &mut stats, at, to, size).await;
                    at += size;
                }
            }
        }
        out.finish(&socket, &mut stats).await;
        let sends = socket.0.lock().unwrap();
        let mut got = Vec::new();
        for (bytes, segment) in sends.iter() {
            assert!(
                bytes.len() <= MAX_SEGMENTED,
                "a send of {} bytes",
                bytes.len()
            );
            got.extend(bytes.chunks(*segment).map(<[u8]>::to_vec));
        }
        assert_eq!(got.len(), want.len());
        assert!(got == want, "every datagram whole, once, in order");
        // Large datagrams leave alone; 1472-byte ones 44 to a send at most.
        assert!(sends.iter().all(|(b, s)| *s != 65_507 || b.len() == 65_507));
        assert!(sends
            .iter()
            .any(|(b, s)| *s == 1_472 && b.len() == 44 * 1_472));
    }
}
