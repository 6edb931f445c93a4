//! The discrete-event simulator: N sans-IO nodes in virtual time, a link model between every
//! ordered pair, workloads, faults, and the oracle watching every delivery.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::crypto::insecure_test_security;
use exon::proto::{Abandoned, DeliveryId, Event, Frame, MsgId, Node, NodeId, Security};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::deafness::DeafWatch;
use crate::faults::FaultKind;
use crate::link::{Decision, Link, LinkState};
use crate::oracle::{Oracle, ViolationKind};
use crate::report::Report;
use crate::scenario::{Attack, Scenario};
use crate::workload::{write_payload, Kind, MsgKey};

/// What happens at one point of virtual time.
#[derive(Debug)]
enum What {
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
    },
    Fault(u32),
    Revive {
        node: u32,
        keep_clock: bool,
    },
    Hostile(u32),
    Adversary(u32),
    HealAll,
}

#[derive(Debug)]
struct Ev {
    t: u64,
    seq: u64,
    what: What,
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

/// One simulated host: the node (absent while crashed) and its application.
struct Host {
    node: Option<Node>,
    /// The clock high-water mark confirmed stored.
    stored_hw: u64,
    /// Simulation sequence number of each `MsgId` of the current node incarnation.
    msg_keys: Vec<u64>,
    /// Messages still to submit on the workload's initiative.
    quota: u64,
    /// RPC replies owed: (requester, request).
    replies: Vec<usize>,
    timer_at: Option<u64>,
    pump_scheduled: bool,
    restarts: u32,
    /// The clock this incarnation started from: every receiver incarnation (`rck`) it
    /// creates is at least this.
    boot_clock: u64,
    /// Deliveries in the application's buffer, not yet taken: (delivery, source, payload).
    inbox: Vec<(DeliveryId, usize, Bytes)>,
    take_scheduled: bool,
}

/// The simulator. Build it with [`Sim::new`], advance with [`Sim::step`], and end with
/// [`Sim::finish`] (or do both with [`Sim::run`]).
pub struct Sim {
    sc: Scenario,
    base: Instant,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Ev>,
    hosts: Vec<Host>,
    links: Vec<Link>,
    held: Vec<Vec<Bytes>>,
    oracle: Oracle,
    /// What nodes send to peers they do not hear from.
    deaf: DeafWatch,
    rng: SmallRng,
    /// Virtual time of the last submission or scheduled fault.
    last_activity: u64,
    events: u64,
    /// Datagrams addressed to a crashed node or to no node.
    pub dropped_at_host: u64,
    buf: Vec<u8>,
    out: Vec<(usize, usize, usize)>,
    app_events: Vec<Event>,
    plan: Vec<usize>,
    stopped: bool,
    /// Datagrams the adversary captured: (destination, bytes).
    captured: Vec<(usize, Bytes)>,
    /// TOKENs the adversary saw in plaintext: (sender, receiver, slot, incarnation).
    seen_tokens: Vec<(usize, usize, u64, u64)>,
    /// Incarnations it saw acknowledged: (sender, receiver, incarnation).
    seen_acked: Vec<(usize, usize, u64)>,
}

/// Observations the adversary keeps (the latest).
const SEEN_WINDOW: usize = 256;

/// Keeps the latest `SEEN_WINDOW` observations.
fn remember<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if v.contains(&x) {
        return;
    }
    if v.len() >= SEEN_WINDOW {
        v.remove(0);
    }
    v.push(x);
}

/// Datagrams the adversary keeps for replay.
const CAPTURE_WINDOW: usize = 4096;

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn node_id(i: usize) -> NodeId {
    NodeId::from_const(i as u64 + 1)
}

impl Sim {
    /// Sets up the scenario at virtual time zero.
    ///
    /// # Panics
    /// If the scenario is invalid (see [`Scenario::validate`]).
    pub fn new(sc: Scenario) -> Sim {
        if let Err(e) = sc.validate() {
            panic!("invalid scenario: {e}");
        }
        let n = sc.nodes;
        let mut seeder = SmallRng::seed_from_u64(sc.seed);
        let links = (0..n * n)
            .map(|_| Link::new(sc.link.clone(), rand::Rng::gen(&mut seeder)))
            .collect();
        let mut sim = Sim {
            base: Instant::now(),
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            hosts: Vec::with_capacity(n),
            links,
            held: vec![Vec::new(); n * n],
            oracle: Oracle::new(n),
            deaf: DeafWatch::new(n, sc.config.max_rto),
            rng: SmallRng::seed_from_u64(sc.seed ^ 0x9e37_79b9_7f4a_7c15),
            last_activity: 0,
            events: 0,
            dropped_at_host: 0,
            buf: Vec::new(),
            out: Vec::new(),
            app_events: Vec::new(),
            plan: Vec::new(),
            stopped: false,
            captured: Vec::new(),
            seen_tokens: Vec::new(),
            seen_acked: Vec::new(),
            sc,
        };
        for i in 0..n {
            let quota = sim.sc.workload.quota(i, n);
            sim.hosts.push(Host {
                node: None,
                stored_hw: 0,
                msg_keys: Vec::new(),
                quota,
                replies: Vec::new(),
                timer_at: None,
                pump_scheduled: false,
                restarts: 0,
                boot_clock: 0,
                inbox: Vec::new(),
                take_scheduled: false,
            });
            sim.boot(i, 0);
        }
        for (k, f) in sim.sc.faults.clone().iter().enumerate() {
            let t = nanos(f.at);
            sim.last_activity = sim.last_activity.max(t);
            sim.push(t, What::Fault(k as u32));
        }
        if !sim.sc.faults.is_empty() {
            sim.push(sim.last_activity + 1, What::HealAll);
        }
        if let Some(a) = sim.sc.adversary {
            sim.push(0, What::Adversary(a.actions));
        }
        if let Some(h) = sim.sc.hostile {
            sim.push(0, What::Hostile(h.volleys));
        }
        sim
    }

    fn push(&mut self, t: u64, what: What) {
        self.seq += 1;
        self.heap.push(Ev {
            t,
            seq: self.seq,
            what,
        });
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    /// The oracle (for tests).
    pub fn oracle(&self) -> &Oracle {
        &self.oracle
    }

    /// Node `i`, unless it is crashed.
    pub fn node(&self, i: usize) -> Option<&Node> {
        self.hosts[i].node.as_ref()
    }

    /// Links, indexed `from * nodes + to`.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Virtual time elapsed.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now)
    }

    /// Events processed.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// Creates node `i` from `clock` and starts its application.
    fn boot(&mut self, i: usize, clock: u64) {
        let security = if self.sc.plaintext {
            Security::InsecurePlaintext
        } else {
            let all = (0..self.sc.nodes).map(node_id);
            insecure_test_security(node_id(i), all)
        };
        let mut node =
            Node::new(node_id(i), security, self.sc.config.clone(), clock).expect("valid config");
        if let Some(hook) = &self.sc.node_hook {
            hook(i, &mut node);
        }
        let h = &mut self.hosts[i];
        h.node = Some(node);
        h.stored_hw = clock;
        h.boot_clock = clock;
        h.msg_keys.clear();
        h.timer_at = None;
        self.drain(i);
        self.schedule_pump(i, self.now);
    }

    fn schedule_pump(&mut self, i: usize, t: u64) {
        let h = &mut self.hosts[i];
        if !h.pump_scheduled && (h.quota > 0 || !h.replies.is_empty()) {
            h.pump_scheduled = true;
            self.push(t, What::Pump(i as u32));
        }
    }

    /// True once the run is over: nothing left to happen, or the settle time or event limit
    /// passed.
    pub fn is_done(&self) -> bool {
        self.stopped
    }

    /// Processes one event. Returns false when the run is over.
    pub fn step(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        let Some(ev) = self.heap.pop() else {
            self.stopped = true;
            return false;
        };
        let traffic_left = self
            .hosts
            .iter()
            .any(|h| h.quota > 0 || !h.replies.is_empty());
        if self.events >= self.sc.max_events
            || (!traffic_left && ev.t > self.last_activity + nanos(self.sc.settle))
        {
            self.heap.push(ev);
            self.stopped = true;
            return false;
        }
        self.events += 1;
        self.now = self.now.max(ev.t);
        match ev.what {
            What::Datagram { to, data } => self.on_datagram(to as usize, data),
            What::Timer(i) => self.on_timer(i as usize, ev.t),
            What::Pump(i) => self.pump(i as usize),
            What::Take(i) => self.take(i as usize),
            What::GiveUp { node, to, id, boot } => {
                self.give_up(node as usize, to as usize, MsgId(id), boot)
            }
            What::Fault(k) => self.fault(k as usize),
            What::Revive { node, keep_clock } => {
                let i = node as usize;
                let clock = if keep_clock {
                    self.hosts[i].stored_hw
                } else {
                    0
                };
                self.boot(i, clock);
            }
            What::Hostile(left) => self.hostile(left),
            What::Adversary(left) => self.adversary(left),
            What::HealAll => {
                for l in 0..self.links.len() {
                    self.heal_link(l);
                }
            }
        }
        true
    }

    fn on_datagram(&mut self, to: usize, data: Bytes) {
        let now = self.instant();
        let Some(node) = self.hosts[to].node.as_mut() else {
            self.dropped_at_host += 1;
            return;
        };
        // The node heard from the source when it acted on the datagram's frames (a frame it
        // refused does not make the rest unheard), as its deaf schedule counts it.
        let src = exon::proto::Header::decode_prefix(&data)
            .ok()
            .map(|(h, _)| h.src);
        let frames_before = node.stats().frames_in.total();
        node.handle_datagram(now, data);
        if node.stats().frames_in.total() > frames_before {
            if let Some(from) = src.and_then(|s| (s.get() as usize).checked_sub(1)) {
                self.deaf.on_heard(to, from);
            }
        }
        self.drain(to);
    }

    fn on_timer(&mut self, i: usize, t: u64) {
        if self.hosts[i].timer_at != Some(t) {
            return; // superseded
        }
        self.hosts[i].timer_at = None;
        let now = self.instant();
        let Some(node) = self.hosts[i].node.as_mut() else {
            return;
        };
        if node.poll_timeout().is_some_and(|d| d <= now) {
            node.handle_timeout(now);
        }
        self.drain(i);
    }

    /// Drains every output of node `i`: clock stores, datagrams, events; then re-arms its
    /// timer and checks its bounds.
    fn drain(&mut self, i: usize) {
        let now = self.instant();
        let host = &mut self.hosts[i];
        let Some(node) = host.node.as_mut() else {
            return;
        };
        loop {
            if let Some(hw) = node.poll_clock_store() {
                host.stored_hw = hw;
                node.handle_clock_stored(now, hw);
                continue;
            }
            let off = self.buf.len();
            match node.poll_transmit(now, &mut self.buf) {
                Some(t) => self.out.push((t.destination.get() as usize, off, t.size)),
                None => break,
            }
        }
        while let Some(e) = node.poll_event() {
            self.app_events.push(e);
        }
        if let Some(t) = node.poll_timeout() {
            let t = nanos(t.saturating_duration_since(self.base)).max(self.now);
            if host.timer_at.is_none_or(|old| t < old) {
                host.timer_at = Some(t);
                self.seq += 1;
                self.heap.push(Ev {
                    t,
                    seq: self.seq,
                    what: What::Timer(i as u32),
                });
            }
        }
        self.check_bounds(i);
        if !self.out.is_empty() {
            // Each datagram gets its own buffer: a datagram held on a link (a late duplicate)
            // keeps only its own bytes alive, not every datagram drained with it.
            let mut out = std::mem::take(&mut self.out);
            for &(dst, off, size) in &out {
                let data = Bytes::copy_from_slice(&self.buf[off..off + size]);
                if dst == 0 || dst > self.hosts.len() {
                    self.dropped_at_host += 1;
                } else {
                    if let Some(f) = self.deaf.on_sent(i, dst - 1, size, self.now) {
                        let what = format!(
                            "node{i} sent node{} {} datagrams, {} bytes within {:?}, silent for {:?}",
                            f.to,
                            f.datagrams,
                            f.bytes,
                            crate::deafness::WINDOW,
                            f.silent_for
                        );
                        self.oracle
                            .violate(ViolationKind::DeafFlood, None, self.now, what);
                    }
                    self.route(i, dst - 1, data);
                }
            }
            out.clear();
            self.out = out;
            self.buf.clear();
        } else {
            self.buf.clear();
        }
        if !self.app_events.is_empty() {
            let mut evs = std::mem::take(&mut self.app_events);
            for e in evs.drain(..) {
                self.app_event(i, e);
            }
            self.app_events = evs;
        }
    }

    fn app_event(&mut self, i: usize, e: Event) {
        match e {
            Event::Delivered { from, payload, id } => {
                let from = from.get() as usize - 1;
                if let Some((key, _)) = self.oracle.on_delivered(i, from, &payload, self.now) {
                    if !crate::workload::is_whole(&payload, key, self.sc.workload.len_of(key)) {
                        self.oracle.violate(
                            ViolationKind::Corrupted,
                            Some(key),
                            self.now,
                            format!("node{i} delivered {} bytes, not the message", payload.len()),
                        );
                    }
                    self.hosts[i].inbox.push((id, from, payload));
                    if self.sc.take_delay.is_zero() {
                        self.take(i);
                    } else if !self.hosts[i].take_scheduled {
                        self.hosts[i].take_scheduled = true;
                        let t = self.now + nanos(self.sc.take_delay);
                        self.last_activity = self.last_activity.max(t);
                        self.push(t, What::Take(i as u32));
                    }
                }
            }
            Event::Acknowledged { to, id } => {
                let seq = self.hosts[i].msg_keys[id.0 as usize];
                let key = MsgKey {
                    sender: i as u32,
                    seq,
                };
                let _ = to;
                self.oracle.on_acked(key, self.now);
            }
            Event::InDoubt { id, .. } => {
                let seq = self.hosts[i].msg_keys[id.0 as usize];
                let key = MsgKey {
                    sender: i as u32,
                    seq,
                };
                self.oracle.on_in_doubt(key, self.now);
            }
            Event::NotDelivered { id, .. } => {
                let seq = self.hosts[i].msg_keys[id.0 as usize];
                let key = MsgKey {
                    sender: i as u32,
                    seq,
                };
                self.oracle.on_abandoned(key, true, self.now);
            }
            _ => {}
        }
    }

    /// The application of node `i` takes every message in its buffer: the oracle sees the
    /// hand-over, the node acknowledges them.
    fn take(&mut self, i: usize) {
        self.hosts[i].take_scheduled = false;
        let inbox = std::mem::take(&mut self.hosts[i].inbox);
        if inbox.is_empty() {
            return;
        }
        let now = self.instant();
        for (id, from, payload) in inbox {
            if let Some(node) = self.hosts[i].node.as_mut() {
                node.handle_taken(now, id);
            }
            if let Some((_, Kind::Request)) = self.oracle.on_taken(i, &payload, self.now) {
                self.hosts[i].replies.push(from);
                self.schedule_pump(i, self.now);
            }
        }
        self.drain(i);
    }

    /// Message `id` of node `i` reached its deadline: the node gives it up (if it is still
    /// the incarnation that sent it) and the oracle checks the verdict.
    fn give_up(&mut self, i: usize, to: usize, id: MsgId, boot: u32) {
        if self.hosts[i].restarts != boot {
            return;
        }
        let now = self.instant();
        let Some(node) = self.hosts[i].node.as_mut() else {
            return;
        };
        let Some(verdict) = node.abandon(now, node_id(to), id) else {
            return; // settled already
        };
        let key = MsgKey {
            sender: i as u32,
            seq: self.hosts[i].msg_keys[id.0 as usize],
        };
        self.oracle
            .on_abandoned(key, verdict == Abandoned::NotDelivered, self.now);
        self.drain(i);
    }

    /// Puts a datagram on the link `from -> to`.
    fn route(&mut self, from: usize, to: usize, data: Bytes) {
        if self.sc.adversary.is_some() {
            // The on-path attacker keeps a bounded window of what it saw.
            if self.captured.len() >= CAPTURE_WINDOW {
                let k = self.rng.gen_range(0..self.captured.len());
                self.captured.swap_remove(k);
            }
            self.captured.push((to, data.clone()));
            self.observe(to, &data);
        }
        let l = from * self.hosts.len() + to;
        let now = self.instant();
        match self.links[l].on_datagram(now, data.len()) {
            Decision::Drop(_) => {}
            Decision::Hold => self.held[l].push(data),
            Decision::Deliver { at, copy } => {
                if let Some(c) = copy {
                    let t = nanos(c - self.base);
                    self.push(
                        t,
                        What::Datagram {
                            to: to as u32,
                            data: data.clone(),
                        },
                    );
                }
                let t = nanos(at - self.base);
                self.push(
                    t,
                    What::Datagram {
                        to: to as u32,
                        data,
                    },
                );
            }
        }
    }

    /// The application of node `i` submits what it owes and what its quota allows.
    fn pump(&mut self, i: usize) {
        self.hosts[i].pump_scheduled = false;
        let n = self.hosts.len();
        let wl = self.sc.workload.clone();
        let Some(node) = self.hosts[i].node.as_ref() else {
            return; // resumed by the restart
        };
        // Plan destinations: owed replies first, then new messages.
        self.plan.clear();
        let mut kinds = 0;
        for &to in self.hosts[i].replies.iter().take(wl.burst) {
            if node.pending_to(node_id(to)) >= wl.max_pending {
                break;
            }
            self.plan.push(to);
            kinds += 1;
        }
        let quota = self.hosts[i].quota.min((wl.burst - self.plan.len()) as u64);
        for _ in 0..quota {
            let to = wl.pick(i, n, &mut self.rng);
            if node.pending_to(node_id(to)) >= wl.max_pending {
                break;
            }
            self.plan.push(to);
        }
        if !self.plan.is_empty() {
            let first = self.oracle.next_seq(i);
            let now = self.instant();
            let plan = std::mem::take(&mut self.plan);
            let mut sent = 0;
            for (j, &to) in plan.iter().enumerate() {
                // One allocation per message: a queued or unacknowledged message keeps only
                // its own payload alive, never a buffer shared with the rest of its burst.
                let kind = if j < kinds { Kind::Reply } else { wl.kind() };
                let key = MsgKey {
                    sender: i as u32,
                    seq: first + j as u64,
                };
                let len = wl.len_of(key);
                let mut p = Vec::with_capacity(len);
                write_payload(&mut p, key, kind, len);
                let p = Bytes::from(p);
                let Some(node) = self.hosts[i].node.as_mut() else {
                    break;
                };
                match node.send(now, node_id(to), p) {
                    Ok(id) => {
                        let key = self.oracle.on_submit(i, to, self.now);
                        debug_assert_eq!(id.0 as usize, self.hosts[i].msg_keys.len());
                        self.hosts[i].msg_keys.push(key.seq);
                        sent += 1;
                        if let Some(d) = self.sc.deadline {
                            let what = What::GiveUp {
                                node: i as u32,
                                to: to as u32,
                                id: id.0,
                                boot: self.hosts[i].restarts,
                            };
                            self.push(self.now + nanos(d), what);
                        }
                    }
                    Err(_) => break,
                }
            }
            let replies = sent.min(kinds);
            self.hosts[i].replies.drain(..replies);
            self.hosts[i].quota -= (sent - replies) as u64;
            self.plan = plan;
            if sent > 0 {
                self.last_activity = self.now;
            }
            self.drain(i);
        }
        self.schedule_pump(i, self.now + nanos(wl.interval));
    }

    fn fault(&mut self, k: usize) {
        let n = self.hosts.len();
        match self.sc.faults[k].kind {
            FaultKind::Partition { a, b, one_way } => {
                self.links[a * n + b].set_state(LinkState::Down);
                if !one_way {
                    self.links[b * n + a].set_state(LinkState::Down);
                }
            }
            FaultKind::Hold { a, b } => {
                self.links[a * n + b].set_state(LinkState::Held);
                self.links[b * n + a].set_state(LinkState::Held);
            }
            FaultKind::Heal { a, b, one_way } => {
                self.heal_link(a * n + b);
                if !one_way {
                    self.heal_link(b * n + a);
                }
            }
            FaultKind::Mtu { a, b, mtu } => {
                for l in [a * n + b, b * n + a] {
                    let mut c = self.links[l].config().clone();
                    c.mtu = mtu;
                    self.links[l].set_config(c);
                }
            }
            FaultKind::Restart {
                node,
                down,
                keep_clock,
            } => {
                let h = &mut self.hosts[node];
                if h.node.take().is_some() {
                    h.restarts += 1;
                    h.replies.clear();
                    // The application crashed with these messages in its buffer.
                    h.inbox.clear();
                    h.timer_at = None;
                    self.oracle.on_restart(node);
                    self.deaf.on_restart(node);
                    let t = self.now + nanos(down);
                    self.last_activity = self.last_activity.max(t);
                    self.push(
                        t,
                        What::Revive {
                            node: node as u32,
                            keep_clock,
                        },
                    );
                }
            }
        }
    }

    fn heal_link(&mut self, l: usize) {
        self.links[l].set_state(LinkState::Up);
        let n = self.hosts.len();
        for data in std::mem::take(&mut self.held[l]) {
            self.route(l / n, l % n, data);
        }
    }

    /// One action of the on-path adversary: a replay, a bit-flipped copy, or a forgery.
    fn adversary(&mut self, left: u32) {
        let Some(a) = self.sc.adversary else { return };
        let lat = nanos(self.sc.link.latency);
        let attack = a.attacks[self.rng.gen_range(0..a.attacks.len())];
        match attack {
            Attack::Replay | Attack::BitFlip if !self.captured.is_empty() => {
                let k = self.rng.gen_range(0..self.captured.len());
                let (to, data) = self.captured[k].clone();
                if attack == Attack::Replay {
                    let at = self.now + self.rng.gen_range(0..=nanos(a.max_replay_delay));
                    self.push(
                        at,
                        What::Datagram {
                            to: to as u32,
                            data,
                        },
                    );
                } else {
                    let mut v = data.to_vec();
                    let bit = self.rng.gen_range(0..v.len() * 8);
                    v[bit / 8] ^= 1 << (bit % 8);
                    let data = Bytes::from(v);
                    self.push(
                        self.now + lat,
                        What::Datagram {
                            to: to as u32,
                            data,
                        },
                    );
                }
            }
            Attack::Replay | Attack::BitFlip => {}
            _ => {
                if let Some((to, data)) = self.forge(attack) {
                    // Later than the honest datagram it answers would arrive.
                    let at = self.now + 2 * lat;
                    self.push(
                        at,
                        What::Datagram {
                            to: to as u32,
                            data,
                        },
                    );
                }
            }
        }
        if left > 1 {
            self.last_activity = self.last_activity.max(self.now);
            self.push(self.now + nanos(a.interval), What::Adversary(left - 1));
        }
    }

    /// What the adversary learned from one datagram on the wire (plaintext only): TOKENs
    /// in flight as (sender, receiver, slot, incarnation), and incarnations acknowledged.
    fn observe(&mut self, to: usize, data: &Bytes) {
        let Ok(p) = exon::proto::Packet::decode(data) else {
            return; // sealed: nothing to read
        };
        let from = (p.header.src.get() as usize).wrapping_sub(1);
        for f in &p.frames {
            match f {
                Frame::Token { s, r, .. } => {
                    remember(&mut self.seen_tokens, (from, to, *s, *r));
                }
                Frame::Ack { r, .. } => {
                    // `from` is the receiver that acknowledged, `to` the sender.
                    remember(&mut self.seen_acked, (to, from, *r));
                }
                _ => {}
            }
        }
    }

    /// A datagram for `attack` and its destination, aimed at what was seen in plaintext,
    /// or guessed; sealed nodes get it sealed under a key the attacker made itself.
    fn forge(&mut self, attack: Attack) -> Option<(usize, Bytes)> {
        use exon::proto::frame::{put_reqslots, put_token, put_verdict, Verdict};
        let n = self.hosts.len();
        let pick = |rng: &mut SmallRng, v: &[(usize, usize, u64, u64)]| {
            (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())])
        };
        let guess = |rng: &mut SmallRng, hosts: &[Host]| {
            let from = rng.gen_range(0..n);
            let to = (from + rng.gen_range(1..n.max(2))) % n;
            let ck = |i: usize| hosts[i].node.as_ref().map_or(0, |x| x.clock());
            let r = ck(to).saturating_sub(rng.gen_range(1..4));
            let s = ck(from).saturating_sub(rng.gen_range(0..2048));
            (from, to, s, r)
        };
        let verdict = matches!(attack, Attack::Ack | Attack::Retry | Attack::Doubt);
        let seen = if verdict {
            // Verdicts aim at the newest tokens: likely still in flight.
            self.seen_tokens.last().copied()
        } else {
            pick(&mut self.rng, &self.seen_tokens)
        };
        let (snd, rcv, s, r) = match seen {
            Some(t) => t,
            None => guess(&mut self.rng, &self.hosts),
        };
        let mut frames = Vec::new();
        let one = std::slice::from_ref(&(s.saturating_sub(32)..s + 32)).to_vec();
        // (claimed source, destination)
        let (src, dst) = match attack {
            Attack::Frontier => {
                put_reqslots(&mut frames, s + (1 << 40), 0, s + (1 << 40));
                (snd, rcv)
            }
            Attack::Token => {
                put_token(&mut frames, s, r, b"forged");
                (snd, rcv)
            }
            Attack::Ack => {
                put_verdict(&mut frames, Verdict::Ack, r, &one, 64);
                (rcv, snd)
            }
            Attack::Doubt => {
                put_verdict(&mut frames, Verdict::Doubt, r, &one, 64);
                (rcv, snd)
            }
            Attack::Retry => {
                // Only where the incarnation was seen acknowledged (a RETRY that could be
                // true, for an incarnation never acknowledged, is the protocol's own).
                let acked = self
                    .seen_acked
                    .iter()
                    .any(|&(a, b, x)| (a, b, x) == (snd, rcv, r));
                if !acked && self.sc.plaintext {
                    return None;
                }
                put_verdict(&mut frames, Verdict::Retry, r, &one, 64);
                (rcv, snd)
            }
            Attack::Replay | Attack::BitFlip => return None,
        };
        let mut header = exon::proto::Header::new(node_id(src), node_id(dst));
        let mut buf = Vec::new();
        if self.sc.plaintext {
            header.encode(&mut buf);
            buf.extend_from_slice(&frames);
            return Some((dst, Bytes::from(buf)));
        }
        header.seal = Some(exon::proto::frame::SealHeader {
            seq: exon::proto::crypto::Seq {
                epoch: u64::from(self.rng.gen::<u32>()),
                counter: self.rng.gen(),
            },
            key: None,
            cookie: None,
        });
        header.encode(&mut buf);
        buf.extend_from_slice(&frames);
        // Without the secret key, the best it can do is a tag of its choosing.
        let tag: [u8; 16] = self.rng.gen();
        buf.extend_from_slice(&tag);
        Some((dst, Bytes::from(buf)))
    }

    /// One volley of forged REQSLOTS, one per made-up source id.
    fn hostile(&mut self, left: u32) {
        let Some(h) = self.sc.hostile else { return };
        let n = self.hosts.len() as u64;
        let victim = node_id(h.victim);
        for k in 0..h.ids {
            let src = NodeId::from_const(n + 1 + k);
            let mut buf = Vec::new();
            exon::proto::Header::new(src, victim).encode(&mut buf);
            exon::proto::frame::put_reqslots(&mut buf, 1 + k * 7, h.n, 0);
            let t = self.now + nanos(self.sc.link.latency);
            self.push(
                t,
                What::Datagram {
                    to: h.victim as u32,
                    data: Bytes::from(buf),
                },
            );
        }
        if left > 1 {
            self.last_activity = self.last_activity.max(self.now);
            self.push(self.now + nanos(h.interval), What::Hostile(left - 1));
        }
    }

    /// Checks the bounded-state property of node `i`.
    fn check_bounds(&mut self, i: usize) {
        let Some(node) = self.hosts[i].node.as_ref() else {
            return;
        };
        let c = node.config();
        let s = node.sender_records();
        let r = node.receiver_records();
        let mut what = Vec::new();
        if s > c.max_sender_records {
            what.push(format!("{s} sender records"));
        }
        if r > c.max_receiver_records {
            what.push(format!("{r} receiver records"));
        }
        if node.bytes_queued() > c.max_queued_bytes {
            what.push(format!("{} bytes queued", node.bytes_queued()));
        }
        if node.tokens_in_flight() as u64 > c.window * s as u64 {
            what.push(format!("{} tokens", node.tokens_in_flight()));
        }
        if node.messages_queued() > c.max_queued_per_peer * s {
            what.push(format!("{} messages queued", node.messages_queued()));
        }
        if r > 0 {
            let slots = node.slots_held();
            if slots > c.max_slots_per_record.saturating_mul(r as u64) {
                what.push(format!("{slots} slots"));
            }
        }
        let granted = node.reassembly_granted();
        if granted > c.max_reassembly_bytes || node.reassembly_in_use() > granted {
            what.push(format!(
                "{} bytes of reassembly memory in use, {granted} granted",
                node.reassembly_in_use()
            ));
        }
        if !what.is_empty() {
            self.oracle.violate(
                ViolationKind::Unbounded,
                None,
                self.now,
                format!("node{i} holds {}", what.join(", ")),
            );
        }
    }

    /// Runs to the end and reports.
    pub fn run(mut self) -> Report {
        while self.step() {}
        self.finish()
    }

    /// Ends the run: the end-of-run checks (at-least-once, obliviousness) and the report.
    pub fn finish(mut self) -> Report {
        // A timer event for a node with no timer left is stale (the sim never cancels a
        // later timer when the node's deadline goes away): not pending work.
        let mut has_timer: Vec<bool> = Vec::with_capacity(self.hosts.len());
        for h in &mut self.hosts {
            has_timer.push(h.node.as_mut().is_some_and(|n| n.poll_timeout().is_some()));
        }
        let pending = self
            .heap
            .iter()
            .filter(|e| !matches!(e.what, What::Timer(i) if !has_timer[i as usize]))
            .count();
        let mut idle = 0;
        for i in 0..self.hosts.len() {
            let Some(node) = self.hosts[i].node.as_ref() else {
                continue;
            };
            if node.is_idle() {
                idle += 1;
            } else if self.sc.expect_idle {
                let what = format!(
                    "node{i} not idle: {} S records, {} R records, {} slots, {} tokens, {} queued",
                    node.sender_records(),
                    node.receiver_records(),
                    node.slots_held(),
                    node.tokens_in_flight(),
                    node.messages_queued()
                );
                self.oracle
                    .violate(ViolationKind::NotIdle, None, self.now, what);
                for (j, h) in self.hosts.iter().enumerate() {
                    if let Some(n) = h.node.as_ref() {
                        let st = n.stats();
                        eprintln!("node{j}: in {:?} out {:?} probes {} stale_slots {} idle_discards {} rejects {}", st.frames_in, st.frames_out, st.probes, st.stale_slots, st.idle_discards, st.rejects.total());
                    }
                }
            }
        }
        if self.sc.expect_idle && pending > 0 && idle == self.hosts.len() {
            let what = format!("{pending} events still pending after the settle time");
            self.oracle
                .violate(ViolationKind::NotIdle, None, self.now, what);
        }
        self.oracle.finish(self.now);
        Report::new(&self, idle, pending)
    }

    pub(crate) fn hosts_restarts(&self) -> u32 {
        self.hosts.iter().map(|h| h.restarts).sum()
    }

    /// The deaf-path oracle (what nodes sent to peers they did not hear from).
    pub fn deaf_watch(&self) -> &DeafWatch {
        &self.deaf
    }

    /// Counters of every live node.
    pub fn node_stats(&self) -> impl Iterator<Item = &exon::proto::Stats> {
        self.hosts
            .iter()
            .filter_map(|h| h.node.as_ref().map(Node::stats))
    }
}
