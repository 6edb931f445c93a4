//! Receive buffers kept alive by untaken deliveries: a payload handed over as a slice of a
//! much larger buffer keeps all of it alive, so such slices are budgeted per buffer, and a
//! small payload is copied out once the budget is spent.
//!
//! The embedding says which buffer the next datagrams live in
//! ([`Node::set_receive_buffer`](crate::proto::Node::set_receive_buffer)); every delivery decides
//! here how it is held:
//! * its own bytes (put together from fragments, or a datagram that owns its buffer), or at
//!   least half of the buffer it slices: kept, charged what it keeps alive;
//! * a small slice of a buffer already kept by another untaken delivery: kept, free;
//! * a small slice of another buffer: kept while the buffers so kept fit in
//!   [`PINNED_BUDGET`], else copied out.
//!
//! So untaken deliveries hold at most twice what they are charged plus the budget.

/// Receive-buffer bytes that small slices may keep alive, over all untaken deliveries.
pub(crate) const PINNED_BUDGET: usize = 64 << 20;

/// How a delivered payload is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Kept as it is, charged `charge` bytes, keeping buffer `pin` alive (give it back with
    /// [`Pins::release`]) if any.
    Keep { charge: usize, pin: Option<u64> },
    /// Copied out: charged its length.
    Copy { charge: usize },
}

/// The receive buffers small untaken deliveries keep alive.
#[derive(Debug, Default)]
pub(crate) struct Pins {
    /// The buffer the datagram being handled lives in: (key, size), or `None` when the
    /// datagram owns its bytes.
    current: Option<(u64, usize)>,
    /// Length of the datagram being handled.
    datagram: usize,
    /// The key of the datagram being handled when it owns its bytes (counting down from
    /// `u64::MAX`, apart from the embedding's keys).
    own: u64,
    /// Buffers kept: key to (size, deliveries keeping it).
    kept: std::collections::HashMap<u64, (usize, u32), foldhash::fast::RandomState>,
    /// Bytes of the buffers kept.
    bytes: usize,
    /// A buffer in `kept` and the deliveries it was given since its count there was last
    /// written: the deliveries of one datagram slice one buffer, so they cost one map
    /// write rather than one each. Folded in before anything else reads or writes `kept`.
    hot: Option<(u64, u32)>,
}

impl Pins {
    /// The next datagrams are parts of buffer `key` of `size` bytes (`size` 0: they own
    /// their bytes).
    pub fn set_buffer(&mut self, key: u64, size: usize) {
        self.current = (size > 0).then_some((key, size));
    }

    /// A datagram of `len` bytes is being handled.
    pub fn on_datagram(&mut self, len: usize) {
        self.datagram = len;
        if self.current.is_none() {
            self.own = self.own.wrapping_sub(1);
        }
    }

    /// How a payload of `len` bytes delivered from the datagram being handled is held.
    pub fn hold(&mut self, len: usize) -> Hold {
        if len > self.datagram {
            // Put together from fragments: an allocation of its own.
            return Hold::Keep {
                charge: len,
                pin: None,
            };
        }
        // The buffer the slice keeps alive: the embedding's, or the datagram itself.
        let (key, size) = self.current.unwrap_or((self.own, self.datagram));
        let size = size.max(self.datagram);
        if len.saturating_mul(2) >= size {
            return Hold::Keep {
                charge: size,
                pin: None,
            };
        }
        if let Some((k, n)) = &mut self.hot {
            if *k == key {
                *n += 1;
                return Hold::Keep {
                    charge: len,
                    pin: Some(key),
                };
            }
        }
        self.fold_hot();
        if let Some((_, n)) = self.kept.get_mut(&key) {
            *n += 1;
            self.hot = Some((key, 0));
            return Hold::Keep {
                charge: len,
                pin: Some(key),
            };
        }
        if self.bytes + size <= PINNED_BUDGET {
            self.kept.insert(key, (size, 1));
            self.hot = Some((key, 0));
            self.bytes += size;
            return Hold::Keep {
                charge: len,
                pin: Some(key),
            };
        }
        Hold::Copy { charge: len }
    }

    /// Writes the hot buffer's deliveries into its count.
    fn fold_hot(&mut self) {
        if let Some((key, more)) = self.hot.take() {
            if let Some((_, n)) = self.kept.get_mut(&key) {
                *n += more;
            }
        }
    }

    /// A delivery keeping buffer `key` alive was taken (or dropped).
    pub fn release(&mut self, key: u64) {
        self.release_many(key, 1);
    }

    /// `k` deliveries keeping buffer `key` alive were taken.
    pub fn release_many(&mut self, key: u64, k: u32) {
        self.fold_hot();
        if let Some((size, n)) = self.kept.get_mut(&key) {
            *n = n.saturating_sub(k);
            if *n == 0 {
                self.bytes -= *size;
                self.kept.remove(&key);
            }
        }
    }

    /// Bytes of the buffers kept alive.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_slices_of_one_buffer_share_its_budget_and_free_it_together() {
        let mut p = Pins::default();
        p.set_buffer(1, 65536);
        p.on_datagram(60000);
        // Sixty 1 KB messages of one datagram: the buffer is counted once.
        let holds: Vec<Hold> = (0..60).map(|_| p.hold(1000)).collect();
        assert!(holds.iter().all(|h| *h
            == Hold::Keep {
                charge: 1000,
                pin: Some(1)
            }));
        assert_eq!(p.bytes(), 65536);
        for _ in 0..59 {
            p.release(1);
        }
        assert_eq!(p.bytes(), 65536, "kept while one delivery holds it");
        p.release(1);
        assert_eq!(p.bytes(), 0);
    }

    /// Holds counted on the side for the buffer in use are folded in when another buffer
    /// comes or a take is given back: a buffer is freed with its last delivery, no sooner.
    #[test]
    fn runs_of_holds_and_takes_count_every_delivery() {
        let mut p = Pins::default();
        p.set_buffer(1, 65536);
        p.on_datagram(60000);
        for _ in 0..3 {
            assert!(matches!(p.hold(100), Hold::Keep { pin: Some(1), .. }));
        }
        p.set_buffer(2, 65536);
        p.on_datagram(60000);
        for _ in 0..2 {
            assert!(matches!(p.hold(100), Hold::Keep { pin: Some(2), .. }));
        }
        p.release_many(1, 2);
        assert_eq!(p.bytes(), 2 * 65536, "one delivery still keeps buffer 1");
        p.set_buffer(1, 65536);
        assert!(matches!(p.hold(100), Hold::Keep { pin: Some(1), .. }));
        p.release_many(1, 2);
        assert_eq!(p.bytes(), 65536, "buffer 1 freed with its last delivery");
        p.release_many(2, 1);
        assert_eq!(p.bytes(), 65536);
        p.release(2);
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn beyond_the_budget_small_slices_are_copied_and_large_ones_charged_their_buffer() {
        let mut p = Pins::default();
        let per = PINNED_BUDGET / 65536;
        for key in 0..per as u64 {
            p.set_buffer(key, 65536);
            p.on_datagram(32768);
            assert!(matches!(p.hold(8), Hold::Keep { pin: Some(_), .. }));
        }
        p.set_buffer(per as u64, 65536);
        p.on_datagram(32768);
        assert_eq!(p.hold(8), Hold::Copy { charge: 8 });
        // At least half the buffer: kept, charged the buffer.
        p.on_datagram(40000);
        assert_eq!(
            p.hold(33000),
            Hold::Keep {
                charge: 65536,
                pin: None
            }
        );
        // A payload put together from fragments; a datagram that owns its bytes is its
        // own buffer (the budget is spent: a small payload is copied out of it).
        p.set_buffer(0, 0);
        p.on_datagram(1200);
        assert_eq!(
            p.hold(5000),
            Hold::Keep {
                charge: 5000,
                pin: None
            }
        );
        assert_eq!(p.hold(8), Hold::Copy { charge: 8 });
        assert_eq!(
            p.hold(700),
            Hold::Keep {
                charge: 1200,
                pin: None
            }
        );
    }
}
