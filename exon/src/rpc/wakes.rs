//! A waker that counts its wakes, for the tests of the call table and the request queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

/// Counts the wakes of the wakers made from it.
#[derive(Debug, Default)]
pub(crate) struct Wakes(AtomicUsize);

impl Wakes {
    /// A new count, at 0.
    pub(crate) fn new() -> Arc<Wakes> {
        Arc::default()
    }

    /// A waker that adds to this count.
    pub(crate) fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(self.clone())
    }

    /// Wakes so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
