//! Giving up on a message (its deadline passed): the sender forgets it and says truthfully
//! what became of it.

use std::time::Instant;

use super::{MsgId, Node, NodeId};

/// The verdict on a message the sender gave up with [`Node::abandon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// No copy of it ever left this node: it was certainly not delivered, and never will be.
    NotDelivered,
    /// A copy left (it was sent at least once as a TOKEN, or every byte of it in FRAGs):
    /// it may still be delivered, at most once, or may never be. It will not be sent again.
    InDoubt,
}

impl Node {
    /// Input: gives up on message `id` to `to` (for example at its deadline). The node
    /// forgets it: no retransmission, no later [`Event`](super::Event) for it. Returns the
    /// truthful verdict, or `None` if the message is not pending (already settled, or never
    /// sent to `to`).
    ///
    /// A message still queued, made into a TOKEN never written out, or sent in fragments of
    /// which some bytes never left, is [`Abandoned::NotDelivered`]: its slot (if any) is
    /// simply released later by the collection frontier (with any partial message the
    /// receiver held in it). Any other is [`Abandoned::InDoubt`].
    pub fn abandon(&mut self, now: Instant, to: NodeId, id: MsgId) -> Option<Abandoned> {
        let doubt_sent = self.rules.deadline_doubts_sent_tokens;
        let rec = self.senders.get_mut(&to)?;
        let (len, verdict) = if let Some(i) = rec.queue.iter().position(|q| q.id == id) {
            let q = rec.queue.remove(i)?;
            (q.payload.len(), Abandoned::NotDelivered)
        } else {
            let slot = rec.tokens.iter_mut().find(|(_, t)| t.id == id)?.0;
            let mut taken = None;
            rec.tokens
                .remove_in(slot..slot + 1, |t| t.id == id, |_, t| taken = Some(t));
            let tok = taken?;
            if let Some(o) = tok.frag.as_ref().filter(|o| o.is_charged()) {
                rec.credit
                    .give_back(tok.rck, super::fragments::Outgoing::charge_of(o.total()));
            }
            rec.flight.bytes = rec.flight.bytes.saturating_sub(tok.flight);
            // A message in fragments some bytes of which never left cannot be delivered:
            // its receiver can never make it whole.
            let partly_unsent = tok.frag.as_ref().is_some_and(|o| !o.all_sent());
            let verdict = if tok.sends == 0 || !doubt_sent || partly_unsent {
                Abandoned::NotDelivered
            } else {
                Abandoned::InDoubt
            };
            if rec.tokens.is_empty() {
                rec.rto_at = None;
            }
            (tok.payload.len(), verdict)
        };
        rec.bytes -= len;
        self.queued_bytes -= len;
        rec.note_if_idle(now);
        match verdict {
            Abandoned::NotDelivered => self.stats.not_delivered += 1,
            Abandoned::InDoubt => self.stats.in_doubt += 1,
        }
        self.rearm_sender(to);
        Some(verdict)
    }
}
