//! Configuration of an endpoint's ordered channels and streams.

/// How channels and streams are sized ([`EndpointConfig::flows`](crate::endpoint::EndpointConfig::flows)).
/// Each window serves both ends of a flow: as a sender, an endpoint keeps at most its window
/// of a flow unsettled; as a receiver, it advertises its window to the flow's sender, which
/// keeps to the smaller of the two. So a flow's messages held out of order, and a stream's
/// bytes not yet read, stay below the receiver's window, whatever its peers configured.
/// Every flow to one receiver shares that
/// receiver's [`max_untaken_bytes`](crate::proto::Limits::max_untaken_bytes), and every flow
/// from one sender its
/// [`max_untaken_bytes_per_source`](crate::proto::Limits::max_untaken_bytes_per_source): keep
/// the windows of the flows that may be open at once toward one node below them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
#[non_exhaustive]
pub struct FlowConfig {
    /// A channel's messages without a verdict at once (as a sender), and the most this
    /// endpoint lets a sender have (as a receiver, advertised). Default 1024.
    pub channel_window: u32,
    /// Their bytes (a larger message goes alone), both ways as `channel_window`. Default
    /// 4 MiB.
    pub channel_window_bytes: usize,
    /// A stream's chunks without a verdict at once, both ways as `channel_window`. Default
    /// 1024.
    pub stream_window: u32,
    /// Their bytes: the most a stream has in flight or unread at its peer (the smaller of
    /// the two ends' values). Default 4 MiB.
    pub stream_window_bytes: usize,
    /// Largest chunk of a stream (bytes written coalesce up to it; one chunk is one exon
    /// message). Default [`default_stream_chunk`] (32 666 bytes: two chunks, their
    /// envelopes and framing fill one datagram of the largest size), capped by the largest
    /// message.
    pub stream_chunk: usize,
    /// Bytes a stream's writer buffers before its writes wait. Default 256 KiB.
    pub stream_buffer: usize,
    /// How long a stream's chunk may go unacknowledged (unread by the peer) before the
    /// stream breaks with `TimedOut`, for streams opened or accepted from now on
    /// ([`Stream::set_deadline`](crate::endpoint::Stream::set_deadline) changes it for one).
    /// Default `None`: a stream waits out outages of any length.
    pub stream_deadline: Option<std::time::Duration>,
    /// Streams open at once per driver shard, and streams waiting to be accepted per
    /// endpoint; a peer's new stream beyond either is reset.
    /// Default 4096.
    pub max_streams: usize,
    /// Channels (sender and number) a driver shard keeps order for; a message on a further
    /// one is held undelivered. Default 65536.
    pub max_channels: usize,
    /// How long a channel or a stream may hold messages (chunks) ahead of their turn
    /// without its next number coming before its receiver asks the sender whether the run
    /// still lives (`docs/channels.md`, "Restarts"). A sender that restarted without a
    /// journal answers that the run is over: what a channel held of it is handed over out of
    /// order ([`Kind::Unordered`](crate::endpoint::Kind::Unordered)), and a stream breaks
    /// (`ConnectionReset`); a live sender does not, and is asked again an interval later.
    /// A stream is also asked about when its writer's node starts a flow in another run
    /// (it may have restarted), held chunks or not. Default 5 s; `None`: never asked (what
    /// a restarted sender left held stays held, and its stream's reader waits).
    pub stall_query_after: Option<std::time::Duration>,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            channel_window: 1024,
            channel_window_bytes: 4 << 20,
            stream_window: 1024,
            stream_window_bytes: 4 << 20,
            stream_chunk: default_stream_chunk(),
            stream_buffer: 256 << 10,
            stream_deadline: None,
            max_streams: 4096,
            max_channels: 65536,
            stall_query_after: Some(std::time::Duration::from_secs(5)),
        }
    }
}

/// The default [`FlowConfig::stream_chunk`]: the largest chunk of which two, each with its
/// envelope and TOKEN framing at their largest, fit one datagram of
/// [`MAX_DATAGRAM_SIZE`](crate::proto::MAX_DATAGRAM_SIZE) bytes. Where path MTU discovery
/// grows datagrams to that size (loopback, some LANs) a datagram carries two whole chunks
/// rather than one (a 32 KiB chunk left half of every such datagram empty); on smaller
/// paths a chunk goes in fragments either way.
pub fn default_stream_chunk() -> usize {
    crate::proto::payload_room_each(crate::proto::MAX_DATAGRAM_SIZE, 2)
        - crate::envelope::MAX_OVERHEAD
}

impl FlowConfig {
    pub(crate) fn channel(&self) -> crate::ordered::Window {
        crate::ordered::Window {
            messages: self.channel_window,
            bytes: self.channel_window_bytes,
        }
    }

    pub(crate) fn stream(&self) -> crate::ordered::Window {
        crate::ordered::Window {
            messages: self.stream_window,
            bytes: self.stream_window_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_default_chunks_share_the_largest_datagram() {
        let chunk = default_stream_chunk();
        let payload = chunk + crate::envelope::MAX_OVERHEAD;
        assert!(payload <= crate::proto::payload_room_each(crate::proto::MAX_DATAGRAM_SIZE, 2));
        assert!(payload > crate::proto::payload_room_each(crate::proto::MAX_DATAGRAM_SIZE, 3));
        assert_eq!(FlowConfig::default().stream_chunk, chunk);
        assert_eq!(chunk, 32_666, "the documented default");
    }
}
