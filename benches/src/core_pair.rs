//! Exon's sans-IO core alone: two nodes in memory passing datagrams directly, with no
//! sockets, no threads and virtual time.

use std::time::{Duration, Instant};

use exon::proto::{Config, Event, Node, NodeId, Security, SendError};

use crate::message::{payload, seq_of, Seen, PAYLOAD};

/// Two exon nodes passing datagrams directly (no sockets, no threads): the protocol's own
/// cost per message.
pub struct MemPair {
    a: Node,
    b: Node,
    buf: Vec<u8>,
    /// Receive buffer the datagrams are copied into.
    rx: bytes::BytesMut,
    seen: Seen,
    next: u64,
    /// Datagrams moved between the nodes.
    pub datagrams: u64,
    /// Virtual time: it advances only to the next timer when nothing else is left to do.
    now: Instant,
}

impl MemPair {
    /// Two nodes with `datagram`-byte datagrams, sealed or (`plain`) in plaintext mode.
    pub fn new(datagram: usize, plain: bool) -> MemPair {
        let cfg = {
            let mut conf = Config::default();
            conf.max_datagram_size = datagram;
            conf
        };
        let (ia, ib) = (NodeId::from_const(1), NodeId::from_const(2));
        let security = |id| {
            if plain {
                Security::InsecurePlaintext
            } else {
                exon::proto::crypto::insecure_test_security(id, [ia, ib])
            }
        };
        MemPair {
            a: Node::new(ia, security(ia), cfg.clone(), 1).unwrap(),
            b: Node::new(ib, security(ib), cfg, 1).unwrap(),
            buf: Vec::with_capacity(64 * 1024),
            rx: bytes::BytesMut::new(),
            seen: Seen::default(),
            next: 0,
            datagrams: 0,
            now: Instant::now(),
        }
    }

    /// Sends `n` messages from a to b and runs until b delivered all of them.
    pub fn run(&mut self, n: u64) -> Duration {
        let t = Instant::now();
        let (start, end) = (self.next, self.next + n);
        let target = self.seen.count() + n;
        let to = self.b.id();
        let mut seq = start;
        let mut stuck = 0;
        while self.seen.count() < target {
            let now = self.now;
            while seq < end {
                match self.a.send(now, to, payload(seq, PAYLOAD)) {
                    Ok(_) => seq += 1,
                    Err(SendError::QueueFull(_)) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            if self.pump(now) == 0 {
                // Nothing to move: jump the virtual clock to the next timer.
                let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                match next {
                    Some(t) if t > self.now => self.now = t,
                    _ => stuck += 1,
                }
                assert!(stuck < 100, "in-memory pair stalled");
            }
        }
        self.next = end;
        t.elapsed()
    }

    /// Moves every pending datagram both ways once, handles timers and events. Returns the
    /// datagrams moved.
    fn pump(&mut self, now: Instant) -> u64 {
        let mut moved = 0;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut self.a, &mut self.b)
            } else {
                (&mut self.b, &mut self.a)
            };
            if src.poll_timeout().is_some_and(|t| t <= now) {
                src.handle_timeout(now);
            }
            loop {
                if let Some(hw) = src.poll_clock_store() {
                    src.handle_clock_stored(now, hw);
                    continue;
                }
                self.buf.clear();
                let Some(tx) = src.poll_transmit(now, &mut self.buf) else {
                    break;
                };
                moved += 1;
                // As a driver would: datagrams received into one large shared buffer, so
                // slicing a payload out is a reference count, not an allocation.
                if self.rx.capacity() < tx.size {
                    self.rx = bytes::BytesMut::with_capacity(256 * 1024);
                }
                self.rx.extend_from_slice(&self.buf[..tx.size]);
                dst.handle_datagram_buf(now, self.rx.split());
            }
        }
        for node in [&mut self.a, &mut self.b] {
            while let Some(e) = node.poll_event() {
                if let Event::Delivered { payload, id, .. } = e {
                    self.seen.record(seq_of(&payload, PAYLOAD));
                    node.handle_taken(now, id);
                }
            }
        }
        self.datagrams += moved;
        moved
    }
}
