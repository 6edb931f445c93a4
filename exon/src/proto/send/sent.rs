//! What the sender keeps per datagram that carried TOKENs to a destination, rather than per
//! token: the delivery-rate snapshot of its transmission, by the datagram's sequence number.
//!
//! Every token written whole into one datagram shares that datagram's sequence number (see
//! [`LossDetector`](super::loss::LossDetector)) and the instant it left, so the snapshot the
//! delivery-rate estimator takes is the same for all of them: it is taken once, when the
//! datagram's first token is written, and a token keeps only the sequence number.

use std::collections::VecDeque;

use crate::proto::send::congestion::SendState;

/// The datagrams kept beyond twice the tokens in flight (a token acknowledged later than
/// that many datagrams after its last transmission feeds the delivered count, not a sample).
const SLACK: usize = 64;

/// Delivery-rate snapshots of the datagrams that carried TOKENs, by sequence number: dense
/// from `base` (the detector numbers only datagrams that carried a TOKEN).
#[derive(Debug, Default)]
pub(crate) struct SentLog {
    /// The sequence number of `snaps[0]`.
    base: u64,
    snaps: VecDeque<SendState>,
}

impl SentLog {
    /// Whether datagram `seq` has its snapshot already (a token written into it before).
    #[inline]
    pub fn has(&self, seq: u64) -> bool {
        seq.checked_sub(self.base)
            .is_some_and(|i| i < self.snaps.len() as u64)
    }

    /// Records datagram `seq`'s snapshot, keeping at most `2 * tokens + 64` datagrams. A
    /// sequence number that does not follow the last one starts the log again from it.
    pub fn push(&mut self, seq: u64, st: SendState, tokens: usize) {
        if self.base.checked_add(self.snaps.len() as u64) != Some(seq) {
            self.snaps.clear();
            self.base = seq;
        }
        self.snaps.push_back(st);
        let keep = tokens.saturating_mul(2).saturating_add(SLACK);
        while self.snaps.len() > keep {
            self.snaps.pop_front();
            self.base += 1;
        }
    }

    /// The snapshot of datagram `seq`, if still kept.
    #[inline]
    pub fn get(&self, seq: u64) -> Option<&SendState> {
        let i = seq.checked_sub(self.base)?;
        self.snaps.get(usize::try_from(i).ok()?)
    }

    /// Datagrams kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.snaps.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::proto::send::congestion::DeliveryRate;

    #[test]
    fn snapshots_are_found_by_datagram_and_bounded_by_the_tokens() {
        let t0 = Instant::now();
        let mut rate = DeliveryRate::default();
        let mut log = SentLog::default();
        assert!(log.get(0).is_none());
        for seq in 0..10u64 {
            assert!(!log.has(seq));
            let at = t0 + Duration::from_millis(seq);
            log.push(seq, rate.on_sent(at, seq), 100);
            assert!(log.has(seq));
        }
        assert_eq!(
            log.get(3).map(|s| s.sent_at()),
            Some(t0 + Duration::from_millis(3))
        );
        assert!(log.get(10).is_none() && log.get(u64::MAX).is_none());
        // Few tokens: the oldest datagrams go.
        for seq in 10..200u64 {
            log.push(seq, rate.on_sent(t0, 1), 1);
        }
        assert_eq!(log.len(), 2 + SLACK);
        assert!(log.get(199 - 66).is_none() && log.get(199 - 65).is_some());
        // A gap (a new life of the record's numbering) starts again.
        log.push(500, rate.on_sent(t0, 1), 1);
        assert_eq!(log.len(), 1);
        assert!(log.get(199).is_none() && log.has(500));
    }
}
