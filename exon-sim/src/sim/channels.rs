//! The ordered-channel applications ([`Scenario::channels`](crate::Scenario::channels)):
//! senders number each channel's messages with an `exon::ordered::Sequencer` (one run per
//! boot of their node, drawn from the simulation's random source) and seal them with
//! `Envelope::ordered`, replace each message given up (told not delivered or in doubt) by a
//! gap (`Envelope::gap`) and settle it when the gap is acknowledged; receivers run an
//! `exon::ordered::Reorder` per sender and channel and leave the messages that arrive ahead
//! of their turn untaken in their node (so unacknowledged) until released in order, however
//! far beyond their own window. Each node has its window (`ChannelModel::windows`): a
//! receiver advertises it when a sender's run starts (`Envelope::window`), and the sender
//! keeps to the smaller of the two, as the endpoint does. Plain messages, mixed in, are
//! taken at once. The oracle sees every step.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use exon::envelope::{Envelope, Flow, Place};
use exon::ordered::{Arrival, Reorder, Sequencer, Settled, Step, Window};
use exon::proto::{DeliveryId, MsgId};
use rand::Rng;

use super::ids::node_id;
use super::queue::{nanos, What};
use super::Sim;
use crate::channels::ChannelModel;
use crate::oracle::{ChanVerdict, FlowKey, ViolationKind};
use crate::workload::{is_whole, read_payload, write_payload, Kind, MsgKey};

/// A sender's numbering of one flow: the real `Sequencer`, or, with the first-message-alone
/// rule switched off, a plain counter (bounded by the window unless that rule is off too).
enum Numbering {
    Real(Sequencer),
    Loose {
        next: u64,
        unsettled: BTreeSet<u64>,
        window: Option<u32>,
    },
}

impl Numbering {
    /// The numbering of node `node`'s flow of run `run`.
    fn new(m: &ChannelModel, node: usize, run: u32) -> Numbering {
        let own = m.window_of(node);
        if !m.first_alone {
            Numbering::Loose {
                next: 0,
                unsettled: BTreeSet::new(),
                window: m.window_rule.then_some(own.messages),
            }
        } else if !m.window_rule {
            let open = Window {
                messages: u32::MAX,
                bytes: usize::MAX,
            };
            Numbering::Real(Sequencer::new(run, open))
        } else if m.advertise {
            Numbering::Real(Sequencer::new(run, own).expect_peer_window())
        } else {
            Numbering::Real(Sequencer::new(run, own))
        }
    }

    /// The receiver advertised its window for run `run`.
    fn on_peer_window(&mut self, run: u32, w: Window) {
        if let Numbering::Real(s) = self {
            if s.run() == run && s.peer_window().is_none() {
                s.on_peer_window(w);
            }
        }
    }

    fn assign(&mut self, len: usize) -> Option<u64> {
        match self {
            Numbering::Real(s) => s.assign(len, false),
            Numbering::Loose {
                next,
                unsettled,
                window,
            } => {
                if window.is_some_and(|w| unsettled.len() >= w as usize) {
                    return None;
                }
                let seq = *next;
                *next += 1;
                unsettled.insert(seq);
                Some(seq)
            }
        }
    }

    fn unassign(&mut self, seq: u64) {
        match self {
            Numbering::Real(s) => s.unassign(seq),
            Numbering::Loose {
                next, unsettled, ..
            } => {
                if seq + 1 == *next && unsettled.remove(&seq) {
                    *next = seq;
                }
            }
        }
    }

    fn on_verdict(&mut self, seq: u64, delivered: bool) -> Settled {
        match self {
            Numbering::Real(s) => s.on_verdict(seq, delivered),
            Numbering::Loose { unsettled, .. } => {
                if !unsettled.contains(&seq) {
                    Settled::Unknown
                } else if delivered {
                    unsettled.remove(&seq);
                    Settled::Done
                } else {
                    Settled::SendGap
                }
            }
        }
    }

    fn on_gap(&mut self, seq: u64) {
        match self {
            Numbering::Real(s) => s.on_gap(seq),
            Numbering::Loose { unsettled, .. } => {
                unsettled.remove(&seq);
            }
        }
    }
}

/// What a sent channel message or gap was.
#[derive(Debug, Clone, Copy)]
struct ChanMsg {
    to: usize,
    channel: u16,
    seq: u64,
    gap: bool,
}

/// A receiver's handle on an arrival held in its `Reorder`: the delivery to take, and the
/// body (empty for a gap).
#[derive(Debug, Clone)]
pub(crate) struct Item {
    id: DeliveryId,
    body: Bytes,
}

/// One host's channel state, as sender and receiver; a crash loses all of it.
#[derive(Default)]
pub(crate) struct ChanHost {
    /// The run of this boot of the node.
    pub(crate) run: u32,
    /// Numbering per (receiver, channel).
    send: BTreeMap<(usize, u16), Numbering>,
    /// What each message id of this boot is.
    ids: HashMap<u64, ChanMsg>,
    /// Gaps to send: (receiver, channel, number).
    pub(crate) gaps_owed: Vec<(usize, u16, u64)>,
    /// Reorder buffer per (sender, channel).
    recv: BTreeMap<(usize, u16), Reorder<Item>>,
    /// Ids of the window advertisements this boot sent (their verdicts matter to nobody).
    adverts: BTreeSet<u64>,
}

impl Sim {
    /// The channel application of node `i` sends the gaps it owes, then the messages its
    /// quota allows: on random channels to random receivers (while the flow's window has
    /// room), and one in `plain_one_in` a plain message.
    pub(super) fn chan_pump(&mut self, i: usize) {
        self.hosts[i].pump_scheduled = false;
        if self.hosts[i].node.is_none() {
            return; // resumed by the restart
        }
        let (Some(m), wl) = (self.sc.channels.clone(), self.sc.workload.clone()) else {
            return;
        };
        self.send_gaps(i);
        let n = self.hosts.len();
        let mut sent = 0;
        while self.hosts[i].quota > 0 && sent < wl.burst {
            if m.plain_one_in > 0 && self.rng.gen_range(0..m.plain_one_in) == 0 {
                if !self.plain_message(i) {
                    break;
                }
            } else {
                let to = wl.pick(i, n, &mut self.rng);
                let ch = self.rng.gen_range(0..m.channels.max(1));
                if !self.chan_send(i, to, ch, &m) {
                    break;
                }
            }
            sent += 1;
        }
        self.drain(i);
        self.schedule_pump(i, self.now + nanos(wl.interval));
    }

    /// Node `i` sends its next message on channel `ch` to `to`; false if the flow has no
    /// room or the node refused it for now.
    fn chan_send(&mut self, i: usize, to: usize, ch: u16, m: &ChannelModel) -> bool {
        let wl = &self.sc.workload;
        let key = MsgKey {
            sender: i as u32,
            seq: self.oracle.next_seq(i),
        };
        let len = wl.len_of(key);
        let max_pending = wl.max_pending;
        let now = self.instant();
        let h = &mut self.hosts[i];
        let run = h.chans.run;
        let Some(node) = h.node.as_mut() else {
            return false;
        };
        if node.pending_to(node_id(to)) >= max_pending {
            return false;
        }
        let num = h
            .chans
            .send
            .entry((to, ch))
            .or_insert_with(|| Numbering::new(m, i, run));
        let Some(seq) = num.assign(len) else {
            return false;
        };
        let mut body = Vec::with_capacity(len);
        write_payload(&mut body, key, Kind::Data, len);
        let place = Place {
            flow: Flow::Channel(ch),
            run,
            seq,
        };
        // As the endpoint sends them: held untaken for their turn, they are reported (GOT).
        let Ok(id) = node.send_reported(
            now,
            node_id(to),
            Envelope::ordered(place, false, body.into()),
        ) else {
            num.unassign(seq);
            return false;
        };
        let key = self.oracle.on_submit(i, to, self.now);
        let h = &mut self.hosts[i];
        h.msg_keys.insert(id.0, key.seq);
        let msg = ChanMsg {
            to,
            channel: ch,
            seq,
            gap: false,
        };
        h.chans.ids.insert(id.0, msg);
        h.quota -= 1;
        let boot = h.restarts;
        let flow = FlowKey {
            from: i as u32,
            to: to as u32,
            run,
            channel: ch,
        };
        self.oracle.on_chan_sent(flow, seq, key, self.now);
        self.last_activity = self.last_activity.max(self.now);
        if let Some(d) = self.sc.deadline {
            let what = What::GiveUp {
                node: i as u32,
                to: to as u32,
                id: id.0,
                boot,
                seq: u64::MAX,
            };
            self.queue.push(self.now + nanos(d), what);
        }
        true
    }

    /// Node `i` sends the gaps it owes (with no deadline); those refused for now wait for
    /// the next round.
    fn send_gaps(&mut self, i: usize) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let Some(node) = h.node.as_mut() else {
            return;
        };
        let run = h.chans.run;
        let mut left = Vec::new();
        let mut sent = Vec::new();
        for (to, ch, seq) in std::mem::take(&mut h.chans.gaps_owed) {
            let place = Place {
                flow: Flow::Channel(ch),
                run,
                seq,
            };
            match node.send_reported(now, node_id(to), Envelope::gap(place)) {
                Ok(id) => {
                    let gap = ChanMsg {
                        to,
                        channel: ch,
                        seq,
                        gap: true,
                    };
                    h.chans.ids.insert(id.0, gap);
                    sent.push(FlowKey {
                        from: i as u32,
                        to: to as u32,
                        run,
                        channel: ch,
                    });
                }
                Err(_) => left.push((to, ch, seq)),
            }
        }
        h.chans.gaps_owed = left;
        if !sent.is_empty() {
            self.last_activity = self.last_activity.max(self.now);
        }
        for flow in sent {
            self.oracle.on_chan_gap_sent(flow);
        }
    }

    /// Node `i` learned verdict `v` on its message `id`. For a gap it settles the number
    /// (or, not delivered, owes the gap again) and returns true; for a channel message it
    /// feeds the flow's numbering (owing a gap if it was given up, with the gap rule on)
    /// and returns false, as for any other message (the caller goes on with the message
    /// oracle).
    pub(super) fn chan_verdict(&mut self, i: usize, id: MsgId, v: ChanVerdict) -> bool {
        let Some(m) = self.sc.channels.clone() else {
            return false;
        };
        let h = &mut self.hosts[i];
        if h.chans.adverts.remove(&id.0) {
            return true;
        }
        let Some(msg) = h.chans.ids.remove(&id.0) else {
            return false;
        };
        let flow = FlowKey {
            from: i as u32,
            to: msg.to as u32,
            run: h.chans.run,
            channel: msg.channel,
        };
        let Some(num) = h.chans.send.get_mut(&(msg.to, msg.channel)) else {
            return msg.gap;
        };
        if msg.gap {
            if v == ChanVerdict::Delivered {
                num.on_gap(msg.seq);
                self.oracle.on_chan_gap_acked(flow, msg.seq, self.now);
            } else {
                h.chans.gaps_owed.push((msg.to, msg.channel, msg.seq));
            }
        } else {
            let settled = num.on_verdict(msg.seq, v == ChanVerdict::Delivered);
            if settled == Settled::SendGap && m.gaps {
                h.chans.gaps_owed.push((msg.to, msg.channel, msg.seq));
            }
            self.oracle.on_chan_verdict(flow, msg.seq, v, self.now);
        }
        // A place may have come free, or a gap is owed.
        self.schedule_pump(i, self.now);
        msg.gap
    }

    /// A delivery to node `i`'s channel application: a plain message is taken at once; a
    /// channel message or gap goes through its flow's `Reorder`, which says what to hand
    /// over (then take) and what to take and drop; what it holds stays untaken.
    pub(super) fn chan_delivered(&mut self, i: usize, from: usize, payload: Bytes, id: DeliveryId) {
        let again = id.is_redelivery();
        let env = match Envelope::open(payload) {
            Ok(e) => e,
            Err(e) => {
                let what =
                    format!("node{i} got a message from node{from} that is no envelope: {e}");
                self.oracle
                    .violate(ViolationKind::NeverSent, None, self.now, what);
                self.chan_take(i, id);
                return;
            }
        };
        match env {
            Envelope::Message(body) => {
                if let Some((key, _)) = self.oracle.on_handover(i, from, &body, again, self.now) {
                    self.check_whole(i, key, &body);
                    self.chan_take(i, id);
                    self.oracle.on_taken(i, &body, self.now);
                } else {
                    self.chan_take(i, id);
                }
            }
            Envelope::Ordered {
                place:
                    Place {
                        flow: Flow::Channel(ch),
                        run,
                        seq,
                    },
                last,
                body,
            } => {
                let Some((key, _)) = self.oracle.on_handover(i, from, &body, again, self.now)
                else {
                    self.chan_take(i, id);
                    self.drain(i);
                    return;
                };
                self.check_whole(i, key, &body);
                let item = Item { id, body };
                self.chan_arrival(i, from, ch, run, seq, Arrival::Message { item, last });
            }
            Envelope::Gap(Place {
                flow: Flow::Channel(ch),
                run,
                seq,
            }) => {
                let item = Item {
                    id,
                    body: Bytes::new(),
                };
                self.chan_arrival(i, from, ch, run, seq, Arrival::Gap(item));
            }
            Envelope::Window {
                flow: Flow::Channel(ch),
                run,
                messages,
                bytes,
            } => {
                // A receiver's window for this node's flow to it.
                self.chan_take(i, id);
                let w = Window {
                    messages,
                    bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
                };
                if let Some(num) = self.hosts[i].chans.send.get_mut(&(from, ch)) {
                    num.on_peer_window(run, w);
                }
                self.schedule_pump(i, self.now);
            }
            other => {
                let what = format!("node{i} got {other:?} from node{from}, never sent");
                self.oracle
                    .violate(ViolationKind::NeverSent, None, self.now, what);
                self.chan_take(i, id);
            }
        }
        self.drain(i);
    }

    fn check_whole(&mut self, i: usize, key: MsgKey, body: &[u8]) {
        if !is_whole(body, key, self.sc.workload.len_of(key)) {
            let what = format!("node{i} delivered {} bytes, not the message", body.len());
            self.oracle
                .violate(ViolationKind::Corrupted, Some(key), self.now, what);
        }
    }

    /// Node `i`'s application takes delivery `id` (its node acknowledges it).
    fn chan_take(&mut self, i: usize, id: DeliveryId) {
        let now = self.instant();
        if let Some(node) = self.hosts[i].node.as_mut() {
            node.handle_taken(now, id);
        }
    }

    /// Number `seq` of run `run` of channel `ch` from `from` arrived at node `i`: its
    /// `Reorder` decides, the oracle checks what is released and how much is held.
    fn chan_arrival(
        &mut self,
        i: usize,
        from: usize,
        ch: u16,
        run: u32,
        seq: u64,
        arrival: Arrival<Item>,
    ) {
        let Some(m) = self.sc.channels.clone() else {
            return;
        };
        let own = m.window_of(i);
        let window = own.messages;
        let mut out = Vec::new();
        let r = self.hosts[i].chans.recv.entry((from, ch)).or_default();
        let before = r.held();
        let known = r.run() == Some(run);
        let far = r.next().saturating_add(4 * u64::from(window));
        if known && !m.hold_beyond_window && seq >= far {
            // Rule off: taken (acknowledged) and dropped, never released.
            let item = match arrival {
                Arrival::Message { item, .. } | Arrival::Gap(item) => item,
            };
            self.chan_discard(i, item);
            return;
        }
        r.on_arrival(run, seq, arrival, &mut out);
        if m.advertise && !known && r.run() == Some(run) {
            // The sender's run starts here: tell it this receiver's window.
            self.chan_advertise(i, from, ch, run, own);
        }
        let r = &self.hosts[i].chans.recv[&(from, ch)];
        let (held, cur) = (r.held(), r.run());
        let Some(cur) = cur else {
            for step in out {
                if let Step::Discard(item) | Step::Stale { item, .. } = step {
                    self.chan_discard(i, item);
                }
            }
            return;
        };
        let flow = FlowKey {
            from: from as u32,
            to: i as u32,
            run: cur,
            channel: ch,
        };
        self.oracle
            .on_chan_held(flow, held, held > before, window, self.now);
        for step in out {
            match step {
                Step::Deliver { seq, item, .. } => {
                    self.chan_take(i, item.id);
                    let key = self.oracle.on_taken(i, &item.body, self.now).map(|k| k.0);
                    let key = key.or_else(|| read_payload(&item.body).map(|k| k.0));
                    self.oracle.on_chan_release(flow, seq, key, self.now);
                }
                Step::Gap { seq, item } => {
                    self.chan_take(i, item.id);
                    self.oracle.on_chan_release(flow, seq, None, self.now);
                }
                // Stale: handed to the application outside the order (the endpoint marks
                // it `Kind::Unordered`); counted as delivered, not as released in order.
                Step::Discard(item) | Step::Stale { item, .. } => self.chan_discard(i, item),
            }
        }
    }

    /// Node `i` advertises its window `w` to `to` for `to`'s run `run` of channel `ch`
    /// (with no deadline; refused for now, it is not sent: the sender goes on one message
    /// at a time).
    fn chan_advertise(&mut self, i: usize, to: usize, ch: u16, run: u32, w: Window) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let Some(node) = h.node.as_mut() else {
            return;
        };
        let payload = Envelope::window(Flow::Channel(ch), run, w.messages, w.bytes as u64);
        if let Ok(id) = node.send_reported(now, node_id(to), payload) {
            h.chans.adverts.insert(id.0);
            self.last_activity = self.last_activity.max(self.now);
        }
    }

    /// Node `i` takes and drops an arrival its `Reorder` discarded.
    fn chan_discard(&mut self, i: usize, item: Item) {
        self.chan_take(i, item.id);
        if !item.body.is_empty() {
            self.oracle.on_taken(i, &item.body, self.now);
        }
        self.oracle.on_chan_discard();
    }

    /// Draws node `i`'s run for this boot.
    pub(super) fn chan_boot(&mut self, i: usize) {
        if self.sc.channels.is_some() {
            self.hosts[i].chans.run = self.rng.gen();
        }
    }
}
