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
