//! Tunables of the protocol core, each with a documented default.

use std::time::Duration;

use crate::proto::crypto::TAG_LEN;
use crate::proto::send::congestion::CongestionControl;
use crate::proto::wire::codec::{varint_len, VARINT_MAX};
use crate::proto::wire::frame::{token_len, MAX_HEADER_LEN};

/// Configuration of a [`Node`](crate::proto::Node). Every field has a default suited to a LAN or
/// the internet; `Config::default()` is a good start: set the fields to change on it (the
/// struct is `#[non_exhaustive]`, so it cannot be written as a literal outside this crate).
/// With the `serde` feature, unknown fields are refused and durations are text (`"250ms"`).
///
/// The settings come in groups: [`mtu`](Self::mtu) (datagram sizes), [`flow`](Self::flow)
/// (envelopes, window, congestion control), [`limits`](Self::limits) (memory bounds),
/// [`timers`](Self::timers), [`acks`](Self::acks) and [`keys`](Self::keys) (key agreement
/// budgets), set as `config.timers.max_rto = ...`; with serde, each group is a table
/// (`[timers]`).
///
/// Nodes that talk to each other need not agree on datagram sizes (each receives up to the
/// UDP maximum) nor on windows: a receiver grants at most its [`Limits::max_slots_request`]
/// per request and [`Limits::max_slots_per_record`] per sender, and a sender whose
/// [`FlowConfig::window`] is larger holds what the receiver allows.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct Config {
    /// Datagram sizes and path MTU discovery.
    pub mtu: MtuConfig,
    /// Flow and congestion control: the envelopes a sender keeps, its window of slots, and
    /// the controller that paces tokens.
    pub flow: FlowConfig,
    /// Memory bounds: queues, records, slots, untaken deliveries and reassembly.
    pub limits: Limits,
    /// Round trips, retransmission, probes and the timeouts that discard soft state.
    pub timers: TimerConfig,
    /// When a receiver acknowledges.
    pub acks: AckConfig,
    /// Key agreement budgets and key memory of a sealed node.
    pub keys: KeyConfig,
    /// Clock values reserved per persistence request: the node asks the embedding to store a
    /// high-water mark this far ahead. Default 2^20.
    pub clock_block: u64,
}

/// The largest flow-control window and slot cap [`Config::validate`] accepts: 2^30 slots
/// (a billion messages in flight to one peer; far beyond any path, and far from the end of
/// the clock's range, so sums of slot numbers cannot overflow).
pub const MAX_WINDOW: u64 = 1 << 30;

/// Datagram sizes and path MTU discovery. Part of [`Config`] (`Config::mtu`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct MtuConfig {
    /// Largest datagram sent, in bytes: the ceiling of path MTU discovery
    /// ([`discovery`](MtuConfig::discovery)), or with discovery off the size of every
    /// datagram. Default 65507, the largest UDP payload over IPv4 (at most that). Datagrams
    /// are *received* up to 65507 bytes whatever this value
    /// ([`Config::max_receive_payload`]), so that peers with different sizes understand
    /// each other.
    pub max_datagram_size: usize,
    /// The base datagram size of path MTU discovery: what every path is assumed to carry,
    /// so datagrams to a destination start at this size and are never probed below it. It
    /// bounds the payload (see [`Config::max_payload`]). Default 1200, at least 1200 (what
    /// QUIC assumes of every internet path).
    pub min_datagram_size: usize,
    /// Path MTU discovery: datagrams to each destination grow from
    /// [`min_datagram_size`](MtuConfig::min_datagram_size) up to what the path carries (at most
    /// [`max_datagram_size`](MtuConfig::max_datagram_size)), found with MTU_PROBE frames, and
    /// fall back to the base size when the path shrinks (see `docs/wire.md`). Off, every
    /// datagram may be `max_datagram_size` bytes (which must then suit every path).
    /// Default true.
    pub discovery: bool,
    /// After path MTU discovery settles on a size, it searches again this long after, to
    /// find a path that grew. Default 600 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub raise_interval: Duration,
}

impl Default for MtuConfig {
    fn default() -> Self {
        MtuConfig {
            max_datagram_size: MAX_DATAGRAM_SIZE,
            min_datagram_size: BASE_DATAGRAM_SIZE,
            discovery: true,
            raise_interval: Duration::from_secs(600),
        }
    }
}

/// Flow and congestion control: the envelopes a sender keeps, its window of slots, and the
/// controller that paces tokens. Part of [`Config`] (`Config::flow`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct FlowConfig {
    /// `N` of the paper: envelopes (reserved slots) a sender keeps ready per destination so
    /// that sends go out at once. Default 128.
    pub envelope_target: u64,
    /// Low watermark: a sender asks for more slots when its envelopes fall below this (and
    /// always when messages wait). Default 64. Equal to `envelope_target`, it asks after every
    /// send, as the paper's Algorithm 1 does.
    pub envelope_low: u64,
    /// Largest number of slots a sender holds per destination (envelopes plus unacknowledged
    /// tokens): the ceiling of the flow-control window. With congestion control the window
    /// follows the path (twice the congestion window in tokens, plus `envelope_target`, up to
    /// this), and the envelopes kept ready grow with it; without, it is this. A receiver
    /// grants at most its own limits ([`Limits::max_slots_request`],
    /// [`Limits::max_slots_per_record`]): the sender then holds what both allow. Default
    /// 32768.
    pub window: u64,
    /// The envelopes kept ready follow the path: where the measured bandwidth-delay
    /// product holds more than `envelope_target` tokens, a sender keeps twice the product
    /// ready and asks for slots before they run out (the low watermark moves up by as
    /// much), so a REQSLOTS answered a round trip later never leaves it without envelopes.
    /// Off, it keeps exactly `envelope_target` and asks below `envelope_low`, as the
    /// paper's Algorithm 1 does. Either way the slot window follows the congestion window
    /// (see [`window`](Self::window)). Default true.
    pub autotune: bool,
    /// Congestion controller of every destination: how many bytes of tokens may be in flight
    /// (within the receiver's slots) and at what rate they leave. Default
    /// [`CongestionControl::Bbr`]; [`CongestionControl::Off`] bounds tokens in flight by
    /// the slots alone.
    pub congestion: CongestionControl,
    /// Durable mode: a whole message that is not a flow's (a one-way message, a call's
    /// request, a reply) leaves before its records are on stable storage, as an ETOKEN or
    /// ESTOKEN, and its receiver hands it over only once the sender says they are
    /// (STORED): the two sides' syncs overlap instead of running one after the other
    /// (`docs/durability.md`, "Syncs that overlap"). Off, the token waits for its records.
    /// Messages in fragments, flows' messages and recovered ones always wait. Default
    /// true.
    pub early_tokens: bool,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            envelope_target: 128,
            envelope_low: 64,
            window: 32768,
            autotune: true,
            early_tokens: true,
            congestion: CongestionControl::default(),
        }
    }
}

/// Memory bounds: queues, records, slots, untaken deliveries and reassembly. Part of [`Config`] (`Config::limits`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct Limits {
    /// Messages queued per destination (waiting for a slot) before `send` says
    /// [`SendError::QueueFull`](crate::proto::SendError::QueueFull). Default 4096.
    pub max_queued_per_peer: usize,
    /// Payload bytes queued or in flight over all destinations before `send` says
    /// `QueueFull`. Default 64 MiB.
    pub max_queued_bytes: usize,
    /// Most sender records (destinations with state) at once. Default 4096.
    pub max_sender_records: usize,
    /// Most receiver records (sources with slots) at once. A REQSLOTS that would create one
    /// more evicts the oldest record no token was delivered into (its tokens then get RETRY),
    /// or, if there is none, is dropped and counted. Default 4096.
    pub max_receiver_records: usize,
    /// Most slots granted for one REQSLOTS: a request for more is granted this many (the
    /// sender asks again for the rest). Default 32768.
    pub max_slots_request: u64,
    /// Most slots a receiver record may hold: a request is granted what fits, and refused
    /// when nothing does. Default 65536 (twice the default window: slots below a sender's
    /// frontier are held until its next request waives them).
    pub max_slots_per_record: u64,
    /// Deliveries handed to the embedding and not yet reported taken by the application
    /// ([`Node::handle_taken`](crate::proto::Node::handle_taken)). They are not acknowledged
    /// until taken; at this many, further TOKENs are neither delivered nor answered, and
    /// no new slots are granted (their senders ask again later), counted in
    /// [`Stats::held_back`](crate::proto::Stats::held_back). Default 65536.
    pub max_untaken: usize,
    /// Bytes of deliveries not yet taken at which, as at `max_untaken` deliveries, this node
    /// stops delivering and granting (a single delivery may pass it by at most one
    /// message). Default 64 MiB.
    pub max_untaken_bytes: usize,
    /// Deliveries from one source untaken at once: at this many, that source's TOKENs wait
    /// (neither delivered nor answered) and it gets no new slots, as at `max_untaken` for
    /// the node, while other sources go on. So one source whose messages the application
    /// cannot take yet (an ordered flow's messages far beyond their turn, held untaken)
    /// never fills the node's room for everyone. Default 32768 (half of `max_untaken`);
    /// above `max_untaken` it is `max_untaken`.
    pub max_untaken_per_source: usize,
    /// Bytes of untaken deliveries from one source, as `max_untaken_per_source` for
    /// `max_untaken_bytes`. Default 32 MiB.
    pub max_untaken_bytes_per_source: usize,
    /// Largest message [`Node::send`](crate::proto::Node::send) accepts, and the largest this node
    /// reassembles from fragments. A message too large for one TOKEN
    /// ([`max_payload`](crate::proto::Config::max_payload)) travels as FRAG frames in the same one slot,
    /// and is delivered whole or not at all. Peers should agree on it: a message above its
    /// receiver's limit never gets reassembly credit (give it a deadline). Default 16 MiB.
    pub max_message_size: usize,
    /// Most reassembly memory one source may hold at this node at once (its CREDIT), in
    /// bytes. At least `max_message_size`. Default 16 MiB.
    pub max_reassembly_per_source: u64,
    /// Most reassembly memory this node grants over all sources together. A sender starts
    /// a fragmented message only within the credit it was granted, so a receiver never
    /// holds more than this; senders without credit wait (backpressure). Default 64 MiB.
    pub max_reassembly_bytes: u64,
    /// Most peers the deaf-peer schedule (`Rules::deaf_backoff`) remembers sending to at
    /// once. Every destination the node sends to gets an entry, answers to unauthenticated
    /// datagrams included; past this many, the entries paused past `4 * max_rto` go first,
    /// then the half sent to longest ago, and the table gives its memory back. An evicted
    /// peer starts its grace again (it may get `2 * max_rto` of datagrams before it is deaf
    /// again). At least 1. Default 9216 (the default sender and receiver records, and 1024).
    pub max_unanswered_peers: usize,
    /// Durable mode: most marks the journal keeps at once
    /// ([`Mark`](crate::proto::journal::Mark): the endpoint keeps one per durable ordered
    /// flow and direction). A new mark beyond it is refused with
    /// [`MarkError::TooMany`](crate::proto::MarkError::TooMany). The endpoint reserves room
    /// before a durable flow starts and refuses a flow without it
    /// (`Rules::reserve_flow_marks`, `docs/channels.md`). Default 65536.
    pub max_marks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_queued_per_peer: 4096,
            max_queued_bytes: 64 << 20,
            max_sender_records: 4096,
            max_receiver_records: 4096,
            max_slots_request: 32768,
            max_slots_per_record: 65536,
            max_untaken: 65536,
            max_untaken_bytes: 64 << 20,
            max_untaken_per_source: 32768,
            max_untaken_bytes_per_source: 32 << 20,
            max_message_size: 16 << 20,
            max_reassembly_per_source: 16 << 20,
            max_reassembly_bytes: 64 << 20,
            max_unanswered_peers: 9216,
            max_marks: 65536,
        }
    }
}

/// Round trips, retransmission, probes and the timeouts that discard soft state. Part of [`Config`] (`Config::timers`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct TimerConfig {
    /// Round-trip time assumed before the first measurement. Default 100 ms.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub initial_rtt: Duration,
    /// Floor of the retransmission timeout. Default 5 ms.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub min_rto: Duration,
    /// Ceiling of the retransmission timeout, backoff included. Default 2 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub max_rto: Duration,
    /// Ceiling of the retransmission timeout's backoff while the destination is not yet
    /// deaf (`docs/wire.md`, "Peers that answer nothing"): timeouts after the first double
    /// up to this, or up to the timeout itself where that is longer, and no further. So
    /// the tokens in flight into an outage are tried again at least this often and a path
    /// that heals is found within about this (a stream resumes), where a backoff up to
    /// `max_rto` could wait that long. Past `2 * max_rto` without an answer the deaf
    /// schedule takes over and bounds what goes. Above `max_rto` it acts as `max_rto`.
    /// Default 400 ms.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub max_backoff: Duration,
    /// Clock granularity added to the variance term of the timeout. Default 1 ms.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub timer_granularity: Duration,
    /// A receiver record holding slots whose sender has been silent this long sends a probe,
    /// SLOTS(sck, rck, 0); the interval doubles after each unanswered probe. Default 1 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub probe_interval: Duration,
    /// Ceiling of the probe interval. Default 60 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub max_probe_interval: Duration,
    /// A sender record with no message and no token is discarded after this long idle
    /// (keeping only the clock). Default 10 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub idle_timeout: Duration,
    /// A destination with work pending (messages queued or unacknowledged) that sends
    /// nothing back for this long is reported unreachable
    /// ([`Event::PeerUnreachable`](crate::proto::Event::PeerUnreachable)), checked at its
    /// retransmission timeouts (so within `max_rto` after). Must exceed `max_rto`, so that a
    /// peer is never reported unreachable only because this node waits to retransmit.
    /// Default 5 s.
    pub unreachable_after: Duration,
    /// A partial message that received no new byte for this long is dropped (its slot stays
    /// free: the sender's retransmissions, or a RETRY, still deliver it exactly once).
    /// Default 30 s.
    pub reassembly_timeout: Duration,
}

impl Default for TimerConfig {
    fn default() -> Self {
        TimerConfig {
            initial_rtt: Duration::from_millis(100),
            min_rto: Duration::from_millis(5),
            max_rto: Duration::from_secs(2),
            max_backoff: Duration::from_millis(400),
            timer_granularity: Duration::from_millis(1),
            probe_interval: Duration::from_secs(1),
            max_probe_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(10),
            unreachable_after: Duration::from_secs(5),
            reassembly_timeout: Duration::from_secs(30),
        }
    }
}

/// When a receiver acknowledges. Part of [`Config`] (`Config::acks`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct AckConfig {
    /// Longest a receiver waits before acknowledging tokens, hoping to cover more of them
    /// with one ACK frame or to ride on a datagram it sends anyway. Tokens in a datagram
    /// flagged ACK-NOW (the last of a sender's burst) and duplicates are acknowledged at
    /// once (the former may ride with paced tokens: `ride_paced_tokens`). Zero acknowledges
    /// every datagram at once. Default 2 ms.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub delay: Duration,
    /// Tokens from one source after which a receiver acknowledges without waiting for
    /// `ack_delay`. Default 16.
    pub every: u32,
    /// ACKs that would leave in a datagram of their own while tokens to the same peer wait
    /// for the pacer, and the pacer lets those go before the ACKs' delay runs out (or, for
    /// ACKs due at once, within `delay`) and within an eighth of the path's minimum RTT,
    /// wait for those tokens and ride in their datagram: a server's ACK of a request goes
    /// with its paced reply. Where one datagram at the pacing rate takes longer than that
    /// (a slow path), they wait for the next paced datagram, up to a datagram's time and
    /// the minimum RTT (`Rules::acks_wait_for_a_paced_datagram`). ACKs of retransmitted
    /// tokens never wait. Default true.
    pub ride_paced_tokens: bool,
}

impl Default for AckConfig {
    fn default() -> Self {
        AckConfig {
            delay: Duration::from_millis(2),
            every: 16,
            ride_paced_tokens: true,
        }
    }
}

/// Key agreement budgets and key memory of a sealed node. Part of [`Config`] (`Config::keys`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct KeyConfig {
    /// Peers whose datagram keys a sealed node keeps derived (soft state; peers it holds a
    /// record for are never evicted). Default 9216.
    pub cache_size: usize,
    /// Key agreements (X25519) per second a sealed node performs for datagrams from peers
    /// whose keys are not cached: bounds the public-key work forged datagrams can cost.
    /// Default 2000.
    pub agreements_per_sec: u64,
    /// Most such key agreements at once (the bucket's depth). Default 512.
    pub agreement_burst: u64,
    /// Key agreements per second for datagrams the embedding vouches for (their source
    /// address proved by a cookie, see `docs/security.md`): a budget of their own, which
    /// forgeries from spoofed addresses cannot spend. Keyring members never need either
    /// budget (their keys are derived once). Default 1000.
    pub cookie_agreements_per_sec: u64,
    /// Most vouched key agreements at once. Default 256.
    pub cookie_agreement_burst: u64,
    /// Most peers in a sealed node's keyring: each member's datagram keys are derived once
    /// and kept (so that forgeries in its name cost one tag check), and this bounds that
    /// memory (about 1 KiB a member). Beyond it a node refuses to start
    /// ([`ConfigError`]) and adding a key is refused
    /// ([`KeyringError::Full`](crate::proto::crypto::KeyringError::Full)). Default 65536.
    pub max_keyring_size: usize,
}

impl Default for KeyConfig {
    fn default() -> Self {
        KeyConfig {
            cache_size: 9216,
            agreements_per_sec: 2000,
            agreement_burst: 512,
            cookie_agreements_per_sec: 1000,
            cookie_agreement_burst: 256,
            max_keyring_size: 65536,
        }
    }
}
impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: MtuConfig::default(),
            flow: FlowConfig::default(),
            limits: Limits::default(),
            timers: TimerConfig::default(),
            acks: AckConfig::default(),
            keys: KeyConfig::default(),
            clock_block: 1 << 20,
        }
    }
}

/// Smallest `max_datagram_size` accepted by [`Config::validate`] (with path MTU discovery
/// off).
pub const MIN_DATAGRAM_SIZE: usize = 128;
/// Smallest `min_datagram_size` accepted: the base size of path MTU discovery, which every
/// path is assumed to carry.
pub const BASE_DATAGRAM_SIZE: usize = 1200;
/// Largest `max_datagram_size` accepted: the largest UDP payload over IPv4.
pub const MAX_DATAGRAM_SIZE: usize = 65507;

/// Room for a payload in a datagram of `size` bytes, with the largest header (sealed, with
/// the sender's key), the authentication tag and TOKEN framing.
fn payload_room(size: usize) -> usize {
    payload_room_each(size, 1)
}

/// Room for each of `tokens` equal payloads sent together in one datagram of `size` bytes:
/// what is left after the largest header (sealed, with the sender's key), the
/// authentication tag and each TOKEN's framing at its largest (8-byte slot and incarnation),
/// shared out. Used to size what should travel `tokens` to a datagram (a stream's chunks:
/// two to a datagram of the largest size).
pub fn payload_room_each(size: usize, tokens: usize) -> usize {
    let tokens = tokens.max(1);
    let len_field = varint_len(size as u64);
    let framing = token_len(VARINT_MAX, VARINT_MAX, 0) - 1 + len_field;
    let shared = size.saturating_sub(MAX_HEADER_LEN + TAG_LEN);
    (shared / tokens).saturating_sub(framing)
}

/// Why a configuration was refused: the field (as `group.field`) and what it must be, so
/// the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// One value outside its allowed range.
    #[error("invalid config: {field} must be {allowed}")]
    OutOfRange {
        /// The field, as `group.field`.
        field: &'static str,
        /// What it must be.
        allowed: &'static str,
    },
    /// Values that contradict each other.
    #[error("invalid config: need {rule}")]
    Inconsistent {
        /// The relation the values must satisfy.
        rule: &'static str,
    },
    /// The clock a node was started from leaves no room below 2^62.
    #[error("invalid clock {clock}: too close to 2^62 for clock_block {block}")]
    ClockExhausted {
        /// The clock given.
        clock: u64,
        /// The configured `clock_block`.
        block: u64,
    },
    /// The keyring lists this node's own id with a public key other than its own.
    #[error("invalid identity: the keyring lists this node's id with another public key")]
    KeyringConflict,
    /// The keyring holds more members than `keys.max_keyring_size`.
    #[error("invalid identity: the keyring holds {members} peers, more than keys.max_keyring_size ({max})")]
    KeyringTooLarge {
        /// Members in the keyring.
        members: usize,
        /// The configured bound.
        max: usize,
    },
}

/// The longest duration a configuration may hold (about 34 years): any instant plus it is
/// representable, so timers computed from the configuration never overflow.
pub const MAX_CONFIG_DURATION: Duration = Duration::from_secs(1 << 30);

fn out_of_range(field: &'static str, allowed: &'static str) -> ConfigError {
    ConfigError::OutOfRange { field, allowed }
}

fn inconsistent(rule: &'static str) -> ConfigError {
    ConfigError::Inconsistent { rule }
}

impl Config {
    /// Largest payload sent as one TOKEN whatever the path: what fits in one datagram of the
    /// [base size](Self::base_datagram_size) with the largest header (a sealed one carrying
    /// the sender's key), the authentication tag and TOKEN framing (8-byte slot and
    /// incarnation). 1091 bytes with the default 1200-byte base. Larger messages (up to
    /// [`max_message_size`](Limits::max_message_size)) travel as one TOKEN where the path's
    /// datagrams hold them, else in fragments.
    pub fn max_payload(&self) -> usize {
        payload_room(self.base_datagram_size())
    }

    /// The datagram size every destination gets: [`min_datagram_size`](MtuConfig::min_datagram_size)
    /// with path MTU discovery, else [`max_datagram_size`](MtuConfig::max_datagram_size).
    pub fn base_datagram_size(&self) -> usize {
        if self.mtu.discovery {
            self.mtu.min_datagram_size
        } else {
            self.mtu.max_datagram_size
        }
    }

    /// Largest payload a node accepts from the network: what fits in the largest UDP
    /// datagram ([`MAX_DATAGRAM_SIZE`]), whatever this node's own `max_datagram_size`. A
    /// node receives any datagram up to that size, so peers configured with larger
    /// datagrams than its own are understood (its own datagrams stay within its size).
    pub fn max_receive_payload() -> usize {
        payload_room(MAX_DATAGRAM_SIZE)
    }

    /// Checks that values are in range and consistent with each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_sizes_and_flow()?;
        self.validate_durations()?;
        self.validate_timers_and_budgets()?;
        self.validate_messages()
    }

    /// Every duration at most [`MAX_CONFIG_DURATION`]: an instant plus any of them is
    /// representable, so no timer computed from the configuration can overflow.
    fn validate_durations(&self) -> Result<(), ConfigError> {
        let t = &self.timers;
        let all = [
            self.mtu.raise_interval,
            t.initial_rtt,
            t.min_rto,
            t.max_rto,
            t.max_backoff,
            t.timer_granularity,
            t.probe_interval,
            t.max_probe_interval,
            t.idle_timeout,
            t.unreachable_after,
            t.reassembly_timeout,
            self.acks.delay,
        ];
        if all.iter().any(|d| *d > MAX_CONFIG_DURATION) {
            return Err(out_of_range(
                "mtu.raise_interval, timers.* and acks.delay",
                "at most 2^30 seconds (about 34 years)",
            ));
        }
        Ok(())
    }

    /// Datagram sizes, the flow window and envelopes, the per-peer and slot limits.
    fn validate_sizes_and_flow(&self) -> Result<(), ConfigError> {
        if !(MIN_DATAGRAM_SIZE..=MAX_DATAGRAM_SIZE).contains(&self.mtu.max_datagram_size) {
            return Err(out_of_range("mtu.max_datagram_size", "within 128..=65507"));
        }
        if self.mtu.min_datagram_size < BASE_DATAGRAM_SIZE
            || (self.mtu.discovery && self.mtu.min_datagram_size > self.mtu.max_datagram_size)
        {
            return Err(inconsistent(
                "1200 <= mtu.min_datagram_size (<= mtu.max_datagram_size with mtu.discovery)",
            ));
        }
        if self.mtu.raise_interval.is_zero() {
            return Err(out_of_range("mtu.raise_interval", "positive"));
        }
        if self.flow.window == 0 || self.flow.envelope_target == 0 {
            return Err(out_of_range(
                "flow.window and flow.envelope_target",
                "positive",
            ));
        }
        if self.flow.window > MAX_WINDOW || self.limits.max_slots_per_record > MAX_WINDOW {
            return Err(out_of_range(
                "flow.window and limits.max_slots_per_record",
                "at most 2^30 slots",
            ));
        }
        if self.flow.envelope_target > self.flow.window
            || self.flow.envelope_low > self.flow.envelope_target
        {
            return Err(inconsistent(
                "flow.envelope_low <= flow.envelope_target <= flow.window",
            ));
        }
        if self.limits.max_queued_per_peer == 0
            || self.limits.max_sender_records == 0
            || self.limits.max_unanswered_peers == 0
        {
            return Err(out_of_range(
                "limits.max_queued_per_peer, limits.max_sender_records and limits.max_unanswered_peers",
                "positive",
            ));
        }
        if self.limits.max_slots_request == 0
            || self.limits.max_slots_per_record < self.limits.max_slots_request
        {
            return Err(inconsistent(
                "0 < limits.max_slots_request <= limits.max_slots_per_record",
            ));
        }
        Ok(())
    }

    /// Timers, acknowledgements, key budgets and the untaken-delivery limits.
    fn validate_timers_and_budgets(&self) -> Result<(), ConfigError> {
        if self.timers.min_rto.is_zero() || self.timers.min_rto > self.timers.max_rto {
            return Err(inconsistent("0 < timers.min_rto <= timers.max_rto"));
        }
        if self.timers.probe_interval.is_zero()
            || self.timers.probe_interval > self.timers.max_probe_interval
        {
            return Err(inconsistent(
                "0 < timers.probe_interval <= timers.max_probe_interval",
            ));
        }
        if self.acks.every == 0 || self.acks.delay >= self.timers.max_rto {
            return Err(inconsistent(
                "acks.every > 0 and acks.delay < timers.max_rto",
            ));
        }
        if self.keys.cache_size == 0
            || self.keys.agreement_burst == 0
            || self.keys.cookie_agreement_burst == 0
        {
            return Err(out_of_range(
                "keys.cache_size, keys.agreement_burst and keys.cookie_agreement_burst",
                "positive",
            ));
        }
        if self.timers.unreachable_after <= self.timers.max_rto {
            return Err(inconsistent("timers.unreachable_after > timers.max_rto"));
        }
        if self.limits.max_untaken == 0
            || self.limits.max_untaken_bytes == 0
            || self.limits.max_untaken_per_source == 0
            || self.limits.max_untaken_bytes_per_source == 0
        {
            return Err(out_of_range(
                "limits.max_untaken, limits.max_untaken_bytes and their per-source shares",
                "positive",
            ));
        }
        Ok(())
    }

    /// Message sizes against reassembly and queue memory, and the clock block.
    fn validate_messages(&self) -> Result<(), ConfigError> {
        if self.limits.max_message_size == 0
            || self.limits.max_reassembly_per_source < crate::proto::recv::assembler::MIN_CHARGE
            || (self.limits.max_message_size as u64) > self.limits.max_reassembly_per_source
            || self.limits.max_reassembly_per_source > self.limits.max_reassembly_bytes
        {
            return Err(inconsistent(
                "0 < limits.max_message_size <= limits.max_reassembly_per_source <= limits.max_reassembly_bytes, and limits.max_reassembly_per_source >= 16 KiB",
            ));
        }
        if self.limits.max_message_size > self.limits.max_queued_bytes {
            return Err(inconsistent(
                "limits.max_message_size <= limits.max_queued_bytes",
            ));
        }
        if self.timers.reassembly_timeout.is_zero() {
            return Err(out_of_range("timers.reassembly_timeout", "positive"));
        }
        if self.clock_block < 2 {
            return Err(out_of_range("clock_block", "at least 2"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::crypto::{PublicKey, Seq};
    use crate::proto::wire::frame::{Header, Packet, SealHeader};
    use crate::proto::{Frame, NodeId};

    /// A duration no instant can be added to is refused (each timer is computed as an
    /// instant plus a configured duration); the longest allowed passes.
    #[test]
    fn durations_past_the_clocks_range_are_refused() {
        let mut c = Config::default();
        c.timers.idle_timeout = Duration::MAX;
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        c.timers.idle_timeout = MAX_CONFIG_DURATION;
        assert_eq!(c.validate(), Ok(()));
        let mut c = Config::default();
        c.acks.delay = Duration::MAX;
        assert!(c.validate().is_err());
        let mut c = Config::default();
        c.mtu.raise_interval = MAX_CONFIG_DURATION + Duration::from_nanos(1);
        assert!(matches!(c.validate(), Err(ConfigError::OutOfRange { .. })));
        // Any instant plus the longest allowed is representable.
        assert!(std::time::Instant::now()
            .checked_add(MAX_CONFIG_DURATION)
            .is_some());
    }

    /// Sealed length of a datagram with the largest header (sealed, with key and cookie)
    /// carrying one TOKEN per payload length, each slot and incarnation taking eight bytes
    /// on the datagram's clock chains (half their range from the one before), each with
    /// its `len` as a sender sizes them (the last one's is left out when written, which
    /// only leaves room).
    fn worst_sealed_len(payloads: &[usize]) -> usize {
        const HALF: u64 = 1 << 61;
        let mut header = Header::new(NodeId::MAX, NodeId::MAX);
        header.seal = Some(SealHeader {
            seq: Seq {
                epoch: HALF,
                counter: u8::MAX,
            },
            key: Some(PublicKey::from_bytes([0; 32])),
            cookie: Some([0xff; 16]),
        });
        let frames = payloads
            .iter()
            .enumerate()
            .map(|(k, &len)| Frame::Token {
                s: if k % 2 == 0 { 0 } else { HALF },
                r: if k % 2 == 0 { VARINT_MAX } else { HALF - 1 },
                payload: vec![0; len].into(),
                senders_copy: false,
            })
            .collect();
        let last_len = payloads
            .last()
            .map_or(0, |&l| crate::proto::frame::len_field(l));
        Packet { header, frames }.encoded_len() + TAG_LEN + last_len
    }

    #[test]
    fn the_largest_payload_fits_the_largest_datagram_encoding() {
        for size in [MIN_DATAGRAM_SIZE, 1200, 1472, 9000, MAX_DATAGRAM_SIZE] {
            let cfg = {
                let mut c = Config::default();
                c.mtu.max_datagram_size = size;
                c.mtu.discovery = false;
                c
            };
            let sealed_len = worst_sealed_len(&[cfg.max_payload()]);
            assert!(sealed_len <= size, "size {size}");
            assert!(sealed_len + 2 > size, "max_payload wastes room at {size}");
        }
        assert_eq!(Config::default().max_payload(), 1091);
        // With discovery, the payload is bounded by the base size, not the ceiling.
        let cfg = {
            let mut c = Config::default();
            c.mtu.min_datagram_size = 1472;
            c
        };
        assert_eq!(cfg.max_payload(), payload_room(1472));
    }

    #[test]
    fn payloads_sized_to_share_a_datagram_fit_it_together() {
        for size in [1200, 1472, 9000, MAX_DATAGRAM_SIZE] {
            for tokens in 1..=4usize {
                let room = payload_room_each(size, tokens);
                let sealed_len = worst_sealed_len(&vec![room; tokens]);
                assert!(sealed_len <= size, "{tokens} at {size}: {sealed_len}");
                // Little room wasted: a few bytes more each, and they would not fit.
                assert!(
                    sealed_len + 3 * tokens > size,
                    "{tokens} at {size}: wasteful"
                );
            }
        }
    }

    #[test]
    fn default_config_is_valid_and_bad_ones_are_refused() {
        assert_eq!(Config::default().validate(), Ok(()));
        let bad = {
            let mut c = Config::default();
            c.flow.envelope_low = 200;
            c
        };
        let e = bad.validate().unwrap_err();
        assert!(
            matches!(e, ConfigError::Inconsistent { rule } if rule.contains("flow.envelope_low")),
            "{e}"
        );
        let bad = {
            let mut c = Config::default();
            c.mtu.max_datagram_size = 70_000;
            c
        };
        let e = bad.validate().unwrap_err();
        assert_eq!(
            e,
            ConfigError::OutOfRange {
                field: "mtu.max_datagram_size",
                allowed: "within 128..=65507"
            }
        );
        assert_eq!(
            e.to_string(),
            "invalid config: mtu.max_datagram_size must be within 128..=65507"
        );
        let bad = {
            let mut c = Config::default();
            c.mtu.min_datagram_size = 1199;
            c
        };
        assert!(bad.validate().is_err());
        let bad = {
            let mut c = Config::default();
            c.mtu.max_datagram_size = 1000;
            c
        };
        assert!(bad.validate().is_err(), "a ceiling below the base");
        let fixed = {
            let mut c = Config::default();
            c.mtu.max_datagram_size = 1000;
            c.mtu.discovery = false;
            c
        };
        assert_eq!(fixed.validate(), Ok(()));
        assert_eq!(fixed.base_datagram_size(), 1000);
    }
}
