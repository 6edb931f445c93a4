//! The driver's clock store jobs: the high-water marks the node asks to have stored, stored
//! one at a time (on a blocking thread for a store that blocks), retried after a failure.

use std::io;
use std::time::{Duration, Instant};

use tokio::task::{JoinError, JoinHandle};

use crate::endpoint::storage::clock_store::ClockStore;

/// What a clock store job gives back: the store, the mark, and whether it was stored.
pub(crate) type StoreDone = (Box<dyn ClockStore>, u64, io::Result<()>);

/// A store running on a blocking thread.
pub(crate) type StoreJob = JoinHandle<StoreDone>;

/// The clock store and the marks waiting for it.
pub(crate) struct ClockJobs {
    /// The store, when no job holds it.
    store: Option<Box<dyn ClockStore>>,
    /// The job storing a mark now (blocking stores only).
    job: Option<StoreJob>,
    /// The highest mark asked for and not yet handed to the store.
    want: Option<u64>,
    /// When a failed store is tried again.
    retry_at: Option<Instant>,
    /// How long after a failure.
    retry_after: Duration,
}

impl ClockJobs {
    pub(crate) fn new(store: Box<dyn ClockStore>, retry_after: Duration) -> ClockJobs {
        ClockJobs {
            store: Some(store),
            job: None,
            want: None,
            retry_at: None,
            retry_after,
        }
    }

    /// The node asks for `hw` to be stored (a higher mark covers a lower one).
    pub(crate) fn want(&mut self, hw: u64) {
        self.want = Some(self.want.map_or(hw, |w| w.max(hw)));
    }

    /// Starts storing the mark wanted, unless a store is under way or waiting to be retried.
    /// Returns the mark when a store that does not block stored it at once: the node is
    /// to hear of it.
    pub(crate) fn start(&mut self, t: Instant) -> Option<u64> {
        if self.retry_at.is_some() || self.job.is_some() {
            return None;
        }
        let hw = self.want?;
        let mut store = self.store.take()?;
        self.want = None;
        if store.is_blocking() {
            self.job = Some(tokio::task::spawn_blocking(move || {
                let r = store.store(hw);
                (store, hw, r)
            }));
            None
        } else {
            let r = store.store(hw);
            self.store = Some(store);
            self.stored(t, hw, r)
        }
    }

    /// The job under way, to wait for.
    pub(crate) fn job(&mut self) -> Option<&mut StoreJob> {
        self.job.as_mut()
    }

    /// The job ended: returns the mark stored, if it was.
    pub(crate) fn on_done(&mut self, t: Instant, r: Result<StoreDone, JoinError>) -> Option<u64> {
        self.job = None;
        match r {
            Ok((store, hw, res)) => {
                self.store = Some(store);
                self.stored(t, hw, res)
            }
            Err(e) => {
                tracing::error!(error = %e, "clock store task failed");
                None
            }
        }
    }

    /// When a failed store is to be retried.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// The timer went off at `t`: a retry that is due may start.
    pub(crate) fn on_timer(&mut self, t: Instant) {
        if self.retry_at.is_some_and(|r| r <= t) {
            self.retry_at = None;
        }
    }

    fn stored(&mut self, t: Instant, hw: u64, res: io::Result<()>) -> Option<u64> {
        match res {
            Ok(()) => {
                tracing::debug!(high_water = hw, "clock stored");
                Some(hw)
            }
            Err(e) => {
                tracing::error!(error = %e, high_water = hw, "clock store failed; retrying");
                self.want(hw);
                self.retry_at = Some(crate::endpoint::deadline::saturating_after(
                    t,
                    self.retry_after,
                ));
                None
            }
        }
    }
}
