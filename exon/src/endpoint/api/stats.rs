//! The endpoint's public counters ([`EndpointStats`]) and what a close reports
//! ([`CloseReport`]).

use crate::counters::counters;
use crate::proto::{MsgId, NodeId, Stats};

counters! {
    /// Counters of an endpoint: the core's plus the driver's.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct EndpointStats {
        /// The protocol core's counters (sent, delivered, acknowledged, retransmissions, ...).
        pub node: Stats [nested],
        /// Datagrams not sent because the destination node's address is unknown.
        pub unknown_peer_drops: u64 [sum],
        /// Socket send errors (counted, never fatal), other than `oversize_drops`; and sends
        /// not tried because the peer's address is of a family the socket cannot reach
        /// ([`Handle::reach`](crate::endpoint::Handle::reach)).
        pub send_errors: u64 [sum],
        /// Datagrams the socket refused as larger than the path or interface carries
        /// (EMSGSIZE: the socket forbids fragmentation): MTU probes above the path MTU, or
        /// datagrams past a path that shrank. Lost like any datagram, never fatal.
        pub oversize_drops: u64 [sum],
        /// Socket receive errors, such as ICMP port unreachable (counted, never fatal).
        pub recv_errors: u64 [sum],
        /// Peer addresses learned or changed from incoming datagrams: a first address, or a
        /// move to a candidate address that answered its challenge.
        pub address_updates: u64 [sum],
        /// Challenges sent in datagrams of their own: to candidate addresses (a peer's
        /// authenticated datagrams came from an address other than the one it proved, which
        /// must answer there before the peer's datagrams go to it), and repeats of a first
        /// address's challenge while it is unanswered.
        pub path_challenges: u64 [sum],
        /// Answers to peers' challenges sent again in datagrams of their own (a few times
        /// after each challenge, in case the answer in the next datagram was lost: a
        /// challenger that cannot validate this node's address sends it no more than three
        /// times what it received from it).
        pub path_responses: u64 [sum],
        /// Keepalives (a datagram holding PING alone) sent to servers that calls wait
        /// for a reply from, to the writers of streams read, or to peers kept reachable
        /// (`Handle::keep_reachable`), while nothing came from them (`paths/keepalive.rs`).
        pub keepalives: u64 [sum],
        /// Authenticated datagrams whose source address was not recorded because the address
        /// book was full of peers with work in progress.
        pub address_book_full: u64 [sum],
        /// Datagrams not sent because their destination's address is not validated yet and had
        /// three times the bytes it sent (anti-amplification); repaired like losses.
        pub amplification_drops: u64 [sum],
        /// Peer addresses held now: those set with `add_peer`, and those learned from peers
        /// the node holds a record for.
        pub peer_addresses: usize [size],
        /// Times the endpoint stopped reading the socket because the application was not
        /// reading delivered messages.
        pub delivery_stalls: u64 [sum],
        /// Socket send calls: with segmentation offload one call sends several datagrams
        /// (compare with `node.datagrams_out`).
        pub send_calls: u64 [sum],
        /// Socket receive calls that returned datagrams: with batched receives one call returns
        /// several (compare with `node.datagrams_in`).
        pub recv_calls: u64 [sum],
        /// Datagrams a shard received for a peer another shard owns, and handed to that shard
        /// (sharded endpoints only, see [`EndpointConfig::shards`](crate::endpoint::EndpointConfig::shards)).
        pub forwarded: u64 [sum],
        /// Datagrams a shard could not hand to the owning shard because its queue was full
        /// (dropped, as the network may; repaired like losses).
        pub forward_drops: u64 [sum],
        /// The cookie exchange under load (`docs/security.md`).
        pub cookies: crate::endpoint::paths::cookies::CookieStats [nested],
        /// Driver shards whose counters these are (1 unless the endpoint is sharded).
        pub shards: usize [size],
        /// Durable mode: group commits of the journal (one sync each).
        pub journal_commits: u64 [sum],
        /// Durable mode: journal records written (divided by `journal_commits`: the group
        /// commit's batch).
        pub journal_writes: u64 [sum],
        /// Durable mode: the encoded bytes of those records (each record's framing, 9 bytes,
        /// left out): divided by the messages, what the journal costs per message.
        pub journal_written_bytes: u64 [sum],
        /// Durable mode: bytes the journal takes on disk (at the last commit).
        pub journal_bytes: u64 [sum],
        /// Replies that came for calls no longer waiting (their future was dropped, or their
        /// deadline passed first), or from a node other than the one called: taken and
        /// discarded.
        pub replies_discarded: u64 [sum],
        /// Server side: replies told in doubt (their caller restarted and lost the
        /// incarnation whose envelope carried them) and sent once more, as messages of
        /// their own; a caller that had the first copy discards the second.
        pub replies_resent: u64 [sum],
        /// Messages from authenticated peers that were not a valid envelope (a peer that
        /// does not speak this endpoint's message format): taken and discarded.
        pub envelope_errors: u64 [sum],
        /// Requests delivered and held because no server runs ([`Handle::serve`](crate::endpoint::Handle::serve)).
        pub requests_held: usize [size],
        /// Streams open at the driver now (a side still receiving).
        pub streams_open: usize [size],
        /// Streams aborted by their peer, or reset here because their peer's chunk named
        /// a stream not known here (closed, or from before a restart).
        pub stream_resets: u64 [sum],
        /// Channel messages delivered outside their channel's order
        /// ([`Kind::Unordered`](crate::endpoint::Kind::Unordered)).
        pub unordered: u64 [sum],
        /// Ordered messages that arrived at or beyond their flow's next number due plus this
        /// endpoint's window (a sender that ignores the window it was told): held untaken
        /// for their turn like any message ahead of it, never taken and dropped.
        pub beyond_window: u64 [sum],
        /// Questions sent to the senders of channels and streams about runs stalled here
        /// ([`FlowConfig::stall_query_after`](crate::endpoint::FlowConfig::stall_query_after)).
        pub run_queries: u64 [sum],
        /// Runs of channels and streams to this endpoint ended on their sender's answer that
        /// they are over (it restarted without a journal): what a channel held of one went
        /// out [`Kind::Unordered`](crate::endpoint::Kind::Unordered), a stream broke with
        /// `ConnectionReset`.
        pub runs_over: u64 [sum],
        /// Flows' notes (resets, questions about runs and their answers, windows) waiting
        /// now for room in the core's queue to their destination.
        pub notes_waiting: usize [size],
        /// Flows' notes dropped because too many waited for room to their destination
        /// already (64 to one, 1 024 in all): a peer that takes nothing while its messages
        /// draw notes (questions, streams to reset) cannot grow that wait without bound.
        pub notes_dropped: u64 [sum],
        /// Channel messages left undelivered because
        /// [`FlowConfig::max_channels`](crate::endpoint::FlowConfig::max_channels) channels were known,
        /// or (durable mode) no room was left for their channel's position
        /// ([`Limits::max_marks`](crate::proto::Limits::max_marks)): held untaken.
        pub channels_full: u64 [sum],
    }
}

/// What [`Handle::close`](crate::endpoint::Handle::close) reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseReport {
    /// Messages accepted and not acknowledged when the endpoint stopped (empty on a clean
    /// close).
    pub unacknowledged: Vec<(NodeId, MsgId)>,
    /// Messages delivered to this endpoint that its application never took: still in the
    /// delivery buffer when the endpoint stopped (they are not handed out afterwards), or
    /// discarded because the [`Endpoint`](crate::endpoint::Endpoint) was dropped. None of them was
    /// acknowledged: their senders see them as unacknowledged or in doubt.
    pub undelivered: usize,
    /// The counters at the end.
    pub stats: EndpointStats,
}

impl CloseReport {
    /// True when every message was acknowledged and every delivery taken.
    pub fn is_clean(&self) -> bool {
        self.unacknowledged.is_empty() && self.undelivered == 0
    }
}
