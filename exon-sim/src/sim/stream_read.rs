//! The byte-stream applications' reading side: each stream's chunks go through an
//! `exon::ordered::Reorder` and wait, untaken, to be read; the application reads in random
//! sizes (across chunks), stores what it read in its own durable store a random time later
//! (a crash in between loses what was read), and reads again. A chunk read to its end is
//! taken only then, when the application reads again (rule `StreamModel::deferred_take`),
//! with the stream's `RecvPosition` (its next chunk and the bytes taken) in its record
//! (`Node::handle_taken_marked`). A restarted reader goes on at the position of its last
//! take and skips what its store already holds. The oracle sees every store.

use std::collections::VecDeque;

use bytes::Bytes;
use exon::envelope::{Envelope, Flow, Place};
use exon::ordered::position::RecvPosition;
use exon::ordered::{Arrival, Reorder, Step};
use exon::proto::journal::Mark;
use exon::proto::DeliveryId;
use rand::Rng;

use super::queue::{nanos, What};
use super::Sim;
use crate::oracle::ViolationKind;
use crate::streams::{stream_lane, StreamKey, StreamModel};

/// A chunk released in order, not yet taken.
struct Ready {
    seq: u64,
    id: DeliveryId,
    body: Bytes,
    /// Its first byte's offset in the stream.
    start: u64,
    last: bool,
}

impl Ready {
    fn end(&self) -> u64 {
        self.start + self.body.len() as u64
    }
}

/// The reading side of one stream (lost at a crash).
#[derive(Default)]
pub(crate) struct InStream {
    reorder: Reorder<(DeliveryId, Bytes)>,
    /// Chunks released and not taken, in order.
    ready: VecDeque<Ready>,
    /// The offset after the last chunk released.
    released_end: u64,
    /// The offset of the next byte to read.
    read_at: u64,
    /// Bytes read and not yet stored: their offset and the bytes.
    pending: Option<(u64, Vec<u8>)>,
    /// The bytes read end the stream (its end is stored with them).
    end_read: bool,
}

/// What a reading application keeps in its own store, which survives its crashes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AppStore {
    /// Bytes of the stream stored.
    pub(crate) stored: u64,
    /// The stream's end was seen (stored with its last bytes).
    pub(crate) ended: bool,
}

impl InStream {
    /// A reader resumed at `pos`, where its last take left it: the chunks after it come
    /// again from the node, from byte `pos.offset` on.
    pub(super) fn resumed(pos: RecvPosition) -> InStream {
        InStream {
            reorder: Reorder::started(pos.run, pos.next),
            released_end: pos.offset,
            read_at: pos.offset,
            ..InStream::default()
        }
    }
}

impl Sim {
    /// A delivery to node `i`'s stream application: a chunk goes through its stream's
    /// `Reorder`; what it releases waits to be read, anything outside the stream's order is
    /// reported and taken (so as not to block the node).
    pub(super) fn stream_delivered(
        &mut self,
        i: usize,
        from: usize,
        payload: Bytes,
        id: DeliveryId,
    ) {
        let streams = self.sc.streams.as_ref().map_or(0, |m| m.streams);
        let (place, last, body) = match Envelope::open(payload) {
            Ok(Envelope::Ordered {
                place:
                    place @ Place {
                        flow:
                            Flow::Stream {
                                id: s,
                                opener_sent: true,
                            },
                        ..
                    },
                last,
                body,
            }) if s < u64::from(streams) => (place, last, body),
            other => {
                let what = format!("node{i} got {other:?} from node{from}, never sent");
                self.oracle
                    .violate(ViolationKind::NeverSent, None, self.now, what);
                self.stream_take(i, id, None);
                return;
            }
        };
        let s = match place.flow {
            Flow::Stream { id, .. } => id as u16,
            Flow::Channel(_) => return,
        };
        if id.is_redelivery() {
            self.oracle.stream_counters().redelivered += 1;
        }
        let key = StreamKey {
            from: from as u32,
            to: i as u32,
            stream: s,
        };
        let st = self.hosts[i].streams.inn.entry((from, s)).or_default();
        let before = st.reorder.held();
        let mut out = Vec::new();
        let arrival = Arrival::Message {
            item: (id, body),
            last,
        };
        st.reorder
            .on_arrival(place.run, place.seq, arrival, &mut out);
        let held = st.reorder.held() > before;
        let mut bad = Vec::new();
        for step in out {
            match step {
                Step::Deliver {
                    seq,
                    item: (id, body),
                    last,
                } => {
                    let start = st.released_end;
                    st.released_end += body.len() as u64;
                    let r = Ready {
                        seq,
                        id,
                        body,
                        start,
                        last,
                    };
                    st.ready.push_back(r);
                }
                Step::Gap { seq, item: (id, _) } => {
                    bad.push((format!("gap {seq}, never sent"), id))
                }
                Step::Discard((id, _)) => bad.push(("a copy of a chunk passed".to_string(), id)),
                Step::Stale { seq, item, .. } => {
                    bad.push((format!("chunk {seq} of a run it does not follow"), item.0));
                }
            }
        }
        for (what, id) in bad {
            self.oracle.on_stream_disorder(key, &what, self.now);
            self.stream_take(i, id, None);
        }
        if held {
            self.oracle.stream_counters().held += 1;
        }
        self.stream_schedule_read(i);
    }

    /// Node `i`'s application reads (now or within its store delay) unless it will already.
    fn stream_schedule_read(&mut self, i: usize) {
        let delay = self.sc.streams.as_ref().map_or(0, |m| nanos(m.store_delay));
        let h = &mut self.hosts[i];
        if h.take_scheduled {
            return;
        }
        h.take_scheduled = true;
        let t = self.now + self.rng.gen_range(0..=delay);
        self.queue.push(t, What::Take(i as u32));
    }

    /// Node `i` takes delivery `id`; with `pos` (a chunk read to its end, in a durable
    /// stream) its position in the same record.
    fn stream_take(&mut self, i: usize, id: DeliveryId, pos: Option<(u16, RecvPosition)>) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let Some(node) = h.node.as_mut() else {
            return;
        };
        let mark = pos.filter(|_| h.streams.durable).map(|(s, pos)| Mark {
            lane: stream_lane(s, false),
            value: pos.encode(),
        });
        super::nodes::take_marked(node, now, id, mark);
    }

    /// Node `i`'s stream application runs: on each stream it stores what it read, takes
    /// the chunks read to their end (it reads again), and reads; it comes back (within its
    /// store delay) while it holds bytes to store or chunks to take.
    pub(super) fn stream_read(&mut self, i: usize) {
        self.hosts[i].take_scheduled = false;
        let Some(m) = self.sc.streams.clone() else {
            return;
        };
        if self.hosts[i].node.is_none() {
            return;
        }
        let keys: Vec<_> = self.hosts[i].streams.inn.keys().copied().collect();
        let mut busy = false;
        for (from, s) in keys {
            let key = StreamKey {
                from: from as u32,
                to: i as u32,
                stream: s,
            };
            self.stream_store(i, key);
            if m.deferred_take {
                self.stream_take_read(i, key);
            }
            self.stream_read_some(i, key, &m);
            if !m.deferred_take {
                self.stream_take_read(i, key);
            }
            let st = &self.hosts[i].streams.inn[&(from, s)];
            let unread = st.ready.back().is_some_and(|r| r.end() > st.read_at);
            busy |= st.pending.is_some()
                || unread
                || st.ready.front().is_some_and(|r| r.end() <= st.read_at);
        }
        if busy {
            self.stream_schedule_read(i);
        }
        self.drain(i);
    }

    /// Node `i`'s application stores what it read of stream `key` (and its end, if read).
    fn stream_store(&mut self, i: usize, key: StreamKey) {
        let h = &mut self.hosts[i];
        let k = (key.from as usize, key.stream);
        let Some(st) = h.streams.inn.get_mut(&k) else {
            return;
        };
        let Some((offset, bytes)) = st.pending.take() else {
            return;
        };
        let end = std::mem::take(&mut st.end_read);
        let store = h.stream_store.entry(k).or_default();
        store.stored = store.stored.max(offset + bytes.len() as u64);
        let first_end = end && !store.ended;
        store.ended |= end;
        self.oracle.on_stream_stored(key, offset, &bytes, self.now);
        if first_end {
            self.oracle.on_stream_end(key, self.now);
        }
    }

    /// Node `i` takes the chunks of stream `key` read to their end, each with its position.
    fn stream_take_read(&mut self, i: usize, key: StreamKey) {
        let k = (key.from as usize, key.stream);
        loop {
            let st = self.hosts[i].streams.inn.get_mut(&k);
            let Some(st) = st.filter(|st| st.ready.front().is_some_and(|r| r.end() <= st.read_at))
            else {
                return;
            };
            let (Some(r), Some(run)) = (st.ready.pop_front(), st.reorder.run()) else {
                return;
            };
            let pos = RecvPosition {
                run,
                next: r.seq + 1,
                offset: r.end(),
                ended: r.last,
            };
            self.oracle.stream_counters().taken += 1;
            self.stream_take(i, r.id, Some((key.stream, pos)));
        }
    }

    /// Node `i`'s application reads up to a random number of bytes of stream `key`: first
    /// it skips what its store holds already (after a restart), then it keeps what it reads
    /// to store it later.
    fn stream_read_some(&mut self, i: usize, key: StreamKey, m: &StreamModel) {
        let want = self.rng.gen_range(1..=m.max_read.max(1));
        let h = &mut self.hosts[i];
        let k = (key.from as usize, key.stream);
        let stored = h.stream_store.get(&k).map_or(0, |s| s.stored);
        let Some(st) = h.streams.inn.get_mut(&k) else {
            return;
        };
        if st.pending.is_some() {
            return;
        }
        let mut skipped = 0;
        let mut bytes = Vec::new();
        let start = st.read_at.max(stored);
        for r in &st.ready {
            if r.end() <= st.read_at {
                continue;
            }
            let from = (st.read_at - r.start) as usize;
            // Skip what the store holds, then read.
            let skip = (stored.saturating_sub(st.read_at) as usize).min(r.body.len() - from);
            skipped += skip as u64;
            st.read_at += skip as u64;
            let from = from + skip;
            let n = (want - bytes.len()).min(r.body.len() - from);
            bytes.extend_from_slice(&r.body[from..from + n]);
            st.read_at += n as u64;
            if r.last && st.read_at == r.end() && n > 0 {
                st.end_read = true;
            }
            if bytes.len() == want {
                break;
            }
        }
        if !bytes.is_empty() {
            st.pending = Some((start, bytes));
        }
        self.oracle.stream_counters().skipped += skipped;
    }
}
