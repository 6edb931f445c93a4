//! Marks at the node: sends and takes that set a layer's mark in their own journal record,
//! marks set alone, and the marks the journal keeps (durable mode).

use std::time::Instant;

use bytes::Bytes;

use crate::proto::journal::{Entry, Mark, MAX_MARK_BYTES};
use crate::proto::node::send::Stamp;
use crate::proto::{DeliveryId, MarkError, MsgId, Node, NodeId, Payload, SendError};

impl Node {
    /// Input: as [`send`](Self::send) (as [`send_reported`](Self::send_reported) with
    /// `reported`), and in the same journal record the mark `(to, mark.lane)` becomes
    /// `mark.value` ([`Mark`]): a crash keeps the message and the mark, or neither. Durable
    /// mode only. The endpoint's durable ordered flows send with it, keeping a flow's
    /// position with each of its messages.
    ///
    /// Fails as [`send`](Self::send) fails, or with [`SendError::Mark`].
    pub fn send_marked(
        &mut self,
        now: Instant,
        to: NodeId,
        payload: impl Into<Payload>,
        reported: bool,
        mark: Mark,
    ) -> Result<MsgId, SendError> {
        self.check_mark(to, &mark)?;
        self.accept(now, to, payload.into(), None, reported, Stamp::Mark(mark))
    }

    /// Input: as [`handle_taken`](Self::handle_taken), and in the same journal record the
    /// mark `(source of id, mark.lane)` becomes `mark.value`: a crash keeps the take and the
    /// mark, or neither. Durable mode only. Returns whether the delivery was waiting (if
    /// not, nothing is written and the mark is unchanged).
    pub fn handle_taken_marked(
        &mut self,
        now: Instant,
        id: DeliveryId,
        mark: Mark,
    ) -> Result<bool, MarkError> {
        self.check_mark(id.from(), &mark)?;
        Ok(self.journal_take(now, id, Some(mark)))
    }

    /// Input: the mark `(peer, mark.lane)` becomes `mark.value` (an empty value forgets
    /// it), in a record of its own. Durable mode only. Nothing waits for the record: it is
    /// durable with the next commit, or lost with a crash before it (then the mark keeps
    /// its earlier value).
    pub fn set_mark(&mut self, peer: NodeId, mark: Mark) -> Result<(), MarkError> {
        self.check_mark(peer, &mark)?;
        let Some(j) = self.journal.as_mut() else {
            return Err(MarkError::NotDurable);
        };
        if j.marks.get(peer, mark.lane).is_none() && mark.value.is_empty() {
            return Ok(()); // nothing to forget
        }
        j.marks.set(peer, mark.lane, &mark.value);
        j.write(Entry::Mark {
            peer,
            lane: mark.lane,
            value: mark.value,
        });
        Ok(())
    }

    /// The value of the mark `(peer, lane)`, as the journal will hold it once the writes
    /// asked for so far are durable (recovered at [`recover`](Self::recover)).
    pub fn mark(&self, peer: NodeId, lane: u64) -> Option<&Bytes> {
        self.journal.as_ref()?.marks.get(peer, lane)
    }

    /// Every mark the journal keeps: peer, lane, value.
    pub fn marks(&self) -> impl Iterator<Item = (NodeId, u64, &Bytes)> + '_ {
        self.journal.iter().flat_map(|j| j.marks.iter())
    }

    /// Why `mark` cannot be kept under `peer`, if it cannot.
    fn check_mark(&self, peer: NodeId, mark: &Mark) -> Result<(), MarkError> {
        let Some(j) = self.journal.as_ref() else {
            return Err(MarkError::NotDurable);
        };
        let len = mark.value.len();
        if len > MAX_MARK_BYTES {
            return Err(MarkError::TooLarge {
                len,
                max: MAX_MARK_BYTES,
            });
        }
        let max = self.cfg.limits.max_marks;
        let new = !mark.value.is_empty() && j.marks.get(peer, mark.lane).is_none();
        if new && j.marks.len() >= max {
            return Err(MarkError::TooMany(max));
        }
        Ok(())
    }
}
