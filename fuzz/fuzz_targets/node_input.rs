//! A pair of plaintext nodes (the hardened frame checks) fed an arbitrary sequence of sends, timeouts, honest datagrams (dropped,
//! duplicated or reordered at the fuzzer's choice) and arbitrary bytes or forged packets. The
//! core's invariants are checked after every step: state within its bounds, no message
//! delivered twice or delivered without being sent, no message acknowledged without being
//! delivered, and the clock never going back.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use exon::proto::{Config, Event, MsgId, Node, NodeId, Packet, Security, Transmit};
use exon_testkit::drain_taking;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Node `from` sends a fresh message to the other: 8 bytes, or (`large`) a few KB that
    /// travel in fragments.
    Send { from: bool, large: bool },
    /// Time moves on by this many milliseconds, and due timers run.
    Advance { ms: u16 },
    /// Deliver the in-flight datagram at this index (mod the queue length).
    Deliver { index: u8 },
    /// Deliver it and keep a copy in flight (a duplicate).
    Duplicate { index: u8 },
    /// Lose it.
    Drop { index: u8 },
    /// Raw bytes into a node.
    Garbage { to: bool, data: Vec<u8> },
    /// A well-formed but forged datagram into a node (its header destination is rewritten to
    /// the node half of the time).
    Forged {
        to: bool,
        fix_dst: bool,
        packet: Packet,
    },
}

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

fn config() -> Config {
    exon_testkit::pair::fuzz_config()
}

struct World {
    now: Instant,
    nodes: [Node; 2],
    in_flight: Vec<(usize, Bytes)>,
    next_msg: u64,
    sent: HashSet<Bytes>,
    /// Each node's messages by the id `send` returned.
    ids: [HashMap<MsgId, Bytes>; 2],
    delivered: HashSet<Bytes>,
    clocks: [u64; 2],
}

impl World {
    /// Drains every output of node `i` (the kit's drain): clock stores confirmed at once,
    /// datagrams to the peer in flight, deliveries taken at once.
    fn drain(&mut self, i: usize) {
        let (me, peer) = ([A, B][i], [A, B][1 - i]);
        let in_flight = &mut self.in_flight;
        let (sent, delivered, ids) = (&self.sent, &mut self.delivered, &self.ids[i]);
        let to_peer = |n: &Node, t: Transmit, d: &[u8]| {
            assert!(t.size <= n.config().mtu.max_datagram_size);
            if t.destination == peer && in_flight.len() < 256 {
                in_flight.push((1 - i, Bytes::copy_from_slice(d)));
            }
        };
        drain_taking(&mut self.nodes[i], self.now, to_peer, |e| match e {
            // Forged traffic never claims to be A or B (see `honest_ids_untouched`), so what
            // arrives from the peer is honest and must be exactly-once; a third node id may
            // legitimately get its own forged messages delivered (ids are not authenticated).
            // The application took it at once: only then is it acknowledged.
            Event::Delivered { from, payload, .. } if from == peer => {
                assert!(sent.contains(&payload), "delivered a message never sent");
                assert!(delivered.insert(payload), "delivered twice");
            }
            Event::Delivered { from, .. } => assert!(from != me, "delivered from itself"),
            Event::Acknowledged { to, ids: acked } => {
                // Only the honest peer can settle a message to it (forged ids differ).
                assert_eq!(to, peer);
                for id in acked {
                    let payload = ids.get(&id).expect("acknowledged, never sent");
                    assert!(delivered.contains(payload), "acknowledged, never delivered");
                }
            }
            // In doubt (possible once evicted incarnations are forgotten): delivered at
            // most once, which the checks above keep.
            _ => {}
        });
    }

    fn check(&mut self) {
        let cfg = config();
        for i in 0..2 {
            let n = &self.nodes[i];
            assert!(n.clock() >= self.clocks[i], "clock went back");
            self.clocks[i] = n.clock();
            assert!(
                n.clock() <= n.clock_high_water(),
                "clock above the stored mark"
            );
            assert!(n.receiver_records() <= cfg.limits.max_receiver_records);
            assert!(n.sender_records() <= cfg.limits.max_sender_records);
            assert!(n.slots_held() <= cfg.limits.max_slots_per_record * cfg.limits.max_receiver_records as u64);
            assert!(n.tokens_in_flight() <= cfg.flow.window as usize * cfg.limits.max_sender_records);
            assert!(n.messages_queued() <= cfg.limits.max_queued_per_peer * cfg.limits.max_sender_records);
        }
    }
}

/// Garbage that happens to be a valid datagram claiming to come from A or B is skipped:
/// impersonating an honest node is outside what exactly-once can promise without
/// authentication, and would make the harness's own bookkeeping wrong.
fn honest_ids_untouched(data: &Bytes) -> bool {
    match exon::proto::frame::validate(data, usize::MAX) {
        Ok((h, _)) => h.src != A && h.src != B,
        Err(_) => true,
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let now = Instant::now();
    let mut w = World {
        now,
        nodes: [
            Node::new(A, Security::InsecurePlaintext, config(), 0).unwrap(),
            Node::new(B, Security::InsecurePlaintext, config(), 1 << 20).unwrap(),
        ],
        in_flight: Vec::new(),
        next_msg: 0,
        sent: HashSet::new(),
        ids: [HashMap::new(), HashMap::new()],
        delivered: HashSet::new(),
        clocks: [0, 1 << 20],
    };
    for op in ops.into_iter().take(2000) {
        let now = w.now;
        match op {
            Op::Send { from, large } => {
                let i = usize::from(from);
                let mut payload = w.next_msg.to_be_bytes().to_vec();
                if large {
                    // Three to four datagrams' worth, tagged at both ends.
                    let n = 3000 + (w.next_msg as usize % 1000);
                    payload.resize(n, (w.next_msg % 251) as u8);
                    payload.extend_from_slice(&w.next_msg.to_be_bytes());
                }
                let payload = Bytes::from(payload);
                w.next_msg += 1;
                if let Ok(id) = w.nodes[i].send(now, [A, B][1 - i], payload.clone()) {
                    w.sent.insert(payload.clone());
                    w.ids[i].insert(id, payload);
                }
                w.drain(i);
            }
            Op::Advance { ms } => {
                w.now += Duration::from_millis(u64::from(ms));
                for i in 0..2 {
                    w.nodes[i].handle_timeout(w.now);
                    w.drain(i);
                }
            }
            Op::Deliver { index } | Op::Duplicate { index } | Op::Drop { index }
                if !w.in_flight.is_empty() =>
            {
                let k = usize::from(index) % w.in_flight.len();
                let (to, d) = match op {
                    Op::Duplicate { .. } => w.in_flight[k].clone(),
                    _ => w.in_flight.swap_remove(k),
                };
                if !matches!(op, Op::Drop { .. }) {
                    w.nodes[to].handle_datagram(now, d);
                    w.drain(to);
                }
            }
            Op::Garbage { to, data } => {
                let i = usize::from(to);
                let data = Bytes::from(data);
                if honest_ids_untouched(&data) {
                    w.nodes[i].handle_datagram(now, data);
                    w.drain(i);
                }
            }
            Op::Forged {
                to,
                fix_dst,
                mut packet,
            } => {
                let i = usize::from(to);
                if fix_dst {
                    packet.header.dst = [A, B][i];
                }
                if packet.header.src == A || packet.header.src == B {
                    packet.header.src = NodeId::from_const(1000);
                }
                w.nodes[i].handle_datagram(now, packet.encode());
                w.drain(i);
            }
            _ => {}
        }
        w.check();
    }
});
