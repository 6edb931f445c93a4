//! A windowed maximum over the last few round trips (for the bandwidth and ACK-aggregation
//! estimates of the BBR controller).

/// Rounds a [`WindowedMax`] remembers.
pub(crate) const WINDOW_ROUNDS: u64 = 10;

/// The largest value seen in the last [`WINDOW_ROUNDS`] rounds: one maximum per round in a
/// small ring, so memory and work per update are constant.
#[derive(Debug, Clone, Default)]
pub(crate) struct WindowedMax {
    /// `(round, max in that round)`, indexed by `round % WINDOW_ROUNDS`.
    slots: [(u64, u64); WINDOW_ROUNDS as usize],
    /// Whether any value was recorded.
    any: bool,
}

impl WindowedMax {
    /// Records `value` seen in `round`.
    pub fn update(&mut self, round: u64, value: u64) {
        let i = (round % WINDOW_ROUNDS) as usize;
        let slot = &mut self.slots[i];
        if slot.0 != round || !self.any {
            *slot = (round, value);
        } else {
            slot.1 = slot.1.max(value);
        }
        if !self.any {
            // Mark the other slots as stale.
            for (j, s) in self.slots.iter_mut().enumerate() {
                if j != i {
                    *s = (u64::MAX, 0);
                }
            }
            self.any = true;
        }
    }

    /// The largest value recorded within the window ending at `round`.
    pub fn get(&self, round: u64) -> u64 {
        if !self.any {
            return 0;
        }
        self.slots
            .iter()
            .filter(|(r, _)| *r <= round && round - *r < WINDOW_ROUNDS)
            .map(|(_, v)| *v)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_max_of_the_window_and_forgets_older_rounds() {
        let mut m = WindowedMax::default();
        assert_eq!(m.get(0), 0);
        m.update(0, 100);
        m.update(0, 50);
        assert_eq!(m.get(0), 100);
        for r in 1..WINDOW_ROUNDS {
            m.update(r, 10);
        }
        assert_eq!(m.get(WINDOW_ROUNDS - 1), 100);
        m.update(WINDOW_ROUNDS, 20);
        assert_eq!(m.get(WINDOW_ROUNDS), 20, "round 0 fell out of the window");
        // A gap of many rounds leaves nothing but the newest value.
        m.update(1000, 5);
        assert_eq!(m.get(1000), 5);
    }
}
