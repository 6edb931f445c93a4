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
}

impl Untaken {
    /// A delivery from `src` charged `bytes` is handed over.
    pub fn add(&mut self, src: NodeId, bytes: usize) {
        self.count += 1;
        self.bytes += bytes;
        let e = self.by_source.entry(src).or_default();
        e.0 += 1;
        e.1 += bytes;
    }

    /// A delivery from `src` charged `bytes` was taken (or dropped with its node's care).
    pub fn remove(&mut self, src: NodeId, bytes: usize) {
        self.count = self.count.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(e) = self.by_source.get_mut(&src) {
            e.0 = e.0.saturating_sub(1);
            e.1 = e.1.saturating_sub(bytes);
            if e.0 == 0 {
                self.by_source.remove(&src);
            }
        }
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
        let (n, b) = self.by_source.get(&src).copied().unwrap_or_default();
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
}
