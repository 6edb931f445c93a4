//! The systems under test, as the runners name them.

/// The systems compared one-way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneWayKind {
    /// Exon endpoints over loopback UDP, every datagram sealed (the default).
    Exon,
    /// Exon endpoints in the explicit plaintext mode.
    ExonPlain,
    /// One TCP connection, 4-byte length-prefixed frames.
    Tcp,
    /// The same over TLS 1.3 (rustls, AES-128-GCM): the anchor for sealed exon.
    TcpTls,
    /// One QUIC connection, one long unidirectional stream of length-prefixed frames.
    QuicStream,
    /// One QUIC connection, one unidirectional stream per message.
    QuicUni,
}

impl OneWayKind {
    /// Every system, in report order.
    pub const ALL: [OneWayKind; 6] = [
        OneWayKind::Exon,
        OneWayKind::ExonPlain,
        OneWayKind::Tcp,
        OneWayKind::TcpTls,
        OneWayKind::QuicStream,
        OneWayKind::QuicUni,
    ];

    /// The name in reports and `key=value` lines.
    pub fn name(self) -> &'static str {
        match self {
            OneWayKind::Exon => "exon",
            OneWayKind::ExonPlain => "exon_plain",
            OneWayKind::Tcp => "tcp",
            OneWayKind::TcpTls => "tcp_tls",
            OneWayKind::QuicStream => "quic",
            OneWayKind::QuicUni => "quic_uni",
        }
    }
}

/// The systems compared for request/reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    /// Exon endpoints: `Handle::call` and `Handle::serve` (request and reply are exon
    /// messages in the call envelope). (Every system: the reply echoes the request, so both
    /// have the run's size.)
    Exon,
    /// The same in the explicit plaintext mode.
    ExonPlain,
    /// One TCP connection, every caller multiplexed over it (request ids, demux map).
    Tcp,
    /// The same over TLS 1.3 (rustls, AES-128-GCM): the anchor for sealed exon.
    TcpTls,
    /// One QUIC connection, one bidirectional stream per request.
    Quic,
}

impl RpcKind {
    /// Every system, in report order.
    pub const ALL: [RpcKind; 5] = [
        RpcKind::Exon,
        RpcKind::ExonPlain,
        RpcKind::Tcp,
        RpcKind::TcpTls,
        RpcKind::Quic,
    ];

    /// The name in reports and `key=value` lines.
    pub fn name(self) -> &'static str {
        match self {
            RpcKind::Exon => "exon",
            RpcKind::ExonPlain => "exon_plain",
            RpcKind::Tcp => "tcp",
            RpcKind::TcpTls => "tcp_tls",
            RpcKind::Quic => "quic",
        }
    }
}
