//! The sender record's side of its receiver's answers: SLOTS granted, verdicts on tokens
//! (ACK, DOUBT, RETRY), messages refused for their size, and messages given up.

use std::collections::VecDeque;
use std::time::Instant;

use crate::proto::frame::Verdict;
use crate::proto::payload::Payload;
use crate::proto::send::fragments::Outgoing;
use crate::proto::send::record::SRecord;
use crate::proto::send::token::Token;
use crate::proto::stats::Stats;
use crate::proto::{Abandoned, Config, Event, MsgId, MsgIds, NodeId, Rules};

/// What a record reports to the node while settling messages: counters, events for the
/// application, and the node-wide count of bytes accepted and not yet settled.
pub(crate) struct Sink<'a> {
    /// The node's counters.
    pub stats: &'a mut Stats,
    /// The node's events.
    pub events: &'a mut VecDeque<Event>,
    /// Payload bytes accepted by `send` over all destinations and not yet settled.
    pub queued_bytes: &'a mut usize,
    /// Durable mode: verdicts wait here, with their slot, until they are journalled.
    pub held: Option<&'a mut Vec<(u64, Event)>>,
    /// Where acknowledged messages' payloads go instead of being dropped, if anywhere
    /// ([`Node::keep_released`](crate::proto::Node::keep_released)).
    pub released: Option<&'a mut Vec<Payload>>,
}

impl Sink<'_> {
    /// Hands verdict `ev` on the message in `slot` to the application, or, in durable
    /// mode, to the journal first.
    fn verdict(
        events: &mut VecDeque<Event>,
        held: &mut Option<&mut Vec<(u64, Event)>>,
        slot: u64,
        ev: Event,
    ) {
        match held {
            Some(h) => h.push((slot, ev)),
            None => Event::push_merged(events, ev),
        }
    }

    /// [`verdict`](Self::verdict) for the acknowledgement of message `id` to `to`, made
    /// into an event only if it is not merged into the last one.
    #[inline]
    fn acknowledged(
        events: &mut VecDeque<Event>,
        held: &mut Option<&mut Vec<(u64, Event)>>,
        slot: u64,
        (to, id): (NodeId, MsgId),
    ) {
        match held {
            Some(h) => h.push((
                slot,
                Event::Acknowledged {
                    to,
                    ids: MsgIds::one(id),
                },
            )),
            None => Event::push_acknowledged(events, to, id),
        }
    }
}

/// What [`SRecord::on_slots`] made of a SLOTS frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SlotsAnswer {
    /// Not for the outstanding request: to be waived up to this slot, if any.
    Stale { waive: Option<u64> },
    /// More slots than were asked for: refused.
    Unrequested,
    /// Taken; whether queued messages became tokens.
    Taken { filled: bool },
}

/// What the record learnt from one whole verdict frame.
#[derive(Debug, Default)]
pub(crate) struct AfterFrame {
    /// Tokens declared lost by loss detection.
    pub lost: u64,
    /// Losses found spurious, and how many of them had been sent again.
    pub spurious: u64,
    pub spurious_resent: u64,
    /// The outstanding REQSLOTS was found lost: it goes again.
    pub reqslots_again: bool,
    /// Tokens wait and the window and the pacer let them go.
    pub ready: bool,
}

impl SRecord {
    /// SLOTS(s, r, n) (lines 61-74 of Algorithm 1, with rule 3: `keep_own`, envelopes of
    /// another incarnation are dropped, not reused). `n` may be less than was asked: the
    /// receiver granted what its limits allow, and the slot window keeps below what it
    /// showed (raised by `step` with every grant in full). `sample_rtt` false: the grant
    /// came behind a probe of the receiver's, so it may be a repeat sent on the probe's
    /// timer, whose delay says nothing of the path (Karn's rule, as for a retransmitted
    /// request).
    pub fn on_slots(
        &mut self,
        now: Instant,
        (s, r, n): (u64, u64, u64),
        keep_own: bool,
        step: u64,
        sample_rtt: bool,
    ) -> SlotsAnswer {
        if s != self.sck {
            // A probe from a record of an older request that this sender holds nothing
            // below is waived, so the receiver drops it (its frontier check refuses a
            // request of ours that jumps past it).
            let waive = (n == 0 && s < self.sck && s <= self.frontier()).then_some(s);
            return SlotsAnswer::Stale { waive };
        }
        if n > 0 && self.req.asked().is_none_or(|asked| n > asked) {
            return SlotsAnswer::Unrequested;
        }
        if self.rck != Some(r) {
            if keep_own {
                // Envelopes of another incarnation are options, not obligations: drop them.
                self.env_start = s;
            }
            self.rck = Some(r);
        }
        let mut filled = false;
        if n > 0 {
            let held = self.envelopes() + n + self.tokens.len() as u64;
            let sample = self.req.on_granted(now, n, held, step);
            if let Some(sample) = sample.filter(|_| sample_rtt) {
                self.rtt.sample(sample);
            }
            self.sck = s + n;
            filled = self.fill_envelopes() > 0;
        }
        SlotsAnswer::Taken { filled }
    }

    /// ACK, DOUBT or RETRY(r, rg) from the destination `to` (ACK: lines 82-86): settles the
    /// tokens of incarnation `r` in `rg`. DOUBT and RETRY also mean the receiver lost
    /// incarnation `r`: envelopes under it are dropped (fresh slots are asked for). `sealed`:
    /// this node is sealed (only sealed receivers evict records they delivered into).
    /// Returns whether queued messages became tokens (after a RETRY).
    pub fn on_verdict(
        &mut self,
        now: Instant,
        to: NodeId,
        (v, r, rg): (Verdict, u64, std::ops::Range<u64>),
        rules: &Rules,
        sealed: bool,
        sink: Sink<'_>,
    ) -> bool {
        let keep_own = rules.token_keeps_incarnation;
        let plausible = rules.plausible_input;
        if plausible && v == Verdict::Retry && self.proven.contains(&r) && !sealed {
            // The receiver delivered tokens of `r`, so a plaintext receiver never evicted `r`:
            // a RETRY for it cannot be true, and obeying it could deliver a message twice.
            sink.stats.rejects.implausible_verdict += 1;
            return false;
        }
        // LOST is RETRY from a durable receiver that restarted: it may come for an
        // incarnation this sender saw acknowledged (which RETRY may not, in plaintext).
        let v = if v == Verdict::Lost {
            Verdict::Retry
        } else {
            v
        };
        let rec_rck = self.rck;
        let Sink {
            stats,
            events,
            queued_bytes,
            mut held,
            mut released,
        } = sink;
        let (rtt, bytes, flight, mtud) =
            (&self.rtt, &mut self.bytes, &mut self.flight, &mut self.mtud);
        let credit = &mut self.credit;
        let mut retry = Vec::new();
        // A token that never left cannot have a verdict.
        let pick =
            |tok: &Token| tok.incarnation(rec_rck, keep_own) == r && (!plausible || tok.sends > 0);
        let removed = self.tokens.remove_in(rg, pick, |slot, tok| {
            flight.on_settled(now, tok, v == Verdict::Ack, rtt);
            if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                credit.give_back(tok.rck, Outgoing::charge_of(o.total()));
            }
            if v == Verdict::Ack && tok.sends == 1 && tok.frag.is_none() && !tok.held {
                if let Some(reach) = flight.sent.reach(tok.seq) {
                    mtud.on_acked(reach as usize);
                }
            }
            if let Some(o) = tok.frag.as_ref().filter(|_| v == Verdict::Ack) {
                for sent in o.in_flight().filter(|s| !s.again) {
                    mtud.on_acked(sent.reach as usize);
                }
            }
            let id = tok.id;
            if v == Verdict::Retry {
                stats.retried += 1;
                retry.push((tok.take_message(), tok.rck, slot));
                return;
            }
            *bytes -= tok.payload.len();
            *queued_bytes -= tok.payload.len();
            if v == Verdict::Doubt {
                stats.in_doubt += 1;
                let reply = tok.doubted_reply();
                Sink::verdict(events, &mut held, slot, Event::InDoubt { to, id, reply });
                return;
            }
            stats.acknowledged += 1;
            Sink::acknowledged(events, &mut held, slot, (to, id));
            if let Some(r) = released.as_mut() {
                r.push(std::mem::take(&mut tok.payload));
            }
        }) > 0;
        // Messages to send again go first, in their original order, out of their slots.
        self.again += retry.len();
        for (msg, rck, slot) in retry.into_iter().rev() {
            self.note_moved(msg.id, rck, slot);
            self.queue.push_front(msg);
        }
        if v != Verdict::Ack {
            // The receiver lost this incarnation: its reassembly credit with it, and if it
            // is the current one, its envelopes are worthless.
            self.credit.reset(r);
            if self.rck == Some(r) {
                self.env_start = self.sck;
                self.rck = None;
            }
        }
        let filled = v == Verdict::Retry && self.fill_envelopes() > 0;
        if removed && v == Verdict::Ack {
            self.note_proven(r);
        }
        if removed {
            self.on_tokens_settled();
        } else {
            stats.stale_acks += 1;
        }
        filled
    }

    /// DOUBT or RETRY for incarnation `r`: the receiver holds nothing of `r`, so a token of
    /// `r` that never left was certainly not delivered. Such tokens (a message that waited
    /// for reassembly credit, or one not yet written) go back to the head of the queue, in
    /// order, for fresh slots: neither lost nor in doubt, and none waits for credit under an
    /// incarnation that is gone. Returns how many went back, and whether queued messages
    /// became tokens.
    pub fn requeue_unsent(&mut self, r: u64, keep_own: bool) -> (u64, bool) {
        let rec_rck = self.rck;
        let credit = &mut self.credit;
        let mut again = Vec::new();
        let mut slots = Vec::new();
        let mut moved = Vec::new();
        self.tokens.remove_in(
            0..u64::MAX,
            |tok| tok.sends == 0 && tok.incarnation(rec_rck, keep_own) == r,
            |slot, tok| {
                slots.push(slot);
                moved.push((tok.id, tok.rck, slot));
                if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                    credit.give_back(tok.rck, Outgoing::charge_of(o.total()));
                }
                again.push(tok.take_message());
            },
        );
        // Only these: a message of `r` that did leave and waits for credit again stays
        // waiting, and its REQCREDIT brings its verdict.
        self.credit.drop_waiting(&slots);
        for (id, rck, slot) in moved {
            self.note_moved(id, rck, slot);
        }
        if again.is_empty() {
            return (0, false);
        }
        let n = again.len() as u64;
        self.again += again.len();
        for msg in again.into_iter().rev() {
            self.queue.push_front(msg);
        }
        self.on_tokens_settled();
        (n, self.fill_envelopes() > 0)
    }

    /// After a whole verdict frame: the congestion controller learns what it acknowledged,
    /// loss detection declares lost what later acknowledgements show lost, and the record
    /// says whether tokens wait that the window and pacer let go.
    pub fn after_verdict_frame(&mut self, now: Instant, cfg: &Config) -> AfterFrame {
        let req_due = self.req.is_due();
        let lost = self.after_verdicts(now, cfg);
        let spurious = std::mem::take(&mut self.flight.spurious);
        let spurious_resent = std::mem::take(&mut self.flight.spurious_resent);
        let next = self.to_send.front().and_then(|s| self.tokens.get(*s));
        // A fragmented message goes a datagram at a time.
        let most = cfg.mtu.max_datagram_size as u64;
        let size = next.map_or(0, |t| {
            u64::from(t.size).max(t.payload.len() as u64).min(most)
        });
        let ready = !self.to_send.is_empty() && !self.is_paced() && self.window_allows(size);
        AfterFrame {
            lost,
            spurious,
            spurious_resent,
            reqslots_again: self.req.is_due() && !req_due,
            ready,
        }
    }

    /// Gives up the messages to `to` larger than `max`, the largest its receiver takes, that
    /// still have bytes to send in fragments (never sent, or waiting for credit): none of them can ever be
    /// made whole there. The verdict is the truthful one a deadline would give
    /// ([`abandon`](Self::abandon)): not delivered when no whole copy ever left (never sent,
    /// or fragments some bytes of which never left), in doubt otherwise (a whole TOKEN
    /// left before, in larger datagrams, or a message restored after a restart, which may
    /// have left before the crash). Under the rule `deadline_doubts_sent_tokens` off, every
    /// one is not delivered (the checker's self-test).
    pub fn refuse_oversized(&mut self, to: NodeId, max: u64, rules: &Rules, sink: Sink<'_>) {
        let Sink {
            stats,
            events,
            queued_bytes,
            mut held,
            ..
        } = sink;
        let (bytes, flight, credit) = (&mut self.bytes, &mut self.flight, &mut self.credit);
        let remembers = rules.deadline_remembers_whole_copies;
        let doubt_sent = rules.deadline_doubts_sent_tokens;
        // Only a message in fragments not all held at the receiver waits for credit: one
        // held whole waits for its ACK, one sent whole in a TOKEN for its verdict.
        let waits = |tok: &Token| tok.frag.as_ref().is_some_and(|o| !o.is_whole());
        self.tokens.remove_in(
            0..u64::MAX,
            |tok| tok.payload.len() as u64 > max && (tok.sends == 0 || waits(tok)),
            |slot, tok| {
                *bytes -= tok.payload.len();
                *queued_bytes -= tok.payload.len();
                flight.bytes = flight.bytes.saturating_sub(tok.flight);
                if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                    credit.give_back(tok.rck, Outgoing::charge_of(o.total()));
                }
                let whole_left = if remembers {
                    tok.whole_left
                } else {
                    tok.frag.as_ref().is_none_or(|o| o.all_sent())
                };
                stats.too_large_for_peer += 1;
                let ev = if tok.sends == 0 || !doubt_sent || !whole_left {
                    stats.not_delivered += 1;
                    Event::NotDelivered { to, id: tok.id }
                } else {
                    stats.in_doubt += 1;
                    let (id, reply) = (tok.id, tok.doubted_reply());
                    Event::InDoubt { to, id, reply }
                };
                Sink::verdict(events, &mut held, slot, ev);
            },
        );
        self.on_tokens_settled();
    }

    /// Forgets message `id` (given up): returns its size, the truthful verdict and the slot
    /// it had (if it was a token), or `None` if it is not pending here. Not delivered only if no whole copy ever left (still
    /// queued, a token never written, or fragments some bytes of which never left and no
    /// whole TOKEN before them); in doubt otherwise. The rules `deadline_doubts_sent_tokens`
    /// off (every abandoned token not delivered) and `deadline_remembers_whole_copies` off
    /// (a message whose present fragments did not all leave not delivered, an earlier whole
    /// TOKEN forgotten) are the checker's self-test.
    pub fn abandon(
        &mut self,
        now: Instant,
        id: MsgId,
        rules: &Rules,
    ) -> Option<(usize, Abandoned, Option<u64>)> {
        let (len, verdict, slot) = if let Some(i) = self.queue.iter().position(|q| q.id == id) {
            let q = self.queue.remove(i)?;
            if i < self.again {
                self.again -= 1;
            }
            (q.payload.len(), Abandoned::NotDelivered, None)
        } else {
            let slot = self.tokens.iter_mut().find(|(_, t)| t.id == id)?.0;
            let tok = self.tokens.remove(slot)?;
            if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                self.credit
                    .give_back(tok.rck, Outgoing::charge_of(o.total()));
                if rules.abandon_tells_frontier && tok.sends > 0 {
                    // Its receiver may hold a partial of it until the frontier passes.
                    self.req.owe_notice(slot);
                }
            }
            self.flight.bytes = self.flight.bytes.saturating_sub(tok.flight);
            // A message no whole copy of which ever left cannot be delivered: its receiver
            // can never make it whole. A whole TOKEN that left before the message was cut
            // into fragments (smaller datagrams) counts, whatever became of the fragments.
            let whole_left = if rules.deadline_remembers_whole_copies {
                tok.whole_left
            } else {
                tok.frag.as_ref().is_none_or(|o| o.all_sent())
            };
            let doubt_sent = rules.deadline_doubts_sent_tokens;
            let verdict = if tok.sends == 0 || !doubt_sent || !whole_left {
                Abandoned::NotDelivered
            } else {
                Abandoned::InDoubt
            };
            self.on_tokens_settled();
            (tok.payload.len(), verdict, Some(slot))
        };
        self.bytes -= len;
        self.note_if_idle(now);
        Some((len, verdict, slot))
    }
}
