//! Buffers of large reassembled messages, given back when the application drops the
//! message, so that the next large message reuses memory already mapped.
//!
//! A message put together from fragments needs a buffer of its own size. Freshly
//! allocated, a buffer of a megabyte is pages the system maps and zeroes one by one as the
//! fragments are copied in (a page fault per 4 KiB: a fifth of a receiver's time with 1 MiB
//! messages on loopback); given back to the allocator, it is often returned to the system
//! again. The pool keeps a few buffers the application dropped, within [`POOL_BYTES`].

use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// Messages smaller than this take an allocation of their own (the allocator reuses small
/// blocks well).
pub(crate) const POOLED_FROM: usize = 64 * 1024;

/// Most bytes of buffers the pool keeps while nobody uses them.
pub(crate) const POOL_BYTES: usize = 8 * 1024 * 1024;

/// A node's idle reassembly buffers; clones share them.
#[derive(Debug, Clone, Default)]
pub(crate) struct BufPool {
    idle: Arc<Mutex<Idle>>,
}

#[derive(Debug, Default)]
struct Idle {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

impl BufPool {
    /// An empty buffer with room for `len` bytes: an idle one large enough and at most an
    /// eighth larger (a partial message holds little more memory than it is charged for),
    /// else a new one.
    pub fn take(&self, len: usize) -> Vec<u8> {
        if len >= POOLED_FROM {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() - len <= len / 8;
            if let Some(i) = idle.bufs.iter().position(fits) {
                let buf = idle.bufs.swap_remove(i);
                idle.bytes -= buf.capacity();
                return buf;
            }
        }
        Vec::with_capacity(len)
    }

    /// The message in `buf`, handed out: a large one comes back to the pool when the last
    /// `Bytes` of it is dropped.
    pub fn hand_out(&self, buf: Vec<u8>) -> Bytes {
        if buf.capacity() < POOLED_FROM {
            return Bytes::from(buf);
        }
        Bytes::from_owner(Lent {
            buf,
            pool: self.clone(),
        })
    }

    /// Keeps `buf` for a later message, if the pool has room for it.
    fn give_back(&self, mut buf: Vec<u8>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.bytes + buf.capacity() <= POOL_BYTES {
            buf.clear();
            idle.bytes += buf.capacity();
            idle.bufs.push(buf);
        }
    }

    /// Bytes of idle buffers kept.
    #[cfg(test)]
    pub fn idle_bytes(&self) -> usize {
        self.idle.lock().unwrap().bytes
    }
}

/// A pooled buffer lent out as a message.
struct Lent {
    buf: Vec<u8>,
    pool: BufPool,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_message_lends_its_buffer_to_the_next() {
        let pool = BufPool::default();
        let mut buf = pool.take(1 << 20);
        buf.extend(std::iter::repeat_n(7u8, 1 << 20));
        let ptr = buf.as_ptr();
        let msg = pool.hand_out(buf);
        let part = msg.slice(10..20);
        drop(msg);
        assert_eq!(pool.idle_bytes(), 0, "a slice still holds it");
        assert_eq!(&part[..], &[7u8; 10]);
        drop(part);
        assert!(pool.idle_bytes() >= 1 << 20);
        let again = pool.take(1_000_000);
        assert_eq!(
            (again.as_ptr(), again.len()),
            (ptr, 0),
            "the same memory, emptied"
        );
        assert_eq!(pool.idle_bytes(), 0);
        // Too small for the pool: not taken from it, not kept.
        let small = pool.hand_out(vec![1; 100]);
        drop(small);
        assert_eq!(pool.idle_bytes(), 0);
    }

    #[test]
    fn the_pool_keeps_no_more_than_its_bound() {
        let pool = BufPool::default();
        let msgs: Vec<Bytes> = (0..20)
            .map(|_| {
                let mut b = pool.take(1 << 20);
                b.resize(1 << 20, 0);
                pool.hand_out(b)
            })
            .collect();
        drop(msgs);
        assert!(pool.idle_bytes() <= POOL_BYTES);
        assert!(pool.idle_bytes() >= POOL_BYTES / 2);
        // A smaller message does not take a buffer much larger than itself.
        assert_eq!(pool.take(100_000).capacity(), 100_000);
        assert_eq!(pool.take(900_000).capacity(), 900_000);
        assert_eq!(pool.take(950_000).capacity(), 1 << 20);
    }
}
