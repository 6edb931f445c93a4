//! The tokens in flight to one destination as loss detection, the RTT estimator and the
//! congestion controller see them.

use std::time::{Duration, Instant};

use crate::proto::send::congestion::DeliveryRate;
use crate::proto::send::fragments::{Outgoing, Sent};
use crate::proto::send::loss::{answers_original, LossDetector, Reordering};
use crate::proto::send::rtt::Rtt;
use crate::proto::send::sent::SentLog;
use crate::proto::send::token::{Token, NEVER_SENT};

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
    /// The estimator's snapshot of each datagram that carried TOKENs.
    pub(super) sent: SentLog,
    /// Bytes of the tokens sent whole that the verdict frame being handled found arrived,
    /// and the newest datagram that carried one: the frame's delivery-rate sample.
    pub(super) whole_bytes: u64,
    pub(super) whole_newest: Option<u64>,
    /// Bytes of tokens in flight (sent, neither acknowledged nor declared lost).
    pub(super) bytes: u64,
    /// Bytes acknowledged by the verdict frame being handled.
    pub(super) ack_batch: u64,
    /// When the newest transmission (sent once) that the verdict frame being handled
    /// acknowledges left: the frame's one RTT sample is the time since.
    pub(super) ack_newest: Option<Instant>,
    /// The datagram of the last token sent once that the verdict frame being handled found
    /// arrived: its datagram's acknowledgement is taken once, for the first of its tokens,
    /// not again for each.
    pub(super) once_seq: Option<u64>,
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
        self.rate.on_acked(now, Some(&sent.rate), sent.size);
        self.ack_batch = self.ack_batch.saturating_add(sent.size);
        if sent.again {
            return false;
        }
        let overtaken = newest.is_some_and(|n| self.frag_losses.on_acked(sent.seq) && n);
        if sent.untimed {
            // Its bytes may have been held before it left: no round trip measured.
            return true;
        }
        if overtaken {
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
    #[inline]
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
        tok.clear_lost();
    }

    /// Token `tok` arrived (ACK, or HELD): feeds the delivery rate, loss detection and
    /// (Karn's rule: sent once) the frame's RTT sample, and tells whether its last loss was
    /// spurious. A token sent whole feeds the delivery rate through its datagram
    /// ([`end_frame`](Self::end_frame)).
    #[inline]
    fn on_arrived(&mut self, now: Instant, tok: &Token, rtt: &Rtt) {
        match &tok.frag {
            None => self.on_whole_arrived(now, tok, rtt),
            Some(o) => self.on_fragmented_arrived(now, o, rtt),
        }
    }

    /// A message sent in fragments arrived whole (its ACK).
    #[inline(never)]
    fn on_fragmented_arrived(&mut self, now: Instant, o: &Outgoing, rtt: &Rtt) {
        let srtt = rtt.smoothed().unwrap_or_default();
        // A fragmented message acknowledged whole: its receiver holds every byte, those of
        // fragments declared lost included.
        for l in o.lost() {
            if answers_original(now, l.resent_at, rtt.min()) {
                let resent = l.resent_at.is_some();
                self.on_spurious(now, l.at, l.size, resent, srtt);
            }
        }
        // An ACK of a fragmented message: its receiver holds every byte, those of the
        // fragments still in flight too (taken before a GOT or HELD said so).
        // Not loss detection's: the GOTs of other messages' fragments sent before these
        // may still be on their way (a datagram's GOTs that did not fit go in the next).
        for sent in o.in_flight() {
            self.on_fragment_arrived(now, sent, None, rtt.min());
        }
    }

    /// A token sent whole arrived: its bytes and datagram go to the frame's delivery-rate
    /// sample, its sending once to loss detection and the RTT sample.
    #[inline(always)]
    fn on_whole_arrived(&mut self, now: Instant, tok: &Token, rtt: &Rtt) {
        self.ack_batch = self.ack_batch.saturating_add(u64::from(tok.size));
        // Sent whole in this life (a token restored after a restart that never left again
        // has no datagram here).
        if tok.seq != NEVER_SENT {
            self.whole_bytes = self.whole_bytes.saturating_add(u64::from(tok.size));
            self.whole_newest = Some(self.whole_newest.map_or(tok.seq, |n| n.max(tok.seq)));
        }
        if let Some(l) = tok.lost() {
            if answers_original(now, l.resent_at, rtt.min()) {
                let srtt = rtt.smoothed().unwrap_or_default();
                let resent = l.resent_at.is_some();
                self.on_spurious(now, l.at, l.bytes, resent, srtt);
            }
        }
        // Tokens sent once in one datagram share its sequence number and sending time:
        // what their acknowledgement tells loss detection, reordering and the RTT sample is
        // the same for each, so only the first of a run says it.
        if tok.sends == 1 && (self.once_seq != Some(tok.seq) || tok.seq == NEVER_SENT) {
            self.once_seq = Some(tok.seq);
            let overtaken = self.losses.on_acked(tok.seq);
            // When its datagram left (exactly, or no sample).
            if let Some(t) = tok.datagram_sent_at(&self.sent) {
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

    /// The verdict frame being handled is done: the tokens it found arrived whole feed the
    /// delivery-rate estimator at once, with the snapshot of the newest datagram among
    /// theirs (the estimator keeps the newest snapshot of what it is told, and a later
    /// datagram's is never older), or their bytes alone if that one is no longer kept.
    pub fn end_frame(&mut self, now: Instant) {
        // The next frame's acknowledgements are judged against this one's (overtaken).
        self.once_seq = None;
        if let Some(seq) = self.whole_newest.take() {
            let bytes = std::mem::take(&mut self.whole_bytes);
            self.rate.on_acked(now, self.sent.get(seq), bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::proto::send::token::Queued;
    use crate::proto::MsgId;

    fn token(slot: u64) -> Token {
        Token::new(
            1,
            Queued {
                id: MsgId(slot),
                payload: Bytes::new().into(),
                reported: false,
                senders_copy: false,
                reply: false,
            },
        )
    }

    proptest! {
        /// The delivery rate fed per datagram (one snapshot per datagram, the tokens a
        /// verdict frame found arrived summed with the snapshot of the newest of their
        /// datagrams) samples exactly as it did fed per token, each token with a snapshot
        /// of its own. Datagrams are `(tokens, their size, frames acknowledging some of the
        /// tokens in flight after it)`; with `hold_first`, the first token waits for its
        /// verdict until after the last datagram, so that the log is asked to forget the
        /// datagrams no token refers to (as `SRecord::forget_old_datagrams` does) while one
        /// still does.
        #[test]
        fn per_datagram_samples_equal_per_token_samples(
            datagrams in proptest::collection::vec(
                (1usize..6, 1u64..1500, proptest::collection::vec(any::<u64>(), 0..3), any::<bool>()),
                1..300,
            ),
            hold_first in any::<bool>(),
        ) {
            let t0 = Instant::now();
            let rtt = Rtt::default();
            let mut flight = Flight::default();
            let mut reference = DeliveryRate::default();
            // In flight: (token, its own snapshot for the reference).
            let mut out: Vec<(Token, crate::proto::send::congestion::SendState)> = Vec::new();
            let mut slot = 0u64;
            for (i, (n, size, acks, idle)) in datagrams.into_iter().enumerate() {
                let now = t0 + Duration::from_millis(i as u64 + 1);
                for _ in 0..n {
                    let st = reference.on_sent(now, flight.bytes);
                    let seq = flight.losses.on_sent(slot);
                    let mut tok = token(slot);
                    (tok.seq, tok.size, tok.flight, tok.sends) = (seq, size as u32, size, 2);
                    out.push((tok, st));
                    // As `SRecord::on_token_sent`, the token already refers to its datagram.
                    if !flight.sent.has(seq) {
                        let mine = flight.rate.on_sent(now, flight.bytes);
                        if flight.sent.push(seq, mine, out.len()) {
                            let oldest = out.iter().map(|(t, _)| t.seq).min();
                            flight.sent.forget_before(oldest, out.len());
                        }
                    }
                    flight.bytes += size;
                    slot += 1;
                }
                // Counted as sent once the datagram is whole: the record counts per token,
                // after the datagram's one snapshot (its first token's).
                flight.rate.count_sent(n as u64 * size);
                reference.count_sent(n as u64 * size);
                flight.losses.end_datagram();
                if idle {
                    flight.rate.mark_app_limited(flight.bytes);
                    reference.mark_app_limited(flight.bytes);
                }
                let held = usize::from(hold_first && out.first().is_some_and(|(t, _)| t.seq == 0));
                for pick in acks {
                    if out.len() <= held {
                        break;
                    }
                    let at = now + Duration::from_micros(500);
                    // A frame acknowledging every other token from a random one on.
                    let from = held + (pick % (out.len() - held) as u64) as usize;
                    let mut k = from;
                    let mut acked = Vec::new();
                    while k < out.len() {
                        acked.push(out.remove(k));
                        k += 1;
                    }
                    settle(&mut flight, &mut reference, &rtt, at, &acked)?;
                }
            }
            let at = t0 + Duration::from_secs(1);
            settle(&mut flight, &mut reference, &rtt, at, &out)?;
        }
    }

    /// One verdict frame acknowledging `acked` at `at`, to both: equal samples.
    fn settle(
        flight: &mut Flight,
        reference: &mut DeliveryRate,
        rtt: &Rtt,
        at: Instant,
        acked: &[(Token, crate::proto::send::congestion::SendState)],
    ) -> Result<(), TestCaseError> {
        for (tok, st) in acked {
            flight.on_settled(at, tok, true, rtt);
            reference.on_acked(at, Some(st), u64::from(tok.size));
        }
        flight.end_frame(at);
        prop_assert_eq!(
            flight.rate.take_sample(Duration::MAX),
            reference.take_sample(Duration::MAX)
        );
        prop_assert_eq!(flight.rate.delivered(), reference.delivered());
        Ok(())
    }
}
