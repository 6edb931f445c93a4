//! The records of the journal and their encoding (what the storage layer writes).

use bytes::{BufMut, Bytes, BytesMut};

use crate::proto::codec::{put_varint, varint_len, Reader};
use crate::proto::journal::marks::MAX_MARK_BYTES;
use crate::proto::{MsgId, NodeId, Payload};

/// One journal record. Encoded as a kind byte and QUIC-style variable-length integers, the
/// payloads length-prefixed (`docs/durability.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Receiver: a token from `from` filled slot `slot` of incarnation `rck` with `payload`.
    Delivered {
        /// The sending node.
        from: NodeId,
        /// The receiver incarnation.
        rck: u64,
        /// The slot.
        slot: u64,
        /// The message.
        payload: Bytes,
    },
    /// Receiver: an early token (ETOKEN, sent before its sender's records were stored)
    /// from `from` filled slot `slot` of incarnation `rck` with `payload`. As `Delivered`,
    /// but a restart does not hand it out again before its sender says it stored it
    /// (`docs/durability.md`, "Syncs that overlap").
    DeliveredEarly {
        /// The sending node.
        from: NodeId,
        /// The receiver incarnation.
        rck: u64,
        /// The slot.
        slot: u64,
        /// The message.
        payload: Bytes,
    },
    /// Receiver: the application took the delivery in `(from, rck, slot)`.
    Taken {
        /// The sending node.
        from: NodeId,
        /// The receiver incarnation.
        rck: u64,
        /// The slot.
        slot: u64,
    },
    /// Receiver: `from`'s collection frontier passed `below`: it holds no token below it, so
    /// the taken deliveries of `from` below it need not be remembered.
    Confirmed {
        /// The sending node.
        from: NodeId,
        /// The frontier.
        below: u64,
    },
    /// Sender: `send` accepted message `id` for `to`.
    Accepted {
        /// The message's id (stable across restarts).
        id: MsgId,
        /// The destination.
        to: NodeId,
        /// The message.
        payload: Payload,
    },
    /// Sender: message `id` became a token in slot `slot` of receiver incarnation `rck`.
    Assigned {
        /// The message's id.
        id: MsgId,
        /// The receiver incarnation.
        rck: u64,
        /// The slot.
        slot: u64,
    },
    /// Sender: message `id` left slot `slot` of receiver incarnation `rck` (a RETRY or
    /// LOST): undoes the `Assigned` record of that slot, so that a recovery sends it in a
    /// fresh one. The sender's frontier passes the slot only once this is durable.
    Unassigned {
        /// The message's id.
        id: MsgId,
        /// The receiver incarnation of the slot it left.
        rck: u64,
        /// The slot it left.
        slot: u64,
    },
    /// Sender: message `id` has its verdict; it is forgotten, its verdict kept until a
    /// `Reported` record covers it (a restart reports it again until then).
    Resolved {
        /// The message's id.
        id: MsgId,
        /// Its destination and verdict; `None` in records written before verdicts were
        /// kept (nothing to report).
        verdict: Option<(NodeId, Outcome)>,
    },
    /// Sender: messages `first .. first + count`, all to `to`, have the same verdict:
    /// as that many `Resolved` records (written as one when consecutive messages are
    /// resolved together, as an ACK of a run of slots resolves them).
    ResolvedRun {
        /// The first id of the run.
        first: MsgId,
        /// How many consecutive ids (at least 2).
        count: u64,
        /// Their destination.
        to: NodeId,
        /// Their verdict.
        outcome: Outcome,
    },
    /// Sender: the verdicts of messages `first .. first + count` were handed to the
    /// application; the journal forgets them.
    Reported {
        /// The first id of the run.
        first: MsgId,
        /// How many consecutive ids.
        count: u64,
    },
    /// Receiver and sender at once: the application took the delivery in
    /// `(from, rck, slot)` and, in the same record, `send` accepted message `id` for `from`
    /// (a reply). One record, so a crash keeps both or neither: replayed as `Taken` then
    /// `Accepted`.
    Replied {
        /// The sending node of the delivery, and the destination of the reply.
        from: NodeId,
        /// The receiver incarnation of the delivery.
        rck: u64,
        /// The slot of the delivery.
        slot: u64,
        /// The reply's id (stable across restarts).
        id: MsgId,
        /// The reply.
        payload: Payload,
    },
    /// Receiver: every delivery into this node's incarnations in `from..below` is in this
    /// journal. A new journal's first record has `from` = the clock the node started at
    /// (incarnations made before it, by a run without this journal, are not covered), and
    /// `below` grows with the clock's high-water mark; a checkpoint carries the last one.
    Covers {
        /// The first incarnation the journal covers.
        from: u64,
        /// Incarnations below this are covered (the clock's high-water mark, plus one).
        below: u64,
    },
    /// Sender: `send_keyed` accepted message `id` for `to` under the application's key
    /// `key` (`Accepted` and the destination's new highest key in one record, so a crash
    /// keeps both or neither).
    AcceptedKeyed {
        /// The message's id (stable across restarts).
        id: MsgId,
        /// The destination.
        to: NodeId,
        /// The application's key: above every key accepted for `to` before.
        key: u64,
        /// The message.
        payload: Payload,
    },
    /// Sender: the highest application key accepted for `to` (a checkpoint's record of a
    /// destination's keys once its keyed messages are resolved: one integer per
    /// destination).
    KeyFloor {
        /// The destination.
        to: NodeId,
        /// The highest key accepted for it.
        key: u64,
    },
    /// Sender, in checkpoints only: `Resolved` with its verdict for a message sent under
    /// the application's `key` (so the verdict reported again after a restart names the
    /// key after its `AcceptedKeyed` record is compacted away).
    ResolvedKeyed {
        /// The message's id.
        id: MsgId,
        /// Its destination.
        to: NodeId,
        /// Its verdict.
        outcome: Outcome,
        /// The application's key.
        key: u64,
    },
    /// A layer above the core keeps `value` under `(peer, lane)` (a
    /// [`Mark`](crate::proto::journal::Mark)); an empty value forgets it. Written alone, and
    /// in checkpoints (one per live mark).
    Mark {
        /// The peer the mark is about.
        peer: NodeId,
        /// The layer's lane.
        lane: u64,
        /// The value (at most [`MAX_MARK_BYTES`]).
        value: Bytes,
    },
    /// Sender: `send_marked` accepted message `id` for `to`, and in the same record the
    /// mark `(to, lane)` became `value` (replayed as `Accepted` then `Mark`).
    AcceptedMark {
        /// The message's id (stable across restarts).
        id: MsgId,
        /// The destination.
        to: NodeId,
        /// The mark's lane.
        lane: u64,
        /// The mark's new value.
        value: Bytes,
        /// The message.
        payload: Payload,
    },
    /// Receiver: the application took the delivery in `(from, rck, slot)` and in the same
    /// record the mark `(from, lane)` became `value` (replayed as `Taken` then `Mark`).
    TakenMark {
        /// The sending node.
        from: NodeId,
        /// The receiver incarnation.
        rck: u64,
        /// The slot.
        slot: u64,
        /// The mark's lane.
        lane: u64,
        /// The mark's new value.
        value: Bytes,
    },
    /// Sender: `send_held` accepted message `id` for `to`: as `Accepted`, and an
    /// `Acknowledged` verdict does not forget it: it stays (as `Held` in checkpoints) until
    /// a `Released` record (a caller's request, kept until its reply is taken or its call
    /// ends).
    AcceptedHeld {
        /// The message's id (stable across restarts).
        id: MsgId,
        /// The destination.
        to: NodeId,
        /// The message.
        payload: Payload,
    },
    /// Sender, in checkpoints only: message `id` for `to`, accepted held, was acknowledged
    /// and is not released yet.
    Held {
        /// The message's id.
        id: MsgId,
        /// The destination.
        to: NodeId,
        /// The message.
        payload: Payload,
    },
    /// Sender: the application released held message `id` (its call ended without taking
    /// a reply: its deadline passed, it failed, it was dropped); the journal forgets it once
    /// it is resolved.
    Released {
        /// The message's id.
        id: MsgId,
    },
    /// Receiver and sender at once: the application took the delivery in
    /// `(from, rck, slot)`, the reply to held message `id`, and released `id`, in one
    /// record (a crash keeps both or neither): replayed as `Taken` then `Released`.
    TakenReleased {
        /// The sending node of the delivery.
        from: NodeId,
        /// The receiver incarnation of the delivery.
        rck: u64,
        /// The slot of the delivery.
        slot: u64,
        /// The held message released.
        id: MsgId,
    },
    /// Receiver (`Rules::deliver_from_senders_copy`): the delivery in `(from, rck, slot)`,
    /// sent as STOKEN or SFRAG (its sender keeps the payload until the ACK), is handed to
    /// the application once this is stored. No payload. After a restart, the sender's copy
    /// of a slot with this record and no `Taken` is delivered again, flagged as a
    /// redelivery; the record goes with the `Taken`, or once `from`'s frontier passes the
    /// slot (`Confirmed`: its sender gave it up).
    Handed {
        /// The sending node.
        from: NodeId,
        /// The receiver incarnation.
        rck: u64,
        /// The slot.
        slot: u64,
    },
    /// The journal found records that were synced damaged when it was opened, and cut them
    /// (written and synced by the journal itself, before the node recovers). Until the
    /// next `Covers` record (which the restarted node writes once it has resolved in doubt
    /// every message it recovered), every recovery is told the journal was damaged: the
    /// cut leaves a log that reads clean, and a crash before that `Covers` record is
    /// synced must not make the next run vouch for what the damage took.
    Damaged,
    /// Sender: the journal may have forgotten application keys it had accepted (it was
    /// found damaged, or is new for a node that ran before, `Recovered::replaced`): a
    /// keyed send to a destination not settled since (`KeysSettled`) is refused
    /// (`SendError::KeysForgotten`). Written by the restarted node; ends the settlements
    /// before it.
    KeysForgotten,
    /// Sender: the application settled `to`'s keys after the journal forgot some
    /// (`Node::settle_keys`): keys up to `key` count as accepted, and keyed sends to `to`
    /// above it are accepted again.
    KeysSettled {
        /// The destination.
        to: NodeId,
        /// The highest key that counts as accepted for it.
        key: u64,
    },
}

/// The verdict a `Resolved` record keeps until it is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Taken by the receiving application (`Event::Acknowledged`).
    Acknowledged,
    /// Certainly not delivered (`Event::NotDelivered`).
    NotDelivered,
    /// Delivered at most once, maybe not at all (`Event::InDoubt`).
    InDoubt,
}

impl Outcome {
    fn code(self) -> u64 {
        match self {
            Outcome::Acknowledged => 1,
            Outcome::NotDelivered => 2,
            Outcome::InDoubt => 3,
        }
    }

    fn from_code(c: u64) -> Option<Outcome> {
        match c {
            1 => Some(Outcome::Acknowledged),
            2 => Some(Outcome::NotDelivered),
            3 => Some(Outcome::InDoubt),
            _ => None,
        }
    }
}

/// Why bytes are not a journal record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The record ends too early, or has bytes left over.
    #[error("journal record truncated or too long")]
    Length,
    /// Unknown record kind.
    #[error("unknown journal record kind {0}")]
    Kind(u8),
    /// A node id out of range.
    #[error("node id out of range in a journal record")]
    NodeId,
    /// A verdict code that names no verdict.
    #[error("unknown verdict {0} in a journal record")]
    Outcome(u64),
    /// A run of ids of fewer than two, or past the largest id.
    #[error("a run of ids out of range in a journal record")]
    Run,
}

const DELIVERED: u8 = 1;
const TAKEN: u8 = 2;
const CONFIRMED: u8 = 3;
const ACCEPTED: u8 = 4;
const ASSIGNED: u8 = 5;
const RESOLVED: u8 = 6;
const REPLIED: u8 = 7;
const COVERS: u8 = 8;
const REPORTED: u8 = 9;
const ACCEPTED_KEYED: u8 = 10;
const KEY_FLOOR: u8 = 11;
const RESOLVED_KEYED: u8 = 12;
const MARK: u8 = 13;
const ACCEPTED_MARK: u8 = 14;
const TAKEN_MARK: u8 = 15;
// Held messages: kinds from 20 on.
const ACCEPTED_HELD: u8 = 20;
const HELD: u8 = 21;
const RELEASED: u8 = 22;
const TAKEN_RELEASED: u8 = 23;
// The journal's own mark of damage found at opening: kind 24.
const DAMAGED: u8 = 24;
// A receiver's hand-overs without payload: kind 25.
const HANDED: u8 = 25;
// A run of messages resolved alike: kind 26.
const RESOLVED_RUN: u8 = 26;
// A delivery of an early token, with its payload: kind 27.
const DELIVERED_EARLY: u8 = 27;
// A slot a message left for a fresh one: kind 28.
const UNASSIGNED: u8 = 28;
// Keys the journal may have forgotten, and a destination's keys settled: kinds 29 and 30.
const KEYS_FORGOTTEN: u8 = 29;
const KEYS_SETTLED: u8 = 30;

impl Entry {
    /// The record's encoded length.
    pub fn encoded_len(&self) -> usize {
        let v = varint_len;
        1 + match self {
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
            } => v(from.get()) + v(*rck) + v(*slot) + v(payload.len() as u64) + payload.len(),
            Entry::Taken { from, rck, slot } => v(from.get()) + v(*rck) + v(*slot),
            Entry::Confirmed { from, below } => v(from.get()) + v(*below),
            Entry::Accepted { id, to, payload } => {
                v(id.0) + v(to.get()) + v(payload.len() as u64) + payload.len()
            }
            Entry::Assigned { id, rck, slot } | Entry::Unassigned { id, rck, slot } => {
                v(id.0) + v(*rck) + v(*slot)
            }
            Entry::Resolved { id, verdict } => {
                v(id.0) + verdict.map_or(0, |(to, o)| v(o.code()) + v(to.get()))
            }
            Entry::Reported { first, count } => v(first.0) + v(*count),
            Entry::ResolvedRun {
                first,
                count,
                to,
                outcome,
            } => v(first.0) + v(*count) + v(outcome.code()) + v(to.get()),
            Entry::Replied {
                from,
                rck,
                slot,
                id,
                payload,
            } => {
                v(from.get())
                    + v(*rck)
                    + v(*slot)
                    + v(id.0)
                    + v(payload.len() as u64)
                    + payload.len()
            }
            Entry::Covers { from, below } => v(*from) + v(*below),
            Entry::AcceptedKeyed {
                id,
                to,
                key,
                payload,
            } => v(id.0) + v(to.get()) + v(*key) + v(payload.len() as u64) + payload.len(),
            Entry::KeyFloor { to, key } => v(to.get()) + v(*key),
            Entry::ResolvedKeyed {
                id,
                to,
                outcome,
                key,
            } => v(id.0) + v(to.get()) + v(outcome.code()) + v(*key),
            Entry::Mark { peer, lane, value } => v(peer.get()) + v(*lane) + blob_len(value),
            Entry::AcceptedMark {
                id,
                to,
                lane,
                value,
                payload,
            } => v(id.0) + v(to.get()) + v(*lane) + blob_len(value) + payload_len(payload),
            Entry::TakenMark {
                from,
                rck,
                slot,
                lane,
                value,
            } => v(from.get()) + v(*rck) + v(*slot) + v(*lane) + blob_len(value),
            Entry::AcceptedHeld { id, to, payload } | Entry::Held { id, to, payload } => {
                v(id.0) + v(to.get()) + payload_len(payload)
            }
            Entry::Released { id } => v(id.0),
            Entry::TakenReleased {
                from,
                rck,
                slot,
                id,
            } => v(from.get()) + v(*rck) + v(*slot) + v(id.0),
            Entry::Handed { from, rck, slot } => v(from.get()) + v(*rck) + v(*slot),
            Entry::Damaged | Entry::KeysForgotten => 0,
            Entry::KeysSettled { to, key } => v(to.get()) + v(*key),
        }
    }

    /// Appends the record's encoding to `buf`.
    pub fn encode(&self, buf: &mut impl BufMut) {
        match self {
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
                let early = matches!(self, Entry::DeliveredEarly { .. });
                let kind = if early { DELIVERED_EARLY } else { DELIVERED };
                put_slot(buf, kind, *from, *rck, *slot);
                put_blob(buf, payload);
            }
            Entry::Taken { from, rck, slot } => put_slot(buf, TAKEN, *from, *rck, *slot),
            Entry::Confirmed { from, below } => {
                buf.put_u8(CONFIRMED);
                put_varint(buf, from.get());
                put_varint(buf, *below);
            }
            Entry::Accepted { id, to, payload } => {
                buf.put_u8(ACCEPTED);
                put_varint(buf, id.0);
                put_varint(buf, to.get());
                put_payload(buf, payload);
            }
            Entry::Assigned { id, rck, slot } => {
                buf.put_u8(ASSIGNED);
                put_varint(buf, id.0);
                put_varint(buf, *rck);
                put_varint(buf, *slot);
            }
            Entry::Resolved { id, verdict } => {
                buf.put_u8(RESOLVED);
                put_varint(buf, id.0);
                if let Some((to, o)) = verdict {
                    put_varint(buf, o.code());
                    put_varint(buf, to.get());
                }
            }
            Entry::Reported { first, count } => {
                buf.put_u8(REPORTED);
                put_varint(buf, first.0);
                put_varint(buf, *count);
            }
            Entry::ResolvedRun {
                first,
                count,
                to,
                outcome,
            } => {
                buf.put_u8(RESOLVED_RUN);
                put_varint(buf, first.0);
                put_varint(buf, *count);
                put_varint(buf, outcome.code());
                put_varint(buf, to.get());
            }
            Entry::Replied {
                from,
                rck,
                slot,
                id,
                payload,
            } => {
                buf.put_u8(REPLIED);
                put_varint(buf, from.get());
                put_varint(buf, *rck);
                put_varint(buf, *slot);
                put_varint(buf, id.0);
                put_payload(buf, payload);
            }
            Entry::Covers { from, below } => {
                buf.put_u8(COVERS);
                put_varint(buf, *from);
                put_varint(buf, *below);
            }
            Entry::AcceptedKeyed { .. } | Entry::KeyFloor { .. } | Entry::ResolvedKeyed { .. } => {
                self.encode_more(buf)
            }
            Entry::Mark { .. } | Entry::AcceptedMark { .. } | Entry::TakenMark { .. } => {
                self.encode_more(buf)
            }
            Entry::AcceptedHeld { .. }
            | Entry::Held { .. }
            | Entry::Released { .. }
            | Entry::TakenReleased { .. } => self.encode_held(buf),
            Entry::Damaged => buf.put_u8(DAMAGED),
            Entry::KeysForgotten | Entry::KeysSettled { .. } => self.encode_more(buf),
            Entry::Unassigned { id, rck, slot } => put_ids(buf, UNASSIGNED, [id.0, *rck, *slot]),
            Entry::Handed { from, rck, slot } => put_slot(buf, HANDED, *from, *rck, *slot),
        }
    }

    /// Appends the encoding of a record of held messages (`encode`'s share for them).
    fn encode_held(&self, buf: &mut impl BufMut) {
        match self {
            Entry::AcceptedHeld { id, to, payload } | Entry::Held { id, to, payload } => {
                let held = matches!(self, Entry::Held { .. });
                buf.put_u8(if held { HELD } else { ACCEPTED_HELD });
                put_varint(buf, id.0);
                put_varint(buf, to.get());
                put_payload(buf, payload);
            }
            Entry::Released { id } => {
                buf.put_u8(RELEASED);
                put_varint(buf, id.0);
            }
            Entry::TakenReleased {
                from,
                rck,
                slot,
                id,
            } => {
                buf.put_u8(TAKEN_RELEASED);
                put_varint(buf, from.get());
                put_varint(buf, *rck);
                put_varint(buf, *slot);
                put_varint(buf, id.0);
            }
            _ => unreachable!("encode_held is called for the records of held messages"),
        }
    }

    /// `encode` for the records that carry a key or a mark.
    fn encode_more(&self, buf: &mut impl BufMut) {
        match self {
            Entry::AcceptedKeyed {
                id,
                to,
                key,
                payload,
            } => {
                buf.put_u8(ACCEPTED_KEYED);
                put_varint(buf, id.0);
                put_varint(buf, to.get());
                put_varint(buf, *key);
                put_payload(buf, payload);
            }
            Entry::KeysForgotten => buf.put_u8(KEYS_FORGOTTEN),
            Entry::KeysSettled { to, key } => {
                buf.put_u8(KEYS_SETTLED);
                put_varint(buf, to.get());
                put_varint(buf, *key);
            }
            Entry::KeyFloor { to, key } => {
                buf.put_u8(KEY_FLOOR);
                put_varint(buf, to.get());
                put_varint(buf, *key);
            }
            Entry::ResolvedKeyed {
                id,
                to,
                outcome,
                key,
            } => {
                buf.put_u8(RESOLVED_KEYED);
                put_varint(buf, id.0);
                put_varint(buf, to.get());
                put_varint(buf, outcome.code());
                put_varint(buf, *key);
            }
            Entry::Mark { peer, lane, value } => {
                buf.put_u8(MARK);
                put_varint(buf, peer.get());
                put_varint(buf, *lane);
                put_blob(buf, value);
            }
            Entry::AcceptedMark {
                id,
                to,
                lane,
                value,
                payload,
            } => {
                buf.put_u8(ACCEPTED_MARK);
                put_varint(buf, id.0);
                put_varint(buf, to.get());
                put_varint(buf, *lane);
                put_blob(buf, value);
                put_payload(buf, payload);
            }
            Entry::TakenMark {
                from,
                rck,
                slot,
                lane,
                value,
            } => {
                buf.put_u8(TAKEN_MARK);
                put_varint(buf, from.get());
                put_varint(buf, *rck);
                put_varint(buf, *slot);
                put_varint(buf, *lane);
                put_blob(buf, value);
            }
            _ => unreachable!("encode_more is called for the records with a key or a mark"),
        }
    }

    /// The record's encoding.
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut b);
        b.freeze()
    }

    /// Decodes one record from all of `bytes` (payloads are slices of it). Any bytes are
    /// safe: the result is a record or an error, never a panic or an allocation beyond
    /// `bytes`.
    pub fn decode(bytes: &Bytes) -> Result<Entry, EntryError> {
        let mut r = Reader::new(bytes);
        let r = &mut r;
        let kind = r.u8().map_err(|_| EntryError::Length)?;
        let e = match kind {
            DELIVERED => Entry::Delivered {
                from: node(r)?,
                rck: int(r)?,
                slot: int(r)?,
                payload: blob(r, bytes)?,
            },
            TAKEN => Entry::Taken {
                from: node(r)?,
                rck: int(r)?,
                slot: int(r)?,
            },
            CONFIRMED => Entry::Confirmed {
                from: node(r)?,
                below: int(r)?,
            },
            ACCEPTED => Entry::Accepted {
                id: MsgId(int(r)?),
                to: node(r)?,
                payload: blob(r, bytes)?.into(),
            },
            ASSIGNED => Entry::Assigned {
                id: MsgId(int(r)?),
                rck: int(r)?,
                slot: int(r)?,
            },
            RESOLVED => Entry::Resolved {
                id: MsgId(int(r)?),
                verdict: verdict(r)?,
            },
            REPORTED => Entry::Reported {
                first: MsgId(int(r)?),
                count: int(r)?,
            },
            REPLIED => Entry::Replied {
                from: node(r)?,
                rck: int(r)?,
                slot: int(r)?,
                id: MsgId(int(r)?),
                payload: blob(r, bytes)?.into(),
            },
            COVERS => Entry::Covers {
                from: int(r)?,
                below: int(r)?,
            },
            ACCEPTED_KEYED => Entry::AcceptedKeyed {
                id: MsgId(int(r)?),
                to: node(r)?,
                key: int(r)?,
                payload: blob(r, bytes)?.into(),
            },
            KEY_FLOOR => Entry::KeyFloor {
                to: node(r)?,
                key: int(r)?,
            },
            RESOLVED_KEYED => Entry::ResolvedKeyed {
                id: MsgId(int(r)?),
                to: node(r)?,
                outcome: {
                    let c = int(r)?;
                    Outcome::from_code(c).ok_or(EntryError::Outcome(c))?
                },
                key: int(r)?,
            },
            MARK => Entry::Mark {
                peer: node(r)?,
                lane: int(r)?,
                value: mark(r, bytes)?,
            },
            ACCEPTED_MARK => Entry::AcceptedMark {
                id: MsgId(int(r)?),
                to: node(r)?,
                lane: int(r)?,
                value: mark(r, bytes)?,
                payload: blob(r, bytes)?.into(),
            },
            TAKEN_MARK => Entry::TakenMark {
                from: node(r)?,
                rck: int(r)?,
                slot: int(r)?,
                lane: int(r)?,
                value: mark(r, bytes)?,
            },
            ACCEPTED_HELD..=TAKEN_RELEASED => decode_held(kind, r, bytes)?,
            k => decode_newer(k, r, bytes)?,
        };
        if r.remaining() != 0 {
            return Err(EntryError::Length);
        }
        Ok(e)
    }
}

/// Decodes the body of a record of kind `DAMAGED`, `HANDED`, `RESOLVED_RUN`,
/// `DELIVERED_EARLY`, `UNASSIGNED`, `KEYS_FORGOTTEN` or `KEYS_SETTLED` (payloads are slices of `whole`); any other kind is
/// unknown.
fn decode_newer(kind: u8, r: &mut Reader<'_>, whole: &Bytes) -> Result<Entry, EntryError> {
    Ok(match kind {
        DAMAGED => Entry::Damaged,
        KEYS_FORGOTTEN => Entry::KeysForgotten,
        KEYS_SETTLED => Entry::KeysSettled {
            to: node(r)?,
            key: int(r)?,
        },
        DELIVERED_EARLY => Entry::DeliveredEarly {
            from: node(r)?,
            rck: int(r)?,
            slot: int(r)?,
            payload: blob(r, whole)?,
        },
        RESOLVED_RUN => {
            let first = MsgId(int(r)?);
            let count = int(r)?;
            let c = int(r)?;
            let outcome = Outcome::from_code(c).ok_or(EntryError::Outcome(c))?;
            let to = node(r)?;
            if count < 2 || first.0.checked_add(count).is_none() {
                return Err(EntryError::Run);
            }
            Entry::ResolvedRun {
                first,
                count,
                to,
                outcome,
            }
        }
        HANDED => Entry::Handed {
            from: node(r)?,
            rck: int(r)?,
            slot: int(r)?,
        },
        UNASSIGNED => Entry::Unassigned {
            id: MsgId(int(r)?),
            rck: int(r)?,
            slot: int(r)?,
        },
        k => return Err(EntryError::Kind(k)),
    })
}

/// Decodes the body of a record of held messages, of kind `kind`
/// (`ACCEPTED_HELD..=TAKEN_RELEASED`).
fn decode_held(kind: u8, r: &mut Reader<'_>, whole: &Bytes) -> Result<Entry, EntryError> {
    Ok(match kind {
        ACCEPTED_HELD => Entry::AcceptedHeld {
            id: MsgId(int(r)?),
            to: node(r)?,
            payload: blob(r, whole)?.into(),
        },
        HELD => Entry::Held {
            id: MsgId(int(r)?),
            to: node(r)?,
            payload: blob(r, whole)?.into(),
        },
        RELEASED => Entry::Released { id: MsgId(int(r)?) },
        TAKEN_RELEASED => Entry::TakenReleased {
            from: node(r)?,
            rck: int(r)?,
            slot: int(r)?,
            id: MsgId(int(r)?),
        },
        k => return Err(EntryError::Kind(k)),
    })
}

/// Appends a message's bytes (head, then body), length-prefixed: as [`put_blob`] of their
/// concatenation, without joining them first.
fn put_payload(buf: &mut impl BufMut, payload: &Payload) {
    put_varint(buf, payload.len() as u64);
    payload.put(buf);
}

/// A message's bytes' encoded length, length-prefixed.
fn payload_len(p: &Payload) -> usize {
    varint_len(p.len() as u64) + p.len()
}

/// Appends `payload`, length-prefixed.
fn put_blob(buf: &mut impl BufMut, payload: &[u8]) {
    put_varint(buf, payload.len() as u64);
    buf.put_slice(payload);
}

fn int(r: &mut Reader<'_>) -> Result<u64, EntryError> {
    r.varint().map_err(|_| EntryError::Length)
}

fn node(r: &mut Reader<'_>) -> Result<NodeId, EntryError> {
    NodeId::new(int(r)?).ok_or(EntryError::NodeId)
}

/// A `Resolved` record's verdict: absent in records written before verdicts were kept.
fn verdict(r: &mut Reader<'_>) -> Result<Option<(NodeId, Outcome)>, EntryError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    let c = int(r)?;
    let o = Outcome::from_code(c).ok_or(EntryError::Outcome(c))?;
    Ok(Some((node(r)?, o)))
}

fn blob(r: &mut Reader<'_>, whole: &Bytes) -> Result<Bytes, EntryError> {
    r.length_prefixed(whole, usize::MAX)
        .map_err(|_| EntryError::Length)
}

/// A mark's value: at most [`MAX_MARK_BYTES`] (more is damage).
fn mark(r: &mut Reader<'_>, whole: &Bytes) -> Result<Bytes, EntryError> {
    r.length_prefixed(whole, MAX_MARK_BYTES)
        .map_err(|_| EntryError::Length)
}

/// Appends a record's kind and the delivery it names: sender, incarnation, slot.
fn put_slot(buf: &mut impl BufMut, kind: u8, from: NodeId, rck: u64, slot: u64) {
    buf.put_u8(kind);
    put_varint(buf, from.get());
    put_varint(buf, rck);
    put_varint(buf, slot);
}

/// Appends a record of `kind` whose fields are the integers `fields`.
fn put_ids<const N: usize>(buf: &mut impl BufMut, kind: u8, fields: [u64; N]) {
    buf.put_u8(kind);
    for f in fields {
        put_varint(buf, f);
    }
}

/// A length-prefixed blob's encoded length.
fn blob_len(b: &[u8]) -> usize {
    varint_len(b.len() as u64) + b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Entry> {
        let n = NodeId::from_const(7);
        vec![
            Entry::Delivered {
                from: n,
                rck: 1 << 40,
                slot: 3,
                payload: Bytes::from_static(b"hello"),
            },
            Entry::DeliveredEarly {
                from: n,
                rck: 1 << 41,
                slot: 4,
                payload: Bytes::from_static(b"early"),
            },
            Entry::Taken {
                from: n,
                rck: 9,
                slot: 300,
            },
            Entry::Confirmed { from: n, below: 77 },
            Entry::Accepted {
                id: MsgId(12),
                to: n,
                payload: Bytes::new().into(),
            },
            Entry::Assigned {
                id: MsgId(12),
                rck: 5,
                slot: 6,
            },
            Entry::Unassigned {
                id: MsgId(12),
                rck: 5,
                slot: 6,
            },
            Entry::Resolved {
                id: MsgId(1 << 61),
                verdict: None,
            },
            Entry::Resolved {
                id: MsgId(12),
                verdict: Some((n, Outcome::Acknowledged)),
            },
            Entry::Resolved {
                id: MsgId(13),
                verdict: Some((n, Outcome::NotDelivered)),
            },
            Entry::Resolved {
                id: MsgId(1 << 40),
                verdict: Some((n, Outcome::InDoubt)),
            },
            Entry::Reported {
                first: MsgId(12),
                count: 2,
            },
            Entry::Replied {
                from: n,
                rck: 4,
                slot: 1 << 20,
                id: MsgId(99),
                payload: Bytes::from_static(b"answer").into(),
            },
            Entry::Covers {
                from: 1 << 50,
                below: (1 << 50) + 4096,
            },
            Entry::AcceptedKeyed {
                id: MsgId(13),
                to: n,
                key: u64::MAX >> 2,
                payload: Bytes::from_static(b"row 7").into(),
            },
            Entry::KeyFloor { to: n, key: 7 },
            Entry::ResolvedKeyed {
                id: MsgId(14),
                to: n,
                outcome: Outcome::NotDelivered,
                key: 8,
            },
            Entry::Mark {
                peer: n,
                lane: 1 << 33,
                value: Bytes::from_static(b"run 5 next 9"),
            },
            Entry::Mark {
                peer: n,
                lane: 0,
                value: Bytes::new(),
            },
            Entry::AcceptedMark {
                id: MsgId(15),
                to: n,
                lane: 6,
                value: Bytes::from_static(&[1, 2, 3]),
                payload: Bytes::from_static(b"chunk").into(),
            },
            Entry::TakenMark {
                from: n,
                rck: 1 << 45,
                slot: 17,
                lane: 6,
                value: Bytes::from_static(&[MAX_MARK_BYTES as u8; MAX_MARK_BYTES]),
            },
            Entry::AcceptedHeld {
                id: MsgId(15),
                to: n,
                payload: Bytes::from_static(b"request").into(),
            },
            Entry::Held {
                id: MsgId(1 << 33),
                to: n,
                payload: Bytes::new().into(),
            },
            Entry::Released { id: MsgId(15) },
            Entry::TakenReleased {
                from: n,
                rck: 1 << 45,
                slot: 17,
                id: MsgId(1 << 20),
            },
            Entry::Handed {
                from: n,
                rck: 1 << 45,
                slot: 1 << 21,
            },
            Entry::Damaged,
            Entry::KeysForgotten,
            Entry::KeysSettled {
                to: n,
                key: u64::MAX >> 2,
            },
            Entry::ResolvedRun {
                first: MsgId(1 << 40),
                count: 300,
                to: n,
                outcome: Outcome::Acknowledged,
            },
        ]
    }

    #[test]
    fn every_record_round_trips_at_its_encoded_length() {
        for e in all() {
            let b = e.to_bytes();
            assert_eq!(b.len(), e.encoded_len(), "{e:?}");
            assert_eq!(Entry::decode(&b), Ok(e));
        }
    }

    /// A message's record is written as the concatenation of its head and body: the same
    /// bytes as for the joined payload, read back whole.
    #[test]
    fn a_payload_with_a_head_is_written_as_its_bytes_joined() {
        let to = NodeId::from_const(7);
        let headed = Payload::with_head(&[1, 2, 3], Bytes::from_static(b"body"));
        let joined = Payload::from(&b"\x01\x02\x03body"[..]);
        let e = Entry::Accepted {
            id: MsgId(9),
            to,
            payload: headed,
        };
        let b = e.to_bytes();
        let plain = Entry::Accepted {
            id: MsgId(9),
            to,
            payload: joined,
        };
        assert_eq!(b, plain.to_bytes());
        assert_eq!(b.len(), e.encoded_len());
        match Entry::decode(&b) {
            Ok(Entry::Accepted { payload, .. }) => {
                assert_eq!(payload.to_bytes(), Bytes::from_static(b"\x01\x02\x03body"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn truncated_extended_or_garbled_records_are_errors() {
        for e in all() {
            let b = e.to_bytes();
            // A `Resolved` record cut right after its id is the older encoding, no verdict.
            let old = matches!(
                e,
                Entry::Resolved {
                    verdict: Some(_),
                    ..
                }
            )
            .then(|| 1 + id_len(&e));
            for cut in (0..b.len()).filter(|c| Some(*c) != old) {
                assert!(
                    Entry::decode(&b.slice(..cut)).is_err(),
                    "{e:?} cut at {cut}"
                );
            }
            let mut long = b.to_vec();
            long.push(0);
            // (a `Resolved` record without a verdict reads the extra byte as a verdict code)
            assert!(Entry::decode(&Bytes::from(long)).is_err(), "{e:?} extended");
        }
        assert_eq!(
            Entry::decode(&Bytes::from_static(&[99])),
            Err(EntryError::Kind(99))
        );
        assert_eq!(
            Entry::decode(&Bytes::from_static(&[RESOLVED, 5, 4, 1])),
            Err(EntryError::Outcome(4))
        );
    }

    #[test]
    fn a_mark_longer_than_its_limit_is_damage() {
        let long = Entry::Mark {
            peer: NodeId::from_const(7),
            lane: 1,
            value: Bytes::from(vec![0; MAX_MARK_BYTES + 1]),
        };
        assert_eq!(Entry::decode(&long.to_bytes()), Err(EntryError::Length));
    }

    #[test]
    fn hostile_held_records_are_errors_not_panics() {
        let decode = |b: &'static [u8]| Entry::decode(&Bytes::from_static(b));
        // No id, an id cut short (a two-byte varint with one byte).
        assert_eq!(decode(&[RELEASED]), Err(EntryError::Length));
        assert_eq!(decode(&[RELEASED, 0x40]), Err(EntryError::Length));
        // A payload longer than the record (5 bytes announced, 1 there), and the largest
        // length a varint says: an error, nothing allocated.
        assert_eq!(decode(&[HELD, 1, 7, 5, b'a']), Err(EntryError::Length));
        assert_eq!(
            decode(&[
                ACCEPTED_HELD,
                1,
                7,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff
            ]),
            Err(EntryError::Length)
        );
        // A take without its id, and one with a byte left over.
        assert_eq!(decode(&[TAKEN_RELEASED, 7, 1, 2]), Err(EntryError::Length));
        assert_eq!(
            decode(&[TAKEN_RELEASED, 7, 1, 2, 3, 0]),
            Err(EntryError::Length)
        );
        assert_eq!(
            decode(&[TAKEN_RELEASED, 7, 1, 2, 3]),
            Ok(Entry::TakenReleased {
                from: NodeId::from_const(7),
                rck: 1,
                slot: 2,
                id: MsgId(3)
            })
        );
    }

    fn id_len(e: &Entry) -> usize {
        match e {
            Entry::Resolved { id, .. } => varint_len(id.0),
            _ => 0,
        }
    }
}
