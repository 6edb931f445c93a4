//! The oracle's checks of ordered channels ([`Scenario::channels`](crate::Scenario::channels)):
//! per flow (sender, receiver, sender's run, channel) the receiving application sees the
//! numbers strictly in order, each once, as the message sent under it or as a gap; a message
//! told not delivered is never released as a message, an acknowledged one was; the receiver
//! never holds more out of order than the window allows; and after healing every flow of a
//! live sender is released to its end.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Oracle, ViolationKind};
use crate::workload::MsgKey;

/// An ordered flow as the oracle names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// The sending node.
    pub from: u32,
    /// The receiving node.
    pub to: u32,
    /// The sender's run (drawn at each boot of its node).
    pub run: u32,
    /// The channel.
    pub channel: u16,
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node{}->node{} channel {} run {:08x}",
            self.from, self.to, self.channel, self.run
        )
    }
}

/// How a number was released to the receiving application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Released {
    Message,
    Gap,
    /// Out of the order (`Kind::Unordered`): the receiver no longer knew the run.
    Unordered,
}

/// The sender's verdict on a channel message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChanVerdict {
    /// Acknowledged.
    Delivered,
    /// Told certainly not delivered.
    NotDelivered,
    /// Told in doubt.
    InDoubt,
}

/// One number of a flow.
#[derive(Debug, Clone, Copy)]
struct Num {
    key: MsgKey,
    verdict: Option<ChanVerdict>,
    gap_acked: bool,
    released: Option<Released>,
}

/// One flow.
#[derive(Debug, Default)]
struct FlowRec {
    nums: Vec<Num>,
    /// The next number the receiving application is due.
    next: u64,
    /// Its sender restarted: the flow may stop short.
    sender_restarted: bool,
    /// Its receiver restarted: what it held is lost.
    receiver_restarted: bool,
}

/// Counters of the channel workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelCounts {
    /// Flows (sender run and channel to one receiver) with a message sent.
    pub flows: u64,
    /// Channel messages sent.
    pub sent: u64,
    /// Released to the receiving application as messages.
    pub released: u64,
    /// Released as gaps.
    pub gaps: u64,
    /// Gaps sent.
    pub gaps_sent: u64,
    /// Arrivals discarded (a late copy of a number passed, an old run).
    pub discarded: u64,
    /// Arrivals held out of order (at the time they arrived).
    pub held: u64,
    /// The most messages and gaps one flow held at once.
    pub max_held: u64,
    /// Released out of the order: messages of a run the receiver no longer knew (it
    /// restarted, or a new run of the flow replaced it), handed over `Kind::Unordered`.
    pub unordered: u64,
    /// Durable mode: flagged redeliveries of numbers below the next due of their run,
    /// handed out again at once (released before a crash of the receiver, not taken).
    pub released_again: u64,
    /// Durable mode: numbers released again (flagged) that the receiving application had
    /// already: it commits its effect with the number, so they change nothing.
    pub repeated: u64,
    /// Durable mode: gaps restarted senders owed to the numbers from their marks' bases
    /// they no longer held (`SendPosition::base`).
    pub owed_gaps: u64,
    /// Durable mode: numbers a sender's crash took before their records were durable
    /// (never sent: the sender numbers its next messages from there again).
    pub lost_with_sender: u64,
}

impl ChannelCounts {
    /// Adds the counters of another run (of `max_held`, the larger), for a soak's sum.
    pub fn add(&mut self, o: &ChannelCounts) {
        self.flows += o.flows;
        self.sent += o.sent;
        self.released += o.released;
        self.gaps += o.gaps;
        self.gaps_sent += o.gaps_sent;
        self.discarded += o.discarded;
        self.held += o.held;
        self.max_held = self.max_held.max(o.max_held);
        self.unordered += o.unordered;
        self.released_again += o.released_again;
        self.repeated += o.repeated;
        self.owed_gaps += o.owed_gaps;
        self.lost_with_sender += o.lost_with_sender;
    }
}

/// Every flow.
#[derive(Debug, Default)]
pub(super) struct Flows {
    flows: BTreeMap<FlowKey, FlowRec>,
    /// The flow and number of each channel message sent.
    by_key: HashMap<MsgKey, (FlowKey, u64)>,
    counts: ChannelCounts,
}

impl Oracle {
    /// Counters of the channel workload.
    pub fn channel_counts(&self) -> ChannelCounts {
        self.chans.counts
    }

    /// The sender of `flow` sent message `key` as number `seq`: numbers must be consecutive
    /// from 0.
    pub fn on_chan_sent(&mut self, flow: FlowKey, seq: u64, key: MsgKey, now: u64) {
        let f = self.chans.flows.entry(flow).or_default();
        if f.nums.is_empty() {
            self.chans.counts.flows += 1;
        }
        self.chans.counts.sent += 1;
        if seq != f.nums.len() as u64 {
            let what = format!("{flow}: sent number {seq}, {} due", f.nums.len());
            self.violate(ViolationKind::ChannelOrder, Some(key), now, what);
            return;
        }
        f.nums.push(Num {
            key,
            verdict: None,
            gap_acked: false,
            released: None,
        });
        self.chans.by_key.insert(key, (flow, seq));
    }

    /// The sender of channel message `key` got its verdict `v` without knowing its flow (a
    /// verdict its journal kept and its restarted node reports: the journal keeps no
    /// payload with a verdict); nothing if `key` is not a channel message.
    pub fn on_chan_verdict_of(&mut self, key: MsgKey, v: ChanVerdict, now: u64) {
        if let Some(&(flow, seq)) = self.chans.by_key.get(&key) {
            self.on_chan_verdict(flow, seq, v, now);
        }
    }

    /// The sender of `flow` got the verdict of number `seq`. An acknowledged message must
    /// have been released as itself; one told not delivered must not have been.
    pub fn on_chan_verdict(&mut self, flow: FlowKey, seq: u64, v: ChanVerdict, now: u64) {
        let Some(n) = self.num_mut(flow, seq) else {
            let what = format!("{flow}: a verdict on number {seq}, never sent");
            self.violate(ViolationKind::ChannelOrder, None, now, what);
            return;
        };
        n.verdict = Some(v);
        let (key, released) = (n.key, n.released);
        match (v, released) {
            (ChanVerdict::Delivered, Some(Released::Message | Released::Unordered)) => {}
            (ChanVerdict::Delivered, r) => {
                let what = format!(
                    "{flow}: number {seq} acknowledged, but released to the application {}",
                    if r.is_some() { "as a gap" } else { "never" }
                );
                self.violate(ViolationKind::ChannelAckedNotReleased, Some(key), now, what);
            }
            (ChanVerdict::NotDelivered, Some(Released::Message | Released::Unordered)) => {
                let what = format!("{flow}: number {seq} told not delivered, released as itself");
                self.violate(
                    ViolationKind::ChannelNotDeliveredReleased,
                    Some(key),
                    now,
                    what,
                );
            }
            _ => {}
        }
    }

    /// The sender of `flow` sent a gap for number `seq`.
    pub fn on_chan_gap_sent(&mut self, _flow: FlowKey) {
        self.chans.counts.gaps_sent += 1;
    }

    /// The gap of number `seq` of `flow` was acknowledged: it was released (as a gap, or
    /// as the message if that came first).
    pub fn on_chan_gap_acked(&mut self, flow: FlowKey, seq: u64, now: u64) {
        let Some(n) = self.num_mut(flow, seq) else {
            let what = format!("{flow}: gap {seq} acknowledged, never sent");
            self.violate(ViolationKind::ChannelOrder, None, now, what);
            return;
        };
        n.gap_acked = true;
    }

    /// The receiving application of `flow` got number `seq`: the message `key`, or a gap
    /// (`None`); `again`: flagged as a redelivery after a crash of the receiver. Numbers
    /// come strictly in order, each once, as what was sent under them. In durable mode the
    /// application commits each number's effect with the number (its own store, which
    /// crashes do not touch), so a flagged number it had already is allowed, and changes
    /// nothing: it must be one it had, the same message if it was one.
    pub fn on_chan_release(
        &mut self,
        flow: FlowKey,
        seq: u64,
        key: Option<MsgKey>,
        again: bool,
        now: u64,
    ) {
        let durable = self.durable;
        let f = self.chans.flows.entry(flow).or_default();
        if durable && again && seq < f.next {
            return self.on_chan_repeated(flow, seq, key, now);
        }
        if seq != f.next {
            let what = format!(
                "{flow}: number {seq} released as {}, {} due",
                if key.is_some() { "a message" } else { "a gap" },
                f.next
            );
            self.violate(ViolationKind::ChannelOrder, key, now, what);
            return;
        }
        f.next += 1;
        let Some(n) = f.nums.get_mut(seq as usize) else {
            let what = format!("{flow}: number {seq} released, never sent");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
            return;
        };
        let sent = n.key;
        let verdict = n.verdict;
        if n.released == Some(Released::Unordered) {
            let what = format!("{flow}: number {seq} released in order after out of it");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
            return;
        }
        n.released = Some(if key.is_some() {
            Released::Message
        } else {
            Released::Gap
        });
        match key {
            Some(k) => {
                self.chans.counts.released += 1;
                if k != sent {
                    let what = format!("{flow}: number {seq} released as message {k}, not {sent}");
                    self.violate(ViolationKind::ChannelOrder, Some(k), now, what);
                } else if verdict == Some(ChanVerdict::NotDelivered) {
                    let what =
                        format!("{flow}: number {seq} told not delivered, released as itself");
                    self.violate(
                        ViolationKind::ChannelNotDeliveredReleased,
                        Some(k),
                        now,
                        what,
                    );
                }
            }
            None => {
                self.chans.counts.gaps += 1;
                if verdict == Some(ChanVerdict::Delivered) {
                    let what = format!("{flow}: number {seq} acknowledged, released as a gap");
                    self.violate(
                        ViolationKind::ChannelAckedNotReleased,
                        Some(sent),
                        now,
                        what,
                    );
                }
            }
        }
    }

    /// The receiving application of `flow` got message `key` as number `seq` out of the
    /// order (`Kind::Unordered`: a run its receiver no longer knew, after a restart of the
    /// receiver or of the sender, whose new run replaced it): only after such a restart, and
    /// it must be the message sent under that number, released once, and never one told
    /// not delivered. Its sender may then hear it acknowledged. In durable mode a number the
    /// application had may come again (flagged).
    pub fn on_chan_unordered(&mut self, flow: FlowKey, seq: u64, key: Option<MsgKey>, now: u64) {
        self.chans.counts.unordered += 1;
        let durable = self.durable;
        let restarted = self
            .chans
            .flows
            .get(&flow)
            .is_some_and(|f| f.sender_restarted || f.receiver_restarted);
        let Some(n) = self.num_mut(flow, seq) else {
            let what = format!("{flow}: number {seq} released out of order, never sent");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
            return;
        };
        let (sent, verdict, before) = (n.key, n.verdict, n.released);
        n.released = Some(Released::Unordered);
        if !restarted {
            // Only a run the receiver forgot (it restarted) or that a new one replaced (its
            // sender restarted) goes out of the order.
            let what = format!("{flow}: number {seq} released out of order, neither end restarted");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
        } else if before.is_some() && !durable {
            let what = format!("{flow}: number {seq} released out of order, and before");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
        } else if key != Some(sent) {
            let what = format!("{flow}: number {seq} released out of order as {key:?}, not {sent}");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
        } else if verdict == Some(ChanVerdict::NotDelivered) {
            let what = format!("{flow}: number {seq} told not delivered, released out of order");
            self.violate(ViolationKind::ChannelNotDeliveredReleased, key, now, what);
        }
    }

    /// A flagged number `seq` of `flow` that its receiving application had already (durable
    /// mode): the same message, or its gap.
    fn on_chan_repeated(&mut self, flow: FlowKey, seq: u64, key: Option<MsgKey>, now: u64) {
        self.chans.counts.repeated += 1;
        let Some(n) = self.num_mut(flow, seq) else {
            let what = format!("{flow}: number {seq} released again, never sent");
            self.violate(ViolationKind::ChannelOrder, key, now, what);
            return;
        };
        let sent = n.key;
        if let Some(k) = key.filter(|&k| k != sent) {
            let what = format!("{flow}: number {seq} released again as message {k}, not {sent}");
            self.violate(ViolationKind::ChannelOrder, Some(k), now, what);
        }
    }

    /// Restarted senders owe `n` gaps for numbers they no longer know the fate of.
    pub fn on_chan_owed_gaps(&mut self, n: u64) {
        self.chans.counts.owed_gaps += n;
    }

    /// A receiver handed out a flagged redelivery numbered below the next due of its run
    /// again at once (durable mode: released before its crash, not taken).
    pub fn on_chan_released_again(&mut self) {
        self.chans.counts.released_again += 1;
    }

    /// `node` restarted with its journal (durable mode), which kept its messages `kept`
    /// (without a verdict, or with one not reported). Each of its flows keeps the numbers
    /// up to the last one known to have been durable (kept; or reported stored, delivered,
    /// released, given a verdict or settled by its gap); the numbers after it were lost
    /// with the crash before they were sent, and the sender numbers its next messages from
    /// there again.
    pub fn on_chan_sender_recovered(&mut self, node: usize, kept: &HashSet<MsgKey>) {
        let mut lost = 0;
        let msgs = &self.msgs;
        let by_key = &mut self.chans.by_key;
        for (k, f) in self.chans.flows.iter_mut() {
            if k.from as usize != node {
                continue;
            }
            let durable = |n: &Num| {
                let rec = msgs
                    .get(n.key.sender as usize)
                    .and_then(|v| v.get(usize::try_from(n.key.seq).ok()?));
                let told = rec.is_some_and(|r| {
                    r.stored || r.deliveries > 0 || r.acked || r.doubted || r.not_delivered
                });
                told || n.released.is_some()
                    || n.verdict.is_some()
                    || n.gap_acked
                    || kept.contains(&n.key)
            };
            let keep = f.nums.iter().rposition(durable).map_or(0, |j| j + 1);
            lost += (f.nums.len() - keep) as u64;
            for n in f.nums.drain(keep..) {
                by_key.remove(&n.key);
            }
        }
        self.chans.counts.lost_with_sender += lost;
    }

    /// The receiver of a flow discarded an arrival (a late copy, an old run's message).
    pub fn on_chan_discard(&mut self) {
        self.chans.counts.discarded += 1;
    }

    /// The receiver of `flow` holds `held` messages and gaps out of order after an arrival
    /// (`arrived_held`: that arrival was held); at most `window - 1`.
    pub fn on_chan_held(
        &mut self,
        flow: FlowKey,
        held: usize,
        arrived_held: bool,
        window: u32,
        now: u64,
    ) {
        let held = held as u64;
        self.chans.counts.held += u64::from(arrived_held);
        self.chans.counts.max_held = self.chans.counts.max_held.max(held);
        if held >= u64::from(window.max(1)) {
            let what = format!("{flow}: {held} held out of order, window {window}");
            self.violate(ViolationKind::ChannelHeldOverWindow, None, now, what);
        }
    }

    /// `node` restarted: its flows (as sender) may stop short, and what it held as a
    /// receiver is lost. Without a journal a restarted receiver knows no run: it takes up a
    /// flow only from number 0 (a gap, when the message 0 was delivered before the restart
    /// and its sender told it in doubt), so the order it owes starts there again.
    pub fn on_chan_restart(&mut self, node: usize) {
        let durable = self.durable;
        for (k, f) in self.chans.flows.iter_mut() {
            if k.from as usize == node {
                f.sender_restarted = true;
            }
            if k.to as usize == node {
                f.receiver_restarted = true;
                if !durable {
                    f.next = 0;
                }
            }
        }
    }

    /// After healing and quiescence: every flow of a live sender and receiver was released
    /// to its last number sent (in durable mode every flow: they outlive restarts).
    pub(super) fn finish_channels(&mut self, now: u64) {
        let mut bad = Vec::new();
        for (k, f) in &self.chans.flows {
            if !self.durable && (f.sender_restarted || f.receiver_restarted) {
                continue;
            }
            let sent = f.nums.len() as u64;
            if f.next < sent {
                let stuck = f.nums[f.next as usize];
                let what = format!(
                    "{k}: blocked at number {} of {sent} after quiescence (its verdict {:?}, gap \
                     acknowledged {})",
                    f.next, stuck.verdict, stuck.gap_acked
                );
                bad.push((stuck.key, what));
            }
        }
        for (key, what) in bad {
            self.violate(ViolationKind::ChannelBlocked, Some(key), now, what);
        }
    }

    fn num_mut(&mut self, flow: FlowKey, seq: u64) -> Option<&mut Num> {
        self.chans
            .flows
            .get_mut(&flow)?
            .nums
            .get_mut(usize::try_from(seq).ok()?)
    }
}
