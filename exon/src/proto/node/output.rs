//! Outputs: the one drain (`poll_output`), datagrams assembled for each peer round-robin
//! (`poll_transmit`: verdicts, SLOTS, waivers, REQSLOTS, TOKENs packed up to the send size),
//! events, and path challenges to candidate addresses.

use std::time::{Duration, Instant};

use crate::proto::crypto::TAG_LEN;
use crate::proto::node::outbox::PeerOut;
use crate::proto::send::mtud::Want;
use crate::proto::send::silence::Gate;
use crate::proto::send::transmit::Space;
use crate::proto::wire::clocks::Clocks;
use crate::proto::wire::codec::put_varint;
use crate::proto::wire::frame::{
    frame_type, put_mtu_probe, put_path, Header, FLAG_ACK_NOW, RECEIPT_UNIT_MICROS,
};
use crate::proto::wire::ranges::RangeSet;
use crate::proto::{Event, Node, NodeId, Transmit, TransmitRun, Verdict};

/// What [`Node::write_datagram`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrote {
    /// A datagram of this many bytes.
    Datagram(usize),
    /// Nothing: no frame was owed, or none fit.
    Empty,
    /// A datagram that could not be sealed (no key for the peer): dropped.
    Dropped,
}

/// What [`Node::write_run`] wrote: `count` datagrams of `segment` bytes (the last may be
/// shorter), `total` bytes in all; `left`: the peer has more to send.
#[derive(Debug, Clone, Copy)]
struct Run {
    segment: usize,
    count: usize,
    total: usize,
    left: bool,
}

/// Most ACK ranges repeated in the next ACK frame (see [`Node::repeat_acks`]).
const MAX_REPEATED_RANGES: usize = 4;

/// What [`Node::poll_output`] hands back: one output at a time, in the order the node's
/// contract requires (a clock to store, then datagrams, then events), ending with the timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Store this clock high-water mark durably, then report it with
    /// [`Node::handle_clock_stored`] (an in-memory embedding may do so at once). The node
    /// uses no clock value above the last mark reported stored.
    StoreClock(u64),
    /// Durable mode ([`Node::recover`]): append this record to the journal; report it
    /// durable, with every write before it, with [`Node::handle_stored`] once synced.
    Store(crate::proto::journal::Write),
    /// A datagram was appended to the buffer given to [`Node::poll_output`]: send it to its
    /// destination node.
    Transmit(Transmit),
    /// Something for the application (a delivery, a verdict, a change of reachability).
    Event(Event),
    /// Nothing more to do now: call [`Node::handle_timeout`] at this instant (`None`: no
    /// timer), unless another input comes first. After any input, poll again.
    Timeout(Option<Instant>),
}

impl Node {
    /// Output: the next thing the embedding must do, in the contract's order. Call it in a
    /// loop after each input (or batch of inputs) until it returns [`Output::Timeout`]:
    ///
    /// ```
    /// # use std::time::Instant;
    /// # use exon::proto::{Config, Node, NodeId, Output, Security};
    /// # let mut node = Node::new(NodeId::new(1).unwrap(), Security::InsecurePlaintext,
    /// #     Config::default(), 0).unwrap();
    /// # let now = Instant::now();
    /// let mut buf = Vec::new();
    /// let timer = loop {
    ///     match node.poll_output(now, &mut buf) {
    ///         Output::StoreClock(hw) => node.handle_clock_stored(now, hw), // after a sync
    ///         Output::Store(w) => node.handle_stored(now, w.seq), // durable mode: after a sync
    ///         Output::Transmit(t) => {
    ///             // send buf[buf.len() - t.size..] to t.destination
    ///             buf.clear();
    ///         }
    ///         Output::Event(_event) => {}
    ///         Output::Timeout(at) => break at,
    ///     }
    /// };
    /// # let _ = timer;
    /// ```
    ///
    /// It is [`poll_clock_store`](Self::poll_clock_store),
    /// [`poll_transmit`](Self::poll_transmit), [`poll_event`](Self::poll_event) and
    /// [`poll_timeout`](Self::poll_timeout) in that order, each drained before the next; an
    /// embedding that needs them apart (a driver that batches datagrams) may call those.
    #[inline]
    pub fn poll_output(&mut self, now: Instant, buf: &mut Vec<u8>) -> Output {
        if let Some(hw) = self.poll_clock_store() {
            return Output::StoreClock(hw);
        }
        if let Some(w) = self.poll_store() {
            return Output::Store(w);
        }
        if let Some(t) = self.poll_transmit(now, buf) {
            return Output::Transmit(t);
        }
        if let Some(e) = self.poll_event() {
            return Output::Event(e);
        }
        Output::Timeout(self.poll_timeout())
    }

    /// Output: an event for the application, if any.
    ///
    /// Durable mode: a verdict handed out here counts as reported (its journal record may
    /// forget it, with a `Reported` record); one stored and not handed out before a crash
    /// is reported again by the restarted node.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        self.journal_reported(&e);
        Some(e)
    }

    /// Whether an event waits for [`poll_event`](Self::poll_event) (an embedding that takes
    /// input in slices may hand the application what it has before taking more).
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Output: appends the next datagram to `buf` and says where it goes, or returns `None`
    /// when nothing is waiting. Each call serves the next peer in round-robin order, packing
    /// every frame owed to it (ACKs, SLOTS, REQSLOTS, TOKENs) up to its
    /// [`send_size`](Self::send_size), or sends it an MTU probe when one is due.
    ///
    /// A sealed node seals each datagram before returning it; it sends nothing until its
    /// clock is stored far enough to take a nonce epoch from it.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.poll_transmit_run(now, buf, 1).map(|r| Transmit {
            destination: r.destination,
            size: r.size,
        })
    }

    /// Output: as [`poll_transmit`](Self::poll_transmit), but goes on writing datagrams to
    /// the same peer while it has more to send, up to `max` of them: a run of datagrams of
    /// one size (the last may be shorter) that the embedding hands to one segmented send
    /// (GSO). The peer's turn, its deaf gate, its timer and what its silence counts are
    /// worked out once per run rather than once per datagram. Each datagram holds what a
    /// call of `poll_transmit` would have written (peers are served in turn run by run, not
    /// datagram by datagram, and an MTU probe that falls due during a run goes first in the
    /// next); one larger than the run's first ends the run and is returned alone by the
    /// next call.
    pub fn poll_transmit_run(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Option<TransmitRun> {
        self.rearm_due();
        if let Some(run) = self.take_stashed(buf) {
            return Some(run);
        }
        self.outbox.release_due(now);
        self.release_deaf(now);
        loop {
            if !self.take_epoch_if_needed() {
                return None;
            }
            let (peer, mut out) = self.outbox.next_ready()?;
            let deaf = match self.gate(now, peer) {
                Gate::Open => false,
                Gate::Deaf => true,
                Gate::Wait(at) => {
                    // Its turn comes at `at`: what it is owed waits in the outbox.
                    self.silence.park(peer, at);
                    self.outbox.put_back(peer, out, false);
                    self.stats.deaf_waits += 1;
                    continue;
                }
            };
            if let Some((want, timeout)) = self.probe_now(now, peer, deaf) {
                // A probe datagram holds the MTU_PROBE alone (its loss loses nothing else);
                // what else is owed to the peer goes in the next one.
                self.outbox.put_back(peer, out, true);
                let sent = self.write_probe(now, peer, want, timeout, buf);
                self.rearm_sender(peer);
                match sent {
                    Some(size) => return Some(self.sent_run(now, peer, deaf, size, 1, size)),
                    None => continue,
                }
            }
            if let Some(at) = self.acks_wait_for_tokens(now, peer, deaf, &out) {
                // Only ACKs, and tokens to the peer the pacer lets go before they are due:
                // they ride in those tokens' datagram rather than go alone.
                self.outbox.hold_until(peer, out, at);
                self.stats.acks_held_for_tokens += 1;
                continue;
            }
            let run = self.write_run(now, peer, deaf, &mut out, buf, max);
            if run.left {
                self.outbox.put_back(peer, out, true);
            }
            self.rearm_sender(peer);
            if run.count > 0 {
                let (segment, count, total) = (run.segment, run.count, run.total);
                return Some(self.sent_run(now, peer, deaf, segment, count, total));
            }
        }
    }

    /// When `out` (owed to `peer`) may wait: all it holds is ACKs not yet due, and the pacer
    /// lets the tokens queued to the same peer go by their deadline (their delay from now
    /// when they are due at once), at that instant.
    #[inline]
    fn acks_wait_for_tokens(
        &self,
        now: Instant,
        peer: NodeId,
        deaf: bool,
        out: &PeerOut,
    ) -> Option<Instant> {
        let acks = &self.cfg.acks;
        if deaf || !acks.ride_paced_tokens || !out.only_acks(acks.every) {
            return None;
        }
        let rec = self.senders.get(&peer)?;
        let paced = rec.paced_until()?;
        // At most an eighth of the round trip: the peer's RTT samples and loss detection
        // see the wait (as they see the ACK delay).
        let min_rtt = rec.rtt().min();
        let slack = min_rtt.map_or(Duration::ZERO, |m| m / 8);
        let mut due = out.ack_at().unwrap_or(now + acks.delay).min(now + slack);
        if paced > due && self.rules.acks_wait_for_a_paced_datagram {
            // A path so slow that one datagram at the pacing rate takes longer than that
            // wait would carry an ACK-only datagram between every two of ours: the ACKs
            // wait for the next one, up to a datagram's time and a minimum RTT.
            let size = self.send_size(peer) as u64;
            if let (Some(one), Some(m)) = (rec.pace_interval(size), min_rtt) {
                due = due.max(now + one.min(m));
            }
        }
        (paced > now && paced <= due).then_some(paced)
    }

    /// The datagram the last run left over (larger than its datagrams), appended to `buf`
    /// as a run of its own, if any.
    #[inline]
    fn take_stashed(&mut self, buf: &mut Vec<u8>) -> Option<TransmitRun> {
        let peer = self.stashed_to.take()?;
        buf.extend_from_slice(&self.stashed);
        let n = self.stashed.len();
        Some(TransmitRun {
            destination: peer,
            segment_size: n,
            count: 1,
            size: n,
        })
    }

    /// The MTU probe to send `peer` before its run, if one is due: none to a deaf peer, and
    /// none before the clock is stored past the probe's id (taken from the node clock).
    #[inline]
    fn probe_now(&mut self, now: Instant, peer: NodeId, deaf: bool) -> Option<(Want, Duration)> {
        if deaf {
            None
        } else {
            self.due_probe(now, peer)
                .filter(|_| self.reserve_clock(self.ck + 1))
        }
    }

    /// The size of the datagrams of a run to `peer`, and the most it may hold (`max`, at
    /// least one). A deaf peer gets one small datagram: the base size, which every path
    /// carries.
    #[inline]
    fn run_shape(&self, peer: NodeId, deaf: bool, max: usize) -> (usize, usize) {
        let size = self.send_size(peer);
        if deaf {
            (size.min(self.cfg.mtu.min_datagram_size), 1)
        } else {
            (size, max.max(1))
        }
    }

    /// Writes a run of datagrams to `peer` (`deaf`: on the deaf schedule), of the size and
    /// up to the number [`run_shape`](Self::run_shape) says, while it has more to send and
    /// the datagrams keep the run's size (the last may be shorter; a larger one is stashed
    /// for the next call).
    #[inline]
    fn write_run(
        &mut self,
        now: Instant,
        peer: NodeId,
        deaf: bool,
        out: &mut PeerOut,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> Run {
        let (size, max) = self.run_shape(peer, deaf, max);
        let mut run = Run {
            segment: 0,
            count: 0,
            total: 0,
            left: false,
        };
        loop {
            let (wrote, more) = self.write_datagram(now, peer, out, buf, size);
            run.left = more;
            let Wrote::Datagram(n) = wrote else {
                if run.count == 0 && wrote == Wrote::Empty && run.left {
                    // Cannot happen (a token always fits in an empty datagram); never spin.
                    debug_assert!(false, "nothing fit in an empty datagram");
                    run.left = false;
                }
                return run;
            };
            if run.count == 0 {
                run.segment = n;
            } else if n > run.segment {
                // Larger than the run's datagrams (segmented sends need them equal): it
                // leaves on its own, first thing next call.
                self.stash(peer, buf, n);
                return run;
            }
            run.count += 1;
            run.total += n;
            if !run.left || run.count >= max || n < run.segment || !self.take_epoch_if_needed() {
                return run;
            }
        }
    }

    /// Moves the datagram of `n` bytes at the end of `buf` to the stash: it goes to `peer`
    /// on its own, first thing next call.
    #[inline]
    fn stash(&mut self, peer: NodeId, buf: &mut Vec<u8>, n: usize) {
        let at = buf.len() - n;
        self.stashed.clear();
        self.stashed.extend_from_slice(&buf[at..]);
        self.stashed_to = Some(peer);
        buf.truncate(at);
    }

    /// Writes the MTU probe `want` to `peer` (its answer due within `timeout`) as a datagram
    /// of its own. Returns its size, or `None` when it could not be sealed.
    fn write_probe(
        &mut self,
        now: Instant,
        peer: NodeId,
        want: Want,
        timeout: Duration,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let start = buf.len();
        let (header, header_end, limit) = self.start_datagram(peer, buf, want.size);
        // Ids from the node clock: never handed out twice, across restarts too, so an
        // MTU_ACK of an earlier incarnation's probe (a late copy, a replay) answers no probe
        // of this one.
        let id = self.ck;
        self.ck += 1;
        put_mtu_probe(buf, id, limit - buf.len());
        self.stats.frames_out.mtu_probe += 1;
        self.stats.mtu.probes_sent += 1;
        let probed = want.size - (limit - buf.len());
        if let Some(rec) = self.senders.get_mut(&peer) {
            rec.mtud_mut().probe_sent(want, id, probed, now, timeout);
        }
        self.finish_datagram(peer, header, buf, start, header_end)
            .map(|t| t.size)
    }

    /// Appends the header of a datagram of `size` bytes to `peer`. Returns the header (its
    /// seal, for [`finish_datagram`](Self::finish_datagram)), where it ends and where the
    /// frames must end (the tag's room kept).
    fn start_datagram(
        &mut self,
        peer: NodeId,
        buf: &mut Vec<u8>,
        size: usize,
    ) -> (Header, usize, usize) {
        let mut limit = buf.len() + size;
        let mut header = Header::new(self.id, peer);
        if let Some(sealer) = &mut self.sealer {
            header.seal = sealer.next_seal_header(peer);
            limit -= TAG_LEN;
        }
        header.encode(buf);
        (header, buf.len(), limit)
    }

    /// Writes one datagram of at most `size` bytes to `peer`: what `out` holds for it
    /// (verdicts, SLOTS), then what its sender record owes. Returns what was written, and
    /// whether the peer has more to send.
    fn write_datagram(
        &mut self,
        now: Instant,
        peer: NodeId,
        out: &mut PeerOut,
        buf: &mut Vec<u8>,
        size: usize,
    ) -> (Wrote, bool) {
        let start = buf.len();
        let (header, header_end, limit) = self.start_datagram(peer, buf, size);
        let mut clocks = Clocks::of(&header);
        // ACK ranges written last time are repeated once (in case that datagram was lost).
        let mut fresh = None;
        out.for_each_verdict(|v, r, set| {
            if let Some(f) = self.repeat_acks(peer, v, r, set) {
                fresh = Some(f);
            }
        });
        let receipt = self.receipt_time(peer, out);
        out.write_frames(buf, limit, &mut clocks, &mut self.stats.frames_out, receipt);
        if let Some(fresh) = fresh {
            if let Some(rec) = self.receivers.get_mut(&peer) {
                rec.set_acked_last(fresh);
            }
        }
        let tokens_before = self.stats.frames_out.token + self.stats.frames_out.frag;
        let space = Space {
            body_room: limit - header_end,
            limit,
            datagram: size,
        };
        let (sender_left, burst_end) = self.write_sender_frames(now, peer, buf, &mut clocks, space);
        if burst_end && self.stats.frames_out.token + self.stats.frames_out.frag > tokens_before {
            // The last datagram of this burst: ask for the ACK without delay.
            buf[start] |= FLAG_ACK_NOW;
        }
        let left = !out.is_empty() || sender_left;
        if buf.len() == header_end {
            buf.truncate(start);
            return (Wrote::Empty, left);
        }
        match self.finish_datagram(peer, header, buf, start, header_end) {
            Some(t) => (Wrote::Datagram(t.size), left),
            None => (Wrote::Dropped, left),
        }
    }

    /// The receipt time a datagram to `peer` carrying what `out` owes tells (RECEIVED, rule
    /// `receipt_times`): when the newest datagram with tokens, fragments or a granted slot
    /// request from it arrived (its receiver record's last-heard time), in units of
    /// [`RECEIPT_UNIT_MICROS`] since the first receipt time this node wrote, wrapping.
    /// `None` when `out` owes no verdicts, HELDs or GOTs, or with the rule off.
    #[inline]
    fn receipt_time(&mut self, peer: NodeId, out: &PeerOut) -> Option<u16> {
        if !self.rules.receipt_times || !out.owes_receipts() {
            return None;
        }
        let heard = self.receivers.get(&peer)?.last_heard();
        let base = *self.receipt_base.get_or_insert(heard);
        let micros = heard.saturating_duration_since(base).as_micros();
        // Wrapping on purpose: the peer reads differences modulo 2^16.
        Some((micros / u128::from(RECEIPT_UNIT_MICROS)) as u16)
    }

    /// The run of `count` datagrams (`segment` bytes each but the last, `total` in all) leaves
    /// for `peer` at `now` (`deaf`: on the deaf schedule): the silence of the destination
    /// counts it.
    fn sent_run(
        &mut self,
        now: Instant,
        peer: NodeId,
        deaf: bool,
        segment: usize,
        count: usize,
        total: usize,
    ) -> TransmitRun {
        if self.rules.deaf_backoff {
            self.silence.on_sent(now, peer, deaf);
        }
        self.stats.deaf_datagrams += u64::from(deaf);
        TransmitRun {
            destination: peer,
            segment_size: segment,
            count,
            size: total,
        }
    }

    /// Seals the datagram `buf[start..]` to `peer` (sealed mode) and counts it. `None` when
    /// no key is known for the peer: the datagram is dropped.
    pub(super) fn finish_datagram(
        &mut self,
        peer: NodeId,
        header: Header,
        buf: &mut Vec<u8>,
        start: usize,
        header_end: usize,
    ) -> Option<Transmit> {
        if let (Some(sealer), Some(sh)) = (&mut self.sealer, header.seal) {
            let (senders, receivers) = (&self.senders, &self.receivers);
            let pinned = |p: NodeId| senders.contains_key(&p) || receivers.contains_key(&p);
            let pin = self.rules.pin_member_keys;
            if !sealer.seal(peer, sh.seq, buf, start, header_end, pinned, pin) {
                // No key for this peer (removed from the keyring): what was in the
                // datagram is repaired like a loss, and counted.
                buf.truncate(start);
                self.stats.unsealable += 1;
                return None;
            }
        }
        let size = buf.len() - start;
        self.stats.datagrams_out += 1;
        self.stats.bytes_out += size as u64;
        self.stats.largest_datagram_out = self.stats.largest_datagram_out.max(size as u64);
        Some(Transmit {
            destination: peer,
            size,
        })
    }

    /// What may go to `peer` now (see `silence.rs`): always anything with the rule off.
    fn gate(&self, now: Instant, peer: NodeId) -> Gate {
        if self.rules.deaf_backoff {
            self.silence.gate(now, peer)
        } else {
            Gate::Open
        }
    }

    /// Wakes the deaf peers whose turn has come by `now`.
    pub(super) fn release_deaf(&mut self, now: Instant) {
        if !self.silence.has_parked() {
            return;
        }
        let outbox = &mut self.outbox;
        self.silence.release_due(now, |p| {
            outbox.wake(p, usize::MAX);
        });
    }

    /// The size of datagrams to `peer`: what path MTU discovery found for it, or the base
    /// size ([`Config::base_datagram_size`](crate::proto::Config::base_datagram_size)) for a peer
    /// with no sender record (replies to it), or `max_datagram_size` with discovery off.
    pub fn send_size(&self, peer: NodeId) -> usize {
        self.senders
            .get(&peer)
            .map_or(self.cfg.base_datagram_size(), |rec| rec.mtud().size())
    }

    /// The MTU probe due to `peer` now, if any, and how long to wait for its answer: only
    /// while its sender record has work. Expires unanswered probes first.
    fn due_probe(&mut self, now: Instant, peer: NodeId) -> Option<(Want, Duration)> {
        let rec = self.senders.get_mut(&peer)?;
        if rec.is_quiet() {
            return None;
        }
        let e = rec.mtud_mut().poll(now);
        self.stats.mtu.probes_lost += u64::from(e.lost);
        self.stats.mtu.black_hole_fallbacks += u64::from(e.fallback);
        // Not before a round trip was measured: the answer's deadline is a few of them (the
        // peer answers at once, but the probe may queue behind data).
        let rtt = rec.rtt().smoothed()?.max(rec.rtt().latest()?);
        let want = rec.mtud().want_if(self.rules.deaf_backoff)?;
        let timeout = rtt.saturating_mul(3).max(self.cfg.timers.min_rto);
        Some((want, timeout))
    }

    /// A sealed node with no nonce epoch left takes the next clock value as its epoch.
    /// Returns false when that value is not yet covered by the stored clock.
    pub(super) fn take_epoch_if_needed(&mut self) -> bool {
        if !self.sealer.as_ref().is_some_and(|s| s.needs_epoch()) {
            return true;
        }
        if !self.reserve_clock(self.ck + 1) {
            return false;
        }
        let epoch = self.ck;
        self.ck += 1;
        if let Some(s) = &mut self.sealer {
            s.start_epoch(epoch);
        }
        true
    }

    /// Before writing the ACKs of incarnation `r` in `set` to `peer`: adds the slots the
    /// previous ACK frame acknowledged for the first time, and returns the slots new in this
    /// one (its first [`MAX_REPEATED_RANGES`] ranges), to be repeated next time (and by a
    /// probe, `Rules::probe_repeats_ack`). `None` for the other verdicts, or when the
    /// receiver record is gone or of another incarnation.
    fn repeat_acks(
        &mut self,
        peer: NodeId,
        v: Verdict,
        r: u64,
        set: &mut RangeSet,
    ) -> Option<RangeSet> {
        if v != Verdict::Ack {
            return None;
        }
        let rec = self.receivers.get_mut(&peer).filter(|rec| rec.rck() == r)?;
        let fresh = set.first_ranges(MAX_REPEATED_RANGES);
        for g in rec.take_acked_last().ranges() {
            set.insert(g.clone());
        }
        Some(fresh)
    }

    /// Writes the frames the S record of `peer` owes into the datagram (REQSLOTS, TOKENs and
    /// FRAGs, REQCREDIT); its timer is re-armed once the run of datagrams ends, and its first
    /// token has it ask for slots again. Returns whether it has more to send, and
    /// whether its burst ended (nothing left to send: the datagram asks for an ACK now).
    fn write_sender_frames(
        &mut self,
        now: Instant,
        peer: NodeId,
        buf: &mut Vec<u8>,
        clocks: &mut Clocks,
        space: Space,
    ) -> (bool, bool) {
        let Some(rec) = self.senders.get_mut(&peer) else {
            return (false, true);
        };
        let sized = rec.knows_token_size();
        let wrote = rec.write_frames(
            now,
            (buf, clocks),
            space,
            &self.cfg,
            &self.rules,
            &mut self.stats,
        );
        if !sized && rec.knows_token_size() {
            // The first token sized the slot window, until then counted in datagram-sized
            // tokens: messages queued before (a `send_many` into a new record) ask again
            // for what it now allows, rather than wait for a verdict or another send.
            self.request_slots(peer);
        }
        wrote
    }

    /// A fresh challenge token: unique per challenge; unpredictable enough for plaintext
    /// mode, where nothing is secret anyway (sealed, the token is encrypted).
    pub(super) fn next_challenge_token(&mut self) -> u64 {
        self.challenges += 1;
        (self.challenges << 16) ^ u64::from(self.next_jitter()) ^ self.ck.rotate_left(40)
    }

    /// Output: appends to `buf` a datagram to `peer` holding a CHALLENGE alone, and returns
    /// its token with the datagram's [`Transmit`]. The embedding sends it to the one address
    /// it wants `peer` to prove it receives at (a candidate address, while the peer's
    /// datagrams keep going to the address it proved before); the token comes back in
    /// [`Accepted::response`](crate::proto::Accepted::response) when the peer answers. In sealed
    /// mode only the peer can read the token, so the answer proves the peer receives
    /// there. `None` (nothing appended) when a sealed node cannot send yet (its clock is not
    /// stored far enough) or has no key for `peer`.
    pub fn poll_challenge(&mut self, peer: NodeId, buf: &mut Vec<u8>) -> Option<(u64, Transmit)> {
        let token = self.next_challenge_token();
        let tx = self.poll_rechallenge(peer, token, buf)?;
        Some((token, tx))
    }

    /// Output: as [`poll_challenge`](Self::poll_challenge), with a token handed out before
    /// ([`challenge`](Self::challenge)): the repeat of a challenge whose datagram may have
    /// been lost, to the address the peer's datagrams go to.
    pub fn poll_rechallenge(
        &mut self,
        peer: NodeId,
        token: u64,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let tx = self.poll_path_frame(peer, frame_type::CHALLENGE, token, buf)?;
        self.stats.frames_out.challenge += 1;
        Some(tx)
    }

    /// Output: a datagram holding RESPONSE(`token`) alone, to `peer`: the answer to a
    /// CHALLENGE from it ([`Accepted::challenge`](crate::proto::Accepted::challenge)) sent
    /// again, in case the one in the next datagram was lost. Appended to `buf`; `None`
    /// until the clock is stored far enough for a new epoch.
    pub fn poll_response(
        &mut self,
        peer: NodeId,
        token: u64,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let tx = self.poll_path_frame(peer, frame_type::RESPONSE, token, buf)?;
        self.stats.frames_out.response += 1;
        Some(tx)
    }

    /// Output: a datagram holding PING alone, to `peer`: a keepalive, whose only effect is
    /// that the peer accepts a datagram from this node's current address (see
    /// [`Frame::Ping`](crate::proto::frame::Frame::Ping)). Appended to `buf`; `None` until
    /// the clock is stored far enough for a new epoch.
    pub fn poll_ping(&mut self, peer: NodeId, buf: &mut Vec<u8>) -> Option<Transmit> {
        let tx = self.poll_path_frame(peer, frame_type::PING, None, buf)?;
        self.stats.frames_out.ping += 1;
        Some(tx)
    }

    /// A datagram to `peer` holding one path frame alone: `ty` with `token` (CHALLENGE or
    /// RESPONSE), or PING (no token).
    fn poll_path_frame(
        &mut self,
        peer: NodeId,
        ty: u64,
        token: impl Into<Option<u64>>,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let token = token.into();
        if !self.take_epoch_if_needed() {
            return None;
        }
        let start = buf.len();
        let mut header = Header::new(self.id, peer);
        if let Some(sealer) = &mut self.sealer {
            header.seal = sealer.next_seal_header(peer);
        }
        header.encode(buf);
        let header_end = buf.len();
        match token {
            Some(token) => put_path(buf, ty, token),
            None => put_varint(buf, ty),
        }
        self.finish_datagram(peer, header, buf, start, header_end)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::*;
    use crate::proto::{Config, NodeId, Security};

    fn node(id: u64) -> Node {
        let id = NodeId::new(id).unwrap();
        Node::new(id, Security::InsecurePlaintext, Config::default(), 0).unwrap()
    }

    /// Drains `n` and returns the kinds in order, delivering datagrams to `peer`.
    fn drain(n: &mut Node, peer: &mut Node, now: Instant) -> Vec<char> {
        let mut kinds = Vec::new();
        let mut buf = Vec::new();
        loop {
            match n.poll_output(now, &mut buf) {
                Output::StoreClock(hw) => {
                    kinds.push('c');
                    n.handle_clock_stored(now, hw);
                }
                Output::Store(w) => {
                    kinds.push('s');
                    n.handle_stored(now, w.seq);
                }
                Output::Transmit(t) => {
                    kinds.push('t');
                    let d = buf.split_off(buf.len() - t.size);
                    peer.handle_datagram(now, Bytes::from(d));
                }
                Output::Event(_) => kinds.push('e'),
                Output::Timeout(_) => return kinds,
            }
        }
    }

    /// A PING is accepted (its sender's datagram is all it shows, `Accepted::keepalive`) and
    /// asks nothing of its receiver: no datagram in answer, no event.
    #[test]
    fn a_ping_is_accepted_and_answered_by_nothing() {
        let now = Instant::now();
        let (mut a, mut b) = (node(1), node(2));
        let mut buf = Vec::new();
        let tx = a.poll_ping(b.id(), &mut buf).expect("a datagram");
        assert_eq!(tx.size, buf.len());
        assert_eq!(a.stats().frames_out.ping, 1);
        let acc = b
            .handle_datagram_buf(now, bytes::BytesMut::from(&buf[..]))
            .expect("accepted");
        assert_eq!(acc.from, a.id());
        assert!(acc.keepalive, "a PING alone is a keepalive");
        assert_eq!(b.stats().frames_in.ping, 1);
        let mut out = Vec::new();
        assert!(b.poll_transmit(now, &mut out).is_none());
        assert!(b.poll_event().is_none());
        // Anything more in the datagram, and it is not.
        drain(&mut b, &mut a, now);
        a.send(now, b.id(), Bytes::from_static(b"x")).unwrap();
        let size = loop {
            match a.poll_output(now, &mut out) {
                Output::StoreClock(hw) => a.handle_clock_stored(now, hw),
                Output::Transmit(t) => break t.size,
                Output::Timeout(_) => panic!("no datagram"),
                _ => {}
            }
        };
        let acc = b
            .handle_datagram_buf(now, bytes::BytesMut::from(&out[out.len() - size..]))
            .expect("accepted");
        assert!(!acc.keepalive);
    }

    #[test]
    fn outputs_come_in_the_contracts_order() {
        let now = Instant::now();
        let (mut a, mut b) = (node(1), node(2));
        a.send(now, b.id(), Bytes::from_static(b"x")).unwrap();
        let mut seen = Vec::new();
        for i in 0..50 {
            let t = now + Duration::from_millis(10 * i);
            a.handle_timeout(t);
            b.handle_timeout(t);
            seen.push(drain(&mut a, &mut b, t));
            seen.push(drain(&mut b, &mut a, t));
        }
        for kinds in &seen {
            // Within one drain: clock stores, then datagrams, then events.
            let rank = |k: &char| "cte".find(*k).unwrap();
            assert!(
                kinds.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])),
                "{kinds:?}"
            );
        }
        assert_eq!(
            seen[0].first(),
            Some(&'c'),
            "a new node asks for its clock first"
        );
        assert!(
            seen.iter().flatten().any(|k| *k == 'e'),
            "the message got through"
        );
    }
}
