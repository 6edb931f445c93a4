//! Replaying journal records: what is still live (to recover from, and to keep when the log
//! is compacted).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::proto::journal::forgotten::{Forgotten, Raised};
use crate::proto::journal::marks::Marks;
use crate::proto::journal::sorted_ring::SortedRing;
use crate::proto::journal::{Entry, Outcome};
use crate::proto::wire::codec::varint_len;
use crate::proto::{MsgId, NodeId, Payload};

/// The live content of a journal, built by replaying its records in order.
///
/// A delivery is live until its sender's frontier passes its slot after it was taken
/// (`Confirmed`); a message sent is live until it is `Resolved`, and its verdict until it
/// is `Reported`; a message sent held (`AcceptedHeld`) and acknowledged stays until it is
/// `Released`. Everything else is forgotten: a quiet node's live state is empty, so its
/// compacted log is too.
#[derive(Debug, Default, Clone)]
pub struct State {
    /// Deliveries by source, then (incarnation, slot). A source with none has no entry.
    inbox: BTreeMap<NodeId, SortedRing<(u64, u64), Delivery>>,
    /// Messages accepted and not resolved.
    outbox: SortedRing<MsgId, RecoveredMessage>,
    /// Verdicts stored and not reported (`Resolved` with a verdict, no `Reported` yet).
    verdicts: SortedRing<MsgId, (NodeId, Outcome, Option<u64>)>,
    /// Messages sent held and acknowledged, not released (`Held` in checkpoints).
    held: SortedRing<MsgId, RecoveredMessage>,
    /// The incarnations the journal covers (`Covers`): `(from, below)`.
    covers: Option<(u64, u64)>,
    /// A `Damaged` record not yet followed by a `Covers` record: recoveries are told the
    /// journal was damaged.
    damage_pending: bool,
    /// The highest application key accepted per destination (`AcceptedKeyed`, `KeyFloor`).
    keys: BTreeMap<NodeId, u64>,
    /// A `KeysForgotten` record stands: keyed sends to a destination not in
    /// `keys_settled` are refused.
    keys_forgotten: bool,
    /// The destinations whose keys the application settled (`KeysSettled`) since the last
    /// `KeysForgotten` record.
    keys_settled: BTreeSet<NodeId>,
    /// The layers' marks (`Mark`, `AcceptedMark`, `TakenMark`): the last value of each.
    marks: Marks,
    /// Deliveries handed over without their payload (`Handed`) and not taken: a restart
    /// flags the sender's copy of these (and of no other slot) as a redelivery.
    handed: BTreeSet<(NodeId, u64, u64)>,
    /// Per sender, the frontier below which its taken deliveries were forgotten
    /// (`Confirmed`): a quiet journal keeps one `Confirmed` record for each.
    forgotten: Forgotten,
    /// Bytes the live records take encoded (what a compaction writes).
    live_bytes: usize,
    /// Room reused by the records that forget many entries at once (no list allocated per
    /// record): always empty between records.
    scratch_keys: Vec<(NodeId, u64, u64)>,
    /// As `scratch_keys`, for message ids.
    scratch_ids: Vec<MsgId>,
}

/// A delivery the journal holds.
#[derive(Debug, Clone, Default)]
struct Delivery {
    /// The payload while the application has not taken it, `None` once taken.
    payload: Option<Bytes>,
    /// Delivered from an early token (`DeliveredEarly`) and not taken: a restart holds it
    /// until its sender says it stored it.
    early: bool,
}

/// A message a restarted sender recovers: sent again in the slot it was first sent in, if
/// it had one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredMessage {
    /// Its stable id.
    pub id: MsgId,
    /// The destination.
    pub to: NodeId,
    /// The message.
    pub payload: Payload,
    /// The receiver incarnation and slot it was assigned, if it became a token.
    pub assigned: Option<(u64, u64)>,
    /// The application's key, for a message sent with `send_keyed`.
    pub key: Option<u64>,
    /// Sent with `send_held`, and not released: an acknowledgement does not forget it.
    pub held: bool,
}

/// A delivery a restarted receiver recovers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredDelivery {
    /// The sending node.
    pub from: NodeId,
    /// The receiver incarnation.
    pub rck: u64,
    /// The slot.
    pub slot: u64,
    /// The payload, while the application has not taken it (`None`: taken, kept only to
    /// acknowledge late copies).
    pub payload: Option<Bytes>,
    /// Delivered from an early token (`DeliveredEarly`): not handed out again before its
    /// sender says it stored it.
    pub early: bool,
}

/// A verdict the journal holds that the application may not have heard (stored, not
/// reported): a restarted node reports it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveredVerdict {
    /// The message's id.
    pub id: MsgId,
    /// Its destination.
    pub to: NodeId,
    /// Its verdict.
    pub outcome: Outcome,
    /// The application's key, for a message sent with `send_keyed`.
    pub key: Option<u64>,
}

/// What a restarted node is given ([`Node::recover`](crate::proto::Node::recover)).
#[derive(Debug, Default, Clone)]
pub struct Recovered {
    /// Deliveries, taken or not, whose sender may still send copies.
    pub deliveries: Vec<RecoveredDelivery>,
    /// Messages accepted and not resolved, oldest first.
    pub messages: Vec<RecoveredMessage>,
    /// Verdicts stored and not known to be reported, oldest first: reported again.
    pub verdicts: Vec<RecoveredVerdict>,
    /// Whether the storage lost records it had made durable (a damaged log): tokens for
    /// what it may have held are then answered DOUBT, not LOST.
    pub damaged: bool,
    /// The incarnations `from..below` whose every delivery the journal holds (its last
    /// `Covers` record), or `None` for a journal that has none: a new one (a first start, a
    /// journal deleted or replaced, durable mode switched on for a node that ran without
    /// it). Tokens of earlier incarnations outside it are answered DOUBT, never LOST.
    pub covers: Option<(u64, u64)>,
    /// The highest application key accepted per destination (`send_keyed`).
    pub keys: Vec<(NodeId, u64)>,
    /// The journal may have forgotten keys it had accepted (a `KeysForgotten` record
    /// stands): keyed sends to a destination not in `keys_settled` are refused until the
    /// application settles it ([`Node::settle_keys`](crate::proto::Node::settle_keys)).
    pub keys_forgotten: bool,
    /// The destinations settled since the journal forgot keys.
    pub keys_settled: Vec<NodeId>,
    /// Set by the storage, not by the journal: the journal is new (or replaced) for a node
    /// that ran before with another one (its clock was kept, its journal lost, deleted or
    /// replaced). The keys that journal had accepted are forgotten: the node records so
    /// (`KeysForgotten`), as it does for a damaged journal.
    pub replaced: bool,
    /// Per sender, the frontier below which its taken deliveries were forgotten: tokens of
    /// covered incarnations below it are answered DOUBT, not LOST (the journal cannot vouch
    /// there; only a sender restored from an older copy of its directory sends them).
    pub forgotten: Vec<(NodeId, u64)>,
    /// The layers' marks: peer, lane and the last value written
    /// ([`Mark`](crate::proto::journal::Mark)).
    pub marks: Vec<(NodeId, u64, Bytes)>,
    /// Messages sent held (`send_held`), acknowledged and not released, oldest first: not
    /// sent again; the node keeps them until [`Node::release`](crate::proto::Node::release).
    pub held: Vec<RecoveredMessage>,
    /// Deliveries handed over without payload and not taken (`Handed`): of the tokens
    /// delivered again, these (and only these) are flagged as redeliveries.
    pub handed: Vec<(NodeId, u64, u64)>,
}

/// The encoded length of a `Delivered` record (as [`Entry::encoded_len`], without building
/// one: no payload handle is cloned).
fn delivered_len(from: NodeId, rck: u64, slot: u64, p: &Bytes) -> usize {
    let v = varint_len;
    1 + v(from.get()) + v(rck) + v(slot) + v(p.len() as u64) + p.len()
}

/// The encoded length of a record of a message sent: `Accepted`, `AcceptedKeyed` (with
/// `key`), `AcceptedHeld` or `Held` (as [`Entry::encoded_len`], without building one).
fn sent_len(m: &RecoveredMessage) -> usize {
    let v = varint_len;
    let len = m.payload.len();
    1 + v(m.id.0) + v(m.to.get()) + m.key.map_or(0, v) + v(len as u64) + len
}

impl State {
    /// An empty state (a new node).
    pub fn new() -> State {
        State::default()
    }

    /// Applies one record.
    pub fn apply(&mut self, e: &Entry) {
        match e {
            Entry::Delivered { .. }
            | Entry::DeliveredEarly { .. }
            | Entry::Handed { .. }
            | Entry::Taken { .. } => self.apply_delivery(e),
            Entry::Confirmed { from, below } => self.confirm(*from, *below),
            Entry::Accepted { id, to, payload } => self.accept(*id, *to, payload, None, false),
            Entry::AcceptedKeyed {
                id,
                to,
                key,
                payload,
            } => {
                self.raise_key(*to, *key);
                self.accept(*id, *to, payload, Some(*key), false);
            }
            Entry::KeyFloor { to, key } => self.raise_key(*to, *key),
            Entry::Assigned { id, rck, slot } => {
                if let Some(m) = self.outbox.get_mut(id) {
                    // A newer assignment (a fresh slot after a RETRY) replaces the last one.
                    if let Some((r, s)) = m.assigned {
                        let old = Entry::Assigned {
                            id: *id,
                            rck: r,
                            slot: s,
                        };
                        self.live_bytes -= old.encoded_len();
                    }
                    self.live_bytes += e.encoded_len();
                    m.assigned = Some((*rck, *slot));
                }
            }
            Entry::Unassigned { id, rck, slot } => self.unassign(*id, *rck, *slot),
            Entry::Resolved { id, verdict } => {
                let acked = matches!(verdict, Some((_, Outcome::Acknowledged)));
                let key = self.resolve(*id, acked);
                if let Some((to, o)) = verdict {
                    self.hold_verdict(*id, (*to, *o, key));
                }
            }
            Entry::ResolvedRun {
                first,
                count,
                to,
                outcome,
            } => self.resolve_run(*first, *count, *to, *outcome),
            Entry::ResolvedKeyed {
                id,
                to,
                outcome,
                key,
            } => {
                self.resolve(*id, *outcome == Outcome::Acknowledged);
                self.hold_verdict(*id, (*to, *outcome, Some(*key)));
            }
            Entry::Reported { first, count } => self.reported(*first, *count),
            Entry::Covers { from, below } => {
                if std::mem::take(&mut self.damage_pending) {
                    self.live_bytes -= Entry::Damaged.encoded_len();
                }
                self.cover(*from, *below)
            }
            Entry::KeysForgotten | Entry::KeysSettled { .. } => self.apply_forgotten_keys(e),
            Entry::Damaged => {
                if !self.damage_pending {
                    self.damage_pending = true;
                    self.live_bytes += e.encoded_len();
                }
            }
            Entry::Replied {
                from,
                rck,
                slot,
                id,
                payload,
            } => {
                self.apply(&Entry::Taken {
                    from: *from,
                    rck: *rck,
                    slot: *slot,
                });
                self.apply(&Entry::Accepted {
                    id: *id,
                    to: *from,
                    payload: payload.clone(),
                });
            }
            Entry::Mark { .. } | Entry::AcceptedMark { .. } | Entry::TakenMark { .. } => {
                self.apply_marked(e)
            }
            Entry::AcceptedHeld { .. }
            | Entry::Held { .. }
            | Entry::Released { .. }
            | Entry::TakenReleased { .. } => self.apply_held(e),
        }
    }

    /// `apply` for a receiver's records of its deliveries: `Delivered`, `Handed`, `Taken`.
    fn apply_delivery(&mut self, e: &Entry) {
        match e {
            Entry::Delivered {
                from,
                rck,
                slot,
                payload,
            }
            | Entry::DeliveredEarly {
                from,
                rck,
                slot,
                payload,
            } => {
                let inbox = self.inbox.entry(*from).or_default();
                if !inbox.contains_key(&(*rck, *slot)) {
                    self.live_bytes += delivered_len(*from, *rck, *slot, payload);
                    let d = Delivery {
                        payload: Some(payload.clone()),
                        early: matches!(e, Entry::DeliveredEarly { .. }),
                    };
                    inbox.insert((*rck, *slot), d);
                }
            }
            Entry::Handed { from, rck, slot } => {
                let key = (*from, *rck, *slot);
                if !self.delivered(key) && self.handed.insert(key) {
                    self.live_bytes += e.encoded_len();
                }
            }
            Entry::Taken { from, rck, slot } => {
                self.unhand((*from, *rck, *slot));
                let old = self
                    .inbox
                    .entry(*from)
                    .or_default()
                    .insert((*rck, *slot), Delivery::default());
                match old {
                    Some(Delivery {
                        payload: Some(p), ..
                    }) => self.live_bytes -= delivered_len(*from, *rck, *slot, &p),
                    Some(_) => return,
                    None => {}
                }
                self.live_bytes += e.encoded_len();
            }
            _ => {}
        }
    }

    /// `apply` for the records of held messages.
    fn apply_held(&mut self, e: &Entry) {
        match e {
            Entry::AcceptedHeld { id, to, payload } => self.accept(*id, *to, payload, None, true),
            Entry::Held { id, to, payload }
                if !self.outbox.contains_key(id) && !self.held.contains_key(id) =>
            {
                self.hold(RecoveredMessage {
                    id: *id,
                    to: *to,
                    payload: payload.clone(),
                    assigned: None,
                    key: None,
                    held: true,
                });
            }
            Entry::Released { id } => self.release(*id),
            Entry::TakenReleased {
                from,
                rck,
                slot,
                id,
            } => {
                self.apply(&Entry::Taken {
                    from: *from,
                    rck: *rck,
                    slot: *slot,
                });
                self.release(*id);
            }
            _ => {}
        }
    }

    /// `apply` for the records that carry a mark.
    fn apply_marked(&mut self, e: &Entry) {
        match e {
            Entry::Mark { peer, lane, value } => self.mark(*peer, *lane, value),
            Entry::AcceptedMark {
                id,
                to,
                lane,
                value,
                payload,
            } => {
                self.accept(*id, *to, payload, None, false);
                self.mark(*to, *lane, value);
            }
            Entry::TakenMark {
                from,
                rck,
                slot,
                lane,
                value,
            } => {
                self.apply(&Entry::Taken {
                    from: *from,
                    rck: *rck,
                    slot: *slot,
                });
                self.mark(*from, *lane, value);
            }
            _ => {}
        }
    }

    /// The mark `(peer, lane)` is `value` now (forgotten if empty).
    fn mark(&mut self, peer: NodeId, lane: u64, value: &Bytes) {
        let change = self.marks.set(peer, lane, value);
        self.live_bytes = self.live_bytes.saturating_add_signed(change);
    }

    /// Message `id` for `to` is accepted (under the application's `key`, if any; `held`
    /// until released).
    fn accept(&mut self, id: MsgId, to: NodeId, payload: &Payload, key: Option<u64>, held: bool) {
        if self.outbox.contains_key(&id) || self.held.contains_key(&id) {
            return;
        }
        let m = RecoveredMessage {
            id,
            to,
            payload: payload.clone(),
            assigned: None,
            key,
            held,
        };
        self.live_bytes += Self::message_len(&m);
        self.outbox.insert(id, m);
    }

    /// `KeysForgotten` (every settlement ends) or `KeysSettled`.
    fn apply_forgotten_keys(&mut self, e: &Entry) {
        match e {
            Entry::KeysForgotten => {
                if !std::mem::replace(&mut self.keys_forgotten, true) {
                    self.live_bytes += e.encoded_len();
                }
                self.keys_settled.clear();
            }
            Entry::KeysSettled { to, key } => {
                self.raise_key(*to, *key);
                if self.keys_forgotten {
                    self.keys_settled.insert(*to);
                }
            }
            _ => {}
        }
    }

    /// `to`'s highest key is at least `key` (kept as one `KeyFloor` record).
    fn raise_key(&mut self, to: NodeId, key: u64) {
        let old = self.keys.get(&to).copied();
        if old.is_some_and(|k| k >= key) {
            return;
        }
        if let Some(k) = old {
            self.live_bytes -= Entry::KeyFloor { to, key: k }.encoded_len();
        }
        self.live_bytes += Entry::KeyFloor { to, key }.encoded_len();
        self.keys.insert(to, key);
    }

    /// Message `id` left slot `slot` of incarnation `rck`: unless a later assignment
    /// replaced that one, a recovery sends it in a fresh slot.
    fn unassign(&mut self, id: MsgId, rck: u64, slot: u64) {
        let Some(m) = self.outbox.get_mut(&id) else {
            return;
        };
        if m.assigned == Some((rck, slot)) {
            m.assigned = None;
            self.live_bytes -= Entry::Assigned { id, rck, slot }.encoded_len();
        }
    }

    /// `from`'s frontier passed `below`: its taken deliveries below are forgotten, and the
    /// journal says so (one `Confirmed` record per sender stays live).
    fn confirm(&mut self, from: NodeId, below: u64) {
        let len = |from, below| Entry::Confirmed { from, below }.encoded_len();
        if let Raised::Kept { before, dropped } = self.forgotten.raise(from, below) {
            if let Some(b) = before {
                self.live_bytes -= len(from, b);
            }
            if let Some((p, b)) = dropped {
                self.live_bytes -= len(p, b);
            }
            self.live_bytes += len(from, self.forgotten.below(from));
        }
        let all = (from, 0, 0)..=(from, u64::MAX, u64::MAX);
        // A slot handed over and passed by the frontier: its sender holds no copy any more
        // (it gave the message up), so none comes back to flag.
        let mut keys = std::mem::take(&mut self.scratch_keys);
        keys.extend(self.handed.range(all).filter(|k| k.2 < below));
        for &key in &keys {
            self.unhand(key);
        }
        keys.clear();
        self.scratch_keys = keys;
        let Some(inbox) = self.inbox.get_mut(&from) else {
            return;
        };
        let live_bytes = &mut self.live_bytes;
        inbox.remove_where(
            |&(_, slot), d| slot < below && d.payload.is_none(),
            |(rck, slot), _| *live_bytes -= Entry::Taken { from, rck, slot }.encoded_len(),
        );
        if inbox.is_empty() {
            self.inbox.remove(&from);
        }
    }

    /// The hand-over of `key` is no longer live (taken, or passed by the frontier).
    fn unhand(&mut self, key: (NodeId, u64, u64)) {
        if self.handed.remove(&key) {
            let (from, rck, slot) = key;
            self.live_bytes -= Entry::Handed { from, rck, slot }.encoded_len();
        }
    }

    /// Message `id` is resolved (`acked`: acknowledged): it leaves the outbox, for the held
    /// messages if it was sent held and is acknowledged. Returns its key, if it had one.
    fn resolve(&mut self, id: MsgId, acked: bool) -> Option<u64> {
        let m = self.outbox.remove(&id)?;
        self.live_bytes -= Self::message_len(&m);
        let key = m.key;
        if m.held && acked {
            self.hold(m);
        }
        key
    }

    /// Message `m`, sent held, is acknowledged: kept until released.
    fn hold(&mut self, mut m: RecoveredMessage) {
        m.assigned = None;
        self.live_bytes += sent_len(&m);
        self.held.insert(m.id, m);
    }

    /// Held message `id` is released: forgotten if acknowledged, an ordinary message
    /// (forgotten once resolved) if not yet.
    fn release(&mut self, id: MsgId) {
        if let Some(m) = self.outbox.get_mut(&id) {
            // `Accepted` and `AcceptedHeld` are the same length.
            m.held = false;
        } else if let Some(m) = self.held.remove(&id) {
            self.live_bytes -= sent_len(&m);
        }
    }

    /// The checkpoint record of a held message acknowledged.
    fn held_entry(m: &RecoveredMessage) -> Entry {
        Entry::Held {
            id: m.id,
            to: m.to,
            payload: m.payload.clone(),
        }
    }

    /// A verdict stored, held until reported.
    fn hold_verdict(&mut self, id: MsgId, v: (NodeId, Outcome, Option<u64>)) {
        // A second verdict for one id (records out of order on a damaged disk) replaces
        // the first, whose record may be of another length.
        if let Some(old) = self.verdicts.insert(id, v) {
            self.live_bytes -= Self::verdict_entry(id, old).encoded_len();
        }
        self.live_bytes += Self::verdict_entry(id, v).encoded_len();
    }

    /// The record that keeps verdict `v` of message `id` (`ResolvedKeyed` for a keyed one).
    fn verdict_entry(id: MsgId, (to, outcome, key): (NodeId, Outcome, Option<u64>)) -> Entry {
        match key {
            Some(key) => Entry::ResolvedKeyed {
                id,
                to,
                outcome,
                key,
            },
            None => Entry::Resolved {
                id,
                verdict: Some((to, outcome)),
            },
        }
    }

    /// A `Reported` record: the verdicts of `first .. first + count` are forgotten.
    /// A `ResolvedRun` record: each message of the run the journal holds resolved as by its
    /// own `Resolved` record (only those it holds: the run's length comes from the disk).
    fn resolve_run(&mut self, first: MsgId, count: u64, to: NodeId, outcome: Outcome) {
        let end = MsgId(first.0.saturating_add(count));
        let acked = outcome == Outcome::Acknowledged;
        let mut ids = std::mem::take(&mut self.scratch_ids);
        ids.extend(self.outbox.range(first, end).map(|(id, _)| *id));
        for &id in &ids {
            let key = self.resolve(id, acked);
            self.hold_verdict(id, (to, outcome, key));
        }
        ids.clear();
        self.scratch_ids = ids;
    }

    fn reported(&mut self, first: MsgId, count: u64) {
        let end = MsgId(first.0.saturating_add(count));
        let mut ids = std::mem::take(&mut self.scratch_ids);
        ids.extend(self.verdicts.range(first, end).map(|(id, _)| *id));
        for &id in &ids {
            if let Some(v) = self.verdicts.remove(&id) {
                self.live_bytes -= Self::verdict_entry(id, v).encoded_len();
            }
        }
        ids.clear();
        self.scratch_ids = ids;
    }

    /// A `Covers` record: the journal's start, extended or started again.
    fn cover(&mut self, from: u64, below: u64) {
        // The journal's first record says where it starts; later ones extend it, or
        // start it again higher (after damage lost records it covered).
        let (from, below) = match self.covers {
            Some((f, b)) => {
                self.live_bytes -= Entry::Covers { from: f, below: b }.encoded_len();
                if from > f {
                    (from, below)
                } else {
                    (f, b.max(below))
                }
            }
            None => (from, below),
        };
        self.live_bytes += Entry::Covers { from, below }.encoded_len();
        self.covers = Some((from, below));
    }

    /// The record that accepted `m` (`AcceptedKeyed` for a keyed message, `AcceptedHeld`
    /// for a held one).
    fn accepted(m: &RecoveredMessage) -> Entry {
        match m.key {
            Some(key) => Entry::AcceptedKeyed {
                id: m.id,
                to: m.to,
                key,
                payload: m.payload.clone(),
            },
            None if m.held => Entry::AcceptedHeld {
                id: m.id,
                to: m.to,
                payload: m.payload.clone(),
            },
            None => Entry::Accepted {
                id: m.id,
                to: m.to,
                payload: m.payload.clone(),
            },
        }
    }

    fn message_len(m: &RecoveredMessage) -> usize {
        let v = varint_len;
        let assigned = m
            .assigned
            .map_or(0, |(rck, slot)| 1 + v(m.id.0) + v(rck) + v(slot));
        sent_len(m) + assigned
    }

    /// Whether nothing is live but the journal's coverage and its keys (a compacted log
    /// would be its one `Covers` record and a `KeyFloor` per destination sent keyed).
    pub fn is_empty(&self) -> bool {
        self.inbox.is_empty()
            && self.handed.is_empty()
            && self.outbox.is_empty()
            && self.verdicts.is_empty()
            && self.held.is_empty()
            && !self.damage_pending
    }

    /// Every delivery held, by (source, incarnation, slot) ascending.
    fn deliveries(&self) -> impl Iterator<Item = ((NodeId, u64, u64), &Delivery)> + '_ {
        self.inbox.iter().flat_map(|(&from, ring)| {
            ring.iter()
                .map(move |(&(rck, slot), d)| ((from, rck, slot), d))
        })
    }

    /// Whether the delivery of `key` is held (taken or not).
    fn delivered(&self, (from, rck, slot): (NodeId, u64, u64)) -> bool {
        self.inbox
            .get(&from)
            .is_some_and(|r| r.contains_key(&(rck, slot)))
    }

    /// Bytes the live records take encoded: what a compaction writes.
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    /// Deliveries remembered, and messages not resolved.
    pub fn counts(&self) -> (usize, usize) {
        let inbox = self.inbox.values().map(SortedRing::len).sum();
        (inbox, self.outbox.len())
    }

    /// Verdicts stored and not reported.
    pub fn unreported(&self) -> usize {
        self.verdicts.len()
    }

    /// Messages sent held, acknowledged and not released.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The records that rebuild this state, for a compaction: replaying them gives the
    /// same state.
    pub fn live_entries(&self) -> impl Iterator<Item = Entry> + '_ {
        let covers = self
            .covers
            .map(|(from, below)| Entry::Covers { from, below });
        let inbox = self
            .deliveries()
            .map(|((from, rck, slot), d)| match &d.payload {
                Some(payload) if d.early => Entry::DeliveredEarly {
                    from,
                    rck,
                    slot,
                    payload: payload.clone(),
                },
                Some(payload) => Entry::Delivered {
                    from,
                    rck,
                    slot,
                    payload: payload.clone(),
                },
                None => Entry::Taken { from, rck, slot },
            });
        let handed = self
            .handed
            .iter()
            .map(|&(from, rck, slot)| Entry::Handed { from, rck, slot });
        // Settled destinations after the `KeysForgotten` record that would end them.
        let keys_forgotten = self.keys_forgotten.then_some(Entry::KeysForgotten);
        let keys = self.keys.iter().map(|(&to, &key)| {
            if self.keys_settled.contains(&to) {
                Entry::KeysSettled { to, key }
            } else {
                Entry::KeyFloor { to, key }
            }
        });
        let forgotten = self
            .forgotten
            .iter()
            .map(|(from, below)| Entry::Confirmed { from, below });
        let outbox = self.outbox.values().flat_map(|m| {
            let accepted = Self::accepted(m);
            let assigned = m.assigned.map(|(rck, slot)| Entry::Assigned {
                id: m.id,
                rck,
                slot,
            });
            std::iter::once(accepted).chain(assigned)
        });
        let verdicts = self
            .verdicts
            .iter()
            .map(|(&id, &v)| Self::verdict_entry(id, v));
        let marks = self.marks.iter().map(|(peer, lane, value)| Entry::Mark {
            peer,
            lane,
            value: value.clone(),
        });
        let held = self.held.values().map(Self::held_entry);
        // Last, after the `Covers` record it must not be cleared by.
        let damaged = self.damage_pending.then_some(Entry::Damaged);
        covers
            .into_iter()
            .chain(keys_forgotten)
            .chain(keys)
            .chain(forgotten)
            .chain(marks)
            .chain(inbox)
            .chain(handed)
            .chain(outbox)
            .chain(held)
            .chain(verdicts)
            .chain(damaged)
    }

    /// The highest application key accepted per destination (`send_keyed`): a quiet
    /// journal keeps one `KeyFloor` record for each.
    pub fn keys(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.keys.iter().map(|(&to, &key)| (to, key))
    }

    /// Whether a `KeysForgotten` record stands: a quiet journal keeps it (and one
    /// `KeysSettled` in place of `KeyFloor` for each destination settled since).
    pub fn keys_forgotten(&self) -> bool {
        self.keys_forgotten
    }

    /// Per sender, the frontier below which its taken deliveries were forgotten: a quiet
    /// journal keeps one `Confirmed` record for each.
    pub fn forgotten(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.forgotten.iter()
    }

    /// The incarnations the journal covers: `(from, below)` of its `Covers` records.
    pub fn covers(&self) -> Option<(u64, u64)> {
        self.covers
    }

    /// What a restarted node is given; `damaged` says the log lost durable records.
    pub fn recovered(&self, damaged: bool) -> Recovered {
        Recovered {
            deliveries: self
                .deliveries()
                .map(|((from, rck, slot), d)| RecoveredDelivery {
                    from,
                    rck,
                    slot,
                    payload: d.payload.clone(),
                    early: d.early,
                })
                .collect(),
            messages: self.outbox.values().cloned().collect(),
            verdicts: self
                .verdicts
                .iter()
                .map(|(&id, &(to, outcome, key))| RecoveredVerdict {
                    id,
                    to,
                    outcome,
                    key,
                })
                .collect(),
            damaged: damaged || self.damage_pending,
            covers: self.covers,
            keys: self.keys.iter().map(|(&to, &key)| (to, key)).collect(),
            keys_forgotten: self.keys_forgotten,
            keys_settled: self.keys_settled.iter().copied().collect(),
            replaced: false,
            forgotten: self.forgotten.iter().collect(),
            marks: self
                .marks
                .iter()
                .map(|(p, l, v)| (p, l, v.clone()))
                .collect(),
            held: self.held.values().cloned().collect(),
            handed: self.handed.iter().copied().collect(),
        }
    }

    /// The layers' live marks: peer, lane, value (a quiet journal keeps one `Mark` record
    /// for each).
    pub fn marks(&self) -> impl Iterator<Item = (NodeId, u64, &Bytes)> + '_ {
        self.marks.iter()
    }
}

#[cfg(test)]
mod tests;
