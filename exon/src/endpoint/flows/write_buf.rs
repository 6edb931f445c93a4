//! A stream's bytes written and not yet in a chunk, kept in blocks of at most one chunk
//! each, so a chunk leaves without a copy and each allocation is at most a chunk, sized to
//! what was written (reused by the allocator, where one large buffer per write went to
//! fresh pages).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

/// Bytes written to a stream, in blocks of at most one chunk; every block but the last is
/// full.
#[derive(Debug, Default)]
pub(crate) struct WriteBuf {
    blocks: VecDeque<BytesMut>,
    len: usize,
}

impl WriteBuf {
    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `data`, filling the last block up to `chunk` bytes, then new blocks of
    /// `chunk` bytes each.
    pub fn extend(&mut self, mut data: &[u8], chunk: usize) {
        let chunk = chunk.max(1);
        self.len += data.len();
        while !data.is_empty() {
            let last = match self.blocks.back_mut() {
                Some(b) if b.len() < chunk => b,
                _ => {
                    // Room for what comes now, up to a chunk: a small write sent alone (a
                    // flush) keeps its own size in flight, not a chunk's; the block grows
                    // if more comes before it leaves.
                    let room = chunk.min(data.len());
                    self.blocks.push_back(BytesMut::with_capacity(room));
                    self.blocks.back_mut().expect("just pushed")
                }
            };
            let n = (chunk - last.len()).min(data.len());
            last.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
    }

    /// Takes the next chunk: the first block, whole (at most `chunk` bytes, as written).
    pub fn take_chunk(&mut self) -> Bytes {
        let b = self.blocks.pop_front().unwrap_or_default();
        self.len -= b.len();
        b.freeze()
    }

    /// Bytes of the next chunk ([`take_chunk`](Self::take_chunk)).
    pub fn next_len(&self) -> usize {
        self.blocks.front().map_or(0, BytesMut::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_cut_into_chunks_in_order() {
        let mut w = WriteBuf::default();
        let data: Vec<u8> = (0..25u8).collect();
        w.extend(&data[..3], 10);
        w.extend(&data[3..17], 10);
        assert_eq!((w.len(), w.next_len()), (17, 10));
        w.extend(&data[17..], 10);
        assert_eq!(w.len(), 25);
        let mut out = Vec::new();
        let mut sizes = Vec::new();
        while !w.is_empty() {
            let c = w.take_chunk();
            sizes.push(c.len());
            out.extend_from_slice(&c);
        }
        assert_eq!(sizes, [10, 10, 5]);
        assert_eq!(out, data);
        assert_eq!((w.len(), w.next_len()), (0, 0));
        assert!(w.take_chunk().is_empty());
    }

    #[test]
    fn a_small_write_takes_its_own_size_not_a_chunks() {
        let mut w = WriteBuf::default();
        w.extend(b"ping", 32 << 10);
        let c = w.take_chunk();
        assert_eq!(c, &b"ping"[..]);
        // Its allocation is what it holds in flight until acknowledged.
        let b = BytesMut::from(c);
        assert!(b.capacity() < 1024, "{}", b.capacity());
        // A large write still makes whole chunks.
        w.extend(&[1u8; 70_000], 32 << 10);
        assert_eq!(w.next_len(), 32 << 10);
    }

    #[test]
    fn a_partial_last_block_is_filled_before_a_new_one() {
        let mut w = WriteBuf::default();
        w.extend(b"abc", 4);
        assert_eq!(w.take_chunk(), &b"abc"[..]);
        w.extend(b"de", 4);
        w.extend(b"fgh", 4);
        assert_eq!(w.take_chunk(), &b"defg"[..]);
        assert_eq!(w.take_chunk(), &b"h"[..]);
    }
}
