//! A map keyed by a peer and a key of its own, grouped by peer, so that what one peer has
//! is found without looking at the others' (a driver shard's streams: a peer that shows
//! another run has its streams asked about, and a hostile one must not make every stream
//! of every peer be looked at for each of its messages).

use std::collections::HashMap;
use std::hash::Hash;

use crate::proto::NodeId;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Values by `(peer, key)`, grouped by peer.
#[derive(Debug)]
pub(crate) struct ByPeer<K, V> {
    peers: FastMap<NodeId, FastMap<K, V>>,
    /// Values in all.
    len: usize,
}

impl<K, V> Default for ByPeer<K, V> {
    fn default() -> Self {
        ByPeer {
            peers: FastMap::default(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq, V> ByPeer<K, V> {
    /// Values in all.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Inserts `v` under `(peer, key)`, returning the value it replaced.
    pub(crate) fn insert(&mut self, peer: NodeId, key: K, v: V) -> Option<V> {
        let old = self.peers.entry(peer).or_default().insert(key, v);
        self.len += usize::from(old.is_none());
        old
    }

    pub(crate) fn get(&self, peer: NodeId, key: &K) -> Option<&V> {
        self.peers.get(&peer)?.get(key)
    }

    pub(crate) fn get_mut(&mut self, peer: NodeId, key: &K) -> Option<&mut V> {
        self.peers.get_mut(&peer)?.get_mut(key)
    }

    /// Removes and returns the value under `(peer, key)`; a peer left with none goes.
    pub(crate) fn remove(&mut self, peer: NodeId, key: &K) -> Option<V> {
        let of_peer = self.peers.get_mut(&peer)?;
        let v = of_peer.remove(key)?;
        self.len -= 1;
        if of_peer.is_empty() {
            self.peers.remove(&peer);
        }
        Some(v)
    }

    /// The peers that have values, each once.
    pub(crate) fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers.keys().copied()
    }

    /// `peer`'s values, to change.
    pub(crate) fn of_peer_mut(&mut self, peer: NodeId) -> impl Iterator<Item = (&K, &mut V)> {
        self.peers
            .get_mut(&peer)
            .into_iter()
            .flat_map(|m| m.iter_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId::from_const(1);
    const B: NodeId = NodeId::from_const(2);

    /// Values are found by peer and key, counted once each, and a peer's are only its own;
    /// a peer whose last value went leaves nothing behind.
    #[test]
    fn values_are_grouped_by_peer_and_counted() {
        let mut m = ByPeer::default();
        assert_eq!(m.insert(A, 1, "a1"), None);
        assert_eq!(m.insert(A, 2, "a2"), None);
        assert_eq!(m.insert(B, 1, "b1"), None);
        assert_eq!(m.insert(A, 1, "a1'"), Some("a1"));
        assert_eq!(m.len(), 3);
        assert_eq!(m.get(B, &1), Some(&"b1"));
        assert!(m.get(B, &2).is_none());
        let mut of_a: Vec<_> = m.of_peer_mut(A).map(|(k, v)| (*k, *v)).collect();
        of_a.sort();
        assert_eq!(of_a, [(1, "a1'"), (2, "a2")]);
        assert_eq!(m.remove(B, &1), Some("b1"));
        assert_eq!(m.remove(B, &1), None);
        assert_eq!(m.len(), 2);
        assert!(!m.peers.contains_key(&B), "an empty peer goes");
        assert_eq!(m.of_peer_mut(B).count(), 0);
    }
}
