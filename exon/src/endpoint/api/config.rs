//! Endpoint configuration: the protocol's [`Config`] plus the driver's own tunables.

use std::time::Duration;

use crate::proto::Config;

/// Configuration of an [`Endpoint`](crate::endpoint::Endpoint). Every field has a documented default;
/// build it with the `with_*` methods, by setting fields of `EndpointConfig::default()` (the
/// struct is `#[non_exhaustive]`: it will grow), or deserialize it (feature `serde`: missing
/// fields take their defaults, unknown fields are refused, durations are text such as
/// `"250ms"` or `"5s"`).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct EndpointConfig {
    /// The protocol core's configuration. Default [`Config::default()`].
    pub protocol: Config,
    /// Delivered messages buffered for the application before the endpoint stops reading the
    /// socket (backpressure instead of dropping). Default 1024.
    pub delivery_buffer: usize,
    /// Datagrams sent per driver turn before the driver looks at other inputs again, so one
    /// busy peer cannot starve the rest. Default 256.
    pub transmit_budget: usize,
    /// Sends handed to the driver without waiting for its answer and not yet taken by it
    /// (see [`Handle::send`](crate::endpoint::Handle::send)); a send beyond waits for the driver.
    /// Default 256: enough to keep the driver busy, and few enough that the payloads it
    /// copies into datagrams are still in the processor's cache (1024 was 5-30 % slower
    /// one-way on loopback).
    pub send_buffer: usize,
    /// How long an endpoint whose handles were all dropped keeps running to get its
    /// outstanding messages acknowledged. Default 5 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub linger: Duration,
    /// Delay before retrying a clock store that failed. Default 100 ms.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub store_retry: Duration,
    /// Deadline of every send that does not give its own
    /// ([`Handle::send_within`](crate::endpoint::Handle::send_within)): when it passes before the
    /// message is acknowledged, the endpoint gives the message up and its receipt resolves
    /// with [`ReceiptError::NotDelivered`](crate::endpoint::ReceiptError::NotDelivered) (no copy ever
    /// left) or [`ReceiptError::InDoubt`](crate::endpoint::ReceiptError::InDoubt). Default `None`:
    /// messages are retried until acknowledged, across link failures of any length.
    pub default_deadline: Option<Duration>,
    /// Deadline of every call that does not give its own
    /// ([`Handle::call`](crate::endpoint::Handle::call) against
    /// [`Handle::call_within`](crate::endpoint::Handle::call_within)): the request is given up at it
    /// if not acknowledged, and the call waits for the reply until then (see
    /// [`CallError`](crate::rpc::CallError)). Default 30 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub call_deadline: Duration,
    /// Acknowledge a message only when the application calls
    /// [`Message::ack`](crate::endpoint::Message::ack) (after processing it), instead of when it takes
    /// it from [`recv`](crate::endpoint::Endpoint::recv). Messages taken and not yet acknowledged count
    /// against [`Config::limits.max_untaken`](crate::proto::Limits::max_untaken), and once that many wait the endpoint grants no new
    /// slots: a slow consumer slows its senders down instead of growing memory. Default
    /// false.
    pub ack_after_processing: bool,
    /// How long a peer address learned from the network (not set with `add_peer`) is kept
    /// after the node holds no record for the peer and has heard nothing from it: long
    /// enough for a reply that comes a while after the last exchange, short enough that
    /// forged or one-off peers do not accumulate (the address book is also bounded).
    /// Default 60 s.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub learned_address_ttl: Duration,
    /// Driver shards of the endpoint ([`Endpoint::bind`](crate::endpoint::Endpoint::bind) and
    /// [`Builder::bind`](crate::endpoint::Builder::bind)): each is a task with its own protocol node,
    /// socket (`SO_REUSEPORT`, all bound to the same address) and share of the peers (a
    /// fixed hash of the peer's node id), so that one endpoint can use several cores on a
    /// multi-thread runtime. On Linux the kernel hands each datagram to its owner's socket
    /// (a steering program on the group); one that lands elsewhere is passed on. Default 1 (one driver task, one socket). Ignored by
    /// [`Builder::with_socket`](crate::endpoint::Builder::with_socket) (one shard), and replaced by
    /// the number of sockets given to [`Builder::with_sockets`](crate::endpoint::Builder::with_sockets).
    pub shards: usize,
    /// Receive and send buffer size asked of the kernel for each socket the endpoint starts
    /// on: bound ([`Endpoint::bind`](crate::endpoint::Endpoint::bind),
    /// [`Builder::bind`](crate::endpoint::Builder::bind)) or given (`with_socket`,
    /// `with_sockets`: through [`DatagramSocket::set_buffer_sizes`](crate::endpoint::DatagramSocket::set_buffer_sizes),
    /// which tokio's `UdpSocket` and `BatchSocket` implement; set `None` to keep a given
    /// socket's own buffers). The kernel's default receive buffer (about
    /// 208 KiB on Linux) holds about 140 full-size datagrams or 3 of 64 KiB: a burst beyond
    /// it is dropped and sent again. Linux caps what is granted at `net.core.rmem_max` and
    /// `net.core.wmem_max`; a system that refuses the size keeps its default (with a
    /// warning). `None` keeps the kernel's defaults. Default 4 MiB.
    pub socket_buffer: Option<usize>,
    /// Ordered channels and streams: windows, chunks, limits. Default
    /// [`FlowConfig::default()`](crate::endpoint::FlowConfig).
    pub flows: crate::endpoint::FlowConfig,
    /// Test builds only (feature `rule-switches`): whether a sealed peer's address moves
    /// only to an address that answered a challenge sent there (`docs/security.md`). Off,
    /// a fresher authenticated datagram from a new address moves the peer at once, and an
    /// observer racing copies of its datagrams steals the conversation. Default true.
    #[cfg(feature = "rule-switches")]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub moves_need_an_answer: bool,
    /// Test builds only (feature `rule-switches`): whether this node sends its answer to a
    /// peer's path challenge again on a timer of its own (`paths/answers.rs`). Off, the
    /// answer goes once, in the next datagram to the peer, and if it is lost the peer's
    /// datagrams to this node stay within three times what it received from it until it
    /// challenges again and the answer gets through. Default true.
    #[cfg(feature = "rule-switches")]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub answers_repeated: bool,
    /// Test builds only (feature `rule-switches`): whether a caller sends keepalives (PING)
    /// to a server its calls wait for, and a stream's reader to its writer, while nothing
    /// comes from it (`paths/keepalive.rs`). Off, a caller whose requests were acknowledged
    /// sends nothing until its replies come, and a server whose datagrams no longer reach it
    /// (a NAT moved it) never learns where it went: the calls end `NoReply`, and a stream
    /// whose reader had nothing to send stalls. Default true.
    #[cfg(feature = "rule-switches")]
    #[cfg_attr(feature = "serde", serde(skip))]
    pub keepalives: bool,
    /// The rules in force (all, except in tests built with the `rule-switches` feature).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) rules: crate::proto::Rules,
}

/// The default [`EndpointConfig::socket_buffer`]: 4 MiB.
pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            protocol: Config::default(),
            delivery_buffer: 1024,
            transmit_budget: 256,
            send_buffer: 256,
            linger: Duration::from_secs(5),
            store_retry: Duration::from_millis(100),
            default_deadline: None,
            call_deadline: Duration::from_secs(30),
            ack_after_processing: false,
            learned_address_ttl: Duration::from_secs(60),
            shards: 1,
            socket_buffer: Some(DEFAULT_SOCKET_BUFFER),
            flows: crate::endpoint::FlowConfig::default(),
            #[cfg(feature = "rule-switches")]
            moves_need_an_answer: true,
            #[cfg(feature = "rule-switches")]
            answers_repeated: true,
            #[cfg(feature = "rule-switches")]
            keepalives: true,
            rules: crate::proto::Rules::ALL,
        }
    }
}

impl EndpointConfig {
    /// Turns rules off in the endpoint's nodes and driver, to show what each one prevents.
    /// Test builds only.
    #[cfg(feature = "rule-switches")]
    pub fn with_rules(mut self, rules: crate::proto::Rules) -> Self {
        self.rules = rules;
        self
    }

    /// Sets the protocol configuration.
    pub fn with_protocol(mut self, protocol: Config) -> Self {
        self.protocol = protocol;
        self
    }

    /// Sets [`delivery_buffer`](Self::delivery_buffer) (at least 1).
    pub fn with_delivery_buffer(mut self, n: usize) -> Self {
        self.delivery_buffer = n.max(1);
        self
    }

    /// Sets [`transmit_budget`](Self::transmit_budget) (at least 1).
    pub fn with_transmit_budget(mut self, n: usize) -> Self {
        self.transmit_budget = n.max(1);
        self
    }

    /// Sets [`send_buffer`](Self::send_buffer) (at least 1).
    pub fn with_send_buffer(mut self, n: usize) -> Self {
        self.send_buffer = n.max(1);
        self
    }

    /// Sets [`linger`](Self::linger).
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Sets [`call_deadline`](Self::call_deadline).
    pub fn with_call_deadline(mut self, d: Duration) -> Self {
        self.call_deadline = d;
        self
    }

    /// Sets [`default_deadline`](Self::default_deadline).
    pub fn with_default_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.default_deadline = deadline;
        self
    }

    /// Sets [`ack_after_processing`](Self::ack_after_processing).
    pub fn with_ack_after_processing(mut self, on: bool) -> Self {
        self.ack_after_processing = on;
        self
    }

    /// Sets [`shards`](Self::shards) (at least 1).
    pub fn with_shards(mut self, n: usize) -> Self {
        self.shards = n.max(1);
        self
    }

    /// Fixes the size of datagrams: sets the protocol's `max_datagram_size` (see
    /// [`Config::mtu.max_datagram_size`](crate::proto::MtuConfig::max_datagram_size)) and turns path MTU discovery
    /// ([`Config::mtu.discovery`](crate::proto::MtuConfig::discovery)) off, so every datagram may be `size` bytes (the path must
    /// carry them) and payloads up to what one such datagram holds are accepted. To keep
    /// discovery and only lower its ceiling, set `protocol.mtu.max_datagram_size` instead.
    pub fn with_max_datagram_size(mut self, size: usize) -> Self {
        self.protocol.mtu.max_datagram_size = size;
        self.protocol.mtu.discovery = false;
        self
    }
}
