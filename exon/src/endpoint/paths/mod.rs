//! What the driver knows of where its peers are: the address book, the path challenges owed
//! to candidate addresses, the answers to peers' challenges sent again, the keepalives to
//! peers awaited, and the cookie exchange under load; each received datagram goes to the
//! node through here.
//!
//! The room of paths, the peer book and cookies: [`Paths`] here, the peer book in [`book`],
//! the answers in [`answers`], the keepalives in [`keepalive`], the cookie exchange in
//! [`cookies`].

pub(crate) mod answers;
pub(crate) mod book;
pub(crate) mod cookies;
pub(crate) mod keepalive;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::endpoint::api::config::EndpointConfig;
use crate::endpoint::api::shared::Shared;
use crate::endpoint::api::stats::EndpointStats;
use crate::endpoint::driver::trace::peer_span;
use crate::endpoint::io::family::canonical;
use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::paths::answers::Answers;
use crate::endpoint::paths::book::{Learned, NoRoute, PeerBook};
use crate::endpoint::paths::cookies::CookieStats;
use crate::endpoint::paths::cookies::Cookies;
use crate::endpoint::paths::keepalive::Keepalives;
use crate::proto::frame::CookieReply;
use crate::proto::{Node, NodeId};

/// How often the address book is swept for peers gone idle.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// How long a candidate address has to answer its first challenge (then twice as long,
/// and so on): a few round trips at the configured initial estimate.
fn candidate_wait(cfg: &EndpointConfig) -> Duration {
    (cfg.protocol.timers.initial_rtt * 3).max(Duration::from_millis(10))
}

/// The peers' addresses and what proves them.
pub(crate) struct Paths {
    peers: PeerBook,
    /// Peers whose candidate address is owed a challenge (each at most once: the book
    /// says when).
    challenges_due: Vec<NodeId>,
    /// Peers whose current address is owed a repeat of its unanswered challenge (first
    /// contact), with the challenge's token.
    rechallenges_due: Vec<(NodeId, u64)>,
    /// Answers to peers' challenges, to send again (`answers.rs`).
    answers: Answers,
    /// Answers due now, taken from `answers` (peer and token).
    answers_due: Vec<(NodeId, u64)>,
    /// Whether answers go again (always, but in test builds with the rule switched off).
    answers_repeated: bool,
    /// Keepalives to the peers awaited: calls wait for their replies, or streams for
    /// their bytes (`keepalive.rs`).
    keepalives: Keepalives,
    /// The peers the application asked keepalives to whatever waits for them (sorted).
    kept: Vec<NodeId>,
    /// The peers awaited, as last looked up (reused).
    awaited: Vec<NodeId>,
    /// Peers owed a keepalive now.
    keepalives_due: Vec<NodeId>,
    /// Whether keepalives go (always, but in test builds with the rule switched off).
    keepalives_on: bool,
    /// When the address book is next pruned of peers gone idle.
    next_prune: Instant,
    /// How long a learned address outlives its peer's records.
    learned_ttl: Duration,
    /// The cookie exchange under load (`cookies.rs`).
    cookies: Cookies,
    /// Peers whose address was set, changed or forgotten since the node was last told its
    /// route (`tell_routes`).
    routes_due: Vec<NodeId>,
}

/// Most peers waiting to have their route told at once (a backstop: the list is drained
/// every turn of the driver).
const MAX_ROUTES_DUE: usize = 4096;

/// `peer`'s route is to be told to the node (its address was set, changed or forgotten).
fn route_due(due: &mut Vec<NodeId>, peer: NodeId) {
    if due.len() < MAX_ROUTES_DUE {
        due.push(peer);
    }
}

impl Paths {
    pub(crate) fn new(cfg: &EndpointConfig, t: Instant) -> Paths {
        #[allow(unused_mut)]
        let mut peers = PeerBook::new(
            cfg.protocol.limits.max_sender_records
                + cfg.protocol.limits.max_receiver_records
                + 1024,
            candidate_wait(cfg),
        );
        #[cfg(feature = "rule-switches")]
        peers.set_moves_need_an_answer(cfg.moves_need_an_answer);
        #[cfg(feature = "rule-switches")]
        let answers_repeated = cfg.answers_repeated;
        #[cfg(not(feature = "rule-switches"))]
        let answers_repeated = true;
        #[cfg(feature = "rule-switches")]
        let keepalives_on = cfg.keepalives;
        #[cfg(not(feature = "rule-switches"))]
        let keepalives_on = true;
        Paths {
            peers,
            challenges_due: Vec::new(),
            rechallenges_due: Vec::new(),
            answers: Answers::new(candidate_wait(cfg)),
            answers_due: Vec::new(),
            answers_repeated,
            keepalives: Keepalives::default(),
            kept: Vec::new(),
            keepalives_on,
            awaited: Vec::new(),
            keepalives_due: Vec::new(),
            next_prune: t,
            learned_ttl: cfg.learned_address_ttl,
            cookies: Cookies::new(),
            routes_due: Vec::new(),
        }
    }

    /// Tells the node the host's route size to each peer whose address was set, changed or
    /// forgotten since the last call, as `socket` finds it (path MTU discovery's first size
    /// and ceiling; `None` for a peer with no address).
    pub(crate) fn tell_routes<S: DatagramSocket>(&mut self, socket: &S, node: &mut Node) {
        for peer in std::mem::take(&mut self.routes_due) {
            let route = self.peers.get(peer).and_then(|a| socket.route_payload(a));
            node.set_route(peer, route);
        }
    }

    /// Sets (or replaces) `peer`'s address, as the application said (in canonical form,
    /// as received addresses are).
    pub(crate) fn configure(&mut self, peer: NodeId, addr: SocketAddr) {
        let addr = canonical(addr);
        let moved = self.peers.get(peer) != Some(addr);
        self.peers.configure(peer, addr);
        if moved {
            // The same address set again (an application that sets it before each send)
            // costs no new lookup.
            route_due(&mut self.routes_due, peer);
        }
    }

    /// The address `peer`'s datagrams go to, if any.
    pub(crate) fn address(&self, peer: NodeId) -> Option<SocketAddr> {
        self.peers.get(peer)
    }

    /// How many addresses were ever forgotten (pruned): a peer found with an address still
    /// has one while this stays the same (an address is only ever replaced otherwise).
    pub(crate) fn forgotten(&self) -> u64 {
        self.peers.forgotten()
    }

    /// Peer addresses held.
    pub(crate) fn len(&self) -> usize {
        self.peers.len()
    }

    /// The counters of the cookie exchange.
    pub(crate) fn cookie_stats(&self) -> CookieStats {
        self.cookies.stats()
    }

    /// Where a datagram of `size` bytes to `peer` goes, within the anti-amplification limit.
    pub(crate) fn send_to(&mut self, peer: NodeId, size: usize) -> Result<SocketAddr, NoRoute> {
        self.peers.send_to(peer, size)
    }

    /// `peer`'s address if validated (see [`PeerBook::validated`]): the datagrams of a run
    /// to it need no [`send_to`](Self::send_to) each.
    pub(crate) fn validated(&self, peer: NodeId) -> Option<SocketAddr> {
        self.peers.validated(peer)
    }

    /// Datagrams go to `peer`, whose address is not validated, at `t`: if its challenge is
    /// unanswered and due again, a repeat is owed (the outbound side's `send_rechallenges`
    /// sends it in a datagram of its own). So a first contact whose challenge was lost is challenged
    /// again while this endpoint has something for the peer, and within the room its
    /// anti-amplification limit keeps for it even when the peer has gone quiet.
    pub(crate) fn sending_unvalidated(&mut self, peer: NodeId, t: Instant) {
        if self.rechallenges_due.len() >= MAX_ROUTES_DUE {
            return;
        }
        if let Some(token) = self.peers.rechallenge_due(peer, t) {
            self.rechallenges_due.push((peer, token));
        }
    }

    /// Takes the repeats of challenges owed (see
    /// [`sending_unvalidated`](Self::sending_unvalidated)).
    pub(crate) fn take_rechallenges(&mut self) -> Vec<(NodeId, u64)> {
        std::mem::take(&mut self.rechallenges_due)
    }

    /// Gives back the list [`take_rechallenges`](Self::take_rechallenges) took, emptied.
    pub(crate) fn return_rechallenges(&mut self, mut due: Vec<(NodeId, u64)>) {
        due.clear();
        self.rechallenges_due = due;
    }

    /// A repeat of `peer`'s challenge was made, `size` bytes: where it goes, within the
    /// anti-amplification limit.
    pub(crate) fn rechallenge_sent(
        &mut self,
        peer: NodeId,
        size: usize,
    ) -> Result<SocketAddr, NoRoute> {
        self.peers.rechallenge_sent(peer, size)
    }

    /// When an answer to a peer's challenge is next due again, if any is owed.
    pub(crate) fn next_answer_at(&self) -> Option<Instant> {
        self.answers.next_at()
    }

    /// Takes the answers to peers' challenges due again at `t` (peer and token; see
    /// `answers.rs`).
    pub(crate) fn take_answers(&mut self, t: Instant) -> Vec<(NodeId, u64)> {
        let mut due = std::mem::take(&mut self.answers_due);
        self.answers.take_due(t, &mut due);
        due
    }

    /// Gives back the list [`take_answers`](Self::take_answers) took, emptied.
    pub(crate) fn return_answers(&mut self, mut due: Vec<(NodeId, u64)>) {
        due.clear();
        self.answers_due = due;
    }

    /// When the awaited peers are next looked at for keepalives, if any may be awaited.
    pub(crate) fn next_keepalive_at(&self) -> Option<Instant> {
        self.keepalives.next_at()
    }

    /// Starts looking at the awaited peers once `opened` says that some may be (a call of
    /// this shard was opened, or a stream is read), or peers are kept reachable; asked only
    /// while none was when last looked, so cheap otherwise.
    #[inline]
    pub(crate) fn watch(&mut self, t: Instant, opened: impl FnOnce() -> bool) {
        if self.keepalives_on && self.keepalives.next_at().is_none() {
            self.keepalives.arm(t, !self.kept.is_empty() || opened());
        }
    }

    /// Keepalives go to `peer` while it is silent whatever waits for it (`on`), or only
    /// while something does (`Handle::keep_reachable`).
    pub(crate) fn keep_reachable(&mut self, peer: NodeId, on: bool) {
        match (self.kept.binary_search(&peer), on) {
            (Err(i), true) => self.kept.insert(i, peer),
            (Ok(i), false) => {
                self.kept.remove(i);
            }
            _ => {}
        }
    }

    /// Takes the peers owed a keepalive at `t` (see `keepalive.rs`): of the peers
    /// `awaited` appends (those open calls wait for a reply from, those whose streams this
    /// endpoint reads) and those kept reachable, the ones silent for a while.
    pub(crate) fn take_keepalives(
        &mut self,
        t: Instant,
        awaited: impl FnOnce(&mut Vec<NodeId>),
    ) -> Vec<NodeId> {
        let mut due = std::mem::take(&mut self.keepalives_due);
        if self.keepalives.next_at().is_some_and(|at| at <= t) {
            self.awaited.clear();
            awaited(&mut self.awaited);
            self.awaited.extend_from_slice(&self.kept);
            self.awaited.sort_unstable();
            self.awaited.dedup();
            let peers = &self.peers;
            self.keepalives
                .due(t, &self.awaited, |p| peers.last_heard(p), &mut due);
        }
        due
    }

    /// Gives back the list [`take_keepalives`](Self::take_keepalives) took, emptied.
    pub(crate) fn return_keepalives(&mut self, mut due: Vec<NodeId>) {
        due.clear();
        self.keepalives_due = due;
    }

    /// Takes the peers whose candidate address is owed a challenge.
    pub(crate) fn take_challenges(&mut self) -> Vec<NodeId> {
        std::mem::take(&mut self.challenges_due)
    }

    /// Gives back the list taken by [`take_challenges`](Self::take_challenges), emptied
    /// (its memory is reused).
    pub(crate) fn return_challenges(&mut self, mut due: Vec<NodeId>) {
        due.clear();
        self.challenges_due = due;
    }

    /// A challenge for `peer`'s candidate address was made (`token` and size), or could
    /// not be: the book says where it goes.
    pub(crate) fn challenge_sent(
        &mut self,
        peer: NodeId,
        made: Option<(u64, usize)>,
        t: Instant,
    ) -> Result<SocketAddr, NoRoute> {
        self.peers.challenge_sent(peer, made, t)
    }

    /// Takes the COOKIE_REPLYs queued since the last call.
    pub(crate) fn take_cookie_replies(&mut self) -> Vec<(SocketAddr, CookieReply)> {
        self.cookies.take_queued()
    }

    /// Forgets the addresses of peers gone idle, once per sweep interval.
    pub(crate) fn prune(&mut self, t: Instant, node: &Node, shared: &Shared) {
        if t < self.next_prune {
            return;
        }
        // Learned addresses go some time after the records of their peers.
        self.peers
            .prune(t, self.learned_ttl, |p| node.has_record(p));
        for p in self.peers.take_pruned() {
            shared.forget(p);
            route_due(&mut self.routes_due, p);
        }
        self.next_prune = t + PRUNE_EVERY;
    }

    /// Hands one datagram from `from` to the node, and learns the address of its source
    /// from it when the node took it.
    pub(crate) fn on_datagram(
        &mut self,
        t: Instant,
        node: &mut Node,
        stats: &mut EndpointStats,
        shared: &Shared,
        data: BytesMut,
        from: SocketAddr,
    ) {
        let cookies = node.is_sealed() && node.rules().address_cookies;
        if cookies && CookieReply::is_one(&data) {
            return self.on_cookie_reply(node, &data, from);
        }
        // Only a datagram the node took whole (and, sealed, authenticated) vouches for its
        // source's address; a sealed peer moves only to an address that answered a
        // challenge sent there.
        let len = data.len();
        let acc = if cookies {
            let seen = self.cookies.look(t, &data, from);
            let busy = node.stats().rejects.key_budget;
            let acc = node.handle_datagram_vouched(t, data, seen.vouch);
            if node.stats().rejects.key_budget > busy {
                // Refused for want of key-agreement budget: under load.
                self.cookies.refused(t, node.id(), &seen, from);
            }
            acc
        } else {
            node.handle_datagram_buf(t, data)
        };
        let Some(acc) = acc else {
            return;
        };
        let learned = self.peers.learn(acc, from, len, t, |p| node.has_record(p));
        if let Some(token) = acc.challenge {
            // Answered in the node's next datagram to the peer; sent again in case that
            // one is lost (to the address the peer's datagrams go to, if it has one).
            if self.answers_repeated && self.peers.get(acc.from).is_some() {
                self.answers.answered(acc.from, token, t);
            }
        }
        match learned {
            Learned::New => {
                peer_span(acc.from)
                    .in_scope(|| tracing::debug!(addr = %from, "peer address learned"));
                stats.address_updates += 1;
                shared.know(acc.from);
                // Path validation: until the peer answers from there, the address gets at
                // most three times what came from it.
                let token = node.challenge(acc.from);
                self.peers.set_challenge(acc.from, token, t);
                // Only an authenticated peer's address costs a route lookup: a plaintext
                // node's sources can be forged at will.
                if node.is_sealed() {
                    route_due(&mut self.routes_due, acc.from);
                }
            }
            Learned::Moved => {
                peer_span(acc.from).in_scope(|| {
                    tracing::debug!(addr = %from, "peer moved: the new address answered");
                });
                stats.address_updates += 1;
                if node.is_sealed() {
                    route_due(&mut self.routes_due, acc.from);
                }
            }
            // Sent by the next flush, to that address alone.
            Learned::Challenge => self.challenges_due.push(acc.from),
            Learned::Full => stats.address_book_full += 1,
            Learned::Unchanged => {}
        }
        for p in self.peers.take_pruned() {
            shared.forget(p);
            route_due(&mut self.routes_due, p);
        }
    }

    /// A COOKIE_REPLY from `from`: taken when it is for this node, from a peer it sends to
    /// at that very address.
    fn on_cookie_reply(&mut self, node: &mut Node, data: &[u8], from: SocketAddr) {
        let taken = CookieReply::decode(data).is_ok_and(|r| {
            r.dst == node.id()
                && self.peers.get(r.src) == Some(from)
                && node.handle_cookie(r.src, r.cookie)
        });
        self.cookies.count_reply(taken);
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::proto::{Config, Security};

    /// A socket that counts the route lookups asked of it and says every route carries
    /// 9000 bytes.
    #[derive(Default)]
    struct Routes(AtomicUsize);

    impl DatagramSocket for Routes {
        async fn send_to(&self, buf: &[u8], _: SocketAddr) -> io::Result<usize> {
            Ok(buf.len())
        }

        async fn recv_from(&self, _buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
            std::future::pending().await
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            Ok(SocketAddr::from(([127, 0, 0, 1], 1)))
        }

        fn route_payload(&self, _peer: SocketAddr) -> Option<usize> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Some(9000)
        }
    }

    /// A plaintext node `id` with its clock stored.
    fn ready(id: u64, t: Instant) -> Node {
        let mut n = Node::new(
            NodeId::from_const(id),
            Security::InsecurePlaintext,
            Config::default(),
            0,
        )
        .unwrap();
        while let Some(hw) = n.poll_clock_store() {
            n.handle_clock_stored(t, hw);
        }
        n
    }

    /// Every datagram `node` has ready at `t`.
    fn datagrams(node: &mut Node, t: Instant) -> Vec<BytesMut> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while node.poll_transmit(t, &mut buf).is_some() {
            out.push(BytesMut::from(&buf[..]));
            buf.clear();
        }
        out
    }

    /// A calls B; B learns A's address and challenges it; A's answer, in its next datagram,
    /// is lost; A then sends nothing (it waits for B). With the rule, A's answer goes again
    /// on A's timer and B's book validates A's address; without it, B's book never hears
    /// the answer and keeps A within the anti-amplification limit.
    fn lost_answer(repeated: bool) -> bool {
        let t0 = Instant::now();
        let cfg = EndpointConfig {
            answers_repeated: repeated,
            ..EndpointConfig::default()
        };
        let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
        let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5001".parse().unwrap(),
            "127.0.0.1:5002".parse().unwrap(),
        );
        let (mut a, mut b) = (ready(1, t0), ready(2, t0));
        let (mut pa, mut pb) = (Paths::new(&cfg, t0), Paths::new(&cfg, t0));
        let (mut stats, shared) = (EndpointStats::default(), Shared::for_test());
        pa.configure(b_id, b_addr);
        a.send(t0, b_id, bytes::Bytes::from_static(b"call"))
            .unwrap();
        // A's REQSLOTS: B learns A's address (not validated) and challenges it.
        for d in datagrams(&mut a, t0) {
            pb.on_datagram(t0, &mut b, &mut stats, &shared, d, a_addr);
        }
        assert!(!pb.peers.is_validated(a_id));
        // B's SLOTS and CHALLENGE reach A, which answers in its next datagram: lost.
        for d in datagrams(&mut b, t0) {
            pa.on_datagram(t0, &mut a, &mut stats, &shared, d, b_addr);
        }
        assert!(
            !datagrams(&mut a, t0).is_empty(),
            "A's tokens and answer, lost"
        );
        // Ten seconds of A's timers and answers, nothing else from A.
        let mut t = t0;
        while t < t0 + Duration::from_secs(10) {
            t += Duration::from_millis(10);
            for (peer, token) in pa.take_answers(t) {
                let mut buf = Vec::new();
                a.poll_response(peer, token, &mut buf).unwrap();
                assert_eq!(pa.send_to(peer, buf.len()), Ok(b_addr));
                pb.on_datagram(
                    t,
                    &mut b,
                    &mut stats,
                    &shared,
                    BytesMut::from(&buf[..]),
                    a_addr,
                );
            }
        }
        pb.peers.is_validated(a_id)
    }

    #[test]
    fn a_lost_answer_to_a_challenge_goes_again_and_proves_the_address() {
        assert!(lost_answer(true));
        assert!(
            !lost_answer(false),
            "without the repeats the address stays unproven"
        );
    }

    #[test]
    fn a_peer_address_set_or_changed_is_looked_up_once() {
        let t = Instant::now();
        let mut paths = Paths::new(&EndpointConfig::default(), t);
        let me = NodeId::from_const(1);
        let mut node = Node::new(me, Security::InsecurePlaintext, Config::default(), 0).unwrap();
        let (peer, sock) = (NodeId::from_const(2), Routes::default());
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5000".parse().unwrap(),
            "127.0.0.1:6000".parse().unwrap(),
        );
        let lookups = |paths: &mut Paths, node: &mut Node| {
            paths.tell_routes(&sock, node);
            sock.0.load(Ordering::Relaxed)
        };
        paths.configure(peer, a);
        assert_eq!(lookups(&mut paths, &mut node), 1);
        // The same address again, as an application may set it before each send: no lookup.
        paths.configure(peer, a);
        paths.configure(peer, a);
        assert_eq!(lookups(&mut paths, &mut node), 1);
        paths.configure(peer, b);
        assert_eq!(lookups(&mut paths, &mut node), 2);
    }
}
