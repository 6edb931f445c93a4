//! The byte-stream applications' writing side ([`Scenario::streams`](crate::Scenario::streams)):
//! each node writes its streams to every other node from their sources, in writes of random
//! sizes cut into chunks (one ordered message each, numbered by an
//! `exon::ordered::Sequencer` within the stream's window), each new chunk accepted with
//! `Node::send_marked` and the stream's `SendPosition` after it (its bytes so far, whether
//! it ended); a chunk in doubt is sent again under its number, one told not delivered
//! aborts the stream (the oracle's verdict). Its chunks' arrivals go to the reader
//! (`stream_read.rs`), a restarted host resumes from its marks (`stream_resume.rs`).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use exon::envelope::{Envelope, Place};
use exon::proto::journal::Mark;
use exon::proto::{Event, MsgId};
use rand::Rng;

use super::ids::node_id;
use super::numbering::Numbering;
use super::queue::nanos;
use super::stream_read::InStream;
use super::Sim;
use crate::channels::ChannelModel;
use crate::streams::{stream_flow, stream_lane, StreamKey, StreamModel};

/// The writing side of one stream.
pub(super) struct OutStream {
    /// Its numbering (the channels' `Numbering`, every rule on).
    pub(super) num: Numbering,
    /// Bytes accepted so far (`Stream::write_offset`).
    pub(super) offset: u64,
    /// Bytes of the application's current write not yet accepted.
    pub(super) write_left: usize,
    /// Its last chunk was accepted.
    pub(super) ended: bool,
}

/// A chunk sent and not settled: enough to send it again under its number.
#[derive(Debug, Clone)]
pub(super) struct Chunk {
    pub(super) to: usize,
    pub(super) stream: u16,
    pub(super) place: Place,
    pub(super) last: bool,
    pub(super) body: Bytes,
}

/// One host's stream state, as writer and reader; a crash loses all of it (the host
/// rebuilds it from its journal's marks and messages, and its application's store).
#[derive(Default)]
pub(crate) struct StreamHost {
    /// The run of the streams this boot of the node starts.
    pub(super) run: u32,
    /// Positions are kept in marks (durable mode with rule `durable_flows`).
    pub(super) durable: bool,
    /// Writing sides, by (reader, stream).
    pub(super) out: BTreeMap<(usize, u16), OutStream>,
    /// Chunks sent without a verdict, by message id.
    pub(super) ids: HashMap<u64, Chunk>,
    /// Chunks in doubt, to send again.
    pub(super) resend: Vec<Chunk>,
    /// Reading sides, by (writer, stream).
    pub(super) inn: BTreeMap<(usize, u16), InStream>,
}

impl StreamHost {
    /// Whether the application has chunks to write or send again.
    pub(crate) fn writing(&self) -> bool {
        !self.resend.is_empty() || self.out.values().any(|o| !o.ended)
    }
}

/// The channel model a stream's numbering keeps to: the stream's window, every rule on, no
/// advertised windows (a stream's sender keeps to its own window, which is the reader's).
pub(super) fn numbering_model(m: &StreamModel) -> ChannelModel {
    ChannelModel {
        channels: m.streams,
        window: m.window,
        window_bytes: m.window_bytes,
        advertise: false,
        ..ChannelModel::default()
    }
}

impl Sim {
    /// The stream application of node `i` sends again the chunks in doubt, then writes on
    /// its streams in turn while their windows and its node take chunks.
    pub(super) fn stream_pump(&mut self, i: usize) {
        self.hosts[i].pump_scheduled = false;
        let Some(m) = self.sc.streams.clone() else {
            return;
        };
        if self.hosts[i].node.is_none() {
            return; // resumed by the restart
        }
        self.stream_resend(i);
        let keys: Vec<_> = self.hosts[i].streams.out.keys().copied().collect();
        let burst = self.sc.workload.burst;
        let mut sent = 0;
        let mut more = true;
        while more && sent < burst {
            more = false;
            for &k in &keys {
                if sent < burst && self.stream_write(i, k, &m) {
                    sent += 1;
                    more = true;
                }
            }
        }
        self.drain(i);
        self.schedule_pump(i, self.now + nanos(self.sc.workload.interval));
    }

    /// Node `i` writes the next chunk of its stream `s` to `to`; false if the stream ended,
    /// its window is full or the node refused it for now. In durable mode the chunk keeps
    /// the stream's position after it in its record.
    fn stream_write(&mut self, i: usize, (to, s): (usize, u16), m: &StreamModel) -> bool {
        let now = self.instant();
        let max_pending = self.sc.workload.max_pending;
        let h = &mut self.hosts[i];
        let durable = h.streams.durable;
        let (Some(o), Some(node)) = (h.streams.out.get_mut(&(to, s)), h.node.as_mut()) else {
            return false;
        };
        if o.ended || node.pending_to(node_id(to)) >= max_pending {
            return false;
        }
        if o.write_left == 0 {
            o.write_left = self.rng.gen_range(1..=m.max_write.max(1));
        }
        let key = StreamKey {
            from: i as u32,
            to: to as u32,
            stream: s,
        };
        let left = usize::try_from(m.bytes.saturating_sub(o.offset)).unwrap_or(usize::MAX);
        let len = o.write_left.min(m.chunk.max(1)).min(left);
        let last = len == left;
        let Some(seq) = o.num.assign(len) else {
            return false;
        };
        let body = Bytes::from(key.source(o.offset, len));
        let place = Place {
            flow: stream_flow(s),
            run: o.num.run(),
            seq,
        };
        let env = Envelope::ordered(place, last, body.clone());
        let sent = if durable {
            let mut pos = o.num.position(seq, &numbering_model(m));
            pos.offset = o.offset + len as u64;
            pos.ended = last;
            let mark = Mark {
                lane: stream_lane(s, true),
                value: pos.encode(),
            };
            node.send_marked(now, node_id(to), env, true, mark)
        } else {
            node.send_reported(now, node_id(to), env)
        };
        let Ok(id) = sent else {
            o.num.unassign(seq);
            return false;
        };
        o.offset += len as u64;
        o.write_left -= len;
        o.ended = last;
        let chunk = Chunk {
            to,
            stream: s,
            place,
            last,
            body,
        };
        h.streams.ids.insert(id.0, chunk);
        self.oracle.stream_counters().chunks += 1;
        self.last_activity = self.last_activity.max(self.now);
        true
    }

    /// Node `i` sends again, under their numbers and without marks, the chunks that came
    /// back in doubt; those refused for now wait for the next round.
    fn stream_resend(&mut self, i: usize) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let Some(node) = h.node.as_mut() else {
            return;
        };
        let mut left = Vec::new();
        for c in std::mem::take(&mut h.streams.resend) {
            let env = Envelope::ordered(c.place, c.last, c.body.clone());
            match node.send_reported(now, node_id(c.to), env) {
                Ok(id) => {
                    h.streams.ids.insert(id.0, c);
                    self.oracle.stream_counters().resent += 1;
                    self.last_activity = self.last_activity.max(self.now);
                }
                Err(_) => left.push(c),
            }
        }
        h.streams.resend = left;
    }

    /// An event of node `i`'s node to its stream application.
    pub(super) fn stream_event(&mut self, i: usize, e: Event) {
        match e {
            Event::Delivered { from, payload, id } => {
                self.stream_delivered(i, from.get() as usize - 1, payload, id);
            }
            Event::Acknowledged { ids, .. } => {
                for id in ids {
                    self.stream_verdict(i, id, Some(true));
                }
            }
            Event::InDoubt { id, .. } => self.stream_verdict(i, id, None),
            Event::NotDelivered { id, .. } => self.stream_verdict(i, id, Some(false)),
            _ => {}
        }
    }

    /// Node `i` learned the verdict on its chunk `id`: acknowledged (`Some(true)`) settles
    /// it in its stream's window, in doubt (`None`) sends it again, not delivered aborts
    /// the stream. A verdict on a chunk of a run its stream no longer numbers (recovered
    /// from an older run) changes nothing; one on an id it does not know (a verdict its
    /// journal kept and the restarted node reports again) neither.
    fn stream_verdict(&mut self, i: usize, id: MsgId, delivered: Option<bool>) {
        let h = &mut self.hosts[i];
        let Some(c) = h.streams.ids.remove(&id.0) else {
            return;
        };
        if delivered.is_none() {
            h.streams.resend.push(c);
            self.schedule_pump(i, self.now);
            return;
        }
        if let Some(o) = h.streams.out.get_mut(&(c.to, c.stream)) {
            if o.num.run() == c.place.run {
                o.num.on_verdict(c.place.seq, delivered == Some(true));
            }
        }
        if delivered == Some(false) {
            let key = StreamKey {
                from: i as u32,
                to: c.to as u32,
                stream: c.stream,
            };
            self.oracle.on_stream_aborted(key, c.place.seq, self.now);
        }
        // A place may have come free.
        self.schedule_pump(i, self.now);
    }
}
