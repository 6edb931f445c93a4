//! Replies waiting to be written (ACKs, SLOTS, waivers) and the round-robin queue of peers
//! that have something to send.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::proto::stats::FrameCounts;
use crate::proto::wire::clocks::Clocks;
use crate::proto::wire::frame::{
    frame_type, put_mtu_ack, put_path, put_received, Verdict, RECEIVED_FRAME_LEN,
};
use crate::proto::wire::ranges::RangeSet;
use crate::proto::{NodeId, PeerMap};

/// Most verdict ranges (ACK, DOUBT, RETRY) kept pending for one peer; beyond, they are
/// dropped (the sender retransmits, so this costs liveness only) and counted.
pub(crate) const MAX_PENDING_ACK_RANGES: usize = 4096;

/// Most messages with a GOT pending for one peer; beyond, the newest is dropped (the
/// sender's retransmission brings another).
const MAX_PENDING_GOT: usize = 64;

/// Most byte ranges one GOT repeats: the first ones, where the holes to fill are.
const MAX_GOT_RANGES: usize = 32;

/// Most MTU_ACKs kept pending for one peer (the newest); a probe left unanswered is only
/// a probe lost.
pub(crate) const MAX_PENDING_MTU_ACKS: usize = 4;

/// Frames owed to one peer that belong to no sender record.
#[derive(Debug, Default)]
pub(crate) struct PeerOut {
    /// Slots to answer (ACK, DOUBT or RETRY), per verdict and incarnation.
    acks: Vec<(Verdict, u64, RangeSet)>,
    /// SLOTS(s, r, n) answering a request (the newest request wins).
    grant: Option<(u64, u64, u64)>,
    /// SLOTS(s, r, 0): a probe.
    probe: Option<(u64, u64)>,
    /// REQSLOTS(s, 0, l): a waiver with no record behind it.
    waive: Option<u64>,
    /// GOT(r, s, ranges): the bytes held of fragmented messages, newest state per message.
    got: Vec<(u64, u64, RangeSet)>,
    /// HELD(r, slots): messages held whole and untaken, per incarnation.
    held: Vec<(u64, RangeSet)>,
    /// FRAG frames received since the last GOT went (counts toward `ack_every`).
    got_frags: u32,
    /// CREDIT(r, limit, max) to send (the newest wins).
    credit: Option<(u64, u64, u64)>,
    /// CHALLENGE(token) to send (the newest wins).
    challenge: Option<u64>,
    /// RESPONSE(token) to send (the newest wins).
    response: Option<u64>,
    /// MTU_ACK(id)s to send, oldest first (at most [`MAX_PENDING_MTU_ACKS`]).
    mtu_acks: Vec<u64>,
    /// In the `ready` queue.
    ready: bool,
    /// Verdicts are held (delayed ACK) until this instant, unless something else goes to
    /// the peer first.
    ack_at: Option<Instant>,
    /// Some of its ACKs answer duplicates (the peer is retransmitting): they wait for
    /// nothing ([`only_acks`](Self::only_acks) is false).
    no_hold: bool,
}

impl PeerOut {
    /// Whether all it owes is ACKs, of fewer than `every` slots: what may wait for a
    /// datagram the peer gets soon anyway (see [`Outbox::hold_until`]).
    pub fn only_acks(&self, every: u32) -> bool {
        !self.acks.is_empty()
            && !self.no_hold
            && self.acks.iter().all(|(v, _, _)| *v == Verdict::Ack)
            && self.nothing_but_verdicts()
            && self.verdict_slots() < u64::from(every)
    }

    /// When its held verdicts are due (`None`: not held, due now unless held).
    pub fn ack_at(&self) -> Option<Instant> {
        self.ack_at
    }

    /// Whether it owes verdicts, HELDs or GOTs: frames a receipt time (RECEIVED) goes with.
    #[inline]
    pub fn owes_receipts(&self) -> bool {
        !self.acks.is_empty() || !self.held.is_empty() || !self.got.is_empty()
    }

    /// True when nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty() && self.nothing_but_verdicts()
    }

    /// Whether it owes nothing but verdict frames (ACK, DOUBT, RETRY), if any.
    fn nothing_but_verdicts(&self) -> bool {
        self.got.is_empty()
            && self.held.is_empty()
            && self.credit.is_none()
            && self.grant.is_none()
            && self.probe.is_none()
            && self.waive.is_none()
            && self.challenge.is_none()
            && self.response.is_none()
            && self.mtu_acks.is_empty()
    }

    /// Calls `f` with each pending verdict frame's verdict, incarnation and ranges (which
    /// it may add to).
    #[inline]
    pub fn for_each_verdict(&mut self, mut f: impl FnMut(Verdict, u64, &mut RangeSet)) {
        for (v, r, set) in &mut self.acks {
            f(*v, *r, set);
        }
    }

    /// Queues verdict `v` on slot `s` of incarnation `r`, within the cap on pending ranges.
    /// Returns false if dropped.
    #[inline]
    fn queue_verdict(&mut self, v: Verdict, r: u64, s: u64) -> bool {
        if self.ack_ranges() >= MAX_PENDING_ACK_RANGES {
            return false;
        }
        let i = self.verdict_at(v, r);
        self.acks[i].2.insert(s..s + 1);
        true
    }

    /// Where the pending slots of verdict `v` in incarnation `r` lie in `acks`, an empty
    /// set added if none.
    #[inline]
    fn verdict_at(&mut self, v: Verdict, r: u64) -> usize {
        match self
            .acks
            .iter()
            .position(|(w, rck, _)| *w == v && *rck == r)
        {
            Some(i) => i,
            None => {
                self.acks.push((v, r, RangeSet::new()));
                self.acks.len() - 1
            }
        }
    }

    /// Writes what is owed into the datagram in `buf`, frames ending by `limit`: MTU_ACKs
    /// and path frames first, then the receipt time `receipt` (RECEIVED) if verdicts, HELDs
    /// or GOTs follow, then those (as many ranges as fit), then
    /// CREDIT, SLOTS and waivers where they fit. What does not fit stays owed. Counts the
    /// frames. A slot acknowledged since it was reported held is not reported held. Clock
    /// fields go on the datagram's chains `clocks`.
    #[inline]
    pub fn write_frames(
        &mut self,
        buf: &mut Vec<u8>,
        limit: usize,
        clocks: &mut Clocks,
        frames: &mut FrameCounts,
        receipt: Option<u16>,
    ) {
        let room = |buf: &Vec<u8>| limit - buf.len();
        for id in self.mtu_acks.drain(..) {
            put_mtu_ack(buf, id);
            frames.mtu_ack += 1;
        }
        if let Some(token) = self.response.take() {
            put_path(buf, frame_type::RESPONSE, token);
            frames.response += 1;
        }
        if let Some(token) = self.challenge.take() {
            put_path(buf, frame_type::CHALLENGE, token);
            frames.challenge += 1;
        }
        self.drop_held_taken();
        // Before the frames it applies to; taken back if none of them fit after it.
        let received_at = buf.len();
        let mut received = false;
        if let Some(at) = receipt.filter(|_| self.owes_receipts()) {
            if room(buf) > RECEIVED_FRAME_LEN {
                put_received(buf, at);
                received = true;
            }
        }
        self.write_ranges(buf, limit, clocks, frames);
        if received && buf.len() == received_at + RECEIVED_FRAME_LEN {
            buf.truncate(received_at);
        } else if received {
            frames.received += 1;
        }
        if self.got.is_empty() && self.held.is_empty() {
            self.got_frags = 0;
        }
        if self.acks.is_empty() && self.got.is_empty() && self.held.is_empty() {
            self.ack_at = None;
            self.no_hold = false;
        }
        if let Some((r, granted, max)) = self.credit {
            if clocks.credit_len(r, granted, max) <= room(buf) {
                clocks.put_credit(buf, r, granted, max);
                frames.credit += 1;
                self.credit = None;
            }
        }
        // The probe before the grant: a grant behind a probe gives its sender no RTT sample
        // (it may be the probe's repeat of a lost one, `probe_repeats_grant`).
        if let Some((s, r)) = self.probe {
            if clocks.slots_len(s, r, 0) <= room(buf) {
                clocks.put_slots(buf, s, r, 0);
                frames.slots += 1;
                self.probe = None;
            }
        }
        if let Some((s, r, n)) = self.grant {
            if clocks.slots_len(s, r, n) <= room(buf) {
                clocks.put_slots(buf, s, r, n);
                frames.slots += 1;
                self.grant = None;
            }
        }
        if let Some(s) = self.waive {
            if clocks.reqslots_len(s, 0, s) <= room(buf) {
                clocks.put_reqslots(buf, s, 0, s);
                frames.reqslots += 1;
                self.waive = None;
            }
        }
    }

    /// Writes the verdicts, HELDs and GOTs owed (as many ranges as fit before `limit`).
    #[inline]
    fn write_ranges(
        &mut self,
        buf: &mut Vec<u8>,
        limit: usize,
        clocks: &mut Clocks,
        frames: &mut FrameCounts,
    ) {
        let room = |buf: &Vec<u8>| limit - buf.len();
        for (v, r, set) in &mut self.acks {
            while !set.is_empty() {
                let k = clocks.put_verdict(buf, (*v, *r), set.ranges(), room(buf));
                if k == 0 {
                    break;
                }
                set.pop_front_ranges(k);
                frames.count_verdict(*v);
            }
        }
        self.acks.retain(|(_, _, set)| !set.is_empty());
        for (r, set) in &mut self.held {
            while !set.is_empty() {
                let k = clocks.put_held(buf, *r, set.ranges(), room(buf));
                if k == 0 {
                    break;
                }
                set.pop_front_ranges(k);
                frames.held += 1;
            }
        }
        self.held.retain(|(_, set)| !set.is_empty());
        for (r, s, set) in &mut self.got {
            let k = clocks.put_got(buf, *r, *s, set.ranges(), room(buf));
            if k == 0 {
                break;
            }
            // Only the first ranges fit: the rest is news the next GOT repeats.
            set.clear();
            frames.got += 1;
        }
        self.got.retain(|(_, _, set)| !set.is_empty());
    }

    /// Takes out of the pending HELDs every slot with an ACK pending: taken since it was
    /// reported held, it is acknowledged instead. (The check inline: HELDs are rare, and
    /// every datagram's frames ask.)
    #[inline]
    fn drop_held_taken(&mut self) {
        if !self.held.is_empty() {
            self.drop_held_taken_from_held();
        }
    }

    /// [`drop_held_taken`](Self::drop_held_taken) when HELDs are pending.
    #[cold]
    fn drop_held_taken_from_held(&mut self) {
        for (r, held) in &mut self.held {
            for (_, _, acked) in self
                .acks
                .iter()
                .filter(|(v, r0, _)| *v == Verdict::Ack && r0 == r)
            {
                let (Some(lo), Some(hi)) = (held.min(), held.ranges().last().map(|g| g.end)) else {
                    break;
                };
                for a in acked.ranges() {
                    if a.end <= lo {
                        continue;
                    }
                    if a.start >= hi {
                        break;
                    }
                    held.remove_range(a.clone());
                }
            }
        }
        self.held.retain(|(_, set)| !set.is_empty());
    }

    /// Slots answered in `acks`, not yet written.
    fn verdict_slots(&self) -> u64 {
        self.acks.iter().map(|(_, _, s)| s.count()).sum::<u64>() + u64::from(self.got_frags)
    }

    fn ack_ranges(&self) -> usize {
        self.acks.iter().map(|(_, _, s)| s.range_count()).sum()
    }
}

/// The peers with pending output, in the order they will be served.
///
/// A peer is in `ready` exactly when its entry in `peers` says so; `poll_transmit` takes the
/// front peer, writes one datagram, and puts the peer at the back if it has more to send,
/// so one busy peer cannot starve the others. A peer owed only verdicts may instead wait in
/// `deferred` until its ACK delay runs out (or something else wakes it).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    peers: PeerMap<PeerOut>,
    ready: VecDeque<NodeId>,
    /// Peers holding delayed verdicts, by deadline (stale entries are skipped).
    deferred: VecDeque<(Instant, NodeId)>,
}

impl Outbox {
    /// Gives back the memory of its tables once they are far larger than what they hold.
    pub fn shrink(&mut self) {
        if self.peers.capacity() > 4 * self.peers.len() + 64 {
            self.peers.shrink_to(2 * self.peers.len());
        }
        if self.ready.capacity() > 4 * self.ready.len() + 64 {
            self.ready.shrink_to(2 * self.ready.len());
        }
        if self.deferred.capacity() > 4 * self.deferred.len() + 64 {
            self.deferred.shrink_to(2 * self.deferred.len());
        }
    }

    /// The pending output of `peer`, created if needed without queueing the peer. Returns
    /// `None` when a new entry would exceed `cap` peers.
    fn entry(&mut self, peer: NodeId, cap: usize) -> Option<&mut PeerOut> {
        entry_in(&mut self.peers, peer, cap)
    }

    /// The next peer to serve and what it is owed, taken out of the outbox (give it back
    /// with [`put_back`](Self::put_back) if anything is left).
    #[inline]
    pub fn next_ready(&mut self) -> Option<(NodeId, PeerOut)> {
        let peer = self.ready.pop_front()?;
        let mut out = self.peers.remove(&peer).unwrap_or_default();
        out.ready = false;
        Some((peer, out))
    }

    /// Gives back what `peer` is still owed, queued to be served again when `ready`, else
    /// left until something wakes it.
    #[inline]
    pub fn put_back(&mut self, peer: NodeId, mut out: PeerOut, ready: bool) {
        out.ready = ready;
        self.peers.insert(peer, out);
        if ready {
            self.ready.push_back(peer);
        }
    }

    /// Whether anything is owed to `peer`.
    #[inline]
    pub fn owes(&self, peer: NodeId) -> bool {
        self.peers.contains_key(&peer)
    }

    /// The pending output of `peer`, queueing the peer to be served. Returns `None` when a
    /// new entry would exceed `cap` peers.
    pub fn wake(&mut self, peer: NodeId, cap: usize) -> Option<&mut PeerOut> {
        let out = entry_in(&mut self.peers, peer, cap)?;
        if !out.ready {
            out.ready = true;
            self.ready.push_back(peer);
        }
        Some(out)
    }

    /// After a datagram with tokens from `peer`: sends its verdicts at once when `urgent`,
    /// when `every` tokens are waiting, or when `delay` is zero; otherwise holds them until
    /// `now + delay` at the latest.
    pub fn flush_verdicts(
        &mut self,
        peer: NodeId,
        now: Instant,
        urgent: bool,
        delay: Duration,
        every: u32,
    ) {
        let Some(out) = self.peers.get_mut(&peer) else {
            return;
        };
        let when = Flush {
            now,
            urgent,
            delay,
            every,
        };
        flush_in(out, peer, when, (&mut self.ready, &mut self.deferred));
    }

    /// [`reply`](Self::reply) and then [`flush_verdicts`](Self::flush_verdicts), with one
    /// lookup of the peer's entry (a take's ACK). Returns false if the verdict was dropped.
    pub fn reply_flushed(
        &mut self,
        peer: NodeId,
        (v, r, s): (Verdict, u64, u64),
        cap: usize,
        when: Flush,
    ) -> bool {
        let Some(out) = entry_in(&mut self.peers, peer, cap) else {
            return false;
        };
        let queued = out.queue_verdict(v, r, s);
        flush_in(out, peer, when, (&mut self.ready, &mut self.deferred));
        queued
    }

    /// The verdicts owed to `peer` answer a retransmission: they go without waiting for
    /// tokens ([`hold_until`](Self::hold_until)).
    pub fn no_hold(&mut self, peer: NodeId) {
        if let Some(out) = self.peers.get_mut(&peer) {
            out.no_hold = true;
        }
    }

    /// Gives back `peer`'s ACKs (`out`, all it owes: [`PeerOut::only_acks`]) to wait until
    /// `at` at the latest, unless a datagram goes to the peer before (it takes them).
    pub fn hold_until(&mut self, peer: NodeId, mut out: PeerOut, at: Instant) {
        let fresh = out.ack_at != Some(at);
        out.ack_at = Some(at);
        out.ready = false;
        self.peers.insert(peer, out);
        if fresh {
            // Kept in deadline order (`release_due` stops at the first one not due).
            let i = self.deferred.partition_point(|&(a, _)| a <= at);
            self.deferred.insert(i, (at, peer));
        }
    }

    /// Queues every peer whose ACK delay ran out by `now`.
    pub fn release_due(&mut self, now: Instant) {
        while let Some(&(at, peer)) = self.deferred.front() {
            if at > now {
                break;
            }
            self.deferred.pop_front();
            if self.peers.get(&peer).is_some_and(|o| o.ack_at == Some(at)) {
                self.wake(peer, usize::MAX);
            }
        }
    }

    /// Queues every peer holding delayed verdicts, whatever their deadline.
    #[inline]
    pub fn release_all(&mut self) {
        while let Some((at, peer)) = self.deferred.pop_front() {
            if self.peers.get(&peer).is_some_and(|o| o.ack_at == Some(at)) {
                self.wake(peer, usize::MAX);
            }
        }
    }

    /// The next ACK deadline, if any (skipping stale entries).
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&(at, peer)) = self.deferred.front() {
            let live = self
                .peers
                .get(&peer)
                .is_some_and(|o| o.ack_at == Some(at) && !o.ready);
            if live {
                return Some(at);
            }
            self.deferred.pop_front();
        }
        None
    }

    /// Queues verdict `v` on slot `s` of incarnation `r`, without waking the peer (see
    /// [`flush_verdicts`](Self::flush_verdicts)). Returns false if dropped.
    pub fn reply(&mut self, peer: NodeId, v: Verdict, r: u64, s: u64, cap: usize) -> bool {
        self.entry(peer, cap)
            .is_some_and(|out| out.queue_verdict(v, r, s))
    }

    /// Queues verdict `v` of `ranges` (slots answered before, in incarnation `r`) again,
    /// within the cap on pending ranges. Returns false if dropped.
    pub fn repeat_verdicts(
        &mut self,
        peer: NodeId,
        v: Verdict,
        r: u64,
        ranges: &RangeSet,
        cap: usize,
    ) -> bool {
        let Some(out) = self.entry(peer, cap) else {
            return false;
        };
        if out.ack_ranges() + ranges.range_count() > MAX_PENDING_ACK_RANGES {
            return false;
        }
        let i = out.verdict_at(v, r);
        let set = &mut out.acks[i].2;
        for g in ranges.ranges() {
            set.insert(g.clone());
        }
        true
    }

    /// Queues the verdict `v` for each slot of `slots`, incarnation `r`, as
    /// [`reply`](Self::reply) does for one (one lookup of the peer's entry for them all).
    /// Returns how many were dropped (the pending ranges were full).
    pub fn reply_many(
        &mut self,
        peer: NodeId,
        v: Verdict,
        r: u64,
        slots: impl ExactSizeIterator<Item = u64>,
        cap: usize,
    ) -> usize {
        let Some(out) = self.entry(peer, cap) else {
            return slots.len();
        };
        let mut ranges = out.ack_ranges();
        let i = out.verdict_at(v, r);
        let set = &mut out.acks[i].2;
        let mut dropped = 0;
        let mut slots = slots.peekable();
        while let Some(first) = slots.next() {
            // Taken in slot order, so usually one run: inserted as a range, not slot by
            // slot. The slots after the first join its range and never add one, so they
            // are kept exactly when the first leaves room (as slot by slot they would be).
            let mut end = first + 1;
            while slots.next_if_eq(&end).is_some() {
                end += 1;
            }
            let run = usize::try_from(end - first).unwrap_or(usize::MAX);
            if ranges >= MAX_PENDING_ACK_RANGES {
                dropped += run;
                continue;
            }
            let before = set.range_count();
            set.insert(first..first + 1);
            ranges = ranges + set.range_count() - before;
            if run > 1 {
                if ranges >= MAX_PENDING_ACK_RANGES {
                    dropped += run - 1;
                    continue;
                }
                let before = set.range_count();
                set.insert(first + 1..end);
                ranges = ranges + set.range_count() - before;
            }
        }
        if set.is_empty() {
            out.acks.swap_remove(i);
        }
        dropped
    }

    /// Queues GOT for slot `s` of incarnation `r`: the receiver holds `have` of its bytes
    /// (the first [`MAX_GOT_RANGES`] ranges are kept). Does not wake the peer (see
    /// [`flush_verdicts`](Self::flush_verdicts)). Returns false if dropped.
    pub fn got(&mut self, peer: NodeId, r: u64, s: u64, have: &RangeSet, cap: usize) -> bool {
        let Some(out) = self.entry(peer, cap) else {
            return false;
        };
        out.got_frags = out.got_frags.saturating_add(1);
        let i = match out.got.iter().position(|(r0, s0, _)| *r0 == r && *s0 == s) {
            Some(i) => i,
            None if out.got.len() < MAX_PENDING_GOT => {
                out.got.push((r, s, RangeSet::new()));
                out.got.len() - 1
            }
            None => return false,
        };
        // Refilled in place: a GOT per FRAG received allocates nothing once the entry exists.
        let set = &mut out.got[i].2;
        set.clear();
        for g in have.ranges().iter().take(MAX_GOT_RANGES) {
            set.insert(g.clone());
        }
        true
    }

    /// Queues HELD for slot `s` of incarnation `r`: the message in it is held whole and
    /// untaken (any GOT pending for it is dropped). Does not wake the peer (see [`flush_verdicts`](Self::flush_verdicts)).
    /// Returns false if dropped (the pending ranges were full: the sender asks again).
    pub fn held(&mut self, peer: NodeId, r: u64, s: u64, cap: usize) -> bool {
        let Some(out) = self.entry(peer, cap) else {
            return false;
        };
        out.got_frags = out.got_frags.saturating_add(1);
        // HELD supersedes a GOT of fewer bytes still pending for the message: written after
        // the HELD, it would tell the sender the receiver dropped some.
        out.got.retain(|(r0, s0, _)| (*r0, *s0) != (r, s));
        let ranges: usize = out.held.iter().map(|(_, set)| set.range_count()).sum();
        let i = match out.held.iter().position(|(r0, _)| *r0 == r) {
            Some(i) => i,
            None => {
                out.held.push((r, RangeSet::new()));
                out.held.len() - 1
            }
        };
        let set = &mut out.held[i].1;
        if ranges >= MAX_PENDING_ACK_RANGES && set.would_add_range(s..s + 1) {
            if set.is_empty() {
                out.held.swap_remove(i);
            }
            return false;
        }
        set.insert(s..s + 1);
        true
    }

    /// Queues CREDIT(r, limit, max) and wakes the peer.
    #[inline]
    pub fn credit(&mut self, peer: NodeId, r: u64, limit: u64, max: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.credit = Some((r, limit, max));
        true
    }

    /// Queues SLOTS(s, r, n) answering a request; keeps the newest of several.
    pub fn grant(&mut self, peer: NodeId, s: u64, r: u64, n: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        if out
            .grant
            .is_none_or(|(s0, r0, n0)| (r, s, n) > (r0, s0, n0))
        {
            out.grant = Some((s, r, n));
        }
        true
    }

    /// Queues the probe SLOTS(s, r, 0).
    #[inline]
    pub fn probe(&mut self, peer: NodeId, s: u64, r: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.probe = Some((s, r));
        true
    }

    /// Queues the waiver REQSLOTS(s, 0, s): "I hold nothing below s".
    #[inline]
    pub fn waive(&mut self, peer: NodeId, s: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.waive = Some(out.waive.map_or(s, |w| w.max(s)));
        true
    }

    /// Queues CHALLENGE(token) for `peer`. Returns false if the outbox is full.
    #[inline]
    pub fn challenge(&mut self, peer: NodeId, token: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.challenge = Some(token);
        true
    }

    /// Queues MTU_ACK(id) for `peer`, answering its MTU_PROBE at once. Returns false if the
    /// outbox is full.
    pub fn mtu_ack(&mut self, peer: NodeId, id: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        if out.mtu_acks.len() >= MAX_PENDING_MTU_ACKS {
            out.mtu_acks.remove(0);
        }
        out.mtu_acks.push(id);
        true
    }

    /// Queues RESPONSE(token) for `peer`. Returns false if the outbox is full.
    #[inline]
    pub fn respond(&mut self, peer: NodeId, token: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.response = Some(token);
        true
    }
}

/// When verdicts owed to a peer go ([`Outbox::flush_verdicts`]).
#[derive(Debug, Clone, Copy)]
pub struct Flush {
    /// The time now.
    pub now: Instant,
    /// At once (a retransmission, or the sender asked).
    pub urgent: bool,
    /// The ACK delay otherwise.
    pub delay: Duration,
    /// At once when this many slots are owed.
    pub every: u32,
}

/// `peer`'s verdicts in `out` go at once (it is queued in `ready`) when `when` says so,
/// else by the ACK delay (noted in `deferred`); nothing if it owes none or is queued.
fn flush_in(
    out: &mut PeerOut,
    peer: NodeId,
    when: Flush,
    (ready, deferred): (&mut VecDeque<NodeId>, &mut VecDeque<(Instant, NodeId)>),
) {
    if (out.acks.is_empty() && out.got.is_empty() && out.held.is_empty()) || out.ready {
        return;
    }
    if when.urgent || when.delay.is_zero() || out.verdict_slots() >= u64::from(when.every) {
        out.ready = true;
        ready.push_back(peer);
    } else if out.ack_at.is_none() {
        let at = when.now + when.delay;
        out.ack_at = Some(at);
        deferred.push_back((at, peer));
    }
}

/// The entry of `peer` in `peers`, created if it fits under `cap` entries (a free function so
/// that callers can keep borrowing the outbox's other fields).
fn entry_in(peers: &mut PeerMap<PeerOut>, peer: NodeId, cap: usize) -> Option<&mut PeerOut> {
    let len = peers.len();
    match peers.entry(peer) {
        Entry::Occupied(e) => Some(e.into_mut()),
        Entry::Vacant(e) => (len < cap).then(|| e.insert(PeerOut::default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::wire::frame::{decode_frames_into, Frame};

    fn written(out: &mut PeerOut) -> Vec<Frame> {
        written_with(out, 1200, None)
    }

    /// What `out` writes into a datagram of `limit` bytes with receipt time `receipt`.
    fn written_with(out: &mut PeerOut, limit: usize, receipt: Option<u16>) -> Vec<Frame> {
        let mut buf = Vec::new();
        let mut counts = FrameCounts::default();
        out.write_frames(
            &mut buf,
            limit,
            &mut Clocks::absolute(),
            &mut counts,
            receipt,
        );
        assert_eq!(counts.received, written_received(&buf));
        let mut frames = Vec::new();
        if !buf.is_empty() {
            decode_frames_into(&bytes::Bytes::from(buf), 65_507, &mut frames).expect("valid");
        }
        frames
    }

    /// RECEIVED frames in `buf` (counted as the node counts them).
    fn written_received(buf: &[u8]) -> u64 {
        if buf.is_empty() {
            return 0;
        }
        let mut frames = Vec::new();
        decode_frames_into(&bytes::Bytes::copy_from_slice(buf), 65_507, &mut frames)
            .expect("valid");
        frames
            .iter()
            .filter(|f| matches!(f, Frame::Received { .. }))
            .count() as u64
    }

    /// A receipt time goes just before the verdicts it applies to, only with verdicts,
    /// HELDs or GOTs after it: not with a grant alone, and not where no verdict fits after
    /// it (the room it took is given back).
    #[test]
    fn a_receipt_time_goes_only_before_the_frames_it_applies_to() {
        let peer = NodeId::from_const(7);
        let mut ob = Outbox::default();
        assert!(ob.reply(peer, Verdict::Ack, 3, 5, 8));
        let out = ob.peers.get_mut(&peer).expect("owed");
        let frames = written_with(out, 1200, Some(77));
        assert!(matches!(
            frames[..],
            [Frame::Received { at: 77 }, Frame::Ack { .. }]
        ));
        assert!(ob.grant(peer, 1, 3, 4, 8));
        let out = ob.peers.get_mut(&peer).expect("owed");
        let frames = written_with(out, 1200, Some(78));
        assert!(matches!(frames[..], [Frame::Slots { .. }]), "{frames:?}");
        assert!(ob.reply(peer, Verdict::Ack, 3, 6, 8));
        let out = ob.peers.get_mut(&peer).expect("owed");
        // Room for RECEIVED and not the ACK after it: neither goes.
        let frames = written_with(out, RECEIVED_FRAME_LEN + 2, Some(79));
        assert!(frames.is_empty(), "{frames:?}");
        let frames = written_with(out, 1200, Some(80));
        assert!(matches!(
            frames[..],
            [Frame::Received { at: 80 }, Frame::Ack { .. }]
        ));
    }

    /// `reply_many` inserts a run of slots as one range, and keeps exactly what `reply`
    /// slot by slot keeps, also at the limit of pending ranges: a run whose first slot
    /// leaves room is kept whole (its other slots add no range), the rest of one whose
    /// first slot reaches the limit is dropped, and so is a run that finds it reached.
    #[test]
    fn replies_by_runs_keep_what_replies_one_by_one_keep() {
        let peer = NodeId::from_const(7);
        let (mut runs, mut single) = (Outbox::default(), Outbox::default());
        // Two ranges short of the limit, in isolated slots.
        let isolated: Vec<u64> = (0..MAX_PENDING_ACK_RANGES as u64 - 2)
            .map(|i| 2 * i)
            .collect();
        let top = 2 * MAX_PENDING_ACK_RANGES as u64;
        // A run in a gap, a slot bridging two ranges, a run taking the last range, one
        // whose first slot reaches the limit, one that finds it reached though it would
        // only extend a range.
        let mut slots = isolated.clone();
        slots.extend([
            top,
            top + 1,
            top + 2,
            1,
            top + 10,
            top + 11,
            top + 20,
            top + 21,
        ]);
        slots.extend([top + 22, top + 3, top + 4]);
        let dropped = runs.reply_many(peer, Verdict::Ack, 3, slots.iter().copied(), 8);
        let dropped_single = slots
            .iter()
            .filter(|&&s| !single.reply(peer, Verdict::Ack, 3, s, 8))
            .count();
        assert_eq!((dropped, dropped_single), (4, 4));
        let set = |ob: &Outbox| ob.peers.get(&peer).expect("owed").acks[0].2.clone();
        assert_eq!(set(&runs), set(&single));
        let got = set(&runs);
        assert!(got.contains(top + 11) && got.contains(1) && got.contains(top + 20));
        assert!(!got.contains(top + 21) && !got.contains(top + 3));
    }

    /// A message reported held and taken before the datagram left is acknowledged, not
    /// reported held; HELD replaces a GOT of fewer bytes pending for the same message (the
    /// sender would take that GOT, after the HELD, for bytes the receiver dropped).
    #[test]
    fn held_slots_taken_since_go_as_ack_and_a_held_message_has_no_partial_got() {
        let peer = NodeId::from_const(7);
        let mut ob = Outbox::default();
        let mut some = RangeSet::new();
        some.insert(0..100);
        assert!(ob.got(peer, 3, 9, &some, 8));
        for s in [5, 6, 9] {
            assert!(ob.held(peer, 3, s, 8));
        }
        assert!(ob.reply(peer, Verdict::Ack, 3, 5, 8));
        let out = ob.peers.get_mut(&peer).expect("owed");
        let frames = written(out);
        let held: Vec<_> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Held { r: 3, ranges } => Some(ranges.iter().flatten().collect::<Vec<_>>()),
                _ => None,
            })
            .collect();
        assert_eq!(held, [vec![6..7, 9..10]], "{frames:?}");
        assert!(frames.iter().any(|f| matches!(f, Frame::Ack { r: 3, .. })));
        assert!(!frames.iter().any(|f| matches!(f, Frame::Got { .. })));
        assert!(out.is_empty());
    }

    /// ACKs held for tokens go, at the latest, when their instant comes, in deadline order
    /// however they were held; an ACK of a retransmission, or anything but ACKs, is never
    /// held.
    #[test]
    fn held_acks_are_released_in_deadline_order() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (p, q) = (NodeId::from_const(7), NodeId::from_const(8));
        let mut ob = Outbox::default();
        for (peer, s) in [(p, 1), (q, 2)] {
            assert!(ob.reply(peer, Verdict::Ack, 3, s, 8));
            ob.flush_verdicts(peer, t0, false, ms(2), 16);
        }
        // q held until 1 ms, behind p's delayed ACK at 2 ms: released at 1 ms all the same.
        let out = ob.peers.remove(&q).expect("owed");
        assert!(out.only_acks(16));
        ob.hold_until(q, out, t0 + ms(1));
        assert_eq!(ob.next_deadline(), Some(t0 + ms(1)));
        ob.release_due(t0 + ms(1));
        assert_eq!(ob.next_ready().map(|(peer, _)| peer), Some(q));
        assert!(ob.next_ready().is_none(), "p waits for its delay");
        ob.release_due(t0 + ms(2));
        let (peer, mut out) = ob.next_ready().expect("p is due");
        assert_eq!(peer, p);
        // Too many slots, a retransmission's answer, or a verdict other than ACK: never held.
        assert!(!out.only_acks(1));
        out.no_hold = true;
        assert!(!out.only_acks(16));
        assert!(ob.reply(q, Verdict::Retry, 4, 1, 8));
        assert!(!ob.peers.get(&q).expect("owed").only_acks(16));
    }
}
