//! The sender's side of messages too large for one TOKEN: which bytes are still to send, in
//! flight or held by the receiver (GOT).

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use crate::proto::recv::assembler::MIN_CHARGE;
use crate::proto::send::congestion::SendState;
use crate::proto::wire::ranges::RangeSet;

/// Most byte ranges kept of what a receiver holds: a GOT that would make more is partly
/// ignored (those bytes are sent again), so a GOT cannot make a sender's state grow.
const MAX_GOT_RANGES: usize = 1024;

/// Bytes re-sent to ask a receiver about a message it holds whole: its answer (GOT, ACK,
/// DOUBT or RETRY) says whether it still has it.
const PROBE_LEN: u64 = 256;

/// One transmission of a byte range of a fragmented message.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    /// Its sequence number (see `LossDetector`).
    pub(super) seq: u64,
    /// The bytes it carried.
    pub(super) range: Range<u64>,
    /// When it left.
    pub(super) at: Instant,
    /// Its FRAG frame's size, counted in the bytes in flight.
    pub(super) size: u64,
    /// Some of its bytes had been sent before (no RTT sample from it: Karn's rule).
    pub(super) again: bool,
    /// Its bytes may have left before the message's fragments began (see
    /// [`Outgoing::left_before`]): the receiver may hold them from then, so an answer
    /// covering them may come before this transmission could have arrived, and gives no
    /// RTT sample. Unlike `again`, it still counts for loss detection.
    pub(super) untimed: bool,
    /// The delivery-rate snapshot of its transmission.
    pub(super) rate: SendState,
    /// How far into its datagram the FRAG ended (for path MTU discovery).
    pub(super) reach: u32,
}

/// Most losses remembered per message, to find them spurious later.
const MAX_LOST_KEPT: usize = 64;

/// A FRAG transmission declared lost, kept until the receiver holds its bytes, to tell
/// whether the loss was spurious (see `sender::answers_original`).
#[derive(Debug, Clone)]
pub(crate) struct LostFrag {
    /// The bytes it carried.
    pub(super) range: Range<u64>,
    /// When it was declared lost.
    pub(super) at: Instant,
    /// When any of its bytes first left again (`None`: not yet).
    pub(super) resent_at: Option<Instant>,
    /// Its FRAG frame's size.
    pub(super) size: u64,
}

/// What is known of a fragmented message's bytes.
#[derive(Debug)]
pub(crate) struct Outgoing {
    total: u64,
    /// Bytes the receiver said it holds.
    got: RangeSet,
    /// Bytes to send (again).
    pending: RangeSet,
    /// Transmissions neither covered by GOT nor declared lost, in sending order.
    inflight: VecDeque<Sent>,
    /// Every byte below this was sent at least once.
    fresh_from: u64,
    /// Counted against the receiver's credit (a message of more than one fragment): the
    /// number its sender record gave that charge (charges are numbered in the order they
    /// were made), 0 when it holds none.
    charge: u64,
    /// Transmissions declared lost whose bytes the receiver does not hold yet.
    lost: VecDeque<LostFrag>,
    /// When `got` last grew: a GOT answering a transmission sent after it is newer than
    /// every GOT `got` was built from.
    grew_at: Option<Instant>,
    /// Its bytes may have left before these fragments began: sent by a life of the node
    /// before a restart (a message recovered in its slot), or whole when datagrams were
    /// larger. No transmission of it gives an RTT sample: an ACK or GOT may answer those.
    left_before: bool,
    /// When its last fragment left (or its whole TOKEN before these fragments began, or
    /// when it was found held whole before this life sent any of it): what the timers of
    /// its message run from. `None`: nothing of it left in this life yet.
    last_sent: Option<Instant>,
}

impl Outgoing {
    /// A message of `total` bytes, none sent yet.
    pub fn new(total: u64) -> Self {
        let mut pending = RangeSet::new();
        pending.insert(0..total);
        Outgoing {
            total,
            got: RangeSet::new(),
            pending,
            inflight: VecDeque::new(),
            fresh_from: 0,
            charge: 0,
            lost: VecDeque::new(),
            grew_at: None,
            left_before: false,
            last_sent: None,
        }
    }

    /// A message of `total` bytes none of which this `Outgoing` sent yet, which may have
    /// left before (see the field `left_before`): its transmissions give no RTT sample.
    pub fn sent_before(total: u64) -> Self {
        Outgoing {
            left_before: true,
            ..Outgoing::new(total)
        }
    }

    /// A message of `total` bytes sent whole before, which the receiver holds every byte
    /// of (HELD): nothing to send until a timeout asks about it.
    pub fn held_whole(total: u64) -> Self {
        let mut got = RangeSet::new();
        got.insert(0..total);
        Outgoing {
            total,
            got,
            pending: RangeSet::new(),
            inflight: VecDeque::new(),
            fresh_from: total,
            charge: 0,
            lost: VecDeque::new(),
            grew_at: None,
            left_before: true,
            last_sent: None,
        }
    }

    /// The message's length.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The credit a message of `total` bytes needs (the receiver charges the same).
    pub fn charge_of(total: u64) -> u64 {
        total.max(MIN_CHARGE)
    }

    /// Whether it holds credit.
    pub fn is_charged(&self) -> bool {
        self.charge != 0
    }

    /// The number of the charge it holds (0: none).
    pub fn charge_no(&self) -> u64 {
        self.charge
    }

    /// Marks it as holding credit, under charge number `no` (not 0).
    pub fn set_charge(&mut self, no: u64) {
        debug_assert!(no != 0, "charge numbers start at 1");
        self.charge = no;
    }

    /// Marks it as holding no credit.
    pub fn uncharge(&mut self) {
        self.charge = 0;
    }

    /// Whether the receiver holds part of it, not all: a partial it charged to its grant.
    pub fn is_partial_there(&self) -> bool {
        !self.got.is_empty() && !self.is_whole()
    }

    /// Bytes the receiver is known to hold (GOT, HELD): what its GOTs showed, whatever
    /// became of the transmissions that carried them (in flight, declared lost, sent again).
    pub fn held_bytes(&self) -> u64 {
        self.got.count()
    }

    /// Whether the receiver holds every byte.
    pub fn is_whole(&self) -> bool {
        self.got.contains_range(0..self.total)
    }

    /// Whether bytes wait to be sent.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Bytes in flight, in FRAG frame sizes.
    pub fn flight(&self) -> u64 {
        self.inflight.iter().map(|s| s.size).sum()
    }

    /// Whether every byte left at least once (bytes are first sent in order, so the ones
    /// from the highest end sent on never left).
    pub fn all_sent(&self) -> bool {
        self.fresh_from >= self.total
    }

    /// Whether sending `range` sends bytes again.
    pub fn is_resend(&self, range: &Range<u64>) -> bool {
        range.start < self.fresh_from
    }

    /// Whether bytes will still wait once `range` is sent.
    pub fn has_pending_after(&self, range: &Range<u64>) -> bool {
        self.pending.count() > range.end - range.start
    }

    /// The next bytes to send, at most `max` of them.
    pub fn next_range(&self, max: u64) -> Option<Range<u64>> {
        let r = self.pending.first()?;
        (max > 0).then(|| r.start..r.end.min(r.start.saturating_add(max)))
    }

    /// When its last fragment left, or what stands for it (see the field).
    #[inline]
    pub fn last_sent(&self) -> Option<Instant> {
        self.last_sent
    }

    /// Sets what its timers run from (see [`last_sent`](Self::last_sent)).
    pub fn set_last_sent(&mut self, at: Option<Instant>) {
        self.last_sent = at;
    }

    /// `range` left in a FRAG frame of `size` bytes with sequence number `seq`.
    pub fn on_sent(
        &mut self,
        range: Range<u64>,
        seq: u64,
        at: Instant,
        size: u64,
        rate: SendState,
        reach: u32,
    ) {
        self.pending.remove_range(range.clone());
        self.last_sent = Some(at);
        for l in &mut self.lost {
            if l.resent_at.is_none() && l.range.start < range.end && range.start < l.range.end {
                l.resent_at = Some(at);
            }
        }
        let again = range.start < self.fresh_from;
        self.fresh_from = self.fresh_from.max(range.end);
        self.inflight.push_back(Sent {
            seq,
            range,
            at,
            size,
            again,
            untimed: self.left_before,
            rate,
            reach,
        });
    }

    /// The receiver holds `ranges` (of one GOT frame): appends to `acked` the transmissions
    /// now wholly held (one pass over those in flight per GOT frame).
    ///
    /// A GOT that shows less than the whole message for one this sender knew held whole
    /// means the receiver dropped it (a partial message dropped after its reassembly
    /// timeout, then started again): what it says it holds becomes all that is known, and
    /// the rest is to send again. Returns whether that happened. With `forget_dropped`
    /// (`Rules::got_forgets_dropped_bytes`) so does a GOT that answers a transmission sent
    /// after `got` last grew and lacks bytes `got` holds: GOT is cumulative per partial, so
    /// the receiver dropped the one those bytes were in and holds a new one. Without it
    /// the bytes stayed counted as held, were never sent again, and the message never
    /// became whole (each new partial expiring in turn).
    ///
    /// Losses whose bytes the receiver now holds are forgotten; those it got before their
    /// retransmission could have been answered (`min_rtt`) are appended to `spurious`.
    pub fn on_got(
        &mut self,
        ranges: impl Iterator<Item = Range<u64>>,
        acked: &mut Vec<Sent>,
        (now, min_rtt): (Instant, Option<std::time::Duration>),
        spurious: &mut Vec<LostFrag>,
        forget_dropped: bool,
    ) -> bool {
        let was_whole = self.is_whole();
        let mut told = RangeSet::new();
        for range in ranges {
            let range = range.start.min(self.total)..range.end.min(self.total);
            if told.range_count() < MAX_GOT_RANGES || !told.would_add_range(range.clone()) {
                told.insert(range);
            }
        }
        let dropped = forget_dropped && !was_whole && self.dropped_since(&told);
        if dropped {
            // Known from here on: what this GOT holds (below), nothing before it.
            self.lost.clear();
            self.got = RangeSet::new();
            self.pending = RangeSet::new();
            self.pending.insert(0..self.total);
        }
        if was_whole && !told.contains_range(0..self.total) {
            self.lost.clear();
            self.got = told;
            self.pending = RangeSet::new();
            self.pending.insert(0..self.total);
            for g in self.got.ranges() {
                self.pending.remove_range(g.clone());
            }
            return true;
        }
        let mut news = false;
        for range in told.ranges() {
            if self.got.contains_range(range.clone()) {
                continue;
            }
            if self.got.range_count() >= MAX_GOT_RANGES && self.got.would_add_range(range.clone()) {
                // Bounded bookkeeping: those bytes are simply sent again.
                continue;
            }
            news = true;
            self.got.insert(range.clone());
            self.pending.remove_range(range.clone());
        }
        // A transmission of bytes it holds is answered, news or not: a probe of a message
        // held whole asks about bytes known held, and stayed in flight until a loss was
        // declared for it (its bytes counted against the window meanwhile).
        let got = &self.got;
        self.inflight.retain(|s| {
            let held = got.contains_range(s.range.clone());
            if held {
                acked.push(s.clone());
            }
            !held
        });
        if !news {
            return dropped;
        }
        self.grew_at = Some(now);
        let got = &self.got;
        self.lost.retain(|l| {
            let held = got.contains_range(l.range.clone());
            if held && crate::proto::send::loss::answers_original(now, l.resent_at, min_rtt) {
                spurious.push(l.clone());
            }
            !held
        });
        dropped
    }

    /// Whether `told`, a GOT's ranges, shows the receiver no longer holding bytes `got`
    /// holds although it answers a transmission sent after `got` last grew (so it is the
    /// newer word).
    fn dropped_since(&self, told: &RangeSet) -> bool {
        // The common case (the GOT covers all that is known) first: it costs at most
        // `MAX_GOT_RANGES` lookups and spares the walk over the transmissions in flight.
        let lacks = self
            .got
            .ranges()
            .iter()
            .any(|g| !told.contains_range(g.clone()));
        lacks
            && self.inflight.iter().any(|s| {
                self.grew_at.is_none_or(|g| s.at > g) && told.contains_range(s.range.clone())
            })
    }

    /// Transmissions in flight, in sending order.
    pub fn in_flight(&self) -> impl DoubleEndedIterator<Item = &Sent> {
        self.inflight.iter()
    }

    /// Transmissions declared lost whose bytes the receiver was not known to hold (when
    /// it acknowledges the message, it holds them all).
    pub fn lost(&self) -> impl Iterator<Item = &LostFrag> {
        self.lost.iter()
    }

    /// Whether transmission `seq` is in flight, and when it left (`inflight` is in sending
    /// order, so sorted by `seq`).
    pub fn sent_at(&self, seq: u64) -> Option<Instant> {
        let i = self.inflight.partition_point(|s| s.seq < seq);
        self.inflight.get(i).filter(|s| s.seq == seq).map(|s| s.at)
    }

    /// Transmission `seq` (every FRAG of this message in that datagram) was lost: its bytes
    /// the receiver does not hold are to send again. Returns their size (no longer in
    /// flight) and how far into the datagram the last of them reached.
    pub fn on_lost(&mut self, seq: u64, now: Instant) -> (u64, u32) {
        let lo = self.inflight.partition_point(|s| s.seq < seq);
        let hi = self.inflight.partition_point(|s| s.seq <= seq);
        let gone: Vec<Sent> = self.inflight.drain(lo..hi).collect();
        let (mut size, mut reach) = (0, 0);
        for s in gone {
            size += s.size;
            reach = reach.max(s.reach);
            if self.lost.len() >= MAX_LOST_KEPT {
                self.lost.pop_front();
            }
            self.lost.push_back(LostFrag {
                range: s.range.clone(),
                at: now,
                resent_at: None,
                size: s.size,
            });
            self.requeue(s.range);
        }
        (size, reach)
    }

    /// The timer ran out: everything in flight is to send again, or (a message held whole)
    /// a few bytes, to ask whether the receiver still holds it. Returns the bytes that were
    /// in flight.
    pub fn on_timeout(&mut self) -> u64 {
        let flight = self.flight();
        for s in std::mem::take(&mut self.inflight) {
            self.requeue(s.range);
        }
        if self.pending.is_empty() {
            self.pending.insert(0..self.total.min(PROBE_LEN));
        }
        flight
    }

    /// The oldest transmission (or, when none is in flight, a probe) is to send again, for
    /// a tail-loss probe. Returns the bytes taken out of flight.
    pub fn probe_oldest(&mut self) -> u64 {
        match self.inflight.pop_front() {
            Some(s) => {
                self.requeue(s.range);
                s.size
            }
            None => {
                if self.pending.is_empty() {
                    self.pending.insert(0..self.total.min(PROBE_LEN));
                }
                0
            }
        }
    }

    fn requeue(&mut self, range: Range<u64>) {
        self.pending.insert(range.clone());
        for g in self.got.ranges() {
            if g.start >= range.end {
                break;
            }
            self.pending.remove_range(g.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::send::congestion::DeliveryRate;

    fn t0() -> Instant {
        crate::test_time::origin()
    }

    fn st() -> SendState {
        DeliveryRate::default().on_sent(t0(), 0)
    }

    #[test]
    fn bytes_go_once_then_only_what_was_lost() {
        let mut o = Outgoing::new(10_000);
        let a = o.next_range(4000).unwrap();
        assert_eq!(a, 0..4000);
        o.on_sent(a, 1, t0(), 4020, st(), 0);
        let b = o.next_range(4000).unwrap();
        o.on_sent(b, 2, t0(), 4020, st(), 0);
        let c = o.next_range(4000).unwrap();
        assert_eq!(c, 8000..10_000);
        o.on_sent(c, 3, t0(), 2020, st(), 0);
        assert!(!o.has_pending());
        assert_eq!(o.flight(), 10_060);
        let mut acked = Vec::new();
        let mut spurious = Vec::new();
        let at = (t0(), None);
        o.on_got(
            [0..4000, 8000..10_000].into_iter(),
            &mut acked,
            at,
            &mut spurious,
            true,
        );
        assert_eq!(acked.iter().map(|s| s.seq).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(o.on_lost(2, t0()).0, 4020);
        assert_eq!(o.next_range(100_000), Some(4000..8000));
        o.on_sent(4000..8000, 4, t0(), 4020, st(), 0);
        assert!(o.inflight.back().unwrap().again, "a resend");
        // GOT is cumulative: the receiver now holds every byte.
        o.on_got(
            std::iter::once(0..10_000),
            &mut acked,
            at,
            &mut spurious,
            true,
        );
        assert!(o.is_whole());
        assert_eq!(o.flight(), 0);
        assert!(spurious.is_empty(), "no RTT known: nothing proven");
    }

    /// A probe of a message held whole asks about bytes the sender knows are held: the
    /// answer (GOT or HELD of every byte) takes it out of flight. It stayed in flight until
    /// declared lost, and kept a slot window full of held tokens counted as busy (the
    /// simulator's channel deadlock of `Rules::held_outside_slot_window`).
    #[test]
    fn a_probe_of_a_message_held_whole_leaves_the_flight_when_answered() {
        let mut o = Outgoing::held_whole(7);
        assert_eq!(o.probe_oldest(), 0, "nothing was in flight");
        let r = o.next_range(1000).unwrap();
        assert_eq!(r, 0..7);
        o.on_sent(r, 9, t0(), 30, st(), 0);
        assert_eq!(o.flight(), 30);
        let (mut acked, mut spurious) = (Vec::new(), Vec::new());
        o.on_got(
            std::iter::once(0..7),
            &mut acked,
            (t0(), None),
            &mut spurious,
            true,
        );
        assert_eq!(o.flight(), 0, "the probe was answered");
        assert_eq!(acked.iter().map(|s| s.seq).collect::<Vec<_>>(), [9]);
        assert!(o.is_whole());
    }

    #[test]
    fn a_lost_fragment_held_before_its_resend_could_be_answered_was_spurious() {
        let ms = std::time::Duration::from_millis;
        let min_rtt = Some(ms(10));
        let mut o = Outgoing::new(3000);
        o.on_sent(0..1000, 1, t0(), 1020, st(), 0);
        o.on_sent(1000..2000, 2, t0(), 1020, st(), 0);
        o.on_sent(2000..3000, 3, t0(), 1020, st(), 0);
        let (mut acked, mut spurious) = (Vec::new(), Vec::new());
        o.on_lost(1, t0() + ms(12));
        o.on_lost(2, t0() + ms(12));
        // The first one's bytes come before they left again: its loss was spurious, and
        // they are not sent again.
        let at = (t0() + ms(13), min_rtt);
        o.on_got(
            std::iter::once(0..1000),
            &mut acked,
            at,
            &mut spurious,
            true,
        );
        let starts = |sp: &[LostFrag]| sp.iter().map(|l| l.range.start).collect::<Vec<_>>();
        assert_eq!(starts(&spurious), [0]);
        assert_eq!(o.next_range(u64::MAX), Some(1000..2000));
        // The second one leaves again at 14 ms; held at 20 ms (under 10 ms later): spurious.
        o.on_sent(1000..2000, 4, t0() + ms(14), 1020, st(), 0);
        o.on_sent(2000..2500, 5, t0() + ms(14), 520, st(), 0);
        o.on_lost(5, t0() + ms(30));
        let at = (t0() + ms(20), min_rtt);
        o.on_got(
            std::iter::once(0..2000),
            &mut acked,
            at,
            &mut spurious,
            true,
        );
        assert_eq!(
            spurious.iter().map(|l| l.range.start).collect::<Vec<_>>(),
            [0, 1000]
        );
        // The third, resent at 31 ms, held at 45 ms: either copy may have arrived.
        o.on_sent(2000..2500, 6, t0() + ms(31), 520, st(), 0);
        let at = (t0() + ms(45), min_rtt);
        o.on_got(
            std::iter::once(0..3000),
            &mut acked,
            at,
            &mut spurious,
            true,
        );
        assert_eq!(spurious.len(), 2, "not proven spurious");
        assert!(o.lost.is_empty(), "forgotten once held");
    }

    #[test]
    fn a_timeout_resends_what_is_not_held_or_probes_a_whole_message() {
        let mut o = Outgoing::new(3000);
        o.on_sent(0..3000, 1, t0(), 3020, st(), 0);
        // A GOT of `range`: how many transmissions it showed held.
        let got = |o: &mut Outgoing, range: Range<u64>| {
            let (mut acked, mut sp) = (Vec::new(), Vec::new());
            o.on_got(
                std::iter::once(range),
                &mut acked,
                (t0(), None),
                &mut sp,
                true,
            );
            acked.len()
        };
        assert_eq!(got(&mut o, 1000..2000), 0);
        assert_eq!(o.on_timeout(), 3020);
        assert_eq!(o.pending.ranges(), &[0..1000, 2000..3000]);
        o.on_sent(0..1000, 2, t0(), 1020, st(), 0);
        o.on_sent(2000..3000, 3, t0(), 1020, st(), 0);
        got(&mut o, 0..3000);
        assert!(o.is_whole() && !o.has_pending());
        o.on_timeout();
        assert_eq!(o.next_range(u64::MAX), Some(0..PROBE_LEN));
    }

    /// The receiver dropped a partial (its reassembly timeout) and holds a new one: a GOT
    /// answering a fragment sent after the sender last learnt of new bytes, lacking bytes it
    /// had told of, makes those bytes pending again (`Rules::got_forgets_dropped_bytes`).
    /// Without the rule they stay counted as held, the message looks whole and is never
    /// completed. A late copy of an older GOT (answering nothing sent since) changes nothing.
    #[test]
    fn a_newer_got_lacking_told_bytes_sends_them_again() {
        let ms = |n| std::time::Duration::from_millis(n);
        for forget in [true, false] {
            let mut o = Outgoing::new(3000);
            // A GOT of `range` at `at` ms; whether it showed a dropped partial.
            let got = |o: &mut Outgoing, range: Range<u64>, at: u64| {
                let (mut acked, mut sp) = (Vec::new(), Vec::new());
                let now = (t0() + ms(at), None);
                o.on_got(std::iter::once(range), &mut acked, now, &mut sp, forget)
            };
            o.on_sent(0..1000, 1, t0(), 1020, st(), 0);
            o.on_sent(1000..2000, 2, t0(), 1020, st(), 0);
            got(&mut o, 0..2000, 10);
            // A late copy of an older GOT: nothing sent since it could answer.
            assert!(!got(&mut o, 0..1000, 11));
            assert_eq!(o.next_range(u64::MAX), Some(2000..3000));
            o.on_sent(2000..3000, 3, t0() + ms(20), 1020, st(), 0);
            // The receiver's new partial holds only the last fragment.
            let reset = got(&mut o, 2000..3000, 30);
            if forget {
                assert!(reset);
                assert!(!o.is_whole());
                assert_eq!(o.next_range(u64::MAX), Some(0..2000));
                o.on_sent(0..2000, 4, t0() + ms(31), 2020, st(), 0);
                got(&mut o, 0..3000, 40);
                assert!(o.is_whole());
            } else {
                assert!(!reset);
                assert!(o.is_whole(), "the dropped bytes still count as held");
                assert!(!o.has_pending());
            }
        }
    }
}
