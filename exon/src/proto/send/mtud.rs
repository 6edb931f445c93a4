//! Path MTU discovery for one destination (datagram packetization-layer PMTUD, RFC 8899 in
//! spirit): the size of the datagrams sent to it, searched upwards with probes from a base
//! size that always works, and black-hole detection that ordinary loss cannot trigger.
//!
//! Sans-IO: the node tells it what happened (a probe sent or acknowledged, a datagram of
//! tokens lost or acknowledged, anything heard from the peer) with the time, and asks it
//! which probe to send. The rules, as `docs/wire.md` states them:
//!
//! * **Search.** From the current size, the next size tried is the first of [`STEPS`] above
//!   it and below the smallest size known to fail (capped at the ceiling); with no step
//!   left, the midpoint of the two, until they are less than [`GRANULARITY`] bytes apart.
//!   One probe is outstanding at a time; a probe acknowledged makes its size the current
//!   one; [`MAX_PROBES`] probes of a size unanswered make it the smallest failing size.
//!   When nothing is left to try the search ends, and starts again after the raise
//!   interval (forgetting the failures), to find a path that grew.
//!   The search starts once the peer has been heard from.
//! * **Counting a failure.** An unanswered probe counts against its size only if the peer
//!   was heard from after the probe left: on a path that delivers nothing, probes prove
//!   nothing about sizes. Nor does the node send another probe until the peer is heard
//!   from again: a path that answers nothing gets no probes (see also `silence.rs`).
//! * **Black holes.** Losses of datagrams above the base size (and not above the current
//!   size) are counted in a run, which ends when a datagram at least as large as the
//!   smallest of them is acknowledged. A run of [`SUSPECT_LOSSES`] makes the current size
//!   suspect: the size is kept, and each round sends a confirmation probe of the current
//!   size and a companion probe of the base size. A datagram as large as the lost ones
//!   acknowledged, or the confirmation probe acknowledged, clears the suspicion. Only
//!   [`MAX_PROBES`] confirmation probes unanswered while the peer is heard from (the base
//!   probes get through) make the node fall back to the base size and search again; so does
//!   one confirmation probe unanswered with nothing heard from the peer since it left (a
//!   silent peer: black-hole detection must not wait for it to speak).

use std::time::{Duration, Instant};

/// Unanswered probes of one size after which that size fails.
pub(crate) const MAX_PROBES: u32 = 3;

/// Losses of datagrams above the base size, with none as large acknowledged in between,
/// after which the current size is suspect and confirmed with probes.
pub(crate) const SUSPECT_LOSSES: u32 = 6;

/// Sizes tried in turn while searching upwards (those above the ceiling are skipped, and the
/// ceiling itself is tried last). 1452 and 1472 are the UDP payloads of a 1500-byte link
/// over IPv6 and IPv4.
pub(crate) const STEPS: [usize; 11] = [
    1280, 1400, 1452, 1472, 1500, 4096, 8192, 9000, 16384, 32768, 65507,
];

/// The search refines between a working and a failing size until they are this close.
pub(crate) const GRANULARITY: usize = 16;

/// What the search is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Looking for a larger size.
    Search,
    /// Nothing left to try; search again at this instant.
    Done { again: Instant },
    /// The current size is suspect: confirming it with probes.
    Confirm,
}

/// A probe on the wire.
#[derive(Debug, Clone, Copy)]
struct Probe {
    id: u64,
    size: usize,
    sent_at: Instant,
    expires: Instant,
}

/// Which probe is wanted now: its size, and whether it is the base-size companion of a
/// confirmation round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Want {
    /// The datagram size to probe.
    pub size: usize,
    /// The base-size companion of a confirmation probe.
    pub companion: bool,
}

/// What expired at a [`Mtud::poll`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Expired {
    /// Probes that went unanswered.
    pub lost: u32,
    /// The current size failed its confirmation: the node fell back to the base size.
    pub fallback: bool,
}

/// Path MTU discovery state of one destination (soft state: lives in its sender record).
#[derive(Debug, Clone)]
pub(crate) struct Mtud {
    base: usize,
    /// The configured ceiling (`max_datagram_size`).
    max: usize,
    /// The ceiling in use: `max`, or lower where the host's route to the peer says so.
    ceiling: usize,
    /// The ceiling is the route's: the likeliest size, tried first.
    route: bool,
    /// The size datagrams are sent at.
    size: usize,
    /// The smallest size known to fail (`ceiling + 1` when none is known).
    upper: usize,
    phase: Phase,
    /// The search or confirmation probe outstanding.
    probe: Option<Probe>,
    /// The base-size companion of the confirmation probe outstanding.
    companion: Option<Probe>,
    /// Unanswered probes of the size being probed, counted.
    fails: u32,
    /// When the peer was last heard from.
    heard_at: Option<Instant>,
    /// A probe expired with nothing heard from the peer since it left: no probe until the
    /// peer is heard from again.
    unheard: bool,
    /// Losses of datagrams above the base size in the current run, and the smallest of them.
    run: u32,
    run_min: usize,
    /// Sequence number of the datagram of the last loss counted (its other tokens are the
    /// same loss).
    last_lost: Option<u64>,
    raise_interval: Duration,
}

impl Mtud {
    /// Starts at `base`, searching up to `ceiling` (no search when `ceiling <= base`), and
    /// again every `raise_interval` after a search ends.
    pub fn new(base: usize, ceiling: usize, raise_interval: Duration) -> Mtud {
        Mtud {
            base,
            max: ceiling.max(base),
            ceiling: ceiling.max(base),
            route: false,
            size: base,
            upper: ceiling.max(base) + 1,
            phase: Phase::Search,
            probe: None,
            companion: None,
            fails: 0,
            heard_at: None,
            unheard: false,
            run: 0,
            run_min: usize::MAX,
            last_lost: None,
            raise_interval,
        }
    }

    /// The size of datagrams to send now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether the current size is being confirmed (black-hole suspicion).
    #[cfg(test)]
    pub fn is_confirming(&self) -> bool {
        self.phase == Phase::Confirm
    }

    /// The host's route to the peer carries datagrams of at most `payload` bytes (its MTU as
    /// the host knows it, less the IP and UDP headers), or `None` when it does not say. The
    /// ceiling becomes that size (within the base size and the configured ceiling), and the
    /// search tries it first: on loopback or a LAN the route's size is what the path
    /// carries, and one probe finds it where the steps take ten. A route larger than the
    /// path (a link beyond the first that is smaller) costs that probe's failures, then the
    /// steps go on below it. A ceiling that falls below the size in use takes the size down
    /// to it at once (the host refuses anything larger). Returns whether the size changed.
    pub fn set_route(&mut self, payload: Option<usize>) -> bool {
        let ceiling = payload.map_or(self.max, |p| p.clamp(self.base, self.max));
        self.route = payload.is_some();
        if ceiling == self.ceiling {
            return false;
        }
        // No failing size known below the old ceiling: none below the new one either.
        if self.upper > self.ceiling || self.upper > ceiling + 1 {
            self.upper = ceiling + 1;
        }
        self.ceiling = ceiling;
        if self.probe.is_some_and(|p| p.size > ceiling) {
            // Its answer must not take the size above the new ceiling.
            self.probe = None;
            self.fails = 0;
        }
        if self.size > ceiling {
            self.size = ceiling;
            self.phase = Phase::Search;
            self.probe = None;
            self.companion = None;
            self.fails = 0;
            self.end_run();
            return true;
        }
        if matches!(self.phase, Phase::Done { .. }) {
            self.phase = Phase::Search;
        }
        false
    }

    /// The next size to try while searching, if any.
    fn candidate(&self) -> Option<usize> {
        let (lo, hi) = (self.size, self.upper.min(self.ceiling + 1));
        if self.route && hi > self.ceiling && lo < self.ceiling {
            return Some(self.ceiling);
        }
        if let Some(&s) = STEPS.iter().find(|&&s| s > lo && s < hi) {
            return Some(s);
        }
        if hi > self.ceiling && lo < self.ceiling {
            return Some(self.ceiling);
        }
        (hi.saturating_sub(lo) > GRANULARITY).then(|| lo + (hi - lo) / 2)
    }

    /// When [`poll`](Self::poll) has something to do without any other input: a probe to
    /// expire, or the next search.
    pub fn deadline(&self) -> Option<Instant> {
        let again = match self.phase {
            Phase::Done { again } => Some(again),
            _ => None,
        };
        [
            self.probe.map(|p| p.expires),
            self.companion.map(|p| p.expires),
            again,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Expires unanswered probes and starts a due search. Returns what expired.
    pub fn poll(&mut self, now: Instant) -> Expired {
        let mut out = Expired::default();
        if self.companion.is_some_and(|p| p.expires <= now) {
            self.companion = None;
            out.lost += 1;
        }
        if let Some(p) = self.probe.filter(|p| p.expires <= now) {
            self.probe = None;
            out.lost += 1;
            // Only a path that delivers something says anything about sizes.
            let heard_after = self.heard_at.is_some_and(|h| h > p.sent_at);
            if heard_after {
                self.fails += 1;
            } else {
                self.unheard = true;
            }
            // A run of losses above the base size, then a confirmation met with silence:
            // a black hole whatever the peer sends (it may send nothing), so fall back now.
            // On a path that died entirely this costs only a new search once it answers.
            let silent_confirm = self.phase == Phase::Confirm && !heard_after;
            if self.fails >= MAX_PROBES || silent_confirm {
                if self.fails >= MAX_PROBES {
                    // Counted failures say the size fails; silence says nothing of sizes.
                    self.upper = p.size;
                }
                self.fails = 0;
                if self.phase == Phase::Confirm {
                    self.size = self.base;
                    self.phase = Phase::Search;
                    self.end_run();
                    out.fallback = true;
                }
            }
        }
        if let Phase::Done { again } = self.phase {
            if again <= now {
                self.phase = Phase::Search;
                self.upper = self.ceiling + 1;
            }
        }
        if self.phase == Phase::Search && self.probe.is_none() && self.candidate().is_none() {
            self.phase = Phase::Done {
                again: now + self.raise_interval,
            };
        }
        out
    }

    /// The probe to send now, if any (call [`poll`](Self::poll) first).
    #[cfg(test)]
    pub fn want(&self) -> Option<Want> {
        self.want_if(true)
    }

    /// [`want`](Self::want), or with `wait_for_peer` false the probe it would want even after
    /// a probe expired unheard (the node's rule switch `deaf_backoff` off).
    pub fn want_if(&self, wait_for_peer: bool) -> Option<Want> {
        if self.unheard && wait_for_peer {
            return None;
        }
        match self.phase {
            Phase::Done { .. } => None,
            Phase::Search => {
                // Not before the peer answered anything: a peer that never does gets no
                // probes, and the first exchange is not held up.
                if self.probe.is_some() || self.heard_at.is_none() {
                    return None;
                }
                self.candidate().map(|size| Want {
                    size,
                    companion: false,
                })
            }
            Phase::Confirm => {
                if self.probe.is_none() {
                    Some(Want {
                        size: self.size,
                        companion: false,
                    })
                } else if self.companion.is_none() {
                    Some(Want {
                        size: self.base,
                        companion: true,
                    })
                } else {
                    None
                }
            }
        }
    }

    /// The probe `want` left as `id`, `size` bytes long, at `now`; unanswered after
    /// `timeout`, it is lost.
    pub fn probe_sent(
        &mut self,
        want: Want,
        id: u64,
        size: usize,
        now: Instant,
        timeout: Duration,
    ) {
        let p = Probe {
            id,
            size,
            sent_at: now,
            expires: now + timeout,
        };
        if want.companion {
            self.companion = Some(p);
        } else {
            self.probe = Some(p);
        }
    }

    /// MTU_ACK(`id`) arrived. Returns whether it answered an outstanding probe (an unknown
    /// or old id is ignored).
    pub fn on_ack(&mut self, id: u64) -> bool {
        if self.companion.is_some_and(|p| p.id == id) {
            self.companion = None;
            return true;
        }
        let Some(p) = self.probe.filter(|p| p.id == id) else {
            return false;
        };
        self.probe = None;
        self.fails = 0;
        match self.phase {
            Phase::Search => {
                self.size = self.size.max(p.size);
                self.upper = self.upper.max(self.size + 1);
            }
            // The confirmation probe (two bytes short at most, see `put_mtu_probe`).
            Phase::Confirm => self.end_suspicion(),
            Phase::Done { .. } => {}
        }
        true
    }

    /// A datagram from the peer was accepted at `now`.
    pub fn on_heard(&mut self, now: Instant) {
        self.heard_at = Some(now);
        self.unheard = false;
    }

    /// A token was declared lost; its frame ended `reach` bytes into datagram `seq`.
    pub fn on_lost(&mut self, seq: u64, reach: usize) {
        if reach <= self.base || reach > self.size || self.last_lost == Some(seq) {
            return;
        }
        self.last_lost = Some(seq);
        self.run += 1;
        self.run_min = self.run_min.min(reach);
        if self.run >= SUSPECT_LOSSES && self.phase != Phase::Confirm {
            self.phase = Phase::Confirm;
            self.probe = None;
            self.companion = None;
            self.fails = 0;
        }
    }

    /// A token sent once was acknowledged; its frame ended `reach` bytes into its datagram.
    pub fn on_acked(&mut self, reach: usize) {
        if reach > self.base && reach >= self.run_min {
            self.end_suspicion();
        }
    }

    fn end_run(&mut self) {
        self.run = 0;
        self.run_min = usize::MAX;
    }

    /// Datagrams as large as the lost ones get through: the losses were not the size's.
    fn end_suspicion(&mut self) {
        self.end_run();
        if self.phase == Phase::Confirm {
            self.phase = Phase::Search;
            self.probe = None;
            self.companion = None;
            self.fails = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// A path that passes datagrams up to `mtu` bytes (and drops the probes above it), with
    /// an RTT of 10 ms: runs the search to its end. Returns the probes sent.
    fn search(m: &mut Mtud, now: &mut Instant, mtu: usize) -> u32 {
        m.on_heard(*now);
        let mut sent = 0;
        let mut id = 0;
        for _ in 0..1000 {
            m.poll(*now);
            let Some(w) = m.want() else {
                if m.probe.is_none() {
                    return sent;
                }
                *now += ms(5);
                m.on_heard(*now);
                continue;
            };
            id += 1;
            sent += 1;
            m.probe_sent(w, id, w.size, *now, ms(20));
            *now += ms(10);
            m.on_heard(*now);
            if w.size <= mtu {
                assert!(m.on_ack(id));
            }
        }
        panic!("search did not end");
    }

    #[test]
    fn search_climbs_the_steps_to_the_ceiling() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        assert_eq!(m.size(), 1200);
        m.poll(now);
        assert_eq!(m.want(), None, "not before the peer is heard from");
        m.on_heard(now);
        assert_eq!(search(&mut m, &mut now, 65507), 11);
        assert_eq!(m.size(), 65507);
        assert!(matches!(m.phase, Phase::Done { .. }));
        // A ceiling off the steps is tried last.
        let mut m = Mtud::new(1200, 1472, Duration::from_secs(600));
        assert_eq!(search(&mut m, &mut now, 65507), 4);
        assert_eq!(m.size(), 1472);
    }

    #[test]
    fn the_routes_size_is_tried_first_and_caps_the_search() {
        let mut now = Instant::now();
        let new = || Mtud::new(1200, 65507, Duration::from_secs(600));
        // Loopback: one probe, where the steps take eleven.
        let mut m = new();
        assert!(!m.set_route(Some(65507)));
        assert_eq!(search(&mut m, &mut now, 65507), 1);
        assert_eq!(m.size(), 65507);
        // An Ethernet route: one probe where the steps take four, and nothing above it.
        let mut m = new();
        m.set_route(Some(1472));
        assert_eq!(search(&mut m, &mut now, 65507), 1);
        assert_eq!(m.size(), 1472);
        // A jumbo first hop on a path of 1500: the route's size fails, the steps find 1472.
        let mut m = new();
        m.set_route(Some(8972));
        let probes = search(&mut m, &mut now, 1472);
        assert_eq!(m.size(), 1472);
        assert!(probes > MAX_PROBES, "{probes}");
        // Without the rule (no route), the ceiling comes last.
        let mut m = new();
        assert_eq!(search(&mut m, &mut now, 65507), 11);
        // Out of range: kept within the base size and the configured ceiling.
        let mut m = Mtud::new(1200, 9000, Duration::from_secs(600));
        m.set_route(Some(65507));
        assert_eq!(search(&mut m, &mut now, 65507), 1);
        assert_eq!(m.size(), 9000);
        m.set_route(Some(100));
        assert_eq!(m.size(), 1200);
    }

    #[test]
    fn a_route_that_shrinks_takes_the_size_down_and_one_that_grows_searches_again() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        m.set_route(Some(9000));
        search(&mut m, &mut now, 65507);
        assert_eq!(m.size(), 9000);
        assert!(matches!(m.phase, Phase::Done { .. }));
        assert!(m.set_route(Some(1472)), "the size changed");
        assert_eq!(m.size(), 1472);
        assert!(
            !m.set_route(Some(65507)),
            "growing the ceiling keeps the size"
        );
        assert_eq!(m.size(), 1472);
        assert_eq!(search(&mut m, &mut now, 65507), 1, "and searches at once");
        assert_eq!(m.size(), 65507);
        // The route forgotten: the configured ceiling, the steps.
        assert!(!m.set_route(None));
        assert_eq!(m.size(), 65507);
    }

    #[test]
    fn a_probe_above_a_lowered_ceiling_is_forgotten() {
        let now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        m.set_route(Some(9000));
        m.on_heard(now);
        m.poll(now);
        let w = m.want().expect("a probe");
        m.probe_sent(w, 1, w.size, now, ms(20));
        assert_eq!(w.size, 9000);
        m.set_route(Some(1400));
        assert!(!m.on_ack(1), "its answer matches no probe");
        assert_eq!(m.size(), 1200);
        m.poll(now);
        assert_eq!(
            m.want().map(|w| w.size),
            Some(1400),
            "the route's size next"
        );
    }

    #[test]
    fn search_refines_below_a_failing_step() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        search(&mut m, &mut now, 1472);
        assert!(
            m.size() <= 1472 && m.size() > 1472 - GRANULARITY,
            "{}",
            m.size()
        );
        assert!(m.upper > 1472 && m.upper - m.size() <= GRANULARITY);
    }

    #[test]
    fn no_search_without_room_above_the_base() {
        let now = Instant::now();
        let mut m = Mtud::new(1200, 1200, Duration::from_secs(600));
        m.poll(now);
        assert_eq!(m.want(), None);
        assert_eq!(m.size(), 1200);
    }

    #[test]
    fn a_probe_fails_only_while_the_peer_is_heard() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        m.on_heard(now);
        now += ms(1);
        // Silent path: the probe of 1280 expires without failing the size, and no other
        // follows until the peer is heard from again.
        m.poll(now);
        let w = m.want().unwrap();
        assert_eq!(w.size, 1280);
        m.probe_sent(w, 0, w.size, now, ms(20));
        now += ms(25);
        assert_eq!(m.poll(now).lost, 1);
        for _ in 0..10 {
            now += ms(25);
            m.poll(now);
            assert_eq!(m.want(), None, "no probe into a path that answers nothing");
        }
        assert_eq!(m.upper, 65508);
        // Heard from: three unanswered probes fail the size.
        m.on_heard(now);
        for id in 10..13 {
            let w = m.want().unwrap();
            assert_eq!(w.size, 1280);
            m.probe_sent(w, id, w.size, now, ms(20));
            now += ms(5);
            m.on_heard(now);
            now += ms(20);
            m.poll(now);
        }
        assert_eq!(m.upper, 1280);
        assert_eq!(m.want().map(|w| w.size), Some(1240), "refines below it");
    }

    #[test]
    fn a_black_hole_behind_a_silent_peer_falls_back_at_once() {
        let now = Instant::now();
        let mut m = Mtud::new(1200, 9000, Duration::from_secs(600));
        m.size = 9000;
        m.on_heard(now);
        for seq in 0..u64::from(SUSPECT_LOSSES) {
            m.on_lost(seq, 9000);
        }
        assert!(m.is_confirming());
        m.poll(now);
        let w = m.want().unwrap();
        m.probe_sent(w, 1, w.size, now, ms(10));
        let c = m.want().unwrap();
        assert!(c.companion);
        m.probe_sent(c, 2, c.size, now, ms(10));
        // Neither answered, nothing heard: the size falls back without waiting for the
        // peer, and no probe follows until it is heard from.
        let later = now + ms(20);
        let e = m.poll(later);
        assert_eq!((e.lost, e.fallback), (2, true));
        assert_eq!(m.size(), 1200);
        assert_eq!(m.upper, 9001, "silence says nothing of the size");
        assert_eq!(m.want(), None);
        // Heard again: the search climbs from the base size.
        m.on_heard(later);
        assert_eq!(m.want().map(|w| w.size), Some(1280));
    }

    #[test]
    fn acks_of_unknown_or_old_probes_are_ignored() {
        let now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        m.on_heard(now);
        m.poll(now);
        let w = m.want().unwrap();
        m.probe_sent(w, 7, w.size, now, ms(20));
        assert!(!m.on_ack(6));
        assert_eq!(m.size(), 1200);
        assert!(m.on_ack(7));
        assert_eq!(m.size(), 1280);
        assert!(!m.on_ack(7), "answered once");
        assert_eq!(m.size(), 1280);
    }

    #[test]
    fn the_search_starts_again_after_the_raise_interval() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        search(&mut m, &mut now, 1500);
        assert_eq!(m.size(), 1500);
        let again = m.deadline().unwrap();
        assert!(again >= now + Duration::from_secs(599));
        m.poll(again - ms(1));
        assert_eq!(m.want(), None);
        // The path grew meanwhile.
        now = again;
        search(&mut m, &mut now, 9000);
        assert_eq!(m.size(), 9000);
    }

    /// Drives `m` as a sender at its current size would: `datagrams` datagrams, each lost
    /// with probability `loss` (seeded) or dropped when above `mtu`, acknowledged or
    /// declared lost a few datagrams later; probes likewise. Returns the fallbacks.
    fn stream(m: &mut Mtud, now: &mut Instant, datagrams: u64, loss: u32, mtu: usize) -> u32 {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut lost = |size: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            size > mtu || (rng % 100) < u64::from(loss)
        };
        let mut fallbacks = 0;
        let mut next_id = 1000;
        let mut pending: std::collections::VecDeque<(u64, usize, bool)> = Default::default();
        for seq in 0..datagrams {
            *now += ms(1);
            let size = m.size();
            pending.push_back((seq, size, lost(size)));
            // Acknowledgements and losses are known three datagrams later; the peer's
            // datagrams (ACKs) get through when any datagram of ours did.
            if pending.len() > 3 {
                let (s, reach, was_lost) = pending.pop_front().unwrap();
                if was_lost {
                    m.on_lost(s, reach);
                } else {
                    m.on_heard(*now);
                    m.on_acked(reach);
                }
            }
            let e = m.poll(*now);
            fallbacks += u32::from(e.fallback);
            while let Some(w) = m.want() {
                next_id += 1;
                m.probe_sent(w, next_id, w.size, *now, ms(10));
                if !lost(w.size) {
                    m.on_heard(*now + ms(3));
                    assert!(m.on_ack(next_id));
                }
            }
        }
        fallbacks
    }

    #[test]
    fn random_loss_never_makes_the_size_fall_back() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        search(&mut m, &mut now, 9000);
        assert_eq!(m.size(), 9000);
        assert_eq!(stream(&mut m, &mut now, 1_000_000, 10, 9000), 0);
        assert_eq!(m.size(), 9000);
        // Heavier loss still does not.
        assert_eq!(stream(&mut m, &mut now, 200_000, 30, 9000), 0);
        assert_eq!(m.size(), 9000);
    }

    #[test]
    fn a_black_hole_is_found_and_the_size_found_again() {
        let mut now = Instant::now();
        let mut m = Mtud::new(1200, 65507, Duration::from_secs(600));
        search(&mut m, &mut now, 9000);
        assert_eq!(m.size(), 9000);
        // The path now carries 1500 bytes at most, with 10 % loss on top.
        assert_eq!(stream(&mut m, &mut now, 2_000, 10, 1500), 1);
        assert!(m.size() > 1200 && m.size() <= 1500, "{}", m.size());
    }

    #[test]
    fn losses_suspect_the_size_and_an_ack_as_large_clears_it() {
        let now = Instant::now();
        let mut m = Mtud::new(1200, 9000, Duration::from_secs(600));
        m.size = 9000;
        m.phase = Phase::Done {
            again: now + Duration::from_secs(600),
        };
        // Several tokens of one datagram are one loss; small datagrams do not count.
        for seq in 0..SUSPECT_LOSSES as u64 - 1 {
            m.on_lost(seq, 9000);
            m.on_lost(seq, 5000);
            m.on_lost(100 + seq, 1000);
        }
        assert!(!m.is_confirming());
        // A smaller datagram acknowledged does not end the run.
        m.on_acked(2000);
        m.on_lost(50, 8000);
        assert!(m.is_confirming());
        assert_eq!(m.size(), 9000, "the size is kept while confirming");
        m.poll(now);
        assert_eq!(
            m.want(),
            Some(Want {
                size: 9000,
                companion: false
            })
        );
        m.probe_sent(m.want().unwrap(), 1, 9000, now, ms(10));
        assert_eq!(
            m.want(),
            Some(Want {
                size: 1200,
                companion: true
            })
        );
        m.on_acked(8000);
        assert!(!m.is_confirming());
        assert_eq!(m.size(), 9000);
    }
}
