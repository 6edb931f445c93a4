//! The oracle's checks of durable mode: no message in doubt, stored messages owed a
//! verdict across crashes of their sender, and flagged redeliveries only of messages whose
//! sender was not yet told they were acknowledged.

use super::{rec_in, Oracle, ViolationKind};
use crate::workload::{Kind, MsgKey};

impl Oracle {
    /// Turns on the checks of durable mode (every node journals its inbox and outbox):
    /// an `InDoubt` verdict is a violation ([`ViolationKind::DurableInDoubt`]), a message
    /// reported stored must be acknowledged whatever crashes, and a redelivery must not
    /// follow an acknowledgement ([`ViolationKind::RedeliveredAfterAck`]).
    pub fn set_durable(&mut self) {
        self.durable = true;
    }

    /// Whether the checks of durable mode are on.
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    /// The journal of `node` was found damaged at a recovery: verdicts in doubt about
    /// messages to it are excused from then on, and so are flagged redeliveries of messages
    /// already acknowledged (it may have lost their `Taken` records: the application gets
    /// them again flagged, with their stable ids). Nothing else is: no unflagged duplicate,
    /// no acknowledgement of what was not delivered, no stored message left without a
    /// verdict.
    pub fn on_damaged(&mut self, node: usize) {
        if let Some(d) = self.damaged.get_mut(node) {
            *d = true;
        }
    }

    /// The sender's application was told `key` is stored (`Event::Stored`): from now on a
    /// crash of its sender does not excuse its loss.
    pub fn on_stored(&mut self, key: MsgKey, now: u64) {
        let Some(r) = rec_in(&mut self.msgs, key) else {
            self.violate(
                ViolationKind::NeverSent,
                Some(key),
                now,
                "reported stored, never submitted".into(),
            );
            return;
        };
        if !r.stored {
            r.stored = true;
            self.stored += 1;
        }
    }

    /// A flagged redelivery of `key`, handed over before: allowed (the application gets it
    /// again) unless its sender was already told it was acknowledged (and `node`'s journal
    /// was not found damaged).
    pub(super) fn on_redelivery(
        &mut self,
        node: usize,
        key: MsgKey,
        kind: Kind,
        now: u64,
    ) -> Option<(MsgKey, Kind)> {
        let damaged = self.damaged.get(node).copied().unwrap_or(false);
        let r = rec_in(&mut self.msgs, key)?;
        if r.acked && !damaged {
            self.violate(
                ViolationKind::RedeliveredAfterAck,
                Some(key),
                now,
                format!(
                    "node{node} handed it over again after its sender was told it was acknowledged"
                ),
            );
            return None;
        }
        r.redeliveries += 1;
        self.redeliveries += 1;
        Some((key, kind))
    }

    /// An `InDoubt` verdict in durable mode: a violation unless the receiver's journal was
    /// damaged.
    pub(super) fn check_durable_doubt(&mut self, key: MsgKey, now: u64) {
        let to = self.rec(key).map(|r| r.to as usize);
        if to.is_some_and(|to| self.damaged.get(to).copied().unwrap_or(false)) {
            return;
        }
        self.violate(
            ViolationKind::DurableInDoubt,
            Some(key),
            now,
            "in doubt, although every node keeps a journal".into(),
        );
    }
}
