//! Making room in a full receiver-record table, and what is remembered of the records that
//! go so that their late TOKENs still get a true verdict.
//!
//! Which record goes: the oldest one nothing was delivered into (unproven: a source that
//! asked for slots and never used them), else the record whose source has been silent the
//! longest, if it has been silent for at least the probe interval and holds no delivery the
//! application has not taken. A source that keeps sending is never evicted, so a stream of
//! new identities that send once and vanish pushes out only each other.
//!
//! What is remembered (`docs/wire.md`, "Record table pressure"):
//! * an unproven incarnation: every TOKEN for it gets RETRY (nothing was delivered);
//! * a proven one: its free slots and its `sck`. A TOKEN for a free slot gets RETRY (never
//!   delivered, and now never will be under that incarnation), one below `sck` outside them
//!   ACK (its slot was filled, and the delivery taken: a duplicate), anything else DOUBT.
//!
//! Both are bounded ([`MAX_EVICTED_RANGES`] ranges in all); what is forgotten beyond is
//! answered DOUBT (the node raises its `doubt_below`), which is true, if less precise.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::proto::wire::frame::Verdict;
use crate::proto::wire::ranges::RangeSet;
use crate::proto::NodeId;

/// Most ranges remembered over all evicted incarnations (free slots of proven ones, and the
/// incarnations of unproven ones); the oldest incarnations are forgotten beyond.
pub(crate) const MAX_EVICTED_RANGES: usize = 1024;

/// Free-slot ranges remembered of one proven record at most; a record with more is
/// remembered as "in doubt" for every slot.
const MAX_RANGES_PER_RECORD: usize = 8;

/// Candidates gathered by one pass over the records, evicted one by one before the next pass.
const VICTIM_BATCH: usize = 64;

/// What is kept of a proven record that was evicted.
#[derive(Debug, Clone)]
struct Used {
    /// One past the last slot the record ever created.
    sck: u64,
    /// Its slots still free when it went; `None` when too fragmented to keep.
    free: Option<RangeSet>,
}

/// What a receiver record looks like to the eviction policy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// The source.
    pub src: NodeId,
    /// The record's incarnation.
    pub rck: u64,
    /// When the source was last heard from (its REQSLOTS or TOKENs).
    pub last_heard: Instant,
    /// Whether it may go at all (no delivery waiting for the application).
    pub evictable: bool,
}

/// The evicted incarnations and the next records to evict.
#[derive(Debug, Default)]
pub(crate) struct Evictions {
    /// Incarnations evicted before anything was delivered into them.
    unused: RangeSet,
    /// Incarnations evicted after deliveries, with their free slots.
    used: BTreeMap<u64, Used>,
    /// Ranges held by `used` (each entry counts at least one).
    used_ranges: usize,
    /// Proven records to evict next, the longest silent last: (last heard, source, rck).
    victims: Vec<(Instant, NodeId, u64)>,
    /// After a pass that found no record silent long enough, none before this instant: a
    /// table full of active sources does not cost a pass per newcomer.
    no_pass_before: Option<Instant>,
}

impl Evictions {
    /// The verdict for a TOKEN of slot `s` of an evicted incarnation `r`, or `None` when `r`
    /// was not evicted (or is forgotten).
    pub fn verdict(&self, r: u64, s: u64) -> Option<Verdict> {
        if self.unused.contains(r) {
            return Some(Verdict::Retry);
        }
        let u = self.used.get(&r)?;
        Some(match &u.free {
            Some(free) if free.contains(s) => Verdict::Retry,
            Some(_) if s < u.sck => Verdict::Ack,
            _ => Verdict::Doubt,
        })
    }

    /// Incarnation `r`, nothing delivered into it, was evicted. Returns the incarnation
    /// below which everything was forgotten, if anything was.
    pub fn evicted_unused(&mut self, r: u64) -> Option<u64> {
        self.unused.insert(r..r + 1);
        self.trim()
    }

    /// Incarnation `r`, proven, was evicted with `free` slots, having created slots below
    /// `sck`. Returns the incarnation below which everything was forgotten, if anything was.
    pub fn evicted_used(&mut self, r: u64, sck: u64, free: &RangeSet) -> Option<u64> {
        let free = (free.range_count() <= MAX_RANGES_PER_RECORD).then(|| free.clone());
        let n = free.as_ref().map_or(1, |f| f.range_count().max(1));
        if let Some(old) = self.used.insert(r, Used { sck, free }) {
            self.used_ranges -= old.free.map_or(1, |f| f.range_count().max(1));
        }
        self.used_ranges += n;
        self.trim()
    }

    /// Forgets the oldest incarnations until both sets fit; returns one past the newest
    /// forgotten.
    fn trim(&mut self) -> Option<u64> {
        let mut below = None;
        while self.unused.range_count() + self.used_ranges > MAX_EVICTED_RANGES {
            let oldest_unused = self.unused.ranges().first().map(|g| g.start);
            let oldest_used = self.used.keys().next().copied();
            let unused_first = match (oldest_unused, oldest_used) {
                (None, None) => break,
                (Some(a), Some(b)) => a <= b,
                (a, _) => a.is_some(),
            };
            if unused_first {
                let end = self.unused.ranges()[0].end;
                self.unused.pop_front_ranges(1);
                below = below.max(Some(end));
            } else if let Some((b, u)) = self.used.pop_first() {
                self.used_ranges -= u.free.map_or(1, |f| f.range_count().max(1));
                below = below.max(Some(b + 1));
            }
        }
        below
    }

    /// The next proven record to evict at `now`: the one whose source has been silent the
    /// longest, at least `min_silence`. `records` is consulted (one pass, gathering the next
    /// few candidates) only when no candidate from an earlier pass is still valid;
    /// `current` says what a record looks like now, to skip candidates that changed.
    pub fn next_victim<I>(
        &mut self,
        now: Instant,
        min_silence: Duration,
        records: impl FnOnce() -> I,
        current: impl Fn(NodeId) -> Option<Candidate>,
    ) -> Option<(NodeId, u64)>
    where
        I: Iterator<Item = Candidate>,
    {
        let valid = |(heard, src, rck): &(Instant, NodeId, u64)| {
            current(*src).is_some_and(|c| {
                c.evictable
                    && c.rck == *rck
                    && c.last_heard == *heard
                    && now.saturating_duration_since(c.last_heard) >= min_silence
            })
        };
        while let Some(v) = self.victims.pop() {
            if valid(&v) {
                return Some((v.1, v.2));
            }
        }
        if self.no_pass_before.is_some_and(|t| now < t) {
            return None;
        }
        let mut batch: Vec<(Instant, NodeId, u64)> = records()
            .filter(|c| c.evictable && now.saturating_duration_since(c.last_heard) >= min_silence)
            .map(|c| (c.last_heard, c.src, c.rck))
            .collect();
        if batch.len() > VICTIM_BATCH {
            batch.select_nth_unstable(VICTIM_BATCH - 1);
            batch.truncate(VICTIM_BATCH);
        }
        // Longest silent last, so that `pop` takes it first.
        batch.sort_unstable_by(|a, b| b.cmp(a));
        // None silent long enough: the next pass waits an eighth of the silence asked for
        // (a source that just went quiet is found that much later at worst).
        self.no_pass_before = batch.is_empty().then(|| now + min_silence / 8);
        self.victims = batch;
        self.victims.pop().map(|v| (v.1, v.2))
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn set(rs: &[std::ops::Range<u64>]) -> RangeSet {
        let mut s = RangeSet::new();
        for r in rs {
            s.insert(r.clone());
        }
        s
    }

    #[test]
    fn tokens_of_an_evicted_record_get_the_verdict_their_slot_deserves() {
        let mut e = Evictions::default();
        assert_eq!(e.verdict(7, 3), None);
        e.evicted_unused(7);
        assert_eq!(e.verdict(7, 3), Some(Verdict::Retry));
        // Proven: slots 100..110 created, 104..106 and 108 still free.
        e.evicted_used(9, 110, &set(&[104..106, 108..109]));
        assert_eq!(
            e.verdict(9, 104),
            Some(Verdict::Retry),
            "free: never delivered"
        );
        assert_eq!(e.verdict(9, 108), Some(Verdict::Retry));
        assert_eq!(e.verdict(9, 103), Some(Verdict::Ack), "filled: delivered");
        assert_eq!(e.verdict(9, 107), Some(Verdict::Ack));
        assert_eq!(e.verdict(9, 110), Some(Verdict::Doubt), "never created");
        assert_eq!(e.verdict(8, 104), None);
    }

    #[test]
    fn a_fragmented_record_is_remembered_as_in_doubt() {
        let mut e = Evictions::default();
        let many: Vec<_> = (0..20u64).map(|i| i * 10..i * 10 + 5).collect();
        e.evicted_used(3, 300, &set(&many));
        assert_eq!(e.verdict(3, 0), Some(Verdict::Doubt));
        assert_eq!(e.verdict(3, 7), Some(Verdict::Doubt));
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_are_forgotten_for_doubt() {
        let mut e = Evictions::default();
        let mut below = None;
        for r in 0..5000u64 {
            let b = if r % 2 == 0 {
                e.evicted_unused(r * 2)
            } else {
                e.evicted_used(r * 2, 50, &set(&[10..20, 30..40]))
            };
            below = below.max(b);
        }
        assert!(e.unused.range_count() + e.used_ranges <= MAX_EVICTED_RANGES);
        let below = below.expect("some were forgotten");
        assert_eq!(e.verdict(0, 15), None, "forgotten: the node answers DOUBT");
        assert!(below > 0 && below < 9998);
        assert_eq!(
            e.verdict(9998, 15),
            Some(Verdict::Retry),
            "the newest are kept"
        );
        assert_eq!(e.verdict(9998, 25), Some(Verdict::Ack));
    }

    #[test]
    fn the_longest_silent_evictable_record_goes_first() {
        let t0 = crate::test_time::origin();
        let s = Duration::from_secs(1);
        let recs: Vec<Candidate> = (1..=200u64)
            .map(|i| Candidate {
                src: NodeId::from_const(i),
                rck: i,
                // Heard at i ms; the oldest few hold deliveries not taken.
                last_heard: t0 + Duration::from_millis(i),
                evictable: i > 3,
            })
            .collect();
        let now = t0 + Duration::from_millis(1150);
        let gone = std::cell::RefCell::new(std::collections::HashSet::new());
        let live = || {
            recs.iter()
                .copied()
                .filter(|c| !gone.borrow().contains(&c.src))
                .collect::<Vec<_>>()
                .into_iter()
        };
        let look = |id: NodeId| live().find(|c| c.src == id);
        let mut e = Evictions::default();
        let mut got = Vec::new();
        while let Some((src, _)) = e.next_victim(now, s, live, look) {
            got.push(src.get());
            gone.borrow_mut().insert(src);
            assert!(got.len() <= 200);
        }
        // Silent for at least 1 s: heard at or before 150 ms; the first three are not
        // evictable.
        assert_eq!(got, (4..=150).collect::<Vec<_>>());
    }

    #[test]
    fn a_table_of_active_sources_costs_one_pass_per_eighth_of_the_silence() {
        use std::cell::Cell;
        let t0 = crate::test_time::origin();
        let s = Duration::from_secs(1);
        let recs: Vec<Candidate> = (1..=100u64)
            .map(|i| Candidate {
                src: NodeId::from_const(i),
                rck: i,
                last_heard: t0,
                evictable: true,
            })
            .collect();
        let passes = Cell::new(0);
        let all = || {
            passes.set(passes.get() + 1);
            recs.clone().into_iter()
        };
        let look = |id: NodeId| recs.iter().find(|c| c.src == id).copied();
        let mut e = Evictions::default();
        // Every source heard just now: nothing to evict, and one pass for many newcomers.
        for k in 0..1000u64 {
            let now = t0 + Duration::from_micros(k * 100);
            assert_eq!(e.next_victim(now, s, all, look), None);
        }
        assert_eq!(passes.get(), 1);
        // An eighth of a second on, another pass; once they are silent, they go.
        let later = t0 + s / 8;
        assert_eq!(e.next_victim(later, s, all, look), None);
        assert_eq!(passes.get(), 2);
        assert!(e.next_victim(t0 + s, s, all, look).is_some());
    }
}
