//! Inputs that queue messages: `send`, `send_reported`, `reply` and `send_many`, with the
//! checks they share and the slot request they lead to.

use std::collections::VecDeque;
use std::time::Instant;

use crate::proto::journal::{Entry, Mark};
use crate::proto::{DeliveryId, MsgId, Node, NodeId, Payload, SendError};

/// What a send's journal record carries besides the message.
#[derive(Debug)]
pub(super) enum Stamp {
    /// Nothing: an `Accepted` record.
    Plain,
    /// The application's key (`send_keyed`): an `AcceptedKeyed` record.
    Key(u64),
    /// A layer's mark (`send_marked`): an `AcceptedMark` record.
    Mark(Mark),
    /// Held past its acknowledgement until released (`send_held`): an `AcceptedHeld`
    /// record.
    Held,
}

impl Node {
    /// Input: sends `payload` to node `to`, exactly once. Returns the message's id; an
    /// [`Event::Acknowledged`](crate::proto::Event::Acknowledged) with this id follows once the receiver delivered it.
    ///
    /// Fails without keeping anything if the payload is too large, the destination's queue is
    /// full (backpressure: retry after acknowledgements), or too many destinations are busy.
    pub fn send(
        &mut self,
        now: Instant,
        to: NodeId,
        payload: impl Into<Payload>,
    ) -> Result<MsgId, SendError> {
        self.accept(now, to, payload.into(), None, false, Stamp::Plain)
    }

    /// Input: as [`send`](Self::send), under the application's `key` for the message (an
    /// outbox row's id, a sequence number): durable mode only. Keys grow per destination:
    /// the journal keeps the highest key accepted for `to` (in the message's own record, and
    /// one integer per destination in its checkpoints), and a key not above it is refused
    /// with [`SendError::KeyNotAbove`], whatever happened in between (a crash, a restart).
    /// So an application that sends again, after a crash, every outbox row it has no
    /// verdict for never makes a duplicate: a row whose message was stored is refused (its
    /// message was recovered, with its key, or resolved), one that was not is accepted.
    /// Keys out of order are refused the same way (an error, never a silent drop).
    ///
    /// Fails as [`send`](Self::send) fails, with [`SendError::KeyNotAbove`], or with
    /// [`SendError::NotDurable`] on a node that is not durable.
    pub fn send_keyed(
        &mut self,
        now: Instant,
        to: NodeId,
        key: u64,
        payload: impl Into<Payload>,
    ) -> Result<MsgId, SendError> {
        let Some(j) = self.journal.as_ref() else {
            return Err(SendError::NotDurable);
        };
        if self.rules.forgotten_keys_refused && j.keys_forgotten && !j.keys_settled.contains(&to) {
            return Err(SendError::KeysForgotten { to });
        }
        if let Some(&highest) = j.keys.get(&to) {
            if key <= highest {
                return Err(SendError::KeyNotAbove { to, key, highest });
            }
        }
        self.accept(now, to, payload.into(), None, false, Stamp::Key(key))
    }

    /// Input: settles `to`'s keys after the journal forgot some ([`SendError::KeysForgotten`]):
    /// keys up to `floor` count as accepted for `to` (sending one again is refused with
    /// [`SendError::KeyNotAbove`]), and keyed sends to `to` above it (and above any key the
    /// journal still holds) are accepted again. The application chooses `floor` from what
    /// it knows: the highest key its receiver's effects show, or the highest it ever sent,
    /// giving the rows without a verdict up as in doubt. Kept in the journal
    /// ([`Entry::KeysSettled`](crate::proto::journal::Entry::KeysSettled)), in order with
    /// the sends after it. On a journal that forgot nothing it only raises the floor.
    ///
    /// Fails with [`SendError::NotDurable`] on a node that is not durable.
    pub fn settle_keys(&mut self, to: NodeId, floor: u64) -> Result<(), SendError> {
        let Some(j) = self.journal.as_mut() else {
            return Err(SendError::NotDurable);
        };
        let key = j.keys.get(&to).map_or(floor, |&k| k.max(floor));
        j.keys.insert(to, key);
        if j.keys_forgotten {
            j.keys_settled.insert(to);
        }
        j.write(Entry::KeysSettled { to, key });
        Ok(())
    }

    /// Whether keyed sends to `to` are refused until the application settles its keys
    /// ([`settle_keys`](Self::settle_keys)): the journal may have forgotten some.
    pub fn keys_forgotten(&self, to: NodeId) -> bool {
        self.journal
            .as_ref()
            .is_some_and(|j| j.keys_forgotten && !j.keys_settled.contains(&to))
    }

    /// Input: as [`send`](Self::send), for a message its receiver's application may leave
    /// untaken for long after it arrives (the endpoint's ordered flows hold a message that
    /// came ahead of its turn, and a stream's chunk until it is read). It travels as FRAG
    /// frames even when it fits one TOKEN, so the receiver answers HELD as soon as it holds
    /// it whole (`docs/wire.md`, "HELD"): the sender stops sending it, and its loss
    /// detection and congestion controller count it as arrived, while its verdict waits
    /// for the take (ACK). Sent with [`send`](Self::send), such a message is retransmitted
    /// and taken for lost at every timeout while it waits, and those losses shrink the
    /// congestion window of everything else sent to that peer.
    pub fn send_reported(
        &mut self,
        now: Instant,
        to: NodeId,
        payload: impl Into<Payload>,
    ) -> Result<MsgId, SendError> {
        self.accept(now, to, payload.into(), None, true, Stamp::Plain)
    }

    /// Input: answers the delivery `id` with `payload`, in one step: the delivery is taken
    /// (as by [`handle_taken`](Self::handle_taken)) and `payload` sent to its sender (as by
    /// [`send`](Self::send)). In durable mode both go to the journal in one record
    /// ([`Entry::Replied`](crate::proto::journal::Entry::Replied)), so a crash keeps both
    /// or neither: the request is acknowledged only once its reply is stored, and a
    /// restarted node neither hands out the request again nor loses the reply.
    ///
    /// Fails without doing either as `send` fails, or with [`SendError::NotWaiting`] when
    /// the delivery is not waiting (taken or answered already, or from before a restart).
    pub fn reply(
        &mut self,
        now: Instant,
        id: DeliveryId,
        payload: impl Into<Payload>,
    ) -> Result<MsgId, SendError> {
        if !self.is_waiting(&id) {
            return Err(SendError::NotWaiting);
        }
        let msg = self.accept(
            now,
            id.from(),
            payload.into(),
            Some(id),
            false,
            Stamp::Plain,
        )?;
        if self.journal.is_none() {
            self.take_live(now, id);
        }
        Ok(msg)
    }

    /// Input: sends the payloads at the front of `payloads` to `to`, in order, as calls of
    /// [`send`](Self::send) one after the other would, taking each out of `payloads`, until
    /// one would be refused (it stays at the front, with those after it). The destination's
    /// checks, its sender record's lookup, its slot request, its wake-up and its timer are
    /// worked out once for them all. Returns the id of the first message sent; the others
    /// follow it one by one (`first.0 + i` for the `i`-th), as many as left `payloads`.
    /// Fails, sending nothing, as `send` would fail for the first payload.
    pub fn send_many(
        &mut self,
        now: Instant,
        to: NodeId,
        payloads: &mut VecDeque<Payload>,
    ) -> Result<MsgId, SendError> {
        self.send_front(now, to, payloads, usize::MAX, false)
    }

    /// Input: answers the deliveries of `requests`, all from one node, with the payloads at
    /// the front of `payloads` (the `i`-th answers `requests[i]`; payloads beyond
    /// `requests` are left), as calls of [`reply`](Self::reply) one after the other would,
    /// taking each payload out of `payloads`, until one would be refused: it stays at the
    /// front, with those after it, and none of their requests is taken. A request not
    /// waiting, from another node, or named twice ends the run before it (a later call, or
    /// `reply`, answers or refuses it as alone). Without a journal the replies go to the
    /// core as one [`send_many`](Self::send_many) and their requests are taken as one
    /// [`handle_taken_many`](Self::handle_taken_many); a durable node answers them one by
    /// one (each reply and its take are one journal record). Returns the id of the first
    /// reply; the others follow it (`first.0 + i` for the `i`-th). Fails, answering
    /// nothing, as `reply` would fail for the first.
    pub fn reply_many(
        &mut self,
        now: Instant,
        requests: &[DeliveryId],
        payloads: &mut VecDeque<Payload>,
    ) -> Result<MsgId, SendError> {
        let n = payloads.len().min(requests.len());
        if n == 0 {
            return Err(SendError::NothingToSend);
        }
        if self.journal.is_some() {
            return self.reply_one_by_one(now, &requests[..n], payloads);
        }
        let k = self.answerable(&requests[..n]);
        if k == 0 {
            return Err(SendError::NotWaiting);
        }
        let to = requests[0].from();
        let first = self.send_front(now, to, payloads, k, true)?;
        let sent = (self.next_msg - first.0) as usize;
        let taken = self.handle_taken_many(now, requests[..sent].iter().copied());
        debug_assert_eq!(taken, sent, "every request answered was waiting");
        Ok(first)
    }

    /// How many of `requests` (at least one), from the front, may be answered together: all
    /// from the first's node, waiting, and none named twice (an empty answer when the first
    /// is not waiting).
    fn answerable(&self, requests: &[DeliveryId]) -> usize {
        let from = requests[0].from();
        let (mut k, mut ordered, mut last) = (0, true, None);
        for id in requests {
            if id.from() != from || !self.is_waiting(id) {
                break;
            }
            ordered &= last.is_none_or(|l| l < id.slot());
            last = Some(id.slot());
            k += 1;
        }
        if !ordered && k > 1 {
            // Answered out of order: a request named twice would get two replies.
            let mut slots: Vec<(u64, u64)> = requests[..k].iter().map(|id| id.slot()).collect();
            slots.sort_unstable();
            if slots.windows(2).any(|w| w[0] == w[1]) {
                return 1;
            }
        }
        k
    }

    /// [`reply_many`](Self::reply_many) of a durable node: each reply on its own.
    fn reply_one_by_one(
        &mut self,
        now: Instant,
        requests: &[DeliveryId],
        payloads: &mut VecDeque<Payload>,
    ) -> Result<MsgId, SendError> {
        let from = requests[0].from();
        let mut first: Option<MsgId> = None;
        for (i, id) in requests
            .iter()
            .take_while(|id| id.from() == from)
            .enumerate()
        {
            let Some(p) = payloads.pop_front() else { break };
            // Refused, the payload stays (a clone of one made from a `Vec` allocates: a
            // durable reply costs a journal record anyway).
            match self.reply(now, *id, p.clone()) {
                Ok(m) if first.is_none_or(|f| m.0 == f.0 + i as u64) => {
                    first.get_or_insert(m);
                }
                Ok(_) => unreachable!("durable ids follow one another within a call"),
                Err(e) => {
                    payloads.push_front(p);
                    if first.is_none() {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        first.ok_or(SendError::NothingToSend)
    }

    /// [`send_many`](Self::send_many) of at most `most` payloads; `reply`: they answer
    /// requests (not durable: [`reply_many`](Self::reply_many)), and a doubt hands their
    /// payloads back.
    fn send_front(
        &mut self,
        now: Instant,
        to: NodeId,
        payloads: &mut VecDeque<Payload>,
        most: usize,
        reply: bool,
    ) -> Result<MsgId, SendError> {
        let Some(first) = payloads.pop_front() else {
            return Err(SendError::NothingToSend);
        };
        if self.journal.is_some() {
            // Durable: each message goes to the journal on its own, with its id from the
            // stored clock (one by one, as `send`); a durable node's replies go one by one
            // through `reply`.
            debug_assert!(!reply, "durable replies go one by one");
            let id = match self.accept(now, to, first.clone(), None, false, Stamp::Plain) {
                Ok(id) => id,
                Err(e) => {
                    payloads.push_front(first);
                    return Err(e);
                }
            };
            let mut next = id.0 + 1;
            while next - id.0 < most as u64 {
                let Some(p) = payloads.pop_front() else { break };
                match self.accept(now, to, p.clone(), None, false, Stamp::Plain) {
                    Ok(i) if i.0 == next => next += 1,
                    Ok(_) => unreachable!("durable ids follow one another within a call"),
                    Err(_) => {
                        payloads.push_front(p);
                        break;
                    }
                }
            }
            return Ok(id);
        }
        let new_record = match self.check_send(to, first.len()) {
            Ok(exists) => !exists,
            Err(e) => {
                payloads.push_front(first);
                return Err(e);
            }
        };
        if new_record {
            if self.senders.len() >= self.cfg.limits.max_sender_records {
                payloads.push_front(first);
                return Err(SendError::TooManyPeers);
            }
            self.senders.insert(to, self.new_sender_record(to, now));
        }
        let (max, per_peer) = (
            self.cfg.limits.max_message_size,
            self.cfg.limits.max_queued_per_peer,
        );
        let max_bytes = self.cfg.limits.max_queued_bytes;
        let frontier_rule = self.rules.token_before_frontier;
        let Some(rec) = self.senders.get_mut(&to) else {
            unreachable!("record inserted above")
        };
        let was_quiet = rec.is_quiet() && !rec.is_requesting();
        let id = MsgId(self.next_msg);
        let mut wake = false;
        let mut next = Some(first);
        while let Some(p) = next {
            let len = p.len();
            let fits =
                len <= max && self.queued_bytes + len <= max_bytes && rec.queued_count() < per_peer;
            if !fits {
                payloads.push_front(p);
                break;
            }
            let msg = MsgId(self.next_msg);
            self.next_msg += 1;
            self.stats.sent += 1;
            self.queued_bytes += len;
            // Not durable: its copies die with it.
            wake |= rec.enqueue(msg, p, (false, false, reply), frontier_rule);
            next = if self.next_msg - id.0 < most as u64 {
                payloads.pop_front()
            } else {
                None
            };
        }
        let ask = !new_record || self.rules.first_send_requests_slots;
        let request = end_enqueue(rec, &self.cfg, ask);
        self.stats.sent_together += (self.next_msg - id.0).saturating_sub(1);
        self.after_enqueue(now, to, wake, was_quiet, request);
        Ok(id)
    }

    /// After messages were queued to `to` (`wake`: tokens are ready to go; `was_quiet`:
    /// the record had no work before; `request`: it wants slots, [`end_enqueue`]): its
    /// liveness watch, its slot request, its journal entries and its timer.
    fn after_enqueue(
        &mut self,
        now: Instant,
        to: NodeId,
        wake: bool,
        was_quiet: bool,
        request: bool,
    ) {
        if wake {
            self.outbox.wake(to, usize::MAX);
        }
        self.liveness_work(now, to, was_quiet);
        if request {
            self.request_slots(to);
            if let Some(rec) = self.senders.get_mut(&to) {
                rec.end_send();
            }
        }
        self.journal_assignments(now, to);
        self.defer_rearm(to);
    }

    /// What a send to `to` of a `len`-byte payload is refused for, if anything, before a
    /// record is made (`accept`'s first checks); else whether a record for `to` exists
    /// (one lookup for both).
    fn check_send(&self, to: NodeId, len: usize) -> Result<bool, SendError> {
        if to == self.id {
            return Err(SendError::ToSelf);
        }
        if !self.knows_key(to) {
            return Err(SendError::UnknownKey(to));
        }
        let max = self.cfg.limits.max_message_size;
        if len > max {
            return Err(SendError::PayloadTooLarge { len, max });
        }
        // As `is_full`.
        if self.queued_bytes + len > self.cfg.limits.max_queued_bytes {
            return Err(SendError::QueueFull(to));
        }
        match self.senders.get(&to) {
            Some(s) if s.queued_count() >= self.cfg.limits.max_queued_per_peer => {
                Err(SendError::QueueFull(to))
            }
            found => Ok(found.is_some()),
        }
    }

    /// Sends `payload` to `to`; with `answers`, also takes that delivery (`reply`); with
    /// `stamp`, under an application key (`send_keyed`) or with a mark (`send_marked`).
    pub(super) fn accept(
        &mut self,
        now: Instant,
        to: NodeId,
        payload: Payload,
        answers: Option<DeliveryId>,
        reported: bool,
        stamp: Stamp,
    ) -> Result<MsgId, SendError> {
        let new_record = !self.check_send(to, payload.len())?;
        if self.journal.is_some() && !self.reserve_clock(self.ck + 1) {
            // Durable ids come from the stored clock (checked before anything is kept).
            return Err(SendError::ClockNotStored);
        }
        if new_record {
            if self.senders.len() >= self.cfg.limits.max_sender_records {
                return Err(SendError::TooManyPeers);
            }
            self.senders.insert(to, self.new_sender_record(to, now));
        }
        let id = if self.journal.is_some() {
            // Durable ids come from the stored clock: never reused after a restart.
            self.ck += 1;
            self.next_msg = self.next_msg.max(self.ck);
            MsgId(self.ck - 1)
        } else {
            self.next_msg += 1;
            MsgId(self.next_msg - 1)
        };
        if new_record {
            if let Some(rec) = self.senders.get_mut(&to) {
                if self.journal.is_some() {
                    rec.set_durable();
                }
            }
        }
        self.stats.sent += 1;
        if self.journal.is_some() {
            self.journal_accepted(now, id, to, payload.clone(), answers, stamp);
        }
        self.queued_bytes += payload.len();
        let Some(rec) = self.senders.get_mut(&to) else {
            unreachable!("record inserted above")
        };
        let was_quiet = rec.is_quiet() && !rec.is_requesting();
        let frontier_rule = self.rules.token_before_frontier;
        // Durable: the sender's copy stands for its receiver's, but for a message an ordered
        // flow may give up while its receiver holds it (reported) and for a reply (its
        // caller's restart tells from its journal alone which calls had their reply).
        let senders_copy = self.journal.is_some()
            && (!(reported || answers.is_some()) || !self.rules.senders_copy_only_when_kept);
        let reply = answers.is_some();
        let wake = rec.enqueue(id, payload, (reported, senders_copy, reply), frontier_rule);
        let ask = !new_record || self.rules.first_send_requests_slots;
        let request = end_enqueue(rec, &self.cfg, ask);
        self.after_enqueue(now, to, wake, was_quiet, request);
        Ok(id)
    }

    /// Asks `peer` for slots if the record needs them and no request is outstanding.
    pub(super) fn request_slots(&mut self, peer: NodeId) {
        let Some(rec) = self.senders.get(&peer) else {
            return;
        };
        if rec.is_requesting() {
            return;
        }
        let mut n = match rec.slots_to_ask(&self.cfg) {
            Some(n) if n > 0 => n,
            _ => return,
        };
        let sck = rec.sck();
        if !self.reserve_clock(sck + n) {
            n = self.hw.saturating_sub(sck);
            if n == 0 {
                if !self.clock_waiters.contains(&peer) {
                    self.clock_waiters.push(peer);
                }
                return;
            }
        }
        let Some(rec) = self.senders.get_mut(&peer) else {
            return;
        };
        rec.ask_slots(n);
        self.outbox.wake(peer, usize::MAX);
    }
}

/// After messages were queued in `rec`: whether it is to ask for slots now (`ask`: a
/// record made by this send asks only under `first_send_requests_slots`), worked out
/// under the lookup the send made. Most sends find enough envelopes or a request
/// outstanding; their send ends here, with no further lookup.
fn end_enqueue(
    rec: &mut crate::proto::send::record::SRecord,
    cfg: &crate::proto::Config,
    ask: bool,
) -> bool {
    let request = ask && !rec.is_requesting() && rec.slots_to_ask(cfg).is_some_and(|n| n > 0);
    if !request {
        rec.end_send();
    }
    request
}
