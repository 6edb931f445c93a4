//! The node's side of the journal: writes numbered in order, and what waits for them.

use std::collections::{BTreeMap, VecDeque};

use crate::proto::journal::{Archive, Entry, Write};
use crate::proto::{DeliveryId, Event, NodeId, PeerMap};

/// What waits for a write to be durable.
#[derive(Debug)]
pub(crate) enum Gate {
    /// A delivery, handed to the application once its `Delivered` record is stored.
    Deliver(Event),
    /// A take, acknowledged once its `Taken` record is stored.
    Take(DeliveryId),
    /// Tokens to `to` in slots below `below` may go out.
    Assigned { to: NodeId, below: u64 },
    /// A verdict, reported once its `Resolved` record is stored; the frontier to `to` may
    /// then pass `slot`.
    Verdict {
        to: NodeId,
        slot: Option<u64>,
        event: Event,
    },
    /// A message accepted by `send` is on stable storage.
    Stored(Event),
}

/// Writes handed out and gates waiting, in durable mode.
#[derive(Debug)]
pub(crate) struct Journal {
    /// The number the next write gets.
    next_seq: u64,
    /// Every write up to this one is durable.
    durable: u64,
    /// Writes not yet handed to the embedding.
    writes: VecDeque<Write>,
    /// Gates by the write they wait for, in order.
    gates: VecDeque<(u64, Gate)>,
    /// Takes waiting for their record: (source, incarnation, slot).
    taking: std::collections::HashSet<(NodeId, u64, u64), foldhash::fast::RandomState>,
    /// Settled messages whose verdict is not stored yet, by destination: slot -> count.
    resolving: PeerMap<BTreeMap<u64, u32>>,
    /// Deliveries remembered for late copies of their tokens.
    pub archive: Archive,
    /// Verdicts of a sender record, waiting to be journalled (the record's sink).
    pub held: Vec<(u64, Event)>,
    /// Incarnations below this were made before the restart: a token for one that the
    /// archive does not know was never delivered (RETRY).
    pub restart_below: u64,
    /// The storage lost records it had made durable: unknown tokens of old incarnations
    /// get DOUBT.
    pub damaged: bool,
}

impl Journal {
    pub fn new(restart_below: u64, damaged: bool) -> Journal {
        Journal {
            next_seq: 1,
            durable: 0,
            writes: VecDeque::new(),
            gates: VecDeque::new(),
            taking: Default::default(),
            resolving: PeerMap::default(),
            archive: Archive::default(),
            held: Vec::new(),
            restart_below,
            damaged,
        }
    }

    /// Queues `entry` for the disk; returns its number.
    pub fn write(&mut self, entry: Entry) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.writes.push_back(Write { seq, entry });
        seq
    }

    /// The number of the last write queued.
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// The next write for the embedding.
    pub fn poll_write(&mut self) -> Option<Write> {
        self.writes.pop_front()
    }

    /// `g` waits for write `seq`.
    pub fn gate(&mut self, seq: u64, g: Gate) {
        if let Gate::Verdict {
            to, slot: Some(s), ..
        } = &g
        {
            *self
                .resolving
                .entry(*to)
                .or_default()
                .entry(*s)
                .or_default() += 1;
        }
        if let Gate::Take(id) = &g {
            let (r, s) = id.slot();
            self.taking.insert((id.from(), r, s));
        }
        self.gates.push_back((seq, g));
    }

    /// Writes up to `through` are durable: the gates they held, in order.
    pub fn on_stored(&mut self, through: u64) -> Vec<Gate> {
        let through = through.min(self.next_seq - 1);
        self.durable = self.durable.max(through);
        let mut open = Vec::new();
        while self
            .gates
            .front()
            .is_some_and(|(seq, _)| *seq <= self.durable)
        {
            let Some((_, g)) = self.gates.pop_front() else {
                break;
            };
            if let Gate::Verdict {
                to, slot: Some(s), ..
            } = &g
            {
                self.resolved(*to, *s);
            }
            if let Gate::Take(id) = &g {
                let (r, s) = id.slot();
                self.taking.remove(&(id.from(), r, s));
            }
            open.push(g);
        }
        open
    }

    fn resolved(&mut self, to: NodeId, s: u64) {
        let Some(m) = self.resolving.get_mut(&to) else {
            return;
        };
        if let Some(c) = m.get_mut(&s) {
            *c -= 1;
            if *c == 0 {
                m.remove(&s);
            }
        }
        if m.is_empty() {
            self.resolving.remove(&to);
        }
    }

    /// The lowest slot to `to` whose verdict is not stored yet: the frontier stays below.
    pub fn frontier_cap(&self, to: NodeId) -> Option<u64> {
        self.resolving.get(&to)?.keys().next().copied()
    }

    /// Whether a take of `(from, r, s)` waits for its record.
    pub fn is_taking(&self, id: &DeliveryId) -> bool {
        let (r, s) = id.slot();
        self.taking.contains(&(id.from(), r, s))
    }

    /// Writes handed out and not yet durable, and gates waiting.
    pub fn backlog(&self) -> (u64, usize) {
        (self.next_seq - 1 - self.durable, self.gates.len())
    }
}
