//! The simulated nodes: booting one, handing it datagrams and timeouts, draining its
//! outputs (datagrams onto the links, events to its application), and checking that its
//! state stays bounded.

use bytes::Bytes;
use exon::call::Learned;
use exon::envelope::Envelope;
use exon::proto::crypto::insecure_test_security;
use exon::proto::journal::Outcome;
use exon::proto::{Event, MsgId, Node, Output, Payload, Security};

use super::ids::node_id;
use super::queue::{nanos, What};
use super::Sim;
use crate::disk::{clock_record, recover_clock};
use crate::oracle::{ChanVerdict, ViolationKind};
use crate::workload::MsgKey;

/// `node` takes delivery `id` at `now`, with `mark` (a durable flow's position) in the
/// same record if given; with no room for the mark it is taken all the same, as the
/// endpoint does.
pub(super) fn take_marked(
    node: &mut Node,
    now: std::time::Instant,
    id: exon::proto::DeliveryId,
    mark: Option<exon::proto::journal::Mark>,
) {
    if let Some(mark) = mark {
        if node.handle_taken_marked(now, id, mark).is_ok() {
            return;
        }
    }
    node.handle_taken(now, id);
}

impl Sim {
    /// The sync of node `i`'s clock store of `hw` completed: unless the node crashed since
    /// (`boot`), what it wrote is durable and the node may use clock values up to `hw`.
    pub(super) fn on_synced(&mut self, i: usize, boot: u32, hw: u64) {
        let now = self.instant();
        let host = &mut self.hosts[i];
        if host.restarts != boot {
            return;
        }
        let Some(node) = host.node.as_mut() else {
            return;
        };
        host.disk.sync();
        host.stored_hw = host.stored_hw.max(hw);
        node.handle_clock_stored(now, hw);
        self.drain(i);
    }

    /// The clock node `i` restarts from: its stored high-water mark or, with a simulated
    /// disk, the largest mark in the records that survived the crash intact (the torn or
    /// corrupt tail is cut off, as a real recovery would).
    pub(super) fn recovered_clock(&mut self, i: usize) -> u64 {
        if self.sc.disk.is_none() {
            return self.hosts[i].stored_hw;
        }
        let h = &mut self.hosts[i];
        let (hw, valid) = recover_clock(h.disk.contents());
        h.torn_tails_cut += u32::from(valid < h.disk.contents().len());
        h.disk.truncate(valid);
        hw.unwrap_or(0)
    }

    /// Creates node `i` from `clock` and starts its application.
    pub(super) fn boot(&mut self, i: usize, clock: u64) {
        let security = if self.sc.plaintext {
            Security::InsecurePlaintext
        } else {
            let all = (0..self.sc.nodes).map(node_id);
            insecure_test_security(node_id(i), all)
        };
        let mut node =
            Node::new(node_id(i), security, self.sc.config.clone(), clock).expect("valid config");
        if let Some(hook) = &self.sc.node_hook {
            hook(i, &mut node);
        }
        if let Some(mut recovered) = self.open_journal(i) {
            recovered.replaced = std::mem::take(&mut self.hosts[i].journal_replaced);
            // Durable mode: the journal's records are the node's first input; recovered
            // messages keep their ids (and so their keys). A damaged journal's are not sent
            // again: the node resolves each in doubt (its verdict may be among the records
            // the damage took), so none revokes a verdict its application heard.
            let resolves = recovered.damaged && node.rules().journal_covers_incarnations;
            let restored = std::mem::take(&mut self.hosts[i].restored_now);
            for m in recovered.messages.iter().filter(|_| !resolves) {
                if let Some(&seq) = self.hosts[i].msg_keys.get(&m.id.0) {
                    let key = MsgKey {
                        sender: i as u32,
                        seq,
                    };
                    self.oracle.on_recovered(key, self.now);
                    if restored {
                        self.deadline_again(i, m.id, key);
                    }
                }
            }
            // Verdicts the journal holds as not reported: the node reports them again.
            self.hosts[i].replayed = recovered.verdicts.iter().map(|v| v.id.0).collect();
            // Keyed sends: the application sends again what it holds no verdict for.
            let h = &mut self.hosts[i];
            h.resend = h.outbox.keys().copied().collect();
            // Channels: durable flows go on from the journal's marks.
            self.chan_boot(i, node.rules().durable_flows, Some(&recovered));
            self.stream_boot(i, node.rules().durable_flows, Some(&recovered));
            if let Err(e) = node.recover(self.instant(), recovered) {
                let what = format!("node{i} refused its journal: {e}");
                self.oracle
                    .violate(ViolationKind::JournalError, None, self.now, what);
            }
        } else {
            self.hosts[i].msg_keys.clear();
            self.hosts[i].chan_own.clear();
            self.chan_boot(i, false, None);
            self.stream_boot(i, false, None);
        }
        let h = &mut self.hosts[i];
        h.node = Some(node);
        h.stored_hw = clock;
        h.boot_clock = clock;
        h.timer_at = None;
        self.drain(i);
        self.schedule_pump(i, self.now);
    }

    /// Schedules node `i`'s application to submit at `t`, if it has messages to and is not
    /// scheduled already.
    pub(super) fn schedule_pump(&mut self, i: usize, t: u64) {
        let h = &mut self.hosts[i];
        if !h.pump_scheduled && h.has_traffic() {
            h.pump_scheduled = true;
            self.queue.push(t, What::Pump(i as u32));
        }
    }

    /// Tells the oracle which nodes evicted a receiver record something was delivered into
    /// (before it judges a message in doubt: such an eviction may be the reason).
    fn note_evictions(&mut self) {
        for (j, h) in self.hosts.iter().enumerate() {
            if h.node
                .as_ref()
                .is_some_and(|n| n.stats().evictions_proven > 0)
            {
                // A node's counters are its run's: since its last restart.
                let journaled = self.sc.durable.is_some() && h.durable_on;
                self.oracle.on_evicted_proven(j, journaled);
            }
        }
    }

    /// A datagram arrives at node `to` (dropped if it is down).
    pub(super) fn on_datagram(&mut self, to: usize, data: Bytes) {
        let now = self.instant();
        let Some(node) = self.hosts[to].node.as_mut() else {
            self.dropped_at_host += 1;
            return;
        };
        // The node heard from the source when it acted on the datagram's frames (a frame it
        // refused does not make the rest unheard), as its deaf schedule counts it.
        let src = exon::proto::Header::decode_prefix(&data)
            .ok()
            .map(|(h, _)| h.src);
        let frames_before = node.stats().frames_in.total();
        node.handle_datagram(now, data);
        if node.stats().frames_in.total() > frames_before {
            if let Some(from) = src.and_then(|s| (s.get() as usize).checked_sub(1)) {
                self.deaf.on_heard(to, from);
            }
        }
        self.drain(to);
    }

    /// Node `i`'s timer set for `t` goes off (unless superseded).
    pub(super) fn on_timer(&mut self, i: usize, t: u64) {
        if self.hosts[i].timer_at != Some(t) {
            return; // superseded
        }
        self.hosts[i].timer_at = None;
        let now = self.instant();
        let Some(node) = self.hosts[i].node.as_mut() else {
            return;
        };
        if node.poll_timeout().is_some_and(|d| d <= now) {
            node.handle_timeout(now);
        }
        self.drain(i);
    }

    /// Drains every output of node `i` with [`Node::poll_output`]: clock stores,
    /// datagrams, events; then re-arms its timer, checks its bounds, routes the datagrams
    /// and hands the events to its application.
    pub(super) fn drain(&mut self, i: usize) {
        let now = self.instant();
        let host = &mut self.hosts[i];
        let Some(node) = host.node.as_mut() else {
            return;
        };
        let mut stores = Vec::new();
        let timer = loop {
            match node.poll_output(now, &mut self.buf) {
                Output::StoreClock(hw) => match &self.sc.disk {
                    Some(d) => {
                        host.disk.write(&clock_record(hw));
                        let t = self.now + nanos(d.sync_latency);
                        let boot = host.restarts;
                        self.queue.push(
                            t,
                            What::Synced {
                                node: i as u32,
                                boot,
                                hw,
                            },
                        );
                    }
                    None => {
                        host.stored_hw = hw;
                        node.handle_clock_stored(now, hw);
                    }
                },
                // Durable mode: appended to the journal below, in order.
                Output::Store(w) => stores.push(w),
                Output::Transmit(t) => {
                    let off = self.buf.len() - t.size;
                    self.out.push((t.destination.get() as usize, off, t.size));
                }
                Output::Event(e) => self.app_events.push(e),
                Output::Timeout(at) => break at,
            }
        };
        if let Some(t) = timer {
            let t = nanos(t.saturating_duration_since(self.base)).max(self.now);
            if host.timer_at.is_none_or(|old| t < old) {
                host.timer_at = Some(t);
                self.queue.push(t, What::Timer(i as u32));
            }
        }
        for w in stores {
            if let Some(what) = self.append_journal(i, &w) {
                self.oracle
                    .violate(ViolationKind::JournalError, None, self.now, what);
            }
        }
        self.check_bounds(i);
        if !self.out.is_empty() {
            // Each datagram gets its own buffer: a datagram held on a link (a late duplicate)
            // keeps only its own bytes alive, not every datagram drained with it.
            let mut out = std::mem::take(&mut self.out);
            for &(dst, off, size) in &out {
                let data = Bytes::copy_from_slice(&self.buf[off..off + size]);
                if dst == 0 || dst > self.hosts.len() {
                    self.dropped_at_host += 1;
                } else {
                    if let Some(f) = self.deaf.on_sent(i, dst - 1, size, self.now) {
                        let what = format!(
                            "node{i} sent node{} {} datagrams, {} bytes within {:?}, silent for {:?}",
                            f.to,
                            f.datagrams,
                            f.bytes,
                            crate::deafness::WINDOW,
                            f.silent_for
                        );
                        self.oracle
                            .violate(ViolationKind::DeafFlood, None, self.now, what);
                    }
                    self.route(i, dst - 1, data);
                }
            }
            out.clear();
            self.out = out;
            self.buf.clear();
        } else {
            self.buf.clear();
        }
        if !self.app_events.is_empty() {
            let mut evs = std::mem::take(&mut self.app_events);
            for e in evs.drain(..) {
                self.app_event(i, e);
            }
            self.app_events = evs;
        }
    }

    /// The workload's key of message `id` of node `i` (of its current incarnation, or of
    /// any in durable mode), or `None` (and a violation) if it sent no such message.
    pub(super) fn key_of(&mut self, i: usize, id: MsgId) -> Option<MsgKey> {
        let Some(&seq) = self.hosts[i].msg_keys.get(&id.0) else {
            let what = format!("node{i} reported on {id:?}, which it never sent");
            self.oracle
                .violate(ViolationKind::NeverSent, None, self.now, what);
            return None;
        };
        Some(MsgKey {
            sender: i as u32,
            seq,
        })
    }

    /// Hands one event of node `i` to its application (and the oracle).
    pub(super) fn app_event(&mut self, i: usize, e: Event) {
        if self.sc.streams.is_some() {
            return self.stream_event(i, e);
        }
        match e {
            Event::Delivered { from, payload, id } if self.sc.channels.is_some() => {
                self.chan_delivered(i, from.get() as usize - 1, payload, id);
            }
            Event::Delivered { from, payload, id } if self.sc.rpc.is_some() => {
                self.rpc_delivered(i, from.get() as usize - 1, payload, id);
            }
            Event::Delivered { from, payload, id } => {
                let from = from.get() as usize - 1;
                let again = id.is_redelivery();
                if let Some((key, _)) = self.oracle.on_handover(i, from, &payload, again, self.now)
                {
                    if !crate::workload::is_whole(&payload, key, self.sc.workload.len_of(key)) {
                        self.oracle.violate(
                            ViolationKind::Corrupted,
                            Some(key),
                            self.now,
                            format!("node{i} delivered {} bytes, not the message", payload.len()),
                        );
                    }
                    self.hosts[i].inbox.push((id, from, payload));
                    if self.sc.take_delay.is_zero() {
                        self.take(i);
                    } else if !self.hosts[i].take_scheduled {
                        self.hosts[i].take_scheduled = true;
                        let t = self.now + nanos(self.sc.take_delay);
                        self.last_activity = self.last_activity.max(t);
                        self.queue.push(t, What::Take(i as u32));
                    }
                }
            }
            Event::Acknowledged { ids, .. } => {
                for id in ids {
                    self.hosts[i].reply_calls.remove(&id.0);
                    if self.settle_outbox(i, id) {
                        continue;
                    }
                    if self.reported_again(i, id, Outcome::Acknowledged) {
                        continue;
                    }
                    if self.chan_verdict(i, id, ChanVerdict::Delivered) {
                        continue; // a gap's
                    }
                    if let Some(key) = self.key_of(i, id) {
                        self.oracle.on_acked(key, self.now);
                    }
                    self.rpc_verdict(i, id, Learned::Acknowledged);
                }
            }
            Event::InDoubt { id, reply, .. } => {
                self.check_handed_back(i, id, reply.as_deref());
                if self.settle_outbox(i, id) {
                    return;
                }
                if self.reported_again(i, id, Outcome::InDoubt) {
                    return;
                }
                if self.chan_verdict(i, id, ChanVerdict::InDoubt) {
                    return;
                }
                if let Some(key) = self.key_of(i, id) {
                    self.note_evictions();
                    self.oracle.on_in_doubt(key, self.now);
                }
                self.resend_doubted_reply(i, id);
                self.rpc_verdict(i, id, Learned::InDoubt);
            }
            Event::NotDelivered { id, .. } => {
                self.hosts[i].reply_calls.remove(&id.0);
                if self.settle_outbox(i, id) {
                    return;
                }
                if self.reported_again(i, id, Outcome::NotDelivered) {
                    return;
                }
                if self.chan_verdict(i, id, ChanVerdict::NotDelivered) {
                    return;
                }
                if let Some(key) = self.key_of(i, id) {
                    self.oracle.on_abandoned(key, true, self.now);
                }
                self.rpc_verdict(i, id, Learned::NotDelivered);
            }
            Event::Stored { id, .. } => {
                if self.chan_unkeyed(i, id) {
                    return; // a channel's gap or window advertisement
                }
                if let Some(key) = self.key_of(i, id) {
                    self.oracle.on_stored(key, self.now);
                }
            }
            _ => {}
        }
    }

    /// Whether the verdict `outcome` of node `i`'s message `id` is one its journal held as
    /// not reported at its last recovery, and the application heard it before the crash
    /// (the oracle checks it is the same).
    fn reported_again(&mut self, i: usize, id: MsgId, outcome: Outcome) -> bool {
        if !self.hosts[i].replayed.remove(&id.0) {
            return false;
        }
        let Some(&seq) = self.hosts[i].msg_keys.get(&id.0) else {
            return false;
        };
        let key = MsgKey {
            sender: i as u32,
            seq,
        };
        self.oracle.on_reported_again(key, outcome, self.now)
    }

    /// Checks the bounded-state property of node `i`.
    pub(super) fn check_bounds(&mut self, i: usize) {
        let Some(node) = self.hosts[i].node.as_ref() else {
            return;
        };
        let c = node.config();
        let s = node.sender_records();
        let r = node.receiver_records();
        let mut what = Vec::new();
        if s > c.limits.max_sender_records {
            what.push(format!("{s} sender records"));
        }
        if r > c.limits.max_receiver_records {
            what.push(format!("{r} receiver records"));
        }
        if node.bytes_queued() > c.limits.max_queued_bytes {
            what.push(format!("{} bytes queued", node.bytes_queued()));
        }
        // Tokens held whole and untaken at their receiver leave the slot window
        // (`Rules::held_outside_slot_window`): each receiver holds at most its untaken
        // share per source of them.
        let untaken = c.limits.max_untaken_per_source.min(c.limits.max_untaken) as u64;
        if node.tokens_in_flight() as u64 > (c.flow.window + untaken) * s as u64 {
            what.push(format!("{} tokens", node.tokens_in_flight()));
        }
        // `max_queued_per_peer` bounds what a send admits; a token sent back to the queue
        // (a RETRY or LOST verdict, a restart's recovery) was admitted before, so what
        // a record holds in all is that bound and its window of tokens.
        let held = node.messages_queued() + node.tokens_in_flight();
        if held as u64 > (c.limits.max_queued_per_peer as u64 + c.flow.window) * s as u64 {
            what.push(format!(
                "{} messages queued, {} tokens",
                node.messages_queued(),
                node.tokens_in_flight()
            ));
        }
        if r > 0 {
            let slots = node.slots_held();
            if slots > c.limits.max_slots_per_record.saturating_mul(r as u64) {
                what.push(format!("{slots} slots"));
            }
        }
        let granted = node.reassembly_granted();
        if granted > c.limits.max_reassembly_bytes || node.reassembly_in_use() > granted {
            what.push(format!(
                "{} bytes of reassembly memory in use, {granted} granted",
                node.reassembly_in_use()
            ));
        }
        if !what.is_empty() {
            self.oracle.violate(
                ViolationKind::Unbounded,
                None,
                self.now,
                format!("node{i} holds {}", what.join(", ")),
            );
        }
    }

    /// Node `i`'s message `id` is in doubt: if it is a reply sent for the first time, it
    /// goes once more (rule `resend_doubted_replies`).
    fn resend_doubted_reply(&mut self, i: usize, id: MsgId) {
        if let Some((to, call, _)) = self.hosts[i].reply_calls.remove(&id.0) {
            self.hosts[i].resend_replies.push((to, call));
            self.schedule_pump(i, self.now);
        }
    }

    /// Node `i` was told its message `id` is in doubt, with `reply` handed back: the
    /// payload must be that message's own, a reply to the call it answered, and a reply
    /// sent by the node still running must come back (the endpoint sends it once more from
    /// that payload alone). Checked where the host keeps its replies' calls (rule
    /// `resend_doubted_replies`).
    fn check_handed_back(&mut self, i: usize, id: MsgId, reply: Option<&Payload>) {
        let keeps = self.hosts[i]
            .node
            .as_ref()
            .is_some_and(|n| n.rules().resend_doubted_replies);
        if !keeps {
            return;
        }
        let sent = self.hosts[i].reply_calls.get(&id.0).copied();
        let wrong = match (reply, sent) {
            (None, Some((_, _, this_life))) => this_life.then(|| "nothing".to_string()),
            (None, None) => None,
            (Some(p), sent) => match Envelope::open(p.to_bytes()) {
                Ok(Envelope::Reply { call, .. }) if sent.is_some_and(|s| s.1 == call) => None,
                _ => Some(format!("{} bytes not its own reply", p.len())),
            },
        };
        if let Some(what) = wrong {
            self.oracle.violate(
                ViolationKind::WrongPayloadBack,
                None,
                self.now,
                format!("node{i}'s message {} in doubt handed back {what}", id.0),
            );
        }
    }
}
