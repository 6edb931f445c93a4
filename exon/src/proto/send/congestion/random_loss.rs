//! The path's random loss: the loss rate every stretch of recent traffic met, whatever the
//! rate it was sent at, as opposed to the loss of a queue overflowing, which comes and goes
//! with the sender's probing and a competitor's cycles.
//!
//! Settled bytes are gathered in bins of at least [`BIN_DATAGRAMS`] datagrams (a round or
//! several: a bin of few datagrams would meet no loss by chance alone); the estimate is the
//! smallest loss rate of the last [`BINS`] full bins. A queue that overflows now and then
//! leaves bins without loss between its episodes, so the estimate stays near zero; loss that
//! no rate avoids (a radio link, a lossy hop) is in every bin.

/// Datagrams' worth of settled bytes that fill a bin.
pub(crate) const BIN_DATAGRAMS: u64 = 64;
/// Full bins the estimate looks back over.
pub(crate) const BINS: usize = 8;

/// Bins of settled bytes and the loss rate of each.
#[derive(Debug, Clone, Default)]
pub(crate) struct RandomLoss {
    /// The bin being filled: bytes lost and bytes settled (lost or acknowledged).
    lost: u64,
    total: u64,
    /// Loss rates (thousandths) of the last full bins, oldest overwritten first.
    rates: [u64; BINS],
    /// Where the next full bin's rate goes.
    next: usize,
    /// All [`BINS`] bins were filled at least once.
    filled: bool,
    /// The smallest of `rates`, once [`BINS`] bins are full (else 0).
    floor: u64,
}

impl RandomLoss {
    /// A round settled `total` bytes, `lost` of them lost, with datagrams of `mss` bytes.
    pub fn end_round(&mut self, lost: u64, total: u64, mss: u64) {
        self.lost = self.lost.saturating_add(lost.min(total));
        self.total = self.total.saturating_add(total);
        if self.total < BIN_DATAGRAMS.saturating_mul(mss.max(1)) {
            return;
        }
        let rate = super::scale(self.lost, 1000, self.total).min(1000);
        self.rates[self.next] = rate;
        self.next = (self.next + 1) % BINS;
        self.filled |= self.next == 0;
        if self.filled {
            self.floor = self.rates.iter().copied().min().unwrap_or(0);
        }
        self.lost = 0;
        self.total = 0;
    }

    /// The loss rate (thousandths) that every one of the last [`BINS`] bins met: 0 until
    /// that many are full.
    pub fn rate(&self) -> u64 {
        self.floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    /// Rounds of 32 datagrams, `lost_of_32(i)` lost in round `i`.
    fn feed(r: &mut RandomLoss, rounds: u64, lost_of_32: impl Fn(u64) -> u64) {
        for i in 0..rounds {
            r.end_round(lost_of_32(i) * MSS, 32 * MSS, MSS);
        }
    }

    #[test]
    fn loss_in_every_bin_is_the_paths() {
        let mut r = RandomLoss::default();
        // One in four of every round lost: the same in every bin of two rounds.
        feed(&mut r, 2 * BINS as u64 - 2, |_| 8);
        assert_eq!(r.rate(), 0, "not before {BINS} bins are full");
        feed(&mut r, 2, |_| 8);
        assert_eq!(r.rate(), 250);
        // Then the loss stops: the next full bin without loss brings the floor to zero.
        feed(&mut r, 2, |_| 0);
        assert_eq!(r.rate(), 0);
    }

    #[test]
    fn a_queue_that_overflows_now_and_then_is_no_random_loss() {
        let mut r = RandomLoss::default();
        // Half the datagrams lost one round in eight (a probe overfilling the queue), none
        // otherwise: bins without loss in between.
        feed(&mut r, 200, |i| if i % 8 == 0 { 16 } else { 0 });
        assert_eq!(r.rate(), 0);
    }

    #[test]
    fn small_rounds_are_gathered_until_a_bin_is_full() {
        let mut r = RandomLoss::default();
        // Rounds of 4 datagrams, one in every other round lost: no single round tells,
        // bins of 64 datagrams do (an eighth).
        for i in 0..(16 * BINS as u64) {
            r.end_round(if i % 2 == 0 { MSS } else { 0 }, 4 * MSS, MSS);
        }
        assert_eq!(r.rate(), 125);
    }

    #[test]
    fn hostile_counts_do_not_overflow() {
        let mut r = RandomLoss::default();
        for _ in 0..100 {
            r.end_round(u64::MAX, u64::MAX, 0);
            r.end_round(u64::MAX, 1, u64::MAX);
        }
        assert!(r.rate() <= 1000);
    }
}
