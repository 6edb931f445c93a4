//! Acknowledged messages' payloads waiting in a shard's mailbox to be freed by the next
//! sends, each on the thread that makes it, rather than in a burst on the driver's.
//!
//! An ACK settles many messages at once; freed where it is handled, their payloads go
//! back to the allocator in a burst on the driver's thread, while the application
//! allocates new ones one at a time on its own. A general-purpose allocator's per-thread
//! cache holds only a few blocks of a size (glibc's: seven), so most of such a burst, and
//! the allocations after it, take the slow paths: about 400 instructions a 1 KiB message
//! (`BENCHMARKS.md`, "Payloads freed by the sends"). Buried here instead, each payload is
//! freed by a later send, right after that send's own payload was allocated: a free and an
//! allocation in turn, which the cache serves. The driver frees what no send took within
//! [`KEEP`] of the first burial itself, and never keeps more than [`MAX_DEAD_BYTES`] in
//! payloads of at most [`MAX_DEAD_LEN`] bytes each (a larger one would hold much memory
//! for a free that is a small share of what its message cost).

use std::time::Duration;

use crate::proto::Payload;

/// Most bytes of payloads kept.
pub(crate) const MAX_DEAD_BYTES: usize = 2 << 20;

/// Largest payload kept; a larger one is freed by the driver at once.
pub(crate) const MAX_DEAD_LEN: usize = 4096;

/// How long buried payloads may wait for sends to free them before the driver does.
pub(crate) const KEEP: Duration = Duration::from_millis(10);

/// The payloads waiting (under the mailbox's lock).
#[derive(Default)]
pub(crate) struct Graveyard {
    dead: Vec<Payload>,
    /// Their bytes.
    bytes: usize,
}

impl Graveyard {
    /// The driver's turn: with `expire` (its [`KEEP`] since the first of them was buried
    /// is over), the payloads still waiting are handed back in `stale`, for the driver to
    /// free; then payloads move from the end of `released` (each at most [`MAX_DEAD_LEN`]
    /// bytes: the driver drops larger ones first) while there is room, what does not fit
    /// staying in `released`, for the caller to drop outside the lock. Returns how many
    /// wait.
    pub(crate) fn bury(
        &mut self,
        released: &mut Vec<Payload>,
        stale: &mut Vec<Payload>,
        expire: bool,
    ) -> usize {
        if expire {
            stale.append(&mut self.dead);
            self.bytes = 0;
        }
        while let Some(p) = released.last() {
            let bytes = self.bytes + p.len();
            if bytes > MAX_DEAD_BYTES {
                break;
            }
            self.bytes = bytes;
            self.dead.extend(released.pop());
        }
        self.dead.len()
    }

    /// One payload for a send to free, if any waits.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Payload> {
        let p = self.dead.pop()?;
        self.bytes -= p.len();
        Some(p)
    }

    /// Every payload waiting, for the driver to free.
    pub(crate) fn take_all(&mut self) -> Vec<Payload> {
        self.bytes = 0;
        std::mem::take(&mut self.dead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn payloads(n: usize, len: usize) -> Vec<Payload> {
        (0..n)
            .map(|i| Payload::from(Bytes::from(vec![i as u8; len])))
            .collect()
    }

    /// At most `MAX_DEAD_BYTES` kept; the rest is left to the caller, none lost or kept
    /// twice, and what pops and goes out leaves room again.
    #[test]
    fn keeps_at_most_its_bound_and_leaves_the_rest() {
        let (mut g, mut stale) = (Graveyard::default(), Vec::new());
        let per = MAX_DEAD_BYTES / 100;
        let mut released = payloads(90, per);
        assert_eq!(g.bury(&mut released, &mut stale, false), 90);
        assert!(released.is_empty());
        assert!(g.pop().is_some());
        let mut more = payloads(30, per);
        assert_eq!(g.bury(&mut more, &mut stale, false), 100, "full");
        assert_eq!(more.len(), 19, "the rest left to the caller");
        assert!(stale.is_empty(), "none expired");
        assert!(g.pop().is_some());
        let mut again = payloads(5, per);
        g.bury(&mut again, &mut stale, false);
        assert_eq!(again.len(), 4, "room for one again");
        assert_eq!(g.take_all().len(), 100);
        assert!(g.pop().is_none());
    }

    /// Expired, every waiting payload goes back to the driver, and the new ones wait.
    #[test]
    fn expired_payloads_go_back_to_the_driver() {
        let (mut g, mut stale) = (Graveyard::default(), Vec::new());
        g.bury(&mut payloads(10, 8), &mut stale, false);
        assert!(g.pop().is_some());
        assert_eq!(g.bury(&mut payloads(3, 8), &mut stale, false), 12);
        assert!(stale.is_empty());
        assert_eq!(
            g.bury(&mut payloads(2, 8), &mut stale, true),
            2,
            "only the new ones"
        );
        assert_eq!(stale.len(), 12);
        assert_eq!(g.take_all().len(), 2);
    }
}
