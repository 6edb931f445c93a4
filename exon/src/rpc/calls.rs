//! The caller's side of request/reply shared by handles and drivers: call ids, and the
//! calls waiting for their reply.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::envelope::Outcome;
use crate::proto::NodeId;

/// A reply as it reached the caller.
#[derive(Debug)]
pub(crate) struct ReplyIn {
    pub(crate) outcome: Outcome,
    pub(crate) body: Bytes,
}

/// Calls in flight of one endpoint (every shard shares it).
#[derive(Debug)]
pub(crate) struct Calls {
    /// The next call id.
    next: AtomicU64,
    /// Deadline of calls that give none.
    pub(crate) deadline: std::time::Duration,
    /// Calls waiting for their reply, by call id: the node called, and the caller's end.
    waiting: Mutex<Waiting>,
}

/// Calls waiting for their reply: call id to the node called and where its reply goes.
type Waiting = HashMap<u64, (NodeId, oneshot::Sender<ReplyIn>), foldhash::fast::RandomState>;

/// Call ids stay below this (they travel as varints, at most 8 bytes).
const CALL_ID_LIMIT: u64 = 1 << 62;

impl Calls {
    /// A table whose call ids start at a random point: a reply to a call made before a
    /// restart of this endpoint (it can come: exon delivers it to the new incarnation)
    /// finds no call with its id, rather than a new call that reused it.
    pub(crate) fn new(deadline: std::time::Duration) -> Arc<Calls> {
        let seed = std::collections::hash_map::RandomState::new().hash_one(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        // Half the id space below the start: 2^61 calls before the ids wrap.
        Arc::new(Calls {
            next: AtomicU64::new(seed % (CALL_ID_LIMIT / 2)),
            deadline,
            waiting: Mutex::default(),
        })
    }

    /// Opens a call to node `to`: its id, and where its reply will come. The guard closes
    /// it. The id is one no call waiting now has (a call recovered after a restart keeps
    /// its id, and new ones start above it: [`reopen`](Self::reopen)).
    pub(crate) fn open(self: &Arc<Self>, to: NodeId) -> (CallGuard, oneshot::Receiver<ReplyIn>) {
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.lock();
        let id = loop {
            let id = self.next.fetch_add(1, Ordering::Relaxed) % CALL_ID_LIMIT;
            if !waiting.contains_key(&id) {
                break id;
            }
        };
        waiting.insert(id, (to, tx));
        drop(waiting);
        (
            CallGuard {
                calls: self.clone(),
                id,
            },
            rx,
        )
    }

    /// Durable mode: opens again call `id` to node `to`, a call of an earlier run whose
    /// request was recovered from the journal (`register`: the rule `recover_calls`; off,
    /// the call is not in the table and its reply finds none). New calls take ids above
    /// it.
    pub(crate) fn reopen(
        self: &Arc<Self>,
        id: u64,
        to: NodeId,
        register: bool,
    ) -> (CallGuard, oneshot::Receiver<ReplyIn>) {
        let id = id % CALL_ID_LIMIT;
        self.next.fetch_max(id + 1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if register {
            self.lock().insert(id, (to, tx));
        }
        (
            CallGuard {
                calls: self.clone(),
                id,
            },
            rx,
        )
    }

    /// A reply to call `id` came from node `from`: handed to its caller if `from` is the
    /// node called. Returns false when nobody waits for it (the call ended: its future was
    /// dropped, or its deadline passed), and when `from` is another node: call ids are
    /// sequential, so a peer that saw this endpoint's calls to it can guess the ids of its
    /// calls to others, and its reply must not end them.
    pub(crate) fn on_reply(&self, id: u64, from: NodeId, reply: ReplyIn) -> bool {
        let mut waiting = self.lock();
        match waiting.get(&id) {
            Some((to, _)) if *to == from => {}
            _ => return false,
        }
        let Some((_, tx)) = waiting.remove(&id) else {
            return false;
        };
        drop(waiting);
        tx.send(reply).is_ok()
    }

    /// Calls waiting for a reply now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An open call: dropping it (the call's future dropped, or ended) forgets the call, so
/// that a reply coming later is discarded and counted.
#[derive(Debug)]
pub(crate) struct CallGuard {
    calls: Arc<Calls>,
    id: u64,
}

impl CallGuard {
    /// The call's id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.calls.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> ReplyIn {
        ReplyIn {
            outcome: Outcome::Answered,
            body: Bytes::new(),
        }
    }

    const PEER: NodeId = NodeId::from_const(7);

    #[test]
    fn a_reply_reaches_its_open_call_once() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, mut rx) = calls.open(PEER);
        assert!(calls.on_reply(guard.id(), PEER, reply()));
        assert!(rx.try_recv().is_ok());
        assert!(
            !calls.on_reply(guard.id(), PEER, reply()),
            "a second reply finds no call"
        );
    }

    #[test]
    fn a_dropped_call_discards_its_reply() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, _rx) = calls.open(PEER);
        let id = guard.id();
        drop(guard);
        assert_eq!(calls.waiting(), 0);
        assert!(!calls.on_reply(id, PEER, reply()));
    }

    #[test]
    fn a_reply_from_another_node_leaves_the_call_waiting() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, mut rx) = calls.open(PEER);
        let other = NodeId::from_const(8);
        assert!(
            !calls.on_reply(guard.id(), other, reply()),
            "not the node called"
        );
        assert!(rx.try_recv().is_err(), "the call did not end");
        assert!(
            calls.on_reply(guard.id(), PEER, reply()),
            "its own reply still comes"
        );
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_reopened_call_gets_its_reply_and_new_ids_start_above_it() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (old, _) = calls.open(PEER);
        let recovered = old.id() + 1000;
        let (guard, mut rx) = calls.reopen(recovered, PEER, true);
        assert_eq!(guard.id(), recovered);
        for _ in 0..10 {
            let (new, _) = calls.open(PEER);
            assert!(
                new.id() > recovered,
                "new calls start above a recovered one"
            );
        }
        assert!(calls.on_reply(recovered, PEER, reply()));
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_new_call_never_takes_the_id_of_a_waiting_one() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (first, _) = calls.open(PEER);
        // The counter wraps onto the waiting call's id (as after 2^62 calls).
        calls.next.store(first.id(), Ordering::Relaxed);
        let (second, _) = calls.open(PEER);
        assert_ne!(first.id(), second.id());
    }

    #[test]
    fn ids_are_distinct_and_tables_start_apart() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (a, _) = calls.open(PEER);
        let (b, _) = calls.open(PEER);
        assert_ne!(a.id(), b.id());
        assert!(a.id() < CALL_ID_LIMIT);
        let other = Calls::new(std::time::Duration::from_secs(1));
        let (c, _) = other.open(PEER);
        assert_ne!(
            a.id(),
            c.id(),
            "a restarted endpoint does not reuse call ids"
        );
    }
}
