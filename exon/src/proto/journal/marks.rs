//! Marks: small values the layers above the core keep in the journal under a peer and a
//! lane (the endpoint's ordered flows keep a channel's or a stream's position there), set
//! in the same record as the send or the take they go with, so a crash keeps both or
//! neither.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::proto::NodeId;

/// The most bytes one mark's value may hold (a record naming more is damaged).
pub const MAX_MARK_BYTES: usize = 64;

/// A value for the journal to keep under a peer and a `lane`: given with a send
/// ([`Node::send_marked`](crate::proto::Node::send_marked): the peer is the destination),
/// a take ([`Node::handle_taken_marked`](crate::proto::Node::handle_taken_marked): the
/// delivery's source) or alone ([`Node::set_mark`](crate::proto::Node::set_mark)). The
/// last value written under `(peer, lane)` is what a restarted node recovers
/// ([`Recovered::marks`](crate::proto::journal::Recovered::marks)); an empty value forgets
/// the mark. Lanes mean what their layer says: the core only keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The layer's name for what the value is about (with the peer).
    pub lane: u64,
    /// The value: at most [`MAX_MARK_BYTES`]; empty forgets the mark.
    pub value: Bytes,
}

/// The live marks of a journal, by peer and lane, with the bytes their records take.
#[derive(Debug, Default, Clone)]
pub(crate) struct Marks {
    values: BTreeMap<(NodeId, u64), Bytes>,
}

impl Marks {
    /// Sets `(peer, lane)` to `value` (forgets it if empty). Returns the change in the
    /// encoded length of the live `Mark` records.
    pub(crate) fn set(&mut self, peer: NodeId, lane: u64, value: &Bytes) -> isize {
        let new = if value.is_empty() {
            0
        } else {
            record_len(peer, lane, value) as isize
        };
        let old = if value.is_empty() {
            self.values.remove(&(peer, lane))
        } else {
            self.values.insert((peer, lane), value.clone())
        };
        new - old.map_or(0, |v| record_len(peer, lane, &v) as isize)
    }

    /// The value under `(peer, lane)`.
    pub(crate) fn get(&self, peer: NodeId, lane: u64) -> Option<&Bytes> {
        self.values.get(&(peer, lane))
    }

    /// How many marks are live.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// Every live mark: peer, lane, value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, u64, &Bytes)> + '_ {
        self.values.iter().map(|(&(p, l), v)| (p, l, v))
    }
}

/// The encoded length of the `Mark` record that keeps `value` under `(peer, lane)`.
fn record_len(peer: NodeId, lane: u64, value: &Bytes) -> usize {
    crate::proto::journal::Entry::Mark {
        peer,
        lane,
        value: value.clone(),
    }
    .encoded_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: NodeId = NodeId::from_const(3);

    #[test]
    fn the_last_value_is_kept_and_an_empty_one_forgets() {
        let mut m = Marks::default();
        let a = Bytes::from_static(b"abc");
        let grown = m.set(P, 7, &a);
        assert!(grown > 0);
        assert_eq!(m.set(P, 7, &Bytes::from_static(b"abcd")), 1);
        assert_eq!(m.get(P, 7).map(|v| &v[..]), Some(&b"abcd"[..]));
        assert_eq!(m.len(), 1);
        assert_eq!(m.set(P, 7, &Bytes::new()), -grown - 1);
        assert_eq!(m.get(P, 7), None);
        assert_eq!(
            m.set(P, 8, &Bytes::new()),
            0,
            "forgetting nothing changes nothing"
        );
        assert_eq!(m.len(), 0);
    }
}
