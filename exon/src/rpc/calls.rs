//! The caller's side of request/reply shared by handles and drivers: call ids, and the
//! calls waiting for their reply.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::endpoint::shards::steering::shard_of;
use crate::envelope::Outcome;
use crate::proto::{DeliveryId, MsgId, NodeId};

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
    /// Durable mode: the calls with a held request that ended, for the driver shard that
    /// owns the node called (its node holds the request) to release their requests (and
    /// take their replies): one list per shard.
    released: Mutex<Vec<Vec<Ended>>>,
    /// Notified when a shard's list in `released` gets one.
    released_notify: Box<[tokio::sync::Notify]>,
}

/// An open call.
#[derive(Debug)]
struct Waiter {
    /// The node called.
    to: NodeId,
    /// Where its reply goes (`None` once it came).
    tx: Option<oneshot::Sender<ReplyIn>>,
    /// Durable mode: its request, held in the journal (`Node::send_held`) until the call
    /// ends: the core's id of the message.
    held: Option<MsgId>,
    /// Durable mode: its reply, handed to the call and taken when the call ends.
    reply: Option<DeliveryId>,
}

/// Open calls, by call id.
type Waiting = HashMap<u64, Waiter, foldhash::fast::RandomState>;

/// A call with a held request that ended: its request to release, with the take of its
/// reply if it got one (`Node::take_reply`), else alone (`Node::release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The core's id of the request.
    pub(crate) request: MsgId,
    /// The reply's delivery, not taken yet.
    pub(crate) reply: Option<DeliveryId>,
}

/// What the driver does with a reply's delivery ([`Calls::on_reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Takes it now, releasing this held request with it, if any.
    Now(Option<MsgId>),
    /// Leaves it untaken: its call has a held request and got the reply; both go when the
    /// call ends ([`Calls::take_ended`]), so that a crash before then hands the reply out
    /// again to the call recovered after the restart.
    AtEnd,
}

/// What became of a reply ([`Calls::on_reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replied {
    /// It reached its call.
    pub(crate) handed: bool,
    /// When its delivery is taken.
    pub(crate) take: Take,
}

/// Call ids stay below this (they travel as varints, at most 8 bytes).
const CALL_ID_LIMIT: u64 = 1 << 62;

impl Calls {
    /// A table whose call ids start at a random point: a reply to a call made before a
    /// restart of this endpoint (it can come: exon delivers it to the new incarnation)
    /// finds no call with its id, rather than a new call that reused it.
    #[cfg(test)]
    pub(crate) fn new(deadline: std::time::Duration) -> Arc<Calls> {
        Self::sharded(deadline, 1)
    }

    /// As [`new`](Self::new), for an endpoint of `shards` driver shards (at least one).
    pub(crate) fn sharded(deadline: std::time::Duration, shards: usize) -> Arc<Calls> {
        let shards = shards.max(1);
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
            released: Mutex::new(vec![Vec::new(); shards]),
            released_notify: (0..shards).map(|_| tokio::sync::Notify::new()).collect(),
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
        waiting.insert(
            id,
            Waiter {
                to,
                tx: Some(tx),
                held: None,
                reply: None,
            },
        );
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
    /// the call is not in the table and its reply finds none), `held` in the journal
    /// under that id. New calls take ids above it.
    pub(crate) fn reopen(
        self: &Arc<Self>,
        id: u64,
        to: NodeId,
        register: bool,
        held: Option<MsgId>,
    ) -> (CallGuard, oneshot::Receiver<ReplyIn>) {
        let id = id % CALL_ID_LIMIT;
        self.next.fetch_max(id + 1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if register {
            let w = Waiter {
                to,
                tx: Some(tx),
                held,
                reply: None,
            };
            self.lock().insert(id, w);
        }
        (
            CallGuard {
                calls: self.clone(),
                id,
            },
            rx,
        )
    }

    /// Durable mode: call `id`'s request is held in the journal as message `msg`
    /// (`Node::send_held`), until the call ends. Returns false when the call has ended
    /// already: the caller releases `msg` itself.
    pub(crate) fn hold(&self, id: u64, msg: MsgId) -> bool {
        match self.lock().get_mut(&id) {
            Some(w) => {
                w.held = Some(msg);
                true
            }
            None => false,
        }
    }

    /// A reply to call `id` came from node `from` in delivery `delivery`: handed to its
    /// caller if `from` is the node called. Not handed when nobody waits for it (the call
    /// ended: its future was dropped, or its deadline passed; or it got its reply), nor
    /// when `from` is another node: call ids are sequential, so a peer that saw this
    /// endpoint's calls to it can guess the ids of its calls to others, and its reply must
    /// not end them. A call with a held request keeps the reply's delivery, to take it when
    /// the call ends.
    pub(crate) fn on_reply(
        &self,
        id: u64,
        from: NodeId,
        reply: ReplyIn,
        delivery: DeliveryId,
    ) -> Replied {
        let mut waiting = self.lock();
        let Some(w) = waiting.get_mut(&id).filter(|w| w.to == from) else {
            return Replied {
                handed: false,
                take: Take::Now(None),
            };
        };
        let Some(tx) = w.tx.take() else {
            // A second reply: the call has its answer.
            return Replied {
                handed: false,
                take: Take::Now(None),
            };
        };
        // Sent under the lock: the call's end (`close`) sees the reply kept.
        let handed = tx.send(reply).is_ok();
        if handed && w.held.is_some() {
            w.reply = Some(delivery);
            return Replied {
                handed,
                take: Take::AtEnd,
            };
        }
        let held = w.held;
        waiting.remove(&id);
        Replied {
            handed,
            take: Take::Now(held),
        }
    }

    /// Durable mode: the calls with a held request that ended since the last call, of the
    /// nodes that driver shard `shard` owns.
    pub(crate) fn take_ended(&self, shard: usize) -> Vec<Ended> {
        let mut v = self.released.lock().unwrap_or_else(|e| e.into_inner());
        v.get_mut(shard).map(std::mem::take).unwrap_or_default()
    }

    /// Completes when a call with a held request to a node driver shard `shard` owns ended.
    pub(crate) fn ended_notified(&self, shard: usize) -> tokio::sync::futures::Notified<'_> {
        let i = shard.min(self.released_notify.len() - 1);
        self.released_notify[i].notified()
    }

    /// Call `id` ended: it leaves the table, and its held request, if any, is to release
    /// (with its reply's take).
    fn close(&self, id: u64) {
        let Some(w) = self.lock().remove(&id) else {
            return;
        };
        if let Some(request) = w.held {
            let ended = Ended {
                request,
                reply: w.reply,
            };
            let shard = shard_of(w.to, self.released_notify.len());
            let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
            released[shard].push(ended);
            drop(released);
            self.released_notify[shard].notify_one();
        }
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
        self.calls.close(self.id);
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

    fn d(slot: u64) -> DeliveryId {
        DeliveryId::for_test(PEER, slot)
    }

    #[test]
    fn a_reply_reaches_its_open_call_once() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, mut rx) = calls.open(PEER);
        assert!(calls.on_reply(guard.id(), PEER, reply(), d(1)).handed);
        assert!(rx.try_recv().is_ok());
        assert!(
            !calls.on_reply(guard.id(), PEER, reply(), d(1)).handed,
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
        assert!(!calls.on_reply(id, PEER, reply(), d(1)).handed);
    }

    #[test]
    fn a_reply_from_another_node_leaves_the_call_waiting() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, mut rx) = calls.open(PEER);
        let other = NodeId::from_const(8);
        assert!(
            !calls.on_reply(guard.id(), other, reply(), d(1)).handed,
            "not the node called"
        );
        assert!(rx.try_recv().is_err(), "the call did not end");
        assert!(
            calls.on_reply(guard.id(), PEER, reply(), d(1)).handed,
            "its own reply still comes"
        );
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_reopened_call_gets_its_reply_and_new_ids_start_above_it() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (old, _) = calls.open(PEER);
        let recovered = old.id() + 1000;
        let (guard, mut rx) = calls.reopen(recovered, PEER, true, None);
        assert_eq!(guard.id(), recovered);
        for _ in 0..10 {
            let (new, _) = calls.open(PEER);
            assert!(
                new.id() > recovered,
                "new calls start above a recovered one"
            );
        }
        assert!(calls.on_reply(recovered, PEER, reply(), d(1)).handed);
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_call_ended_without_its_reply_releases_its_held_request_once() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, _rx) = calls.open(PEER);
        let id = guard.id();
        assert!(calls.hold(id, MsgId(5)));
        assert!(
            calls.take_ended(0).is_empty(),
            "held while the call is open"
        );
        drop(guard);
        let ended = Ended {
            request: MsgId(5),
            reply: None,
        };
        assert_eq!(calls.take_ended(0), [ended]);
        assert!(calls.take_ended(0).is_empty());
        // A request held after its call ended: refused, for the driver to release.
        assert!(!calls.hold(id, MsgId(6)));
        // A recovered call, reopened with its held request, releases it the same way.
        let (guard, _rx) = calls.reopen(id + 7, PEER, true, Some(MsgId(7)));
        drop(guard);
        assert_eq!(calls.take_ended(0)[0].request, MsgId(7));
    }

    /// Each shard's node holds the requests to the peers it owns: an ended call's release
    /// goes to that shard only (another shard's node could hold another message under the
    /// same id: durable ids are drawn per shard).
    #[test]
    fn an_ended_call_is_released_by_the_shard_that_owns_its_peer() {
        let calls = Calls::sharded(std::time::Duration::from_secs(1), 2);
        let peers: Vec<NodeId> = (1..40).map(NodeId::from_const).collect();
        let owner = |p: NodeId| shard_of(p, 2);
        let (a, b) = (
            *peers.iter().find(|&&p| owner(p) == 0).unwrap(),
            *peers.iter().find(|&&p| owner(p) == 1).unwrap(),
        );
        for (peer, msg) in [(a, 1), (b, 2)] {
            let (guard, _rx) = calls.open(peer);
            assert!(calls.hold(guard.id(), MsgId(msg)));
        }
        let ended = |m| Ended {
            request: MsgId(m),
            reply: None,
        };
        assert_eq!(calls.take_ended(1), [ended(2)]);
        assert_eq!(calls.take_ended(0), [ended(1)]);
        assert!(calls.take_ended(0).is_empty() && calls.take_ended(1).is_empty());
    }

    #[test]
    fn a_held_call_takes_its_reply_when_it_ends() {
        let calls = Calls::new(std::time::Duration::from_secs(1));
        let (guard, mut rx) = calls.open(PEER);
        assert!(calls.hold(guard.id(), MsgId(9)));
        let other = NodeId::from_const(8);
        let refused = Replied {
            handed: false,
            take: Take::Now(None),
        };
        assert_eq!(calls.on_reply(guard.id(), other, reply(), d(1)), refused);
        let kept = Replied {
            handed: true,
            take: Take::AtEnd,
        };
        assert_eq!(calls.on_reply(guard.id(), PEER, reply(), d(2)), kept);
        assert!(rx.try_recv().is_ok());
        assert_eq!(
            calls.on_reply(guard.id(), PEER, reply(), d(3)),
            refused,
            "a second reply is not handed, and taken at once"
        );
        assert!(calls.take_ended(0).is_empty(), "taken when the call ends");
        drop(guard);
        let ended = Ended {
            request: MsgId(9),
            reply: Some(d(2)),
        };
        assert_eq!(calls.take_ended(0), [ended]);
        // A reply whose call's future is gone (its receiver dropped, its guard not yet):
        // not handed, and taken at once with the held request's release.
        let (guard, rx) = calls.open(PEER);
        assert!(calls.hold(guard.id(), MsgId(10)));
        drop(rx);
        let gone = Replied {
            handed: false,
            take: Take::Now(Some(MsgId(10))),
        };
        assert_eq!(calls.on_reply(guard.id(), PEER, reply(), d(4)), gone);
        drop(guard);
        assert!(calls.take_ended(0).is_empty());
        // A call with no held request (not durable) has its reply taken at once.
        let (guard, _rx) = calls.open(PEER);
        let plain = Replied {
            handed: true,
            take: Take::Now(None),
        };
        assert_eq!(calls.on_reply(guard.id(), PEER, reply(), d(5)), plain);
        assert_eq!(calls.waiting(), 0);
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
