//! The oracle's checks of durable byte streams ([`Scenario::streams`](crate::Scenario::streams)):
//! per stream the reading application's store holds exactly a prefix of the source (each
//! store goes on where the last ended, with the source's bytes), its end is seen once and
//! only with every byte stored, and after healing every stream is stored whole and ended.

use std::collections::BTreeMap;

use super::{Oracle, ViolationKind};
use crate::streams::StreamKey;

/// What the oracle knows of one stream.
#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// The source's length.
    total: u64,
    /// Bytes in the reading application's store.
    stored: u64,
    /// The reading application saw the stream's end.
    ended: bool,
}

/// The streams' counters, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCounts {
    /// Streams.
    pub streams: u64,
    /// Bytes of all their sources.
    pub bytes: u64,
    /// Bytes the reading applications stored.
    pub stored: u64,
    /// Streams whose end the reader saw.
    pub ended: u64,
    /// Chunks accepted with their position (`Node::send_marked`).
    pub chunks: u64,
    /// Chunks sent again with their number after a verdict in doubt.
    pub resent: u64,
    /// Chunks handed to a restarted reader again (flagged redeliveries).
    pub redelivered: u64,
    /// Chunks taken (read to their end) with their position (`Node::handle_taken_marked`).
    pub taken: u64,
    /// Stores of the reading applications.
    pub stores: u64,
    /// Bytes a restarted reader skipped (its store held them already).
    pub skipped: u64,
    /// Writers resumed from a mark after a restart, and readers.
    pub writers_resumed: u64,
    /// Readers resumed from a mark after a restart.
    pub readers_resumed: u64,
    /// Chunks that arrived ahead of their turn and were held.
    pub held: u64,
}

impl StreamCounts {
    /// Adds `o` to these counters.
    pub fn add(&mut self, o: &StreamCounts) {
        self.streams += o.streams;
        self.bytes += o.bytes;
        self.stored += o.stored;
        self.ended += o.ended;
        self.chunks += o.chunks;
        self.resent += o.resent;
        self.redelivered += o.redelivered;
        self.taken += o.taken;
        self.stores += o.stores;
        self.skipped += o.skipped;
        self.writers_resumed += o.writers_resumed;
        self.readers_resumed += o.readers_resumed;
        self.held += o.held;
    }
}

/// Every stream, and the counters.
#[derive(Debug, Default)]
pub(super) struct Streams {
    streams: BTreeMap<StreamKey, Stream>,
    counts: StreamCounts,
}

impl Oracle {
    /// Stream `key` is to carry `total` bytes.
    pub fn on_stream_opened(&mut self, key: StreamKey, total: u64) {
        let s = &mut self.streams;
        if s.streams
            .insert(
                key,
                Stream {
                    total,
                    ..Stream::default()
                },
            )
            .is_none()
        {
            s.counts.streams += 1;
            s.counts.bytes += total;
        }
    }

    /// The counters of the stream workload.
    pub fn stream_counts(&self) -> StreamCounts {
        let mut c = self.streams.counts;
        c.stored = self.streams.streams.values().map(|s| s.stored).sum();
        c.ended = self.streams.streams.values().filter(|s| s.ended).count() as u64;
        c
    }

    /// Mutable counters, for the simulator to count what it does.
    pub fn stream_counters(&mut self) -> &mut StreamCounts {
        &mut self.streams.counts
    }

    /// The reading application of `key` stores `bytes` as the stream's bytes from `offset`:
    /// they must go on exactly where its store ends, and be the source's.
    pub fn on_stream_stored(&mut self, key: StreamKey, offset: u64, bytes: &[u8], now: u64) {
        self.streams.counts.stores += 1;
        let Some(s) = self.streams.streams.get_mut(&key) else {
            let what = format!("{key} stored, a stream never opened");
            self.violate(ViolationKind::StreamOrder, None, now, what);
            return;
        };
        let (had, total) = (s.stored, s.total);
        let end = offset + bytes.len() as u64;
        s.stored = s.stored.max(end);
        if end > had {
            // Work done, as an acknowledgement is: a run cut off while its streams still
            // move is slow, not stuck (`scripts/sim-campaign.py`).
            self.last_ack_at = self.last_ack_at.max(now);
        }
        let kind = if offset > had {
            Some(ViolationKind::StreamSkipped)
        } else if offset < had {
            Some(ViolationKind::StreamRepeated)
        } else {
            None
        };
        if let Some(kind) = kind {
            let what = format!("{key}: bytes {offset}..{end} stored after {had}");
            self.violate(kind, None, now, what);
        }
        if end > total {
            let what = format!("{key}: bytes {offset}..{end} stored, the source has {total}");
            self.violate(ViolationKind::StreamCorrupted, None, now, what);
        } else if let Some(at) = key.first_difference(offset, bytes) {
            let what = format!("{key}: bytes {offset}..{end} stored, not the source's at {at}");
            self.violate(ViolationKind::StreamCorrupted, None, now, what);
        }
    }

    /// The reading application of `key` saw the stream's end: once, with every byte stored.
    pub fn on_stream_end(&mut self, key: StreamKey, now: u64) {
        let Some(s) = self.streams.streams.get_mut(&key) else {
            return;
        };
        let (was, stored, total) = (s.ended, s.stored, s.total);
        s.ended = true;
        if was || stored != total {
            let what = format!(
                "{key}: end seen{} with {stored} of {total} bytes stored",
                if was { " again" } else { "" }
            );
            self.violate(ViolationKind::StreamEnd, None, now, what);
        }
    }

    /// Something outside the stream's order reached `key`'s reader (a chunk of a run it does
    /// not know, a copy of a chunk passed, a gap): `what` says which.
    pub fn on_stream_disorder(&mut self, key: StreamKey, what: &str, now: u64) {
        let what = format!("{key}: {what}");
        self.violate(ViolationKind::StreamOrder, None, now, what);
    }

    /// `key`'s writer was told a chunk was not delivered: the stream is aborted (a stream
    /// has no gaps), which nothing in these runs excuses.
    pub fn on_stream_aborted(&mut self, key: StreamKey, seq: u64, now: u64) {
        let what = format!("{key}: chunk {seq} told not delivered, the stream aborted");
        self.violate(ViolationKind::StreamAborted, None, now, what);
    }

    /// After healing and quiescence: every stream stored whole and its end seen.
    pub(super) fn finish_streams(&mut self, now: u64) {
        let short: Vec<_> = self
            .streams
            .streams
            .iter()
            .filter(|(_, s)| s.stored != s.total || !s.ended)
            .map(|(k, s)| (*k, *s))
            .collect();
        for (k, s) in short {
            let what = format!(
                "{k}: {} of {} bytes stored, end {}seen",
                s.stored,
                s.total,
                if s.ended { "" } else { "not " }
            );
            self.violate(ViolationKind::StreamIncomplete, None, now, what);
        }
    }
}
