//! Sequences the `node_input` fuzz target found, replayed as plain tests: two plaintext nodes
//! with the fuzz target's small limits, honest datagrams delivered or duplicated in the
//! order the fuzzer chose (what is never delivered is lost), then each node cut off in turn
//! for a minute and the network healed until every message has its verdict.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Event, Frame, MsgId, Node, NodeId, Packet, Rules, Security, Transmit};
use exon_testkit::drain_taking;

/// One step of a replay (the fuzz target's honest operations).
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Node `from` (0 or 1) sends a fresh message to the other; `large`: a few KB, fragmented.
    Send { from: usize, large: bool },
    /// Time moves on by this many milliseconds and due timers run.
    Advance(u64),
    /// Deliver the in-flight datagram at this index (mod the queue length).
    Deliver(usize),
    /// Deliver it and keep a copy in flight.
    Duplicate(usize),
}

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

struct World {
    now: Instant,
    nodes: [Node; 2],
    in_flight: Vec<(usize, Bytes)>,
    next_msg: u64,
    /// Each node's messages by the id `send` returned.
    ids: [HashMap<MsgId, Bytes>; 2],
    delivered: HashSet<Bytes>,
    /// Messages with a verdict (acknowledged or otherwise settled), by sender.
    settled: [HashSet<MsgId>; 2],
}

impl World {
    fn new() -> Self {
        World {
            now: Instant::now(),
            nodes: [
                Node::new(
                    A,
                    Security::InsecurePlaintext,
                    exon_testkit::pair::fuzz_config(),
                    0,
                )
                .unwrap(),
                Node::new(
                    B,
                    Security::InsecurePlaintext,
                    exon_testkit::pair::fuzz_config(),
                    1 << 20,
                )
                .unwrap(),
            ],
            in_flight: Vec::new(),
            next_msg: 0,
            ids: [HashMap::new(), HashMap::new()],
            delivered: HashSet::new(),
            settled: [HashSet::new(), HashSet::new()],
        }
    }

    fn drain(&mut self, i: usize) {
        let peer = [A, B][1 - i];
        let in_flight = &mut self.in_flight;
        let (delivered, ids, settled) = (&mut self.delivered, &self.ids[i], &mut self.settled[i]);
        let to_peer = |_: &Node, t: Transmit, d: &[u8]| {
            if t.destination == peer && in_flight.len() < 256 {
                in_flight.push((1 - i, Bytes::copy_from_slice(d)));
            }
        };
        drain_taking(&mut self.nodes[i], self.now, to_peer, |e| match e {
            Event::Delivered { payload, .. } => {
                assert!(delivered.insert(payload), "delivered twice");
            }
            Event::Acknowledged { ids: acked, .. } => {
                for id in acked {
                    assert!(
                        delivered.contains(&ids[&id]),
                        "acknowledged, never delivered"
                    );
                    assert!(settled.insert(id), "two verdicts");
                }
            }
            Event::InDoubt { id, .. } | Event::NotDelivered { id, .. } => {
                assert!(settled.insert(id), "two verdicts");
            }
            _ => {}
        });
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Send { from, large } => {
                let mut payload = self.next_msg.to_be_bytes().to_vec();
                if large {
                    payload.resize(3000 + (self.next_msg as usize % 1000), 7);
                    payload.extend_from_slice(&self.next_msg.to_be_bytes());
                }
                self.next_msg += 1;
                let payload = Bytes::from(payload);
                if let Ok(id) = self.nodes[from].send(self.now, [A, B][1 - from], payload.clone()) {
                    self.ids[from].insert(id, payload);
                }
                self.drain(from);
            }
            Op::Advance(ms) => {
                self.now += Duration::from_millis(ms);
                for i in 0..2 {
                    self.nodes[i].handle_timeout(self.now);
                    self.drain(i);
                }
            }
            Op::Deliver(k) | Op::Duplicate(k) if !self.in_flight.is_empty() => {
                let k = k % self.in_flight.len();
                let (to, d) = match op {
                    Op::Duplicate(_) => self.in_flight[k].clone(),
                    _ => self.in_flight.swap_remove(k),
                };
                self.nodes[to].handle_datagram(self.now, d);
                self.drain(to);
            }
            _ => {}
        }
    }

    /// Whether node `i` has messages without a verdict.
    fn owes(&self, i: usize) -> bool {
        self.ids[i].keys().any(|id| !self.settled[i].contains(id))
    }

    /// For `secs` seconds of virtual time nothing node `mute` sends arrives (what is in
    /// flight is lost too): the other node's timers alone must make it ask about the
    /// messages it still awaits verdicts for. Returns how many datagrams carrying a TOKEN or
    /// FRAG it sent meanwhile.
    fn outage(&mut self, mute: usize, secs: u64) -> usize {
        let end = self.now + Duration::from_secs(secs);
        let mut asked = 0;
        self.in_flight.clear();
        loop {
            for (to, d) in std::mem::take(&mut self.in_flight) {
                if to != mute {
                    continue;
                }
                let p = Packet::decode(&d).expect("an honest datagram");
                asked += usize::from(
                    p.frames
                        .iter()
                        .any(|f| matches!(f, Frame::Frag { .. } | Frame::Token { .. })),
                );
                self.nodes[to].handle_datagram(self.now, d);
                self.drain(to);
            }
            let next = self.nodes.iter_mut().filter_map(|n| n.poll_timeout()).min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for i in 0..2 {
                        self.nodes[i].handle_timeout(self.now);
                        self.drain(i);
                    }
                }
                _ => break,
            }
        }
        self.now = end;
        asked
    }

    /// Heals the network: everything in flight arrives, timers run, until both nodes are
    /// quiet; then every message sent has exactly one verdict.
    fn settle(&mut self) {
        for _ in 0..100_000 {
            while let Some((to, d)) = self.in_flight.pop() {
                self.nodes[to].handle_datagram(self.now, d);
                self.drain(to);
            }
            let next = self.nodes.iter_mut().filter_map(|n| n.poll_timeout()).min();
            match next {
                Some(t) => {
                    self.now = self.now.max(t);
                    for i in 0..2 {
                        self.nodes[i].handle_timeout(self.now);
                        self.drain(i);
                    }
                }
                None if self.in_flight.is_empty() => break,
                None => {}
            }
        }
        for i in 0..2 {
            for (id, payload) in &self.ids[i] {
                assert!(
                    self.settled[i].contains(id),
                    "message {payload:?} from node {i} never got its verdict"
                );
            }
        }
    }
}

/// Replays `ops` on two nodes under `rules`.
fn replay(ops: &[Op], rules: Rules) -> World {
    let mut w = World::new();
    for n in &mut w.nodes {
        n.set_rules(rules);
    }
    for &op in ops {
        w.apply(op);
    }
    w
}

/// Cuts each node of `w` off in turn for a minute: returns whether each node that awaited
/// verdicts asked again on its own meanwhile.
fn asks_on_its_own(w: &mut World) -> bool {
    let mut all = true;
    for mute in [0, 1] {
        let owes = w.owes(1 - mute);
        let asked = w.outage(mute, 60);
        all &= !owes || asked > 0;
    }
    all
}

/// Found by `node_input` (2026-12-03): B sends a large message to A through 26-second gaps
/// (records forgotten, the message resent); a stale GOT makes B queue part of it again
/// after it was whole at A, a fresh GOT shows it whole again while it waits behind the
/// pacer, and the retransmission timer, expiring then, passes it over as queued. Leaving
/// the queue with nothing to send, it had no timer: an ACK lost then was never asked for
/// again (A's probes, while it held free slots, were all that could rescue it).
fn found_after_idle_gaps() -> Vec<Op> {
    use Op::*;
    let mut ops = vec![
        Duplicate(127),
        Send {
            from: 1,
            large: true,
        },
        Duplicate(127),
        Deliver(79),
    ];
    ops.extend([Deliver(103); 7]);
    ops.extend([
        Advance(26471),
        Advance(26471),
        Deliver(103),
        Duplicate(127),
        Deliver(79),
    ]);
    ops.extend([Deliver(103); 7]);
    ops.push(Advance(26418));
    ops
}

#[test]
fn a_message_whole_at_its_receiver_keeps_a_timer_after_leaving_the_queue() {
    let mut w = replay(&found_after_idle_gaps(), Rules::ALL);
    assert!(w.owes(1), "the replay leaves B awaiting its verdict");
    assert!(
        asks_on_its_own(&mut w),
        "a sender awaiting verdicts asked nothing"
    );
    w.settle();
}

/// The rule that keeps it: off, B asks nothing while A is cut off.
#[test]
fn without_whole_awaits_verdict_the_unqueued_message_has_no_timer() {
    let mut rules = Rules::ALL;
    rules.whole_awaits_verdict = false;
    let mut w = replay(&found_after_idle_gaps(), rules);
    assert!(w.owes(1));
    assert!(!asks_on_its_own(&mut w));
}
