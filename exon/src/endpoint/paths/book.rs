//! The driver's address book: each peer's address, learned only from datagrams the node
//! authenticated, validated by a challenge before more than three times what it sent may go
//! to it, and moved only to an address that answered a challenge sent there; bounded and
//! pruned with the node's records.

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
    /// When a datagram from `addr` was last accepted (sealed mode); `None` for an address
    /// the application set and not heard from since (quiet).
    heard: Option<Instant>,
    /// The last candidate that failed, and until when it may not be the candidate again.
    failed: Option<(SocketAddr, Instant)>,
    /// Another address the peer's datagrams came from, being challenged (sealed mode): the
    /// peer's datagrams keep going to `addr` until it answers.
    candidate: Option<Candidate>,
    /// The first other address heard from while the candidate held its turn: it takes the
    /// next turn as soon as the candidate has failed.
    waiting: Option<Waiting>,
}

/// An address heard from while another was the candidate, waiting for its turn.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    addr: SocketAddr,
    /// Bytes received from `addr` while it waited (its challenge budget once its turn comes).
    rx: u64,
    /// Some datagram from `addr` was the freshest seen from the peer when it came.
    fresher: bool,
}

/// An address the peer may have moved to, challenged there (and only there).
#[derive(Debug, Clone, Copy)]
struct Candidate {
    addr: SocketAddr,
    /// The tokens of the challenges sent there (the first `tries`).
    tokens: [u64; CANDIDATE_CHALLENGES as usize],
    /// Challenges sent there.
    tries: u32,
    /// A challenge is due and the driver was told to send it.
    queued: bool,
    /// When the next challenge may go; after the last one, when the candidate has failed.
    next: Instant,
    /// Bytes received from `addr` since it became the candidate.
    rx: u64,
    /// Bytes sent to `addr` (the challenges).
    tx: u64,
}

impl Candidate {
    /// Whether another challenge should go now.
    fn due(&self, now: Instant) -> bool {
        !self.queued && self.tries < CANDIDATE_CHALLENGES && now >= self.next
    }

    /// Every challenge went unanswered for its full wait: another address may take its place.
    fn failed(&self, now: Instant) -> bool {
        self.tries >= CANDIDATE_CHALLENGES && now >= self.next
    }

    fn answered(&self, response: Option<u64>) -> bool {
        response.is_some_and(|r| self.tokens[..self.tries as usize].contains(&r))
    }
}

/// Until an address is validated, at most this many times the bytes received from it are
/// sent to it (QUIC's anti-amplification factor).
pub(crate) const AMPLIFICATION: u64 = 3;

/// Challenges sent to one candidate address before it has failed: the first at once, each
/// next one after twice the previous wait.
pub(crate) const CANDIDATE_CHALLENGES: u32 = 3;

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
    /// Nothing changed (same address, a stale sequence number, or a candidate already
    /// being challenged).
    Unchanged,
    /// The peer's address was set to one not yet validated (first contact; in plaintext
    /// mode, any move): challenge the peer through its ordinary datagrams.
    New,
    /// The peer moved to its candidate address, which answered a challenge sent there.
    Moved,
    /// A challenge is due to the peer's candidate address:
    /// [`challenge_sent`](PeerBook::challenge_sent) says where it goes.
    Challenge,
    /// The book is full of peers with work: the address was not recorded.
    Full,
}

/// Peer addresses, bounded. An entry learned from the network is pruned once the node holds
/// no record for its peer; entries the application set stay.
#[derive(Debug)]
pub(crate) struct PeerBook {
    entries: PeerMap<Entry>,
    cap: usize,
    /// Entries not configured: what `cap` bounds (kept as a count, so that learning a new
    /// peer costs no pass over the book).
    learned: usize,
    /// Newcomers a full book refuses without a pruning pass before it tries one again, so
    /// that a stream of new peers at a full book costs a pass per `cap / 16` of them, not
    /// one each.
    skip: usize,
    /// Peers pruned since the last [`take_pruned`](Self::take_pruned).
    pruned: Vec<NodeId>,
    /// The wait after a candidate's first challenge (doubled after each).
    interval: Duration,
    /// A sealed peer moves only to an address that answered a challenge (off only in test
    /// builds, to show the defect: a fresher datagram moves the peer at once).
    moves_need_an_answer: bool,
}

impl PeerBook {
    /// A book of at most `cap` learned entries (configured ones do not count), waiting
    /// `interval`, then doubling waits, for a candidate address to answer its challenges.
    pub fn new(cap: usize, interval: Duration) -> PeerBook {
        PeerBook {
            entries: PeerMap::default(),
            cap: cap.max(1),
            learned: 0,
            skip: 0,
            pruned: Vec::new(),
            interval,
            moves_need_an_answer: true,
        }
    }

    /// Turns off the rule that a sealed peer moves only to an address that answered a
    /// challenge: a fresher datagram from a new address moves it at once.
    #[cfg(any(test, feature = "rule-switches"))]
    pub fn set_moves_need_an_answer(&mut self, on: bool) {
        self.moves_need_an_answer = on;
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
        if self.entries.get(&id).is_some_and(|e| !e.configured) {
            self.learned -= 1;
        }
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
                heard: None,
                failed: None,
                candidate: None,
                waiting: None,
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

    /// The candidate address of `id`, if one is being challenged.
    #[cfg(test)]
    pub fn candidate(&self, id: NodeId) -> Option<SocketAddr> {
        self.entries.get(&id)?.candidate.map(|c| c.addr)
    }

    /// The address to send `size` bytes to `id`, if the anti-amplification limit allows it:
    /// an address not yet validated gets at most three times what came from it.
    pub fn send_to(&mut self, id: NodeId, size: usize) -> Result<SocketAddr, NoRoute> {
        let e = self.entries.get_mut(&id).ok_or(NoRoute::Unknown)?;
        if !e.validated {
            e.tx = within_limit(e.tx, size, e.rx)?;
        }
        Ok(e.addr)
    }

    /// The challenge the driver was told of ([`Learned::Challenge`]) was made, `token` in
    /// `size` bytes, or could not be (`None`): the candidate address to send it to, if the
    /// anti-amplification limit allows it (a candidate gets at most three times what came
    /// from it).
    pub fn challenge_sent(
        &mut self,
        id: NodeId,
        made: Option<(u64, usize)>,
        now: Instant,
    ) -> Result<SocketAddr, NoRoute> {
        let e = self.entries.get_mut(&id).ok_or(NoRoute::Unknown)?;
        let c = e.candidate.as_mut().ok_or(NoRoute::Unknown)?;
        c.queued = false;
        let (token, size) = made.ok_or(NoRoute::Unknown)?;
        if c.tries >= CANDIDATE_CHALLENGES {
            return Err(NoRoute::Unknown);
        }
        c.tx = within_limit(c.tx, size, c.rx)?;
        c.tokens[c.tries as usize] = token;
        c.next = now + self.interval * (1 << c.tries);
        c.tries += 1;
        Ok(c.addr)
    }

    /// A datagram from `from` was accepted by the node as `acc`; `has_record` says whether
    /// the node holds a record for a peer (pruning keeps those).
    ///
    /// Sealed mode: the peer's address moves only to an address that answered a challenge
    /// sent there (`docs/security.md` states the rule). An authenticated datagram from
    /// another address makes that address the candidate when it is fresher than any seen
    /// from the peer, or the current address is not validated (a copy raced ahead of the
    /// peer's first datagram), or the current address has been quiet for a cycle (the
    /// peer's datagrams all come from elsewhere); the peer's datagrams keep going to the
    /// current address meanwhile. One candidate per peer: the first keeps its turn until it
    /// answers or has failed (every challenge unanswered); the first other address heard
    /// from meanwhile takes the next turn once it has failed, and a failed one sits out a
    /// cycle from when its failure is noticed.
    /// A replay, from any address, cannot move the peer.
    ///
    /// Plaintext mode: an address set by the application never moves, and a learned one
    /// follows the latest accepted datagram (anyone can move it: configure peers'
    /// addresses in plaintext mode).
    pub fn learn(
        &mut self,
        acc: Accepted,
        from: SocketAddr,
        len: usize,
        now: Instant,
        has_record: impl Fn(NodeId) -> bool,
    ) -> Learned {
        let len = len as u64;
        let need_answer = self.moves_need_an_answer;
        let cycle = self.interval * ((1 << CANDIDATE_CHALLENGES) - 1);
        if let Some(e) = self.entries.get_mut(&acc.from) {
            e.last = Some(now);
            let fresher = match (acc.seq, e.seq) {
                (Some(new), Some(old)) => new > old,
                (Some(_), None) => true,
                // Plaintext: nothing shows who sent it, so an address the application
                // set never moves; a learned one follows the latest datagram.
                (None, _) if e.configured && e.addr != from => return Learned::Unchanged,
                (None, _) => e.addr != from,
            };
            if fresher && acc.seq.is_some() {
                e.seq = acc.seq;
            }
            if e.addr == from {
                e.heard = Some(now);
                e.rx = e.rx.saturating_add(len);
                if !e.validated && acc.response.is_some() && acc.response == e.challenge {
                    e.validated = true;
                    e.challenge = None;
                }
                return Learned::Unchanged;
            }
            if acc.seq.is_some() && need_answer {
                return e.consider(from, len, acc.response, fresher, now, cycle);
            }
            if !fresher {
                return Learned::Unchanged;
            }
            if e.configured {
                self.learned += 1;
            }
            *e = Entry::learned(from, e.seq, len, now);
            return Learned::New;
        }
        if self.learned >= self.cap {
            if self.skip > 0 {
                self.skip -= 1;
                return Learned::Full;
            }
            let before = self.learned;
            self.prune(now, Duration::ZERO, &has_record);
            if before - self.learned < self.cap / 16 {
                // The pass freed little: the next newcomers wait for another pass.
                self.skip = self.cap / 16;
            }
            if self.learned >= self.cap {
                return Learned::Full;
            }
        }
        self.entries
            .insert(acc.from, Entry::learned(from, acc.seq, len, now));
        self.learned += 1;
        Learned::New
    }

    /// Entries not configured (what `cap` bounds).
    #[cfg(test)]
    fn learned(&self) -> usize {
        debug_assert_eq!(
            self.learned,
            self.entries.values().filter(|e| !e.configured).count()
        );
        self.learned
    }

    /// Forgets learned addresses of peers the node holds no record for and has not heard
    /// from for `idle` (so that a reply a little after the last exchange still finds its
    /// way, while a flood of forged or one-off peers does not accumulate).
    pub fn prune(&mut self, now: Instant, idle: Duration, has_record: impl Fn(NodeId) -> bool) {
        let (pruned, learned) = (&mut self.pruned, &mut self.learned);
        self.entries.retain(|id, e| {
            let recent = e
                .last
                .is_some_and(|t| now.saturating_duration_since(t) < idle);
            let keep = e.configured || recent || has_record(*id);
            if !keep {
                pruned.push(*id);
                *learned -= 1;
            }
            keep
        });
    }

    /// The peers whose addresses were pruned since the last call.
    pub fn take_pruned(&mut self) -> std::vec::Drain<'_, NodeId> {
        self.pruned.drain(..)
    }
}

impl Entry {
    /// An address learned from a datagram of `len` bytes, not yet validated.
    fn learned(addr: SocketAddr, seq: Option<Seq>, len: u64, now: Instant) -> Entry {
        Entry {
            addr,
            configured: false,
            seq,
            validated: false,
            challenge: None,
            rx: len,
            tx: 0,
            last: Some(now),
            heard: Some(now),
            failed: None,
            candidate: None,
            waiting: None,
        }
    }

    /// An authenticated datagram of `len` bytes, answering `response` if any, came from
    /// `from`, not the current address (sealed mode): the candidate's answer moves the peer
    /// there; another address may become the candidate. `cycle` is how long a candidate has
    /// to answer all its challenges.
    fn consider(
        &mut self,
        from: SocketAddr,
        len: u64,
        response: Option<u64>,
        fresher: bool,
        now: Instant,
        cycle: Duration,
    ) -> Learned {
        if let Some(c) = &mut self.candidate {
            if c.addr == from {
                c.rx = c.rx.saturating_add(len);
                if c.answered(response) {
                    // It proved the peer receives there: the peer moved.
                    let rx = c.rx;
                    *self = Entry {
                        validated: true,
                        rx,
                        ..Entry::learned(from, self.seq, 0, now)
                    };
                    return Learned::Moved;
                }
                if !c.failed(now) {
                    if !c.due(now) {
                        return Learned::Unchanged;
                    }
                    c.queued = true;
                    return Learned::Challenge;
                }
            } else if !c.failed(now) {
                // The first candidate keeps its turn; the first other address waits for
                // the next one.
                self.wait(from, len, fresher, now);
                return Learned::Unchanged;
            }
            // Failed (noticed now): it sits out a cycle from now, and the address that
            // waited takes the turn at once, whichever address this datagram came from (a
            // racing copy from the failed address must not take the turn back).
            self.failed = Some((c.addr, now + cycle));
            self.candidate = None;
            if let Some(w) = self.waiting.take() {
                if self.may_challenge(w.addr, w.fresher, now, cycle) {
                    if w.addr != from {
                        self.wait(from, len, fresher, now);
                    }
                    let rx = if w.addr == from {
                        w.rx.saturating_add(len)
                    } else {
                        w.rx
                    };
                    return self.challenge(w.addr, rx, now);
                }
            }
        }
        if !self.may_challenge(from, fresher, now, cycle) {
            return Learned::Unchanged;
        }
        self.challenge(from, len, now)
    }

    /// Whether `addr` may be the candidate: not sitting out a failure, and either fresher
    /// than anything seen, or the current address is unproven or has gone quiet (the peer's
    /// datagrams all come from elsewhere); otherwise it is a replay's source while the peer
    /// still sends from its proven address.
    fn may_challenge(
        &self,
        addr: SocketAddr,
        fresher: bool,
        now: Instant,
        cycle: Duration,
    ) -> bool {
        if self.sitting_out(addr, now) {
            return false;
        }
        let quiet = self
            .heard
            .is_none_or(|t| now.saturating_duration_since(t) >= cycle);
        fresher || !self.validated || quiet
    }

    /// Whether `addr` is the last failed candidate, still sitting out its cycle.
    fn sitting_out(&self, addr: SocketAddr, now: Instant) -> bool {
        self.failed
            .is_some_and(|(failed, until)| failed == addr && now < until)
    }

    /// Notes `from` as the address waiting for the next turn, if none waits yet (and it is
    /// not sitting out a failure).
    fn wait(&mut self, from: SocketAddr, len: u64, fresher: bool, now: Instant) {
        match &mut self.waiting {
            Some(w) if w.addr == from => {
                w.rx = w.rx.saturating_add(len);
                w.fresher |= fresher;
            }
            Some(_) => {}
            None => {
                if !self.sitting_out(from, now) {
                    self.waiting = Some(Waiting {
                        addr: from,
                        rx: len,
                        fresher,
                    });
                }
            }
        }
    }

    /// `addr`, from which `rx` bytes came, becomes the candidate: a challenge is due there.
    fn challenge(&mut self, addr: SocketAddr, rx: u64, now: Instant) -> Learned {
        if self.waiting.is_some_and(|w| w.addr == addr) {
            self.waiting = None;
        }
        self.candidate = Some(Candidate {
            addr,
            tokens: [0; CANDIDATE_CHALLENGES as usize],
            tries: 0,
            queued: true,
            next: now,
            rx,
            tx: 0,
        });
        Learned::Challenge
    }
}

/// `tx + size`, if that stays within three times `rx`.
fn within_limit(tx: u64, size: usize, rx: u64) -> Result<u64, NoRoute> {
    let after = tx + size as u64;
    if after > AMPLIFICATION * rx {
        return Err(NoRoute::Amplification);
    }
    Ok(after)
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

    const WAIT: Duration = Duration::from_millis(100);

    fn answer(id: u64, seq: (u64, u32), token: u64) -> Accepted {
        let mut a = acc(id, Some(seq));
        a.response = Some(token);
        a
    }

    /// A book that knows peer 1 at `addr(1)`, validated (it answered its challenge).
    fn proven() -> PeerBook {
        let mut b = PeerBook::new(8, WAIT);
        let none = |_| false;
        assert_eq!(
            b.learn(acc(1, Some((5, 10))), addr(1), 1000, t0(), none),
            Learned::New
        );
        b.set_challenge(NodeId::from_const(1), 7);
        b.learn(answer(1, (5, 11), 7), addr(1), 1000, t0(), none);
        assert!(b.is_validated(NodeId::from_const(1)));
        b
    }

    #[test]
    fn a_fresher_datagram_from_a_new_address_makes_it_a_candidate_not_the_address() {
        let mut b = proven();
        let id = NodeId::from_const(1);
        let none = |_| false;
        // A replay (same or older sequence) from elsewhere is ignored.
        for seq in [(5, 11), (4, 99)] {
            assert_eq!(
                b.learn(acc(1, Some(seq)), addr(2), 1000, t0(), none),
                Learned::Unchanged
            );
        }
        assert_eq!(b.candidate(id), None);
        // A fresher one (a copy raced ahead of the original) makes its address the
        // candidate: challenged there, while everything else still goes to the proven one.
        assert_eq!(
            b.learn(acc(1, Some((5, 12))), addr(2), 1000, t0(), none),
            Learned::Challenge
        );
        assert_eq!(b.candidate(id), Some(addr(2)));
        assert_eq!(b.challenge_sent(id, Some((42, 60)), t0()), Ok(addr(2)));
        assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
        // The original, arriving later from the proven address, changes nothing.
        assert_eq!(
            b.learn(acc(1, Some((5, 12))), addr(1), 1000, t0(), none),
            Learned::Unchanged
        );
        // One candidate per peer: a third address waits for the first to fail.
        assert_eq!(
            b.learn(acc(1, Some((5, 13))), addr(3), 1000, t0(), none),
            Learned::Unchanged
        );
        assert_eq!(b.candidate(id), Some(addr(2)));
        // The token, but from the proven address: proves nothing about the candidate.
        assert_eq!(
            b.learn(answer(1, (5, 14), 42), addr(1), 100, t0(), none),
            Learned::Unchanged
        );
        assert_eq!(b.get(id), Some(addr(1)));
        // The answer, from the candidate: the peer moved there (a NAT rebinding).
        assert_eq!(
            b.learn(answer(1, (5, 15), 42), addr(2), 100, t0(), none),
            Learned::Moved
        );
        assert_eq!(b.get(id), Some(addr(2)));
        assert!(b.is_validated(id));
        assert_eq!(b.candidate(id), None);
        assert_eq!(b.send_to(id, 60_000), Ok(addr(2)));
    }

    #[test]
    fn an_unanswered_candidate_fails_and_the_proven_address_stays() {
        let mut b = proven();
        let id = NodeId::from_const(1);
        let none = |_| false;
        let mut seq = 20;
        let mut copy = |b: &mut PeerBook, from: u16, at: Duration| {
            seq += 1;
            b.learn(acc(1, Some((5, seq))), addr(from), 1000, t0() + at, none)
        };
        let ms = Duration::from_millis;
        // Challenges at once, then after 100 ms, then after 200 ms more: each time more
        // copies come from the candidate.
        assert_eq!(copy(&mut b, 2, ms(0)), Learned::Challenge);
        assert_eq!(copy(&mut b, 2, ms(1)), Learned::Unchanged, "queued once");
        assert_eq!(b.challenge_sent(id, Some((1, 60)), t0()), Ok(addr(2)));
        assert_eq!(copy(&mut b, 2, ms(99)), Learned::Unchanged);
        assert_eq!(copy(&mut b, 2, ms(100)), Learned::Challenge);
        assert_eq!(
            b.challenge_sent(id, Some((2, 60)), t0() + ms(100)),
            Ok(addr(2))
        );
        assert_eq!(copy(&mut b, 2, ms(299)), Learned::Unchanged);
        assert_eq!(copy(&mut b, 2, ms(300)), Learned::Challenge);
        assert_eq!(
            b.challenge_sent(id, Some((3, 60)), t0() + ms(300)),
            Ok(addr(2))
        );
        // No fourth challenge; and until it has failed, no other address takes its turn.
        assert_eq!(copy(&mut b, 2, ms(650)), Learned::Unchanged);
        assert_eq!(copy(&mut b, 3, ms(650)), Learned::Unchanged);
        assert_eq!(b.get(id), Some(addr(1)));
        assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
        // Failed (400 ms after the last challenge): the next fresher datagram, from any
        // address, may be the next candidate; the proven address never left.
        assert_eq!(copy(&mut b, 3, ms(700)), Learned::Challenge);
        assert_eq!(b.candidate(id), Some(addr(3)));
        assert_eq!(b.get(id), Some(addr(1)));
        // A late answer to the first candidate proves nothing now.
        assert_eq!(
            b.learn(answer(1, (5, 99), 3), addr(2), 100, t0() + ms(701), none),
            Learned::Unchanged
        );
        assert_eq!(b.get(id), Some(addr(1)));
    }

    /// The next datagram (numbered `*seq + 1`) from a peer that moved to addr(2), `t` ms
    /// after [`t0`]: an observer's copy from addr(9) first, the original 30 ms later.
    fn raced(b: &mut PeerBook, seq: &mut u32, t: u64) -> (Learned, Learned) {
        *seq += 1;
        let at = |d| t0() + Duration::from_millis(d);
        let none = |_| false;
        let copy = b.learn(acc(1, Some((5, *seq))), addr(9), 1000, at(t), none);
        let original = b.learn(acc(1, Some((5, *seq))), addr(2), 1000, at(t + 30), none);
        (copy, original)
    }

    #[test]
    fn a_peer_that_moved_while_an_observer_races_it_is_followed() {
        let mut b = proven();
        let id = NodeId::from_const(1);
        let none = |_| false;
        let ms = Duration::from_millis;
        let at = |d| t0() + ms(d);
        // The peer moved to addr(2) (its old address is silent); an observer at addr(9)
        // races a copy of each of its datagrams: the copies are the fresher ones.
        let mut seq = 20;
        let mut both = |b: &mut PeerBook, t: u64| raced(b, &mut seq, t);
        assert_eq!(both(&mut b, 0), (Learned::Challenge, Learned::Unchanged));
        for (k, t) in [(0, 0), (1, 100), (2, 300)] {
            if k > 0 {
                assert_eq!(both(&mut b, t), (Learned::Challenge, Learned::Unchanged));
            }
            assert_eq!(b.challenge_sent(id, Some((k, 60)), at(t)), Ok(addr(9)));
        }
        // The observer's candidate fails (at 700 ms) and sits out a cycle; the originals'
        // address waited, and is challenged as soon as the failure is noticed (by the
        // observer's next copy) although they are no fresher, because the proven address
        // has been quiet for as long.
        assert_eq!(both(&mut b, 700), (Learned::Challenge, Learned::Unchanged));
        assert_eq!(b.candidate(id), Some(addr(2)));
        assert_eq!(b.challenge_sent(id, Some((8, 60)), at(730)), Ok(addr(2)));
        assert_eq!(
            b.learn(answer(1, (5, 99), 8), addr(2), 100, at(760), none),
            Learned::Moved
        );
        assert_eq!(b.get(id), Some(addr(2)));
        // While the proven address is heard from, an older datagram from elsewhere is a
        // replay and challenges nothing.
        assert_eq!(
            b.learn(acc(1, Some((5, 50))), addr(3), 1000, at(800), none),
            Learned::Unchanged
        );
    }

    /// What CI caught: the peer moved (its datagrams come from addr(2)) while an observer
    /// at addr(9) races copies ahead of them, and the peer sends sparsely (backing off). Its
    /// datagram came just before the observer's candidate failed; its next burst came after
    /// the failure and a cycle more, led by the observer's copy. The copy took the turn back
    /// every time and addr(2) was never challenged; the address that waited now takes the
    /// turn, whichever datagram shows the failure.
    #[test]
    fn the_address_that_waited_takes_the_turn_of_a_failed_candidate() {
        let mut b = proven();
        let id = NodeId::from_const(1);
        let none = |_| false;
        let at = |d| t0() + Duration::from_millis(d);
        let mut seq = 20;
        let mut both = |b: &mut PeerBook, t: u64| raced(b, &mut seq, t);
        assert_eq!(both(&mut b, 0), (Learned::Challenge, Learned::Unchanged));
        assert_eq!(b.challenge_sent(id, Some((1, 60)), at(0)), Ok(addr(9)));
        assert_eq!(both(&mut b, 100), (Learned::Challenge, Learned::Unchanged));
        assert_eq!(b.challenge_sent(id, Some((2, 60)), at(100)), Ok(addr(9)));
        assert_eq!(both(&mut b, 300), (Learned::Challenge, Learned::Unchanged));
        assert_eq!(b.challenge_sent(id, Some((3, 60)), at(300)), Ok(addr(9)));
        // The observer's candidate fails at 700 ms: the original at 699 ms came just before.
        assert_eq!(
            b.learn(acc(1, Some((5, 40))), addr(2), 1000, at(699), none),
            Learned::Unchanged
        );
        // The next burst, long after (the failure plus a cycle), led by the observer's copy.
        assert_eq!(both(&mut b, 1500), (Learned::Challenge, Learned::Unchanged));
        assert_eq!(b.candidate(id), Some(addr(2)));
        assert_eq!(b.challenge_sent(id, Some((4, 60)), at(1500)), Ok(addr(2)));
        // The answer: the observer's copy first (proves nothing), then the original.
        assert_eq!(
            b.learn(answer(1, (5, 99), 4), addr(9), 100, at(1560), none),
            Learned::Unchanged
        );
        assert_eq!(
            b.learn(answer(1, (5, 99), 4), addr(2), 100, at(1590), none),
            Learned::Moved
        );
        assert_eq!(b.get(id), Some(addr(2)));
    }

    #[test]
    fn a_copy_raced_ahead_of_the_first_datagram_does_not_keep_the_peer() {
        let mut b = PeerBook::new(8, WAIT);
        let id = NodeId::from_const(1);
        let none = |_| false;
        // The observer's copy comes first: its address is learned, not validated.
        assert_eq!(
            b.learn(acc(1, Some((1, 0))), addr(9), 1000, t0(), none),
            Learned::New
        );
        b.set_challenge(id, 5);
        // The original, from the peer's address, is no fresher, but the address the peer
        // has is not proven: the original's address is challenged.
        assert_eq!(
            b.learn(acc(1, Some((1, 0))), addr(1), 1000, t0(), none),
            Learned::Challenge
        );
        assert_eq!(b.challenge_sent(id, Some((6, 60)), t0()), Ok(addr(1)));
        // The answer: a copy from the observer first (proves nothing), then the original.
        assert_eq!(
            b.learn(answer(1, (1, 1), 6), addr(9), 100, t0(), none),
            Learned::Unchanged
        );
        assert!(!b.is_validated(id));
        assert_eq!(
            b.learn(answer(1, (1, 1), 6), addr(1), 100, t0(), none),
            Learned::Moved
        );
        assert_eq!(b.get(id), Some(addr(1)));
        assert!(b.is_validated(id));
    }

    #[test]
    fn a_candidate_gets_three_times_what_it_sent() {
        let mut b = proven();
        let id = NodeId::from_const(1);
        assert_eq!(
            b.learn(acc(1, Some((6, 0))), addr(2), 20, t0(), |_| false),
            Learned::Challenge
        );
        assert_eq!(
            b.challenge_sent(id, Some((1, 61)), t0()),
            Err(NoRoute::Amplification)
        );
        assert_eq!(b.challenge_sent(id, None, t0()), Err(NoRoute::Unknown));
        // More from it, and the challenge fits.
        assert_eq!(
            b.learn(acc(1, Some((6, 1))), addr(2), 1, t0(), |_| false),
            Learned::Challenge
        );
        assert_eq!(b.challenge_sent(id, Some((1, 63)), t0()), Ok(addr(2)));
    }

    #[test]
    fn with_the_rule_off_a_fresher_datagram_moves_the_peer_at_once() {
        let mut b = proven();
        b.set_moves_need_an_answer(false);
        let id = NodeId::from_const(1);
        assert_eq!(
            b.learn(acc(1, Some((6, 0))), addr(2), 1000, t0(), |_| false),
            Learned::New,
            "the defect the rule prevents"
        );
        assert_eq!(b.get(id), Some(addr(2)));
        // The original, later, is older: it never moves it back.
        assert_eq!(
            b.learn(acc(1, Some((6, 0))), addr(1), 1000, t0(), |_| false),
            Learned::Unchanged
        );
        assert_eq!(b.get(id), Some(addr(2)));
    }

    #[test]
    fn plaintext_datagrams_never_move_a_configured_address() {
        let mut b = PeerBook::new(8, WAIT);
        let none = |_| false;
        assert_eq!(
            b.learn(acc(1, None), addr(1), 100, t0(), none),
            Learned::New
        );
        assert_eq!(
            b.learn(acc(1, None), addr(2), 100, t0(), none),
            Learned::New
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
        let mut b = PeerBook::new(8, WAIT);
        let id = NodeId::from_const(1);
        assert_eq!(
            b.learn(acc(1, Some((1, 0))), addr(1), 100, t0(), |_| false),
            Learned::New
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
        // An address the application set is trusted.
        b.configure(NodeId::from_const(5), addr(5));
        assert_eq!(b.send_to(NodeId::from_const(5), 60_000), Ok(addr(5)));
        assert_eq!(b.send_to(NodeId::from_const(6), 1), Err(NoRoute::Unknown));
    }

    #[test]
    fn learned_entries_are_bounded_and_pruned_with_records() {
        let mut b = PeerBook::new(4, WAIT);
        b.configure(NodeId::from_const(100), addr(100));
        let busy = |id: NodeId| id.get() < 2;
        for i in 0..4 {
            assert_eq!(
                b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), busy),
                Learned::New
            );
        }
        // Full: the entries of peers without a record make room.
        assert_eq!(
            b.learn(acc(10, Some((1, 0))), addr(1), 100, t0(), busy),
            Learned::New
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
        let mut b = PeerBook::new(8, WAIT);
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

    /// Learning a new peer costs no pass over the book: the count of learned entries is kept
    /// through learning, configuring and pruning, and a full book of peers with records
    /// tries a pruning pass only once per `cap / 16` newcomers it refuses.
    #[test]
    fn a_full_book_costs_a_pass_per_sixteenth_of_its_size_not_per_newcomer() {
        use std::cell::Cell;
        let cap = 1024;
        let mut b = PeerBook::new(cap, WAIT);
        b.configure(NodeId::from_const(1_000_000), addr(7));
        for i in 0..cap as u64 {
            assert_eq!(
                b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), |_| true),
                Learned::New
            );
            assert_eq!(b.learned(), i as usize + 1);
        }
        // Configuring a learned peer takes it out of the count; learning it again does not
        // count it twice.
        b.configure(NodeId::from_const(0), addr(2));
        assert_eq!(b.learned(), cap - 1);
        // Every peer has a record: each pass frees nothing. Count the passes (one call of
        // `has_record` per entry each).
        let calls = Cell::new(0u64);
        let busy = |_: NodeId| {
            calls.set(calls.get() + 1);
            true
        };
        let mut refused = 0;
        for i in 0..10_000u64 {
            if b.learn(acc(5000 + i, Some((1, 0))), addr(1), 100, t0(), busy) == Learned::Full {
                refused += 1;
            }
        }
        assert_eq!(b.learned(), cap);
        assert_eq!(refused, 10_000 - 1, "one newcomer took the free entry");
        let passes = calls.get() / (cap as u64 + 1);
        assert!(passes <= 10_000 / (cap as u64 / 16) + 2, "{passes} passes");
        // Once the records go, the next pass makes room at once.
        b.skip = 0;
        assert_eq!(
            b.learn(acc(99_999, Some((1, 0))), addr(1), 100, t0(), |_| false),
            Learned::New
        );
        assert_eq!(b.learned(), 1);
    }
}
