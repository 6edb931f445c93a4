//! Held messages (durable mode): a request whose journal record outlives its
//! acknowledgement until the application releases it, so that a restarted caller still
//! knows the call whose reply it waits for (`send_held`, `release`, `take_reply`).

use std::time::Instant;

use crate::proto::journal::gates::Gate;
use crate::proto::journal::{Entry, RecoveredMessage};
use crate::proto::node::send::Stamp;
use crate::proto::{DeliveryId, MsgId, Node, NodeId, Payload, SendError};

impl Node {
    /// Input: as [`send`](Self::send), for a message whose acknowledgement is not the end
    /// of what the application waits for (a request, whose reply is to come). In durable
    /// mode its journal record ([`Entry::AcceptedHeld`]) is kept after its verdict, if that
    /// is an acknowledgement, until [`release`](Self::release) or
    /// [`take_reply`](Self::take_reply): a restart in between recovers it in
    /// [`Recovered::held`](crate::proto::journal::Recovered::held), acknowledged, not to be
    /// sent again. Its verdict is reported as any message's. Outside durable mode, or with
    /// the rule [`hold_call_requests`](crate::proto::Rules::hold_call_requests) off, it is
    /// `send`.
    ///
    /// The application releases every message it sends held, once it is done with it: each
    /// one not released is kept in the journal, and in memory, across restarts.
    pub fn send_held(
        &mut self,
        now: Instant,
        to: NodeId,
        payload: impl Into<Payload>,
    ) -> Result<MsgId, SendError> {
        self.accept(now, to, payload.into(), None, false, Stamp::Held)
    }

    /// Input (durable mode): the application is done with held message `id` (its call ended:
    /// its deadline passed, it failed, it was dropped): a `Released` record (no sync of its
    /// own: it rides the next commit), and the journal forgets the message once it is
    /// resolved. Returns false, writing nothing, for an id not held (never sent held, or
    /// released already).
    pub fn release(&mut self, id: MsgId) -> bool {
        let Some(j) = self.journal.as_mut() else {
            return false;
        };
        if !j.holds.remove(&id) {
            return false;
        }
        j.write(Entry::Released { id });
        true
    }

    /// Input: the application took the delivery `id`, the reply to held message `request`:
    /// as [`handle_taken`](Self::handle_taken), and in durable mode the take and the release
    /// of `request` are one record ([`Entry::TakenReleased`]), so that a crash keeps both
    /// or neither (the reply handed out again to a call that is still held, or neither).
    /// A `request` that is not held is left alone (the delivery is taken as by
    /// `handle_taken`). Returns whether the delivery was waiting; when it was not, `request`
    /// is released all the same.
    pub fn take_reply(&mut self, now: Instant, id: DeliveryId, request: MsgId) -> bool {
        let held = self
            .journal
            .as_mut()
            .is_some_and(|j| j.holds.contains(&request));
        if !held {
            return self.handle_taken(now, id);
        }
        if !self.is_waiting(&id) {
            self.release(request);
            return false;
        }
        if let Some(j) = self.journal.as_mut() {
            j.holds.remove(&request);
        }
        let (from, (rck, slot)) = (id.from(), id.slot());
        let entry = Entry::TakenReleased {
            from,
            rck,
            slot,
            id: request,
        };
        self.journal(now, entry, Gate::Take(id));
        true
    }

    /// Durable mode: messages sent held and not released (acknowledged or not).
    pub fn held_messages(&self) -> usize {
        self.journal.as_ref().map_or(0, |j| j.holds.len())
    }

    /// Recovery: held messages acknowledged before the restart stay held (not sent again);
    /// their ids are not given out again.
    pub(super) fn recover_held(&mut self, held: Vec<RecoveredMessage>) {
        for m in held {
            self.next_msg = self.next_msg.max(m.id.0.saturating_add(1));
            if let Some(j) = self.journal.as_mut() {
                j.holds.insert(m.id);
            }
        }
    }
}
