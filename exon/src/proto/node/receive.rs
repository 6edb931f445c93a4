//! Inputs on the receiving side: TOKENs delivered and answered (ACK, DOUBT or RETRY),
//! fragments reassembled (FRAG, GOT, HELD, REQCREDIT, CREDIT), deliveries held until the
//! application takes them, and receiver records evicted under pressure.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::proto::frame::Verdict;
use crate::proto::journal::gates::Journal;
use crate::proto::node::outbox::Flush;
use crate::proto::recv::assembler::{Piece, Refusal};
use crate::proto::recv::delivery::Kept;
use crate::proto::recv::eviction::Candidate;
use crate::proto::recv::pins::Hold;
use crate::proto::recv::unproven::Standing;
use crate::proto::send::answers::Sink;
use crate::proto::wire::frame::TokenKind;
use crate::proto::{DeliveryId, Event, Node, NodeId, Rules};

impl Node {
    /// TOKEN(s, r, payload) from `src` (lines 75-81, with rule 4 and the verdicts for
    /// incarnations this node no longer knows).
    ///
    /// Returns true when the verdict should not wait for the ACK delay: a duplicate (the
    /// sender is retransmitting, so an ACK was lost or late) or anything but an ACK.
    pub(super) fn on_token(
        &mut self,
        now: Instant,
        src: NodeId,
        s: u64,
        r: u64,
        payload: Bytes,
        kind: TokenKind,
    ) -> bool {
        let mut urgent = false;
        let on_take = self.rules.ack_on_take;
        let room = self.has_room_for_delivery(src) || !on_take;
        let verdict = match self.receivers.get_mut(&src) {
            Some(rec) if rec.rck() == r => {
                rec.heard(now);
                if rec.slots().contains(s) && !room {
                    // The application is behind: neither delivered nor answered, so the
                    // sender sends it again later.
                    self.stats.held_back += 1;
                    None
                } else if rec.fill(s, r) {
                    // Held until taken (`handle_taken`), unless the rule is off.
                    rec.on_delivered(s, on_take);
                    if rec.is_spent() {
                        self.receivers.remove(&src);
                    }
                    let (payload, kept) = self.keep_payload(payload);
                    if on_take {
                        self.untaken.add(src, kept.charge);
                    } else if let Some(key) = kept.pin {
                        // Not held: nothing to give back at a take.
                        self.pins.release(key);
                    }
                    self.stats.delivered += 1;
                    let ev = Event::Delivered {
                        from: src,
                        payload,
                        id: DeliveryId::new(src, r, s, kept),
                    };
                    self.deliver(now, ev, src, (r, s), kind);
                    // Acknowledged once taken (`handle_taken`), unless the rule is off.
                    (!on_take).then_some(Verdict::Ack)
                } else if on_take && rec.held().contains(s) {
                    // A duplicate of a delivery the application has not taken yet: no
                    // answer until it is taken. A stored copy of an early one held for its
                    // sender's word is that word.
                    self.stats.duplicates_dropped += 1;
                    if !kind.is_early() {
                        self.stored_copy(src, s);
                    }
                    None
                } else {
                    self.stats.duplicates_dropped += 1;
                    urgent = true;
                    let waived = self.rules.doubt_below_forgotten && rec.maybe_waived(s);
                    if waived || below_forgotten(self.journal.as_deref(), &self.rules, src, s) {
                        Some(Verdict::Doubt)
                    } else {
                        rec.resent();
                        Some(Verdict::Ack)
                    }
                }
            }
            other => {
                if let Some(rec) = other {
                    rec.heard(now);
                }
                urgent = true;
                if !kind.is_early() {
                    // A stored copy of a recovered early delivery held for its sender's word.
                    self.stored_copy(src, s);
                }
                if !self.journal_redelivers(src, r, s) {
                    let v = self.answer_without_record(src, r, s);
                    if let Some(v) = v {
                        self.note_told(src, v, r, s);
                    }
                    v
                } else if !room || kind.is_early() {
                    // No room; or a copy its sender has not stored yet: the stored one
                    // comes later.
                    self.stats.held_back += 1;
                    None
                } else {
                    self.redeliver(now, src, (r, s), payload);
                    None
                }
            }
        };
        if let Some(v) = verdict {
            if !self.outbox.reply(src, v, r, s, self.outbox_cap()) {
                reject!(self.outbox_full);
            }
        }
        urgent
    }

    /// Rule `probe_repeats_old_verdicts`: a verdict answered for slot `s` of an incarnation
    /// `r` that the live record of `src` (if any) does not hold is kept by that record, for
    /// its next probe to repeat.
    fn note_told(&mut self, src: NodeId, v: Verdict, r: u64, s: u64) {
        if !self.rules.probe_repeats_old_verdicts {
            return;
        }
        if let Some(rec) = self.receivers.get_mut(&src).filter(|rec| rec.rck() != r) {
            rec.note_told(v, r, s);
        }
    }

    /// A run of TOKENs from `src` of incarnation `r`, one after another in a datagram: the
    /// first, `first`, then as many of `more` as are TOKENs of `r` (each counted in
    /// `frames_in`), delivered as [`on_token`](Self::on_token) delivers them with one lookup
    /// of the record for the run. Only the plain case is taken here: a live record of `r`,
    /// room for the delivery, its slot free, no journal, ACKs on take. Returns the tokens
    /// taken, and the first one it did not take (with its `senders_copy`), for `on_token`
    /// (which then finds exactly what this found: nothing here changed for it).
    pub(super) fn on_token_run(
        &mut self,
        now: Instant,
        src: NodeId,
        r: u64,
        first: (u64, Bytes, bool),
        more: &mut std::vec::Drain<'_, crate::proto::wire::frame::Frame>,
    ) -> (u32, Option<(u64, Bytes, bool)>) {
        use crate::proto::wire::frame::Frame;
        if self.journal.is_some() || !self.rules.ack_on_take {
            return (0, Some(first));
        }
        let Node {
            receivers,
            untaken,
            pins,
            stats,
            events,
            cfg,
            rules,
            ..
        } = self;
        let Some(rec) = receivers.get_mut(&src).filter(|rec| rec.rck() == r) else {
            return (0, Some(first));
        };
        rec.heard(now);
        let share = rules.untaken_share_per_source;
        let mut taken = 0;
        let mut next = first;
        loop {
            let (s, payload, senders_copy) = next;
            if !untaken.has_room_for(src, &cfg.limits, share) || !rec.fill(s, r) {
                // Held back, or a duplicate: `on_token`'s to answer.
                return (taken, Some((s, payload, senders_copy)));
            }
            rec.on_delivered(s, true);
            let spent = rec.is_spent();
            let (payload, kept) = keep(pins, stats, payload);
            untaken.add(src, kept.charge);
            stats.delivered += 1;
            events.push_back(Event::Delivered {
                from: src,
                payload,
                id: DeliveryId::new(src, r, s, kept),
            });
            taken += 1;
            if spent {
                // Nothing left in it: gone, as `on_token` leaves it; the rest of the
                // datagram's tokens are `on_token`'s.
                receivers.remove(&src);
                return (taken, None);
            }
            if !matches!(more.as_slice().first(), Some(Frame::Token { r: fr, .. }) if *fr == r) {
                return (taken, None);
            }
            let Some(f) = more.next() else {
                unreachable!("seen above")
            };
            stats.frames_in.count(&f);
            let Frame::Token {
                s,
                payload,
                senders_copy,
                ..
            } = f
            else {
                unreachable!("matched above")
            };
            next = (s, payload, senders_copy);
        }
    }

    /// The answer to a TOKEN (or REQCREDIT) from `src` for slot `s` of incarnation `r` when
    /// no live record holds `r`: the journal's, when it knows (durable mode), else
    /// [`verdict_without_record`](Self::verdict_without_record)'s.
    pub(super) fn answer_without_record(&mut self, src: NodeId, r: u64, s: u64) -> Option<Verdict> {
        match self.journal_verdict(src, r, s) {
            Some(v) => {
                self.stats.duplicates_dropped += u64::from(v.is_some_and(|v| v != Verdict::Lost));
                v
            }
            None => self.verdict_without_record(r, s),
        }
    }

    /// Durable mode, rule `report_recovered_held`: whether `(src, r, s)` is a delivery a
    /// restart handed over again (no live record holds `r`) that the application has not
    /// taken yet.
    fn recovered_held(&self, src: NodeId, r: u64, s: u64) -> bool {
        self.rules.report_recovered_held
            && self
                .journal
                .as_ref()
                .is_some_and(|j| j.archive.is_held(src, r, s))
    }

    /// The answer to a TOKEN of slot `s` of incarnation `r` when no record of `r` exists.
    ///
    /// An incarnation made since this node started and then removed had every slot filled
    /// or waived, so the token is a duplicate: ACK (rule 4). One evicted under pressure: what
    /// its slot deserves (`eviction.rs`: RETRY when nothing was delivered into it, ACK for a
    /// filled slot, DOUBT when unknown). One older than this node's start (lost in a
    /// restart) or forgotten after an eviction: DOUBT, since it may or may not have been
    /// delivered.
    pub(super) fn verdict_without_record(&mut self, r: u64, s: u64) -> Option<Verdict> {
        if self.rules.plausible_input && r >= self.ck {
            // Never issued by this node (incarnations come from the clock): no verdict at
            // all, so a forged token cannot make this node vouch for anything.
            reject!(self.never_issued);
            return None;
        }
        let doubt = self.rules.doubt_lost_incarnations;
        if let Some(v) = self.evictions.verdict(r, s).filter(|_| doubt) {
            if v == Verdict::Ack {
                self.stats.duplicates_dropped += 1;
            }
            Some(v)
        } else if doubt && r < self.doubt_below {
            Some(Verdict::Doubt)
        } else {
            self.stats.duplicates_dropped += 1;
            self.rules.ack_without_record.then_some(Verdict::Ack)
        }
    }

    /// Makes room for a new receiver record by evicting a record nothing was delivered into
    /// yet (a source that asked for slots and never used them: a forger, or a sender that
    /// went away), the first whose grace since it was last heard from ran out (rule
    /// `fresh_records_kept`, [`fresh_grace`](Self::fresh_grace)). Its later TOKENs get
    /// RETRY, so nothing is lost. Returns false when every record is in use, or fresh.
    pub(super) fn evict_unproven(&mut self, now: Instant) -> bool {
        // A sealed node's unproven records are its keyring's, not forgers': one heard from
        // lately is kept (rule `fresh_records_kept`), else more sources than records evict
        // each other's before their TOKENs come. The candidates wait in a heap by when
        // each may go, so that a flood's requests do not each walk the table.
        let mut unproven = std::mem::take(&mut self.unproven);
        let victim = unproven.next_evictable(now, |src, r| match self.receivers.get(&src) {
            Some(rec) if rec.rck() == r && !rec.is_proven() => {
                Standing::KeptUntil(rec.last_heard() + self.fresh_grace(src))
            }
            _ => Standing::Gone,
        });
        self.unproven = unproven;
        let Some((src, r)) = victim else {
            return false;
        };
        self.evict_receiver(src, r);
        true
    }

    /// How long an unproven record of `src` heard from lately is kept under pressure (rule
    /// `fresh_records_kept`): on a sealed node `probe_interval` (its unproven records are
    /// its keyring's); on a plaintext one, where a record may be a forger's, two round
    /// trips to `src` (`initial_rtt` before one is measured), no longer than
    /// `probe_interval`: time for the SLOTS to reach it and its TOKEN to come back. A
    /// sustained flood of forged requests locks new sources out only at `max_receiver_records`
    /// per grace, where without a grace it did at that many per round trip, and more
    /// sources than records no longer evict each other's before their TOKENs come.
    pub(super) fn fresh_grace(&self, src: NodeId) -> Duration {
        let probe = self.cfg.timers.probe_interval;
        if !self.rules.fresh_records_kept {
            return Duration::ZERO;
        }
        if self.sealer.is_some() {
            return probe;
        }
        let rtt = self
            .senders
            .get(&src)
            .and_then(|rec| rec.rtt().smoothed())
            .unwrap_or(self.cfg.timers.initial_rtt);
        (rtt * 2).min(probe)
    }

    /// Removes the unproven receiver record of `src` (incarnation `r`) and remembers `r` as
    /// evicted, so its tokens get RETRY.
    pub(super) fn evict_receiver(&mut self, src: NodeId, r: u64) {
        self.receivers.remove(&src);
        self.stats.evictions += 1;
        let forgot = self.evictions.evicted_unused(r);
        self.forget_evicted_below(forgot);
    }

    /// Evicted incarnations below `below` are no longer remembered: their tokens are
    /// answered DOUBT (safe, less precise).
    fn forget_evicted_below(&mut self, below: Option<u64>) {
        if let Some(b) = below {
            self.doubt_below = self.doubt_below.max(b);
        }
    }

    /// Makes room for a new receiver record at `now`: evicts (rule `evict_silent_records`)
    /// the record whose source has been silent longest, at least `probe_interval`, with no
    /// delivery waiting for the application; else a record nothing was delivered into (a
    /// flood of requests from forged ids), the first whose grace ran out (rule
    /// `fresh_records_kept`: `probe_interval` since last heard from on a sealed node, two
    /// round trips on a plaintext one). Returns false when every record is in use.
    pub(super) fn make_room(&mut self, now: Instant) -> bool {
        // Only a sealed node evicts records something was delivered into: their RETRYs are
        // then authentic, where a plaintext sender must refuse a RETRY after an ACK of the
        // same incarnation as a forgery.
        if !self.evicts_proven() {
            return self.evict_unproven(now);
        }
        let receivers = &self.receivers;
        let candidate = |(src, rec): (&NodeId, &crate::proto::recv::record::RRecord)| Candidate {
            src: *src,
            rck: rec.rck(),
            last_heard: rec.last_heard(),
            evictable: rec.held().is_empty(),
        };
        let victim = self.evictions.next_victim(
            now,
            self.cfg.timers.probe_interval,
            || receivers.iter().map(candidate),
            |src| receivers.get_key_value(&src).map(candidate),
        );
        let Some((src, r)) = victim else {
            return self.evict_unproven(now);
        };
        if self.receivers.get(&src).is_some_and(|rec| !rec.is_proven()) {
            self.evict_receiver(src, r);
        } else {
            self.evict_proven(src);
        }
        true
    }

    /// Removes the receiver record of `src`, something delivered into it, remembering its
    /// free slots (rule `remember_evicted_slots`) so that its late TOKENs get RETRY for them
    /// and ACK for filled ones.
    pub(super) fn evict_proven(&mut self, src: NodeId) {
        let Some(rec) = self.receivers.remove(&src) else {
            return;
        };
        self.stats.evictions += 1;
        self.stats.evictions_proven += 1;
        if self.rules.remember_evicted_slots {
            let forgot = self
                .evictions
                .evicted_used(rec.rck(), rec.sck(), rec.slots());
            self.forget_evicted_below(forgot);
        }
    }

    /// Whether this node evicts receiver records something was delivered into: sealed
    /// nodes with the rule on (a plaintext sender refuses the RETRY such an eviction may
    /// bring, as a forgery).
    pub(super) fn evicts_proven(&self) -> bool {
        self.rules.evict_silent_records && self.sealer.is_some()
    }

    /// Input: the datagrams handed over next (to
    /// [`handle_datagram_buf`](Self::handle_datagram_buf)) are parts of the receive buffer
    /// `key`, `size` bytes long (several datagrams received into one buffer, or a datagram
    /// split off a larger one): a delivery handed over as a slice keeps that whole buffer
    /// alive. `key` is the embedding's, unique per buffer while any part of it may be held;
    /// `size` 0 says the datagrams own their bytes (the default). The node then keeps small
    /// slices of a buffer only within a budget of 64 MiB of such buffers and copies them
    /// out beyond, so untaken deliveries hold at most twice what they are charged plus that
    /// budget (`pins.rs`).
    pub fn set_receive_buffer(&mut self, key: u64, size: usize) {
        self.pins.set_buffer(key, size);
    }

    /// Decides how the payload of a delivery is held (`payload` is a slice of the datagram
    /// being handled, or an allocation of its own when put together from fragments):
    /// returns the payload to hand over, a copy when a slice would keep too much alive.
    pub(super) fn keep_payload(&mut self, payload: bytes::Bytes) -> (bytes::Bytes, Kept) {
        keep(&mut self.pins, &mut self.stats, payload)
    }

    /// Whether another delivery may be held now.
    pub(super) fn has_room_for_delivery(&self, src: NodeId) -> bool {
        let share = self.rules.untaken_share_per_source;
        self.untaken.has_room_for(src, &self.cfg.limits, share)
    }

    /// Input: the application has taken the delivery `id` (it left the embedding's buffer,
    /// for good). Only now is the message acknowledged to its sender, whose
    /// [`Event::Acknowledged`](crate::proto::Event::Acknowledged) therefore means "taken by the
    /// receiving application". Returns false (and does nothing) for an id that is not
    /// waiting: already taken, or from before a restart.
    ///
    /// Drain the outputs afterwards, as after any input: the ACK leaves with the next
    /// datagram to the sender, or after [`Config::acks.delay`](crate::proto::AckConfig::delay).
    pub fn handle_taken(&mut self, now: Instant, id: DeliveryId) -> bool {
        if self.journal.is_some() {
            // Durable mode: acknowledged once the take is stored (`complete_take`).
            return self.journal_take(now, id, None);
        }
        self.take_live(now, id)
    }

    /// Input: the application has taken each delivery of `ids`, in order: as
    /// [`handle_taken`](Self::handle_taken) for each, with the deliveries of one sender
    /// incarnation in a row sharing one lookup of its record, one entry for their ACKs and
    /// one flush of its verdicts. Returns how many of them were waiting.
    pub fn handle_taken_many(
        &mut self,
        now: Instant,
        ids: impl IntoIterator<Item = DeliveryId>,
    ) -> usize {
        let mut ids = ids.into_iter().peekable();
        if self.journal.is_some() {
            // Durable mode: each take is stored first (`complete_take`).
            return ids.filter(|id| self.journal_take(now, *id, None)).count();
        }
        let cap = self.outbox_cap();
        let mut slots = std::mem::take(&mut self.taken_scratch);
        let mut taken = 0;
        while let Some(first) = ids.next() {
            let (from, r) = (first.from(), first.slot().0);
            slots.clear();
            let mut urgent = false;
            let mut next = Some(first);
            let Some(rec) = self.receivers.get_mut(&from).filter(|rec| rec.rck() == r) else {
                // Not waiting: skip the run.
                while ids
                    .next_if(|id| id.from() == from && id.slot().0 == r)
                    .is_some()
                {}
                continue;
            };
            while let Some(id) = next {
                if let Some(u) = rec.on_taken(id.slot().1) {
                    urgent |= u;
                    slots.push(id);
                }
                next = ids.next_if(|id| id.from() == from && id.slot().0 == r);
            }
            if rec.is_spent() {
                self.receivers.remove(&from);
            }
            if slots.is_empty() {
                continue;
            }
            self.release_taken_run(from, &slots);
            taken += slots.len();
            let s = slots.iter().map(|id| id.slot().1);
            let dropped = self.outbox.reply_many(from, Verdict::Ack, r, s, cap);
            // The sender retransmits what found no room; the slot is neither free nor held
            // then: ACK.
            reject!(self.outbox_full, dropped as u64);
            let (delay, every) = (self.cfg.acks.delay, self.cfg.acks.every);
            self.outbox.flush_verdicts(from, now, urgent, delay, every);
        }
        slots.clear();
        self.taken_scratch = slots;
        taken
    }

    /// The take of `id`, held by its live record: released and acknowledged.
    pub(super) fn take_live(&mut self, now: Instant, id: DeliveryId) -> bool {
        let v = self.take_verdict(id);
        let (from, (r, s)) = (id.from(), id.slot());
        let Some(rec) = self.receivers.get_mut(&from) else {
            return false;
        };
        if rec.rck() != r {
            return false;
        }
        let Some(urgent) = rec.on_taken(s) else {
            return false;
        };
        // `urgent`: the sender asked for an immediate ACK of deliveries now all taken.
        // (The record's probe deadline does not depend on its held slots: no re-arming.)
        if rec.is_spent() {
            self.receivers.remove(&from);
        }
        self.release_taken(id);
        self.answer_taken(now, from, (v, r, s), urgent);
        true
    }

    /// The answer to the take of `id`: ACK, or DOUBT for an early delivery dropped unseen
    /// (its sender's frontier passed the slot, so an honest sender holds no token there and
    /// hears this as stale; only a sender restored from an older copy of its directory
    /// holds one again, and it was never delivered: `Rules::dropped_unseen_doubt`).
    #[inline]
    pub(super) fn take_verdict(&mut self, id: DeliveryId) -> Verdict {
        if self.unseen_takes.is_empty() {
            return Verdict::Ack;
        }
        self.take_verdict_unseen(id)
    }

    #[cold]
    fn take_verdict_unseen(&mut self, id: DeliveryId) -> Verdict {
        match self.unseen_takes.iter().position(|u| *u == id) {
            Some(i) => {
                self.unseen_takes.swap_remove(i);
                Verdict::Doubt
            }
            None => Verdict::Ack,
        }
    }

    /// Deliveries from `from` left the node's care: their charges given back at once, and
    /// their pinned buffers a run of deliveries of one buffer at a time.
    fn release_taken_run(&mut self, from: NodeId, ids: &[DeliveryId]) {
        let charge = ids.iter().map(|id| id.kept().charge).sum();
        self.untaken.remove_many(from, ids.len(), charge);
        let mut run: Option<(u64, u32)> = None;
        for key in ids.iter().filter_map(|id| id.kept().pin) {
            match &mut run {
                Some((k, n)) if *k == key => *n += 1,
                _ => {
                    if let Some((k, n)) = run.replace((key, 1)) {
                        self.pins.release_many(k, n);
                    }
                }
            }
        }
        if let Some((k, n)) = run {
            self.pins.release_many(k, n);
        }
        self.stats.taken += ids.len() as u64;
    }

    /// A delivery left the node's care: its charge and pinned buffer are given back.
    pub(super) fn release_taken(&mut self, id: DeliveryId) {
        let kept = id.kept();
        self.untaken.remove(id.from(), kept.charge);
        if let Some(key) = kept.pin {
            self.pins.release(key);
        }
        self.stats.taken += 1;
    }

    /// Answers the taken delivery in slot `s` of `(from, r)`: `v` is ACK, or DOUBT for one
    /// never handed over below its sender's frontier.
    pub(super) fn answer_taken(
        &mut self,
        now: Instant,
        from: NodeId,
        (v, r, s): (Verdict, u64, u64),
        urgent: bool,
    ) {
        let when = Flush {
            now,
            urgent,
            delay: self.cfg.acks.delay,
            every: self.cfg.acks.every,
        };
        let cap = self.outbox_cap();
        if !self.outbox.reply_flushed(from, (v, r, s), cap, when) {
            // The sender retransmits; the slot is neither free nor held then: ACK.
            reject!(self.outbox_full);
        }
    }

    /// Input: sends every verdict held back by the ACK delay with the next datagrams, for
    /// an embedding about to stop (so that the last messages taken are acknowledged).
    pub fn release_verdicts(&mut self) {
        self.outbox.release_all();
    }

    /// Deliveries handed to the embedding and not yet reported taken.
    pub fn untaken(&self) -> usize {
        self.untaken.count()
    }

    /// FRAG(s, r, total, offset, data) from `src`. The message is delivered, as a TOKEN
    /// would be, once every byte is there; until then the receiver answers GOT with the
    /// bytes it holds. The answers for a slot that is not free, or an incarnation it does
    /// not hold, are a TOKEN's. Returns true when the answer should not wait for the ACK
    /// delay.
    pub(super) fn on_frag(
        &mut self,
        now: Instant,
        src: NodeId,
        (s, r, total): (u64, u64, u64),
        offset: u64,
        data: Bytes,
        senders_copy: bool,
    ) -> bool {
        // The limit protects reassembly memory: a FRAG that is the whole message needs none,
        // and is taken as a TOKEN of that size would be.
        let whole = offset == 0 && data.len() as u64 == total;
        if total > self.cfg.limits.max_message_size as u64 && !whole {
            reject!(self.fragment_refused);
            return false;
        }
        // Fragments never leave early: any FRAG or SFRAG of a slot whose early delivery is
        // held for its sender's word is that word (a token sent again in fragments after
        // the path's datagrams shrank, or the probe of a message held whole; its GOT below
        // stops the sender's retransmissions, so nothing else would bring the word).
        self.stored_copy(src, s);
        let room = self.has_room_for_delivery(src) || !self.rules.ack_on_take;
        let cap = self.outbox_cap();
        let live = self.receivers.get(&src).is_some_and(|rec| rec.rck() == r);
        if !live && self.recovered_held(src, r, s) {
            // Handed over again after a restart and not taken yet (its application may wait
            // for another message first): reported held, as a live record reports its
            // held deliveries, so that its sender takes it out of flight and the messages
            // the application waits for can go.
            if !self.outbox.held(src, r, s, cap) {
                reject!(self.outbox_full);
            }
            return true;
        }
        if !whole
            && self.receivers.get(&src).is_none_or(|rec| rec.rck() != r)
            && self.journal_redelivers(src, r, s)
        {
            // Part of a message an earlier run handed over and no one took: reassembled to be
            // delivered again.
            return self.on_revived_frag(now, src, (s, r, total), offset, data, senders_copy);
        }
        let Some(rec) = self.receivers.get_mut(&src).filter(|rec| rec.rck() == r) else {
            // No record of `r`: the verdict a TOKEN would get (ACK, DOUBT or RETRY).
            return self.on_token(now, src, s, r, data, TokenKind::stored(senders_copy));
        };
        if !rec.slots().contains(s) {
            if rec.held().contains(s) {
                // Whole and waiting for the application: the sender may stop sending it.
                rec.heard(now);
                self.stats.duplicates_dropped += 1;
                if !self.outbox.held(src, r, s, cap) {
                    reject!(self.outbox_full);
                }
                return true;
            }
            return self.on_token(now, src, s, r, data, TokenKind::stored(senders_copy));
        }
        rec.heard(now);
        if !room {
            self.stats.held_back += 1;
            return false;
        }
        let credit = self.rules.fragments_need_credit;
        match rec
            .assembler_mut()
            .insert(s, total, offset, &data, now, credit, &self.bufs)
        {
            Piece::Whole(payload) => {
                if !self.outbox.held(src, r, s, cap) {
                    reject!(self.outbox_full);
                }
                if payload.len() > data.len() {
                    self.stats.reassembled += 1;
                }
                self.on_token(now, src, s, r, payload, TokenKind::stored(senders_copy))
            }
            Piece::Kept => {
                if let Some(have) = rec.assembler().have(s) {
                    if !self.outbox.got(src, r, s, have, cap) {
                        reject!(self.outbox_full);
                    }
                    if self.rules.probe_repeats_got {
                        rec.note_got(s);
                    }
                }
                false
            }
            Piece::Refused(why) => {
                reject!(self.fragment_refused);
                if self.rules.got_charges_partials && why == Refusal::NoCredit {
                    self.report_partial(src, r);
                }
                false
            }
        }
    }

    /// A FRAG from `src` (incarnation `r`) refused for want of credit: answered with the GOT
    /// of one partial held for it, in turn (`Rules::got_charges_partials`), so that a
    /// sender counting less of the grant in use learns what holds it.
    fn report_partial(&mut self, src: NodeId, r: u64) {
        let cap = self.outbox_cap();
        let Some(rec) = self.receivers.get_mut(&src) else {
            return;
        };
        if let Some((held, have)) = rec.assembler_mut().next_report() {
            if !self.outbox.got(src, r, held, have, cap) {
                reject!(self.outbox_full);
            }
        }
    }

    /// GOT(r, s, ranges) from `src`: the bytes it holds of our message in slot `s`; or,
    /// with `s` `None`, HELD(r, ranges): it holds our messages in those slots whole,
    /// untaken. Loss detection runs once the whole datagram is read (see `handle_frames`):
    /// a datagram carries a GOT per message, and judging after the first would take the
    /// fragments the later ones answer for lost.
    pub(super) fn on_got(
        &mut self,
        now: Instant,
        src: NodeId,
        (r, s): (u64, Option<u64>),
        ranges: impl Iterator<Item = std::ops::Range<u64>>,
    ) {
        let rules = (
            self.rules.token_keeps_incarnation,
            self.rules.whole_awaits_verdict,
        );
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        let whole = match s {
            Some(s) => {
                let whole = rec.on_got(now, (r, s), ranges, rules, &self.cfg);
                if self.rules.got_charges_partials {
                    rec.charge_partial(s);
                }
                whole
            }
            None => ranges.fold(false, |whole, rg| {
                rec.on_held(now, (r, rg), rules, &self.cfg) | whole
            }),
        };
        let held = s.is_none() || whole;
        if whole && rec.has_credit_waiters() {
            self.resume_credit_waiters(src);
        }
        if held {
            // Tokens held whole may leave the slot window to queued messages
            // (`Rules::held_outside_slot_window`).
            self.request_slots(src);
        }
    }

    /// REQCREDIT(r, s, want) from `src`: its receiver record's grant grows towards `want`,
    /// within the per-source cap and what no other record holds; the answer is CREDIT with
    /// the grant, even unchanged (the sender learns where it stands). Without incarnation
    /// `r`, the answer is the verdict a TOKEN for `(s, r)` would get: the sender learns that
    /// its waiting messages were made under a lost incarnation.
    pub(super) fn on_reqcredit(
        &mut self,
        now: Instant,
        src: NodeId,
        (r, s, want): (u64, u64, u64),
    ) {
        if self.receivers.get(&src).is_none_or(|rec| rec.rck() != r) {
            if self.journal_redelivers(src, r, s) {
                return self.on_revived_reqcredit(src, r, want);
            }
            if let Some(v) = self.answer_without_record(src, r, s) {
                self.note_told(src, v, r, s);
                let cap = self.outbox_cap();
                if !self.outbox.reply(src, v, r, s, cap) {
                    reject!(self.outbox_full);
                }
                let (delay, every) = (self.cfg.acks.delay, self.cfg.acks.every);
                self.outbox.flush_verdicts(src, now, true, delay, every);
            }
            return;
        }
        let reserved = self.reassembly_granted();
        let free = self
            .cfg
            .limits
            .max_reassembly_bytes
            .saturating_sub(reserved);
        let cap = self.outbox_cap();
        let Some(rec) = self.receivers.get_mut(&src) else {
            return;
        };
        let (limit, _) =
            rec.assembler_mut()
                .grant(want, self.cfg.limits.max_reassembly_per_source, free);
        let max = self.cfg.limits.max_message_size as u64;
        if !self.outbox.credit(src, rec.rck(), limit, max, cap) {
            reject!(self.outbox_full);
        }
    }

    /// CREDIT(r, limit, max) from `src`: messages waiting for credit may go; those larger
    /// than the receiver takes (`max`) never will, and are given up.
    pub(super) fn on_credit(&mut self, now: Instant, src: NodeId, r: u64, limit: u64, max: u64) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        if rec.on_credit(r, limit) {
            self.refuse_oversized(now, src, max);
            self.resume_credit_waiters(src);
        }
    }

    /// Gives up the messages to `src` larger than `max`, the largest its receiver takes,
    /// that still have bytes to send, each with its truthful verdict (not delivered, or in
    /// doubt when a whole copy may have left: `SRecord::refuse_oversized`).
    fn refuse_oversized(&mut self, now: Instant, src: NodeId, max: u64) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        let sink = Sink {
            stats: &mut self.stats,
            events: &mut self.events,
            queued_bytes: &mut self.queued_bytes,
            held: self.journal.as_mut().map(|j| &mut j.held),
            released: self.released.as_mut(),
        };
        rec.refuse_oversized(src, max, &self.rules, sink);
        self.journal_verdicts(now, src);
    }

    /// Puts the messages waiting for credit back in the sending queue (they wait again if
    /// there still is not enough).
    fn resume_credit_waiters(&mut self, src: NodeId) {
        let Some(rec) = self.senders.get_mut(&src) else {
            return;
        };
        rec.resume_credit_waiters();
        self.outbox.wake(src, usize::MAX);
    }

    /// Bytes of reassembly memory partial messages hold now, over all sources.
    pub fn reassembly_in_use(&self) -> u64 {
        let revived = self.journal.as_ref().map_or(0, |j| {
            j.revived.values().map(|(_, a)| a.in_use()).sum::<u64>()
        });
        self.receivers
            .values()
            .map(|r| r.assembler().in_use())
            .sum::<u64>()
            + revived
    }

    /// Bytes of reassembly memory granted (CREDIT) over all sources: never more than
    /// [`Config::limits.max_reassembly_bytes`](crate::proto::Limits::max_reassembly_bytes).
    pub fn reassembly_granted(&self) -> u64 {
        let revived = self.journal.as_ref().map_or(0, |j| {
            j.revived.values().map(|(_, a)| a.granted()).sum::<u64>()
        });
        self.receivers
            .values()
            .map(|r| r.assembler().granted())
            .sum::<u64>()
            + revived
    }

    /// Partial messages being reassembled, over all sources.
    pub fn partial_messages(&self) -> usize {
        self.receivers
            .values()
            .map(|r| r.assembler().partials())
            .sum()
    }
}

/// [`Node::keep_payload`] on the node's pins and counters alone (a run of deliveries
/// borrows the record beside them).
fn keep(
    pins: &mut crate::proto::recv::pins::Pins,
    stats: &mut crate::proto::Stats,
    payload: Bytes,
) -> (Bytes, Kept) {
    match pins.hold(payload.len()) {
        Hold::Keep { charge, pin } => {
            stats.pinned_deliveries += u64::from(pin.is_some());
            (payload, Kept { charge, pin })
        }
        Hold::Copy { charge } => {
            stats.copied_deliveries += 1;
            let copy = Bytes::copy_from_slice(&payload);
            (copy, Kept { charge, pin: None })
        }
    }
}

/// Whether slot `s` of `src` lies below the frontier past which the journal forgot its
/// slots (`Rules::doubt_below_forgotten`). A slot the lost run's frontier waived (never
/// delivered) looks taken there: only a sender restored from an older copy has a token
/// in it, and it gets DOUBT. An honest sender's late duplicate draws the same DOUBT and
/// ignores it (`Rules::stale_verdicts_ignored`).
fn below_forgotten(journal: Option<&Journal>, rules: &Rules, src: NodeId, s: u64) -> bool {
    rules.doubt_below_forgotten && journal.is_some_and(|j| s < j.forgotten.below(src))
}
