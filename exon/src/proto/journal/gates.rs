//! The node's side of the journal: writes numbered in order, and what waits for them.

use std::collections::VecDeque;

use crate::proto::journal::pending_slots::PendingSlots;
use crate::proto::journal::{Archive, Entry, Outcome, Write};
use crate::proto::{DeliveryId, Event, MsgId, NodeId, PeerMap};

/// What waits for a write to be durable.
#[derive(Debug)]
pub(crate) enum Gate {
    /// A delivery, handed to the application once its `Delivered` record is stored.
    Deliver(Event),
    /// An early delivery (ETOKEN, ESTOKEN), handed to the application once its own record
    /// is stored and its sender's records are too (`Node::early_ready`).
    DeliverEarly(Event),
    /// A take, acknowledged once its `Taken` record is stored.
    Take(DeliveryId),
    /// Tokens to `to` in slots below `below` may go out.
    Assigned { to: NodeId, below: u64 },
    /// A verdict (an acknowledgement, or a message given up), reported once its `Resolved`
    /// record is stored; the frontier to `to` may then pass `slot`.
    Verdict {
        to: NodeId,
        slot: Option<u64>,
        event: Event,
    },
    /// A message accepted by `send` is on stable storage.
    Stored(Event),
    /// The journal covers incarnations below `below` (a `Covers` record): new ones may be
    /// made up to there.
    Covers { below: u64 },
    /// A message given up (`Node::abandon`) whose verdict was reported at once (the rule
    /// `deadline_verdict_after_record` off): the frontier to `to` may pass `slot` once its
    /// `Resolved` record is stored.
    Released { to: NodeId, slot: u64 },
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
    resolving: PeerMap<PendingSlots>,
    /// Deliveries remembered for late copies of their tokens.
    pub archive: Archive,
    /// Per sender, the frontier below which the archive forgot its taken deliveries: the
    /// journal vouches for no slot below it (`Rules::doubt_below_forgotten`).
    pub forgotten: crate::proto::journal::forgotten::Forgotten,
    /// Verdicts of a sender record, waiting to be journalled (the record's sink).
    pub held: Vec<(u64, Event)>,
    /// The incarnations made before this run that the journal covers (`from..below` of
    /// its `Covers` records at recovery): a token for one that the archive does not know
    /// was never delivered (LOST). Empty for a new journal.
    pub vouched: std::ops::Range<u64>,
    /// The first incarnation of this run: this run's journal holds all its deliveries.
    pub run_start: u64,
    /// Where this journal starts covering (its first `Covers` record's `from`).
    pub covers_from: u64,
    /// Incarnations below this are covered by a durable `Covers` record: new ones may be
    /// made only below it.
    pub covered_below: u64,
    /// The largest `below` written in a `Covers` record.
    pub covers_asked: u64,
    /// The storage lost records it had made durable: unknown tokens of old incarnations
    /// get DOUBT.
    pub damaged: bool,
    /// The highest application key accepted per destination (`Node::send_keyed`): one
    /// integer per destination ever sent to with a key, recovered from the journal.
    pub keys: PeerMap<u64>,
    /// The journal may have forgotten keys it had accepted (`Entry::KeysForgotten`): keyed
    /// sends to a destination not in `keys_settled` are refused.
    pub keys_forgotten: bool,
    /// The destinations the application settled since (`Entry::KeysSettled`).
    pub keys_settled: std::collections::HashSet<NodeId, foldhash::fast::RandomState>,
    /// The layers' marks, as the journal will hold them once its writes are durable.
    pub marks: crate::proto::journal::marks::Marks,
    /// Messages sent held (`Node::send_held`) and not released, acknowledged or not: one
    /// per call the application has open (it releases each when the call ends).
    pub holds: std::collections::HashSet<MsgId, foldhash::fast::RandomState>,
    /// Messages in fragments being delivered again after a restart (`handed`), per source:
    /// their incarnation and its reassembly (one per source; bounded by the credit it
    /// grants, counted with the live records').
    pub revived: PeerMap<(u64, crate::proto::recv::assembler::Assembler)>,
    /// Deliveries an earlier run handed over (`Handed`) and the application did not take:
    /// their senders' copies are delivered again, flagged. Bounded by what the journal
    /// held; each leaves when its copy is delivered again, or when its sender's frontier
    /// passes it (the sender gave it up).
    pub handed: std::collections::HashSet<(NodeId, u64, u64), foldhash::fast::RandomState>,
}

impl Journal {
    /// The journal of a node whose first incarnation of this run is `run_start`, given what
    /// the journal covered at recovery (`Recovered::covers`) and whether it was damaged.
    pub fn new(run_start: u64, covers: Option<(u64, u64)>, damaged: bool) -> Journal {
        let (covers_from, vouched) = match covers {
            // A damaged log lost records it covered: it starts covering again from here,
            // and says so in its next `Covers` record (later recoveries must not vouch for
            // what the damage took, even once the log reads clean).
            Some(_) if damaged => (run_start, run_start..run_start),
            // Incarnations from `run_start` on are this run's, whatever an older record says.
            Some((from, below)) => (from.min(run_start), from..below.min(run_start)),
            None => (run_start, run_start..run_start),
        };
        Journal {
            next_seq: 1,
            durable: 0,
            writes: VecDeque::new(),
            gates: VecDeque::new(),
            taking: Default::default(),
            resolving: PeerMap::default(),
            archive: Archive::default(),
            forgotten: Default::default(),
            held: Vec::new(),
            vouched,
            run_start,
            covers_from,
            covered_below: run_start,
            covers_asked: run_start,
            damaged,
            keys: PeerMap::default(),
            keys_forgotten: false,
            keys_settled: Default::default(),
            marks: Default::default(),
            holds: Default::default(),
            revived: PeerMap::default(),
            handed: Default::default(),
        }
    }

    /// Whether every delivery into incarnation `r` (made before `ck`, the clock now) is in
    /// this journal, so that a slot of `r` the archive does not know was never delivered:
    /// `r` was made by this run, or by an earlier one the journal covered undamaged.
    pub fn vouches_for(&self, r: u64, ck: u64) -> bool {
        (self.run_start <= r && r < ck) || (!self.damaged && self.vouched.contains(&r))
    }

    /// Queues `entry` for the disk; returns its number.
    pub fn write(&mut self, entry: Entry) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.writes.push_back(Write { seq, entry });
        seq
    }

    /// The application was handed the verdicts of `first .. first + count`: a `Reported`
    /// record, merged into the last write if that is one this run extends and it is not
    /// handed out yet (no sync of its own: it rides the next commit).
    pub fn report(&mut self, first: MsgId, count: u64) {
        if let Some(Write {
            entry: Entry::Reported { first: f, count: c },
            ..
        }) = self.writes.back_mut()
        {
            if f.0.checked_add(*c) == Some(first.0) {
                *c = c.saturating_add(count);
                return;
            }
        }
        self.write(Entry::Reported { first, count });
    }

    /// Message `id` to `to` resolved `outcome`: a `Resolved` record, or, when the last
    /// write queued and not yet handed out resolves the message before `id` alike, that
    /// write made a run one longer (`ResolvedRun`: an ACK of a run of slots resolves its
    /// messages one after the other). Returns the number of the write that holds it.
    pub fn resolve(&mut self, id: MsgId, to: NodeId, outcome: Outcome) -> u64 {
        if let Some(w) = self.writes.back_mut() {
            let run = match w.entry {
                Entry::Resolved {
                    id: prev,
                    verdict: Some((t, o)),
                } if t == to && o == outcome && prev.0.checked_add(1) == Some(id.0) => {
                    Some((prev, 1))
                }
                Entry::ResolvedRun {
                    first,
                    count,
                    to: t,
                    outcome: o,
                } if t == to && o == outcome && first.0.checked_add(count) == Some(id.0) => {
                    Some((first, count))
                }
                _ => None,
            };
            if let Some((first, count)) = run {
                w.entry = Entry::ResolvedRun {
                    first,
                    count: count + 1,
                    to,
                    outcome,
                };
                return w.seq;
            }
        }
        self.write(Entry::Resolved {
            id,
            verdict: Some((to, outcome)),
        })
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
        }
        | Gate::Released { to, slot: s } = &g
        {
            self.resolving.entry(*to).or_default().add(*s);
        }
        if let Gate::Take(id) = &g {
            let (r, s) = id.slot();
            self.taking.insert((id.from(), r, s));
        }
        self.gates.push_back((seq, g));
    }

    /// Writes up to `through` are durable: the gates they held open, in order
    /// ([`next_open`](Self::next_open)).
    pub fn on_stored(&mut self, through: u64) {
        let through = through.min(self.next_seq - 1);
        self.durable = self.durable.max(through);
    }

    /// The next gate a durable write opened, in order, if any. Gates added meanwhile wait
    /// for writes not yet durable, so they come after.
    pub fn next_open(&mut self) -> Option<Gate> {
        if self
            .gates
            .front()
            .is_none_or(|(seq, _)| *seq > self.durable)
        {
            return None;
        }
        let (_, g) = self.gates.pop_front()?;
        match &g {
            Gate::Verdict {
                to, slot: Some(s), ..
            }
            | Gate::Released { to, slot: s } => self.resolved(*to, *s),
            Gate::Covers { below } => self.covered_below = self.covered_below.max(*below),
            Gate::Take(id) => {
                let (r, s) = id.slot();
                self.taking.remove(&(id.from(), r, s));
            }
            _ => {}
        }
        Some(g)
    }

    fn resolved(&mut self, to: NodeId, s: u64) {
        let Some(m) = self.resolving.get_mut(&to) else {
            return;
        };
        m.remove(s);
        if m.is_empty() {
            self.resolving.remove(&to);
        }
    }

    /// The lowest slot to `to` whose verdict is not stored yet: the frontier stays below.
    pub fn frontier_cap(&self, to: NodeId) -> Option<u64> {
        self.resolving.get(&to)?.lowest()
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId::from_const(4);
    const B: NodeId = NodeId::from_const(5);

    /// Consecutive messages resolved alike share one record while it waits to be handed
    /// out; another destination, verdict, a gap, or a record already handed out starts
    /// another.
    #[test]
    fn consecutive_verdicts_share_a_record_until_it_is_handed_out() {
        let mut j = Journal::new(0, None, false);
        let ack = Outcome::Acknowledged;
        let first = j.resolve(MsgId(10), A, ack);
        assert_eq!(j.resolve(MsgId(11), A, ack), first);
        assert_eq!(j.resolve(MsgId(12), A, ack), first);
        let other_to = j.resolve(MsgId(13), B, ack);
        let doubt = j.resolve(MsgId(14), B, Outcome::InDoubt);
        let gap = j.resolve(MsgId(16), B, Outcome::InDoubt);
        assert_eq!(
            j.poll_write().map(|w| w.entry),
            Some(Entry::ResolvedRun {
                first: MsgId(10),
                count: 3,
                to: A,
                outcome: ack,
            })
        );
        assert!(first < other_to && other_to < doubt && doubt < gap);
        while j.poll_write().is_some() {}
        let after = j.resolve(MsgId(17), B, Outcome::InDoubt);
        assert!(after > gap, "the run before was handed out");
        assert_eq!(
            j.poll_write().map(|w| w.entry),
            Some(Entry::Resolved {
                id: MsgId(17),
                verdict: Some((B, Outcome::InDoubt)),
            })
        );
    }
}
