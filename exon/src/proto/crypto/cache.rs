//! The bounded cache of per-peer keys, and the budget of key agreements unknown senders may
//! cost.

use std::collections::VecDeque;
use std::time::Instant;

use super::keys::PublicKey;
use super::seal::PairKeys;
use crate::proto::{NodeId, PeerMap};

/// Per-peer keys of the peers heard from or sent to lately: soft state, bounded, filled for
/// incoming traffic only after a datagram authenticated with them. Eviction gives a second
/// chance to entries used since the last pass and never removes a pinned one (a peer the
/// node holds a record for), so peers with work keep their keys.
#[derive(Debug)]
pub(crate) struct KeyCache {
    entries: PeerMap<Entry>,
    order: VecDeque<NodeId>,
    cap: usize,
}

#[derive(Debug)]
struct Entry {
    key: PublicKey,
    keys: PairKeys,
    used: bool,
}

impl KeyCache {
    /// A cache of at most `cap` peers.
    pub fn new(cap: usize) -> KeyCache {
        KeyCache {
            entries: PeerMap::default(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// The keys for `id`, if cached; marks them used.
    pub fn get(&mut self, id: NodeId) -> Option<&PairKeys> {
        let e = self.entries.get_mut(&id)?;
        e.used = true;
        Some(&e.keys)
    }

    /// The public key cached for `id`.
    pub fn public_key(&self, id: NodeId) -> Option<&PublicKey> {
        self.entries.get(&id).map(|e| &e.key)
    }

    /// Forgets `id` (a keyring change: rare, so the linear scan of the order is fine).
    pub fn remove(&mut self, id: NodeId) {
        if self.entries.remove(&id).is_some() {
            self.order.retain(|p| *p != id);
        }
    }

    /// Peers cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Caches `keys` for `id` (holding `key`), evicting an unpinned entry if full. Returns
    /// false if every entry is pinned (nothing cached).
    pub fn insert(
        &mut self,
        id: NodeId,
        key: PublicKey,
        keys: PairKeys,
        pinned: impl Fn(NodeId) -> bool,
    ) -> bool {
        if let Some(e) = self.entries.get_mut(&id) {
            *e = Entry {
                key,
                keys,
                used: true,
            };
            return true;
        }
        let mut budget = 2 * self.order.len() + 2;
        while self.entries.len() >= self.cap {
            if budget == 0 {
                return false;
            }
            budget -= 1;
            let Some(old) = self.order.pop_front() else {
                return false;
            };
            let Some(e) = self.entries.get_mut(&old) else {
                continue; // removed earlier
            };
            if e.used || pinned(old) {
                e.used = false;
                self.order.push_back(old);
            } else {
                self.entries.remove(&old);
            }
        }
        self.entries.insert(
            id,
            Entry {
                key,
                keys,
                used: true,
            },
        );
        self.order.push_back(id);
        true
    }
}

/// A token bucket for key agreements done on behalf of senders whose keys are not cached:
/// bounds the public-key work forged datagrams can cost.
#[derive(Debug)]
pub(crate) struct DhBudget {
    per_sec: u64,
    burst: u64,
    /// Tokens, in billionths.
    nanotokens: u128,
    last: Option<Instant>,
}

const NANO: u128 = 1_000_000_000;

impl DhBudget {
    /// `per_sec` agreements a second on average, at most `burst` at once.
    pub fn new(per_sec: u64, burst: u64) -> DhBudget {
        DhBudget {
            per_sec,
            burst,
            nanotokens: u128::from(burst) * NANO,
            last: None,
        }
    }

    /// Takes one agreement from the budget at `now`; false when spent.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let ns = now.saturating_duration_since(last).as_nanos();
            let refill = ns.saturating_mul(u128::from(self.per_sec));
            self.nanotokens = self
                .nanotokens
                .saturating_add(refill)
                .min(u128::from(self.burst) * NANO);
        }
        self.last = Some(now);
        if self.nanotokens >= NANO {
            self.nanotokens -= NANO;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::keys::SecretKey;
    use super::*;

    fn keys(i: u8) -> (PublicKey, PairKeys) {
        let own = SecretKey::from_bytes([0xee; 32]);
        let peer = SecretKey::from_bytes([i; 32]).public_key();
        let k = PairKeys::derive(
            &own,
            (NodeId::from_const(1000), &own.public_key()),
            (NodeId::from_const(u64::from(i)), &peer),
        )
        .unwrap();
        (peer, k)
    }

    #[test]
    fn the_cache_stays_bounded_and_keeps_pinned_peers() {
        let mut c = KeyCache::new(4);
        for i in 1..=40u8 {
            let (pk, k) = keys(i);
            assert!(c.insert(NodeId::from_const(u64::from(i)), pk, k, |id| id.get() == 1));
            assert!(c.len() <= 4);
        }
        assert!(
            c.get(NodeId::from_const(1)).is_some(),
            "pinned peer evicted"
        );
        assert!(c.get(NodeId::from_const(40)).is_some(), "newest missing");
        assert!(c.get(NodeId::from_const(2)).is_none());
    }

    #[test]
    fn a_cache_of_pinned_peers_refuses_more() {
        let mut c = KeyCache::new(2);
        for i in 1..=2u8 {
            let (pk, k) = keys(i);
            assert!(c.insert(NodeId::from_const(u64::from(i)), pk, k, |_| true));
        }
        let (pk, k) = keys(3);
        assert!(!c.insert(NodeId::from_const(3), pk, k, |_| true));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_budget_refills_at_its_rate_and_caps_at_its_burst() {
        let t = crate::test_time::origin();
        let mut b = DhBudget::new(10, 3);
        assert!((0..3).all(|_| b.try_take(t)));
        assert!(!b.try_take(t));
        assert!(!b.try_take(t + Duration::from_millis(50)));
        assert!(b.try_take(t + Duration::from_millis(101)));
        // A long pause refills only up to the burst.
        let later = t + Duration::from_secs(3600);
        assert_eq!((0..10).filter(|_| b.try_take(later)).count(), 3);
    }
}
