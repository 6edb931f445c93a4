//! The caller's side of request/reply shared by handles and drivers: call ids, and the
//! calls waiting for their reply.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::envelope::Outcome;

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
    /// Calls waiting for their reply, by call id.
    waiting: Mutex<HashMap<u64, oneshot::Sender<ReplyIn>, foldhash::fast::RandomState>>,
}

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

    /// Opens a call: its id, and where its reply will come. The guard closes it.
    pub(crate) fn open(self: &Arc<Self>) -> (CallGuard, oneshot::Receiver<ReplyIn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed) % CALL_ID_LIMIT;
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        (
            CallGuard {
                calls: self.clone(),
                id,
            },
            rx,
        )
    }

    /// The reply to call `id` came: handed to its caller. Returns false when nobody waits
    /// for it (the call ended: its future was dropped, or its deadline passed).
    pub(crate) fn on_reply(&self, id: u64, reply: ReplyIn) -> bool {
        let Some(tx) = self.lock().remove(&id) else {
            return false;
        };
        tx.send(reply).is_ok()
    }

    /// Calls waiting for a reply now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().len()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        HashMap<u64, oneshot::Sender<ReplyIn>, foldhash::fast::RandomState>,
    > {
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

    #[test]
    fn a_reply_reaches_its_open_call_once() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, mut rx) = calls.open();
        assert!(calls.on_reply(guard.id(), reply()));
        assert!(rx.try_recv().is_ok());
        assert!(
            !calls.on_reply(guard.id(), reply()),
            "a second reply finds no call"
        );
    }

    #[test]
    fn a_dropped_call_discards_its_reply() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, _rx) = calls.open();
        let id = guard.id();
        drop(guard);
        assert_eq!(calls.waiting(), 0);
        assert!(!calls.on_reply(id, reply()));
    }

    #[test]
    fn ids_are_distinct_and_tables_start_apart() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (a, _) = calls.open();
        let (b, _) = calls.open();
        assert_ne!(a.id(), b.id());
        assert!(a.id() < CALL_ID_LIMIT);
        let other = Calls::new(std::time::Duration::from_secs(1));
        let (c, _) = other.open();
        assert_ne!(
            a.id(),
            c.id(),
            "a restarted endpoint does not reuse call ids"
        );
    }
}
