//! The durable byte-stream workload ([`Scenario::streams`](crate::Scenario::streams)): how
//! many streams each node writes to each other node, how long they are, how they are cut
//! into writes, chunks and reads, the source their bytes come from, and the switches that
//! turn the application's rule off (for the checker's self-tests).

use std::time::Duration;

/// How the applications use durable byte streams (`docs/channels.md`, "Streams").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamModel {
    /// Streams each node writes to each other node (at least 1).
    pub streams: u16,
    /// Bytes of each stream (at least 1): the source's length.
    pub bytes: u64,
    /// Largest chunk (one ordered message each; at least 1): a write is cut into chunks of
    /// at most this many bytes.
    pub chunk: usize,
    /// Largest write of the writing application (sizes drawn uniformly from 1 to this).
    pub max_write: usize,
    /// Largest read of the reading application (sizes drawn uniformly from 1 to this; one
    /// read may span chunks).
    pub max_read: usize,
    /// Longest time the reading application takes to store what it read (drawn uniformly
    /// from zero to this); a crash in between loses what it read and did not store.
    pub store_delay: Duration,
    /// Chunks of one stream unsettled at once (`Window::messages`).
    pub window: u32,
    /// Bytes of one stream unsettled at once (`Window::bytes`).
    pub window_bytes: usize,
    /// Rule: a chunk read to its end is taken (counted as read, its position kept in its
    /// take's mark) only when the application reads again, having stored its bytes. Off:
    /// it is taken as soon as it is read, before the bytes are stored: a crash in between
    /// loses them (the restarted reader goes on past them).
    pub deferred_take: bool,
}

impl Default for StreamModel {
    fn default() -> Self {
        StreamModel {
            streams: 2,
            bytes: 48 << 10,
            chunk: 1000,
            max_write: 6000,
            max_read: 5000,
            store_delay: Duration::from_millis(3),
            window: 8,
            window_bytes: 64 << 10,
            deferred_take: true,
        }
    }
}

impl StreamModel {
    /// The window of every stream, as sender and as receiver.
    pub fn window(&self) -> exon::ordered::Window {
        exon::ordered::Window {
            messages: self.window.max(1),
            bytes: self.window_bytes.max(1),
        }
    }
}

/// One stream as the oracle and the applications name it: writer, reader, stream number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// The writing node.
    pub from: u32,
    /// The reading node.
    pub to: u32,
    /// The stream's number among the writer's streams to the reader.
    pub stream: u16,
}

impl std::fmt::Display for StreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node{}->node{} stream {}",
            self.from, self.to, self.stream
        )
    }
}

/// Stream `s` as its chunks' receiver names it (`Flow::Stream`: their sender opened it).
pub fn stream_flow(s: u16) -> exon::envelope::Flow {
    exon::envelope::Flow::Stream {
        id: u64::from(s),
        opener_sent: true,
    }
}

/// The journal mark lane of stream `s`, its writing side or its reading side.
pub fn stream_lane(s: u16, sending: bool) -> u64 {
    exon::ordered::position::lane(stream_flow(s).code(), sending)
}

/// A 64-bit mix (splitmix64's finaliser).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl StreamKey {
    /// Byte `offset` of this stream's source: a pseudo-random function of the stream and
    /// the offset, so the oracle checks content without keeping it.
    pub fn byte(&self, offset: u64) -> u8 {
        let k = (u64::from(self.from) << 48) ^ (u64::from(self.to) << 32) ^ u64::from(self.stream);
        (mix(mix(k) ^ (offset >> 3)) >> ((offset & 7) * 8)) as u8
    }

    /// Bytes `offset..offset + len` of this stream's source.
    pub fn source(&self, offset: u64, len: usize) -> Vec<u8> {
        (offset..offset + len as u64)
            .map(|o| self.byte(o))
            .collect()
    }

    /// The first offset at or after `offset` where `bytes` differ from the source, if any.
    pub fn first_difference(&self, offset: u64, bytes: &[u8]) -> Option<u64> {
        (offset..)
            .zip(bytes)
            .find(|&(o, &b)| self.byte(o) != b)
            .map(|(o, _)| o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_differ_between_streams_and_offsets() {
        let a = StreamKey {
            from: 0,
            to: 1,
            stream: 0,
        };
        let b = StreamKey { stream: 1, ..a };
        let c = StreamKey {
            from: 1,
            to: 0,
            ..a
        };
        let sa = a.source(0, 256);
        assert_ne!(sa, b.source(0, 256));
        assert_ne!(sa, c.source(0, 256));
        assert_ne!(sa[..128], sa[128..]);
        assert_eq!(a.first_difference(0, &sa), None);
        let mut bad = sa.clone();
        bad[77] ^= 1;
        assert_eq!(a.first_difference(0, &bad), Some(77));
        assert_eq!(a.first_difference(10, &sa[10..20]), None);
        assert_eq!(
            a.first_difference(11, &sa[10..20]).map(|o| o >= 11),
            Some(true)
        );
    }
}
