//! The oracle's checks of ordered channels ([`Scenario::channels`](crate::Scenario::channels)):
//! per flow (sender, receiver, sender's run, channel) the receiving application sees the
//! numbers strictly in order, each once, as the message sent under it or as a gap; a message
//! told not delivered is never released as a message, an acknowledged one was; the receiver
//! never holds more out of order than the window allows; and after healing every flow of a
//! live sender is released to its end.

use std::collections::BTreeMap;

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
}

/// Every flow.
#[derive(Debug, Default)]
pub(super) struct Flows {
    flows: BTreeMap<FlowKey, FlowRec>,
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
            (ChanVerdict::Delivered, Some(Released::Message)) => {}
            (ChanVerdict::Delivered, r) => {
                let what = format!(
                    "{flow}: number {seq} acknowledged, but released to the application {}",
                    if r.is_some() { "as a gap" } else { "never" }
                );
                self.violate(ViolationKind::ChannelAckedNotReleased, Some(key), now, what);
            }
            (ChanVerdict::NotDelivered, Some(Released::Message)) => {
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
    /// (`None`). Numbers come strictly in order, each once, as what was sent under them.
    pub fn on_chan_release(&mut self, flow: FlowKey, seq: u64, key: Option<MsgKey>, now: u64) {
        let f = self.chans.flows.entry(flow).or_default();
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
    /// receiver is lost.
    pub fn on_chan_restart(&mut self, node: usize) {
        for (k, f) in self.chans.flows.iter_mut() {
            if k.from as usize == node {
                f.sender_restarted = true;
            }
            if k.to as usize == node {
                f.receiver_restarted = true;
            }
        }
    }

    /// After healing and quiescence: every flow of a live sender and receiver was released
    /// to its last number sent.
    pub(super) fn finish_channels(&mut self, now: u64) {
        let mut bad = Vec::new();
        for (k, f) in &self.chans.flows {
            if f.sender_restarted || f.receiver_restarted {
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
