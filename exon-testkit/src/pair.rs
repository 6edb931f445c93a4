//! A two-node harness over virtual time: it drives two sans-IO nodes, moves datagrams
//! between them through a hand-controlled network (drop, duplicate, delay, reorder), and
//! runs until quiet.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::journal::{Recovered, State, Write};
use exon::proto::{Config, DeliveryId, Event, MsgId, Node, NodeId, Packet, Security};

use crate::drain::{drain_with, Drained};

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
    /// The node.
    pub node: Node,
    /// The payloads it delivered, in order.
    pub delivered: Vec<Bytes>,
    /// Ids of its messages acknowledged, in order.
    pub acked: Vec<MsgId>,
    /// Ids of its messages reported in doubt.
    pub in_doubt: Vec<MsgId>,
    /// The replies among them, with the payload the node handed back with the verdict.
    pub doubted_replies: Vec<(MsgId, Bytes)>,
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
    /// The last clock high-water mark it asked to store (confirmed only with `auto_store`).
    pub stored: u64,
    /// Durable mode: the journal records synced (what a restart recovers).
    pub journal: State,
    /// Durable mode: records written and not yet synced (lost at a crash).
    pub unsynced: Vec<Write>,
    /// Durable mode: sync every record at once; when false, records wait in `unsynced`
    /// until [`Pair::sync`].
    pub auto_sync: bool,
    /// Durable mode: messages reported on stable storage (`Event::Stored`).
    pub stored_msgs: Vec<MsgId>,
    /// Durable mode: the redeliveries among `delivered` (flagged after a restart).
    pub redelivered: Vec<Bytes>,
}

impl Side {
    /// Durable mode: syncs the journal records not yet synced and reports them durable.
    /// Returns whether there were any.
    fn sync_unsynced(&mut self, now: Instant) -> bool {
        let Some(last) = self.unsynced.last().map(|w| w.seq) else {
            return false;
        };
        for w in self.unsynced.drain(..) {
            self.journal.apply(&w.entry);
        }
        self.node.handle_stored(now, last);
        true
    }
}

/// Where [`Pair::drain`] writes down the events of a side's node: the side's logs, borrowed
/// apart from the node (which the drain holds), and the deliveries its application takes.
struct EventLog<'a> {
    /// The other node: every event is about it.
    peer: NodeId,
    /// Deliveries go to `taken` (else to `untaken`).
    auto_take: bool,
    taken: &'a mut Vec<DeliveryId>,
    delivered: &'a mut Vec<Bytes>,
    redelivered: &'a mut Vec<Bytes>,
    untaken: &'a mut Vec<DeliveryId>,
    acked: &'a mut Vec<MsgId>,
    in_doubt: &'a mut Vec<MsgId>,
    doubted_replies: &'a mut Vec<(MsgId, Bytes)>,
    not_delivered: &'a mut Vec<MsgId>,
    stored_msgs: &'a mut Vec<MsgId>,
    liveness: &'a mut Vec<bool>,
}

impl EventLog<'_> {
    /// Writes down event `e` (about the other node, or the test fails).
    fn record(&mut self, e: Event) {
        let peer = self.peer;
        match e {
            Event::Delivered {
                from,
                payload,
                id: d,
            } => {
                assert_eq!(from, peer);
                if d.is_redelivery() {
                    self.redelivered.push(payload.clone());
                }
                self.delivered.push(payload);
                if self.auto_take {
                    self.taken.push(d);
                } else {
                    self.untaken.push(d);
                }
            }
            Event::Acknowledged { to, ids } => {
                assert_eq!(to, peer);
                self.acked.extend(ids);
            }
            Event::InDoubt { to, id: m, reply } => {
                assert_eq!(to, peer);
                self.in_doubt.push(m);
                if let Some(r) = reply {
                    self.doubted_replies.push((m, r.to_bytes()));
                }
            }
            Event::NotDelivered { to, id: m } => {
                assert_eq!(to, peer);
                self.not_delivered.push(m);
            }
            Event::Stored { to, id: m } => {
                assert_eq!(to, peer);
                self.stored_msgs.push(m);
            }
            Event::PeerUnreachable { peer: p } => {
                assert_eq!(p, peer);
                self.liveness.push(false);
            }
            Event::PeerReachable { peer: p } => {
                assert_eq!(p, peer);
                self.liveness.push(true);
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
}

type Filter = Box<dyn FnMut(&Wire) -> Fate>;

/// Two nodes, [`A`] and [`B`], over a network in virtual time.
pub struct Pair {
    /// The virtual time.
    pub now: Instant,
    /// The two sides, indexed by [`A`] and [`B`].
    pub nodes: [Side; 2],
    /// One-way latency of the network.
    pub latency: Duration,
    /// Rate of each direction in bytes per second (`None`: unlimited): a datagram leaves
    /// once those before it in its direction have (an unbounded queue), then takes the
    /// latency and whatever its fate adds.
    pub rate: Option<u64>,
    /// When each direction's link is free again (with `rate`).
    link_free: [Instant; 2],
    in_flight: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    payloads: std::collections::HashMap<u64, Bytes>,
    seq: u64,
    next_key: u64,
    filter: Filter,
    /// Every datagram put on the network, in order, if recording.
    pub log: Vec<Wire>,
    /// Whether to record every datagram in `log`.
    pub record: bool,
    /// Datagrams addressed to nodes outside the pair.
    pub strays: u64,
}

/// Index of the first node (id 1).
pub const A: usize = 0;
/// Index of the second node (id 2).
pub const B: usize = 1;

/// The id of the node at index `i`.
pub fn id(i: usize) -> NodeId {
    NodeId::new(i as u64 + 1).unwrap()
}

/// A config for tests: short idle timeout and probes, so runs reach quiet quickly.
pub fn test_config() -> Config {
    let mut conf = Config::default();
    conf.timers.idle_timeout = Duration::from_millis(500);
    conf.timers.probe_interval = Duration::from_millis(200);
    conf.timers.max_probe_interval = Duration::from_secs(2);
    conf.timers.initial_rtt = Duration::from_millis(10);
    // Fixed 1200-byte datagrams, as these tests were written for (no MTU probes among the
    // frames they count); `exon/tests/core/mtu.rs` runs path MTU discovery.
    conf.mtu.discovery = false;
    conf.mtu.max_datagram_size = 1200;
    conf
}

/// The fuzz targets' config (and their replays' in `exon/tests/core/fuzz_replays.rs`):
/// small limits, so that records, slots, windows and queues reach their bounds within a few
/// hundred operations, and short idle timeouts and probes.
pub fn fuzz_config() -> Config {
    let mut c = Config::default();
    c.limits.max_receiver_records = 8;
    c.limits.max_sender_records = 4;
    c.limits.max_slots_request = 64;
    c.limits.max_slots_per_record = 128;
    c.flow.window = 32;
    c.flow.envelope_target = 8;
    c.flow.envelope_low = 4;
    c.limits.max_queued_per_peer = 16;
    c.timers.idle_timeout = Duration::from_millis(300);
    c.timers.probe_interval = Duration::from_millis(100);
    c
}

impl Pair {
    /// Two nodes with the same configuration, at rest (nothing sent yet).
    pub fn new(cfg: Config) -> Pair {
        Self::with_configs(cfg.clone(), cfg)
    }

    /// Two durable nodes (empty journals, every record synced at once unless a side's
    /// `auto_sync` is turned off) with the same configuration, at rest.
    pub fn durable(cfg: Config) -> Pair {
        let mut p = Self::new(cfg);
        p.drain(A);
        p.drain(B);
        p.make_durable(A);
        p.make_durable(B);
        p
    }

    /// Two nodes with configurations of their own (`a` for [`A`], `b` for [`B`]).
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
            journal: State::new(),
            unsynced: Vec::new(),
            auto_sync: true,
            stored_msgs: Vec::new(),
            redelivered: Vec::new(),
            doubted_replies: Vec::new(),
        };
        Pair {
            now,
            nodes: [side(A, a), side(B, b)],
            latency: Duration::from_millis(5),
            rate: None,
            link_free: [now; 2],
            in_flight: BinaryHeap::new(),
            payloads: Default::default(),
            seq: 0,
            next_key: 0,
            filter: Box::new(|_| Fate::Deliver),
            log: Vec::new(),
            record: false,
            strays: 0,
        }
    }

    /// Sets what the network does to each datagram.
    pub fn set_filter(&mut self, f: impl FnMut(&Wire) -> Fate + 'static) {
        self.filter = Box::new(f);
    }

    /// The node at index `i`.
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

    /// Drains every output of node `i` into the network and its side's logs (through
    /// [`drain_with`]); with `auto_take`, its application then takes what was delivered, and
    /// the node is drained again for the ACKs.
    pub fn drain(&mut self, i: usize) {
        let now = self.now;
        let peer = id(1 - i);
        let mut wires = Vec::new();
        let mut taken = Vec::new();
        let strays = &mut self.strays;
        let side = &mut self.nodes[i];
        let (auto_store, auto_take) = (side.auto_store, side.auto_take);
        let auto_sync = side.auto_sync;
        if auto_sync {
            // Records left unsynced while syncing was off are synced first.
            side.sync_unsynced(now);
        }
        let mut events = EventLog {
            peer,
            auto_take,
            taken: &mut taken,
            delivered: &mut side.delivered,
            redelivered: &mut side.redelivered,
            untaken: &mut side.untaken,
            acked: &mut side.acked,
            in_doubt: &mut side.in_doubt,
            doubted_replies: &mut side.doubted_replies,
            not_delivered: &mut side.not_delivered,
            stored_msgs: &mut side.stored_msgs,
            liveness: &mut side.liveness,
        };
        let (journal, unsynced) = (&mut side.journal, &mut side.unsynced);
        drain_with(&mut side.node, now, |node, out| match out {
            Drained::Store(w) => {
                if auto_sync {
                    journal.apply(&w.entry);
                    node.handle_stored(now, w.seq);
                } else {
                    unsynced.push(w);
                }
            }
            Drained::StoreClock(hw) => {
                side.stored = hw;
                if auto_store {
                    node.handle_clock_stored(now, hw);
                }
            }
            Drained::Transmit(t, data) => {
                assert!(t.size <= node.config().mtu.max_datagram_size);
                if t.destination == peer {
                    wires.push(Bytes::copy_from_slice(data));
                } else {
                    // For a node outside the pair (tests that inject forged peers): lost.
                    *strays += 1;
                }
            }
            Drained::Event(e) => events.record(e),
        });
        // The application takes what was delivered once the events are read (taking makes
        // no event), and the ACKs go out in the next drain.
        let mut took = false;
        for d in taken {
            took |= side.node.handle_taken(now, d);
        }
        self.put_wires(i, wires);
        if took {
            self.drain(i);
        }
    }

    /// Puts the datagrams node `from` sent on the network, in order, each with the next
    /// sequence number.
    fn put_wires(&mut self, from: usize, wires: Vec<Bytes>) {
        for data in wires {
            let wire = Wire {
                from,
                seq: self.seq,
                data,
            };
            self.seq += 1;
            self.put_on_network(wire);
        }
    }

    /// Turns durable mode on for node `i` (a node that never ran: an empty journal).
    pub fn make_durable(&mut self, i: usize) {
        let now = self.now;
        self.nodes[i]
            .node
            .recover(now, Default::default())
            .expect("a fresh node");
        self.drain(i);
    }

    /// Durable mode: syncs node `i`'s unsynced journal records and reports them durable.
    pub fn sync(&mut self, i: usize) {
        self.drain(i);
        let now = self.now;
        if !self.nodes[i].sync_unsynced(now) {
            return;
        }
        self.drain(i);
    }

    /// Durable mode: node `i` crashes, losing its unsynced journal records and its
    /// untaken deliveries, and restarts from its stored clock and synced journal. What it
    /// saw (`delivered`, `acked`, ...) is kept across the crash.
    pub fn crash_and_recover(&mut self, i: usize) {
        let journal = self.nodes[i].journal.clone();
        self.crash_and_recover_with(i, journal, false);
    }

    /// Durable mode: node `i` crashes, as in [`crash_and_recover`](Self::crash_and_recover),
    /// and restarts from its stored clock with `journal` in place of what it had synced (a
    /// journal deleted, replaced, or restored from an older copy), reported `damaged` or
    /// not. The new node has every rule on.
    pub fn crash_and_recover_with(&mut self, i: usize, journal: State, damaged: bool) {
        let recovered = journal.recovered(damaged);
        self.restart_with(i, journal, recovered);
    }

    /// Durable mode: node `i` crashes and restarts from its stored clock with a new, empty
    /// journal (its own deleted or replaced), and the storage says so
    /// (`Recovered::replaced`): the keys the old journal had accepted are forgotten.
    pub fn crash_with_new_journal(&mut self, i: usize) {
        let journal = State::new();
        let mut recovered = journal.recovered(false);
        recovered.replaced = true;
        self.restart_with(i, journal, recovered);
    }

    /// Node `i` crashes and restarts from its stored clock, recovering `recovered` with
    /// `journal` as what it holds synced.
    fn restart_with(&mut self, i: usize, journal: State, recovered: Recovered) {
        let now = self.now;
        let side = &mut self.nodes[i];
        side.unsynced.clear();
        side.untaken.clear();
        let cfg = side.node.config().clone();
        let mut node = Node::new(id(i), Security::InsecurePlaintext, cfg, side.stored).unwrap();
        node.recover(now, recovered).expect("a fresh node");
        side.journal = journal;
        side.node = node;
        self.drain(i);
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
        let mut at = self.now + self.latency;
        if let Some(rate) = self.rate.filter(|r| *r > 0) {
            let free = &mut self.link_free[wire.from];
            let nanos = wire.data.len() as u64 * 1_000_000_000 / rate;
            *free = (*free).max(self.now) + Duration::from_nanos(nanos);
            at = *free + self.latency;
        }
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
