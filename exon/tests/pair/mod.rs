//! A two-node harness over virtual time, like quinn-proto's `Pair`: it drives two sans-IO
//! nodes, moves datagrams between them through a hand-controlled network (drop, duplicate,
//! delay, reorder), and runs until quiet.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, DeliveryId, Event, MsgId, Node, NodeId, Packet, Security};

/// What the network does with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Deliver after the pair's latency.
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver it twice, the copy `extra` later than the original.
    Duplicate(Duration),
    /// Deliver after the latency plus this delay (reorders it behind later datagrams).
    Delay(Duration),
}

/// A datagram as the network sees it.
#[derive(Debug, Clone)]
pub struct Wire {
    /// Index of the sending node (0 = a, 1 = b).
    pub from: usize,
    /// Sequence number over all datagrams put on the network.
    pub seq: u64,
    /// The bytes.
    pub data: Bytes,
}

impl Wire {
    /// The datagram decoded, for tests that look at frames.
    pub fn packet(&self) -> Packet {
        Packet::decode(&self.data).expect("nodes only send valid datagrams")
    }
}

/// One side of the pair and what it has seen.
pub struct Side {
    pub node: Node,
    pub delivered: Vec<Bytes>,
    pub acked: Vec<MsgId>,
    /// Ids of its messages reported in doubt.
    pub in_doubt: Vec<MsgId>,
    /// Ids of its messages given up as not delivered (too large for the receiver).
    pub not_delivered: Vec<MsgId>,
    /// Auto-confirm clock persistence requests (an in-memory store).
    pub auto_store: bool,
    /// The application takes each delivery at once (`handle_taken`); when false, they wait
    /// in `untaken` until [`Pair::take`].
    pub auto_take: bool,
    /// Deliveries not yet taken (with `auto_take` off).
    pub untaken: Vec<DeliveryId>,
    /// Liveness events about the other node, in order: true for reachable again.
    pub liveness: Vec<bool>,
    pub stored: u64,
}

type Filter = Box<dyn FnMut(&Wire) -> Fate>;

pub struct Pair {
    pub now: Instant,
    pub nodes: [Side; 2],
    pub latency: Duration,
    in_flight: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    payloads: std::collections::HashMap<u64, Bytes>,
    seq: u64,
    next_key: u64,
    filter: Filter,
    /// Every datagram put on the network, in order, if recording.
    pub log: Vec<Wire>,
    pub record: bool,
    /// Datagrams addressed to nodes outside the pair.
    pub strays: u64,
    buf: Vec<u8>,
}

pub const A: usize = 0;
pub const B: usize = 1;

pub fn id(i: usize) -> NodeId {
    NodeId::new(i as u64 + 1).unwrap()
}

/// A config for tests: short idle timeout and probes, so runs reach quiet quickly.
pub fn test_config() -> Config {
    let mut conf = Config::default();
    conf.idle_timeout = Duration::from_millis(500);
    conf.probe_interval = Duration::from_millis(200);
    conf.max_probe_interval = Duration::from_secs(2);
    conf.initial_rtt = Duration::from_millis(10);
    // Fixed 1200-byte datagrams, as these tests were written for (no MTU probes among the
    // frames they count); `tests/mtu.rs` runs path MTU discovery.
    conf.mtu_discovery = false;
    conf.max_datagram_size = 1200;
    conf
}

impl Pair {
    pub fn new(cfg: Config) -> Pair {
        Self::with_configs(cfg.clone(), cfg)
    }

    pub fn with_configs(a: Config, b: Config) -> Pair {
        let now = Instant::now();
        let side = |i: usize, cfg: Config| Side {
            node: Node::new(
                id(i),
                Security::InsecurePlaintext,
                cfg,
                1000 * (i as u64 + 1),
            )
            .unwrap(),
            delivered: Vec::new(),
            acked: Vec::new(),
            in_doubt: Vec::new(),
            not_delivered: Vec::new(),
            auto_store: true,
            auto_take: true,
            untaken: Vec::new(),
            liveness: Vec::new(),
            stored: 0,
        };
        Pair {
            now,
            nodes: [side(A, a), side(B, b)],
            latency: Duration::from_millis(5),
            in_flight: BinaryHeap::new(),
            payloads: Default::default(),
            seq: 0,
            next_key: 0,
            filter: Box::new(|_| Fate::Deliver),
            log: Vec::new(),
            record: false,
            strays: 0,
            buf: Vec::new(),
        }
    }

    /// Sets what the network does to each datagram.
    pub fn set_filter(&mut self, f: impl FnMut(&Wire) -> Fate + 'static) {
        self.filter = Box::new(f);
    }

    pub fn node(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i].node
    }

    /// Sends from node `from` to the other one.
    pub fn send(&mut self, from: usize, payload: impl Into<Bytes>) -> MsgId {
        let now = self.now;
        let to = id(1 - from);
        self.nodes[from]
            .node
            .send(now, to, payload.into())
            .expect("send accepted")
    }

    /// Drains every output of node `i` into the network and its side's logs.
    pub fn drain(&mut self, i: usize) {
        let now = self.now;
        loop {
            let side = &mut self.nodes[i];
            if let Some(hw) = side.node.poll_clock_store() {
                side.stored = hw;
                if side.auto_store {
                    side.node.handle_clock_stored(now, hw);
                }
                continue;
            }
            self.buf.clear();
            let Some(t) = side.node.poll_transmit(now, &mut self.buf) else {
                break;
            };
            assert!(t.size <= side.node.config().max_datagram_size);
            if t.destination != id(1 - i) {
                // For a node outside the pair (tests that inject forged peers): lost.
                self.strays += 1;
                continue;
            }
            let wire = Wire {
                from: i,
                seq: self.seq,
                data: Bytes::copy_from_slice(&self.buf[..t.size]),
            };
            self.seq += 1;
            self.put_on_network(wire);
        }
        let side = &mut self.nodes[i];
        let mut took = false;
        while let Some(e) = side.node.poll_event() {
            match e {
                Event::Delivered {
                    from,
                    payload,
                    id: d,
                } => {
                    assert_eq!(from, id(1 - i));
                    side.delivered.push(payload);
                    if side.auto_take {
                        took |= side.node.handle_taken(now, d);
                    } else {
                        side.untaken.push(d);
                    }
                }
                Event::Acknowledged { to, id: m } => {
                    assert_eq!(to, id(1 - i));
                    side.acked.push(m);
                }
                Event::InDoubt { to, id: m } => {
                    assert_eq!(to, id(1 - i));
                    side.in_doubt.push(m);
                }
                Event::NotDelivered { to, id: m } => {
                    assert_eq!(to, id(1 - i));
                    side.not_delivered.push(m);
                }
                Event::PeerUnreachable { peer } => {
                    assert_eq!(peer, id(1 - i));
                    side.liveness.push(false);
                }
                Event::PeerReachable { peer } => {
                    assert_eq!(peer, id(1 - i));
                    side.liveness.push(true);
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        if took {
            self.drain(i);
        }
    }

    /// The application of node `i` takes its first `n` untaken deliveries (all if fewer).
    pub fn take(&mut self, i: usize, n: usize) {
        let now = self.now;
        let side = &mut self.nodes[i];
        let n = n.min(side.untaken.len());
        for d in side.untaken.drain(..n) {
            assert!(side.node.handle_taken(now, d), "taken once");
        }
        self.drain(i);
    }

    fn put_on_network(&mut self, wire: Wire) {
        if self.record {
            self.log.push(wire.clone());
        }
        let fate = (self.filter)(&wire);
        let at = self.now + self.latency;
        let push = |this: &mut Pair, at: Instant, data: Bytes| {
            let key = this.next_key;
            this.next_key += 1;
            this.payloads.insert(key, data);
            this.in_flight.push(Reverse((at, key, 1 - wire.from)));
        };
        match fate {
            Fate::Deliver => push(self, at, wire.data.clone()),
            Fate::Drop => {}
            Fate::Duplicate(extra) => {
                push(self, at, wire.data.clone());
                push(self, at + extra, wire.data.clone());
            }
            Fate::Delay(d) => push(self, at + d, wire.data.clone()),
        }
    }

    /// Injects raw bytes into node `to` now.
    pub fn inject(&mut self, to: usize, data: Bytes) {
        let now = self.now;
        self.nodes[to].node.handle_datagram(now, data);
        self.drain(to);
    }

    /// The next instant something happens, if anything will.
    fn next_event(&mut self) -> Option<Instant> {
        let net = self.in_flight.peek().map(|Reverse((t, _, _))| *t);
        let ta = self.nodes[A].node.poll_timeout();
        let tb = self.nodes[B].node.poll_timeout();
        [net, ta, tb].into_iter().flatten().min()
    }

    /// Advances to the next event and handles everything due then. Returns false if nothing
    /// is left to happen.
    pub fn step(&mut self) -> bool {
        self.drain(A);
        self.drain(B);
        let Some(t) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        while let Some(Reverse((at, key, to))) = self.in_flight.peek().copied() {
            if at > now {
                break;
            }
            self.in_flight.pop();
            let data = self.payloads.remove(&key).expect("payload");
            self.nodes[to].node.handle_datagram(now, data);
            self.drain(to);
        }
        for i in [A, B] {
            if self.nodes[i].node.poll_timeout().is_some_and(|t| t <= now) {
                self.nodes[i].node.handle_timeout(now);
            }
            self.drain(i);
        }
        true
    }

    /// Runs until nothing is in flight and no timer is armed, or `limit` of virtual time
    /// passes. Returns the virtual time spent.
    pub fn run(&mut self, limit: Duration) -> Duration {
        let start = self.now;
        while self.now - start < limit {
            if !self.step() {
                break;
            }
        }
        self.now - start
    }

    /// Datagrams still in the network.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Both nodes hold no records.
    pub fn both_idle(&self) -> bool {
        self.nodes[A].node.is_idle() && self.nodes[B].node.is_idle()
    }
}
