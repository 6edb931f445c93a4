//! The driver's address book: each peer's address, learned only from datagrams the node
//! authenticated and only from fresher ones, validated by a challenge before more than three
//! times what it sent may go to it, bounded and pruned with the node's records.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::proto::crypto::Seq;
use crate::proto::{Accepted, NodeId, PeerMap};

/// One peer's address and how it was learned.
#[derive(Debug, Clone, Copy)]
struct Entry {
    addr: SocketAddr,
    /// Set by the application (`add_peer`): kept until replaced.
    configured: bool,
    /// Highest sequence number seen from the peer (sealed datagrams).
    seq: Option<Seq>,
    /// The peer proved it receives at `addr` (it answered a challenge sent there), or the
    /// application set the address.
    validated: bool,
    /// The challenge sent to `addr`, awaiting its answer.
    challenge: Option<u64>,
    /// Bytes received from `addr` since it was learned (accepted datagrams only).
    rx: u64,
    /// Bytes sent to `addr` since it was learned, while not validated.
    tx: u64,
    /// When a datagram from the peer was last accepted.
    last: Option<Instant>,
}

/// Until an address is validated, at most this many times the bytes received from it are
/// sent to it (QUIC's anti-amplification factor).
pub(crate) const AMPLIFICATION: u64 = 3;

/// Why a datagram cannot be sent to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRoute {
    /// No address known.
    Unknown,
    /// The address is not validated and has had three times what it sent.
    Amplification,
}

/// What a received datagram did to the address book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Learned {
    /// Nothing changed (same address, or a stale sequence number).
    Unchanged,
    /// The peer's address was set or moved.
    Moved,
    /// The book is full of peers with work: the address was not recorded.
    Full,
}

/// Peer addresses, bounded. An entry learned from the network is pruned once the node holds
/// no record for its peer; entries the application set stay.
#[derive(Debug)]
pub(crate) struct PeerBook {
    entries: PeerMap<Entry>,
    cap: usize,
    /// Peers pruned since the last [`take_pruned`](Self::take_pruned).
    pruned: Vec<NodeId>,
}

impl PeerBook {
    /// A book of at most `cap` learned entries (configured ones do not count).
    pub fn new(cap: usize) -> PeerBook {
        PeerBook {
            entries: PeerMap::default(),
            cap: cap.max(1),
            pruned: Vec::new(),
        }
    }

    /// The address of `id`.
    pub fn get(&self, id: NodeId) -> Option<SocketAddr> {
        self.entries.get(&id).map(|e| e.addr)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The application sets `id`'s address (trusted: no validation).
    pub fn configure(&mut self, id: NodeId, addr: SocketAddr) {
        let seq = self.entries.get(&id).and_then(|e| e.seq);
        self.entries.insert(
            id,
            Entry {
                addr,
                configured: true,
                seq,
                validated: true,
                challenge: None,
                rx: 0,
                tx: 0,
                last: None,
            },
        );
    }

    /// Records the challenge sent to `id`'s current address.
    pub fn set_challenge(&mut self, id: NodeId, token: u64) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.challenge = Some(token);
        }
    }

    /// Whether `id`'s address is validated (false if unknown).
    #[cfg(test)]
    pub fn is_validated(&self, id: NodeId) -> bool {
        self.entries.get(&id).is_some_and(|e| e.validated)
    }

    /// The address to send `size` bytes to `id`, if the anti-amplification limit allows it:
    /// an address not yet validated gets at most three times what came from it.
    pub fn send_to(&mut self, id: NodeId, size: usize) -> Result<SocketAddr, NoRoute> {
        let e = self.entries.get_mut(&id).ok_or(NoRoute::Unknown)?;
        if !e.validated {
            let after = e.tx + size as u64;
            if after > AMPLIFICATION * e.rx {
                return Err(NoRoute::Amplification);
            }
            e.tx = after;
        }
        Ok(e.addr)
    }

    /// A datagram from `from` was accepted by the node as `acc`. The address moves only when
    /// the datagram is fresher than any seen from that peer (sealed mode), so a replayed
    /// datagram, from any address, cannot move it. In plaintext mode an address set by the
    /// application never moves, and a learned one follows the latest accepted datagram
    /// (anyone can move it: configure peers' addresses in plaintext mode). `has_record` says whether the node holds
    /// a record for a peer (pruning keeps those).
    pub fn learn(
        &mut self,
        acc: Accepted,
        from: SocketAddr,
        len: usize,
        now: Instant,
        has_record: impl Fn(NodeId) -> bool,
    ) -> Learned {
        let len = len as u64;
        if let Some(e) = self.entries.get_mut(&acc.from) {
            e.last = Some(now);
            match (acc.seq, e.seq) {
                (Some(new), Some(old)) if new <= old => return Learned::Unchanged,
                (Some(new), _) => e.seq = Some(new),
                // Plaintext: nothing shows who sent it, so an address the application
                // set never moves; a learned one follows the latest datagram.
                (None, _) if e.configured && e.addr != from => return Learned::Unchanged,
                (None, _) => {}
            }
            if e.addr == from {
                e.rx = e.rx.saturating_add(len);
                if !e.validated && acc.response.is_some() && acc.response == e.challenge {
                    e.validated = true;
                    e.challenge = None;
                }
                return Learned::Unchanged;
            }
            *e = Entry {
                addr: from,
                configured: false,
                seq: e.seq,
                validated: false,
                challenge: None,
                rx: len,
                tx: 0,
                last: Some(now),
            };
            return Learned::Moved;
        }
        if self.learned() >= self.cap {
            self.prune(now, Duration::ZERO, &has_record);
            if self.learned() >= self.cap {
                return Learned::Full;
            }
        }
        self.entries.insert(
            acc.from,
            Entry {
                addr: from,
                configured: false,
                seq: acc.seq,
                validated: false,
                challenge: None,
                rx: len,
                tx: 0,
                last: Some(now),
            },
        );
        Learned::Moved
    }

    fn learned(&self) -> usize {
        self.entries.values().filter(|e| !e.configured).count()
    }

    /// Forgets learned addresses of peers the node holds no record for and has not heard
    /// from for `idle` (so that a reply a little after the last exchange still finds its
    /// way, while a flood of forged or one-off peers does not accumulate).
    pub fn prune(&mut self, now: Instant, idle: Duration, has_record: impl Fn(NodeId) -> bool) {
        let pruned = &mut self.pruned;
        self.entries.retain(|id, e| {
            let recent = e
                .last
                .is_some_and(|t| now.saturating_duration_since(t) < idle);
            let keep = e.configured || recent || has_record(*id);
            if !keep {
                pruned.push(*id);
            }
            keep
        });
    }

    /// The peers whose addresses were pruned since the last call.
    pub fn take_pruned(&mut self) -> std::vec::Drain<'_, NodeId> {
        self.pruned.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(id: u64, seq: Option<(u64, u32)>) -> Accepted {
        Accepted {
            from: NodeId::from_const(id),
            seq: seq.map(|(epoch, counter)| Seq { epoch, counter }),
            response: None,
        }
    }

    thread_local! {
        static ORIGIN: Instant = Instant::now();
    }

    fn t0() -> Instant {
        ORIGIN.with(|o| *o)
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn only_a_fresher_datagram_moves_a_peer() {
        let mut b = PeerBook::new(8);
        let none = |_| false;
        assert_eq!(
            b.learn(acc(1, Some((5, 10))), addr(1), 100, t0(), none),
            Learned::Moved
        );
        // A replay (same or older sequence) from elsewhere is ignored.
        assert_eq!(
            b.learn(acc(1, Some((5, 10))), addr(2), 100, t0(), none),
            Learned::Unchanged
        );
        assert_eq!(
            b.learn(acc(1, Some((4, 99))), addr(2), 100, t0(), none),
            Learned::Unchanged
        );
        assert_eq!(b.get(NodeId::from_const(1)), Some(addr(1)));
        // A fresher one (a later epoch after a restart, or a later counter) moves it.
        assert_eq!(
            b.learn(acc(1, Some((5, 11))), addr(3), 100, t0(), none),
            Learned::Moved
        );
        assert_eq!(
            b.learn(acc(1, Some((6, 0))), addr(4), 100, t0(), none),
            Learned::Moved
        );
        assert_eq!(b.get(NodeId::from_const(1)), Some(addr(4)));
    }

    #[test]
    fn plaintext_datagrams_never_move_a_configured_address() {
        let mut b = PeerBook::new(8);
        let none = |_| false;
        assert_eq!(
            b.learn(acc(1, None), addr(1), 100, t0(), none),
            Learned::Moved
        );
        assert_eq!(
            b.learn(acc(1, None), addr(2), 100, t0(), none),
            Learned::Moved
        );
        b.configure(NodeId::from_const(2), addr(5));
        assert_eq!(
            b.learn(acc(2, None), addr(6), 100, t0(), none),
            Learned::Unchanged
        );
        assert_eq!(b.get(NodeId::from_const(1)), Some(addr(2)));
        assert_eq!(b.get(NodeId::from_const(2)), Some(addr(5)));
    }

    #[test]
    fn an_address_gets_three_times_what_it_sent_until_it_answers_a_challenge() {
        let mut b = PeerBook::new(8);
        let id = NodeId::from_const(1);
        assert_eq!(
            b.learn(acc(1, Some((1, 0))), addr(1), 100, t0(), |_| false),
            Learned::Moved
        );
        b.set_challenge(id, 77);
        assert_eq!(b.send_to(id, 250), Ok(addr(1)));
        assert_eq!(b.send_to(id, 100), Err(NoRoute::Amplification));
        // More from it, more allowed; a wrong answer validates nothing.
        let mut wrong = acc(1, Some((1, 1)));
        wrong.response = Some(78);
        b.learn(wrong, addr(1), 100, t0(), |_| false);
        assert_eq!(b.send_to(id, 351), Err(NoRoute::Amplification));
        assert_eq!(b.send_to(id, 350), Ok(addr(1)));
        // The answer, from that address: no limit any more.
        let mut right = acc(1, Some((1, 2)));
        right.response = Some(77);
        b.learn(right, addr(1), 10, t0(), |_| false);
        assert!(b.is_validated(id));
        assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
        // A move starts over.
        assert_eq!(
            b.learn(acc(1, Some((2, 0))), addr(2), 100, t0(), |_| false),
            Learned::Moved
        );
        assert!(!b.is_validated(id));
        assert_eq!(b.send_to(id, 301), Err(NoRoute::Amplification));
        // An address the application set is trusted.
        b.configure(NodeId::from_const(5), addr(5));
        assert_eq!(b.send_to(NodeId::from_const(5), 60_000), Ok(addr(5)));
        assert_eq!(b.send_to(NodeId::from_const(6), 1), Err(NoRoute::Unknown));
    }

    #[test]
    fn learned_entries_are_bounded_and_pruned_with_records() {
        let mut b = PeerBook::new(4);
        b.configure(NodeId::from_const(100), addr(100));
        let busy = |id: NodeId| id.get() < 2;
        for i in 0..4 {
            assert_eq!(
                b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), busy),
                Learned::Moved
            );
        }
        // Full: the entries of peers without a record make room.
        assert_eq!(
            b.learn(acc(10, Some((1, 0))), addr(1), 100, t0(), busy),
            Learned::Moved
        );
        assert_eq!(
            b.len(),
            4,
            "two with records, the new one, the configured one"
        );
        for i in 11..20 {
            b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), |_| true);
        }
        assert!(b.len() <= 5);
        assert_eq!(b.get(NodeId::from_const(100)), Some(addr(100)));
        b.take_pruned();
        b.prune(t0(), Duration::ZERO, |_| false);
        assert_eq!(b.len(), 1, "only the configured entry survives");
        assert!(b.take_pruned().count() >= 2, "pruned peers are reported");
    }

    #[test]
    fn a_learned_address_outlives_its_records_for_a_while() {
        let mut b = PeerBook::new(8);
        let id = NodeId::from_const(1);
        b.learn(acc(1, Some((1, 0))), addr(1), 100, t0(), |_| false);
        let idle = Duration::from_secs(60);
        b.prune(t0() + Duration::from_secs(59), idle, |_| false);
        assert_eq!(
            b.get(id),
            Some(addr(1)),
            "a reply shortly after still finds its way"
        );
        b.prune(t0() + Duration::from_secs(61), idle, |_| false);
        assert_eq!(b.get(id), None);
        assert_eq!(b.take_pruned().collect::<Vec<_>>(), [id]);
    }
}
