//! How far a durable receiver forgot each sender's taken deliveries: below a sender's
//! confirmed frontier its journal no longer knows what was delivered, so it cannot vouch
//! there that a slot of a lost incarnation was never filled.

use std::collections::BTreeMap;

use crate::proto::NodeId;

/// Most senders whose forgotten frontier is kept. Beyond, the lowest frontier is dropped,
/// and that sender's tokens below it are answered as before the rule (LOST for a covered
/// incarnation): only a sender restored from an older copy of its directory sends such
/// tokens. Bounds what senders can make a receiver keep (12 to 20 bytes of journal each).
pub(crate) const MAX_FORGOTTEN_SENDERS: usize = 4096;

/// Per sender, the highest frontier `below` past which its taken deliveries were forgotten
/// (`Entry::Confirmed`). Ordered by node id, so a compaction writes it in one order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Forgotten {
    below: BTreeMap<NodeId, u64>,
}

/// What [`Forgotten::raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raised {
    /// The sender's frontier is kept: it had `before` (none: new), and to stay within
    /// [`MAX_FORGOTTEN_SENDERS`] the lowest kept frontier, `dropped`, went.
    Kept {
        /// The sender's frontier before, if it had one.
        before: Option<u64>,
        /// The sender and frontier dropped to make room, if any.
        dropped: Option<(NodeId, u64)>,
    },
    /// A new sender whose frontier is lower than every kept one, at the bound: not kept.
    Refused,
}

impl Forgotten {
    /// `from`'s deliveries below `below` were forgotten: its frontier is raised to `below`
    /// (for the caller's byte accounting, what that kept and dropped).
    pub fn raise(&mut self, from: NodeId, below: u64) -> Raised {
        if let Some(b) = self.below.get_mut(&from) {
            let before = *b;
            *b = before.max(below);
            return Raised::Kept {
                before: Some(before),
                dropped: None,
            };
        }
        let mut dropped = None;
        if self.below.len() >= MAX_FORGOTTEN_SENDERS {
            let lowest = self
                .below
                .iter()
                .min_by_key(|&(_, &b)| b)
                .map(|(&p, &b)| (p, b));
            if let Some((p, b)) = lowest {
                if b >= below {
                    return Raised::Refused;
                }
                self.below.remove(&p);
                dropped = Some((p, b));
            }
        }
        self.below.insert(from, below);
        Raised::Kept {
            before: None,
            dropped,
        }
    }

    /// The frontier below which `from`'s deliveries were forgotten (0: none were).
    #[inline]
    pub fn below(&self, from: NodeId) -> u64 {
        self.below.get(&from).copied().unwrap_or(0)
    }

    /// Every sender's forgotten frontier, by node id.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.below.iter().map(|(&p, &b)| (p, b))
    }

    /// How many senders are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.below.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u64) -> NodeId {
        NodeId::new(i).unwrap()
    }

    #[test]
    fn the_highest_frontier_is_kept() {
        let mut f = Forgotten::default();
        assert_eq!(f.below(id(1)), 0);
        let kept = |before, dropped| Raised::Kept { before, dropped };
        assert_eq!(f.raise(id(1), 50), kept(None, None));
        assert_eq!(f.raise(id(1), 40), kept(Some(50), None));
        assert_eq!(f.below(id(1)), 50);
        assert_eq!(f.raise(id(1), 70), kept(Some(50), None));
        assert_eq!(f.below(id(1)), 70);
    }

    #[test]
    fn at_the_bound_the_lowest_frontier_goes() {
        let mut f = Forgotten::default();
        for i in 0..MAX_FORGOTTEN_SENDERS as u64 {
            f.raise(id(i + 1), 1_000 + i);
        }
        assert_eq!(f.len(), MAX_FORGOTTEN_SENDERS);
        // A newcomer below every kept frontier is not kept.
        let newcomer = id(MAX_FORGOTTEN_SENDERS as u64 + 1);
        assert_eq!(f.raise(newcomer, 10), Raised::Refused);
        assert_eq!(f.below(newcomer), 0);
        // One above the lowest takes its place.
        assert_eq!(
            f.raise(newcomer, 5_000),
            Raised::Kept {
                before: None,
                dropped: Some((id(1), 1_000))
            }
        );
        assert_eq!(f.below(id(1)), 0);
        assert_eq!(f.below(newcomer), 5_000);
        assert_eq!(f.len(), MAX_FORGOTTEN_SENDERS);
    }
}
