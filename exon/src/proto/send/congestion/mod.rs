//! Congestion control: how many bytes of tokens may be in flight to one destination, and at
//! what rate they leave.
//!
//! Every S record owns a [`Controller`], soft state like the rest of the record. The sender
//! tells it what it sent ([`Controller::on_sent`]), what an acknowledgement settled
//! ([`Controller::on_ack`]), what loss detection declared lost ([`Controller::on_lost`]) and
//! when the retransmission timer fired ([`Controller::on_rto`]); it asks for the congestion
//! window ([`Controller::window`]) and the pacing rate ([`Controller::pacing_rate`]).
//! Dispatch is a plain enum: no allocation, no trait object per record.
//!
//! Two algorithms, chosen with [`Config::flow.congestion`](crate::proto::FlowConfig::congestion):
//! [`CongestionControl::Bbr`] (the default, in [`bbr`]): rate-based, from delivery-rate and
//! minimum-RTT estimates, tolerant of random loss; [`CongestionControl::NewReno`] (in
//! [`newreno`]): the classic loss-based window. [`CongestionControl::Off`] keeps only the
//! receiver's slots as the limit (the behaviour before congestion control existed).

use std::time::{Duration, Instant};

pub(crate) mod bbr;
pub(crate) mod minmax;
pub(crate) mod newreno;
pub(crate) mod random_loss;
pub(crate) mod rate;
pub(crate) mod round_rtt;

pub(crate) use rate::{DeliveryRate, RateSample, SendState};

/// Which congestion controller the sender records use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CongestionControl {
    /// Rate-based, in the spirit of BBR: paces at the estimated bottleneck bandwidth and
    /// keeps about two bandwidth-delay products in flight. Random loss alone does not slow
    /// it down; loss that comes with a growing round-trip time (a queue filling up) caps
    /// what it keeps in flight. The default.
    #[default]
    Bbr,
    /// NewReno (RFC 6582 / RFC 9002 style): slow start, additive increase, halving once per
    /// round trip with losses, paced at 1.25 times the window per smoothed RTT.
    NewReno,
    /// No congestion control: tokens in flight are bounded only by the receiver's slots
    /// ([`Config::flow.window`](crate::proto::FlowConfig::window)), and nothing is paced.
    Off,
}

/// What the sender record of one destination knows of the path: read with
/// [`Node::path`](crate::proto::Node::path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathStats {
    /// Congestion window in bytes (`u64::MAX` with [`CongestionControl::Off`]).
    pub window: u64,
    /// Bytes of tokens in flight.
    pub in_flight: u64,
    /// Pacing rate in bytes per second, if paced.
    pub pacing_rate: Option<u64>,
    /// Estimated bottleneck bandwidth in bytes per second (BBR only).
    pub bandwidth: Option<u64>,
    /// Minimum RTT seen (BBR only).
    pub min_rtt: Option<Duration>,
    /// Smoothed RTT.
    pub srtt: Option<Duration>,
    /// The RTT's variation (RFC 6298's `RTTVAR`), once the RTT is measured.
    pub rtt_var: Option<Duration>,
    /// The size of datagrams sent to the destination now (path MTU discovery's), in bytes.
    pub datagram: usize,
    /// Slots held at the destination: envelopes plus unacknowledged tokens.
    pub slots: u64,
    /// Envelopes: slots granted and not yet used by a token.
    pub envelopes: u64,
    /// The flow-control window now: the most slots the sender holds (it follows the
    /// congestion window, up to `Config::flow.window` and what the receiver allows).
    pub slot_window: u64,
}

/// What one acknowledgement (one verdict frame) settled, for the controller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckEvent {
    /// When it arrived.
    pub now: Instant,
    /// Bytes of tokens newly acknowledged.
    pub acked: u64,
    /// Bytes still in flight after it.
    pub in_flight: u64,
    /// The delivery-rate sample of the newest token it acknowledged, if any.
    pub rate: Option<RateSample>,
    /// Round-trip time of the newest token sent once that it acknowledged, if any.
    pub rtt: Option<Duration>,
    /// The smoothed RTT of the record, if measured.
    pub srtt: Option<Duration>,
    /// Bytes delivered over the record's life, this acknowledgement included.
    pub delivered: u64,
    /// How long loss detection waits for a datagram overtaken by later ones (its
    /// reordering window; zero on a path not seen to reorder).
    pub reorder: Duration,
}

/// Tokens declared lost, for the controller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LossEvent {
    /// When the loss was declared.
    pub now: Instant,
    /// Bytes lost.
    pub lost: u64,
    /// When the newest lost token was sent (losses of tokens sent before the current
    /// recovery started do not cut the window again).
    pub sent_at: Instant,
    /// Bytes still in flight after removing the lost ones.
    pub in_flight: u64,
}

/// Losses found spurious: what was declared lost had arrived (see `docs/wire.md`, "Loss
/// recovery and reordering"), so the controller undoes its response to them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpuriousEvent {
    /// Bytes that were declared lost and were not.
    pub lost: u64,
    /// When the earliest of them was declared lost.
    pub lost_at: Instant,
}

/// The congestion controller of one destination: enum dispatch over the algorithms.
#[derive(Debug, Clone)]
pub(crate) struct Controller {
    inner: Inner,
}

#[derive(Debug, Clone)]
enum Inner {
    /// Boxed: its filters make it ten times the size of the others.
    Bbr(Box<bbr::Bbr>),
    NewReno(newreno::NewReno),
    Off,
}

impl Controller {
    /// A controller of kind `kind` for datagrams of at most `mss` bytes, assuming a round trip
    /// of `initial_rtt` until one is measured, and ACKs delayed by up to `ack_delay`.
    pub fn new(
        kind: CongestionControl,
        mss: u64,
        initial_rtt: Duration,
        ack_delay: Duration,
    ) -> Self {
        let inner = match kind {
            CongestionControl::Bbr => {
                Inner::Bbr(Box::new(bbr::Bbr::new(mss, initial_rtt, ack_delay)))
            }
            CongestionControl::NewReno => Inner::NewReno(newreno::NewReno::new(mss, initial_rtt)),
            CongestionControl::Off => Inner::Off,
        };
        Controller { inner }
    }

    /// The controller, with BBR's samples made up for the path's random loss or not
    /// (`Rules::random_loss_made_up`).
    pub fn with_random_loss_made_up(mut self, on: bool) -> Self {
        if let Inner::Bbr(c) = &mut self.inner {
            c.set_random_loss_made_up(on);
        }
        self
    }

    /// The controller, with BBR's loss rate that marks the others as not yielding at least
    /// one datagram a bandwidth-delay product or not (`Rules::unyielding_loss_per_product`).
    pub fn with_unyielding_loss_per_product(mut self, on: bool) -> Self {
        if let Inner::Bbr(c) = &mut self.inner {
            c.set_unyielding_loss_per_product(on);
        }
        self
    }

    /// The controller, with BBR's drain test asking more of the queue after a cut of few
    /// losses or not (`Rules::drain_test_counts_losses`).
    pub fn with_drain_test_counts_losses(mut self, on: bool) -> Self {
        if let Inner::Bbr(c) = &mut self.inner {
            c.set_drain_test_counts_losses(on);
        }
        self
    }

    /// The controller, with BBR's window keeping the reordering allowance or not
    /// (`Rules::reordering_allowance`).
    pub fn with_reorder_allowance(mut self, on: bool) -> Self {
        if let Inner::Bbr(c) = &mut self.inner {
            c.set_reorder_allowance(on);
        }
        self
    }

    /// Whether any limit applies (false for [`CongestionControl::Off`]).
    pub fn is_enabled(&self) -> bool {
        !matches!(self.inner, Inner::Off)
    }

    /// `bytes` of tokens were put on the wire; `in_flight` counts them already.
    pub fn on_sent(&mut self, now: Instant, bytes: u64, in_flight: u64) {
        match &mut self.inner {
            Inner::Bbr(c) => c.on_sent(now, bytes, in_flight),
            Inner::NewReno(c) => c.on_sent(now, bytes, in_flight),
            Inner::Off => {}
        }
    }

    /// An acknowledgement settled some tokens.
    pub fn on_ack(&mut self, ev: &AckEvent) {
        match &mut self.inner {
            Inner::Bbr(c) => c.on_ack(ev),
            Inner::NewReno(c) => c.on_ack(ev),
            Inner::Off => {}
        }
    }

    /// Loss detection declared tokens lost.
    pub fn on_lost(&mut self, ev: &LossEvent) {
        match &mut self.inner {
            Inner::Bbr(c) => c.on_lost(ev),
            Inner::NewReno(c) => c.on_lost(ev),
            Inner::Off => {}
        }
    }

    /// Losses declared earlier were spurious: the response to them is undone.
    pub fn on_spurious(&mut self, ev: &SpuriousEvent) {
        match &mut self.inner {
            Inner::Bbr(c) => c.on_spurious(ev),
            Inner::NewReno(c) => c.on_spurious(ev),
            Inner::Off => {}
        }
    }

    /// The retransmission timer fired: every token in flight was given up for lost.
    pub fn on_rto(&mut self, now: Instant) {
        match &mut self.inner {
            Inner::Bbr(c) => c.on_rto(now),
            Inner::NewReno(c) => c.on_rto(now),
            Inner::Off => {}
        }
    }

    /// The datagrams grew (or shrank) to `mss` bytes (path MTU discovery): the controller
    /// counts its floors (the minimum window, and with it BBR's pacing floor of that window
    /// per round trip) and its steps in datagrams of that size from now on.
    pub fn set_mss(&mut self, mss: u64) {
        match &mut self.inner {
            Inner::Bbr(c) => c.set_mss(mss),
            Inner::NewReno(c) => c.set_mss(mss),
            Inner::Off => {}
        }
    }

    /// Bytes of tokens that may be in flight (`u64::MAX` when off).
    pub fn window(&self) -> u64 {
        match &self.inner {
            Inner::Bbr(c) => c.window(),
            Inner::NewReno(c) => c.window(),
            Inner::Off => u64::MAX,
        }
    }

    /// Whether the window doubles each round trip (BBR's startup, NewReno's slow start):
    /// what the sender sends in the next round may be twice this one's.
    pub fn is_growing(&self) -> bool {
        match &self.inner {
            Inner::Bbr(c) => c.is_growing(),
            Inner::NewReno(c) => c.is_growing(),
            Inner::Off => false,
        }
    }

    /// Bytes per second tokens should leave at, or `None` for no pacing.
    pub fn pacing_rate(&self) -> Option<u64> {
        match &self.inner {
            Inner::Bbr(c) => c.pacing_rate(),
            Inner::NewReno(c) => c.pacing_rate(),
            Inner::Off => None,
        }
    }

    /// The estimated bottleneck bandwidth in bytes per second (BBR only).
    pub fn bandwidth(&self) -> Option<u64> {
        match &self.inner {
            Inner::Bbr(c) => c.bandwidth(),
            _ => None,
        }
    }

    /// The minimum round-trip time seen (BBR only).
    pub fn min_rtt(&self) -> Option<Duration> {
        match &self.inner {
            Inner::Bbr(c) => c.min_rtt(),
            _ => None,
        }
    }
}

/// `bytes * 1e9 / nanos` without overflow: a rate in bytes per second.
pub(crate) fn rate_of(bytes: u64, over: Duration) -> u64 {
    let ns = over.as_nanos().max(1);
    u64::try_from(u128::from(bytes) * 1_000_000_000 / ns).unwrap_or(u64::MAX)
}

/// Bytes sent in `d` at `rate` bytes per second, without overflow.
pub(crate) fn bytes_in(rate: u64, d: Duration) -> u64 {
    u64::try_from(u128::from(rate) * d.as_nanos() / 1_000_000_000).unwrap_or(u64::MAX)
}

/// `x * num / den` in 128-bit arithmetic, saturating.
pub(crate) fn scale(x: u64, num: u64, den: u64) -> u64 {
    u64::try_from(u128::from(x) * u128::from(num) / u128::from(den.max(1))).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_do_not_overflow() {
        assert_eq!(rate_of(1000, Duration::from_millis(1)), 1_000_000);
        assert_eq!(rate_of(u64::MAX, Duration::ZERO), u64::MAX);
        assert_eq!(bytes_in(1_000_000, Duration::from_millis(2)), 2000);
        assert_eq!(bytes_in(u64::MAX, Duration::from_secs(3600)), u64::MAX);
        assert_eq!(scale(u64::MAX, 3, 2), u64::MAX);
        assert_eq!(scale(10, 5, 4), 12);
        assert_eq!(scale(10, 1, 0), 10);
    }

    #[test]
    fn off_never_limits() {
        let ms = Duration::from_millis;
        let mut c = Controller::new(CongestionControl::Off, 1200, ms(100), ms(2));
        assert!(!c.is_enabled());
        c.on_rto(Instant::now());
        assert_eq!(c.window(), u64::MAX);
        assert_eq!(c.pacing_rate(), None);
    }
}
