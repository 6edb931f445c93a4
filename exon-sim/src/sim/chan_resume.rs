//! Durable channels after a restart, as the endpoint resumes them at bind
//! (`endpoint/flows/resume.rs`, `Flows::resume`): each flow's sending side goes on from
//! the position its last message kept ([`SendPosition`]) with its messages and gaps
//! recovered without a verdict counted in its window, or from its recovered messages where
//! no mark is (`ResumedFlows::recovered`), owing a gap to each number from the mark's base
//! that it does not hold; each receiving side starts its `Reorder` at the
//! position its last take kept ([`RecvPosition`]) and advertises its window again at the
//! flow's first arrival. The oracle learns which numbers of the host's flows the crash
//! left (`Oracle::on_chan_sender_recovered`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use exon::envelope::{Envelope, Flow, Place};
use exon::ordered::position::{from_lane, RecvPosition, SendPosition};
use exon::ordered::Reorder;
use exon::proto::journal::{Recovered, RecoveredMessage};
use rand::Rng;

use super::channels::{ChanHost, ChanMsg, Owed};
use super::numbering::Numbering;
use super::Sim;
use crate::workload::MsgKey;

/// A sending side as recovered: where it stood, and its numbers without a verdict of that
/// run (number and bytes; 0 for a gap).
type Resumed = BTreeMap<(usize, u16), (SendPosition, Vec<(u64, usize)>)>;

/// The host index of a node id.
fn host_of(id: exon::proto::NodeId) -> usize {
    id.get() as usize - 1
}

impl Sim {
    /// Starts node `i`'s channel application at a boot: draws the run of the flows it
    /// starts and, with a journal (`rec`), knows its recovered messages again (their
    /// verdicts go to their flows); with rule `durable_flows` on (`keep`) its flows go on
    /// from the journal's marks, and it keeps their positions in marks from now on.
    pub(super) fn chan_boot(&mut self, i: usize, keep: bool, rec: Option<&Recovered>) {
        let Some(m) = self.sc.channels.clone() else {
            return;
        };
        self.hosts[i].chans.run = self.rng.gen();
        let Some(rec) = rec else {
            return;
        };
        let chans = &mut self.hosts[i].chans;
        chans.durable = keep;
        let mut out = Resumed::new();
        if keep {
            resume_inbound(chans, rec);
            for (peer, lane, value) in &rec.marks {
                let (code, sending) = from_lane(*lane);
                if let (Some(Flow::Channel(ch)), true) = (Flow::from_code(code), sending) {
                    if let Some(pos) = SendPosition::decode(value) {
                        out.insert((host_of(*peer), ch), (pos, Vec::new()));
                    }
                }
            }
        }
        for msg in &rec.messages {
            recover_message(chans, &mut out, msg, keep);
        }
        let mut owed_gaps = 0;
        for ((to, ch), (pos, mut unsettled)) in out {
            if m.owed_gaps {
                // Every number from the base on that it does not hold may have been given
                // up with its gap lost in the crash: it owes each a gap (their receiver
                // discards those it released), counted in the window until acknowledged,
                // as `FlowOut::with_durable` does.
                let held: BTreeSet<u64> = unsettled.iter().map(|&(seq, _)| seq).collect();
                let owed: Vec<Owed> = (pos.base..pos.next)
                    .filter(|n| !held.contains(n))
                    .map(|seq| (to, ch, pos.run, seq))
                    .collect();
                owed_gaps += owed.len() as u64;
                unsettled.extend(owed.iter().map(|&(_, _, _, seq)| (seq, 0)));
                if m.owed_gaps_at_restart {
                    chans.gaps_owed.extend(owed);
                } else if !owed.is_empty() {
                    chans.owed_later.insert((to, ch), owed);
                }
            }
            let num = Numbering::resume(&m, i, pos, &unsettled);
            chans.send.insert((to, ch), num);
        }
        self.oracle.on_chan_owed_gaps(owed_gaps);
        self.chan_evidence(i, rec);
    }

    /// Tells the oracle which of node `i`'s channel messages outlived its crash in its
    /// journal (recovered without a verdict, or with a verdict not reported): with those
    /// released, given a verdict or settled by a gap before, they are the numbers the
    /// crash left; the others were never sent (their records were lost).
    fn chan_evidence(&mut self, i: usize, rec: &Recovered) {
        let h = &self.hosts[i];
        let ids = rec
            .messages
            .iter()
            .map(|m| m.id)
            .chain(rec.verdicts.iter().map(|v| v.id));
        let kept: HashSet<MsgKey> = ids
            .filter_map(|id| h.msg_keys.get(&id.0))
            .map(|&seq| MsgKey {
                sender: i as u32,
                seq,
            })
            .collect();
        self.oracle.on_chan_sender_recovered(i, &kept);
    }
}

/// The receiving sides the journal's marks name: each `Reorder` starts where its last take
/// left it, and tells its sender this receiver's window at the flow's first arrival.
fn resume_inbound(chans: &mut ChanHost, rec: &Recovered) {
    for (peer, lane, value) in &rec.marks {
        let (code, sending) = from_lane(*lane);
        let (Some(Flow::Channel(ch)), false) = (Flow::from_code(code), sending) else {
            continue;
        };
        if let Some(pos) = RecvPosition::decode(value) {
            let from = host_of(*peer);
            chans
                .recv
                .insert((from, ch), Reorder::started(pos.run, pos.next));
            chans.unadvertised.insert((from, ch));
        }
    }
}

/// A message recovered without a verdict: a channel message or gap is known again by its
/// id (its verdict goes to its flow) and, with `keep`, counts in its flow's window (a flow
/// without a mark is resumed from its message); a window advertisement is known as one.
fn recover_message(chans: &mut ChanHost, out: &mut Resumed, msg: &RecoveredMessage, keep: bool) {
    let (place, ch, len) = match Envelope::open(msg.payload.to_bytes()) {
        Ok(Envelope::Ordered {
            place:
                place @ Place {
                    flow: Flow::Channel(ch),
                    ..
                },
            body,
            ..
        }) => (place, ch, Some(body.len())),
        Ok(Envelope::Gap(
            place @ Place {
                flow: Flow::Channel(ch),
                ..
            },
        )) => (place, ch, None),
        Ok(Envelope::Window { .. }) => {
            chans.adverts.insert(msg.id.0);
            return;
        }
        _ => return,
    };
    let to = host_of(msg.to);
    let known = ChanMsg {
        to,
        channel: ch,
        run: place.run,
        seq: place.seq,
        gap: len.is_none(),
    };
    chans.ids.insert(msg.id.0, known);
    if !keep {
        return;
    }
    let (pos, unsettled) = out.entry((to, ch)).or_insert_with(|| {
        // No mark (written before marks, or lost with the rule off): the message says.
        let pos = SendPosition {
            run: place.run,
            next: place.seq + 1,
            offset: 0,
            peer_window: None,
            ended: false,
            base: place.seq,
        };
        (pos, Vec::new())
    });
    if place.run == pos.run {
        pos.next = pos.next.max(place.seq + 1);
        pos.base = pos.base.min(place.seq);
        unsettled.push((place.seq, len.unwrap_or(0)));
    }
}
