//! Making room in a full receiver-record table, and what is remembered of the records that
//! go so that their late TOKENs still get a true verdict.
//!
//! Which record goes: one nothing was delivered into (unproven: a source that asked for
//! slots and never used them), the first whose grace ran out (`unproven.rs`), else the
//! record whose source has been silent the longest, if it has been silent for at least the
//! probe interval and holds no delivery the application has not taken. A source that keeps sending is never evicted, so a stream of
//! new identities that send once and vanish pushes out only each other.
//!
//! What is remembered (`docs/wire.md`, "Record table pressure"):
//! * an unproven incarnation: every TOKEN for it gets RETRY (nothing was delivered);
//! * a proven one: its free slots and its `sck`. A TOKEN for a free slot gets RETRY (never
//!   delivered, and now never will be under that incarnation), one below `sck` outside them
//!   ACK (its slot was filled, and the delivery taken: a duplicate), anything else DOUBT.
//!   Free slots in more than [`MAX_RANGES_PER_RECORD`] ranges are kept in that many: the
//!   ranges closest together are joined, with the filled slots between them, into spans
//!   whose every slot gets DOUBT (it may be either).
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

/// Ranges remembered of one proven record at most (free ones, and spans of doubt joining
/// free ranges that were too many to keep).
const MAX_RANGES_PER_RECORD: usize = 8;

/// Candidates gathered by one pass over the records, evicted one by one before the next pass.
const VICTIM_BATCH: usize = 64;

/// What is kept of a proven record that was evicted.
#[derive(Debug, Clone)]
struct Used {
    /// One past the last slot the record ever created.
    sck: u64,
    /// Its slots still free when it went (those outside `unsure`).
    free: RangeSet,
    /// Spans of free and filled slots together, joined to keep the ranges few: DOUBT.
    unsure: RangeSet,
}

impl Used {
    /// What is kept of a record that created slots below `sck` and went with `free` ones:
    /// at most [`MAX_RANGES_PER_RECORD`] ranges in all. When there are more, the free
    /// ranges separated by the fewest filled slots are joined (one pass: the smallest gaps,
    /// as many as must go), so that most slots keep their exact verdict.
    fn new(sck: u64, free: &RangeSet) -> Used {
        let ranges = free.ranges();
        let excess = ranges.len().saturating_sub(MAX_RANGES_PER_RECORD);
        if excess == 0 {
            return Used {
                sck,
                free: free.clone(),
                unsure: RangeSet::new(),
            };
        }
        // Gap `i` lies between ranges `i` and `i + 1`; the `excess` smallest are joined.
        let mut gaps: Vec<(u64, usize)> = ranges
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[1].start - w[0].end, i))
            .collect();
        gaps.select_nth_unstable(excess - 1);
        let mut joined = vec![false; ranges.len()];
        for &(_, i) in &gaps[..excess] {
            joined[i] = true;
        }
        let (mut kept, mut unsure) = (RangeSet::new(), RangeSet::new());
        let mut start = 0;
        for i in 0..ranges.len() {
            if joined[i] {
                continue;
            }
            // Ranges `start..=i` form one piece: free alone, a span of doubt joined.
            let span = ranges[start].start..ranges[i].end;
            if start == i {
                kept.insert(span);
            } else {
                unsure.insert(span);
            }
            start = i + 1;
        }
        Used {
            sck,
            free: kept,
            unsure,
        }
    }

    /// Ranges it holds (at least one, for the bound on all evicted incarnations).
    fn ranges(&self) -> usize {
        (self.free.range_count() + self.unsure.range_count()).max(1)
    }
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
        Some(if u.free.contains(s) {
            Verdict::Retry
        } else if s < u.sck && !u.unsure.contains(s) {
            Verdict::Ack
        } else {
            Verdict::Doubt
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
        let used = Used::new(sck, free);
        self.used_ranges += used.ranges();
        if let Some(old) = self.used.insert(r, used) {
            self.used_ranges -= old.ranges();
        }
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
                self.used_ranges -= u.ranges();
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
    fn a_fragmented_record_keeps_its_verdicts_but_where_its_free_ranges_were_joined() {
        // The record a simulator run evicted (seed 5046 of `--nodes 5 --traffic many
        // --record-cap 2 --burst 0.3 --loss 0.1 --dup 0.1`): nine free ranges, the last
        // the grant's unused tail. Once it was all DOUBT, and 27 messages ended in doubt.
        let mut e = Evictions::default();
        let free = set(&[
            144..145,
            148..150,
            156..161,
            166..170,
            172..173,
            174..175,
            176..177,
            186..195,
            201..329,
        ]);
        e.evicted_used(1, 329, &free);
        // The smallest gap (slot 173, or 175) is joined: those three slots are unsure.
        let doubt = (140..329)
            .filter(|&s| e.verdict(1, s) == Some(Verdict::Doubt))
            .count();
        assert!(doubt <= 3, "{doubt} slots in doubt");
        assert_eq!(
            e.verdict(1, 250),
            Some(Verdict::Retry),
            "the free tail is exact"
        );
        assert_eq!(e.verdict(1, 144), Some(Verdict::Retry));
        assert_eq!(e.verdict(1, 142), Some(Verdict::Ack), "filled");
        assert_eq!(e.verdict(1, 195), Some(Verdict::Ack));
        assert_eq!(e.verdict(1, 329), Some(Verdict::Doubt), "never created");
    }

    #[test]
    fn a_verdict_is_never_false_however_fragmented_the_record() {
        // Every free slot gets RETRY or DOUBT, every filled one ACK or DOUBT, and at most
        // eight ranges are kept, for free sets of every shape.
        let mut seed = 7u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..300 {
            let sck = 50 + next(400);
            let mut free = RangeSet::new();
            for _ in 0..next(60) {
                let a = next(sck);
                free.insert(a..(a + 1 + next(6)).min(sck));
            }
            let mut e = Evictions::default();
            e.evicted_used(4, sck, &free);
            let u = &e.used[&4];
            assert!(u.free.range_count() + u.unsure.range_count() <= MAX_RANGES_PER_RECORD);
            for s in 0..sck + 5 {
                let v = e.verdict(4, s).unwrap();
                if free.contains(s) {
                    assert_ne!(v, Verdict::Ack, "a free slot acknowledged");
                } else if s < sck {
                    assert_ne!(v, Verdict::Retry, "a filled slot retried");
                } else {
                    assert_eq!(v, Verdict::Doubt);
                }
            }
        }
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
