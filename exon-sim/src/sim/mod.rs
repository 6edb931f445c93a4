//! The discrete-event simulator: N sans-IO nodes in virtual time, a link model between every
//! ordered pair, workloads, faults, and the oracle watching every delivery.
//!
//! The parts: the event queue (`queue.rs`), the hosts (`host.rs`), the nodes and their
//! drain (`nodes.rs`), the applications (`app.rs`), the links and faults (`network.rs`),
//! the attackers (`adversary.rs`), the journals of durable mode (`journal.rs`), the
//! request/reply applications (`rpc.rs`), the ordered-channel applications (`channels.rs`;
//! their numbering in `numbering.rs`, durable flows resumed after a restart in
//! `chan_resume.rs`), the byte-stream applications (`streams.rs` writes, `stream_read.rs`
//! reads, `stream_resume.rs` resumes them at a boot), and the report (`outcome.rs`).

mod adversary;
mod app;
mod chan_resume;
mod chan_stalls;
mod channels;
mod host;
mod ids;
pub use ids::node_id;
mod journal;
mod network;
mod nodes;
mod numbering;
mod outcome;
mod queue;
mod restarts;
mod rpc;
mod stream_read;
mod stream_resume;
mod streams;

use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Event, MsgId, Node};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::deafness::DeafWatch;
use crate::link::Link;
use crate::oracle::{Oracle, ViolationKind};
use crate::report::Report;
use crate::scenario::Scenario;
use host::Host;
use queue::{nanos, Queue, What};

/// The simulator. Build it with [`Sim::new`], advance with [`Sim::step`], and end with
/// [`Sim::finish`] (or do both with [`Sim::run`]).
pub struct Sim {
    sc: Scenario,
    base: Instant,
    now: u64,
    queue: Queue,
    hosts: Vec<Host>,
    links: Vec<Link>,
    /// With [`LinkConfig::shared_queue`](crate::LinkConfig::shared_queue): when the queue
    /// in front of each node empties.
    bottlenecks: Vec<Option<Instant>>,
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
            queue: Queue::default(),
            hosts: Vec::with_capacity(n),
            links,
            bottlenecks: vec![None; n],
            held: vec![Vec::new(); n * n],
            oracle: {
                let mut o = Oracle::new(n);
                if let Some(d) = &sc.durable {
                    o.set_durable();
                    if d.keyed {
                        o.set_keyed();
                    }
                }
                o
            },
            deaf: DeafWatch::new(n, sc.config.timers.max_rto),
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
        sim.streams_open();
        for i in 0..n {
            let quota = match &sim.sc.rpc {
                // The streams are the workload.
                _ if sim.sc.streams.is_some() => 0,
                Some(rpc) => rpc.quota(i, n, sim.sc.workload.messages),
                None => sim.sc.workload.quota(i, n),
            };
            sim.hosts.push(Host::new(quota));
            if sim.sc.durable.as_ref().is_some_and(|d| d.switch_on) {
                sim.hosts[i].durable_on = false;
            }
            sim.boot(i, 0);
        }
        for (k, f) in sim.sc.faults.clone().iter().enumerate() {
            let t = nanos(f.at);
            sim.last_activity = sim.last_activity.max(t);
            sim.queue.push(t, What::Fault(k as u32));
        }
        if !sim.sc.faults.is_empty() {
            sim.queue.push(sim.last_activity + 1, What::HealAll);
        }
        if let Some(a) = sim.sc.adversary {
            sim.queue.push(0, What::Adversary(a.actions));
        }
        if let Some(h) = sim.sc.hostile {
            sim.queue.push(0, What::Hostile(h.volleys));
        }
        sim
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
        let Some(ev) = self.queue.pop() else {
            self.stopped = true;
            return false;
        };
        let traffic_left = self.hosts.iter().any(Host::has_traffic);
        if self.events >= self.sc.max_events
            || (!traffic_left && ev.t > self.last_activity + nanos(self.sc.settle))
        {
            self.queue.put_back(ev);
            self.stopped = true;
            return false;
        }
        self.events += 1;
        self.now = self.now.max(ev.t);
        match ev.what {
            What::Datagram { to, data } => self.on_datagram(to as usize, data),
            What::Timer(i) => self.on_timer(i as usize, ev.t),
            What::Pump(i) if self.sc.streams.is_some() => self.stream_pump(i as usize),
            What::Pump(i) if self.sc.channels.is_some() => self.chan_pump(i as usize),
            What::Pump(i) if self.sc.rpc.is_some() => self.rpc_pump(i as usize),
            What::Pump(i) => self.pump(i as usize),
            What::Take(i) if self.sc.streams.is_some() => self.stream_read(i as usize),
            What::Take(i) if self.sc.rpc.is_some() => self.rpc_take(i as usize),
            What::Take(i) => self.take(i as usize),
            What::CallDeadline { node, call, boot } => {
                self.call_deadline(node as usize, call, boot)
            }
            What::GiveUp {
                node,
                to,
                id,
                boot,
                seq,
            } => self.give_up(node as usize, to as usize, MsgId(id), boot, seq),
            What::Fault(k) => self.fault(k as usize),
            What::Crash { node, down_us } => {
                let down = Duration::from_micros(u64::from(down_us));
                self.crash_host(node as usize, down, true);
            }
            What::Revive { node, keep_clock } => self.revive(node as usize, keep_clock),
            What::Synced { node, boot, hw } => self.on_synced(node as usize, boot, hw),
            What::Commit { node, boot } => self.on_commit(node as usize, boot),
            What::ChanLook { node, boot } => self.chan_look(node as usize, boot),
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
            .queue
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
                    "node{i} not idle: {} S records, {} R records, {} slots, {} tokens, {} queued, \
                     {} early deliveries parked, {} deliveries untaken",
                    node.sender_records(),
                    node.receiver_records(),
                    node.slots_held(),
                    node.tokens_in_flight(),
                    node.messages_queued(),
                    node.early_parked(),
                    self.hosts[i].inbox.len(),
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
        if self.sc.expect_idle {
            self.check_journals();
        }
        self.oracle.finish(self.now);
        self.report(idle, pending)
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
