//! A rate-based controller in the spirit of BBR (v1, with a loss response of its own).
//!
//! It estimates the bottleneck bandwidth (the largest delivery rate of the last ten round
//! trips) and the propagation round trip (the smallest RTT of the last ten seconds), paces
//! tokens at the bandwidth times a gain that cycles to probe for more, and keeps about two
//! bandwidth-delay products in flight (plus what ACK aggregation needs). The pace never
//! falls below the minimum window per smoothed round trip: an estimate made of samples the
//! pacer itself held down would otherwise only measure its own crawl again. Windows count
//! in datagrams of the size in use ([`Bbr::set_mss`], as path MTU discovery changes it).
//!
//! Random loss does not slow it down: BBRv1 ignores loss, and BBRv3 gives up above 2 %.
//! Ignoring it is not enough beyond about a fifth: a sample then measures what got through,
//! below what the path took in, and with the window half full of losses not yet declared
//! the estimate shrinks round after round. So the loss every recent stretch of traffic met
//! ([`RandomLoss`]: a queue that overflows now and then leaves stretches without loss) is
//! taken as the path's own, and each sample is made up for it, never above the rate its
//! bytes were sent at.
//!
//! Loss that comes with a queue is another matter: a round trip whose losses exceed
//! [`LOSS_THRESHOLD`] counts as congestion only if its smallest RTT stood well above the
//! minimum, that is when a queue was building: then the bytes in flight are capped below
//! what caused it, and startup ends. "Well above" is by more
//! than a quarter of the minimum and more than the path's jitter puts it there by chance
//! (`round_rtt.rs`: a queue raises every sample of a round, jitter only some, so the spread
//! of a round's samples above its smallest tells the two apart); a round of few samples is
//! judged with those of the rounds before it.
//!
//! Sharing a bottleneck with TCP: after a cut the cap *regrows along CUBIC's curve* (RFC
//! 9438, section 4.2), `W_max + C (t - K)^3` datagrams `t` seconds after the cut: fast at
//! first, flat as it comes back to where the cut found it (`W_max`, in `K` seconds), then
//! faster again beyond it, until congestion cuts it again or it no longer binds (after the
//! cut that ends start-up, whose overshoot is no level the path held, the curve starts flat
//! at the cap). A loss-based flow sharing the queue (CUBIC) regrows by the same law, so the
//! two share the link as two CUBIC flows do. Losses of datagrams sent before a cut, declared
//! after it while the queue is still full, are the congestion that cut answered: they make
//! no second cut. A flow that does not yield to loss (BBRv1 keeps the queue full whatever it
//! loses) would take the link from one that does, and a cut of 30 % at each of its rounds of
//! loss would ratchet this flow down to nothing. So the queue is watched after a full cut
//! ([`DrainTest`]): a loss-based flow met the same overflow and backs off too, and the queue
//! falls by both cuts; one that keeps more than [`UNDRAINED`] of its delay two rounds later
//! was kept by others that did not back off, which marks them as not yielding and gives the
//! cut back down to a mild one. An overflow of a few datagrams may miss a loss-based flow
//! altogether, which then holds its bytes and the queue falls by this flow's cut alone: a
//! cut whose round lost less than [`DRAIN_LOSS_DATAGRAMS`] full datagrams' worth marks the
//! others only if the queue kept more than [`UNDRAINED_FEW_LOSSES`], more than that cut
//! alone leaves. So do a cut that comes within [`CROWDED_ROUNDS`] of the last, the cap not
//! back above that cut's plateau (the room it left was taken at once), and a smoothed loss
//! rate above [`LOSS_THRESHOLD`] although this flow backs off, and above one
//! datagram in each bandwidth-delay product (on a path of a few dozen datagrams a round
//! trip, flows that yield still lose one in most rounds between them). Against flows
//! that do not yield, cuts are mild (to 90 %, never below what the round delivered: BBRv3's
//! floor) and the cap regrows at once, by an eighth a round. Rounds spent in ProbeRTT do not
//! age the bandwidth filter. Losses later found spurious (the datagram had only been
//! overtaken) are taken back: from the round in progress, or from the round that cut the
//! cap, whose cut is undone if the round no longer counts as congested.
//!
//! A path that holds datagrams back for many round trips keeps data unacknowledged well
//! beyond the minimum RTT the window is sized by: the window gets an allowance for it,
//! grown while the bottleneck shows no queue, up to loss detection's reordering window
//! ([`Bbr::update_late`]).

use std::time::{Duration, Instant};

use super::minmax::WindowedMax;
use super::random_loss::RandomLoss;
use super::round_rtt::RoundRtt;
use super::{bytes_in, rate_of, scale, AckEvent, LossEvent, SpuriousEvent};

/// Gains are in thousandths.
const UNIT: u64 = 1000;
/// Startup pacing and window gain, 2/ln 2.
const STARTUP_GAIN: u64 = 2885;
/// Drain pacing gain, the inverse of the startup gain.
const DRAIN_GAIN: u64 = UNIT * UNIT / STARTUP_GAIN;
/// Window gain once the pipe is full.
const CWND_GAIN: u64 = 2000;
/// Pacing gains of the eight phases of bandwidth probing, each about one min RTT long.
const PROBE_GAINS: [u64; 8] = [1250, 750, 1000, 1000, 1000, 1000, 1000, 1000];
/// Pacing slightly below the estimate keeps the queue drained.
const PACING_MARGIN: u64 = 990;
/// Initial window, in datagrams.
const INITIAL_WINDOW: u64 = 10;
/// Smallest window, in datagrams.
const MIN_WINDOW: u64 = 4;
/// The minimum RTT expires after this long without a smaller sample: probe it again.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long the window stays at its minimum to measure the minimum RTT.
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// Rounds without 25 % bandwidth growth after which startup ends.
const FULL_BW_ROUNDS: u32 = 3;
/// Fraction of a round's tokens (thousandths) that may be lost before a round with a queue
/// counts as congested.
pub(crate) const LOSS_THRESHOLD: u64 = 20;
/// In startup, a lossy round counts as congested only with this many datagrams' worth of
/// bytes lost (BBRv2's `full_loss_cnt`): the first rounds are a few datagrams, and one of
/// them overtaken on a path that reorders, before the sender learnt that it does, would
/// be a loss rate far above [`LOSS_THRESHOLD`] and end startup for good.
const STARTUP_LOSS_DATAGRAMS: u64 = 8;
/// What the in-flight cap keeps of the bytes in flight of a congested round (thousandths).
const BETA: u64 = 700;
/// Most round trips of calm after a cut (no cut since) that clear the mark of flows that do
/// not yield (BBRv2's Reno-coexistence bound: a loss-based flow sharing the bottleneck
/// regrows its window in about as many rounds as it holds datagrams, at most this).
const MAX_CALM_ROUNDS: u64 = 63;
/// Rounds over which the loss rate is smoothed (an exponential average, 1/16 per round) to
/// tell a flow that yields from one that does not.
const LOSS_EWMA_SHIFT: u32 = 4;
/// The smoothed loss rate (thousandths) above which the flows sharing the queue are taken
/// not to yield to loss.
const UNYIELDING_LOSS: u64 = LOSS_THRESHOLD;
/// What the in-flight cap keeps of a congested round's bytes in flight while the flows
/// sharing the queue do not yield to loss (thousandths).
const BETA_UNYIELDING: u64 = 900;
/// A cut that comes within this many rounds of the one before, the cap not back above that
/// one's plateau, means the room the last cut left was taken at once: a flow that does not
/// yield (BBRv1 grows into it within a cycle of its probing, eight rounds), not a
/// loss-based one (whose window regrows over many rounds).
const CROWDED_ROUNDS: u64 = 8;
/// CUBIC's constant C (RFC 9438), in datagrams per second cubed: after a cut the in-flight
/// cap regrows along CUBIC's curve, back to where the cut found it in `K` seconds.
const CUBIC_C: f64 = 0.4;
/// The largest random loss rate (thousandths) the bandwidth samples are made up for.
const MAX_RANDOM_LOSS: u64 = 500;
/// The smallest queueing delay that counts as a queue building.
const MIN_QUEUE_DELAY: Duration = Duration::from_millis(1);
/// The round after a full cut whose smallest RTT tells whether the queue drained: the
/// first round's samples are of datagrams sent before the cut took effect.
const DRAIN_ROUND: u32 = 2;
/// A queue that kept more than this share (thousandths) of its delay at the cut through
/// [`DRAIN_ROUND`] did not drain: the others did not back off with this flow.
const UNDRAINED: u64 = 550;
/// A cut whose round lost less than this many full datagrams' worth of bytes was an
/// overflow of a few datagrams, which a loss-based flow sharing the queue may not have met
/// at all (paced flows take turns at the queue: each of a few drops falls on one of them):
/// it then did not back off, and the queue falls by this flow's cut alone. (BBRv2's
/// `full_loss_cnt`.)
const DRAIN_LOSS_DATAGRAMS: u64 = 8;
/// After such a cut, the share (thousandths) of its delay above which the queue did not
/// drain: what this flow's cut of 30 % alone leaves of a queue about as long as the path's
/// minimum RTT with half the bytes in flight its own (`1 - 0.3 * 2 * 0.5 = 0.7`); a queue
/// that kept more was refilled by others that do not yield.
const UNDRAINED_FEW_LOSSES: u64 = 700;

/// Phases of the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Doubling the rate every round trip until the bandwidth stops growing.
    Startup,
    /// Draining the queue startup built.
    Drain,
    /// Steady state, probing the bandwidth up and down in cycles.
    ProbeBw,
    /// Window at its minimum for a moment, to measure the minimum RTT again.
    ProbeRtt,
}

/// A round trip whose losses cut the in-flight cap, kept so that the cut can be undone if
/// its losses prove spurious.
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// When the round began and ended.
    began: Option<Instant>,
    ended: Instant,
    /// Bytes declared lost in it (less those found spurious since), and all it settled.
    lost: u64,
    total: u64,
    /// The cap before the cut.
    hi: u64,
    /// The cut ended startup.
    ended_startup: bool,
    /// What the cut judged of the others, and the regrowth and calm it ended, as they were
    /// before it: an undone cut is no evidence that the others do not yield.
    crowded: bool,
    raised: bool,
    regrow: Option<Regrow>,
    calm_rounds: u64,
}

/// The in-flight cap's regrowth after a cut, along CUBIC's curve (RFC 9438, section 4.2):
/// `w_max + C (t - k)^3` datagrams at `t` seconds since the cut, concave up to `w_max` (its
/// plateau), then convex beyond it.
#[derive(Debug, Clone, Copy)]
struct Regrow {
    epoch: Instant,
    /// The plateau: the in-flight bytes the cut found (the cap it left, after the cut that
    /// ends start-up).
    w_max: u64,
    /// Seconds from the cut back to `w_max`.
    k: f64,
}

impl Regrow {
    /// The regrowth from a cut at `now` that found `w_max` bytes in flight and left the cap
    /// at `cap`: back to `w_max` in `K = cbrt((w_max - cap) / C)` seconds.
    fn new(now: Instant, w_max: u64, cap: u64, mss: u64) -> Regrow {
        let gap = w_max.saturating_sub(cap) as f64 / mss.max(1) as f64;
        Regrow {
            epoch: now,
            w_max,
            k: (gap / CUBIC_C).cbrt(),
        }
    }

    /// The cap at `now`, in bytes.
    fn cap(&self, now: Instant, mss: u64) -> u64 {
        let t = now.saturating_duration_since(self.epoch).as_secs_f64() - self.k;
        let w = self.w_max as f64 + CUBIC_C * t * t * t * mss as f64;
        if w <= 0.0 {
            0
        } else if w >= u64::MAX as f64 {
            u64::MAX
        } else {
            w as u64
        }
    }
}

/// A full cut's question: did the queue drain with it? A loss-based flow sharing the queue
/// met the same overflow and backs off too, and the queue falls by both cuts; a flow that
/// does not yield to loss (BBRv1) keeps its bytes in flight, and the queue keeps what this
/// flow's cut alone leaves of it.
#[derive(Debug, Clone, Copy)]
struct DrainTest {
    /// The queueing delay of the round that cut (its smallest RTT above the minimum).
    queue: Duration,
    /// Rounds ended since the cut.
    rounds: u32,
    /// The in-flight cap a mild cut would have left, given back if the queue stays.
    mild: u64,
    /// The share (thousandths) of its delay above which the queue did not drain:
    /// [`UNDRAINED`], or [`UNDRAINED_FEW_LOSSES`] after a cut of few losses.
    undrained: u64,
}

/// Whether a round that settled `total` bytes, `lost` of them lost, was lossy.
fn lossy(lost: u64, total: u64) -> bool {
    lost > 0 && scale(lost, UNIT, total) > LOSS_THRESHOLD
}

/// The BBR-style controller of one destination.
#[derive(Debug, Clone)]
pub(crate) struct Bbr {
    mss: u64,
    mode: Mode,
    bw: WindowedMax,
    extra_acked: WindowedMax,
    /// The reordering allowance: the window holds the bandwidth times this much more, for
    /// datagrams the path holds back (see [`update_late`](Self::update_late)).
    late: Duration,
    min_rtt: Option<Duration>,
    min_rtt_at: Option<Instant>,
    srtt: Option<Duration>,
    initial_rtt: Duration,
    /// The longest the receiver delays an ACK: added to the minimum RTT for the
    /// bandwidth-delay product (the tokens of that long stay unacknowledged too).
    ack_delay: Duration,
    round: u64,
    /// Rounds as the bandwidth filter counts them: those spent in [`Mode::ProbeRtt`] do not
    /// count, so that its few datagrams in flight (a crawl of its own making, for as many
    /// rounds as the filter remembers on a path with a queue) do not make it forget the
    /// bandwidth it measured before.
    bw_round: u64,
    next_round_delivered: u64,
    full_bw: u64,
    full_bw_rounds: u32,
    filled: bool,
    cycle: usize,
    cycle_at: Option<Instant>,
    probe_rtt_until: Option<Instant>,
    probe_rtt_min: Option<Duration>,
    cwnd: u64,
    /// The window is below its target, so in startup it still grows by what is delivered.
    below_target: bool,
    prior_cwnd: u64,
    /// Cap on bytes in flight after congestive loss (`u64::MAX`: none).
    inflight_hi: u64,
    agg_start: Option<Instant>,
    agg_acked: u64,
    round_lost: u64,
    round_acked: u64,
    /// The round's RTT samples: its smallest, and the path's usual spread above it.
    round_rtt: RoundRtt,
    round_peak: u64,
    /// When the round in progress began (`None`: the first round).
    round_began: Option<Instant>,
    /// The last round that cut the in-flight cap.
    last_cut: Option<Cut>,
    /// The regrowth of the in-flight cap since the last cut.
    regrow: Option<Regrow>,
    /// Rounds since the in-flight cap was last cut.
    calm_rounds: u64,
    /// The loss rate of recent rounds (thousandths, smoothed over about 16 rounds), times 16
    /// (so that it decays to zero). Above [`LOSS_THRESHOLD`] although this flow backs off,
    /// the flows it shares the queue with do not yield to loss (BBRv1): cutting would only
    /// hand them the link, so cuts are then mild and never below what a round delivered.
    loss_ewma_sum: u64,
    /// The loss the path makes whatever the rate: the bandwidth samples count the bytes it
    /// takes as carried, so that the pace and the window are those of the bytes the path
    /// takes in, lost ones included, and a lossy path's estimate does not shrink round
    /// after round by its loss rate.
    random_loss: RandomLoss,
    /// Whether samples are made up for `random_loss` (`Rules::random_loss_made_up`).
    make_up_loss: bool,
    /// Whether the loss rate that marks the others as not yielding is at least one
    /// datagram a bandwidth-delay product (`Rules::unyielding_loss_per_product`).
    loss_per_product: bool,
    /// Whether the window keeps the reordering allowance (`Rules::reordering_allowance`).
    reorder_allowance: bool,
    /// Whether a cut of few losses asks more of the queue before it marks the others
    /// (`Rules::drain_test_counts_losses`).
    drain_counts_losses: bool,
    /// The last cut came within [`CROWDED_ROUNDS`] of the one before, the cap not back above
    /// that one's plateau, or the queue did not drain after a full cut ([`DrainTest`]): the
    /// room this flow left was taken at once (a flow that does not yield, as BBRv1 fills
    /// what it is left within rounds). Cleared by a calm of about as many rounds as the cap
    /// holds datagrams, or once the cap no longer binds.
    crowded: bool,
    /// The cap was raised above the last cut's plateau since (this flow probing).
    raised: bool,
    /// After a full cut: whether the queue drains with it (see [`DrainTest`]).
    drain_test: Option<DrainTest>,
    /// Bytes declared lost this round of datagrams sent since the last cut.
    round_lost_fresh: u64,
    /// How much the cap grows at its next raise: one datagram after a cut, doubling with
    /// every raise that brings no congestion.
    probe_up: u64,
    in_flight: u64,
    /// The bandwidth filter's current maximum (refreshed on every ACK).
    max_bw: u64,
    /// The window and pacing rate, refreshed after every event (read for every token).
    cached_window: u64,
    cached_pacing: u64,
}

impl Bbr {
    pub fn new(mss: u64, initial_rtt: Duration, ack_delay: Duration) -> Self {
        let mut b = Bbr {
            ack_delay,
            mss,
            mode: Mode::Startup,
            bw: WindowedMax::default(),
            extra_acked: WindowedMax::default(),
            late: Duration::ZERO,
            min_rtt: None,
            min_rtt_at: None,
            srtt: None,
            initial_rtt,
            round: 0,
            bw_round: 0,
            next_round_delivered: 0,
            full_bw: 0,
            full_bw_rounds: 0,
            filled: false,
            cycle: 0,
            cycle_at: None,
            probe_rtt_until: None,
            probe_rtt_min: None,
            cwnd: INITIAL_WINDOW * mss,
            below_target: true,
            prior_cwnd: 0,
            inflight_hi: u64::MAX,
            agg_start: None,
            agg_acked: 0,
            round_lost: 0,
            round_acked: 0,
            round_rtt: RoundRtt::default(),
            round_peak: 0,
            round_began: None,
            last_cut: None,
            regrow: None,
            calm_rounds: 0,
            probe_up: 0,
            loss_ewma_sum: 0,
            random_loss: RandomLoss::default(),
            make_up_loss: true,
            loss_per_product: true,
            reorder_allowance: true,
            drain_counts_losses: true,
            crowded: false,
            raised: false,
            drain_test: None,
            round_lost_fresh: 0,
            in_flight: 0,
            max_bw: 0,
            cached_window: 0,
            cached_pacing: 0,
        };
        b.refresh();
        b
    }

    /// Recomputes what is read per token: the window and the pacing rate.
    fn refresh(&mut self) {
        let hi = self.inflight_hi;
        let mut w = self.cwnd.min(hi.max(self.min_window()));
        if self.mode == Mode::ProbeRtt {
            w = w.min(self.min_window());
        }
        self.cached_window = w;
        let rtt = self.srtt.or(self.min_rtt).unwrap_or(self.initial_rtt);
        let rate = match self.bandwidth() {
            Some(bw) => scale(scale(bw, self.pacing_gain(), UNIT), PACING_MARGIN, UNIT),
            None => scale(rate_of(self.cwnd, rtt), STARTUP_GAIN, UNIT),
        };
        // Never slower than the minimum window per round trip: a bandwidth estimate that
        // fell below it (samples taken while pacing itself held the sender back) would
        // otherwise only ever measure its own pace, and climb back 25 % per probe cycle.
        self.cached_pacing = rate.max(rate_of(self.min_window(), rtt)).max(1);
    }

    /// Whether the flows sharing the queue are taken not to yield to loss: the smoothed
    /// loss rate stays above [`UNYIELDING_LOSS`] although this flow backs off, and above
    /// one datagram in each bandwidth-delay product ([`Bbr::unyielding_loss`]), or
    /// congestion came back within [`CROWDED_ROUNDS`] of the last cut (`crowded`).
    fn unyielding(&self) -> bool {
        self.mode != Mode::Startup && (self.loss_rate() > self.unyielding_loss() || self.crowded)
    }

    /// The smoothed loss rate (thousandths) above which the others are taken not to yield:
    /// [`UNYIELDING_LOSS`], or one datagram in each bandwidth-delay product where that is
    /// more (`Rules::unyielding_loss_per_product`). On a small path (a few dozen datagrams a
    /// round trip) flows that do yield, each backing off at its losses, still lose a
    /// datagram in most rounds between them: 2 % there is no sign of one that ignores loss
    /// (BENCHMARKS.md, "Fairness on a small path").
    fn unyielding_loss(&self) -> u64 {
        if !self.loss_per_product {
            return UNYIELDING_LOSS;
        }
        let datagrams = self.bdp(UNIT).map_or(1, |b| (b / self.mss.max(1)).max(1));
        UNYIELDING_LOSS.max(UNIT / datagrams)
    }

    /// The smoothed loss rate of recent rounds, in thousandths.
    fn loss_rate(&self) -> u64 {
        self.loss_ewma_sum >> LOSS_EWMA_SHIFT
    }

    /// A delivery rate made up for the path's random loss: the rate of the bytes sent to
    /// deliver it, never above the rate they were sent at (`send_rate`, 0 if unknown).
    fn made_up(&self, delivery_rate: u64, send_rate: u64) -> u64 {
        let p = self.random_loss.rate().min(MAX_RANDOM_LOSS);
        if p == 0 || send_rate == 0 || !self.make_up_loss {
            return delivery_rate;
        }
        scale(delivery_rate, UNIT, UNIT - p)
            .min(send_rate)
            .max(delivery_rate)
    }

    /// Rounds of calm after a cut that clear the mark of flows that do not yield: about as
    /// many as the cap holds datagrams.
    fn calm_wait(&self) -> u64 {
        (self.inflight_hi / self.mss.max(1)).clamp(1, MAX_CALM_ROUNDS)
    }

    fn min_window(&self) -> u64 {
        MIN_WINDOW * self.mss
    }

    /// Whether samples are made up for the path's random loss (`Rules::random_loss_made_up`).
    pub fn set_random_loss_made_up(&mut self, on: bool) {
        self.make_up_loss = on;
    }

    /// Whether the loss rate that marks the others as not yielding is at least one
    /// datagram a bandwidth-delay product (`Rules::unyielding_loss_per_product`).
    pub fn set_unyielding_loss_per_product(&mut self, on: bool) {
        self.loss_per_product = on;
    }

    /// Whether the window keeps the reordering allowance (`Rules::reordering_allowance`).
    pub fn set_reorder_allowance(&mut self, on: bool) {
        self.reorder_allowance = on;
    }

    /// Whether a cut of few losses asks more of the queue before it marks the others
    /// (`Rules::drain_test_counts_losses`).
    pub fn set_drain_test_counts_losses(&mut self, on: bool) {
        self.drain_counts_losses = on;
    }

    /// The drain test's bound after a cut whose round lost `lost` bytes: an overflow of
    /// fewer than [`DRAIN_LOSS_DATAGRAMS`] datagrams may have missed the flows that yield,
    /// and the queue then keeps what this flow's cut alone leaves of it.
    fn undrained(&self, lost: u64) -> u64 {
        if self.drain_counts_losses && lost < DRAIN_LOSS_DATAGRAMS.saturating_mul(self.mss) {
            UNDRAINED_FEW_LOSSES
        } else {
            UNDRAINED
        }
    }

    /// The current phase.
    #[cfg(test)]
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Estimated bottleneck bandwidth, bytes per second.
    pub fn bandwidth(&self) -> Option<u64> {
        Some(self.max_bw).filter(|b| *b > 0)
    }

    /// Minimum RTT seen (within its window).
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The bandwidth-delay product times `gain` (thousandths), if both are known, over the
    /// minimum RTT plus the receiver's ACK delay.
    fn bdp(&self, gain: u64) -> Option<u64> {
        let bw = self.bandwidth()?;
        let rtt = self.min_rtt?.saturating_add(self.ack_delay);
        Some(scale(bytes_in(bw, rtt), gain, UNIT))
    }

    fn pacing_gain(&self) -> u64 {
        match self.mode {
            Mode::Startup => STARTUP_GAIN,
            Mode::Drain => DRAIN_GAIN,
            Mode::ProbeBw => PROBE_GAINS[self.cycle],
            Mode::ProbeRtt => UNIT,
        }
    }

    /// Whether the window is still growing by what each round delivers (startup, below its
    /// target and under no cap): what the sender sends in the next round may be twice this
    /// one's.
    pub fn is_growing(&self) -> bool {
        self.mode == Mode::Startup && self.below_target && self.inflight_hi == u64::MAX
    }

    fn cwnd_gain(&self) -> u64 {
        match self.mode {
            Mode::Startup | Mode::Drain => STARTUP_GAIN,
            Mode::ProbeBw | Mode::ProbeRtt => CWND_GAIN,
        }
    }

    pub fn on_sent(&mut self, _now: Instant, _bytes: u64, in_flight: u64) {
        self.in_flight = in_flight;
        self.round_peak = self.round_peak.max(in_flight);
    }

    pub fn on_ack(&mut self, ev: &AckEvent) {
        let now = ev.now;
        self.in_flight = ev.in_flight;
        if ev.srtt.is_some() {
            self.srtt = ev.srtt;
        }
        let mut round_start = false;
        if let Some(rs) = ev.rate {
            if rs.prior_delivered >= self.next_round_delivered {
                self.next_round_delivered = ev.delivered;
                self.round += 1;
                if self.mode != Mode::ProbeRtt {
                    self.bw_round += 1;
                }
                round_start = true;
            }
            let long_enough = self.min_rtt.is_none_or(|m| rs.interval >= m);
            let bw = self.bw.get(self.bw_round);
            let rate = self.made_up(rs.delivery_rate, rs.send_rate);
            if rate > 0 && long_enough && (!rs.app_limited || rate >= bw) {
                self.bw.update(self.bw_round, rate);
            }
        }
        self.max_bw = self.bw.get(self.bw_round);
        if let Some(rtt) = ev.rtt {
            self.round_rtt.sample(rtt);
            if self.min_rtt.is_none_or(|m| rtt <= m) {
                self.min_rtt = Some(rtt);
                self.min_rtt_at = Some(now);
            }
            if self.mode == Mode::ProbeRtt {
                self.probe_rtt_min = Some(self.probe_rtt_min.map_or(rtt, |m| m.min(rtt)));
            }
        }
        self.update_aggregation(now, ev.acked);
        self.round_acked = self.round_acked.saturating_add(ev.acked);
        if round_start {
            self.end_round(ev);
            self.round_began = Some(now);
        }
        self.update_mode(now, round_start, ev);
        self.update_cwnd(ev.acked);
        self.refresh();
    }

    /// ACK aggregation: bytes acknowledged beyond what the bandwidth explains since the
    /// epoch began, remembered over ten rounds and added to the window.
    fn update_aggregation(&mut self, now: Instant, acked: u64) {
        let Some(bw) = self.bandwidth() else { return };
        let start = *self.agg_start.get_or_insert(now);
        let expected = bytes_in(bw, now.saturating_duration_since(start));
        if self.agg_acked <= expected {
            self.agg_start = Some(now);
            self.agg_acked = 0;
        }
        self.agg_acked = self.agg_acked.saturating_add(acked);
        let expected = bytes_in(
            bw,
            now.saturating_duration_since(self.agg_start.unwrap_or(now)),
        );
        let extra = self.agg_acked.saturating_sub(expected).min(self.cwnd);
        self.extra_acked.update(self.round, extra);
    }

    /// A round trip ended: judge its losses.
    fn end_round(&mut self, ev: &AckEvent) {
        let lost = self.round_lost;
        let total = lost.saturating_add(self.round_acked);
        // Losses of datagrams sent before the last cut are the congestion it answered.
        let lossy = lossy(self.round_lost_fresh, total);
        // A queue raises every sample; jitter raises some. So the round's smallest sample
        // counts as a queue only above what the path's jitter alone puts it at.
        let queue = match (self.round_rtt.min(), self.min_rtt) {
            (Some(r), Some(m)) => {
                let margin = (m / 4).max(MIN_QUEUE_DELAY).max(self.round_rtt.spread());
                r.saturating_sub(m) > margin
            }
            _ => false,
        };
        let enough = self.mode != Mode::Startup || lost >= STARTUP_LOSS_DATAGRAMS * self.mss;
        if total > 0 {
            let rate = scale(lost, UNIT, total).min(UNIT);
            self.loss_ewma_sum =
                self.loss_ewma_sum - (self.loss_ewma_sum >> LOSS_EWMA_SHIFT) + rate;
        }
        self.random_loss.end_round(lost, total, self.mss);
        self.judge_drain();
        let unyielding = self.unyielding();
        if lossy && queue && enough {
            let peak = self.round_peak.max(ev.in_flight);
            let base = peak.max(self.bdp(UNIT).unwrap_or(0));
            self.last_cut = Some(Cut {
                began: self.round_began,
                ended: ev.now,
                lost,
                total,
                hi: self.inflight_hi,
                ended_startup: self.mode == Mode::Startup,
                crowded: self.crowded,
                raised: self.raised,
                regrow: self.regrow,
                calm_rounds: self.calm_rounds,
            });
            // Congestion back within a few rounds of the last cut, the cap not back above
            // where that cut found it: the room this flow left was taken at once, by a flow
            // that does not yield.
            self.crowded = self.inflight_hi != u64::MAX
                && !self.raised
                && self.calm_rounds < CROWDED_ROUNDS.min(self.calm_wait());
            self.raised = false;
            let beta = if unyielding || self.crowded {
                BETA_UNYIELDING
            } else {
                BETA
            };
            // Against others that do not yield, a cut goes no lower than what this flow
            // delivered in the round (BBRv3's floor of its short-term bound): below it, each
            // of their rounds of loss would ratchet it down to nothing. So such a cut can
            // leave the cap above where the last one put it, when the round delivered more
            // (bytes sent before that cut: BENCHMARKS.md, "Losses declared after a cut").
            let floor = if unyielding || self.crowded {
                self.round_acked.min(base)
            } else {
                0
            };
            self.inflight_hi = scale(base, beta, UNIT).max(floor).max(self.min_window());
            self.drain_test = match (self.round_rtt.min(), self.min_rtt) {
                (Some(r), Some(m)) if beta == BETA => Some(DrainTest {
                    queue: r.saturating_sub(m),
                    rounds: 0,
                    mild: scale(base, BETA_UNYIELDING, UNIT).max(self.round_acked.min(base)),
                    undrained: self.undrained(lost),
                }),
                _ => None,
            };
            // Start-up's last round overshot: what it had in flight is no level the path
            // held, so the curve starts at the cap and only probes beyond it.
            let plateau = if self.mode == Mode::Startup {
                self.inflight_hi
            } else {
                base
            };
            self.regrow = Some(Regrow::new(ev.now, plateau, self.inflight_hi, self.mss));
            if self.mode == Mode::Startup {
                self.filled = true;
                self.mode = Mode::Drain;
            } else if self.mode == Mode::ProbeBw && self.cycle == 0 {
                // Stop probing up: go to the draining phase.
                self.cycle = 1;
                self.cycle_at = Some(ev.now);
            }
            self.calm_rounds = 0;
            self.probe_up = self.mss;
        } else if self.inflight_hi != u64::MAX {
            self.regrow_cap(ev.now, unyielding);
        }
        self.update_late(ev, lossy && queue && enough);
        self.round_lost = 0;
        self.round_lost_fresh = 0;
        self.round_acked = 0;
        self.round_rtt.end_round();
        self.round_peak = ev.in_flight;
    }

    /// At the end of a round, the reordering allowance. On a path that holds datagrams back
    /// (loss detection's reordering window `ev.reorder` is open) data stays unacknowledged
    /// well beyond the minimum RTT the window is sized by, so a window of two products
    /// binds below the bandwidth and the estimate, made of what that window delivers,
    /// settles ever lower. A round in ProbeBw that filled the window with no queue at the
    /// bottleneck (its smallest RTT within a quarter of the minimum, 1 ms at least: the
    /// datagrams held back raise only some samples) adds a quarter of the round's length
    /// (of the minimum RTT at least: the allowance grows at the same pace in time however
    /// far the holds stretch the rounds), up to the reordering window; a round with a
    /// queue halves it, a congestion cut (`cut`) and a path no longer seen to reorder
    /// clear it.
    fn update_late(&mut self, ev: &AckEvent, cut: bool) {
        // Cleared first: a round without an RTT sample says nothing of a queue, but a
        // path no longer seen to reorder needs no allowance whatever the round measured.
        if cut || ev.reorder.is_zero() || !self.reorder_allowance {
            self.late = Duration::ZERO;
            return;
        }
        let (Some(r), Some(m)) = (self.round_rtt.min(), self.min_rtt) else {
            return;
        };
        let queued = r.saturating_sub(m) > (m / 4).max(MIN_QUEUE_DELAY);
        let filled = self.round_peak.saturating_add(self.mss) >= self.cached_window;
        if queued {
            self.late /= 2;
        } else if filled && self.mode == Mode::ProbeBw {
            // A quarter of the round's length: held datagrams stretch the rounds, and a
            // growth counted per round would then slow down as much in time.
            let len = self
                .round_began
                .map_or(m, |b| ev.now.saturating_duration_since(b))
                .max(m);
            self.late = self.late.saturating_add(len / 4).min(ev.reorder);
        }
    }

    /// At the end of a round: after a full cut, whether the queue drained with it. Judged
    /// on the smallest RTT of the [`DRAIN_ROUND`]th round since (the first one's samples
    /// are of datagrams sent before the cut): a queue that kept more than the test's bound
    /// ([`UNDRAINED`], or [`UNDRAINED_FEW_LOSSES`] after a cut of few losses) of its delay
    /// was kept by others that did not back off. They are marked as not yielding
    /// (`crowded`), and the cut is given back down to a mild one.
    fn judge_drain(&mut self) {
        let Some(test) = &mut self.drain_test else {
            return;
        };
        test.rounds += 1;
        if test.rounds < DRAIN_ROUND {
            return;
        }
        let test = *test;
        self.drain_test = None;
        let (Some(r), Some(m)) = (self.round_rtt.min(), self.min_rtt) else {
            return;
        };
        let left = r.saturating_sub(m);
        let kept = left.as_nanos().saturating_mul(UNIT as u128)
            > test.queue.as_nanos().saturating_mul(test.undrained as u128);
        if kept && left > MIN_QUEUE_DELAY && self.inflight_hi != u64::MAX {
            self.crowded = true;
            self.inflight_hi = self.inflight_hi.max(test.mild);
        }
    }

    /// A round without congestion under the cap: it regrows, along CUBIC's curve, or at
    /// once against flows that do not yield (`unyielding`), until it no longer binds.
    fn regrow_cap(&mut self, now: Instant, unyielding: bool) {
        self.calm_rounds += 1;
        if self.calm_rounds >= self.calm_wait() {
            // As long a calm as a loss-based flow's regrowth: no longer crowded.
            self.crowded = false;
        }
        let grown = if unyielding {
            let step = self.probe_up.max(self.inflight_hi / 8);
            self.probe_up = self.probe_up.saturating_mul(2).max(self.mss);
            self.inflight_hi.saturating_add(step.max(self.mss))
        } else {
            let cubic = self.regrow.map_or(0, |r| r.cap(now, self.mss));
            self.inflight_hi.max(cubic)
        };
        if self.regrow.is_none_or(|r| grown > r.w_max) {
            // Past the plateau: probing.
            self.raised = true;
        }
        let enough = self
            .bdp(CWND_GAIN)
            .map_or(u64::MAX, |b| b.saturating_mul(2));
        self.inflight_hi = if grown >= enough { u64::MAX } else { grown };
        if self.inflight_hi == u64::MAX {
            self.crowded = false;
        }
    }

    fn update_mode(&mut self, now: Instant, round_start: bool, ev: &AckEvent) {
        let app_limited = ev.rate.is_some_and(|r| r.app_limited);
        if self.mode == Mode::Startup && round_start && !app_limited {
            let bw = self.bw.get(self.bw_round);
            if bw >= scale(self.full_bw, 5, 4) {
                self.full_bw = bw;
                self.full_bw_rounds = 0;
            } else {
                self.full_bw_rounds += 1;
                if self.full_bw_rounds >= FULL_BW_ROUNDS {
                    self.filled = true;
                    self.mode = Mode::Drain;
                }
            }
        }
        if self.mode == Mode::Drain && self.bdp(UNIT).is_none_or(|b| ev.in_flight <= b) {
            self.enter_probe_bw(now);
        }
        if self.mode == Mode::ProbeBw {
            let phase = self.min_rtt.unwrap_or(self.initial_rtt);
            let elapsed = self
                .cycle_at
                .map_or(Duration::MAX, |t| now.saturating_duration_since(t));
            let drained = self.cycle == 1 && self.bdp(UNIT).is_some_and(|b| ev.in_flight <= b);
            if elapsed >= phase || drained {
                self.cycle = (self.cycle + 1) % PROBE_GAINS.len();
                self.cycle_at = Some(now);
            }
        }
        let expired = self
            .min_rtt_at
            .is_some_and(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
        if expired && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
            self.probe_rtt_until = None;
            self.probe_rtt_min = None;
        }
        if self.mode == Mode::ProbeRtt {
            if self.probe_rtt_until.is_none() && ev.in_flight <= self.min_window() {
                self.probe_rtt_until = Some(now + PROBE_RTT_TIME);
            }
            if self.probe_rtt_until.is_some_and(|t| now >= t) {
                if let Some(m) = self.probe_rtt_min {
                    self.min_rtt = Some(m);
                }
                self.min_rtt_at = Some(now);
                self.cwnd = self.cwnd.max(self.prior_cwnd);
                self.prior_cwnd = 0;
                if self.filled {
                    self.enter_probe_bw(now);
                } else {
                    self.mode = Mode::Startup;
                }
            }
        }
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        // Start in a cruising phase: the queue startup built was just drained.
        self.cycle = 2;
        self.cycle_at = Some(now);
    }

    fn update_cwnd(&mut self, acked: u64) {
        let late = self.bandwidth().map_or(0, |bw| bytes_in(bw, self.late));
        let target = self.bdp(self.cwnd_gain()).map(|b| {
            b.saturating_add(self.extra_acked.get(self.round))
                .saturating_add(late)
                .saturating_add(3 * self.mss)
        });
        match target {
            Some(t) if self.filled => self.cwnd = self.cwnd.saturating_add(acked).min(t),
            Some(t) if self.cwnd < t => self.cwnd = self.cwnd.saturating_add(acked),
            Some(_) => {}
            None => self.cwnd = self.cwnd.saturating_add(acked),
        }
        self.cwnd = self.cwnd.max(self.min_window());
        self.below_target = target.is_none_or(|t| self.cwnd < t);
    }

    pub fn on_lost(&mut self, ev: &LossEvent) {
        self.in_flight = ev.in_flight;
        self.round_lost = self.round_lost.saturating_add(ev.lost);
        // Losses of datagrams sent before the last cut (not undone) are its aftermath, the
        // congestion it answered, not new congestion.
        if self.last_cut.is_none_or(|c| ev.sent_at >= c.ended) {
            self.round_lost_fresh = self.round_lost_fresh.saturating_add(ev.lost);
        }
    }

    /// Losses declared at `ev.lost_at` were spurious: they no longer count against the
    /// round in progress, or, declared in the round that last cut the in-flight cap, they
    /// are taken from its count, and if it no longer counts as lossy the cut is undone (the
    /// cap it replaced returns, and startup resumes if the cut ended it).
    pub fn on_spurious(&mut self, ev: &SpuriousEvent) {
        if self.round_began.is_none_or(|b| ev.lost_at >= b) {
            self.round_lost = self.round_lost.saturating_sub(ev.lost);
            self.round_lost_fresh = self.round_lost_fresh.saturating_sub(ev.lost);
            return;
        }
        let Some(cut) = &mut self.last_cut else {
            return;
        };
        if cut.began.is_some_and(|b| ev.lost_at < b) || ev.lost_at >= cut.ended {
            return;
        }
        cut.lost = cut.lost.saturating_sub(ev.lost);
        if lossy(cut.lost, cut.total) {
            return;
        }
        let cut = *cut;
        self.last_cut = None;
        // Nor does the queue after it tell anything of the others.
        self.drain_test = None;
        self.inflight_hi = self.inflight_hi.max(cut.hi);
        // Nor did it judge the others: their marks return as they were, the regrowth it
        // replaced goes on, and the rounds since the cut count in the calm it interrupted.
        self.crowded = cut.crowded;
        self.raised |= cut.raised;
        self.regrow = cut.regrow;
        self.calm_rounds = cut.calm_rounds.saturating_add(self.calm_rounds);
        if self.calm_rounds >= self.calm_wait() || self.inflight_hi == u64::MAX {
            self.crowded = false;
        }
        if cut.ended_startup && matches!(self.mode, Mode::Drain | Mode::ProbeBw) {
            self.mode = Mode::Startup;
            self.filled = false;
            self.full_bw_rounds = 0;
        }
        self.refresh();
    }

    pub fn on_rto(&mut self, _now: Instant) {
        self.prior_cwnd = self.prior_cwnd.max(self.cwnd);
        self.cwnd = self.min_window();
        self.in_flight = 0;
        self.refresh();
    }

    /// Datagrams are `mss` bytes from now on (path MTU discovery found another size).
    pub fn set_mss(&mut self, mss: u64) {
        self.mss = mss.max(1);
        self.refresh();
    }

    pub fn window(&self) -> u64 {
        self.cached_window
    }

    pub fn pacing_rate(&self) -> Option<u64> {
        Some(self.cached_pacing)
    }
}

#[cfg(test)]
mod tests;
