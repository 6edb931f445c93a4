//! The simulator's event queue: what happens at which point of virtual time, in a
//! deterministic order (time, then the order of scheduling).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use bytes::Bytes;

/// What happens at one point of virtual time.
#[derive(Debug)]
pub(crate) enum What {
    Datagram {
        to: u32,
        data: Bytes,
    },
    Timer(u32),
    Pump(u32),
    /// The application of a node takes what was delivered into its buffer.
    Take(u32),
    /// The deadline of message `id` (to `to`) of node `node` in its incarnation `boot`.
    GiveUp {
        node: u32,
        to: u32,
        id: u64,
        boot: u32,
        /// The message's sequence number when the deadline may outlive a restart (durable
        /// mode: a recovered message keeps its id and is given up by the restarted node);
        /// `u64::MAX` otherwise.
        seq: u64,
    },
    /// RPC: the deadline of call `call` of node `node` in its incarnation `boot`.
    CallDeadline {
        node: u32,
        call: u64,
        boot: u32,
    },
    Fault(u32),
    /// Durable mode: a crash of node `node`, down for `down_us` microseconds, that the run
    /// added (after a message was given up).
    Crash {
        node: u32,
        down_us: u32,
    },
    Revive {
        node: u32,
        keep_clock: bool,
    },
    /// The sync of node `node`'s clock store of `hw` completed (if the node has not
    /// crashed since: `boot` is its restart count then).
    Synced {
        node: u32,
        boot: u32,
        hw: u64,
    },
    /// Durable mode: node `node` commits its journal (if it has not crashed since: `boot`
    /// is its restart count then).
    Commit {
        node: u32,
        boot: u32,
    },
    Hostile(u32),
    Adversary(u32),
    /// Channels: node `node` looks at its channels holding messages for runs that stalled
    /// (if it has not crashed since: `boot` is its restart count then).
    ChanLook {
        node: u32,
        boot: u32,
    },
    HealAll,
}

/// An event: its time (nanoseconds of virtual time), its place in the order of scheduling,
/// and what happens.
#[derive(Debug)]
pub(crate) struct Ev {
    pub(crate) t: u64,
    seq: u64,
    pub(crate) what: What,
}

impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    /// Reversed, so that the `BinaryHeap` pops the earliest event first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

/// The events to come, earliest first (in the order they were scheduled at equal times).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    heap: BinaryHeap<Ev>,
    seq: u64,
}

impl Queue {
    /// Schedules `what` at `t`.
    pub(crate) fn push(&mut self, t: u64, what: What) {
        self.seq += 1;
        self.heap.push(Ev {
            t,
            seq: self.seq,
            what,
        });
    }

    /// Takes the earliest event.
    pub(crate) fn pop(&mut self) -> Option<Ev> {
        self.heap.pop()
    }

    /// Puts back an event just taken (unprocessed).
    pub(crate) fn put_back(&mut self, ev: Ev) {
        self.heap.push(ev);
    }

    /// The events still to come, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Ev> {
        self.heap.iter()
    }
}

/// `d` in nanoseconds (saturating).
pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}
