//! How the simulation names its hosts: host `i` is node `i + 1`.

use exon::proto::NodeId;

/// The node id of host `i`.
pub fn node_id(i: usize) -> NodeId {
    NodeId::from_const(i as u64 + 1)
}
