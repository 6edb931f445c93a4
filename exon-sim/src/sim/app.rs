//! The simulated applications: each submits its workload's messages, takes what was
//! delivered to it, and gives messages up at their deadlines; the oracle sees all of it.

use bytes::Bytes;
use exon::call::Learned;
use exon::proto::{Abandoned, MsgId};

use super::ids::node_id;
use super::queue::{nanos, What};
use super::Sim;
use crate::oracle::ChanVerdict;
use crate::workload::{write_payload, Kind, MsgKey};

impl Sim {
    /// The application of node `i` takes every message in its buffer (a slow one, at most
    /// `take_batch` of them, and comes back after `take_delay` for the rest): the oracle sees
    /// the hand-over, the node acknowledges them.
    pub(super) fn take(&mut self, i: usize) {
        self.hosts[i].take_scheduled = false;
        let batch = self.sc.take_batch;
        let mut inbox = std::mem::take(&mut self.hosts[i].inbox);
        if batch > 0 && inbox.len() > batch && !self.sc.take_delay.is_zero() {
            self.hosts[i].inbox = inbox.split_off(batch);
            self.hosts[i].take_scheduled = true;
            let t = self.now + nanos(self.sc.take_delay);
            self.last_activity = self.last_activity.max(t);
            self.queue.push(t, What::Take(i as u32));
        }
        if inbox.is_empty() {
            return;
        }
        let now = self.instant();
        for (id, from, payload) in inbox {
            if let Some(node) = self.hosts[i].node.as_mut() {
                node.handle_taken(now, id);
            }
            if let Some((_, Kind::Request)) = self.oracle.on_taken(i, &payload, self.now) {
                self.hosts[i].replies.push(from);
                self.schedule_pump(i, self.now);
            }
        }
        self.drain(i);
    }

    /// Message `id` of node `i` reached its deadline: the node gives it up (if it is still
    /// the incarnation that sent it, or, in durable mode (`seq` set), one that recovered it:
    /// the application keeps its deadlines across crashes as the journal keeps its
    /// messages) and the oracle checks the verdict. A durable deadline that falls while
    /// the node is down is tried again a millisecond later.
    pub(super) fn give_up(&mut self, i: usize, to: usize, id: MsgId, boot: u32, seq: u64) {
        let same_run = self.hosts[i].restarts == boot;
        let recovered = seq != u64::MAX && self.hosts[i].msg_keys.get(&id.0) == Some(&seq);
        if !same_run && !recovered {
            return;
        }
        let now = self.instant();
        let Some(node) = self.hosts[i].node.as_mut() else {
            if recovered {
                let what = What::GiveUp {
                    node: i as u32,
                    to: to as u32,
                    id: id.0,
                    boot,
                    seq,
                };
                self.queue.push(self.now + 1_000_000, what);
            }
            return;
        };
        let Some(verdict) = node.abandon(now, node_id(to), id) else {
            return; // settled already
        };
        if verdict == Abandoned::Pending {
            // Durable mode: the verdict comes as an event once its record is stored. A
            // channel's own note (a question given up at the next look) is no message of
            // the workload's.
            if !self.chan_unkeyed(i, id) {
                if let Some(key) = self.key_of(i, id) {
                    self.oracle.on_giving_up(key);
                }
            }
            self.crash_after_abandon(i, to);
            self.drain(i);
            return;
        }
        let not_delivered = verdict == Abandoned::NotDelivered;
        let v = if not_delivered {
            ChanVerdict::NotDelivered
        } else {
            ChanVerdict::InDoubt
        };
        if self.chan_verdict(i, id, v) {
            self.drain(i);
            return; // a gap's (gaps have no deadline)
        }
        if let Some(key) = self.key_of(i, id) {
            self.oracle.on_abandoned(key, not_delivered, self.now);
        }
        self.crash_after_abandon(i, to);
        let learned = if not_delivered {
            Learned::NotDelivered
        } else {
            Learned::InDoubt
        };
        self.rpc_verdict(i, id, learned);
        self.drain(i);
    }

    /// The application of node `i` submits what it owes and what its quota allows.
    pub(super) fn pump(&mut self, i: usize) {
        self.hosts[i].pump_scheduled = false;
        let n = self.hosts.len();
        let wl = self.sc.workload.clone();
        if self.hosts[i].node.is_none() {
            return; // resumed by the restart
        }
        if !self.hosts[i].resend.is_empty() {
            // Keyed sends: the outbox goes first, in key order.
            let through = self.resend_outbox(i);
            self.drain(i);
            if !through {
                self.schedule_pump(i, self.now + nanos(wl.interval));
                return;
            }
        }
        let Some(node) = self.hosts[i].node.as_ref() else {
            return;
        };
        // Plan destinations: owed replies first, then new messages.
        self.plan.clear();
        let mut kinds = 0;
        for &to in self.hosts[i].replies.iter().take(wl.burst) {
            if node.pending_to(node_id(to)) >= wl.max_pending {
                break;
            }
            self.plan.push(to);
            kinds += 1;
        }
        let quota = self.hosts[i].quota.min((wl.burst - self.plan.len()) as u64);
        for _ in 0..quota {
            let to = wl.pick(i, n, &mut self.rng);
            if node.pending_to(node_id(to)) >= wl.max_pending {
                break;
            }
            self.plan.push(to);
        }
        if !self.plan.is_empty() {
            let first = self.oracle.next_seq(i);
            let now = self.instant();
            let plan = std::mem::take(&mut self.plan);
            let mut sent = 0;
            let keyed = self.keyed();
            for (j, &to) in plan.iter().enumerate() {
                // One allocation per message: a queued or unacknowledged message keeps only
                // its own payload alive, never a buffer shared with the rest of its burst.
                let kind = if j < kinds { Kind::Reply } else { wl.kind() };
                let key = MsgKey {
                    sender: i as u32,
                    seq: first + j as u64,
                };
                let len = wl.len_of(key);
                let mut p = Vec::with_capacity(len);
                write_payload(&mut p, key, kind, len);
                let p = Bytes::from(p);
                let Some(node) = self.hosts[i].node.as_mut() else {
                    break;
                };
                let sent_now = if keyed {
                    node.send_keyed(now, node_id(to), key.seq, p)
                } else {
                    node.send(now, node_id(to), p)
                };
                match sent_now {
                    Err(exon::proto::SendError::KeysForgotten { .. }) => {
                        // The next pump sends it, above the keys settled now.
                        self.settle_forgotten(i, to, key.seq - 1);
                        break;
                    }
                    Ok(id) => {
                        self.submitted(i, to, id, keyed.then_some(kind));
                        sent += 1;
                    }
                    Err(_) => break,
                }
            }
            let replies = sent.min(kinds);
            self.hosts[i].replies.drain(..replies);
            self.hosts[i].quota -= (sent - replies) as u64;
            self.plan = plan;
            if sent > 0 {
                self.last_activity = self.now;
            }
            self.drain(i);
        }
        self.schedule_pump(i, self.now + nanos(wl.interval));
    }

    /// Node `i` accepted message `id` to `to`: the oracle and the application note it (in
    /// its outbox, with its `kind`, when keyed), and its deadline is set, if any.
    fn submitted(&mut self, i: usize, to: usize, id: MsgId, outbox: Option<Kind>) {
        let key = self.oracle.on_submit(i, to, self.now);
        self.hosts[i].msg_keys.insert(id.0, key.seq);
        if let Some(kind) = outbox {
            self.hosts[i].outbox.insert(key.seq, (to, kind));
        }
        if let Some(d) = self.sc.deadline {
            let durable = self.hosts[i].journal.is_some();
            let what = What::GiveUp {
                node: i as u32,
                to: to as u32,
                id: id.0,
                boot: self.hosts[i].restarts,
                seq: if durable { key.seq } else { u64::MAX },
            };
            self.queue.push(self.now + nanos(d), what);
        }
    }

    /// Whether the applications send keyed from an outbox (`JournalModel::keyed`).
    pub(super) fn keyed(&self) -> bool {
        self.sc.durable.as_ref().is_some_and(|d| d.keyed)
    }

    /// Keyed sends: the application of node `i` sends again, in key order, the messages of
    /// its outbox it holds no verdict for since its restart. A refusal for the key means
    /// exon accepted it before the crash (recovered, or resolved). Returns whether the
    /// outbox is through (false: the node refused for now; try again at the next pump).
    fn resend_outbox(&mut self, i: usize) -> bool {
        let now = self.instant();
        while let Some(&seq) = self.hosts[i].resend.front() {
            let Some(&(to, kind)) = self.hosts[i].outbox.get(&seq) else {
                self.hosts[i].resend.pop_front();
                continue;
            };
            let key = MsgKey {
                sender: i as u32,
                seq,
            };
            let len = self.sc.workload.len_of(key);
            let mut p = Vec::with_capacity(len);
            write_payload(&mut p, key, kind, len);
            let Some(node) = self.hosts[i].node.as_mut() else {
                return false;
            };
            let unkeyed = self.sc.durable.as_ref().is_some_and(|d| d.resend_unkeyed);
            let sent = if unkeyed {
                node.send(now, node_id(to), Bytes::from(p))
            } else {
                node.send_keyed(now, node_id(to), seq, Bytes::from(p))
            };
            match sent {
                Ok(id) => {
                    self.hosts[i].msg_keys.insert(id.0, seq);
                    self.hosts[i].jstats.keyed_resent += 1;
                }
                Err(exon::proto::SendError::KeyNotAbove { .. }) => {
                    self.hosts[i].jstats.keyed_refused += 1;
                }
                Err(exon::proto::SendError::KeysForgotten { .. }) => {
                    // This row and every other to `to` are given up; the loop goes on.
                    let floor = self.oracle.next_seq(i).saturating_sub(1);
                    self.settle_forgotten(i, to, floor);
                    continue;
                }
                Err(_) => return false,
            }
            self.hosts[i].resend.pop_front();
            self.last_activity = self.now;
        }
        true
    }

    /// Keyed sends: node `i`'s journal forgot keys it had accepted for `to` (lost or
    /// damaged: `SendError::KeysForgotten`). This application keeps no record of what its
    /// receiver holds, so it cannot tell which of its rows to `to` arrived: it gives each
    /// up in doubt (delivered at most once: the oracle holds it to that), and settles
    /// `to`'s keys at `floor`, the highest key it used.
    fn settle_forgotten(&mut self, i: usize, to: usize, floor: u64) {
        let h = &mut self.hosts[i];
        let rows: std::collections::HashSet<u64> = h
            .outbox
            .iter()
            .filter(|(_, &(t, _))| t == to)
            .map(|(&seq, _)| seq)
            .collect();
        h.outbox.retain(|seq, _| !rows.contains(seq));
        let ids = h.msg_keys.iter().filter(|(_, s)| rows.contains(s));
        h.given_up.extend(ids.map(|(&id, _)| id));
        h.jstats.keyed_given_up += rows.len() as u64;
        for seq in rows {
            let key = MsgKey {
                sender: i as u32,
                seq,
            };
            self.oracle.on_abandoned(key, false, self.now);
        }
        if let Some(node) = self.hosts[i].node.as_mut() {
            node.settle_keys(node_id(to), floor)
                .expect("a durable node settles keys");
        }
        self.last_activity = self.now;
    }

    /// Keyed sends: node `i`'s message `id` has its verdict: it leaves the outbox. Returns
    /// whether the application had given it up already (`settle_forgotten`): the verdict
    /// is no news then.
    pub(super) fn settle_outbox(&mut self, i: usize, id: MsgId) -> bool {
        let h = &mut self.hosts[i];
        if let Some(seq) = h.msg_keys.get(&id.0) {
            h.outbox.remove(seq);
        }
        h.given_up.remove(&id.0)
    }
}
