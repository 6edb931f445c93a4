//! Records an endpoint's counters and gauges through the `metrics` facade, for any exporter (names in `docs/metrics.md`).
//!
//! [`Exporter`] (or [`spawn`]) starts a task that reads [`Handle::stats`] and
//! [`Handle::path`] for each peer every interval and records them with the `metrics` crate:
//! the endpoint's cumulative counts as monotonic counters ([`metrics::Counter::absolute`]),
//! sizes, largest values and path estimates as gauges. Every series carries the label
//! `node` (the endpoint's node id); some carry one more (`verdict`, `frame`, `reason`,
//! `peer`), whose values are bounded: the fields of a counter group, and at most
//! [`Exporter::max_peers`] peers. The application installs the recorder it wants (for
//! Prometheus, `metrics-exporter-prometheus`) before; without one the calls do nothing.
//!
//! ```no_run
//! # async fn run(ep: exon::Endpoint) {
//! use std::time::Duration;
//! // A recorder must be installed first (e.g. `PrometheusBuilder::install_recorder`).
//! let task = exon::metrics::spawn(ep.handle(), Duration::from_secs(1));
//! // ... the task ends by itself once the endpoint has stopped.
//! # drop(task);
//! # }
//! ```

use std::time::Duration;

use metrics::{Label, Unit};

use crate::counters::Kind as FieldKind;
use crate::endpoint::{EndpointStats, Handle};
use crate::proto::PathStats;

/// Whether a metric only grows (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A monotonic counter (its name ends in `_total`).
    Counter,
    /// A gauge.
    Gauge,
}

/// One metric the exporter records: what [`metrics()`] lists, and `docs/metrics.md`
/// documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metric {
    /// Its name (Prometheus conventions: `exon_` first, `_total` last for counters, units
    /// such as `_bytes` or `_seconds` in the name).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The label beside `node` that tells its series apart, if any.
    pub label: Option<&'static str>,
    /// What it counts or measures.
    pub help: &'static str,
}

/// Which counter struct a field belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// [`crate::proto::Stats`].
    Node,
    /// [`EndpointStats`].
    Endpoint,
    /// [`crate::proto::MtuStats`].
    Mtu,
    /// [`crate::endpoint::CookieStats`].
    Cookie,
}

/// How one field of a counter struct is exported: its group and name, the metric's name,
/// the value of its `verdict` label (the verdict counters only), its kind and help text.
struct Field(
    Group,
    &'static str,
    &'static str,
    Option<&'static str>,
    MetricKind,
    &'static str,
);

impl Field {
    fn is(&self, group: Group, field: &str) -> bool {
        self.0 == group && self.1 == field
    }
}

use MetricKind as Kind;

/// Every scalar field of the endpoint's counters, and its metric. A field missing here is
/// not exported (`every_field_has_a_metric` fails first).
const FIELDS: &[Field] = &[
    Field(Group::Node, "datagrams_in", "exon_datagrams_received_total", None, Kind::Counter, "Datagrams received (handed to the protocol core)."),
    Field(Group::Node, "datagrams_out", "exon_datagrams_sent_total", None, Kind::Counter, "Datagrams sent (produced by the protocol core)."),
    Field(Group::Node, "bytes_in", "exon_received_bytes_total", None, Kind::Counter, "Bytes of the datagrams received."),
    Field(Group::Node, "bytes_out", "exon_sent_bytes_total", None, Kind::Counter, "Bytes of the datagrams sent."),
    Field(Group::Node, "sent", "exon_messages_sent_total", None, Kind::Counter, "Messages accepted for sending."),
    Field(Group::Node, "sent_together", "exon_messages_sent_together_total", None, Kind::Counter, "Of the messages accepted for sending, those accepted in one call with the message before them (`Node::send_many`, `Node::reply_many`)."),
    Field(Group::Node, "delivered", "exon_messages_received_total", None, Kind::Counter, "Messages delivered to this endpoint, exactly once each."),
    Field(Group::Node, "taken", "exon_messages_taken_total", None, Kind::Counter, "Deliveries the application took (each is acknowledged then)."),
    Field(Group::Node, "redelivered", "exon_messages_redelivered_total", None, Kind::Counter, "Durable mode: deliveries recovered from the journal untaken after a restart and handed to the application again, flagged (`DeliveryId::is_redelivery`)."),
    Field(Group::Node, "early_dropped", "exon_early_deliveries_dropped_total", None, Kind::Counter, "Early deliveries (ETOKEN) whose sender passed their slot without storing them (it restarted before its sync): dropped, never handed over."),
    Field(Group::Node, "recovered_messages", "exon_messages_recovered_total", None, Kind::Counter, "Durable mode: messages recovered from the journal after a restart, to be sent again."),
    Field(Group::Node, "held_back", "exon_held_back_total", None, Kind::Counter, "TOKENs not delivered (and not answered), and REQSLOTS not granted, because `Config::limits.max_untaken` deliveries were waiting for the application: the sender sends them again later."),
    Field(Group::Node, "sender_restarts", "exon_sender_restarts_total", None, Kind::Counter, "REQSLOTS from a sender that restarted while this node held its record: not granted; the sender is probed, and its waiver ends the record."),
    Field(Group::Node, "slots_trimmed", "exon_slots_trimmed_total", None, Kind::Counter, "REQSLOTS granted in part: `n` above `Config::limits.max_slots_request`, or more than the record's `max_slots_per_record` left room for. The sender learns the number granted from SLOTS and asks again for the rest."),
    Field(Group::Node, "acknowledged", "exon_verdicts_total", Some("acknowledged"), Kind::Counter, "Verdicts on messages sent, by kind (`verdict`)."),
    Field(Group::Node, "in_doubt", "exon_verdicts_total", Some("in_doubt"), Kind::Counter, "Messages of ours reported in doubt: their receiver lost the incarnation they were sent under (a restart, or an eviction under pressure), or they were given up (`Node::abandon`) after a whole copy left, so delivery is unknown."),
    Field(Group::Node, "not_delivered", "exon_verdicts_total", Some("not_delivered"), Kind::Counter, "Messages of ours given up (`Node::abandon`) before any whole copy left: certainly not delivered."),
    Field(Group::Node, "retried", "exon_tokens_retried_total", None, Kind::Counter, "Tokens of ours the receiver answered with RETRY (never delivered): made again from fresh slots."),
    Field(Group::Node, "evictions", "exon_receiver_evictions_total", None, Kind::Counter, "Receiver records evicted to make room while full, before anything was delivered into them (their senders are told RETRY)."),
    Field(Group::Node, "evictions_proven", "exon_receiver_evictions_proven_total", None, Kind::Counter, "Of those, records something was delivered into, evicted because their source had been silent longest (their free slots remembered: late TOKENs get RETRY)."),
    Field(Group::Node, "reassembled", "exon_messages_reassembled_total", None, Kind::Counter, "Messages delivered that were put together from more than one FRAG."),
    Field(Group::Node, "too_large_for_peer", "exon_messages_too_large_for_peer_total", None, Kind::Counter, "Messages of ours given up because their receiver takes none that large (also counted in `not_delivered`; `Event::NotDelivered`)."),
    Field(Group::Node, "partials_expired", "exon_partials_expired_total", None, Kind::Counter, "Partial messages dropped after `Config::timers.reassembly_timeout` without a new byte (their slots stay free: the sender's retransmissions still deliver them)."),
    Field(Group::Node, "retransmissions", "exon_retransmissions_total", None, Kind::Counter, "TOKEN frames sent again (after a loss was detected or the timer ran out)."),
    Field(Group::Node, "losses_detected", "exon_losses_detected_total", None, Kind::Counter, "Tokens declared lost from acknowledgements of tokens sent after them (fast loss recovery), each counted once per declaration."),
    Field(Group::Node, "spurious_losses", "exon_spurious_losses_total", None, Kind::Counter, "Losses declared by loss detection (tokens or fragments) later found spurious: the first acknowledgement came before the retransmission could have been answered (see `docs/wire.md`, \"Loss recovery and reordering\"). Each widens the reordering window."),
    Field(Group::Node, "spurious_retransmissions", "exon_spurious_retransmissions_total", None, Kind::Counter, "Of `spurious_losses`, those whose retransmission had left: datagrams sent again for nothing (the others were acknowledged before their turn came, and did not go)."),
    Field(Group::Node, "timeouts", "exon_retransmission_timeouts_total", None, Kind::Counter, "Tokens given up for lost by the retransmission timer."),
    Field(Group::Node, "tail_probes", "exon_tail_probes_total", None, Kind::Counter, "Probes sent when the retransmission timer first expired (a datagram past the congestion window, to have a loss at the end of a flight found from its ACK)."),
    Field(Group::Node, "reqslots_retransmissions", "exon_reqslots_retransmissions_total", None, Kind::Counter, "REQSLOTS frames sent again: after a timeout, or at once when tokens sent after one were acknowledged and no SLOTS came (the request or its answer was lost)."),
    Field(Group::Node, "probes", "exon_slot_probes_total", None, Kind::Counter, "Probes (SLOTS with n = 0) sent by receiver records."),
    Field(Group::Node, "duplicates_dropped", "exon_duplicates_dropped_total", None, Kind::Counter, "TOKEN frames that found no slot (already delivered, or stale): acknowledged, not delivered."),
    Field(Group::Node, "stale_slots", "exon_stale_slots_total", None, Kind::Counter, "SLOTS frames ignored because they answered an older request."),
    Field(Group::Node, "stale_acks", "exon_stale_acks_total", None, Kind::Counter, "ACK ranges that removed no token (duplicate or stale acknowledgements, or ACKs for a destination with no sender record), one count per range."),
    Field(Group::Node, "incarnations", "exon_receiver_incarnations_total", None, Kind::Counter, "Receiver records created (each is a new incarnation)."),
    Field(Group::Node, "idle_discards", "exon_sender_idle_discards_total", None, Kind::Counter, "Sender records discarded after their idle timeout."),
    Field(Group::Node, "unsealable", "exon_unsealable_datagrams_total", None, Kind::Counter, "Datagrams dropped at sealing because no key was known for their destination."),
    Field(Group::Node, "deaf_datagrams", "exon_deaf_datagrams_total", None, Kind::Counter, "Datagrams sent to deaf peers (unanswered for `2 * max_rto`), one at a time on their backed-off schedule."),
    Field(Group::Node, "deaf_waits", "exon_deaf_waits_total", None, Kind::Counter, "Times a deaf peer had something to send and waited for its turn."),
    Field(Group::Node, "acks_held_for_tokens", "exon_acks_held_for_tokens_total", None, Kind::Counter, "Times ACKs owed to a peer waited for tokens the pacer was about to let go to it, to ride in their datagram (`AckConfig::ride_paced_tokens`)."),
    Field(Group::Node, "pinned_deliveries", "exon_pinned_deliveries_total", None, Kind::Counter, "Deliveries handed over as slices of a receive buffer much larger than their payload, within the zero-copy budget (`Node::set_receive_buffer`)."),
    Field(Group::Node, "copied_deliveries", "exon_copied_deliveries_total", None, Kind::Counter, "Deliveries copied out of a much larger receive buffer, the zero-copy budget spent."),
    Field(Group::Node, "largest_datagram_out", "exon_largest_datagram_sent_bytes", None, Kind::Gauge, "The largest datagram `poll_transmit` produced, in bytes (path MTU discovery at work)."),
    Field(Group::Endpoint, "unknown_peer_drops", "exon_unknown_peer_drops_total", None, Kind::Counter, "Datagrams not sent because the destination node's address is unknown."),
    Field(Group::Endpoint, "send_errors", "exon_send_errors_total", None, Kind::Counter, "Socket send errors (counted, never fatal), other than `oversize_drops`."),
    Field(Group::Endpoint, "oversize_drops", "exon_oversize_drops_total", None, Kind::Counter, "Datagrams the socket refused as larger than the path or interface carries (EMSGSIZE: the socket forbids fragmentation): MTU probes above the path MTU, or datagrams past a path that shrank. Lost like any datagram, never fatal."),
    Field(Group::Endpoint, "recv_errors", "exon_recv_errors_total", None, Kind::Counter, "Socket receive errors, such as ICMP port unreachable (counted, never fatal)."),
    Field(Group::Endpoint, "address_updates", "exon_address_updates_total", None, Kind::Counter, "Peer addresses learned or changed from incoming datagrams: a first address, or a move to a candidate address that answered its challenge."),
    Field(Group::Endpoint, "path_challenges", "exon_path_challenges_total", None, Kind::Counter, "Challenges sent in datagrams of their own: to candidate addresses (a peer's authenticated datagrams came from an address other than the one it proved, which must answer there before the peer's datagrams go to it), and repeats of a first address's challenge while it is unanswered."),
    Field(Group::Endpoint, "keepalives", "exon_keepalives_total", None, Kind::Counter, "Keepalives (a datagram holding PING alone) sent to servers that calls wait for a reply from while nothing came from them for a second, then two, four and eight: the server learns where the caller is now (a NAT may have moved it)."),
    Field(Group::Endpoint, "path_responses", "exon_path_responses_total", None, Kind::Counter, "Answers to peers' path challenges sent again in datagrams of their own, a few times after each challenge, in case the answer in the next datagram was lost."),
    Field(Group::Endpoint, "address_book_full", "exon_address_book_full_total", None, Kind::Counter, "Authenticated datagrams whose source address was not recorded because the address book was full of peers with work in progress."),
    Field(Group::Endpoint, "amplification_drops", "exon_amplification_drops_total", None, Kind::Counter, "Datagrams not sent because their destination's address is not validated yet and had three times the bytes it sent (anti-amplification); repaired like losses."),
    Field(Group::Endpoint, "peer_addresses", "exon_peer_addresses", None, Kind::Gauge, "Peer addresses held now: those set with `add_peer`, and those learned from peers the node holds a record for."),
    Field(Group::Endpoint, "delivery_stalls", "exon_delivery_stalls_total", None, Kind::Counter, "Times the endpoint stopped reading the socket because the application was not reading delivered messages."),
    Field(Group::Endpoint, "send_calls", "exon_send_calls_total", None, Kind::Counter, "Socket send calls: with segmentation offload one call sends several datagrams (compare with `node.datagrams_out`)."),
    Field(Group::Endpoint, "recv_calls", "exon_recv_calls_total", None, Kind::Counter, "Socket receive calls that returned datagrams: with batched receives one call returns several (compare with `node.datagrams_in`)."),
    Field(Group::Endpoint, "forwarded", "exon_forwarded_datagrams_total", None, Kind::Counter, "Datagrams a shard received for a peer another shard owns, and handed to that shard (sharded endpoints only, see `EndpointConfig::shards`)."),
    Field(Group::Endpoint, "forward_drops", "exon_forward_drops_total", None, Kind::Counter, "Datagrams a shard could not hand to the owning shard because its queue was full (dropped, as the network may; repaired like losses)."),
    Field(Group::Endpoint, "shards", "exon_shards", None, Kind::Gauge, "Driver shards whose counters these are (1 unless the endpoint is sharded)."),
    Field(Group::Endpoint, "journal_commits", "exon_journal_commits_total", None, Kind::Counter, "Durable mode: group commits of the journal (one sync each)."),
    Field(Group::Endpoint, "journal_writes", "exon_journal_writes_total", None, Kind::Counter, "Durable mode: journal records written (divided by `journal_commits`: the group commit's batch)."),
    Field(Group::Endpoint, "journal_written_bytes", "exon_journal_written_bytes_total", None, Kind::Counter, "Durable mode: the encoded bytes of the journal records written (record framing left out): divided by the messages, what the journal costs per message."),
    Field(Group::Endpoint, "journal_bytes", "exon_journal_bytes", None, Kind::Gauge, "Durable mode: bytes the journal takes on disk (at the last commit)."),
    Field(Group::Endpoint, "replies_discarded", "exon_replies_discarded_total", None, Kind::Counter, "Replies that came for calls no longer waiting (their future was dropped, or their deadline passed first), or from a node other than the one called: taken and discarded."),
    Field(Group::Endpoint, "replies_resent", "exon_replies_resent_total", None, Kind::Counter, "Server side: replies told in doubt (their caller restarted and lost the incarnation whose envelope carried them) and sent once more, as messages of their own; a caller that had the first copy discards the second."),
    Field(Group::Endpoint, "envelope_errors", "exon_envelope_errors_total", None, Kind::Counter, "Messages from authenticated peers that were not a valid envelope (a peer that does not speak this endpoint's message format): taken and discarded."),
    Field(Group::Endpoint, "requests_held", "exon_requests_held", None, Kind::Gauge, "Requests delivered and held because no server runs (`Handle::serve`)."),
    Field(Group::Endpoint, "streams_open", "exon_streams_open", None, Kind::Gauge, "Streams open at the driver now (a side still receiving)."),
    Field(Group::Endpoint, "stream_resets", "exon_stream_resets_total", None, Kind::Counter, "Streams aborted by their peer, or reset here because their peer's chunk named a stream not known here (closed, or from before a restart)."),
    Field(Group::Endpoint, "unordered", "exon_unordered_deliveries_total", None, Kind::Counter, "Channel messages delivered outside their channel's order (`Kind::Unordered`)."),
    Field(Group::Endpoint, "beyond_window", "exon_beyond_window_total", None, Kind::Counter, "Ordered messages that arrived at or beyond their flow's next number due plus this endpoint's window (a sender that ignores the window it was told): held untaken for their turn like any message ahead of it, never taken and dropped."),
    Field(Group::Endpoint, "run_queries", "exon_run_queries_total", None, Kind::Counter, "Questions sent to the senders of channels and streams about runs stalled here (`FlowConfig::stall_query_after`)."),
    Field(Group::Endpoint, "runs_over", "exon_runs_over_total", None, Kind::Counter, "Runs of channels and streams to this endpoint ended on their sender's answer that they are over (it restarted without a journal): what a channel held of one went out `Kind::Unordered`, a stream broke with `ConnectionReset`."),
    Field(Group::Endpoint, "notes_waiting", "exon_notes_waiting", None, Kind::Gauge, "Flows' notes (resets, questions about runs and their answers, windows) waiting now for room in the core's queue to their destination."),
    Field(Group::Endpoint, "notes_dropped", "exon_notes_dropped_total", None, Kind::Counter, "Flows' notes dropped because too many waited for room to their destination already (64 to one, 1 024 in all)."),
    Field(Group::Endpoint, "channels_full", "exon_channels_full_total", None, Kind::Counter, "Channel messages left undelivered because `FlowConfig::max_channels` channels were known, or (durable mode) no room was left for their channel's position (`Limits::max_marks`): held untaken."),
    Field(Group::Mtu, "probes_sent", "exon_mtu_probes_sent_total", None, Kind::Counter, "MTU_PROBE datagrams sent (search, confirmation and base-size companion probes)."),
    Field(Group::Mtu, "probes_acked", "exon_mtu_probes_acked_total", None, Kind::Counter, "Probes answered by an MTU_ACK in time."),
    Field(Group::Mtu, "probes_lost", "exon_mtu_probes_lost_total", None, Kind::Counter, "Probes unanswered when their time ran out."),
    Field(Group::Mtu, "black_hole_fallbacks", "exon_mtu_black_hole_fallbacks_total", None, Kind::Counter, "Times a destination's size failed its confirmation (a black hole): its datagrams fell back to the base size and the search started again."),
    Field(Group::Cookie, "replies_sent", "exon_cookie_replies_sent_total", None, Kind::Counter, "COOKIE_REPLYs sent: datagrams refused for want of key-agreement budget, answered."),
    Field(Group::Cookie, "replies_limited", "exon_cookie_replies_limited_total", None, Kind::Counter, "Such datagrams not answered: their source's or the endpoint's reply limit was spent, the reply would not have been smaller than the datagram, or the queue of replies was full."),
    Field(Group::Cookie, "vouched", "exon_cookie_vouched_total", None, Kind::Counter, "Datagrams whose valid cookie vouched for their source address."),
    Field(Group::Cookie, "vouch_limited", "exon_cookie_vouch_limited_total", None, Kind::Counter, "Datagrams with a valid cookie whose source address had spent its limit (handled as unproven)."),
    Field(Group::Cookie, "bad_cookies", "exon_cookie_bad_cookies_total", None, Kind::Counter, "Datagrams with a cookie that is not valid for their source address (handled as unproven)."),
    Field(Group::Cookie, "replies_taken", "exon_cookie_replies_taken_total", None, Kind::Counter, "COOKIE_REPLYs received and taken (their cookie now goes in datagrams to the peer)."),
    Field(Group::Cookie, "replies_dropped", "exon_cookie_replies_dropped_total", None, Kind::Counter, "COOKIE_REPLYs received and dropped: malformed, for another node, from an address this endpoint does not send the peer to, or for a peer it sends nothing to."),
];

/// Counter groups exported as one metric with a label naming the field.
const LABELED: &[Metric] = &[
    metric(
        "exon_frames_received_total",
        Kind::Counter,
        Some("frame"),
        "Frames received in accepted datagrams, by frame type (`frame`: token, ack, slots, ...).",
    ),
    metric(
        "exon_frames_sent_total",
        Kind::Counter,
        Some("frame"),
        "Frames sent, by frame type (`frame`).",
    ),
    metric(
        "exon_rejects_total",
        Kind::Counter,
        Some("reason"),
        "Datagrams and frames the network sent that were refused, by reason (`reason`: bad_tag, unknown_peer, truncated, ...).",
    ),
];

/// Gauges computed from the counters and the handle.
const DERIVED: &[Metric] = &[
    metric(
        "exon_deliveries_waiting",
        Kind::Gauge,
        None,
        "Messages delivered to this endpoint and not yet taken by the application (its receive queue).",
    ),
    metric(
        "exon_messages_awaiting_verdict",
        Kind::Gauge,
        None,
        "Messages accepted for sending with no verdict yet (its send queue and flight).",
    ),
    metric(
        "exon_peers",
        Kind::Gauge,
        None,
        "Peers this endpoint has an address for.",
    ),
    metric(
        "exon_peers_unreachable",
        Kind::Gauge,
        None,
        "Peers with messages waiting that sent nothing back for `unreachable_after`.",
    ),
];

/// Per-peer gauges, from [`Handle::path`] (label `peer`: the peer's node id).
const PATH: &[Metric] = &[
    metric(
        "exon_path_active",
        Kind::Gauge,
        Some("peer"),
        "1 while this endpoint holds a sender record for the peer (the other `exon_path_` gauges are current), 0 otherwise (they keep their last values).",
    ),
    metric(
        "exon_path_rtt_seconds",
        Kind::Gauge,
        Some("peer"),
        "Smoothed round-trip time to the peer.",
    ),
    metric(
        "exon_path_rtt_variation_seconds",
        Kind::Gauge,
        Some("peer"),
        "Variation of the round-trip time (RFC 6298's RTTVAR).",
    ),
    metric(
        "exon_path_min_rtt_seconds",
        Kind::Gauge,
        Some("peer"),
        "Smallest round-trip time seen (BBR only).",
    ),
    metric(
        "exon_path_congestion_window_bytes",
        Kind::Gauge,
        Some("peer"),
        "Congestion window.",
    ),
    metric(
        "exon_path_in_flight_bytes",
        Kind::Gauge,
        Some("peer"),
        "Bytes of tokens in flight to the peer.",
    ),
    metric(
        "exon_path_pacing_rate_bytes_per_second",
        Kind::Gauge,
        Some("peer"),
        "Pacing rate (0 when not paced).",
    ),
    metric(
        "exon_path_bandwidth_bytes_per_second",
        Kind::Gauge,
        Some("peer"),
        "Estimated bottleneck bandwidth (BBR only).",
    ),
    metric(
        "exon_path_datagram_bytes",
        Kind::Gauge,
        Some("peer"),
        "Size of the datagrams sent to the peer now (path MTU discovery's).",
    ),
    metric(
        "exon_path_slots",
        Kind::Gauge,
        Some("peer"),
        "Slots held at the peer: envelopes plus unacknowledged tokens.",
    ),
    metric(
        "exon_path_envelopes",
        Kind::Gauge,
        Some("peer"),
        "Slots granted by the peer and not yet used by a token.",
    ),
    metric(
        "exon_path_slot_window",
        Kind::Gauge,
        Some("peer"),
        "Flow-control window: the most slots the sender holds at the peer.",
    ),
];

const fn metric(
    name: &'static str,
    kind: MetricKind,
    label: Option<&'static str>,
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        label,
        help,
    }
}

/// Every metric the exporter records, each name once, in a stable order.
pub fn metrics() -> Vec<Metric> {
    let mut all: Vec<Metric> = Vec::new();
    for Field(_, _, name, verdict, kind, help) in FIELDS {
        if all.iter().any(|m| m.name == *name) {
            continue;
        }
        all.push(metric(name, *kind, verdict.map(|_| "verdict"), help));
    }
    all.extend_from_slice(LABELED);
    all.extend_from_slice(DERIVED);
    all.extend_from_slice(PATH);
    all
}

/// The unit a metric's name says, for its description.
fn unit_of(name: &str) -> Option<Unit> {
    if name.ends_with("_bytes_per_second") {
        // `metrics` has no such unit: the name says it.
        None
    } else if name.contains("_seconds") {
        Some(Unit::Seconds)
    } else if name.contains("_bytes") {
        Some(Unit::Bytes)
    } else {
        None
    }
}

/// Describes every metric to the installed recorder (help text and unit; Prometheus shows
/// them as `# HELP` lines). [`Exporter::spawn`] calls it; call it yourself when recording
/// with [`Exporter::record`].
pub fn describe() {
    for m in metrics() {
        match (m.kind, unit_of(m.name)) {
            (Kind::Counter, Some(u)) => metrics::describe_counter!(m.name, u, m.help),
            (Kind::Counter, None) => metrics::describe_counter!(m.name, m.help),
            (Kind::Gauge, Some(u)) => metrics::describe_gauge!(m.name, u, m.help),
            (Kind::Gauge, None) => metrics::describe_gauge!(m.name, m.help),
        }
    }
}

/// Records an endpoint's counters and gauges, every interval or when asked.
#[derive(Debug, Clone)]
pub struct Exporter {
    handle: Handle,
    interval: Duration,
    max_peers: usize,
}

/// Peers with series of their own, by default ([`Exporter::max_peers`]).
pub const DEFAULT_MAX_PEERS: usize = 32;

impl Exporter {
    /// An exporter of `handle`'s endpoint, every second, for up to [`DEFAULT_MAX_PEERS`]
    /// peers.
    pub fn new(handle: Handle) -> Exporter {
        Exporter {
            handle,
            interval: Duration::from_secs(1),
            max_peers: DEFAULT_MAX_PEERS,
        }
    }

    /// Records every `interval` (at least 10 ms) in [`spawn`](Self::spawn).
    pub fn interval(mut self, interval: Duration) -> Exporter {
        self.interval = interval.max(Duration::from_millis(10));
        self
    }

    /// Records path gauges for at most `n` peers (those with the lowest node ids among
    /// the peers the endpoint has an address for), so that the number of series stays
    /// bounded however many peers talk to it.
    pub fn max_peers(mut self, n: usize) -> Exporter {
        self.max_peers = n;
        self
    }

    /// Reads the counters and the paths once and records them. False once the endpoint
    /// has stopped (nothing recorded).
    pub async fn record(&self) -> bool {
        let Some(stats) = self.handle.stats().await else {
            return false;
        };
        let node = self.handle.id().get().to_string();
        record_stats(&node, &stats);
        let peers = self.handle.peers();
        let unreachable = self.handle.unreachable_peers().borrow().len();
        gauge(&node, "exon_peers", None, peers.len() as f64);
        gauge(&node, "exon_peers_unreachable", None, unreachable as f64);
        for peer in peers.into_iter().take(self.max_peers) {
            let path = self.handle.path(peer).await;
            record_path(&node, peer.get(), path.as_ref());
        }
        true
    }

    /// Describes the metrics ([`describe`]) and starts a task that records them every
    /// interval until the endpoint stops. Must be called inside a tokio runtime.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            describe();
            let mut tick = tokio::time::interval(self.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !self.record().await {
                    break;
                }
            }
        })
    }
}

/// Starts recording `handle`'s metrics every `interval` ([`Exporter::spawn`] with the
/// defaults otherwise); the task ends once the endpoint has stopped.
pub fn spawn(handle: Handle, interval: Duration) -> tokio::task::JoinHandle<()> {
    Exporter::new(handle).interval(interval).spawn()
}

fn labels(node: &str, extra: Option<(&'static str, String)>) -> Vec<Label> {
    let mut v = vec![Label::new("node", node.to_string())];
    if let Some((k, val)) = extra {
        v.push(Label::new(k, val));
    }
    v
}

fn counter(node: &str, name: &'static str, extra: Option<(&'static str, String)>, value: u64) {
    metrics::counter!(name, labels(node, extra)).absolute(value);
}

fn gauge(node: &str, name: &'static str, extra: Option<(&'static str, String)>, value: f64) {
    metrics::gauge!(name, labels(node, extra)).set(value);
}

/// Records one scalar field of `group`.
fn record_field(node: &str, group: Group, name: &str, value: u64) {
    let Some(Field(_, _, metric, verdict, kind, _)) = FIELDS.iter().find(|f| f.is(group, name))
    else {
        return;
    };
    let extra = verdict.map(|v| ("verdict", v.to_string()));
    match kind {
        Kind::Counter => counter(node, metric, extra, value),
        Kind::Gauge => gauge(node, metric, extra, value as f64),
    }
}

/// Records the fields of one labeled group as `name{label=field}`.
fn record_labeled(
    node: &str,
    name: &'static str,
    label: &'static str,
    visit: impl FnOnce(&mut dyn FnMut(&'static str, u64, FieldKind)),
) {
    visit(&mut |field, value, _| counter(node, name, Some((label, field.to_string())), value));
}

fn record_stats(node: &str, s: &EndpointStats) {
    let n = &s.node;
    n.visit(&mut |f, v, _| record_field(node, Group::Node, f, v));
    s.visit(&mut |f, v, _| record_field(node, Group::Endpoint, f, v));
    n.mtu
        .visit(&mut |f, v, _| record_field(node, Group::Mtu, f, v));
    s.cookies
        .visit(&mut |f, v, _| record_field(node, Group::Cookie, f, v));
    record_labeled(node, "exon_frames_received_total", "frame", |f| {
        n.frames_in.visit(f)
    });
    record_labeled(node, "exon_frames_sent_total", "frame", |f| {
        n.frames_out.visit(f)
    });
    record_labeled(node, "exon_rejects_total", "reason", |f| n.rejects.visit(f));
    let waiting = n.delivered.saturating_sub(n.taken);
    gauge(node, "exon_deliveries_waiting", None, waiting as f64);
    let settled = n.acknowledged + n.in_doubt + n.not_delivered;
    let awaiting = n.sent.saturating_sub(settled);
    gauge(
        node,
        "exon_messages_awaiting_verdict",
        None,
        awaiting as f64,
    );
}

fn record_path(node: &str, peer: u64, path: Option<&PathStats>) {
    let set =
        |name: &'static str, value: f64| gauge(node, name, Some(("peer", peer.to_string())), value);
    let Some(p) = path else {
        set("exon_path_active", 0.0);
        return;
    };
    let secs = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64());
    set("exon_path_active", 1.0);
    set("exon_path_rtt_seconds", secs(p.srtt));
    set("exon_path_rtt_variation_seconds", secs(p.rtt_var));
    set("exon_path_min_rtt_seconds", secs(p.min_rtt));
    set("exon_path_congestion_window_bytes", p.window as f64);
    set("exon_path_in_flight_bytes", p.in_flight as f64);
    set(
        "exon_path_pacing_rate_bytes_per_second",
        p.pacing_rate.unwrap_or(0) as f64,
    );
    set(
        "exon_path_bandwidth_bytes_per_second",
        p.bandwidth.unwrap_or(0) as f64,
    );
    set("exon_path_datagram_bytes", p.datagram as f64);
    set("exon_path_slots", p.slots as f64);
    set("exon_path_envelopes", p.envelopes as f64);
    set("exon_path_slot_window", p.slot_window as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scalar field of every counter struct has its metric: a counter added to the
    /// endpoint is exported, or this fails.
    #[test]
    fn every_field_has_a_metric() {
        let s = EndpointStats::default();
        let mut seen: Vec<(Group, &'static str, FieldKind)> = Vec::new();
        s.node.visit(&mut |f, _, k| seen.push((Group::Node, f, k)));
        s.visit(&mut |f, _, k| seen.push((Group::Endpoint, f, k)));
        s.node
            .mtu
            .visit(&mut |f, _, k| seen.push((Group::Mtu, f, k)));
        s.cookies
            .visit(&mut |f, _, k| seen.push((Group::Cookie, f, k)));
        assert!(seen.len() > 60, "{} fields", seen.len());
        let mut missing = Vec::new();
        for &(group, name, kind) in &seen {
            match FIELDS.iter().find(|x| x.is(group, name)) {
                None => missing.push(format!("{group:?}.{name}")),
                // Sizes and largest values are never exported as counters.
                Some(x) if kind == FieldKind::Gauge && x.4 == Kind::Counter => {
                    missing.push(format!("{group:?}.{name} exported as a counter"))
                }
                Some(_) => {}
            }
        }
        assert!(missing.is_empty(), "fields without a metric: {missing:?}");
        for f in FIELDS {
            let known = seen.iter().any(|&(g, n, _)| f.is(g, n));
            assert!(known, "{:?}.{} is no field", f.0, f.1);
        }
    }

    /// Names follow Prometheus' conventions: `exon_` first, counters end in `_total`,
    /// gauges do not, and every name is documented in `docs/metrics.md`.
    #[test]
    fn names_follow_the_conventions_and_are_documented() {
        let doc = include_str!("../../docs/metrics.md");
        for m in metrics() {
            assert!(m.name.starts_with("exon_"), "{}", m.name);
            assert!(
                m.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                m.name
            );
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            assert!(
                doc.contains(&format!("`{}`", m.name)),
                "{} not in docs/metrics.md",
                m.name
            );
        }
    }
}
