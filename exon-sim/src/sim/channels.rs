//! The ordered-channel applications ([`Scenario::channels`](crate::Scenario::channels)):
//! senders number each channel's messages with an `exon::ordered::Sequencer` (one run per
//! boot of their node for the flows it starts, drawn from the simulation's random source)
//! and seal them with `Envelope::ordered`, replace each message given up (told not
//! delivered or in doubt) by a gap (`Envelope::gap`) and settle it when the gap is
//! acknowledged; receivers run an `exon::ordered::Reorder` per sender and channel and leave
//! the messages that arrive ahead of their turn untaken in their node (so unacknowledged)
//! until released in order, however far beyond their own window. Each node has its window
//! (`ChannelModel::windows`): a receiver advertises it when a sender's run starts
//! (`Envelope::window`), and the sender keeps to the smaller of the two, as the endpoint
//! does. Plain messages, mixed in, are taken at once. The oracle sees every step.
//!
//! In durable mode the flows are durable as the endpoint's are (rule `durable_flows`):
//! each new message keeps its flow's `SendPosition` with it in its journal record
//! (`Node::send_marked`), each take of a message or gap released keeps the flow's
//! `RecvPosition` (`Node::handle_taken_marked`), and a flagged redelivery of a number
//! below the next due of the run is handed out again at once (released before a crash,
//! not taken). A restarted host goes on from its marks (`chan_resume.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use exon::envelope::{Envelope, Flow, Place};
use exon::ordered::position::{self, RecvPosition};
use exon::ordered::{Arrival, Reorder, Settled, Step, Window};
use exon::proto::journal::Mark;
use exon::proto::{DeliveryId, MsgId};
use rand::Rng;

use super::ids::node_id;
use super::numbering::Numbering;
use super::queue::{nanos, What};
use super::Sim;
use crate::channels::ChannelModel;
use crate::oracle::{ChanVerdict, FlowKey, ViolationKind};
use crate::workload::{is_whole, read_payload, write_payload, Kind, MsgKey};

/// What a sent channel message or gap was.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChanMsg {
    pub(super) to: usize,
    pub(super) channel: u16,
    pub(super) run: u32,
    pub(super) seq: u64,
    pub(super) gap: bool,
}

/// A receiver's handle on an arrival held in its `Reorder`: the delivery to take, and the
/// body (empty for a gap).
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(super) id: DeliveryId,
    pub(super) body: Bytes,
}

/// A gap a sender owes: receiver, channel, run, number.
pub(super) type Owed = (usize, u16, u32, u64);

/// One host's channel state, as sender and receiver; a crash loses all of it (a durable
/// host rebuilds it from its journal's marks and messages).
#[derive(Default)]
pub(crate) struct ChanHost {
    /// The run of the flows this boot of the node starts.
    pub(crate) run: u32,
    /// Durable mode with rule `durable_flows`: positions are kept in marks.
    pub(super) durable: bool,
    /// Numbering per (receiver, channel).
    pub(super) send: BTreeMap<(usize, u16), Numbering>,
    /// What each message id is (of this boot, and recovered).
    pub(super) ids: HashMap<u64, ChanMsg>,
    /// Gaps to send.
    pub(crate) gaps_owed: Vec<Owed>,
    /// Reorder buffer per (sender, channel).
    pub(super) recv: BTreeMap<(usize, u16), Reorder<Item>>,
    /// Ids of the window advertisements sent (their verdicts matter to nobody).
    pub(super) adverts: BTreeSet<u64>,
    /// Durable mode: flows resumed from a receiver's mark whose senders have not been told
    /// this receiver's window since (told at their first arrival).
    pub(super) unadvertised: BTreeSet<(usize, u16)>,
    /// Durable mode, `ChannelModel::owed_gaps_at_restart` off: the gaps a resumed flow
    /// owes, sent when the application sends on it again (by receiver and channel).
    pub(super) owed_later: BTreeMap<(usize, u16), Vec<Owed>>,
    /// Channels (sender, number) holding messages ahead of their turn, and where each
    /// stood (run, next number due) at the last look (`chan_stalls.rs`).
    pub(super) standing: BTreeMap<(usize, u16), Option<(u32, u64)>>,
    /// A look at them is scheduled.
    pub(super) look_scheduled: bool,
    /// Channels whose sender has a question about its run outstanding, and the questions'
    /// message ids.
    pub(super) asking: BTreeSet<(usize, u16)>,
    pub(super) query_ids: HashMap<u64, (usize, u16)>,
}

/// The mark lane of channel `ch`, its sending side or its receiving side.
pub(super) fn chan_lane(ch: u16, sending: bool) -> u64 {
    position::lane(Flow::Channel(ch).code(), sending)
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
    /// room or the node refused it for now. A durable flow keeps its position with it.
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
        let boot_run = h.chans.run;
        let durable = h.chans.durable;
        if let Some(owed) = h.chans.owed_later.remove(&(to, ch)) {
            // The application makes the channel again: its owed gaps go (next round).
            h.chans.gaps_owed.extend(owed);
        }
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
            .or_insert_with(|| Numbering::new(m, i, boot_run));
        let run = num.run();
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
        let env = Envelope::ordered(place, false, body.into());
        let sent = if durable {
            let mark = Mark {
                lane: chan_lane(ch, true),
                value: num.position(seq, m).encode(),
            };
            node.send_marked(now, node_id(to), env, true, mark)
        } else {
            node.send_reported(now, node_id(to), env)
        };
        let Ok(id) = sent else {
            num.unassign(seq);
            return false;
        };
        let key = self.oracle.on_submit(i, to, self.now);
        let h = &mut self.hosts[i];
        h.msg_keys.insert(id.0, key.seq);
        let msg = ChanMsg {
            to,
            channel: ch,
            run,
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
            // In durable mode the application keeps its deadlines across crashes, as the
            // journal keeps its messages.
            let what = What::GiveUp {
                node: i as u32,
                to: to as u32,
                id: id.0,
                boot,
                seq: if durable { key.seq } else { u64::MAX },
            };
            self.queue.push(self.now + nanos(d), what);
        }
        true
    }

    /// Node `i` sends the gaps it owes (with no deadline, and no mark: a gap is not a new
    /// number); those refused for now wait for the next round.
    fn send_gaps(&mut self, i: usize) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let Some(node) = h.node.as_mut() else {
            return;
        };
        let mut left = Vec::new();
        let mut sent = Vec::new();
        for (to, ch, run, seq) in std::mem::take(&mut h.chans.gaps_owed) {
            let place = Place {
                flow: Flow::Channel(ch),
                run,
                seq,
            };
            match node.send_reported(now, node_id(to), Envelope::gap(place)) {
                Ok(id) => {
                    h.chan_own.insert(id.0);
                    let gap = ChanMsg {
                        to,
                        channel: ch,
                        run,
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
                Err(_) => left.push((to, ch, run, seq)),
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
    /// oracle). A message or gap of a run its flow no longer numbers (recovered from an
    /// older run) only tells the oracle.
    pub(super) fn chan_verdict(&mut self, i: usize, id: MsgId, v: ChanVerdict) -> bool {
        let Some(m) = self.sc.channels.clone() else {
            return false;
        };
        let h = &mut self.hosts[i];
        if h.chans.adverts.remove(&id.0) {
            if let Some(key) = h.chans.query_ids.remove(&id.0) {
                h.chans.asking.remove(&key);
            }
            return true;
        }
        let Some(msg) = h.chans.ids.remove(&id.0) else {
            // A verdict its journal kept and the restarted node reports: it says nothing of
            // its flow or number (the journal keeps no payload with a verdict), as at the
            // endpoint. The application knows its message (the oracle hears it); a gap's or
            // an advertisement's matters to nobody.
            if let Some(&seq) = h.msg_keys.get(&id.0) {
                let key = MsgKey {
                    sender: i as u32,
                    seq,
                };
                self.oracle.on_chan_verdict_of(key, v, self.now);
            }
            return h.chan_own.contains(&id.0);
        };
        let flow = FlowKey {
            from: i as u32,
            to: msg.to as u32,
            run: msg.run,
            channel: msg.channel,
        };
        let num = h
            .chans
            .send
            .get_mut(&(msg.to, msg.channel))
            .filter(|n| n.run() == msg.run);
        if msg.gap {
            match (v, num) {
                (ChanVerdict::Delivered, num) => {
                    if let Some(num) = num {
                        num.on_gap(msg.seq);
                    }
                    self.oracle.on_chan_gap_acked(flow, msg.seq, self.now);
                }
                (_, Some(_)) => h
                    .chans
                    .gaps_owed
                    .push((msg.to, msg.channel, msg.run, msg.seq)),
                (_, None) => {}
            }
        } else {
            let settled = num.map(|n| n.on_verdict(msg.seq, v == ChanVerdict::Delivered));
            if settled == Some(Settled::SendGap) && m.gaps {
                h.chans
                    .gaps_owed
                    .push((msg.to, msg.channel, msg.run, msg.seq));
            }
            self.oracle.on_chan_verdict(flow, msg.seq, v, self.now);
        }
        // A place may have come free, or a gap is owed.
        self.schedule_pump(i, self.now);
        msg.gap
    }

    /// Whether node `i`'s message `id` is one of its channel application's own, not the
    /// workload's: a gap or a window advertisement.
    pub(super) fn chan_unkeyed(&self, i: usize, id: MsgId) -> bool {
        self.hosts[i].chan_own.contains(&id.0)
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
            Envelope::Query(place) => self.chan_query(i, from, place, id),
            Envelope::Over(place) => self.chan_over(i, from, place, id),
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

    /// Node `i`'s application takes delivery `id`, a number of channel `ch` from `from`
    /// released to it; a durable flow keeps its position with the take (its `Reorder`'s
    /// run and next number due, as `Flows::take_mark` does), in the same record.
    fn chan_take_released(&mut self, i: usize, from: usize, ch: u16, id: DeliveryId) {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let Some(node) = h.node.as_mut() else {
            return;
        };
        let pos = match h.chans.recv.get(&(from, ch)) {
            Some(r) if h.chans.durable => r.run().map(|run| RecvPosition {
                run,
                next: r.next(),
                offset: 0,
                ended: false,
            }),
            _ => None,
        };
        let mark = pos.map(|pos| Mark {
            lane: chan_lane(ch, false),
            value: pos.encode(),
        });
        super::nodes::take_marked(node, now, id, mark);
    }

    /// Number `seq` of `flow` is released to node `i`'s application: `item`, a message or
    /// (`gap`) its gap, taken then. A flagged redelivery (after a crash of the receiver)
    /// may be a number the application had: it commits its effect with the number, so
    /// the oracle checks the number, not a second effect.
    fn chan_release(&mut self, i: usize, flow: FlowKey, seq: u64, item: Item, gap: bool) {
        self.chan_take_released(i, flow.from as usize, flow.channel, item.id);
        let again = item.id.is_redelivery();
        let key = if gap {
            None
        } else {
            let key = self.oracle.on_taken(i, &item.body, self.now).map(|k| k.0);
            key.or_else(|| read_payload(&item.body).map(|k| k.0))
        };
        self.oracle.on_chan_release(flow, seq, key, again, self.now);
    }

    /// Number `seq` of run `run` of channel `ch` from `from` arrived at node `i`: its
    /// `Reorder` decides, the oracle checks what is released and how much is held. In
    /// durable mode a flagged redelivery of a number below the next due of the run was
    /// released before a crash and not taken: it is handed out again at once.
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
        let durable = self.hosts[i].chans.durable;
        let r = self.hosts[i].chans.recv.entry((from, ch)).or_default();
        let before = r.held();
        let known = r.run() == Some(run);
        // A stale message is of the arrival's run when it is the arrival, else of the run
        // a new one replaced.
        let prev_run = r.run();
        let (item, gap) = match &arrival {
            Arrival::Message { item, .. } => (item.clone(), false),
            Arrival::Gap(item) => (item.clone(), true),
        };
        let arriving = item.id;
        let flow = FlowKey {
            from: from as u32,
            to: i as u32,
            run,
            channel: ch,
        };
        if durable && known && seq < r.next() && item.id.is_redelivery() {
            self.oracle.on_chan_released_again();
            self.chan_release(i, flow, seq, item, gap);
            return;
        }
        let far = r.next().saturating_add(4 * u64::from(window));
        if known && !m.hold_beyond_window && seq >= far {
            // Rule off: taken (acknowledged) and dropped, never released.
            self.chan_discard(i, item);
            return;
        }
        r.on_arrival(run, seq, arrival, &mut out);
        let resumed = self.hosts[i].chans.unadvertised.remove(&(from, ch));
        let r = &self.hosts[i].chans.recv[&(from, ch)];
        if m.advertise && (!known || resumed) && r.run() == Some(run) {
            // The sender's run starts here (or this receiver restarted since): tell it
            // this receiver's window.
            self.chan_advertise(i, from, ch, run, own);
        }
        let r = &self.hosts[i].chans.recv[&(from, ch)];
        let (held, cur) = (r.held(), r.run());
        let Some(cur) = cur else {
            // No run known (this receiver restarted): a message is handed over out of the
            // order, a gap discarded.
            self.chan_release_stale(i, flow, out);
            return;
        };
        let flow = FlowKey { run: cur, ..flow };
        self.oracle
            .on_chan_held(flow, held, held > before, window, self.now);
        if held > 0 {
            self.chan_holding(i, (from, ch));
        }
        for step in out {
            match step {
                Step::Deliver { seq, item, .. } => self.chan_release(i, flow, seq, item, false),
                Step::Gap { seq, item } => self.chan_release(i, flow, seq, item, true),
                // Stale: handed to the application outside the order (the endpoint marks
                // it `Kind::Unordered`), a message of it as itself; its gap is discarded.
                Step::Stale {
                    seq,
                    item,
                    gap: false,
                } => {
                    let own = item.id == arriving;
                    let of = if own { Some(run) } else { prev_run };
                    match of {
                        Some(run) => {
                            self.chan_release_unordered(i, FlowKey { run, ..flow }, seq, item)
                        }
                        None => self.chan_discard(i, item),
                    }
                }
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
            h.chan_own.insert(id.0);
            self.last_activity = self.last_activity.max(self.now);
        }
    }

    /// Node `i`'s application gets `item` out of the order (`Kind::Unordered`), as number
    /// `seq` of `flow`: taken as a discard is, and told to the oracle, which checks it.
    fn chan_release_unordered(&mut self, i: usize, flow: FlowKey, seq: u64, item: Item) {
        self.chan_take(i, item.id);
        let key = self.oracle.on_taken(i, &item.body, self.now).map(|k| k.0);
        let key = key.or_else(|| read_payload(&item.body).map(|k| k.0));
        self.oracle.on_chan_unordered(flow, seq, key, self.now);
    }

    /// Node `i`'s `Reorder` released `steps` of `flow` out of its order: a message is handed
    /// over out of the order (`Kind::Unordered`), a gap or discard taken and dropped.
    pub(super) fn chan_release_stale(&mut self, i: usize, flow: FlowKey, steps: Vec<Step<Item>>) {
        for step in steps {
            match step {
                Step::Stale {
                    seq,
                    item,
                    gap: false,
                } => self.chan_release_unordered(i, flow, seq, item),
                Step::Discard(item) | Step::Stale { item, .. } => self.chan_discard(i, item),
                _ => {}
            }
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
}
