//! Variable-length integers and a bounds-checked reader: the primitives of the wire format.
//!
//! Integers use QUIC's variable-length encoding (RFC 9000, section 16): the two high bits of
//! the first byte give the length (1, 2, 4 or 8 bytes), the rest is the value, big-endian.
//! Unlike QUIC, exon accepts only the *shortest* encoding of each value, so every valid
//! datagram has exactly one byte representation and `encode(decode(x)) == x` holds.

use bytes::{BufMut, Bytes};

use crate::proto::DecodeError;

/// The largest value a variable-length integer can carry: 2^62 - 1.
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Number of bytes the shortest encoding of `v` takes (1, 2, 4 or 8).
///
/// Values above [`VARINT_MAX`] are not encodable; callers keep values in range.
#[inline]
pub const fn varint_len(v: u64) -> usize {
    if v < (1 << 6) {
        1
    } else if v < (1 << 14) {
        2
    } else if v < (1 << 30) {
        4
    } else {
        8
    }
}

/// Appends the shortest encoding of `v`.
///
/// # Panics
/// Panics in debug builds if `v > VARINT_MAX`; the core never builds such a value.
#[inline]
pub fn put_varint(buf: &mut impl BufMut, v: u64) {
    debug_assert!(v <= VARINT_MAX, "varint out of range: {v}");
    match varint_len(v) {
        1 => buf.put_u8(v as u8),
        2 => buf.put_u16(0x4000 | v as u16),
        4 => buf.put_u32(0x8000_0000 | v as u32),
        _ => buf.put_u64(0xc000_0000_0000_0000 | v),
    }
}

/// A cursor over received bytes that never reads past the end and never panics.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading `data` from its first byte.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Bytes not yet read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Offset of the next byte to read.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Reads one byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.data.get(self.pos).ok_or(DecodeError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads `n` bytes; fails without consuming anything if fewer remain.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Reads a variable-length integer, rejecting non-shortest encodings. Always inlined:
    /// every frame field is one, and the call cost as much as the read.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let first = self.u8()?;
        let top = first & 0x3f;
        // One load per length (1, 2, 4 or 8 bytes, as the top two bits say), not a loop
        // per byte: clock values take all eight.
        // Each length's value is below the next length's floor by construction, so the
        // encoding is the shortest (`varint_len(v)` bytes) exactly when the value reaches
        // its own length's floor: one comparison, not `varint_len`'s chain.
        let (v, floor) = match first >> 6 {
            0 => return Ok(u64::from(top)),
            1 => {
                let b = self.bytes(1)?;
                (u64::from(u16::from_be_bytes([top, b[0]])), 1 << 6)
            }
            2 => {
                let b = self.bytes(3)?;
                (
                    u64::from(u32::from_be_bytes([top, b[0], b[1], b[2]])),
                    1 << 14,
                )
            }
            _ => {
                let b: [u8; 7] = self
                    .bytes(7)?
                    .try_into()
                    .map_err(|_| DecodeError::Truncated)?;
                let [b0, b1, b2, b3, b4, b5, b6] = b;
                (
                    u64::from_be_bytes([top, b0, b1, b2, b3, b4, b5, b6]),
                    1 << 30,
                )
            }
        };
        if v < floor {
            return Err(DecodeError::NonCanonicalVarint);
        }
        Ok(v)
    }

    /// Reads a length-prefixed byte string from `whole` (the buffer this reader reads),
    /// returning a zero-copy slice of it. The length is checked against the bytes present
    /// before anything is sliced, and against `max`.
    pub fn length_prefixed(&mut self, whole: &Bytes, max: usize) -> Result<Bytes, DecodeError> {
        let len = self.varint()?;
        if len > max as u64 {
            return Err(DecodeError::PayloadTooLarge);
        }
        let len = len as usize;
        if len > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let start = self.pos;
        self.pos += len;
        Ok(whole.slice(start..start + len))
    }

    /// The rest of the input, as a slice of `whole` (the bytes this reader reads), if it
    /// is at most `max` bytes long.
    pub fn rest(&mut self, whole: &Bytes, max: usize) -> Result<Bytes, DecodeError> {
        let len = self.remaining();
        if len > max {
            return Err(DecodeError::PayloadTooLarge);
        }
        let start = self.pos;
        self.pos += len;
        Ok(whole.slice(start..start + len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        b
    }

    #[test]
    fn varint_boundaries_roundtrip_at_shortest_length() {
        for (v, len) in [
            (0u64, 1usize),
            (63, 1),
            (64, 2),
            (16383, 2),
            (16384, 4),
            ((1 << 30) - 1, 4),
            (1 << 30, 8),
            (VARINT_MAX, 8),
        ] {
            let b = enc(v);
            assert_eq!(b.len(), len, "length of {v}");
            let mut r = Reader::new(&b);
            assert_eq!(r.varint().unwrap(), v);
            assert_eq!(r.remaining(), 0);
        }
    }

    proptest::proptest! {
        /// Every value up to the largest round-trips at its shortest length, and any bytes
        /// decode to a value that encodes back to exactly the bytes read, or fail.
        #[test]
        fn varints_roundtrip_and_any_bytes_read_back_as_written(
            v in 0..=VARINT_MAX,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..10),
        ) {
            let b = enc(v);
            let mut r = Reader::new(&b);
            proptest::prop_assert_eq!(r.varint(), Ok(v));
            proptest::prop_assert_eq!(r.remaining(), 0);
            let mut r = Reader::new(&bytes);
            if let Ok(got) = r.varint() {
                proptest::prop_assert_eq!(&enc(got)[..], &bytes[..r.position()]);
            }
        }
    }

    #[test]
    fn varint_rejects_longer_than_needed_encodings() {
        // 5 encoded in two bytes is valid QUIC but not canonical here.
        let mut r = Reader::new(&[0x40, 0x05]);
        assert_eq!(r.varint(), Err(DecodeError::NonCanonicalVarint));
        let mut r = Reader::new(&[0xc0, 0, 0, 0, 0, 0, 0, 0x05]);
        assert_eq!(r.varint(), Err(DecodeError::NonCanonicalVarint));
        // At each length, the largest value the next shorter one holds is refused and the
        // smallest it does not is taken.
        let at = |len: usize, v: u64| {
            let tag = [0x40u64, 0x80, 0xc0][len.trailing_zeros() as usize - 1];
            let b = ((tag << (8 * len - 8)) | v).to_be_bytes();
            Reader::new(&b[8 - len..]).varint()
        };
        for (len, floor) in [(2, 1u64 << 6), (4, 1 << 14), (8, 1 << 30)] {
            assert_eq!(at(len, floor - 1), Err(DecodeError::NonCanonicalVarint));
            assert_eq!(at(len, floor), Ok(floor));
            assert_eq!(at(len, 0), Err(DecodeError::NonCanonicalVarint));
        }
    }

    #[test]
    fn varint_truncated_is_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[0x40][..],
            &[0x80, 1, 2][..],
            &[0xc0, 1, 2, 3, 4, 5, 6][..],
        ] {
            assert_eq!(Reader::new(bytes).varint(), Err(DecodeError::Truncated));
        }
    }

    #[test]
    fn length_prefix_is_checked_before_slicing() {
        let whole = Bytes::from_static(&[0x80, 0x10, 0x00, 0x00, 1, 2, 3]);
        let mut r = Reader::new(&whole);
        assert_eq!(
            r.length_prefixed(&whole, usize::MAX),
            Err(DecodeError::Truncated)
        );
        let mut r = Reader::new(&whole);
        assert_eq!(
            r.length_prefixed(&whole, 10),
            Err(DecodeError::PayloadTooLarge)
        );
    }
}
