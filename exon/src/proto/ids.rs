//! Identifiers: node ids (who), message ids (which of our sends).

use std::fmt;

use crate::proto::wire::codec::VARINT_MAX;

/// A node's logical identity, independent of its network address.
///
/// Peers are addressed by node id, so a node keeps its identity across address changes.
/// Ids travel on the wire as variable-length integers and must not exceed `2^62 - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "u64", into = "u64"))]
pub struct NodeId(u64);

impl NodeId {
    /// The largest valid node id.
    pub const MAX: NodeId = NodeId(VARINT_MAX);

    /// Makes a node id, or `None` if `id` exceeds [`NodeId::MAX`].
    pub const fn new(id: u64) -> Option<NodeId> {
        if id <= VARINT_MAX {
            Some(NodeId(id))
        } else {
            None
        }
    }

    /// Makes a node id from a value known to be in range, for constants and tests.
    ///
    /// # Panics
    /// Panics if `id` exceeds [`NodeId::MAX`].
    pub const fn from_const(id: u64) -> NodeId {
        match NodeId::new(id) {
            Some(n) => n,
            None => panic!("node id out of range"),
        }
    }

    /// The id as an integer.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<NodeId> for u64 {
    fn from(id: NodeId) -> u64 {
        id.0
    }
}

impl TryFrom<u64> for NodeId {
    type Error = InvalidNodeId;
    fn try_from(id: u64) -> Result<NodeId, InvalidNodeId> {
        NodeId::new(id).ok_or(InvalidNodeId(id))
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A node id above `2^62 - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("node id {0} exceeds the maximum 2^62 - 1")]
pub struct InvalidNodeId(pub u64);

/// Identifies one message sent by this node, from `send` to its acknowledgement.
///
/// Ids are assigned in increasing order from 0 by each [`Node`](crate::proto::Node) and are local to
/// it: they never travel on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(pub u64);

impl fmt::Display for MsgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

/// A run of consecutive message ids, `first ..= last`, never empty: the messages one
/// [`Event::Acknowledged`](crate::proto::Event::Acknowledged) settles together.
///
/// Ids of messages sent one after the other to one destination are consecutive, and a
/// verdict frame settles its tokens in slot order, so a frame that acknowledges a whole
/// batch yields one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgIds {
    first: u64,
    /// Ids after `first` (the run holds `more + 1` ids, so it is never empty).
    more: u64,
}

impl MsgIds {
    /// The run holding `id` alone.
    pub const fn one(id: MsgId) -> MsgIds {
        MsgIds {
            first: id.0,
            more: 0,
        }
    }

    /// The run `first ..= last`, or `None` if `last` is below `first`.
    pub const fn new(first: MsgId, last: MsgId) -> Option<MsgIds> {
        match last.0.checked_sub(first.0) {
            Some(more) => Some(MsgIds {
                first: first.0,
                more,
            }),
            None => None,
        }
    }

    /// The first (smallest) id.
    pub const fn first(&self) -> MsgId {
        MsgId(self.first)
    }

    /// The last (largest) id.
    pub const fn last(&self) -> MsgId {
        MsgId(self.first + self.more)
    }

    /// How many ids the run holds (at least one; saturating at `u64::MAX`).
    pub const fn count(&self) -> u64 {
        self.more.saturating_add(1)
    }

    /// Whether `id` is in the run.
    pub const fn contains(&self, id: MsgId) -> bool {
        id.0 >= self.first && id.0 - self.first <= self.more
    }

    /// The ids, in increasing order.
    pub fn iter(&self) -> <MsgIds as IntoIterator>::IntoIter {
        self.into_iter()
    }

    /// Adds `id` if it directly follows the run; returns whether it did.
    pub(crate) fn extend(&mut self, id: MsgId) -> bool {
        let next = self
            .more
            .checked_add(1)
            .and_then(|m| self.first.checked_add(m));
        let follows = next == Some(id.0);
        self.more += u64::from(follows);
        follows
    }
}

impl IntoIterator for MsgIds {
    type Item = MsgId;
    type IntoIter = std::iter::Map<std::ops::RangeInclusive<u64>, fn(u64) -> MsgId>;

    fn into_iter(self) -> Self::IntoIter {
        (self.first..=self.first + self.more).map(MsgId as fn(u64) -> MsgId)
    }
}

impl fmt::Display for MsgIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.more == 0 {
            write!(f, "m{}", self.first)
        } else {
            write!(f, "m{}..=m{}", self.first, self.first + self.more)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_grows_only_by_the_id_that_follows_it() {
        let mut r = MsgIds::one(MsgId(5));
        assert!(!r.extend(MsgId(5)), "an id already in it");
        assert!(!r.extend(MsgId(7)), "a gap");
        assert!(!r.extend(MsgId(4)), "before it");
        assert!(r.extend(MsgId(6)));
        assert!(r.extend(MsgId(7)));
        assert_eq!((r.first(), r.last(), r.count()), (MsgId(5), MsgId(7), 3));
        assert!(r.contains(MsgId(5)) && r.contains(MsgId(7)));
        assert!(!r.contains(MsgId(4)) && !r.contains(MsgId(8)));
        assert_eq!(r.iter().collect::<Vec<_>>(), [MsgId(5), MsgId(6), MsgId(7)]);
        assert_eq!(r.to_string(), "m5..=m7");
        assert_eq!(MsgIds::new(MsgId(5), MsgId(7)), Some(r));
        assert_eq!(MsgIds::new(MsgId(5), MsgId(4)), None);
    }

    #[test]
    fn runs_at_the_ends_of_the_id_space_do_not_overflow() {
        let mut top = MsgIds::one(MsgId(u64::MAX));
        assert!(!top.extend(MsgId(0)));
        assert_eq!(top.count(), 1);
        assert_eq!(top.iter().count(), 1);
        let mut all = MsgIds::new(MsgId(0), MsgId(u64::MAX)).unwrap();
        assert_eq!(all.count(), u64::MAX, "saturated");
        assert!(!all.extend(MsgId(0)));
        assert!(all.contains(MsgId(u64::MAX)));
    }
}
