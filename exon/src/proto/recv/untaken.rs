//! Deliveries handed to the embedding and not yet taken: how many and how many bytes, in all
//! and per source, against the node's limits and each source's share of them.

use crate::proto::{Limits, NodeId, PeerMap};

/// The untaken deliveries' count and bytes, in all and per source (a source appears only
/// while it has some: at most `max_untaken` entries).
#[derive(Debug, Default)]
pub(crate) struct Untaken {
    count: usize,
    bytes: usize,
    by_source: PeerMap<(usize, usize)>,
    /// Deliveries from one source handed over since its entry in `by_source` was last
    /// written, with their bytes: the deliveries of one datagram come from one source, so
    /// they cost one map write rather than one each. Part of that source's count: folded
    /// in before anything else writes `by_source`, and added when it is read.
    pending: Option<(NodeId, usize, usize)>,
}

impl Untaken {
    /// A delivery from `src` charged `bytes` is handed over.
    #[inline]
    pub fn add(&mut self, src: NodeId, bytes: usize) {
        self.count += 1;
        self.bytes += bytes;
        match &mut self.pending {
            Some((s, n, b)) if *s == src => {
                *n += 1;
                *b += bytes;
            }
            _ => {
                self.fold_pending();
                self.pending = Some((src, 1, bytes));
            }
        }
    }

    /// Writes the pending deliveries into their source's entry.
    fn fold_pending(&mut self) {
        if let Some((src, n, b)) = self.pending.take() {
            let e = self.by_source.entry(src).or_default();
            e.0 += n;
            e.1 += b;
        }
    }

    /// A delivery from `src` charged `bytes` was taken (or dropped with its node's care).
    pub fn remove(&mut self, src: NodeId, bytes: usize) {
        self.remove_many(src, 1, bytes);
    }

    /// `n` deliveries from `src` charged `bytes` in all were taken.
    pub fn remove_many(&mut self, src: NodeId, n: usize, bytes: usize) {
        self.fold_pending();
        self.count = self.count.saturating_sub(n);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(e) = self.by_source.get_mut(&src) {
            e.0 = e.0.saturating_sub(n);
            e.1 = e.1.saturating_sub(bytes);
            if e.0 == 0 {
                self.by_source.remove(&src);
            }
        }
    }

    /// `src`'s untaken deliveries and their bytes.
    fn of(&self, src: NodeId) -> (usize, usize) {
        let (mut n, mut b) = self.by_source.get(&src).copied().unwrap_or_default();
        if let Some((_, pn, pb)) = self.pending.filter(|p| p.0 == src) {
            n += pn;
            b += pb;
        }
        (n, b)
    }

    /// Deliveries untaken over all sources.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether the node may hand over one more delivery: below `max_untaken` and
    /// `max_untaken_bytes` in all.
    pub fn has_room(&self, limits: &Limits) -> bool {
        self.count < limits.max_untaken && self.bytes < limits.max_untaken_bytes
    }

    /// Whether one more delivery from `src` may be handed over: room in all, and `src`
    /// below its share (`max_untaken_per_source`, `max_untaken_bytes_per_source`), so that
    /// one source holding deliveries its application cannot take yet (a hostile ordered
    /// flow's messages far beyond its window) leaves room to the others.
    pub fn has_room_for(&self, src: NodeId, limits: &Limits, share: bool) -> bool {
        if !self.has_room(limits) {
            return false;
        }
        // Below a share in all, no source can have reached its own: no lookup per token.
        let below = self.count < limits.max_untaken_per_source
            && self.bytes < limits.max_untaken_bytes_per_source;
        if !share || below {
            return true;
        }
        let (n, b) = self.of(src);
        n < limits.max_untaken_per_source && b < limits.max_untaken_bytes_per_source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_takes_at_most_its_share_and_gives_it_back() {
        let limits = Limits {
            max_untaken: 4,
            max_untaken_per_source: 2,
            ..Limits::default()
        };
        let (a, b) = (NodeId::from_const(1), NodeId::from_const(2));
        let mut u = Untaken::default();
        u.add(a, 10);
        u.add(a, 10);
        assert!(!u.has_room_for(a, &limits, true), "a's share is full");
        assert!(
            u.has_room_for(a, &limits, false),
            "without shares, the node has room"
        );
        assert!(u.has_room_for(b, &limits, true));
        u.add(b, 10);
        u.add(b, 10);
        assert!(!u.has_room(&limits));
        u.remove(a, 10);
        assert!(u.has_room_for(a, &limits, true));
        assert_eq!(u.count(), 3);
        u.remove(a, 10);
        assert!(
            !u.by_source.contains_key(&a),
            "no entry left for a source with none"
        );
    }

    /// The deliveries of one source handed over in a row are counted once in its entry,
    /// and its share sees them before that.
    #[test]
    fn pending_deliveries_count_in_their_sources_share() {
        let limits = Limits {
            max_untaken: 100,
            max_untaken_per_source: 3,
            ..Limits::default()
        };
        let (a, b) = (NodeId::from_const(1), NodeId::from_const(2));
        let mut u = Untaken::default();
        for _ in 0..3 {
            assert!(u.has_room_for(a, &limits, true));
            u.add(a, 10);
        }
        assert!(u.by_source.is_empty(), "pending, not written yet");
        assert!(
            !u.has_room_for(a, &limits, true),
            "a's share counts what is pending"
        );
        assert!(u.has_room_for(b, &limits, true));
        u.add(b, 5);
        assert_eq!(u.by_source.get(&a), Some(&(3, 30)), "folded in by b's");
        assert!(!u.has_room_for(a, &limits, true));
        u.remove_many(a, 3, 30);
        assert!(u.has_room_for(a, &limits, true));
        assert_eq!(u.of(b), (1, 5));
        u.remove(b, 5);
        assert!(u.by_source.is_empty() && u.pending.is_none() && u.count() == 0);
    }
}
