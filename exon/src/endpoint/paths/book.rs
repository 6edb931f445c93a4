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
    /// Repeats of that challenge in datagrams of its own (first contact): how many went,
    /// and when the next may go.
    again: Option<(u32, Instant)>,
    /// Bytes received from `addr` since it was learned (accepted datagrams only).
    rx: u64,
    /// Bytes sent to `addr` since it was learned, while not validated.
    tx: u64,
    /// When a datagram from the peer was last accepted.
    last: Option<Instant>,
    /// When a datagram from the peer holding more than a PING (a keepalive) was last
    /// accepted.
    active: Option<Instant>,
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
    /// When a datagram from `addr` last came (or it became the candidate).
    heard: Instant,
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

    /// Nothing came from it for a whole `cycle` while the peer's datagrams came from
    /// elsewhere: the peer is not there (a NAT that rebinds again before its challenges
    /// are answered leaves a candidate that never sends another datagram, so never draws
    /// its next challenge, so would never fail by its challenges alone).
    fn silent(&self, now: Instant, cycle: Duration) -> bool {
        now.saturating_duration_since(self.heard) >= cycle
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

/// Room an address not yet validated keeps in its anti-amplification limit for the repeats
/// of its challenge (four datagrams holding a CHALLENGE alone), once the limit is four times
/// that: its other datagrams may not take it, so that a challenge whose datagram was lost
/// can go again after the peer went quiet, when everything else it is owed waits for that
/// limit.
pub(crate) const RECHALLENGE_ROOM: u64 = 4 * 64;

/// The longest wait between two repeats of a first contact's challenge.
const MAX_RECHALLENGE_WAIT: Duration = Duration::from_secs(8);

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
    /// Addresses ever pruned: a look-up found true holds while this stays the same.
    forgotten: u64,
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
            forgotten: 0,
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
                again: None,
                rx: 0,
                tx: 0,
                last: None,
                active: None,
                heard: None,
                failed: None,
                candidate: None,
                waiting: None,
            },
        );
    }

    /// Records the challenge sent to `id`'s current address (first contact), at `now`: it
    /// goes again on its own ([`rechallenge_due`](Self::rechallenge_due)) until answered.
    pub fn set_challenge(&mut self, id: NodeId, token: u64, now: Instant) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.challenge = Some(token);
            e.again = Some((0, now + self.interval));
        }
    }

    /// The challenge of `id`'s current address if it is unanswered and its repeat is due
    /// at `now` (the datagram that carried it may have been lost): the next repeat is then
    /// due after twice the last wait, at most [`MAX_RECHALLENGE_WAIT`].
    pub fn rechallenge_due(&mut self, id: NodeId, now: Instant) -> Option<u64> {
        let e = self.entries.get_mut(&id)?;
        if e.validated {
            return None;
        }
        let token = e.challenge?;
        let (tries, at) = e.again?;
        if now < at {
            return None;
        }
        let wait = self
            .interval
            .saturating_mul(1 << tries.min(8))
            .min(MAX_RECHALLENGE_WAIT);
        e.again = Some((tries + 1, now + wait));
        Some(token)
    }

    /// A repeat of `id`'s challenge was made, `size` bytes: the address it goes to if the
    /// anti-amplification limit allows it (it may take the room the other datagrams keep,
    /// [`RECHALLENGE_ROOM`]).
    pub fn rechallenge_sent(&mut self, id: NodeId, size: usize) -> Result<SocketAddr, NoRoute> {
        let e = self.entries.get_mut(&id).ok_or(NoRoute::Unknown)?;
        if !e.validated {
            e.tx = within_limit(e.tx, size, e.rx)?;
        }
        Ok(e.addr)
    }

    /// Whether `id`'s address is validated (false if unknown).
    #[cfg(test)]
    pub fn is_validated(&self, id: NodeId) -> bool {
        self.entries.get(&id).is_some_and(|e| e.validated)
    }

    /// When a datagram from `id` was last accepted, and when one holding more than a PING
    /// (a keepalive) was, if the book knows it.
    pub fn last_heard(&self, id: NodeId) -> (Option<Instant>, Option<Instant>) {
        self.entries
            .get(&id)
            .map_or((None, None), |e| (e.last, e.active))
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
            // While its challenge is unanswered, the room for its repeats stays free, once
            // the limit holds four times that room (the first datagrams of a first contact,
            // the original challenge among them, are not held back by it).
            let room = if e.challenge.is_some() && AMPLIFICATION * e.rx >= 4 * RECHALLENGE_ROOM {
                RECHALLENGE_ROOM
            } else {
                0
            };
            e.tx = within_limit(e.tx + room, size, e.rx)? - room;
        }
        Ok(e.addr)
    }

    /// `id`'s address if it is validated: every datagram may go there, with no limit to
    /// count (a run of datagrams looks it up once).
    #[inline]
    pub fn validated(&self, id: NodeId) -> Option<SocketAddr> {
        self.entries
            .get(&id)
            .filter(|e| e.validated)
            .map(|e| e.addr)
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
            if !acc.keepalive {
                e.active = Some(now);
            }
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
                    e.again = None;
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
        let before = pruned.len();
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
        self.forgotten += (self.pruned.len() - before) as u64;
    }

    /// How many addresses were ever pruned: an address found is there while this holds.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
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
            again: None,
            rx: len,
            tx: 0,
            last: Some(now),
            active: Some(now),
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
                c.heard = now;
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
            } else if !c.failed(now) && !c.silent(now, cycle) {
                // The candidate keeps its turn; another address waits for the next one.
                self.wait(from, len, fresher, now);
                return Learned::Unchanged;
            }
            // Failed or silent (noticed now): it sits out a cycle from now, and the address
            // that waited takes the turn at once, whichever address this datagram came
            // from (a racing copy from the failed address must not take the turn back).
            let failed = c.addr;
            self.failed = Some((failed, now + cycle));
            self.candidate = None;
            if failed != from {
                // This datagram's address joins the wait, or takes it if fresher.
                self.wait(from, len, fresher, now);
            }
            if let Some(w) = self.waiting.take() {
                if self.may_challenge(w.addr, w.fresher, now, cycle) {
                    if w.addr != from {
                        self.wait(from, len, fresher, now);
                    }
                    return self.challenge(w.addr, w.rx, now);
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

    /// Notes `from` as the address waiting for the next turn, if none waits yet or this
    /// datagram is fresher than any seen from the peer (and `from` is not sitting out a
    /// failure). Only a fresher datagram replaces the waiting address: a replay cannot,
    /// and a peer behind a NAT that rebinds again and again is waited for at its latest
    /// address, not at the first of many it has left.
    fn wait(&mut self, from: SocketAddr, len: u64, fresher: bool, now: Instant) {
        match &mut self.waiting {
            Some(w) if w.addr == from => {
                w.rx = w.rx.saturating_add(len);
                w.fresher |= fresher;
            }
            Some(_) if !fresher => {}
            _ => {
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
            heard: now,
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
mod tests;
