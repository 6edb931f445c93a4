//! The receiver records nothing was delivered into yet, in the order they may be evicted:
//! each when the grace it is kept for after it was last heard from runs out
//! (`Rules::fresh_records_kept`).
//!
//! A flood of forged REQSLOTS fills the record table with such records, and each further
//! request asks for one to evict. Finding it must not cost a walk of the table: at 4 096
//! records, a walk per forged datagram was thousands of lookups each. Entries are kept in a
//! min-heap by the instant their record may go; an entry whose record was heard from since
//! goes back with its new instant when it comes up, and one whose record is gone (evicted,
//! proven, replaced by another incarnation) is dropped then. A request finds in O(log n)
//! (amortized over the datagrams that moved the instants) a record to evict, or that none
//! may go before the earliest instant.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::proto::NodeId;

/// Eviction candidates: unproven receiver records (source and incarnation), by the instant
/// each may be evicted.
#[derive(Debug, Default)]
pub(crate) struct Unproven {
    heap: BinaryHeap<Reverse<(Instant, NodeId, u64)>>,
}

/// What [`Unproven::next_evictable`] learns of a candidate's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Gone, proven, or another incarnation now: not a candidate any more.
    Gone,
    /// Unproven, kept until this instant (last heard from, plus its grace).
    KeptUntil(Instant),
}

impl Unproven {
    /// A new unproven record of `src`, incarnation `r`, kept until `until`.
    pub fn insert(&mut self, src: NodeId, r: u64, until: Instant) {
        self.heap.push(Reverse((until, src, r)));
    }

    /// Entries held (those of records gone included, until they come up or
    /// [`retain`](Self::retain) drops them).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// The record to evict at `now`, taken out of the candidates: the one whose grace ran
    /// out first, if any has. `standing` tells what became of an entry's record.
    pub fn next_evictable(
        &mut self,
        now: Instant,
        mut standing: impl FnMut(NodeId, u64) -> Standing,
    ) -> Option<(NodeId, u64)> {
        while let Some(&Reverse((at, src, r))) = self.heap.peek() {
            if at > now {
                return None;
            }
            self.heap.pop();
            match standing(src, r) {
                Standing::Gone => {}
                Standing::KeptUntil(until) if until > now => {
                    // Heard from since: back in line at its new instant.
                    self.heap.push(Reverse((until, src, r)));
                }
                Standing::KeptUntil(_) => return Some((src, r)),
            }
        }
        None
    }

    /// Keeps only the entries `keep` accepts (a bound on entries of records gone).
    pub fn retain(&mut self, mut keep: impl FnMut(NodeId, u64) -> bool) {
        self.heap.retain(|Reverse((_, src, r))| keep(*src, *r));
    }

    /// Gives memory back after a flood.
    pub fn shrink(&mut self) {
        if self.heap.capacity() > 4 * self.heap.len() + 64 {
            self.heap.shrink_to(2 * self.heap.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn id(i: u64) -> NodeId {
        NodeId::from_const(i)
    }

    #[test]
    fn the_first_whose_grace_ran_out_goes_and_one_heard_from_since_waits() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut u = Unproven::default();
        // Three records kept 10 ms each, made at 0, 1 and 2 ms.
        let mut kept: HashMap<NodeId, Instant> = HashMap::new();
        for i in 0..3 {
            let until = t0 + ms(10 + i);
            u.insert(id(i + 1), 7, until);
            kept.insert(id(i + 1), until);
        }
        let look = |kept: &HashMap<NodeId, Instant>| {
            let kept = kept.clone();
            move |src, _| {
                kept.get(&src)
                    .map_or(Standing::Gone, |&t| Standing::KeptUntil(t))
            }
        };
        assert_eq!(u.next_evictable(t0 + ms(9), look(&kept)), None, "all fresh");
        // The first was heard from again at 5 ms: kept until 15 ms.
        kept.insert(id(1), t0 + ms(15));
        // The second is gone (proven).
        kept.remove(&id(2));
        assert_eq!(u.next_evictable(t0 + ms(12), look(&kept)), Some((id(3), 7)));
        assert_eq!(u.next_evictable(t0 + ms(12), look(&kept)), None);
        assert_eq!(u.next_evictable(t0 + ms(15), look(&kept)), Some((id(1), 7)));
        assert_eq!(u.len(), 0);
    }

    #[test]
    fn a_refusal_looks_at_no_entry_beyond_the_earliest() {
        let t0 = Instant::now();
        let mut u = Unproven::default();
        for i in 0..4096 {
            u.insert(id(i + 1), i, t0 + Duration::from_millis(20));
        }
        let mut looked = 0;
        for _ in 0..1000 {
            let got = u.next_evictable(t0, |_, _| {
                looked += 1;
                Standing::KeptUntil(t0 + Duration::from_millis(20))
            });
            assert_eq!(got, None);
        }
        assert_eq!(looked, 0, "1 000 refusals, no record looked up");
    }
}
