//! The timer table of a sender record: one deadline per reason, and the earliest of them.

use std::time::Instant;

/// Why a sender record wants to be woken: one kind per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retransmission timeout of the tokens in flight (a probe first, RFC 9002's PTO).
    Rto,
    /// The pacer lets the next token go.
    Pace,
    /// The oldest unacknowledged token is declared lost unless acknowledged (time threshold).
    Loss,
    /// The record has been quiet for the idle timeout: it is discarded.
    Idle,
    /// An outstanding REQSLOTS had no SLOTS within a timeout: it is asked again.
    ReqSlots,
    /// An outstanding REQCREDIT had no CREDIT within a timeout: it is asked again.
    Credit,
    /// Path MTU discovery: a probe is due or one expired.
    Mtu,
}

impl Timer {
    /// Every kind.
    pub const ALL: [Timer; 7] = [
        Timer::Rto,
        Timer::Pace,
        Timer::Loss,
        Timer::Idle,
        Timer::ReqSlots,
        Timer::Credit,
        Timer::Mtu,
    ];
}

/// The deadlines a sender record arms itself (the others, `Idle`, `ReqSlots`, `Credit` and
/// `Mtu`, follow from the record's state: when it went quiet, the outstanding request, the
/// credit and MTU discovery). Unset: not armed.
#[derive(Debug, Default, Clone)]
pub(crate) struct Timers {
    at: [Option<Instant>; 3],
}

impl Timers {
    fn slot(t: Timer) -> usize {
        match t {
            Timer::Rto => 0,
            Timer::Pace => 1,
            Timer::Loss => 2,
            Timer::Idle | Timer::ReqSlots | Timer::Credit | Timer::Mtu => {
                unreachable!("{t:?} is derived, not armed")
            }
        }
    }

    /// The deadline of `t`, if armed.
    #[inline]
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.at[Self::slot(t)]
    }

    /// Arms `t` at `at` (or disarms it with `None`).
    #[inline]
    pub fn set(&mut self, t: Timer, at: Option<Instant>) {
        self.at[Self::slot(t)] = at;
    }

    /// Arms `t` at `at` unless it is armed earlier.
    #[inline]
    pub fn set_earliest(&mut self, t: Timer, at: Instant) {
        let e = &mut self.at[Self::slot(t)];
        *e = Some(e.map_or(at, |x| x.min(at)));
    }

    /// Disarms `t` if it expired by `now`; returns whether it did.
    pub fn expire(&mut self, t: Timer, now: Instant) -> bool {
        let e = &mut self.at[Self::slot(t)];
        if e.is_some_and(|x| x <= now) {
            *e = None;
            true
        } else {
            false
        }
    }

    /// The earliest armed deadline.
    #[inline]
    pub fn earliest(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Whether `t` is armed.
    #[inline]
    pub fn is_set(&self, t: Timer) -> bool {
        self.get(t).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn each_reason_keeps_its_own_deadline() {
        let t0 = crate::test_time::origin();
        let mut t = Timers::default();
        t.set(Timer::Rto, Some(t0 + Duration::from_millis(30)));
        t.set_earliest(Timer::Rto, t0 + Duration::from_millis(50));
        t.set_earliest(Timer::Loss, t0 + Duration::from_millis(20));
        assert_eq!(t.get(Timer::Rto), Some(t0 + Duration::from_millis(30)));
        assert!(!t.expire(Timer::Rto, t0 + Duration::from_millis(29)));
        assert!(t.expire(Timer::Loss, t0 + Duration::from_millis(20)));
        assert!(!t.is_set(Timer::Loss));
        assert!(t.is_set(Timer::Rto));
        assert!(!t.is_set(Timer::Pace));
    }
}
