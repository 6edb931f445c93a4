//! A sans-IO model of one directed network link, in the style of netem: latency, jitter,
//! loss (independent and Gilbert-Elliott bursts), duplication with late replays, reordering,
//! a rate limit with a byte-sized tail-drop queue, partitions, and an MTU.
//!
//! The link knows nothing of virtual or real time beyond the `now` it is given, so a
//! real-time emulator can drive it as well as the discrete-event simulator.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Gilbert-Elliott bursty loss: a two-state Markov chain advanced once per datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state, per datagram.
    pub p_good_to_bad: f64,
    /// Probability of moving from the bad to the good state, per datagram.
    pub p_bad_to_good: f64,
    /// Loss probability while in the bad state.
    pub loss_bad: f64,
}

/// Settings of one directed link. `Default` is a perfect 5 ms link.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub latency: Duration,
    /// Extra delay, uniform in `[0, jitter]`, per datagram (reorders close datagrams).
    pub jitter: Duration,
    /// Independent (Bernoulli) loss probability.
    pub loss: f64,
    /// Bursty loss on top of `loss`, if any.
    pub burst: Option<GilbertElliott>,
    /// Losses in step with the exchange: every `k`-th datagram offered to the link is lost
    /// (`None` or 0: never). A sender and a receiver that answer each other in a fixed
    /// cycle can lose the same kind of datagram every time, which random loss almost
    /// never does.
    pub drop_every: Option<u32>,
    /// Probability that a datagram is duplicated; the copy gets its own delay.
    pub dup: f64,
    /// Largest extra delay of a duplicate copy. Copies are skewed towards short delays, but
    /// some arrive very late: late replays of old datagrams.
    pub dup_max_delay: Duration,
    /// Probability that a datagram is held back by an extra delay (reordering).
    pub reorder: f64,
    /// Largest extra delay of a reordered datagram.
    pub reorder_max_delay: Duration,
    /// Rate limit in bytes per second (`None`: unlimited).
    pub rate: Option<u64>,
    /// Bytes the rate limiter may queue before dropping at the tail.
    pub queue_bytes: usize,
    /// One rate limiter and queue for every link into the same node, as a bottleneck in
    /// front of the receiver that competing senders share (the embedding keeps its state
    /// and passes it to [`Link::on_datagram_shared`]). Off: each directed link has its own.
    pub shared_queue: bool,
    /// Largest datagram (UDP payload) the link carries; larger ones are dropped silently,
    /// as a path drops packets too large for it with fragmentation forbidden. Default 1472:
    /// an Ethernet MTU of 1500 less the IPv4 and UDP headers.
    pub mtu: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            latency: Duration::from_millis(5),
            jitter: Duration::ZERO,
            loss: 0.0,
            burst: None,
            drop_every: None,
            dup: 0.0,
            dup_max_delay: Duration::from_secs(5),
            reorder: 0.0,
            reorder_max_delay: Duration::from_millis(20),
            rate: None,
            queue_bytes: 256 * 1024,
            shared_queue: false,
            mtu: 1472,
        }
    }
}

/// Whether the link passes, drops or holds datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkState {
    /// Datagrams go through the loss and delay model.
    #[default]
    Up,
    /// Partitioned: every datagram is dropped.
    Down,
    /// Held: datagrams are kept by the embedding, to be offered again on release.
    Held,
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// Independent loss.
    Loss,
    /// Gilbert-Elliott loss.
    Burst,
    /// Every `drop_every`-th datagram.
    Periodic,
    /// The link is partitioned.
    Partition,
    /// The rate limiter's queue was full.
    QueueFull,
    /// Larger than the link's MTU.
    TooBig,
}

/// What the link does with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Lost.
    Drop(DropCause),
    /// The link is held: keep the datagram and offer it again after release.
    Hold,
    /// Delivered at `at`, and a duplicate at `copy` if any.
    Deliver {
        /// Arrival of the datagram.
        at: Instant,
        /// Arrival of a duplicate copy.
        copy: Option<Instant>,
    },
}

/// Counters of one link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered.
    pub offered: u64,
    /// Datagrams scheduled for delivery (copies not included).
    pub delivered: u64,
    /// Duplicate copies scheduled.
    pub duplicated: u64,
    /// Datagrams delayed for reordering.
    pub reordered: u64,
    /// Dropped by independent loss.
    pub lost: u64,
    /// Dropped by burst loss.
    pub burst_lost: u64,
    /// Dropped as every `drop_every`-th datagram.
    pub periodic_lost: u64,
    /// Dropped by a partition.
    pub partitioned: u64,
    /// Dropped at the tail of the rate limiter's queue.
    pub queue_drops: u64,
    /// Datagrams held.
    pub held: u64,
    /// Dropped as larger than the MTU.
    pub too_big: u64,
}

/// One directed link: its settings, state, random generator and counters.
#[derive(Debug, Clone)]
pub struct Link {
    cfg: LinkConfig,
    state: LinkState,
    rng: SmallRng,
    bad: bool,
    /// When the rate limiter finishes sending what it has queued.
    busy_until: Option<Instant>,
    stats: LinkStats,
}

impl Link {
    /// A link with its own generator seeded by `seed`.
    pub fn new(cfg: LinkConfig, seed: u64) -> Link {
        Link {
            cfg,
            state: LinkState::Up,
            rng: SmallRng::seed_from_u64(seed),
            bad: false,
            busy_until: None,
            stats: LinkStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Replaces the settings (the state, queue and counters are kept).
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// Up, down (partitioned) or held.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// Partitions, holds or restores the link.
    pub fn set_state(&mut self, state: LinkState) {
        self.state = state;
    }

    /// The counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Decides the fate of a datagram of `len` bytes put on the link at `now`, through the
    /// link's own rate limiter.
    pub fn on_datagram(&mut self, now: Instant, len: usize) -> Decision {
        let mut busy = self.busy_until.take();
        let d = self.on_datagram_shared(now, len, &mut busy);
        self.busy_until = busy;
        d
    }

    /// [`on_datagram`](Self::on_datagram) through a rate limiter whose queue ends at
    /// `busy_until` (`None`: empty), shared with other links: the queue's bytes are counted
    /// at this link's rate and against its `queue_bytes`.
    pub fn on_datagram_shared(
        &mut self,
        now: Instant,
        len: usize,
        busy_until: &mut Option<Instant>,
    ) -> Decision {
        self.stats.offered += 1;
        match self.state {
            LinkState::Down => {
                self.stats.partitioned += 1;
                return Decision::Drop(DropCause::Partition);
            }
            LinkState::Held => {
                self.stats.held += 1;
                return Decision::Hold;
            }
            LinkState::Up => {}
        }
        if len > self.cfg.mtu {
            self.stats.too_big += 1;
            return Decision::Drop(DropCause::TooBig);
        }
        if let Some(ge) = self.cfg.burst {
            let flip = if self.bad {
                ge.p_bad_to_good
            } else {
                ge.p_good_to_bad
            };
            if self.rng.gen_bool(flip.clamp(0.0, 1.0)) {
                self.bad = !self.bad;
            }
            if self.bad && self.rng.gen_bool(ge.loss_bad.clamp(0.0, 1.0)) {
                self.stats.burst_lost += 1;
                return Decision::Drop(DropCause::Burst);
            }
        }
        let k = u64::from(self.cfg.drop_every.unwrap_or(0));
        if k > 0 && self.stats.offered.is_multiple_of(k) {
            self.stats.periodic_lost += 1;
            return Decision::Drop(DropCause::Periodic);
        }
        if self.cfg.loss > 0.0 && self.rng.gen_bool(self.cfg.loss.min(1.0)) {
            self.stats.lost += 1;
            return Decision::Drop(DropCause::Loss);
        }
        let mut sent = now;
        if let Some(rate) = self.cfg.rate.filter(|r| *r > 0) {
            let start = busy_until.map_or(now, |b| b.max(now));
            let backlog = (start - now).as_secs_f64() * rate as f64;
            if backlog + len as f64 > self.cfg.queue_bytes as f64 {
                self.stats.queue_drops += 1;
                return Decision::Drop(DropCause::QueueFull);
            }
            sent = start + Duration::from_secs_f64(len as f64 / rate as f64);
            *busy_until = Some(sent);
        }
        let mut at = sent + self.cfg.latency + self.uniform(self.cfg.jitter);
        if self.cfg.reorder > 0.0 && self.rng.gen_bool(self.cfg.reorder.min(1.0)) {
            self.stats.reordered += 1;
            at += self.uniform(self.cfg.reorder_max_delay);
        }
        self.stats.delivered += 1;
        let copy = if self.cfg.dup > 0.0 && self.rng.gen_bool(self.cfg.dup.min(1.0)) {
            self.stats.duplicated += 1;
            // Cubed uniform: most copies come soon after, a few very late.
            let u: f64 = self.rng.gen();
            let extra = self.cfg.dup_max_delay.mul_f64(u * u * u);
            Some(sent + self.cfg.latency + extra)
        } else {
            None
        };
        Decision::Deliver { at, copy }
    }

    fn uniform(&mut self, max: Duration) -> Duration {
        if max.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.gen_range(0..=max.as_nanos() as u64))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_fates() {
        let cfg = LinkConfig {
            loss: 0.2,
            dup: 0.2,
            reorder: 0.3,
            jitter: Duration::from_millis(3),
            ..LinkConfig::default()
        };
        let now = Instant::now();
        let mut a = Link::new(cfg.clone(), 9);
        let mut b = Link::new(cfg, 9);
        for i in 0..1000 {
            assert_eq!(a.on_datagram(now, i), b.on_datagram(now, i));
        }
        assert!(a.stats().lost > 100 && a.stats().lost < 300);
        assert!(a.stats().duplicated > 50);
    }

    /// Two links through one shared queue: a datagram of the second waits behind the
    /// first's, and the queue, full of both, drops either's.
    #[test]
    fn a_shared_queue_serves_both_links_in_turn() {
        let cfg = LinkConfig {
            rate: Some(1000),
            queue_bytes: 250,
            latency: Duration::ZERO,
            shared_queue: true,
            ..LinkConfig::default()
        };
        let now = Instant::now();
        let (mut a, mut b) = (Link::new(cfg.clone(), 1), Link::new(cfg, 2));
        let mut queue = None;
        let at = |d| match d {
            Decision::Deliver { at, .. } => at - now,
            d => panic!("{d:?}"),
        };
        assert_eq!(
            at(a.on_datagram_shared(now, 100, &mut queue)),
            Duration::from_millis(100)
        );
        assert_eq!(
            at(b.on_datagram_shared(now, 100, &mut queue)),
            Duration::from_millis(200)
        );
        // 200 bytes queued of 250: a third of 100 does not fit, from either link.
        assert_eq!(
            b.on_datagram_shared(now, 100, &mut queue),
            Decision::Drop(DropCause::QueueFull)
        );
        assert_eq!(a.stats().queue_drops + b.stats().queue_drops, 1);
        // Each link alone would have taken it.
        assert!(matches!(a.on_datagram(now, 100), Decision::Deliver { .. }));
    }

    #[test]
    fn rate_limit_queues_then_drops_at_the_tail() {
        let cfg = LinkConfig {
            rate: Some(1000),
            queue_bytes: 300,
            latency: Duration::ZERO,
            ..LinkConfig::default()
        };
        let now = Instant::now();
        let mut l = Link::new(cfg, 1);
        let fates: Vec<Decision> = (0..5).map(|_| l.on_datagram(now, 100)).collect();
        assert_eq!(
            fates[0],
            Decision::Deliver {
                at: now + Duration::from_millis(100),
                copy: None
            }
        );
        assert_eq!(
            fates[2],
            Decision::Deliver {
                at: now + Duration::from_millis(300),
                copy: None
            }
        );
        assert_eq!(fates[3], Decision::Drop(DropCause::QueueFull));
        assert_eq!(l.stats().queue_drops, 2);
    }

    #[test]
    fn datagrams_above_the_mtu_are_dropped() {
        let mut l = Link::new(LinkConfig::default(), 1);
        let now = Instant::now();
        assert!(matches!(l.on_datagram(now, 1472), Decision::Deliver { .. }));
        assert_eq!(l.on_datagram(now, 1473), Decision::Drop(DropCause::TooBig));
        assert_eq!(l.stats().too_big, 1);
    }

    #[test]
    fn every_kth_datagram_is_lost_and_only_those() {
        let cfg = LinkConfig {
            drop_every: Some(3),
            ..LinkConfig::default()
        };
        let mut l = Link::new(cfg, 1);
        let now = Instant::now();
        let fates: Vec<bool> = (0..9)
            .map(|_| matches!(l.on_datagram(now, 100), Decision::Deliver { .. }))
            .collect();
        let third = [true, true, false];
        assert_eq!(fates, third.repeat(3));
        assert_eq!(l.stats().periodic_lost, 3);
    }

    #[test]
    fn partition_and_hold() {
        let mut l = Link::new(LinkConfig::default(), 1);
        let now = Instant::now();
        l.set_state(LinkState::Down);
        assert_eq!(l.on_datagram(now, 10), Decision::Drop(DropCause::Partition));
        l.set_state(LinkState::Held);
        assert_eq!(l.on_datagram(now, 10), Decision::Hold);
        l.set_state(LinkState::Up);
        assert!(matches!(l.on_datagram(now, 10), Decision::Deliver { .. }));
    }
}
