//! Reassembly of fragmented messages at one receiver record, within the memory its sender
//! was granted (CREDIT) and never beyond.
//!
//! A message too large for one TOKEN travels as FRAG frames: byte ranges of a message of
//! `total` bytes, all naming the message's one slot. The first fragment of a message that
//! needs more than one fragment claims `total` bytes (at least [`MIN_CHARGE`]) of the
//! record's grant; a fragment for which the grant has no room is refused, not stored (its
//! sender only starts a message within the credit it was given, so an honest sender never
//! meets a refusal). Each fragment is copied once, into the message's one buffer; the
//! message is handed over whole, never in part. A fragment that is the whole message is
//! handed over as it is, with no copy and no credit.
//!
//! Everything here is soft state: a partial message is dropped when its slot is waived, when
//! a TOKEN fills its slot, when its record goes, or when no new byte came for the reassembly
//! timeout. Its slot stays free, so the sender's retransmissions (or a RETRY for the whole
//! incarnation) still deliver it exactly once.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::proto::recv::bufpool::BufPool;
use crate::proto::wire::ranges::RangeSet;

/// Smallest number of bytes a partial message charges against the grant, whatever its
/// length, so that the per-partial bookkeeping stays a small share of the granted memory.
pub(crate) const MIN_CHARGE: u64 = 16 * 1024;

/// Most byte ranges (holes between them) a partial message may have: a fragment that would
/// make more is refused (the sender retransmits it once the holes before it are filled).
pub(crate) const MAX_RANGES: usize = 256;

/// What became of one fragment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// The message is whole: deliver it.
    Whole(Bytes),
    /// Stored (or already held): the message is not whole yet.
    Kept,
    /// Not stored: the reason.
    Refused(Refusal),
}

/// Why a fragment was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A new message with no room left in the grant.
    NoCredit,
    /// Its `total` differs from the message's first fragment.
    Mismatch,
    /// It would split the message's bytes into more than [`MAX_RANGES`] ranges.
    TooFragmented,
}

/// One message being reassembled.
#[derive(Debug)]
struct Partial {
    slot: u64,
    total: u64,
    /// The message's bytes from its start to the end of the furthest fragment held (room
    /// for `total` reserved; holes before that end are zeros until their bytes come).
    buf: Vec<u8>,
    have: RangeSet,
    /// When a new byte last arrived.
    progress: Instant,
}

impl Partial {
    fn charge(&self) -> u64 {
        self.total.max(MIN_CHARGE)
    }
}

/// The partial messages of one receiver record and the memory granted to its sender.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    granted: u64,
    charged: u64,
    partials: Vec<Partial>,
    /// Which partial a refusal reports next ([`next_report`](Self::next_report)).
    report: usize,
}

impl Assembler {
    /// Bytes of reassembly memory reserved for the sender.
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// Bytes of the grant that partial messages hold now.
    pub fn in_use(&self) -> u64 {
        self.charged
    }

    /// Messages being reassembled.
    pub fn partials(&self) -> usize {
        self.partials.len()
    }

    /// A REQCREDIT asking for `want` bytes in all: the grant grows towards it, by at most
    /// `free` (what the node has not reserved for anyone), never past `cap`. It never
    /// shrinks while the record lives (the sender may already rely on it). Returns the new
    /// grant and by how much it grew.
    pub fn grant(&mut self, want: u64, cap: u64, free: u64) -> (u64, u64) {
        let target = want.min(cap);
        let grow = target.saturating_sub(self.granted).min(free);
        self.granted += grow;
        (self.granted, grow)
    }

    /// Grows the grant (as [`grant`](Self::grant) does) so that a new `total`-byte message
    /// fits beside the partials held, unless `slot` is being reassembled already: for a
    /// sender that relies on a grant this assembler never made (its receiver restarted).
    pub fn grant_room_for(&mut self, slot: u64, total: u64, cap: u64, free: u64) {
        if self.have(slot).is_none() {
            self.grant(
                self.charged.saturating_add(total.max(MIN_CHARGE)),
                cap,
                free,
            );
        }
    }

    /// The partials in turn, one a call: what a fragment refused for want of credit is
    /// answered with (`Rules::got_charges_partials`), so that a sender that counts less of
    /// the grant in use (a restart lost what its life before started) learns of each.
    pub fn next_report(&mut self) -> Option<(u64, &RangeSet)> {
        if self.partials.is_empty() {
            return None;
        }
        let i = self.report % self.partials.len();
        self.report = i + 1;
        let p = &self.partials[i];
        Some((p.slot, &p.have))
    }

    /// The byte ranges held of the message in `slot`, if it is being reassembled.
    pub fn have(&self, slot: u64) -> Option<&RangeSet> {
        self.partials
            .iter()
            .find(|p| p.slot == slot)
            .map(|p| &p.have)
    }

    /// Takes the fragment `offset .. offset + data.len()` of the `total`-byte message in
    /// `slot` (the caller checked that the slot is free and `total` within bounds, and the
    /// decoder that the fragment is non-empty and inside the message). With `credit` false
    /// (the rule switched off, for tests) a new message needs no grant. A message's buffer
    /// comes from `pool`, and a whole message goes back to it once dropped.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &mut self,
        slot: u64,
        total: u64,
        offset: u64,
        data: &Bytes,
        now: Instant,
        credit: bool,
        pool: &BufPool,
    ) -> Piece {
        let end = offset + data.len() as u64;
        let Some(i) = self.partials.iter().position(|p| p.slot == slot) else {
            if offset == 0 && end == total {
                // The whole message in one fragment: no reassembly.
                return Piece::Whole(data.clone());
            }
            let charge = total.max(MIN_CHARGE);
            let Ok(len) = usize::try_from(total) else {
                return Piece::Refused(Refusal::NoCredit);
            };
            if credit && self.charged + charge > self.granted {
                return Piece::Refused(Refusal::NoCredit);
            }
            self.charged += charge;
            let mut p = Partial {
                slot,
                total,
                // Reserved, not zeroed (the bytes come from the fragments): a zeroed
                // allocation of this size is fresh pages from the system every time.
                buf: pool.take(len),
                have: RangeSet::new(),
                progress: now,
            };
            copy_in(&mut p, offset, data);
            self.partials.push(p);
            return Piece::Kept;
        };
        let p = &mut self.partials[i];
        if p.total != total {
            return Piece::Refused(Refusal::Mismatch);
        }
        if p.have.contains_range(offset..end) {
            return Piece::Kept;
        }
        if p.have.range_count() >= MAX_RANGES && p.have.would_add_range(offset..end) {
            return Piece::Refused(Refusal::TooFragmented);
        }
        copy_in(p, offset, data);
        p.progress = now;
        if !p.have.contains_range(0..total) {
            return Piece::Kept;
        }
        let p = self.partials.swap_remove(i);
        self.charged -= p.charge();
        Piece::Whole(pool.hand_out(p.buf))
    }

    /// Drops the partial message in `slot` (its slot was filled by a TOKEN). Returns whether
    /// there was one.
    pub fn drop_slot(&mut self, slot: u64) -> bool {
        self.drop_where(|p| p.slot == slot) > 0
    }

    /// Drops every partial message in a slot below `l` (waived by the sender).
    pub fn drop_below(&mut self, l: u64) -> usize {
        self.drop_where(|p| p.slot < l)
    }

    /// Drops every partial message that received no new byte for `idle`. Returns how many.
    pub fn expire(&mut self, now: Instant, idle: Duration) -> usize {
        self.drop_where(|p| now.saturating_duration_since(p.progress) >= idle)
    }

    /// When the next partial message expires, if any.
    pub fn next_expiry(&self, idle: Duration) -> Option<Instant> {
        self.partials.iter().map(|p| p.progress + idle).min()
    }

    fn drop_where(&mut self, mut gone: impl FnMut(&Partial) -> bool) -> usize {
        if self.partials.is_empty() {
            // The common case (every TOKEN asks): no pass at all.
            return 0;
        }
        let before = self.partials.len();
        let mut freed = 0;
        self.partials.retain(|p| {
            let g = gone(p);
            if g {
                freed += p.charge();
            }
            !g
        });
        self.charged -= freed;
        before - self.partials.len()
    }
}

/// Copies the bytes of a fragment the message does not hold yet into its buffer (the one
/// copy a fragment's bytes make on the receive path).
fn copy_in(p: &mut Partial, offset: u64, data: &Bytes) {
    let end = offset + data.len() as u64;
    // Copying bytes held already is harmless (a sender sends the same bytes each time).
    let (from, to) = (offset as usize, end as usize);
    if from > p.buf.len() {
        // A hole before it: zeros until its own fragment comes.
        p.buf.resize(from, 0);
    }
    let held = to.min(p.buf.len());
    p.buf[from..held].copy_from_slice(&data[..held - from]);
    p.buf.extend_from_slice(&data[held - from..]);
    p.have.insert(offset..end);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        crate::test_time::origin()
    }

    fn frag(total: usize, from: usize, to: usize) -> Bytes {
        let msg: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        Bytes::copy_from_slice(&msg[from..to])
    }

    #[test]
    fn out_of_order_fragments_make_the_message_once_whole() {
        let mut a = Assembler::default();
        a.grant(1 << 20, 1 << 20, u64::MAX);
        let total = 100_000;
        let cuts = [0, 30_000, 60_000, 90_000, 100_000];
        let order = [3, 1, 0, 2];
        for (k, &i) in order.iter().enumerate() {
            let d = frag(total, cuts[i], cuts[i + 1]);
            let got = a.insert(
                5,
                total as u64,
                cuts[i] as u64,
                &d,
                t0(),
                true,
                &BufPool::default(),
            );
            if k + 1 < order.len() {
                assert_eq!(got, Piece::Kept);
                assert_eq!(a.in_use(), total as u64);
            } else {
                assert_eq!(got, Piece::Whole(frag(total, 0, total)));
            }
        }
        assert_eq!(a.in_use(), 0);
        assert_eq!(a.partials(), 0);
    }

    #[test]
    fn overlapping_fragments_in_any_order_make_the_message_exactly() {
        let total = 50_000;
        let whole = frag(total, 0, total);
        // A small generator, seeded: fragments of any length, anywhere, overlapping.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for round in 0..50 {
            let mut a = Assembler::default();
            a.grant(1 << 20, 1 << 20, u64::MAX);
            let mut got = None;
            for _ in 0..10_000 {
                // Starts at 0 often enough for the message's head to come.
                let from = next(total + 4_000).saturating_sub(4_000);
                let to = (from + 1 + next(8_000)).min(total);
                let d = frag(total, from, to);
                match a.insert(
                    1,
                    total as u64,
                    from as u64,
                    &d,
                    t0(),
                    true,
                    &BufPool::default(),
                ) {
                    Piece::Whole(m) => {
                        got = Some(m);
                        break;
                    }
                    Piece::Kept => {}
                    Piece::Refused(r) => panic!("round {round}: {r:?}"),
                }
            }
            let got = got.unwrap_or_else(|| panic!("round {round}: never whole"));
            assert!(got == whole, "round {round}: the bytes differ");
            assert_eq!(a.in_use(), 0);
        }
    }

    #[test]
    fn a_whole_fragment_needs_no_credit_and_no_copy() {
        let mut a = Assembler::default();
        let d = frag(5000, 0, 5000);
        let got = a.insert(1, 5000, 0, &d, t0(), true, &BufPool::default());
        let Piece::Whole(b) = got else {
            panic!("not whole")
        };
        assert_eq!(b.as_ptr(), d.as_ptr(), "the received bytes, not a copy");
    }

    #[test]
    fn a_new_message_beyond_the_grant_is_refused_and_never_stored() {
        let mut a = Assembler::default();
        assert_eq!(a.grant(150_000, 1 << 20, 1 << 30), (150_000, 150_000));
        let d = frag(100_000, 0, 1000);
        assert_eq!(
            a.insert(1, 100_000, 0, &d, t0(), true, &BufPool::default()),
            Piece::Kept
        );
        assert_eq!(
            a.insert(2, 100_000, 0, &d, t0(), true, &BufPool::default()),
            Piece::Refused(Refusal::NoCredit)
        );
        assert_eq!(a.partials(), 1);
        assert_eq!(a.in_use(), 100_000);
        // Small messages charge the minimum: the count of partials stays bounded.
        let mut b = Assembler::default();
        b.grant(4 * MIN_CHARGE, u64::MAX, u64::MAX);
        let tiny = Bytes::from_static(b"x");
        let kept = (0..100)
            .filter(|s| b.insert(*s, 2, 0, &tiny, t0(), true, &BufPool::default()) == Piece::Kept)
            .count();
        assert_eq!(kept, 4);
    }

    #[test]
    fn grants_grow_within_the_cap_and_what_is_free_and_never_shrink() {
        let mut a = Assembler::default();
        assert_eq!(a.grant(10, 100, 5), (5, 5));
        assert_eq!(a.grant(1000, 100, 1000), (100, 95));
        assert_eq!(a.grant(1, 100, 1000), (100, 0), "never shrinks");
    }

    #[test]
    fn a_fragment_contradicting_the_first_is_refused() {
        let mut a = Assembler::default();
        a.grant(1 << 20, 1 << 20, u64::MAX);
        let d = frag(50_000, 0, 1000);
        assert_eq!(
            a.insert(1, 50_000, 0, &d, t0(), true, &BufPool::default()),
            Piece::Kept
        );
        assert_eq!(
            a.insert(1, 60_000, 1000, &d, t0(), true, &BufPool::default()),
            Piece::Refused(Refusal::Mismatch)
        );
    }

    #[test]
    fn holes_are_bounded() {
        let mut a = Assembler::default();
        a.grant(1 << 20, 1 << 20, u64::MAX);
        let one = Bytes::from_static(b"y");
        let mut refused = 0;
        for k in 0..(2 * MAX_RANGES as u64) {
            if a.insert(9, 100_000, k * 2, &one, t0(), true, &BufPool::default()) != Piece::Kept {
                refused += 1;
            }
        }
        assert_eq!(refused, MAX_RANGES);
        // A fragment joining two ranges is still taken.
        assert_eq!(
            a.insert(9, 100_000, 1, &one, t0(), true, &BufPool::default()),
            Piece::Kept
        );
    }

    #[test]
    fn stalled_and_waived_partials_free_their_memory() {
        let mut a = Assembler::default();
        a.grant(1 << 20, 1 << 20, u64::MAX);
        let d = frag(50_000, 0, 1000);
        let idle = Duration::from_secs(30);
        let t = t0();
        a.insert(3, 50_000, 0, &d, t, true, &BufPool::default());
        a.insert(
            7,
            50_000,
            0,
            &d,
            t + Duration::from_secs(20),
            true,
            &BufPool::default(),
        );
        assert_eq!(a.next_expiry(idle), Some(t + idle));
        assert_eq!(a.expire(t + idle, idle), 1);
        assert_eq!(a.in_use(), 50_000);
        assert!(a.have(3).is_none() && a.have(7).is_some());
        assert_eq!(a.drop_below(8), 1);
        assert_eq!(a.in_use(), 0);
        a.insert(9, 50_000, 0, &d, t0(), true, &BufPool::default());
        assert!(a.drop_slot(9));
        assert!(!a.drop_slot(9));
        assert_eq!(a.in_use(), 0);
    }
}
