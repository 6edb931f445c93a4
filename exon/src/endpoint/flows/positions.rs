//! Durable mode at the driver: which deliveries released to the application belong to a
//! durable flow, so that their takes keep the flow's position in the journal (a mark in
//! the take's own record), and each stream's receiving position as of its last take.

use std::collections::HashMap;

use crate::envelope::Flow;
use crate::ordered::position::{self, RecvPosition};
use crate::proto::journal::Mark;
use crate::proto::{DeliveryId, NodeId};

/// A stream at the driver: its peer, its id, and whether this endpoint opened it.
pub(crate) type StreamKey = (NodeId, u64, bool);

/// What a released delivery is, for its take.
#[derive(Debug, Clone, Copy)]
enum Released {
    /// A channel's message or gap: the channel's position is the reorder buffer's.
    Channel(NodeId, u16),
    /// A stream's chunk: of run `run`, number `seq`, `len` bytes, the last or not.
    Chunk {
        key: StreamKey,
        run: u32,
        seq: u64,
        len: u64,
        last: bool,
    },
}

/// What the take of a released delivery keeps with it.
pub(crate) enum Take {
    /// A channel's position: the caller reads it from the channel's reorder buffer.
    Channel(NodeId, u16),
    /// A stream's position, made.
    Mark(Mark),
}

/// Deliveries of durable flows released and not yet taken, and the streams' positions.
#[derive(Debug, Default)]
pub(crate) struct Positions {
    released: HashMap<DeliveryId, Released>,
    streams: HashMap<StreamKey, RecvPosition>,
}

impl Positions {
    /// A channel's message or gap `id` from `from` was released to the application.
    pub(crate) fn channel(&mut self, id: DeliveryId, from: NodeId, n: u16) {
        self.released.insert(id, Released::Channel(from, n));
    }

    /// A stream's chunk `id` (number `seq` of run `run`, `len` bytes) was released to its
    /// reader.
    pub(crate) fn chunk(
        &mut self,
        id: DeliveryId,
        key: StreamKey,
        (run, seq): (u32, u64),
        len: usize,
        last: bool,
    ) {
        let len = len as u64;
        let r = Released::Chunk {
            key,
            run,
            seq,
            len,
            last,
        };
        self.released.insert(id, r);
    }

    /// A stream resumed after a restart, at `pos`.
    pub(crate) fn resume_stream(&mut self, key: StreamKey, pos: RecvPosition) {
        self.streams.insert(key, pos);
    }

    /// What the take of `id` keeps with it, if it is a durable flow's.
    pub(crate) fn take(&mut self, id: &DeliveryId) -> Option<Take> {
        match self.released.remove(id)? {
            Released::Channel(from, n) => Some(Take::Channel(from, n)),
            Released::Chunk {
                key,
                run,
                seq,
                len,
                last,
            } => {
                // Chunks are taken in order: the position moves past this one.
                let pos = self.streams.entry(key).or_insert(RecvPosition {
                    run,
                    next: 0,
                    offset: 0,
                    ended: false,
                });
                if pos.run != run {
                    *pos = RecvPosition {
                        run,
                        next: 0,
                        offset: 0,
                        ended: false,
                    };
                }
                pos.next = seq + 1;
                pos.offset += len;
                pos.ended |= last;
                Some(Take::Mark(Mark {
                    lane: recv_lane(key),
                    value: pos.encode(),
                }))
            }
        }
    }

    /// The stream is gone: its takes keep nothing more. Returns its marks' lanes (its
    /// sending and receiving sides), to forget.
    pub(crate) fn forget_stream(&mut self, key: StreamKey) -> [u64; 2] {
        self.streams.remove(&key);
        self.released
            .retain(|_, r| !matches!(r, Released::Chunk { key: k, .. } if *k == key));
        [send_lane(key), recv_lane(key)]
    }

    /// Whether any take may keep a position.
    pub(crate) fn is_empty(&self) -> bool {
        self.released.is_empty()
    }
}

/// The marks of a stream's two sides at this endpoint: peer and lane.
pub(crate) fn stream_slots(key: StreamKey) -> [(NodeId, u64); 2] {
    [(key.0, send_lane(key)), (key.0, recv_lane(key))]
}

/// The mark lane of a stream's sending side at this endpoint (its flow as the peer, the
/// receiver, names it: opened by the sender if this endpoint opened it).
pub(crate) fn send_lane((_, id, mine): StreamKey) -> u64 {
    let flow = Flow::Stream {
        id,
        opener_sent: mine,
    };
    position::lane(flow.code(), true)
}

/// The mark lane of a stream's receiving side at this endpoint (its flow as this
/// endpoint's chunks name it: opened by their sender if the peer opened it).
pub(crate) fn recv_lane((_, id, mine): StreamKey) -> u64 {
    let flow = Flow::Stream {
        id,
        opener_sent: !mine,
    };
    position::lane(flow.code(), false)
}
