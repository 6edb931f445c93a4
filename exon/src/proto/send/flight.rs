//! The tokens in flight to one destination as loss detection, the RTT estimator and the
//! congestion controller see them.

use std::time::{Duration, Instant};

use crate::proto::send::congestion::DeliveryRate;
use crate::proto::send::fragments::Sent;
use crate::proto::send::loss::{answers_original, LossDetector, Reordering};
use crate::proto::send::rtt::Rtt;
use crate::proto::send::token::Token;

/// The tokens in flight to one destination, as loss detection and the controller see them.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    /// Transmissions in sending order, for loss detection.
    pub(super) losses: LossDetector,
    /// FRAG transmissions in sending order: a loss detector of their own, since GOT answers
    /// a fragment on arrival while ACK answers a TOKEN only once its message is taken (one
    /// detector for both would take a TOKEN whose ACK waits for the application for lost).
    pub(super) frag_losses: LossDetector,
    /// Delivery-rate estimator.
    pub(super) rate: DeliveryRate,
    /// Bytes of tokens in flight (sent, neither acknowledged nor declared lost).
    pub(super) bytes: u64,
    /// Bytes acknowledged by the verdict frame being handled.
    pub(super) ack_batch: u64,
    /// When the newest transmission (sent once) that the verdict frame being handled
    /// acknowledges left: the frame's one RTT sample is the time since.
    pub(super) ack_newest: Option<Instant>,
    /// What both loss detectors learnt of reordering (the count rule, the window).
    pub(super) reo: Reordering,
    /// Whether the congestion response to spurious losses is undone (`Rules::spurious_undo`).
    pub(super) undo: bool,
    /// Losses found spurious by the verdict frame being handled: how many, how many of them
    /// had been sent again, their bytes, and when the earliest was declared.
    pub(super) spurious: u64,
    pub(super) spurious_resent: u64,
    pub(super) spurious_bytes: u64,
    pub(super) spurious_at: Option<Instant>,
    /// When the loss recovery in progress began: losses of transmissions sent before it
    /// belong to it.
    pub(super) recovery_at: Option<Instant>,
}

impl Flight {
    /// A loss of `bytes` declared at `at` was spurious (its retransmission had left, or
    /// not): the reordering window widens and the controller will be told.
    pub fn on_spurious(
        &mut self,
        now: Instant,
        at: Instant,
        bytes: u64,
        resent: bool,
        srtt: Duration,
    ) {
        self.reo.on_spurious(now, srtt);
        self.spurious += 1;
        self.spurious_resent += u64::from(resent);
        self.spurious_bytes = self.spurious_bytes.saturating_add(bytes);
        self.spurious_at = Some(self.spurious_at.map_or(at, |t: Instant| t.min(at)));
    }

    /// A FRAG transmission arrived (a GOT or HELD covers its bytes, or an ACK its message):
    /// a sample of the delivery rate, and, sent once, a candidate for the frame's RTT
    /// sample and (with `newest`: a GOT's or HELD's, whether it is the newest transmission
    /// the frame covers) an acknowledgement for loss detection, reordering when overtaken.
    /// Returns whether it was sent once (path MTU discovery counts it).
    pub fn on_fragment_arrived(
        &mut self,
        now: Instant,
        sent: &Sent,
        newest: Option<bool>,
        min_rtt: Option<Duration>,
    ) -> bool {
        self.rate.on_acked(now, &sent.rate, sent.size);
        self.ack_batch = self.ack_batch.saturating_add(sent.size);
        if sent.again {
            return false;
        }
        if newest.is_some_and(|n| self.frag_losses.on_acked(sent.seq) && n) {
            let sample = now.saturating_duration_since(sent.at);
            let late = sample.saturating_sub(min_rtt.unwrap_or(sample));
            self.reo.on_reordered(late);
        }
        self.on_newest(sent.at);
        true
    }

    /// A transmission sent at `at` (once) was acknowledged by the verdict frame being
    /// handled: the frame's RTT sample is of the newest such.
    pub fn on_newest(&mut self, at: Instant) {
        self.ack_newest = Some(self.ack_newest.map_or(at, |n| n.max(at)));
    }

    /// A token removed by a verdict: no longer in flight; if it was acknowledged, it
    /// arrived ([`on_arrived`](Self::on_arrived)), unless it was reported held before
    /// (HELD), which counted its arrival then.
    pub fn on_settled(&mut self, now: Instant, tok: &Token, acked: bool, rtt: &Rtt) {
        self.bytes = self.bytes.saturating_sub(tok.flight);
        if acked && !tok.held {
            self.on_arrived(now, tok, rtt);
        }
    }

    /// A token sent whole is reported held by its receiver (HELD), untaken: out of flight,
    /// and counted as arrived as an acknowledged one is (once: its ACK later counts nothing).
    pub fn on_held(&mut self, now: Instant, tok: &mut Token, rtt: &Rtt) {
        self.bytes = self.bytes.saturating_sub(tok.flight);
        self.on_arrived(now, tok, rtt);
        tok.flight = 0;
        tok.lost = None;
    }

    /// Token `tok` arrived (ACK, or HELD): feeds the delivery rate, loss detection and
    /// (Karn's rule: sent once) the frame's RTT sample, and tells whether its last loss was
    /// spurious.
    fn on_arrived(&mut self, now: Instant, tok: &Token, rtt: &Rtt) {
        if tok.frag.is_none() {
            if let Some(st) = &tok.rate {
                self.rate.on_acked(now, st, tok.size);
            }
            self.ack_batch = self.ack_batch.saturating_add(tok.size);
        }
        let srtt = rtt.smoothed().unwrap_or_default();
        if let Some(l) = tok.lost.as_deref().filter(|_| tok.frag.is_none()) {
            if answers_original(now, l.resent_at, rtt.min()) {
                let resent = l.resent_at.is_some();
                self.on_spurious(now, l.at, l.bytes, resent, srtt);
            }
        }
        // A fragmented message acknowledged whole: its receiver holds every byte, those of
        // fragments declared lost included.
        for l in tok.frag.iter().flat_map(|o| o.lost()) {
            if answers_original(now, l.resent_at, rtt.min()) {
                let resent = l.resent_at.is_some();
                self.on_spurious(now, l.at, l.size, resent, srtt);
            }
        }
        if let Some(o) = &tok.frag {
            // An ACK of a fragmented message: its receiver holds every byte, those of the
            // fragments still in flight too (taken before a GOT or HELD said so).
            // Not loss detection's: the GOTs of other messages' fragments sent before these
            // may still be on their way (a datagram's GOTs that did not fit go in the next).
            for sent in o.in_flight() {
                self.on_fragment_arrived(now, sent, None, rtt.min());
            }
        }
        if tok.sends == 1 && tok.frag.is_none() {
            let overtaken = self.losses.on_acked(tok.seq);
            if let Some(t) = tok.sent_at {
                if overtaken {
                    let sample = now.saturating_duration_since(t);
                    let late = sample.saturating_sub(rtt.min().unwrap_or(sample));
                    self.reo.on_reordered(late);
                }
                // One RTT sample per verdict frame (taken in `after_verdicts`): the newest
                // transmission it acknowledges. Every token of a datagram would otherwise
                // feed the same round trip again, and RTTVAR would collapse to nothing.
                self.on_newest(t);
            }
        }
    }
}
