//! Exon's sans-IO core alone: two nodes in memory, no sockets, no threads, virtual time.

use std::time::{Duration, Instant};

use exon::proto::{Config, DeliveryId, Event, Node, NodeId, Output, Security, SendError};

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
    /// Messages per `Node::send_many` call (0 or 1: one `send` each).
    pub send_many: usize,
    /// Deliveries of one drain, taken together.
    taken: Vec<DeliveryId>,
    /// Datagrams written per call at most (`Node::poll_transmit_run`), as the driver does
    /// for segmented sends; 1: one `poll_output` per datagram.
    pub run: usize,
    /// Messages sent and not yet delivered at most (0: every message of a run is sent as
    /// soon as the sender's queue takes it). Bounded, the sender's queue and token ring
    /// stay the same size however long the run, so a longer run counts no regrowth of
    /// them: what a sender in its steady state costs.
    pub backlog: u64,
}

impl MemPair {
    /// Two nodes with `datagram`-byte datagrams, sealed or (`plain`) in plaintext mode.
    pub fn new(datagram: usize, plain: bool) -> MemPair {
        let cfg = {
            let mut conf = Config::default();
            conf.mtu.max_datagram_size = datagram;
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
            run: 1,
            send_many: 0,
            backlog: 0,
            taken: Vec::new(),
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
            let end = match self.backlog {
                0 => end,
                b => end.min(start + (self.seen.count() + n - target) + b),
            };
            if self.send_many > 1 {
                // As the driver does for `Handle::send_batch`: one call per batch.
                while seq < end {
                    let n = (end - seq).min(self.send_many as u64);
                    let mut batch: std::collections::VecDeque<_> =
                        (seq..seq + n).map(|i| payload(i, PAYLOAD).into()).collect();
                    match step::sender_send_many(&mut self.a, now, to, &mut batch) {
                        Ok(_) => seq += n - batch.len() as u64,
                        Err(SendError::QueueFull(_)) => break,
                        Err(e) => panic!("send_many: {e}"),
                    }
                    if !batch.is_empty() {
                        break;
                    }
                }
            }
            while seq < end {
                match step::sender_send(&mut self.a, now, to, payload(seq, PAYLOAD)) {
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

    /// Drains each node once (a then b): its timer if due, then every output, its datagrams
    /// handed to the other node and its deliveries verified and taken. Returns the datagrams
    /// moved.
    fn pump(&mut self, now: Instant) -> u64 {
        let mut moved = 0;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut self.a, &mut self.b)
            } else {
                (&mut self.b, &mut self.a)
            };
            if src.poll_timeout().is_some_and(|t| t <= now) {
                step::timeout(from_a, src, now);
            }
            if self.run > 1 {
                // As the driver does: clocks stored, then runs of datagrams to one peer.
                exon_testkit::confirm_clock(src, now);
                self.buf.clear();
                while let Some(r) = step::transmit(from_a, src, now, &mut self.buf, self.run) {
                    let mut at = 0;
                    for size in r.sizes() {
                        moved += 1;
                        if self.rx.capacity() < size {
                            self.rx = bytes::BytesMut::with_capacity(256 * 1024);
                        }
                        self.rx.extend_from_slice(&self.buf[at..at + size]);
                        step::input(!from_a, dst, now, self.rx.split());
                        at += size;
                    }
                    self.buf.clear();
                }
            }
            loop {
                self.buf.clear();
                match step::output(from_a, src, now, &mut self.buf) {
                    Output::StoreClock(hw) => src.handle_clock_stored(now, hw),
                    Output::Store(w) => src.handle_stored(now, w.seq),
                    Output::Transmit(tx) => {
                        moved += 1;
                        // As a driver would: datagrams received into one large shared
                        // buffer, so slicing a payload out is a reference count, not an
                        // allocation.
                        if self.rx.capacity() < tx.size {
                            self.rx = bytes::BytesMut::with_capacity(256 * 1024);
                        }
                        self.rx.extend_from_slice(&self.buf[..tx.size]);
                        step::input(!from_a, dst, now, self.rx.split());
                    }
                    Output::Event(e) => {
                        // Events come last: the rest of this drain is events. They are
                        // taken from the queue directly, as `poll_output`'s own order
                        // allows, rather than through `poll_output`, which would look for a
                        // datagram again before each (about 1.6 % more instructions per
                        // message). The datagrams the takings owe go in the next pump.
                        let mut ids = std::mem::take(&mut self.taken);
                        take(&mut self.seen, &mut ids, e);
                        while let Some(e) = step::event(from_a, src) {
                            take(&mut self.seen, &mut ids, e);
                        }
                        // As the driver does: the takes of one drain in one call.
                        step::taken(from_a, src, now, &mut ids);
                        self.taken = ids;
                        break;
                    }
                    Output::Timeout(_) => break,
                }
            }
        }
        self.datagrams += moved;
        moved
    }
}

/// Verifies a delivery into `seen` and notes its id in `ids`, to be taken (other events
/// are dropped). Inlined: it runs once or twice per message, and a call would show in the
/// instruction count per message.
#[inline(always)]
fn take(seen: &mut Seen, ids: &mut Vec<DeliveryId>, e: Event) {
    if let Event::Delivered { payload, id, .. } = e {
        seen.record(seq_of(&payload, PAYLOAD));
        ids.push(id);
    }
}

/// Each call into a node goes through a function of its own, never inlined, named after
/// its step and the node's role (a sends, b receives), so that callgrind's inclusive counts
/// give the instruction budget of every step on each side
/// (`scripts/instruction-budget.py`). A call costs a few instructions more than the
/// method alone; the `black_box` of its role keeps the compiler from merging the sender's
/// and the receiver's copies of a step into one function.
mod step {
    use std::collections::VecDeque;
    use std::time::Instant;

    use bytes::{Bytes, BytesMut};
    use exon::proto::{
        Accepted, DeliveryId, Event, MsgId, Node, NodeId, Output, Payload, SendError, TransmitRun,
    };

    #[inline(never)]
    pub fn sender_send(
        n: &mut Node,
        now: Instant,
        to: NodeId,
        p: Bytes,
    ) -> Result<MsgId, SendError> {
        std::hint::black_box(1u8);
        n.send(now, to, p)
    }

    #[inline(never)]
    pub fn sender_send_many(
        n: &mut Node,
        now: Instant,
        to: NodeId,
        batch: &mut VecDeque<Payload>,
    ) -> Result<MsgId, SendError> {
        std::hint::black_box(1u8);
        n.send_many(now, to, batch)
    }

    /// A step taken by either node: `$name` calls the never-inlined function of the role
    /// it is told (`sender`), and both run `$body` on the node `$n`.
    macro_rules! step {
        ($doc:literal, $name:ident, $sender:ident, $receiver:ident,
         ($($arg:ident: $ty:ty),*) -> $ret:ty, |$n:ident| $body:expr) => {
            #[doc = $doc]
            pub fn $name(sender: bool, $n: &mut Node, $($arg: $ty),*) -> $ret {
                if sender {
                    $sender($n, $($arg),*)
                } else {
                    $receiver($n, $($arg),*)
                }
            }

            #[inline(never)]
            fn $sender($n: &mut Node, $($arg: $ty),*) -> $ret {
                std::hint::black_box(1u8);
                $body
            }

            #[inline(never)]
            fn $receiver($n: &mut Node, $($arg: $ty),*) -> $ret {
                std::hint::black_box(2u8);
                $body
            }
        };
    }

    step!("`Node::handle_timeout`, on the sender or the receiver.",
        timeout, sender_timeout, receiver_timeout,
        (now: Instant) -> (), |n| n.handle_timeout(now));
    step!("`Node::poll_transmit_run`, on the sender or the receiver.",
        transmit, sender_transmit, receiver_transmit,
        (now: Instant, buf: &mut Vec<u8>, max: usize) -> Option<TransmitRun>,
        |n| n.poll_transmit_run(now, buf, max));
    step!("`Node::poll_output`, on the sender or the receiver.",
        output, sender_output, receiver_output,
        (now: Instant, buf: &mut Vec<u8>) -> Output, |n| n.poll_output(now, buf));
    step!("`Node::handle_datagram_buf`, on the sender or the receiver.",
        input, sender_input, receiver_input,
        (now: Instant, d: BytesMut) -> Option<Accepted>, |n| n.handle_datagram_buf(now, d));
    step!("`Node::poll_event`, on the sender or the receiver.",
        event, sender_event, receiver_event,
        () -> Option<Event>, |n| n.poll_event());
    step!("`Node::handle_taken_many`, on the sender or the receiver.",
        taken, sender_taken, receiver_taken,
        (now: Instant, ids: &mut Vec<DeliveryId>) -> (),
        |n| { n.handle_taken_many(now, ids.drain(..)); });
}
