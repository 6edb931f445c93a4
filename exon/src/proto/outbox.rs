//! Replies waiting to be written (ACKs, SLOTS, waivers) and the round-robin queue of peers
//! that have something to send.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;

use super::frame::Verdict;
use super::ranges::RangeSet;
use super::{NodeId, PeerMap};

/// Most verdict ranges (ACK, DOUBT, RETRY) kept pending for one peer; beyond, they are
/// dropped (the sender retransmits, so this costs liveness only) and counted.
pub(crate) const MAX_PENDING_ACK_RANGES: usize = 4096;

/// Frames owed to one peer that belong to no sender record.
#[derive(Debug, Default)]
pub(crate) struct PeerOut {
    /// Slots to answer (ACK, DOUBT or RETRY), per verdict and incarnation.
    pub acks: Vec<(Verdict, u64, RangeSet)>,
    /// SLOTS(s, r, n) answering a request (the newest request wins).
    pub grant: Option<(u64, u64, u64)>,
    /// SLOTS(s, r, 0): a probe.
    pub probe: Option<(u64, u64)>,
    /// REQSLOTS(s, 0, l): a waiver with no record behind it.
    pub waive: Option<u64>,
}

impl PeerOut {
    /// True when nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty() && self.grant.is_none() && self.probe.is_none() && self.waive.is_none()
    }

    fn ack_ranges(&self) -> usize {
        self.acks.iter().map(|(_, _, s)| s.range_count()).sum()
    }
}

/// The peers with pending output, in the order they will be served.
///
/// A peer is in `ready` exactly when it has an entry in `peers`; `poll_transmit` takes the
/// front peer, writes one datagram, and puts the peer at the back if it has more to send,
/// so one busy peer cannot starve the others.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub peers: PeerMap<PeerOut>,
    pub ready: VecDeque<NodeId>,
}

impl Outbox {
    /// The pending output of `peer`, queueing the peer if it had none. Returns `None` when a
    /// new entry would exceed `cap` peers.
    pub fn wake(&mut self, peer: NodeId, cap: usize) -> Option<&mut PeerOut> {
        let len = self.peers.len();
        match self.peers.entry(peer) {
            Entry::Occupied(e) => Some(e.into_mut()),
            Entry::Vacant(e) => {
                if len >= cap {
                    return None;
                }
                self.ready.push_back(peer);
                Some(e.insert(PeerOut::default()))
            }
        }
    }

    /// Queues verdict `v` on slot `s` of incarnation `r`. Returns false if dropped.
    pub fn reply(&mut self, peer: NodeId, v: Verdict, r: u64, s: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        if out.ack_ranges() >= MAX_PENDING_ACK_RANGES {
            return false;
        }
        match out.acks.iter_mut().find(|(w, rck, _)| *w == v && *rck == r) {
            Some((_, _, set)) => set.insert(s..s + 1),
            None => {
                let mut set = RangeSet::new();
                set.insert(s..s + 1);
                out.acks.push((v, r, set));
            }
        }
        true
    }

    /// Queues SLOTS(s, r, n) answering a request; keeps the newest of several.
    pub fn grant(&mut self, peer: NodeId, s: u64, r: u64, n: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        if out
            .grant
            .is_none_or(|(s0, r0, n0)| (r, s, n) > (r0, s0, n0))
        {
            out.grant = Some((s, r, n));
        }
        true
    }

    /// Queues the probe SLOTS(s, r, 0).
    pub fn probe(&mut self, peer: NodeId, s: u64, r: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.probe = Some((s, r));
        true
    }

    /// Queues the waiver REQSLOTS(s, 0, s): "I hold nothing below s".
    pub fn waive(&mut self, peer: NodeId, s: u64, cap: usize) -> bool {
        let Some(out) = self.wake(peer, cap) else {
            return false;
        };
        out.waive = Some(out.waive.map_or(s, |w| w.max(s)));
        true
    }
}
