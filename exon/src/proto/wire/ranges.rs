//! A set of `u64` kept as sorted, disjoint, non-adjacent ranges: slots and ACK ranges.

use std::ops::Range;

use smallvec::SmallVec;

/// A set of integers stored as ranges, so its memory follows the number of gaps, not the
/// number of members. Membership tests and removals are `O(log ranges)`. A set of one range
/// (a message's bytes in one datagram, a GOT for one whole fragment, a run of slots) is
/// kept inline: no allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: SmallVec<[Range<u64>; 1]>,
    count: u64,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of members.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Number of ranges the set is made of.
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// True when the set has no member.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges, sorted, disjoint and non-adjacent.
    pub fn ranges(&self) -> &[Range<u64>] {
        &self.ranges
    }

    /// Smallest member.
    pub fn min(&self) -> Option<u64> {
        self.ranges.first().map(|r| r.start)
    }

    /// Index of the first range whose end is at or after `v`.
    fn find(&self, v: u64) -> usize {
        self.ranges.partition_point(|r| r.end < v)
    }

    /// True if `v` is a member.
    pub fn contains(&self, v: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= v);
        self.ranges.get(i).is_some_and(|r| r.start <= v)
    }

    /// Adds every member of `add` (which may overlap existing ranges).
    #[inline]
    pub fn insert(&mut self, add: Range<u64>) {
        // Fast path: appending at the end (slots are mostly created in increasing order).
        if let Some(last) = self.ranges.last_mut() {
            if add.start > last.end && add.start < add.end {
                self.count += add.end - add.start;
                self.ranges.push(add);
                return;
            }
            if add.start >= last.start && add.start <= last.end && add.end >= last.end {
                self.count += add.end - last.end;
                last.end = add.end;
                return;
            }
        }
        self.insert_slow(add);
    }

    /// [`insert`](Self::insert) anywhere but at the end.
    fn insert_slow(&mut self, add: Range<u64>) {
        if add.start >= add.end {
            return;
        }
        if self.ranges.is_empty() {
            self.count = add.end - add.start;
            self.ranges.push(add);
            return;
        }
        let i = self.find(add.start);
        let mut j = i;
        let mut merged = add.clone();
        let mut removed = 0;
        while j < self.ranges.len() && self.ranges[j].start <= add.end {
            merged.start = merged.start.min(self.ranges[j].start);
            merged.end = merged.end.max(self.ranges[j].end);
            removed += self.ranges[j].end - self.ranges[j].start;
            j += 1;
        }
        self.count = self.count - removed + (merged.end - merged.start);
        if i == j {
            // In a gap: a range of its own.
            self.ranges.insert(i, merged);
        } else {
            self.ranges[i] = merged;
            self.ranges.drain(i + 1..j);
        }
    }

    /// Removes `v`; returns whether it was a member.
    #[inline]
    pub fn remove(&mut self, v: u64) -> bool {
        // Fast path: the smallest member (slots are mostly filled in increasing order).
        if let Some(r) = self.ranges.first_mut().filter(|r| r.start == v) {
            self.count -= 1;
            r.start += 1;
            if r.start == r.end {
                self.ranges.remove(0);
            }
            return true;
        }
        self.remove_slow(v)
    }

    /// [`remove`](Self::remove) of anything but the smallest member.
    fn remove_slow(&mut self, v: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= v);
        let Some(r) = self.ranges.get_mut(i) else {
            return false;
        };
        if r.start > v {
            return false;
        }
        self.count -= 1;
        if r.start == v {
            r.start += 1;
            if r.start == r.end {
                self.ranges.remove(i);
            }
        } else if r.end == v + 1 {
            r.end = v;
        } else {
            let tail = v + 1..r.end;
            r.end = v;
            self.ranges.insert(i + 1, tail);
        }
        true
    }

    /// True if every member of `r` (non-empty) is in the set.
    pub fn contains_range(&self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return true;
        }
        let i = self.ranges.partition_point(|g| g.end <= r.start);
        self.ranges
            .get(i)
            .is_some_and(|g| g.start <= r.start && r.end <= g.end)
    }

    /// True if inserting `r` would add a range (it neither overlaps nor touches any).
    pub fn would_add_range(&self, r: Range<u64>) -> bool {
        let i = self.find(r.start);
        self.ranges.get(i).is_none_or(|g| g.start > r.end)
    }

    /// Removes every member of `cut`; returns how many were removed.
    pub fn remove_range(&mut self, cut: Range<u64>) -> u64 {
        if cut.start >= cut.end {
            return 0;
        }
        let i = self.ranges.partition_point(|g| g.end <= cut.start);
        let mut j = i;
        let mut removed = 0;
        let mut keep: [Option<Range<u64>>; 2] = [None, None];
        while j < self.ranges.len() && self.ranges[j].start < cut.end {
            let g = self.ranges[j].clone();
            if g.start < cut.start {
                keep[0] = Some(g.start..cut.start);
            }
            if g.end > cut.end {
                keep[1] = Some(cut.end..g.end);
            }
            removed += g.end.min(cut.end) - g.start.max(cut.start);
            j += 1;
        }
        if removed > 0 {
            self.ranges.drain(i..j);
            self.ranges.insert_many(i, keep.into_iter().flatten());
            self.count -= removed;
        }
        removed
    }

    /// The first range, if any.
    pub fn first(&self) -> Option<&Range<u64>> {
        self.ranges.first()
    }

    /// Removes every member below `l`; returns how many were removed.
    pub fn remove_below(&mut self, l: u64) -> u64 {
        let mut removed = 0;
        let mut drop = 0;
        for r in &mut self.ranges {
            if r.end <= l {
                removed += r.end - r.start;
                drop += 1;
            } else {
                if r.start < l {
                    removed += l - r.start;
                    r.start = l;
                }
                break;
            }
        }
        self.ranges.drain(..drop);
        self.count -= removed;
        removed
    }

    /// Removes the first `n` ranges.
    pub fn pop_front_ranges(&mut self, n: usize) {
        let n = n.min(self.ranges.len());
        for r in self.ranges.drain(..n) {
            self.count -= r.end - r.start;
        }
    }

    /// A set of this one's first `n` ranges (a few: copied one by one, the rest untouched).
    pub fn first_ranges(&self, n: usize) -> RangeSet {
        let mut out = RangeSet::new();
        for r in self.ranges.iter().take(n) {
            out.insert(r.clone());
        }
        out
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ranges_are_copied_and_counted() {
        let mut s = RangeSet::new();
        for r in [0..2, 5..6, 9..12, 20..21] {
            s.insert(r);
        }
        let f = s.first_ranges(2);
        assert_eq!(f.ranges(), &[0..2, 5..6]);
        assert_eq!(f.count(), 3);
        assert_eq!(s.first_ranges(9), s);
        assert!(s.first_ranges(0).is_empty());
    }
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A set of one range (the bytes of a message in one datagram, a GOT for one whole
    /// fragment) allocates nothing; a second range spills to the heap and keeps working.
    #[test]
    fn one_range_is_kept_inline() {
        let mut s = RangeSet::new();
        s.insert(0..1000);
        s.insert(1000..1400);
        s.remove_range(0..10);
        assert!(!s.ranges.spilled());
        s.insert(2000..2001);
        assert!(s.ranges.spilled());
        assert_eq!(s.ranges(), &[10..1400, 2000..2001]);
    }

    proptest! {
        #[test]
        fn behaves_like_a_set(ops in proptest::collection::vec((0u8..7, 0u64..200, 0u64..20), 0..200)) {
            let mut s = RangeSet::new();
            let mut model = BTreeSet::new();
            for (op, a, b) in ops {
                match op {
                    0 => { s.insert(a..a + b); model.extend(a..a + b); }
                    1 => { prop_assert_eq!(s.remove(a), model.remove(&a)); }
                    2 => {
                        let before = model.len();
                        model.retain(|&x| x >= a);
                        prop_assert_eq!(s.remove_below(a), (before - model.len()) as u64);
                    }
                    3 => {
                        let before = model.len();
                        model.retain(|&x| !(a..a + b).contains(&x));
                        prop_assert_eq!(s.remove_range(a..a + b), (before - model.len()) as u64);
                    }
                    4 => prop_assert_eq!(
                        s.contains_range(a..a + b),
                        (a..a + b).all(|x| model.contains(&x))
                    ),
                    5 => {
                        let mut t = s.clone();
                        t.insert(a..a + b);
                        prop_assert_eq!(
                            s.would_add_range(a..a + b) && b > 0,
                            t.range_count() > s.range_count()
                        );
                    }
                    _ => prop_assert_eq!(s.contains(a), model.contains(&a)),
                }
                prop_assert_eq!(s.count(), model.len() as u64);
                let flat: Vec<u64> = s.ranges().iter().flat_map(|r| r.clone()).collect();
                prop_assert_eq!(&flat, &model.iter().copied().collect::<Vec<_>>());
                for w in s.ranges().windows(2) {
                    prop_assert!(w[0].end < w[1].start, "ranges must not touch");
                }
            }
        }
    }
}
