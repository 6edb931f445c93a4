//! Sending to a peer that answers nothing: after [`Schedule::grace`] of sending to a peer
//! without hearing from it, every datagram to it waits for an exponentially backed-off
//! schedule and is cut to the base size, whatever it carries (tokens, REQSLOTS, probes,
//! challenges, verdicts).
//!
//! The rules, as `docs/wire.md` states them ("Peers that answer nothing"):
//!
//! * A peer is **unanswered** from the first datagram sent to it after it was last heard
//!   from (any datagram accepted from it); hearing from it ends that at once.
//! * A pause of at least [`Schedule::reset`] in what is sent to it starts the count again:
//!   a peer idle for a while and then given new work is served at once.
//! * Unanswered for longer than [`Schedule::grace`], the peer is **deaf**: one datagram of
//!   at most the base size (`Config::mtu.min_datagram_size`) may go at a time, the first at
//!   once, each next one [`Schedule::first`] later, the wait doubling after each up to
//!   [`Schedule::cap`]. What else is owed waits (nothing is dropped).
//!
//! So on a path that fails one way, the deaf side sends the dead direction one small
//! datagram every `max_rto` at most, and recovers within that much of the path healing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::proto::{Config, NodeId, PeerMap};

/// The timing of the schedule, derived from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// Sending unanswered this long makes a peer deaf: `2 * max_rto`.
    pub grace: Duration,
    /// A pause this long in sending starts the count again: `4 * max_rto`.
    pub reset: Duration,
    /// The first wait between datagrams to a deaf peer: `max_rto / 8` (at least `min_rto`).
    pub first: Duration,
    /// The longest wait: `max_rto`.
    pub cap: Duration,
    /// The most entries held (`Limits::max_unanswered_peers`).
    pub max_peers: usize,
}

impl Schedule {
    /// The schedule for `cfg`.
    pub fn new(cfg: &Config) -> Schedule {
        Schedule {
            grace: cfg.timers.max_rto.saturating_mul(2),
            reset: cfg.timers.max_rto.saturating_mul(4),
            first: (cfg.timers.max_rto / 8).max(cfg.timers.min_rto),
            cap: cfg.timers.max_rto,
            max_peers: cfg.limits.max_unanswered_peers.max(1),
        }
    }
}

/// What may go to a peer now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Anything: the peer answers (or was not sent anything lately).
    Open,
    /// The peer is deaf and its turn has come: one datagram of at most the base size.
    Deaf,
    /// The peer is deaf: nothing before this instant.
    Wait(Instant),
}

/// One peer sent to lately.
#[derive(Debug, Clone, Copy)]
struct Unanswered {
    /// When the peer turns deaf unless heard from first (`grace` after the first datagram
    /// sent since it was last heard from); `None` while it answered the last datagram sent.
    deaf_at: Option<Instant>,
    /// When a pause in sending starts the count again (`reset` after the last datagram).
    reset_at: Instant,
    /// Deaf: the earliest instant of the next datagram.
    next: Option<Instant>,
    /// The wait after the next datagram sent while deaf.
    wait: Duration,
    /// The instant the peer waits for in the wake-up queue, if it is there.
    parked: Option<Instant>,
}

/// The peers this node sends to, whether they answer, and the deaf ones waiting for their
/// turn. Soft state: an entry lives while the node sends to its peer now and then, and the
/// table holds at most [`Schedule::max_peers`] entries (every answer to an unauthenticated
/// datagram makes one): past it, expired entries go, then the older half by their last
/// datagram; the map and the wake-up queue give their memory back as they empty.
#[derive(Debug)]
pub(crate) struct Silence {
    schedule: Schedule,
    peers: PeerMap<Unanswered>,
    /// Peers waiting for their turn, by instant (stale entries are skipped).
    parked: BinaryHeap<Reverse<(Instant, NodeId)>>,
    /// Entries beyond which the next new peer prunes those paused past `reset`.
    prune_at: usize,
    /// The last [`tidy`](Self::tidy) that pruned.
    tidied: Option<Instant>,
}

/// Entries kept before the first pruning pass.
const PRUNE_MIN: usize = 64;

impl Silence {
    /// Follows `schedule`.
    pub fn new(schedule: Schedule) -> Silence {
        Silence {
            schedule,
            peers: PeerMap::default(),
            parked: BinaryHeap::new(),
            prune_at: PRUNE_MIN,
            tidied: None,
        }
    }

    /// What may go to `peer` at `now`.
    pub fn gate(&self, now: Instant, peer: NodeId) -> Gate {
        let Some(u) = self.peers.get(&peer) else {
            return Gate::Open;
        };
        match u.deaf_at {
            Some(deaf_at) if now >= deaf_at && now < u.reset_at => match u.next {
                Some(t) if t > now => Gate::Wait(t),
                _ => Gate::Deaf,
            },
            _ => Gate::Open,
        }
    }

    /// A datagram left for `peer` at `now`; `deaf` when [`gate`](Self::gate) said so.
    pub fn on_sent(&mut self, now: Instant, peer: NodeId, deaf: bool) {
        let s = self.schedule;
        if self.peers.len() >= self.prune_at.min(s.max_peers) && !self.peers.contains_key(&peer) {
            self.prune(now);
        }
        let u = self.peers.entry(peer).or_insert(Unanswered {
            deaf_at: None,
            reset_at: now,
            next: None,
            wait: s.first,
            parked: None,
        });
        if u.deaf_at.is_none() || now >= u.reset_at {
            // The first datagram since the peer answered, or after a pause.
            u.deaf_at = Some(now + s.grace);
            u.next = None;
            u.wait = s.first;
        }
        u.reset_at = now + s.reset;
        if deaf {
            u.next = Some(now + u.wait);
            u.wait = u.wait.saturating_mul(2).min(s.cap);
        }
    }

    /// Drops the entries paused past `reset` once in a while (at most every `reset`, and only
    /// when more than a few are held), so that a table grown by a burst is given back when
    /// the node stops sending to those peers: called on timeouts.
    pub fn tidy(&mut self, now: Instant) {
        if self.peers.len() > PRUNE_MIN / 2
            && self.tidied.is_none_or(|t| now >= t + self.schedule.reset)
        {
            self.tidied = Some(now);
            self.prune(now);
        } else if self.peers.is_empty() && self.peers.capacity() > 0 {
            self.peers = PeerMap::default();
            self.parked = BinaryHeap::new();
        }
    }

    /// Drops the entries paused past `reset` and, if the table is still full, the older half
    /// (by the last datagram sent); gives memory back.
    fn prune(&mut self, now: Instant) {
        let max = self.schedule.max_peers;
        self.peers.retain(|_, u| now < u.reset_at);
        if self.peers.len() >= max {
            let mut last: Vec<Instant> = self.peers.values().map(|u| u.reset_at).collect();
            let keep = max / 2;
            // The `keep` most recent survive (ties may keep a few less).
            let cut = last.len() - keep;
            let nth = cut.min(last.len() - 1);
            let (_, &mut threshold, _) = last.select_nth_unstable(nth);
            self.peers.retain(|_, u| u.reset_at > threshold);
        }
        self.prune_at = (self.peers.len() * 2).max(PRUNE_MIN);
        if self.peers.capacity() > 4 * self.peers.len().max(PRUNE_MIN) {
            self.peers.shrink_to(2 * self.peers.len());
        }
        if self.parked.len() > 2 * self.peers.len() + PRUNE_MIN {
            let peers = &self.peers;
            self.parked
                .retain(|Reverse((at, p))| peers.get(p).is_some_and(|u| u.parked == Some(*at)));
            self.parked.shrink_to(2 * self.parked.len());
        }
    }

    /// A datagram from `peer` was accepted. Returns whether it was waiting for its turn (it
    /// should be woken).
    pub fn on_heard(&mut self, peer: NodeId) -> bool {
        let Some(u) = self.peers.get_mut(&peer) else {
            return false;
        };
        u.deaf_at = None;
        u.next = None;
        u.parked.take().is_some()
    }

    /// `peer` waits for its turn at `at`.
    pub fn park(&mut self, peer: NodeId, at: Instant) {
        let Some(u) = self.peers.get_mut(&peer) else {
            return;
        };
        if u.parked != Some(at) {
            u.parked = Some(at);
            self.parked.push(Reverse((at, peer)));
        }
    }

    fn is_live(&self, at: Instant, peer: NodeId) -> bool {
        self.peers.get(&peer).is_some_and(|u| u.parked == Some(at))
    }

    /// The next instant a parked peer's turn comes, if any.
    pub fn next_wake(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, peer))) = self.parked.peek() {
            if self.is_live(at, peer) {
                return Some(at);
            }
            self.parked.pop();
        }
        None
    }

    /// Hands `wake` every parked peer whose turn has come by `now`.
    pub fn release_due(&mut self, now: Instant, mut wake: impl FnMut(NodeId)) {
        while let Some(&Reverse((at, peer))) = self.parked.peek() {
            if at > now {
                break;
            }
            self.parked.pop();
            if self.is_live(at, peer) {
                if let Some(u) = self.peers.get_mut(&peer) {
                    u.parked = None;
                }
                wake(peer);
            }
        }
    }

    /// Whether a parked peer may be due (cheap: no peer waits in the common case).
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Peers sent to lately (the entries held).
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// The entries the map has room for (memory held), and the wake-up queue's length.
    pub fn footprint(&self) -> (usize, usize) {
        (self.peers.capacity(), self.parked.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched() -> Schedule {
        Schedule::new(&Config::default())
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Sends to `p` whenever the gate allows, every `step`, from `from` for `span`. Returns
    /// the instants of the datagrams sent while deaf.
    fn run(
        s: &mut Silence,
        p: NodeId,
        from: Instant,
        span: Duration,
        step: Duration,
    ) -> Vec<Instant> {
        let mut deaf = Vec::new();
        let mut now = from;
        while now < from + span {
            match s.gate(now, p) {
                Gate::Open => s.on_sent(now, p, false),
                Gate::Deaf => {
                    s.on_sent(now, p, true);
                    deaf.push(now);
                }
                Gate::Wait(t) => assert!(t > now),
            }
            now += step;
        }
        deaf
    }

    /// Issue 42, item 8: answers to a flood of distinct ids within one instant (nothing
    /// expires by time) stay within the count, and the memory comes back once they expire.
    #[test]
    fn the_table_is_bounded_by_a_count_and_gives_its_memory_back() {
        let sc = Schedule {
            max_peers: 1000,
            ..sched()
        };
        let t0 = crate::test_time::origin();
        let mut s = Silence::new(sc);
        for i in 0..100_000 {
            let p = NodeId::new(1000 + i).unwrap();
            assert_eq!(s.gate(t0, p), Gate::Open);
            s.on_sent(t0, p, false);
            assert!(s.len() <= 1000);
        }
        // The newest is kept.
        assert!(s.peers.contains_key(&NodeId::new(1000 + 99_999).unwrap()));
        assert!(s.footprint().0 <= 4 * 1000);
        s.tidy(t0 + sc.reset);
        assert_eq!(s.len(), 0);
        s.tidy(t0 + sc.reset * 2);
        assert!(s.footprint().0 <= PRUNE_MIN, "{:?}", s.footprint());
    }

    #[test]
    fn an_unanswered_peer_goes_deaf_after_the_grace_and_backs_off() {
        let sc = sched();
        let t0 = crate::test_time::origin();
        let p = NodeId::from_const(3);
        let mut s = Silence::new(sc);
        let deaf = run(&mut s, p, t0, Duration::from_secs(40), ms(1));
        let first = deaf[0];
        assert!(first >= t0 + sc.grace && first <= t0 + sc.grace + ms(1));
        // The waits double from `first` up to `cap`.
        let waits: Vec<Duration> = deaf.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(waits[0], sc.first);
        assert_eq!(waits[1], sc.first * 2);
        assert!(waits.iter().all(|w| *w <= sc.cap));
        assert_eq!(*waits.last().unwrap(), sc.cap);
        // 10 s to 40 s: at most one datagram per `cap` once there.
        let late = deaf
            .iter()
            .filter(|t| **t >= t0 + Duration::from_secs(10))
            .count();
        assert!(late <= 16, "{late}");
    }

    #[test]
    fn hearing_from_the_peer_opens_the_gate_and_wakes_it() {
        let sc = sched();
        let t0 = crate::test_time::origin();
        let p = NodeId::from_const(3);
        let mut s = Silence::new(sc);
        run(&mut s, p, t0, sc.grace + ms(10), ms(1));
        let now = t0 + sc.grace + ms(10);
        let Gate::Wait(t) = s.gate(now, p) else {
            panic!("deaf peers wait");
        };
        s.park(p, t);
        s.park(p, t);
        assert_eq!(s.next_wake(), Some(t));
        assert!(s.on_heard(p), "parked");
        assert_eq!(s.gate(now, p), Gate::Open);
        assert_eq!(s.next_wake(), None, "the stale entry is skipped");
        assert!(!s.on_heard(p));
    }

    #[test]
    fn a_pause_starts_the_count_again() {
        let sc = sched();
        let t0 = crate::test_time::origin();
        let p = NodeId::from_const(3);
        let mut s = Silence::new(sc);
        s.on_sent(t0, p, false);
        // Sent now and then, never answered, but with pauses of `reset`: never deaf.
        let mut now = t0;
        for _ in 0..10 {
            now += sc.reset;
            assert_eq!(s.gate(now, p), Gate::Open);
            s.on_sent(now, p, false);
        }
        // Sent often: deaf after the grace.
        now += ms(1);
        let deaf = run(&mut s, p, now, sc.grace + ms(2), ms(1));
        assert_eq!(deaf.len(), 1);
    }

    #[test]
    fn parked_peers_are_released_in_order_once() {
        let sc = sched();
        let t0 = crate::test_time::origin();
        let mut s = Silence::new(sc);
        let (p, q) = (NodeId::from_const(3), NodeId::from_const(4));
        for peer in [p, q] {
            s.on_sent(t0, peer, false);
        }
        s.park(q, t0 + ms(5));
        s.park(p, t0 + ms(9));
        let mut woken = Vec::new();
        s.release_due(t0 + ms(6), |x| woken.push(x));
        assert_eq!(woken, [q]);
        assert_eq!(s.next_wake(), Some(t0 + ms(9)));
        s.release_due(t0 + ms(20), |x| woken.push(x));
        assert_eq!(woken, [q, p]);
        assert_eq!(s.next_wake(), None);
    }

    #[test]
    fn entries_of_peers_no_longer_sent_to_are_pruned() {
        let sc = sched();
        let t0 = crate::test_time::origin();
        let mut s = Silence::new(sc);
        for i in 1..=10_000u64 {
            let now = t0 + sc.reset.mul_f64(i as f64 / 100.0);
            s.on_sent(now, NodeId::from_const(i), false);
        }
        assert!(s.len() <= 2 * 100 + PRUNE_MIN, "{}", s.len());
    }
}
