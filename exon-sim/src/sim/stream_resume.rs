//! Durable byte streams at a boot, as the endpoint resumes them (`Endpoint::
//! take_recovered_streams`): each writing side goes on from the position its last chunk
//! kept ([`SendPosition`]: its number, its bytes so far, whether it ended), its chunks
//! recovered without a verdict counted in its window (the node sends them again); each
//! reading side goes on from the position its last take kept ([`RecvPosition`]), reading
//! at its offset. With rule `durable_flows` off (or at the first boot) every stream starts
//! over from byte 0 in a new run.

use std::collections::BTreeMap;

use exon::envelope::{Envelope, Flow, Place};
use exon::ordered::position::{from_lane, RecvPosition, SendPosition};
use exon::proto::journal::Recovered;
use rand::Rng;

use super::numbering::Numbering;
use super::stream_read::InStream;
use super::streams::{numbering_model, Chunk, OutStream};
use super::Sim;
use crate::streams::StreamKey;

/// The host index of a node id.
fn host_of(id: exon::proto::NodeId) -> usize {
    id.get() as usize - 1
}

/// A stream's flow's number, if it is one of the workload's `streams`.
fn stream_of(flow: Option<Flow>, streams: u16) -> Option<u16> {
    match flow {
        Some(Flow::Stream {
            id,
            opener_sent: true,
        }) if id < u64::from(streams) => Some(id as u16),
        _ => None,
    }
}

/// The positions the journal's marks kept: writing sides' and reading sides'.
type Positions = (
    BTreeMap<(usize, u16), SendPosition>,
    BTreeMap<(usize, u16), RecvPosition>,
);

/// The stream positions in `rec`'s marks, of the workload's `streams`.
fn positions(rec: &Recovered, streams: u16) -> Positions {
    let (mut send, mut recv) = (BTreeMap::new(), BTreeMap::new());
    for (peer, lane, value) in &rec.marks {
        let (code, sending) = from_lane(*lane);
        let Some(s) = stream_of(Flow::from_code(code), streams) else {
            continue;
        };
        let k = (host_of(*peer), s);
        if sending {
            if let Some(p) = SendPosition::decode(value) {
                send.insert(k, p);
            }
        } else if let Some(p) = RecvPosition::decode(value) {
            recv.insert(k, p);
        }
    }
    (send, recv)
}

impl Sim {
    /// Registers every stream of the workload with the oracle.
    pub(super) fn streams_open(&mut self) {
        let Some(m) = self.sc.streams.clone() else {
            return;
        };
        let n = self.sc.nodes;
        for from in 0..n {
            for to in (0..n).filter(|&to| to != from) {
                for stream in 0..m.streams {
                    let key = StreamKey {
                        from: from as u32,
                        to: to as u32,
                        stream,
                    };
                    self.oracle.on_stream_opened(key, m.bytes);
                }
            }
        }
    }

    /// Starts node `i`'s stream application at a boot: draws the run of the streams it
    /// starts; with a journal (`rec`) knows its recovered chunks again (their verdicts go
    /// to their streams), and with rule `durable_flows` on (`keep`) resumes its streams
    /// from the journal's marks and keeps their positions in marks from now on.
    pub(super) fn stream_boot(&mut self, i: usize, keep: bool, rec: Option<&Recovered>) {
        let Some(m) = self.sc.streams.clone() else {
            return;
        };
        let cm = numbering_model(&m);
        let run = self.rng.gen();
        // (At the first boots the later hosts are not made yet.)
        let n = self.sc.nodes;
        let durable = rec.is_some() && keep;
        let (send, recv) = match rec {
            Some(rec) if keep => positions(rec, m.streams),
            _ => Default::default(),
        };
        let h = &mut self.hosts[i];
        h.streams.run = run;
        h.streams.durable = durable;
        let mut unsettled: BTreeMap<(usize, u16), Vec<(u64, usize)>> = BTreeMap::new();
        for msg in rec.map_or(&[][..], |r| &r.messages[..]) {
            let Ok(Envelope::Ordered {
                place:
                    place @ Place {
                        flow: Flow::Stream { id, .. },
                        ..
                    },
                last,
                body,
            }) = Envelope::open(msg.payload.to_bytes())
            else {
                continue;
            };
            let (to, stream) = (host_of(msg.to), id as u16);
            if send.get(&(to, stream)).is_some_and(|p| p.run == place.run) {
                unsettled
                    .entry((to, stream))
                    .or_default()
                    .push((place.seq, body.len()));
            }
            let chunk = Chunk {
                to,
                stream,
                place,
                last,
                body,
            };
            h.streams.ids.insert(msg.id.0, chunk);
        }
        let (mut writers, mut readers) = (0, 0);
        for peer in (0..n).filter(|&p| p != i) {
            for s in 0..m.streams {
                let k = (peer, s);
                let out = match send.get(&k) {
                    Some(pos) => {
                        writers += 1;
                        let held = unsettled.get(&k).map_or(&[][..], |v| &v[..]);
                        OutStream {
                            num: Numbering::resume(&cm, i, *pos, held),
                            offset: pos.offset,
                            write_left: 0,
                            ended: pos.ended,
                        }
                    }
                    None => OutStream {
                        num: Numbering::new(&cm, i, run),
                        offset: 0,
                        write_left: 0,
                        ended: false,
                    },
                };
                h.streams.out.insert(k, out);
                let inn = match recv.get(&k) {
                    Some(pos) => {
                        readers += 1;
                        InStream::resumed(*pos)
                    }
                    None => InStream::default(),
                };
                h.streams.inn.insert(k, inn);
            }
        }
        let c = self.oracle.stream_counters();
        c.writers_resumed += writers;
        c.readers_resumed += readers;
    }
}
