//! The sans-IO Exon node: inputs (`send` and the other sends in `send.rs`,
//! `handle_datagram`, `handle_timeout`, `handle_clock_stored`) and outputs (`poll_transmit`,
//! `poll_event`, `poll_timeout`, `poll_clock_store`).

/// Counts a refusal (`reject!(self.reason)`, or `reject!(self.reason, n)` for `n` of them)
/// in the node's [`Rejects`](crate::proto::Rejects) counters and in its running count of
/// refusals, from which `handle_datagram_vouched` tells whether a datagram had anything
/// refused (one comparison, where summing every counter before and after cost about 60
/// instructions a datagram).
macro_rules! reject {
    ($node:ident . $reason:ident) => {
        reject!($node.$reason, 1)
    };
    ($node:ident . $reason:ident, $n:expr) => {{
        let n: u64 = $n;
        $node.stats.rejects.$reason += n;
        $node.refusals = $node.refusals.wrapping_add(n);
    }};
}

mod early;
mod handed;
mod held;
mod input;
pub(crate) mod journal;
mod marks;
pub(crate) mod outbox;
pub(crate) mod output;
mod receive;
mod released;
mod revived;
mod send;
pub(crate) mod timeouts;
pub(crate) mod timer;

use std::collections::VecDeque;
use std::time::Instant;

use crate::proto::crypto::{Keyring, KeyringError, PublicKey, Sealer, Security, Seq};
use crate::proto::node::outbox::Outbox;
use crate::proto::node::timer::{Side, TimerQueue};
use crate::proto::recv::record::RRecord;
use crate::proto::rules::Rules;
use crate::proto::send::record::SRecord;
use crate::proto::stats::Stats;
use crate::proto::wire::codec::VARINT_MAX;
use crate::proto::wire::frame::{Cookie, Frame};
use crate::proto::{Config, ConfigError, DeliveryId, Event, NodeId, PeerMap};

/// Extra outbox entries allowed beyond one per record, for replies to peers without a record.
const STATELESS_OUTBOX: usize = 1024;

/// One Exon node: the protocol state of Algorithm 1, corrected as in `docs/algorithm.md`.
///
/// The node does no I/O and never reads a clock: time comes in as `now` arguments, which must
/// never go backwards. It is driven in the style of quinn-proto and str0m: make **one**
/// input call, then drain the outputs in this order, until each returns `None`:
///
/// 1. [`poll_clock_store`](Self::poll_clock_store): store the requested high-water mark, and
///    report it with [`handle_clock_stored`](Self::handle_clock_stored) (an in-memory
///    embedding may do so at once);
/// 2. [`poll_transmit`](Self::poll_transmit): send each datagram to its destination node;
/// 3. [`poll_event`](Self::poll_event): hand deliveries and acknowledgements to the
///    application;
/// 4. [`poll_timeout`](Self::poll_timeout): call [`handle_timeout`](Self::handle_timeout) at
///    that instant (if no other input comes first).
///
/// Several inputs in a row before draining are also correct (the outputs are queues and
/// state, not a reply to the last input): a batching driver hands over every datagram of a
/// receive batch and every queued send, then drains once. Draining after each input gives
/// the lowest latency; draining after a batch gives fewer, fuller datagrams (ACKs of the
/// whole batch in one frame).
///
/// # State
/// As the paper names it: the node clock `ck`; S records (one per destination, with `sck`,
/// `rck`, queued messages, envelopes as one range under one incarnation, and tokens each
/// carrying its own incarnation); R records (one per source, with `sck`, `rck` and the slots
/// as ranges). When no record is left ([`is_idle`](Self::is_idle)) the clock is all that
/// matters.
///
/// # Clock persistence
/// To keep exactly-once across restarts, the node never hands out a clock value (a new
/// incarnation `rck`, or an `sck` it asks slots for) at or above the high-water mark the
/// embedding confirmed as stored. It asks for the next block through
/// [`poll_clock_store`](Self::poll_clock_store) ahead of need and waits for the
/// confirmation; a restarted node must be created with the last confirmed value.
#[derive(Debug)]
pub struct Node {
    id: NodeId,
    cfg: Config,
    /// The node clock `ck`.
    ck: u64,
    /// High-water mark confirmed stored: every clock value used is at most this.
    hw: u64,
    /// High-water mark requested from the embedding, not yet confirmed.
    hw_pending: Option<u64>,
    /// Largest value handed out by `poll_clock_store`.
    hw_asked: u64,
    /// Sender records waiting for the clock to be stored before they can ask for slots.
    clock_waiters: Vec<NodeId>,
    senders: PeerMap<SRecord>,
    receivers: PeerMap<RRecord>,
    outbox: Outbox,
    timers: TimerQueue,
    events: VecDeque<Event>,
    /// Durable mode: the journal's writes and what waits for them (`None`: not durable).
    journal: Option<Box<crate::proto::journal::gates::Journal>>,
    next_msg: u64,
    queued_bytes: usize,
    stats: Stats,
    rules: Rules,
    /// Reused by `handle_timeout`.
    due_scratch: Vec<(Side, NodeId)>,
    /// A datagram written during a run but larger than the run's others (`output.rs`):
    /// its bytes, and its destination while it waits to be returned.
    stashed: Vec<u8>,
    stashed_to: Option<NodeId>,
    /// Peers whose timers are re-armed before the next output or timeout
    /// (`timeouts.rs`, `defer_rearm`).
    rearms_due: Vec<NodeId>,
    /// Slots of one run of takes (`receive.rs`, `handle_taken_many`), kept for its memory.
    taken_scratch: Vec<DeliveryId>,
    /// State of the generator for timer jitter (deterministic: seeded from id and clock).
    jitter_state: u64,
    /// Incarnations below this may have been lost: the clock this node started from (a
    /// restart loses every record), raised when evicted incarnations are forgotten. A TOKEN
    /// for a missing incarnation below it is answered DOUBT, not ACK.
    doubt_below: u64,
    /// Receiver records nothing was delivered into yet, by when each may be evicted
    /// (entries whose record is gone or proven are dropped lazily).
    unproven: crate::proto::recv::unproven::Unproven,
    /// Receiver records evicted under pressure (what their late TOKENs are answered), and
    /// the next to evict. Bounded; the oldest are forgotten by raising `doubt_below`.
    evictions: crate::proto::recv::eviction::Evictions,
    /// Reused by `handle_datagram`: the frames of the datagram being handled.
    frame_scratch: Vec<Frame>,
    /// The payloads of acknowledged messages, kept for the embedding to free
    /// ([`Node::keep_released`]); `None`: dropped when acknowledged.
    released: Option<Vec<crate::proto::payload::Payload>>,
    /// The instant receipt times (RECEIVED) count from: the first one written.
    receipt_base: Option<Instant>,
    /// Refusals counted so far ([`reject!`]): a datagram during which it moved had
    /// something refused.
    refusals: u64,
    /// Keys and nonce state; `None` in plaintext mode.
    sealer: Option<Box<Sealer>>,
    /// The token of the RESPONSE in the datagram being handled.
    last_response: Option<u64>,
    /// The token of the CHALLENGE in the datagram being handled, answered.
    last_challenge: Option<u64>,
    /// Challenges issued (path validation).
    challenges: u64,
    /// Deliveries not yet reported taken (held slots over all receiver records), and the
    /// bytes they hold (`delivery.rs`: a payload, or the part of a receive buffer a slice
    /// keeps alive), in all and per source (`recv/untaken.rs`).
    untaken: crate::proto::recv::untaken::Untaken,
    /// Early deliveries (ETOKEN) waiting for their senders' word (`recv/unstored.rs`).
    unstored: crate::proto::recv::unstored::Unstored,
    /// Deliveries an early-delivery step hands out, reused.
    early_scratch: Vec<Event>,
    /// Early deliveries dropped unseen whose takes are on their way (a durable node's
    /// wait for the `Taken` record): answered DOUBT, not ACK (`Rules::dropped_unseen_doubt`).
    /// At most the parked early deliveries, which the untaken limits bound.
    unseen_takes: Vec<DeliveryId>,
    /// The receive buffers untaken deliveries keep alive (`pins.rs`).
    pins: crate::proto::recv::pins::Pins,
    /// Buffers of large reassembled messages, back from the application (`bufpool.rs`).
    bufs: crate::proto::recv::bufpool::BufPool,
    /// Which destinations owe an answer for too long.
    liveness: crate::proto::send::liveness::Liveness,
    /// The peers sent to without an answer, and the deaf ones' schedule.
    silence: crate::proto::send::silence::Silence,
    /// What the host says of its route to each peer (path MTU discovery's first size).
    routes: crate::proto::send::routes::Routes,
}

/// A datagram [`Node::handle_datagram_buf`] took whole, with nothing in it refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The sending node (authenticated, for a sealed node).
    pub from: NodeId,
    /// The datagram's place in its sender's sequence (sealed datagrams): it grows over the
    /// sender's life, so an embedding can tell a fresh datagram from a replayed one.
    pub seq: Option<Seq>,
    /// The token of a RESPONSE frame it carried: the answer to a
    /// [`challenge`](Node::challenge) (path validation).
    pub response: Option<u64>,
    /// The token of a CHALLENGE frame it carried, answered with a RESPONSE in the next
    /// datagram to the sender: an embedding may send that answer again on its own
    /// ([`poll_response`](Node::poll_response)), in case it is lost.
    pub challenge: Option<u64>,
    /// It held a PING alone ([`poll_ping`](Node::poll_ping)): a keepalive, which shows where
    /// its sender is now and nothing more.
    pub keepalive: bool,
}

impl Node {
    /// Creates a node with identity `id`, protected as `security` says, starting from
    /// `clock`: the high-water mark last stored by a previous run of this node (or any value
    /// that grows across restarts).
    ///
    /// The node immediately asks to store `clock + clock_block` (see
    /// [`poll_clock_store`](Self::poll_clock_store)) and sends nothing before that is
    /// confirmed. A sealed node takes the epochs of its nonces from the clock, so a node
    /// restarted from its stored clock never reuses a nonce.
    pub fn new(
        id: NodeId,
        security: Security,
        config: Config,
        clock: u64,
    ) -> Result<Node, ConfigError> {
        config.validate()?;
        let sealer = Sealer::new(id, security, &config)?.map(Box::new);
        if clock > VARINT_MAX - config.clock_block {
            return Err(ConfigError::ClockExhausted {
                clock,
                block: config.clock_block,
            });
        }
        let silence = crate::proto::send::silence::Silence::new(
            crate::proto::send::silence::Schedule::new(&config),
        );
        let mut node = Node {
            id,
            cfg: config,
            ck: clock,
            hw: clock,
            hw_pending: None,
            hw_asked: clock,
            clock_waiters: Vec::new(),
            senders: PeerMap::default(),
            receivers: PeerMap::default(),
            outbox: Outbox::default(),
            timers: TimerQueue::default(),
            events: VecDeque::new(),
            journal: None,
            next_msg: 0,
            queued_bytes: 0,
            stats: Stats::default(),
            rules: Rules::ALL,
            due_scratch: Vec::new(),
            stashed: Vec::new(),
            stashed_to: None,
            rearms_due: Vec::new(),
            taken_scratch: Vec::new(),
            jitter_state: (id.get() ^ clock.rotate_left(32)) | 1,
            doubt_below: clock,
            unproven: Default::default(),
            evictions: Default::default(),
            frame_scratch: Vec::new(),
            released: None,
            receipt_base: None,
            refusals: 0,
            sealer,
            last_response: None,
            last_challenge: None,
            challenges: 0,
            untaken: Default::default(),
            unstored: Default::default(),
            early_scratch: Vec::new(),
            unseen_takes: Vec::new(),
            pins: Default::default(),
            bufs: Default::default(),
            liveness: Default::default(),
            silence,
            routes: Default::default(),
        };
        node.reserve_clock(clock + 1);
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Whether datagrams are sealed (false only in [`Security::InsecurePlaintext`] mode).
    pub fn is_sealed(&self) -> bool {
        self.sealer.is_some()
    }

    /// The keyring of a sealed node (`None` in plaintext mode).
    pub fn keyring(&self) -> Option<&Keyring> {
        self.sealer.as_ref().map(|s| s.keyring())
    }

    /// Adds (or replaces) the public key of `id` in the keyring (no effect in plaintext
    /// mode). A new member is refused when the keyring holds
    /// [`Config::keys.max_keyring_size`](crate::proto::KeyConfig::max_keyring_size) peers already ([`KeyringError::Full`]).
    pub fn add_peer_key(&mut self, id: NodeId, key: PublicKey) -> Result<(), KeyringError> {
        self.sealer
            .as_mut()
            .map_or(Ok(()), |s| s.add_peer_key(id, key))
    }

    /// Removes `id` from the keyring, with the datagram keys derived for it.
    pub fn remove_peer_key(&mut self, id: NodeId) -> Option<PublicKey> {
        self.sealer.as_mut()?.remove_peer_key(id)
    }

    /// Input: `cookie` came back from `peer` in a COOKIE_REPLY (`docs/wire.md`), from the
    /// address the embedding sends it to: the peer is under load and wants its datagrams
    /// to echo the cookie until it answers. Kept only while this node has a sender record
    /// for the peer (sealed mode); an outstanding slot request is sent again at once, with
    /// the cookie. Returns whether the cookie was taken.
    pub fn handle_cookie(&mut self, peer: NodeId, cookie: Cookie) -> bool {
        let Some(rec) = self.senders.get_mut(&peer) else {
            return false;
        };
        let Some(sealer) = &mut self.sealer else {
            return false;
        };
        sealer.set_cookie(peer, cookie);
        if rec.ask_again_now() {
            self.stats.reqslots_retransmissions += 1;
            self.outbox.wake(peer, usize::MAX);
        }
        true
    }

    /// This node's public key (`None` in plaintext mode).
    pub fn public_key(&self) -> Option<PublicKey> {
        self.sealer.as_ref().map(|s| s.public_key())
    }

    /// Input: asks `peer` to prove it receives at the address the embedding now sends to
    /// (path validation): a CHALLENGE goes out in the next datagram to `peer`; the token
    /// returned comes back in [`Accepted::response`] when the answer arrives. In sealed mode
    /// only the peer can read the token, so an answer from an address proves the peer
    /// receives there.
    pub fn challenge(&mut self, peer: NodeId) -> u64 {
        let token = self.next_challenge_token();
        let cap = self.outbox_cap();
        if !self.outbox.challenge(peer, token, cap) {
            reject!(self.outbox_full);
        }
        token
    }

    /// Whether this node can send to `peer`: always in plaintext mode; when a key is known
    /// (keyring, or learned from an authenticated datagram) in sealed mode.
    pub fn knows_key(&self, peer: NodeId) -> bool {
        self.sealer.as_ref().is_none_or(|s| s.knows(peer))
    }

    /// Key agreements (X25519) this node did for datagrams from sources whose keys were not
    /// cached: what unknown senders cost it in public-key work (sealed mode).
    pub fn key_agreements(&self) -> u64 {
        self.sealer.as_ref().map_or(0, |s| s.agreements())
    }

    /// Peers whose datagram keys are cached (sealed mode).
    pub fn cached_keys(&self) -> usize {
        self.sealer.as_ref().map_or(0, |s| s.cached_peers())
    }

    /// Whether this node holds a record (sender or receiver half) for `peer`, or has
    /// frames waiting for it: while it does, the peer's address must be kept.
    pub fn has_record(&self, peer: NodeId) -> bool {
        self.senders.contains_key(&peer)
            || self.receivers.contains_key(&peer)
            || self.outbox.owes(peer)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The node clock `ck`.
    pub fn clock(&self) -> u64 {
        self.ck
    }

    /// The high-water mark confirmed as stored.
    pub fn clock_high_water(&self) -> u64 {
        self.hw
    }

    /// True when the node holds no half-connection record: only its clock.
    pub fn is_idle(&self) -> bool {
        self.senders.is_empty() && self.receivers.is_empty()
    }

    /// Number of sender (S) records.
    pub fn sender_records(&self) -> usize {
        self.senders.len()
    }

    /// Number of receiver (R) records.
    pub fn receiver_records(&self) -> usize {
        self.receivers.len()
    }

    /// Destinations the deaf-peer schedule remembers sending to (`send/silence.rs`; at most
    /// `Limits::max_unanswered_peers`), and the entries its map has room for.
    pub fn unanswered_peers(&self) -> (usize, usize) {
        (self.silence.len(), self.silence.footprint().0)
    }

    /// Slots held over all receiver records.
    pub fn slots_held(&self) -> u64 {
        self.receivers.values().map(|r| r.slots().count()).sum()
    }

    /// Slot ranges held over all receiver records (the memory they take).
    pub fn slot_ranges_held(&self) -> usize {
        self.receivers
            .values()
            .map(|r| r.slots().range_count())
            .sum()
    }

    /// Unacknowledged tokens over all sender records.
    pub fn tokens_in_flight(&self) -> usize {
        self.senders.values().map(|s| s.token_count()).sum()
    }

    /// What the sender record for `to` knows of the path: congestion window, bytes in
    /// flight, pacing rate, bandwidth and RTT estimates, slots held and the slot window.
    /// `None` without a record.
    pub fn path(&self, to: NodeId) -> Option<crate::proto::PathStats> {
        self.senders.get(&to).map(|s| s.path_stats(&self.cfg))
    }

    /// Input: this node will have messages of several fragments to `to` holding up to
    /// `want` bytes in progress at once (the endpoint says so when it opens a stream whose
    /// chunks do not fit a base-size datagram). Its sender record asks `to` for that much
    /// reassembly credit (within `max_reassembly_per_source`) with the next token it sends,
    /// instead of a round trip later, when the first such message has to wait for it
    /// (`docs/wire.md`, "Reassembly credit"). Nothing without a sender record for `to`
    /// (send first), with `Rules::fragments_need_credit` off, or when the grant or what
    /// was asked for covers it already.
    pub fn ask_credit(&mut self, to: NodeId, want: u64) {
        if !self.rules.fragments_need_credit {
            return;
        }
        let cap = self.cfg.limits.max_reassembly_per_source;
        if let Some(rec) = self.senders.get_mut(&to) {
            rec.ask_credit(want, cap);
        }
    }

    /// Input: the host's route to `peer` carries UDP payloads of at most `payload` bytes
    /// (the route's MTU less the IP and UDP headers, as the embedding learns it from the
    /// operating system), or `None` when it does not say. Path MTU discovery to `peer` takes
    /// it as its ceiling and probes it first (`docs/wire.md`, "Path MTU discovery"), for the
    /// sender record there is and those to come. The embedding tells it again when the
    /// peer's address changes. Returns whether it is kept (a table of 65 536 peers at most).
    pub fn set_route(&mut self, peer: NodeId, payload: Option<usize>) -> bool {
        let kept = self.routes.set(peer, payload);
        if let Some(rec) = self.senders.get_mut(&peer) {
            if rec.mtud_mut().set_route(self.routes.get(peer)) {
                rec.mss_changed();
            }
        }
        kept
    }

    /// A new sender record for `to`, its path MTU discovery told the route's size.
    pub(crate) fn new_sender_record(&self, to: NodeId, now: Instant) -> SRecord {
        let mut rec = SRecord::new(self.ck, now, &self.cfg, &self.rules);
        // A new record is at the base size, which no route's size goes below: the size
        // stays, only the ceiling and the first probe change.
        if let Some(route) = self.routes.get(to) {
            rec.mtud_mut().set_route(Some(route));
        }
        rec
    }

    /// Messages waiting for an envelope, over all destinations.
    pub fn messages_queued(&self) -> usize {
        self.senders.values().map(|s| s.queued_count()).sum()
    }

    /// Payload bytes accepted by `send` and not yet acknowledged.
    pub fn bytes_queued(&self) -> usize {
        self.queued_bytes
    }

    /// Messages to `to` accepted and not yet acknowledged.
    pub fn pending_to(&self, to: NodeId) -> usize {
        self.senders
            .get(&to)
            .map_or(0, |s| s.queued_count() + s.token_count())
    }

    /// Whether `send(to, ..)` would be refused with `QueueFull` for a payload of `len` bytes.
    pub fn is_full(&self, to: NodeId, len: usize) -> bool {
        self.queued_bytes + len > self.cfg.limits.max_queued_bytes
            || self
                .senders
                .get(&to)
                .is_some_and(|s| s.queued_count() >= self.cfg.limits.max_queued_per_peer)
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Turns corrections of Algorithm 1 off, to show that the simulator catches the defect.
    /// Test builds only.
    #[cfg(feature = "rule-switches")]
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = rules;
    }

    /// The corrections in force.
    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// Next timer jitter value (xorshift64*).
    fn next_jitter(&mut self) -> u16 {
        let mut x = self.jitter_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.jitter_state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 48) as u16
    }

    fn outbox_cap(&self) -> usize {
        self.cfg.limits.max_sender_records + self.cfg.limits.max_receiver_records + STATELESS_OUTBOX
    }

    // ----- clock -----------------------------------------------------------------------

    /// Makes sure values up to `up_to` may be used, asking for the next block ahead of need.
    /// Returns whether `up_to` is covered by the stored high-water mark now.
    fn reserve_clock(&mut self, up_to: u64) -> bool {
        let margin = self.cfg.clock_block / 2;
        if up_to.saturating_add(margin) > self.hw {
            let want = up_to.saturating_add(self.cfg.clock_block).min(VARINT_MAX);
            if self.hw_pending.is_none_or(|p| p < want) {
                self.hw_pending = Some(want);
            }
        }
        up_to <= self.hw
    }

    /// Output: a high-water mark to store durably before the node may use clock values up to
    /// it. Report completion with [`handle_clock_stored`](Self::handle_clock_stored).
    pub fn poll_clock_store(&mut self) -> Option<u64> {
        let p = self.hw_pending?;
        if p > self.hw_asked {
            self.hw_asked = p;
            // Durable mode: the journal covers the incarnations this mark allows.
            self.journal_covers(p, false);
            if !self.rules.clock_waits_for_store {
                // The defect (self-test only): counted as stored before it is.
                self.clock_stored(p);
            }
            Some(p)
        } else {
            None
        }
    }

    /// Input: `high_water` is durably stored (a restart will start from it).
    pub fn handle_clock_stored(&mut self, _now: Instant, high_water: u64) {
        self.clock_stored(high_water);
    }

    /// `high_water` is stored: clock values up to it may be used, and the records waiting
    /// for them ask for slots.
    fn clock_stored(&mut self, high_water: u64) {
        if high_water <= self.hw {
            return;
        }
        self.hw = high_water.min(VARINT_MAX);
        if self.hw_pending.is_some_and(|p| p <= self.hw) {
            self.hw_pending = None;
        }
        for peer in std::mem::take(&mut self.clock_waiters) {
            self.request_slots(peer);
            self.rearm_sender(peer);
        }
    }
}
