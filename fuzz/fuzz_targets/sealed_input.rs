//! The authenticated path: a pair of sealed nodes fed an arbitrary sequence of sends,
//! timeouts and honest datagrams (dropped, duplicated, replayed late or reordered at the
//! fuzzer's choice), and an attacker without either secret key who injects arbitrary bytes,
//! bit-flipped copies of honest datagrams, and sealed-looking datagrams in A's or B's name
//! (any header, any frames, any tag). Checked after every step: nothing is delivered that
//! A or B did not send, nothing twice, nothing acknowledged that was not delivered, and
//! the state stays within its bounds.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::Bytes;
use exon::proto::crypto::{insecure_test_security, PublicKey, Seq};
use exon::proto::frame::SealHeader;
use exon::proto::{Config, Event, MsgId, Node, NodeId, Packet, Transmit};
use exon_testkit::drain_taking;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Node `from` sends a fresh message to the other.
    Send { from: bool },
    /// Time moves on by this many milliseconds, and due timers run.
    Advance { ms: u16 },
    /// Deliver the in-flight datagram at this index (mod the queue length).
    Deliver { index: u8 },
    /// Deliver it and keep a copy in flight (a replay, at any later time).
    Replay { index: u8 },
    /// Lose it.
    Drop { index: u8 },
    /// Flip one bit of a copy of an in-flight datagram and deliver the copy.
    BitFlip { index: u8, bit: u16 },
    /// Raw bytes into a node.
    Garbage { to: bool, data: Vec<u8> },
    /// A sealed-looking datagram claiming to be from the other honest node (or announcing
    /// a key), with frames of the fuzzer's choice and a tag it guessed.
    Forged {
        to: bool,
        packet: Packet,
        epoch: u64,
        counter: u8,
        key: Option<[u8; 32]>,
        cookie: Option<[u8; 16]>,
        tag: [u8; 16],
    },
}

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

fn config() -> Config {
    let mut c = exon_testkit::pair::fuzz_config();
    c.keys.cache_size = 4;
    c.keys.agreement_burst = 4;
    c.keys.agreements_per_sec = 10;
    c
}

struct World {
    now: Instant,
    nodes: [Node; 2],
    in_flight: Vec<(usize, Bytes)>,
    next_msg: u64,
    sent: HashSet<Bytes>,
    ids: [HashMap<MsgId, Bytes>; 2],
    delivered: HashSet<Bytes>,
}

impl World {
    /// Drains every output of node `i` (the kit's drain): clock stores confirmed at once,
    /// datagrams to the peer in flight, deliveries taken at once.
    fn drain(&mut self, i: usize) {
        let peer = [A, B][1 - i];
        let in_flight = &mut self.in_flight;
        let (sent, delivered, ids) = (&self.sent, &mut self.delivered, &self.ids[i]);
        let n = &mut self.nodes[i];
        let to_peer = |n: &Node, t: Transmit, d: &[u8]| {
            assert!(t.size <= n.config().mtu.max_datagram_size);
            if t.destination == peer && in_flight.len() < 256 {
                in_flight.push((1 - i, Bytes::copy_from_slice(d)));
            }
        };
        drain_taking(n, self.now, to_peer, |e| match e {
            Event::Delivered { from, payload, .. } => {
                assert_eq!(from, peer, "accepted a forged source");
                assert!(sent.contains(&payload), "delivered a forgery");
                assert!(delivered.insert(payload), "delivered twice");
            }
            Event::Acknowledged { to, ids: acked } => {
                assert_eq!(to, peer);
                for id in acked {
                    let payload = ids.get(&id).expect("acknowledged, never sent");
                    assert!(delivered.contains(payload), "acknowledged, never delivered");
                }
            }
            _ => {}
        });
        let cfg = config();
        assert!(n.receiver_records() <= cfg.limits.max_receiver_records);
        assert!(n.cached_keys() <= cfg.keys.cache_size);
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let now = Instant::now();
    let sec = |id| insecure_test_security(id, [A, B]);
    let mut w = World {
        now,
        nodes: [
            Node::new(A, sec(A), config(), 0).unwrap(),
            Node::new(B, sec(B), config(), 1 << 20).unwrap(),
        ],
        in_flight: Vec::new(),
        next_msg: 0,
        sent: HashSet::new(),
        ids: [HashMap::new(), HashMap::new()],
        delivered: HashSet::new(),
    };
    for op in ops.into_iter().take(2000) {
        let now = w.now;
        match op {
            Op::Send { from } => {
                let i = usize::from(from);
                let payload = Bytes::copy_from_slice(&w.next_msg.to_be_bytes());
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
            Op::Deliver { index } | Op::Replay { index } | Op::Drop { index }
                if !w.in_flight.is_empty() =>
            {
                let k = usize::from(index) % w.in_flight.len();
                let (to, d) = match op {
                    Op::Replay { .. } => w.in_flight[k].clone(),
                    _ => w.in_flight.swap_remove(k),
                };
                if !matches!(op, Op::Drop { .. }) {
                    w.nodes[to].handle_datagram(now, d);
                    w.drain(to);
                }
            }
            Op::BitFlip { index, bit } if !w.in_flight.is_empty() => {
                let k = usize::from(index) % w.in_flight.len();
                let (to, d) = w.in_flight[k].clone();
                let mut v = d.to_vec();
                let bit = usize::from(bit) % (v.len() * 8);
                v[bit / 8] ^= 1 << (bit % 8);
                let before = w.nodes[to].stats().rejects.total();
                w.nodes[to].handle_datagram(now, Bytes::from(v));
                assert!(
                    w.nodes[to].stats().rejects.total() > before,
                    "a bit-flipped datagram was accepted"
                );
                w.drain(to);
            }
            Op::Garbage { to, data } => {
                let i = usize::from(to);
                w.nodes[i].handle_datagram(now, Bytes::from(data));
                w.drain(i);
            }
            Op::Forged {
                to,
                mut packet,
                epoch,
                counter,
                key,
                cookie,
                tag,
            } => {
                let i = usize::from(to);
                packet.header.src = [A, B][1 - i];
                packet.header.dst = [A, B][i];
                packet.header.seal = Some(SealHeader {
                    seq: Seq {
                        epoch: epoch & ((1 << 62) - 1),
                        counter,
                    },
                    key: key.map(PublicKey::from_bytes),
                    cookie,
                });
                let mut v = packet.encode().to_vec();
                v.extend_from_slice(&tag);
                w.nodes[i].handle_datagram(now, Bytes::from(v));
                w.drain(i);
            }
            _ => {}
        }
    }
});
