//! What the host says of its route to each peer: the largest datagram the route carries, the
//! size path MTU discovery tries first (told by the driver, kept beyond sender records).

use crate::proto::{NodeId, PeerMap};

/// Most peers with a route size kept; the driver tells only the peers in its address book
/// (bounded by its own limits), so this cap is a backstop: beyond it a new peer's size is
/// not kept, and its discovery searches by the steps.
pub(crate) const MAX_ROUTES: usize = 1 << 16;

/// The route size of each peer: UDP payload bytes.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    sizes: PeerMap<usize>,
}

impl Routes {
    /// The route to `peer` carries `payload` bytes (`None`: the host does not say). Returns
    /// whether it is kept (false only for a new peer with the table full).
    pub fn set(&mut self, peer: NodeId, payload: Option<usize>) -> bool {
        match payload {
            None => {
                self.sizes.remove(&peer);
                true
            }
            Some(p) => {
                if self.sizes.len() >= MAX_ROUTES && !self.sizes.contains_key(&peer) {
                    return false;
                }
                self.sizes.insert(peer, p);
                true
            }
        }
    }

    /// The route size of `peer`, if the host said it.
    pub fn get(&self, peer: NodeId) -> Option<usize> {
        self.sizes.get(&peer).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_kept_forgotten_and_bounded() {
        let mut r = Routes::default();
        let p = NodeId::from_const(7);
        assert_eq!(r.get(p), None);
        assert!(r.set(p, Some(1472)));
        assert_eq!(r.get(p), Some(1472));
        assert!(r.set(p, None));
        assert_eq!(r.get(p), None);
        for i in 0..MAX_ROUTES as u64 {
            assert!(r.set(NodeId::from_const(1000 + i), Some(1472)));
        }
        assert!(!r.set(p, Some(9000)), "full: a new peer is not kept");
        assert_eq!(r.get(p), None);
        assert!(
            r.set(NodeId::from_const(1000), Some(9000)),
            "a known one is updated"
        );
        assert_eq!(r.get(NodeId::from_const(1000)), Some(9000));
    }
}
