//! The oracle: remembers every message submitted and checks at-most-once continuously and
//! at-least-once at the end (and, in durable mode, the checks of `oracle/durable.rs`).

use std::time::Duration;

use crate::workload::{read_payload, Kind, MsgKey};

mod channels;
mod durable;
mod rpc;
mod streams;
mod violation;

pub use channels::{ChanVerdict, ChannelCounts, FlowKey};
pub use rpc::{answer_of, CallEnd, Execution, ReplyFate, RpcCounts, Stable};
pub use streams::StreamCounts;
pub use violation::{Violation, ViolationKind};

const NONE: u64 = u64::MAX;

/// What the oracle knows of one message (times in virtual nanoseconds).
#[derive(Debug, Clone, Copy)]
struct Rec {
    to: u32,
    deliveries: u32,
    /// The receiving application took it from its buffer.
    taken: bool,
    /// Times the receiving application took it (more than once only after redeliveries).
    takes: u32,
    /// Flagged redeliveries after a receiver restart (durable mode), beyond the first
    /// hand-over.
    redeliveries: u32,
    /// Durable mode: its sender's application was told it is stored (`Event::Stored`).
    stored: bool,
    acked: bool,
    /// Its sender was told it is in doubt.
    doubted: bool,
    /// Its sender gave it up at its deadline (told not delivered, or in doubt).
    given_up: bool,
    /// Durable mode: its sender gave it up and waits for the `Resolved` record before it
    /// tells the application (`Abandoned::Pending`).
    giving_up: bool,
    /// Its sender was told it was certainly not delivered.
    not_delivered: bool,
    /// Its sender restarted before it was settled: the obligation died with the process.
    sender_restarted: bool,
    /// Durable mode: its receiver restarted while it was unsettled with a journal that
    /// cannot vouch for the incarnations before (a new or restored journal): `InDoubt` is
    /// allowed.
    doubt_ok: bool,
    /// Durable mode: its delivery was lost with a directory restored from an older copy:
    /// one more unflagged delivery is tolerated (and counted).
    replay_ok: bool,
    /// Durable mode: its take was lost with a directory restored from an older copy: flagged
    /// redeliveries after its acknowledgement are tolerated (and counted) from then on. The
    /// restored host hands it over again at each restart until its own take is stored,
    /// which the oracle does not see, so the excuse is not withdrawn at that take.
    retake_ok: bool,
    /// Deliveries tolerated by `replay_ok`.
    replays: u32,
    /// Durable mode: its sender was restored from a copy taken before its verdict, so its
    /// verdict was undone with the application's state and the message is in flight again.
    reopened: bool,
    /// With `reopened`: it had its verdict before the restore (the copy did not know it).
    verdict_undone: bool,
    /// Virtual time of its last delivery (unflagged) and of its last take.
    last_delivered_at: u64,
    last_taken_at: u64,
    sent_at: u64,
    delivered_at: u64,
    taken_at: u64,
    acked_at: u64,
}

/// Counts and checks everything the applications see.
#[derive(Debug, Default)]
pub struct Oracle {
    msgs: Vec<Vec<Rec>>,
    /// Nodes that restarted at least once so far.
    restarted: Vec<bool>,
    /// Nodes without a journal that evicted a receiver record something was delivered into
    /// ([`Oracle::on_evicted_proven`]); in durable mode, since their last restart (durable
    /// mode switched on there: [`Oracle::on_unvouched_restart`]).
    evicted: Vec<bool>,
    /// Durable mode: the checks of [`Oracle::set_durable`].
    durable: bool,
    /// Keyed sends from an outbox ([`Oracle::set_keyed`]).
    keyed: bool,
    /// Durable mode: nodes whose journal was found damaged at a recovery.
    damaged: Vec<bool>,
    /// Durable mode: when each node last restarted with a journal that cannot vouch for
    /// its earlier incarnations (`NONE`: never).
    unvouched_at: Vec<u64>,
    /// Durable mode: when each sender (outer index) first reported a message to each
    /// receiver (inner) in doubt (`NONE`: not since that receiver's last unvouched restart).
    first_doubt: Vec<Vec<u64>>,
    /// Durable mode: when each sender (outer index) last reported in doubt a message to each
    /// receiver (inner) that may have gone in an envelope of an incarnation the receiver's
    /// last unvouched restart lost (`NONE`: none yet).
    last_old_doubt: Vec<Vec<u64>>,
    violations: Vec<Violation>,
    violation_count: u64,
    /// Violations of each kind seen, all of them (not only those kept).
    kind_counts: Vec<(ViolationKind, u64)>,
    /// The request/reply workload's calls (`oracle/rpc.rs`).
    rpc: rpc::Calls,
    /// The ordered channels' flows (`oracle/channels.rs`).
    chans: channels::Flows,
    /// The byte streams (`oracle/streams.rs`).
    streams: streams::Streams,
    /// Distinct messages delivered.
    pub delivered: u64,
    /// Deliveries beyond the first.
    pub duplicates: u64,
    /// Acknowledgements seen by senders.
    pub acked: u64,
    /// Virtual time of the last acknowledgement, or of the last stream bytes stored (a
    /// stream's progress), in nanoseconds: when the work was done (the run goes on until
    /// its timers go quiet).
    pub last_ack_at: u64,
    /// Messages reported in doubt to their senders (their receiver restarted).
    pub in_doubt: u64,
    /// Messages not delivered because their sender restarted, or reported in doubt and not
    /// delivered (reported, not violations), known at the end.
    pub lost_by_restart: u64,
    /// Messages never delivered although no restart excuses them, known at the end.
    pub lost: u64,
    /// Messages given up at their deadline: told not delivered.
    pub not_delivered: u64,
    /// Messages given up at their deadline after a copy left: told in doubt.
    pub expired_in_doubt: u64,
    /// Durable mode: flagged redeliveries of messages handed over before a restart.
    pub redeliveries: u64,
    /// Durable mode: messages their senders' applications were told are stored.
    pub stored: u64,
    /// Durable mode: messages that could end in doubt because their receiver restarted
    /// with a journal that cannot vouch for its earlier incarnations (a new journal, durable
    /// mode switched on, a restored copy) while they were unsettled.
    pub doubt_excused: u64,
    /// Durable mode, restored copies: second deliveries of messages first delivered to
    /// the restored host after its copy was taken (tolerated: the copy cannot know them).
    pub restore_duplicates: u64,
    /// Durable mode, restored copies: flagged redeliveries after the acknowledgement of
    /// messages the restored host took after its copy was taken (tolerated likewise).
    pub restore_redeliveries: u64,
    /// Durable mode: messages given up at their deadline, their verdict reported, whose
    /// sender recovered them after a crash and sent them again (a violation:
    /// [`ViolationKind::VerdictRevoked`]).
    pub revoked_verdicts: u64,
    /// Durable mode: verdicts reported again, the same, by a restarted sender whose
    /// journal held them as not reported (allowed: `docs/durability.md`).
    pub repeated_verdicts: u64,
    /// Durable mode, restored copies: messages of a restored sender whose verdict came after
    /// its copy was taken: undone with its application's state, in flight again.
    pub restore_reopened: u64,
}

/// Violations kept in full; later ones are only counted.
const KEEP: usize = 64;

impl Oracle {
    /// An oracle for `nodes` nodes.
    pub fn new(nodes: usize) -> Oracle {
        Oracle {
            msgs: vec![Vec::new(); nodes],
            restarted: vec![false; nodes],
            evicted: vec![false; nodes],
            damaged: vec![false; nodes],
            unvouched_at: vec![NONE; nodes],
            first_doubt: vec![vec![NONE; nodes]; nodes],
            last_old_doubt: vec![vec![NONE; nodes]; nodes],
            ..Oracle::default()
        }
    }

    /// Messages submitted.
    pub fn submitted(&self) -> u64 {
        self.msgs.iter().map(|v| v.len() as u64).sum()
    }

    /// Sequence number the next message of `sender` will get.
    pub fn next_seq(&self, sender: usize) -> u64 {
        self.msgs[sender].len() as u64
    }

    /// When message `key` was submitted, and to which node (none: no such message).
    pub fn submission(&self, key: MsgKey) -> Option<(u64, usize)> {
        let r = self
            .msgs
            .get(key.sender as usize)?
            .get(usize::try_from(key.seq).ok()?)?;
        Some((r.sent_at, r.to as usize))
    }

    /// Violations kept (the first ones).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// All violations, including those not kept.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// How many violations of each kind were seen (all of them, in the order of each kind's
    /// first).
    pub fn violation_kinds(&self) -> &[(ViolationKind, u64)] {
        &self.kind_counts
    }

    /// Records a violation.
    pub fn violate(&mut self, kind: ViolationKind, key: Option<MsgKey>, now: u64, what: String) {
        self.violation_count += 1;
        match self.kind_counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.kind_counts.push((kind, 1)),
        }
        if self.violations.len() < KEEP {
            let trace = key.map(|k| self.trace(k)).unwrap_or_default();
            self.violations.push(Violation {
                kind,
                key,
                at: Duration::from_nanos(now),
                detail: format!("{what}{trace}"),
            });
        }
    }

    /// A short trace of one message.
    pub fn trace(&self, k: MsgKey) -> String {
        let Some(r) = self.rec(k) else {
            return String::from(" [never submitted]");
        };
        let t = |ns: u64| {
            if ns == NONE {
                String::from("-")
            } else {
                format!("{:?}", Duration::from_nanos(ns))
            }
        };
        format!(
            " [node{} -> node{}: submitted {}, delivered {}x (first {}), {} {}{}{}]",
            k.sender,
            r.to,
            t(r.sent_at),
            r.deliveries,
            t(r.delivered_at),
            if r.doubted { "in doubt" } else { "acked" },
            t(r.acked_at),
            if r.sender_restarted {
                ", sender restarted"
            } else {
                ""
            },
            if self.restarted[r.to as usize] {
                ", receiver restarted"
            } else {
                ""
            },
        )
    }

    fn rec(&self, k: MsgKey) -> Option<&Rec> {
        self.msgs
            .get(k.sender as usize)?
            .get(usize::try_from(k.seq).ok()?)
    }

    /// Records that `sender` submitted its next message, to `to`.
    pub fn on_submit(&mut self, sender: usize, to: usize, now: u64) -> MsgKey {
        let v = &mut self.msgs[sender];
        let key = MsgKey {
            sender: sender as u32,
            seq: v.len() as u64,
        };
        v.push(Rec {
            to: to as u32,
            deliveries: 0,
            taken: false,
            takes: 0,
            redeliveries: 0,
            stored: false,
            acked: false,
            doubted: false,
            given_up: false,
            giving_up: false,
            not_delivered: false,
            sender_restarted: false,
            doubt_ok: false,
            replay_ok: false,
            retake_ok: false,
            replays: 0,
            reopened: false,
            verdict_undone: false,
            last_delivered_at: NONE,
            last_taken_at: NONE,
            sent_at: now,
            delivered_at: NONE,
            taken_at: NONE,
            acked_at: NONE,
        });
        key
    }

    /// Checks a delivery of `payload` from `from` to `node`; returns the message if it is one.
    pub fn on_delivered(
        &mut self,
        node: usize,
        from: usize,
        payload: &[u8],
        now: u64,
    ) -> Option<(MsgKey, Kind)> {
        self.on_handover(node, from, payload, false, now)
    }

    /// Checks a hand-over of `payload` from `from` to `node`, flagged as a redelivery after
    /// a restart (`redelivery`) or not; returns the message if the application is to get it.
    pub fn on_handover(
        &mut self,
        node: usize,
        from: usize,
        payload: &[u8],
        redelivery: bool,
        now: u64,
    ) -> Option<(MsgKey, Kind)> {
        let Some((key, kind)) = read_payload(payload) else {
            self.violate(
                ViolationKind::NeverSent,
                None,
                now,
                format!("node{node} delivered an unknown payload from node{from}"),
            );
            return None;
        };
        let Some(r) = rec_in(&mut self.msgs, key) else {
            self.violate(
                ViolationKind::NeverSent,
                Some(key),
                now,
                format!("node{node} delivered a message never submitted"),
            );
            return None;
        };
        if r.to as usize != node || key.sender as usize != from {
            self.violate(
                ViolationKind::Misdelivered,
                Some(key),
                now,
                format!("delivered to node{node} from node{from}"),
            );
            return None;
        }
        if redelivery && r.deliveries > 0 {
            return self.on_redelivery(node, key, kind, now);
        }
        r.deliveries += 1;
        r.last_delivered_at = now;
        let reopened = r.reopened.then_some(r.verdict_undone);
        let told_not_delivered = r.not_delivered;
        let deliveries = r.deliveries;
        if told_not_delivered {
            self.violate(
                ViolationKind::DeliveredAfterNotDelivered,
                Some(key),
                now,
                format!("node{node} delivered it after its sender was told not delivered"),
            );
        }
        if deliveries > 1 && self.tolerate_replay(key) {
            return Some((key, kind));
        }
        if let (true, Some(undone)) = (deliveries > 1, reopened) {
            self.duplicates += 1;
            let why = if undone {
                "its verdict came after the copy, which knew no slot for it"
            } else {
                "unsettled in the copy, which knew no slot for it"
            };
            self.violate(
                ViolationKind::ResentByRestoredSender,
                Some(key),
                now,
                format!("node{node} delivered it again, resent by its restored sender ({why})"),
            );
            // Recorded; the application takes it (else the sender retransmits it forever
            // and the run ends not idle, hiding what comes after).
            if let Some(r) = rec_in(&mut self.msgs, key) {
                r.replays += 1;
            }
            return Some((key, kind));
        }
        if deliveries > 1 {
            self.duplicates += 1;
            self.violate(
                ViolationKind::Duplicate,
                Some(key),
                now,
                format!("node{node} delivered it again"),
            );
            return None;
        }
        if let Some(r) = rec_in(&mut self.msgs, key) {
            r.delivered_at = now;
        }
        self.delivered += 1;
        Some((key, kind))
    }

    /// The application of `node` took `payload` from its buffer (after
    /// [`on_delivered`](Self::on_delivered) accepted it); returns the message.
    pub fn on_taken(&mut self, node: usize, payload: &[u8], now: u64) -> Option<(MsgKey, Kind)> {
        let (key, kind) = read_payload(payload)?;
        let r = rec_in(&mut self.msgs, key)?;
        let handovers = r.deliveries.min(1) + r.redeliveries + r.replays;
        if r.takes >= handovers || r.to as usize != node {
            self.violate(
                ViolationKind::Duplicate,
                Some(key),
                now,
                format!("node{node} took a message twice or never delivered"),
            );
            return None;
        }
        if !r.taken {
            r.taken_at = now;
        }
        r.last_taken_at = now;
        r.taken = true;
        r.takes += 1;
        Some((key, kind))
    }

    /// Whether `key` was delivered at least once.
    pub fn is_delivered(&self, key: MsgKey) -> bool {
        self.rec(key).is_some_and(|r| r.deliveries > 0)
    }

    /// Checks the acknowledgement of `key` seen by its sender: it must have been delivered,
    /// whatever restarted.
    pub fn on_acked(&mut self, key: MsgKey, now: u64) {
        let Some(r) = self.settle(key, now, "acknowledged") else {
            return;
        };
        r.acked = true;
        r.acked_at = now;
        let delivered = r.deliveries > 0;
        let taken = r.taken;
        self.acked += 1;
        self.last_ack_at = self.last_ack_at.max(now);
        if !delivered {
            self.violate(
                ViolationKind::AckWithoutDelivery,
                Some(key),
                now,
                "acknowledged but never delivered".into(),
            );
        } else if !taken {
            self.violate(
                ViolationKind::AckWithoutTake,
                Some(key),
                now,
                "acknowledged but never taken by the receiving application".into(),
            );
        }
    }

    /// Checks that `key` was reported in doubt only after its receiver restarted (at any
    /// time before: a token made after the restart from an envelope granted before it is in
    /// doubt too).
    pub fn on_in_doubt(&mut self, key: MsgKey, now: u64) {
        if self.rec(key).is_some_and(|r| r.giving_up) {
            // The verdict of a message given up (durable mode), once its record is stored.
            return self.on_abandoned(key, false, now);
        }
        // A sender whose journal was damaged reports every message it recovered in doubt:
        // its records of their slots and verdicts may be lost (some may have been reported
        // before the crash: in doubt after acknowledged is weaker, and true).
        let sender_damaged = self
            .damaged
            .get(key.sender as usize)
            .copied()
            .unwrap_or(false);
        if sender_damaged {
            if let Some(r) = rec_in(&mut self.msgs, key) {
                if r.acked || r.doubted || r.not_delivered {
                    return;
                }
            }
        }
        if self.durable && !sender_damaged {
            self.check_durable_doubt(key, now);
        }
        // Also a message durable mode allows to end in doubt (`doubt_ok`): one a sender
        // restored from an older copy sends again in a slot its receiver, which never
        // restarted, forgot below its frontier (DOUBT there, truthfully: `on_restored`).
        let explained = sender_damaged
            || self.rec(key).is_some_and(|r| {
                r.doubt_ok || self.restarted[r.to as usize] || self.evicted[r.to as usize]
            });
        let Some(r) = self.settle(key, now, "in doubt") else {
            return;
        };
        r.doubted = true;
        r.acked_at = now;
        self.in_doubt += 1;
        if !explained {
            self.violate(
                ViolationKind::UnexplainedDoubt,
                Some(key),
                now,
                "in doubt, but its receiver never restarted".into(),
            );
        }
    }

    /// The sender gave `key` up at its deadline, and was told it was not delivered
    /// (`not_delivered`: it must never be) or is in doubt.
    pub fn on_abandoned(&mut self, key: MsgKey, not_delivered: bool, now: u64) {
        let Some(r) = self.settle(key, now, "given up") else {
            return;
        };
        r.given_up = true;
        r.giving_up = false;
        r.doubted = !not_delivered;
        r.not_delivered = not_delivered;
        r.acked_at = now;
        let delivered = r.deliveries > 0;
        if not_delivered {
            self.not_delivered += 1;
        } else {
            self.expired_in_doubt += 1;
        }
        if not_delivered && delivered {
            self.violate(
                ViolationKind::DeliveredAfterNotDelivered,
                Some(key),
                now,
                "told not delivered, but it was delivered".into(),
            );
        }
    }

    /// The record of `key` about to be settled, or `None` (and a violation) if it was never
    /// submitted or was settled already.
    fn settle(&mut self, key: MsgKey, now: u64, what: &str) -> Option<&mut Rec> {
        let settled = match rec_in(&mut self.msgs, key) {
            None => None,
            Some(r) => Some(r.acked || r.doubted || r.not_delivered),
        };
        match settled {
            None => self.violate(
                ViolationKind::NeverSent,
                Some(key),
                now,
                format!("{what}, never submitted"),
            ),
            Some(true) => self.violate(
                ViolationKind::DoubleAck,
                Some(key),
                now,
                format!("{what}, after it was settled already"),
            ),
            Some(false) => return rec_in(&mut self.msgs, key),
        }
        None
    }

    /// `node` evicted a receiver record something was delivered into, while it kept a journal
    /// (`journaled`) or not. Without a journal, it answers DOUBT for the slots of that record
    /// it can no longer tell free from filled (`docs/wire.md`, "Record table pressure"), so
    /// messages to it may from now on end in doubt: in durable mode too, before durable mode
    /// is switched on at its restart (until then it runs without a journal). A node with a
    /// journal answers from it: nothing changes.
    pub fn on_evicted_proven(&mut self, node: usize, journaled: bool) {
        if !self.durable || !journaled {
            self.evicted[node] = true;
        }
    }

    /// `node` restarted: its unsettled messages may be lost without a violation (in durable
    /// mode only those never reported stored), and messages to it may from now on end in
    /// doubt (not in durable mode).
    pub fn on_restart(&mut self, node: usize) {
        self.restarted[node] = true;
        let durable = self.durable;
        if self.keyed {
            // The application sends again what it holds no verdict for.
            return;
        }
        if let Some(v) = self.msgs.get_mut(node) {
            // In durable mode a message its application was told is stored outlives the
            // crash: its sender still owes a verdict.
            let owed = |r: &Rec| durable && r.stored;
            for r in v.iter_mut().filter(|r| !r.acked && !r.doubted && !owed(r)) {
                r.sender_restarted = true;
            }
        }
    }

    /// The end-of-run check, once the network healed and everything settled.
    pub fn finish(&mut self, now: u64) {
        let mut bad = Vec::new();
        for (s, v) in self.msgs.iter().enumerate() {
            for (seq, r) in v.iter().enumerate() {
                let key = MsgKey {
                    sender: s as u32,
                    seq: seq as u64,
                };
                let settled = r.acked || r.doubted || r.not_delivered;
                let damaged = self.damaged.get(s).copied().unwrap_or(false);
                if damaged && !settled {
                    // Its sender's journal lost records (their `Accepted` or `Resolved`):
                    // the application is told the journal was damaged, and what it was
                    // told stored and never heard of again is in doubt.
                    self.lost_by_restart += u64::from(!r.taken);
                } else if r.given_up && !r.taken {
                    // Given up at its deadline, and told so truthfully: not a loss.
                } else if !r.taken && (r.doubted || (r.sender_restarted && !settled)) {
                    self.lost_by_restart += 1;
                } else if !r.taken {
                    self.lost += 1;
                    bad.push((ViolationKind::Lost, key));
                } else if !settled && !r.sender_restarted {
                    bad.push((ViolationKind::NotAcknowledged, key));
                }
            }
        }
        for (kind, key) in bad {
            self.violate(kind, Some(key), now, "after quiescence".into());
        }
        self.finish_rpc(now);
        self.finish_channels(now);
        self.finish_streams(now);
    }
}

/// The record of `key` in `msgs` (a free function so that callers keep borrowing the
/// oracle's other fields).
fn rec_in(msgs: &mut [Vec<Rec>], key: MsgKey) -> Option<&mut Rec> {
    msgs.get_mut(key.sender as usize)?
        .get_mut(usize::try_from(key.seq).ok()?)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod rpc_tests;

#[cfg(test)]
mod channel_tests;
