//! Clock fields relative to the datagram's earlier ones: the two chains a datagram's slot
//! numbers and incarnations are encoded on (`docs/wire.md`, "Clock fields").
//!
//! Every slot number and incarnation is a value of one of two node clocks: the clock of the
//! datagram's sender (its tokens' slots, its own incarnations) or that of its receiver (the
//! slots it acknowledges, the incarnations its tokens were made under). A node's clock
//! starts near the wall clock in microseconds (about 2^51) and then moves only as it hands
//! values out, so two values of one clock seen in the same datagram are close, while each
//! alone takes eight bytes. A clock field is therefore written as the difference from the
//! previous field of the same clock in the datagram (zigzag-encoded, modulo 2^62), and the
//! first one of each clock in full; in a sealed datagram both chains start at the header's
//! epoch, a value of the sender's clock.
//!
//! The mapping is a bijection for every base, so each datagram still has exactly one
//! encoding, and decoding never fails on the arithmetic (any varint below 2^62 is some
//! value below 2^62).

use bytes::BufMut;

use crate::proto::wire::codec::{put_varint, varint_len, Reader, VARINT_MAX};
use crate::proto::wire::header::Header;
use crate::proto::DecodeError;

/// Values modulo 2^62, the range of a varint.
const MASK: u64 = VARINT_MAX;

/// A chain with no base yet (no clock value reaches it: they stay below 2^62).
const NONE: u64 = u64::MAX;

/// Whose clock a field holds, as the datagram's sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Of {
    /// The sender's clock: its tokens' slots, the incarnations of its receiver records.
    Src = 0,
    /// The receiver's clock: the slots it is told about, the incarnations its tokens name.
    Dst = 1,
}

/// The previous value of each clock in the datagram being written or read: what the next
/// clock field of that clock is written against (none yet: it is written in full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clocks {
    /// By [`Of`]; [`NONE`] for no base.
    bases: [u64; 2],
}

impl Default for Clocks {
    fn default() -> Self {
        Self::absolute()
    }
}

impl Clocks {
    /// No base yet: the first field of each clock is written in full. What a plaintext
    /// datagram starts with, and what a frame written on its own assumes.
    pub const fn absolute() -> Clocks {
        Clocks {
            bases: [NONE, NONE],
        }
    }

    /// The bases a datagram with `header` starts with: both chains at the epoch of a
    /// sealed header (a value of the sender's clock; the receiver's clock, started from the
    /// wall clock too, is usually within a few minutes of it), none in plaintext.
    pub fn of(header: &Header) -> Clocks {
        let epoch = header.seal.as_ref().map_or(NONE, |s| s.seq.epoch & MASK);
        Clocks {
            bases: [epoch, epoch],
        }
    }

    /// The varint that stands for `v` of clock `of`, which becomes its chain's base.
    #[inline(always)]
    pub(crate) fn encoded(&mut self, of: Of, v: u64) -> u64 {
        debug_assert!(v <= VARINT_MAX, "clock value out of range: {v}");
        let v = v & MASK;
        let prev = std::mem::replace(&mut self.bases[of as usize], v);
        if prev == NONE {
            v
        } else {
            zigzag(v.wrapping_sub(prev))
        }
    }

    /// Appends clock value `v` of clock `of`.
    #[inline(always)]
    pub fn put(&mut self, buf: &mut impl BufMut, of: Of, v: u64) {
        let x = self.encoded(of, v);
        put_varint(buf, x);
    }

    /// The bytes [`put`](Self::put) would append for `v`, and the base moves as it would.
    #[inline(always)]
    pub fn take_len(&mut self, of: Of, v: u64) -> usize {
        varint_len(self.encoded(of, v))
    }

    /// Reads a value of clock `of`.
    #[inline(always)]
    pub fn read(&mut self, r: &mut Reader<'_>, of: Of) -> Result<u64, DecodeError> {
        let x = r.varint()?;
        let base = &mut self.bases[of as usize];
        let v = if *base == NONE {
            x
        } else {
            base.wrapping_add(unzigzag(x)) & MASK
        };
        *base = v;
        Ok(v)
    }
}

/// A difference modulo 2^62 (any `u64`, whose low 62 bits count), read as signed in
/// [-2^61, 2^61), zigzag-mapped onto [0, 2^62): small differences either way take few
/// bytes.
#[inline(always)]
fn zigzag(d: u64) -> u64 {
    // The low 62 bits, sign-extended from bit 61.
    let signed = ((d << 2) as i64) >> 2;
    ((signed << 1) ^ (signed >> 63)) as u64
}

/// The difference, as a `u64` to add modulo 2^62, that [`zigzag`] mapped onto `x` (below
/// 2^62).
#[inline(always)]
fn unzigzag(x: u64) -> u64 {
    (x >> 1) ^ 0u64.wrapping_sub(x & 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Half the range: differences of at least this much are negative.
    const HALF: u64 = 1 << 61;

    fn round_trip(bases: Clocks, of: Of, v: u64) -> (usize, u64) {
        let (mut w, mut r) = (bases, bases);
        let mut buf = Vec::new();
        w.put(&mut buf, of, v);
        assert_eq!(bases.clone().take_len(of, v), buf.len());
        let mut reader = Reader::new(&buf);
        let got = r.read(&mut reader, of).expect("decodes");
        assert_eq!(reader.remaining(), 0);
        assert_eq!(w, r, "both ends move the base alike");
        (buf.len(), got)
    }

    #[test]
    fn every_value_comes_back_from_every_base() {
        let edges = [
            0,
            1,
            2,
            63,
            64,
            HALF - 1,
            HALF,
            HALF + 1,
            VARINT_MAX - 1,
            VARINT_MAX,
        ];
        let near = 1u64 << 51;
        let values = edges
            .iter()
            .copied()
            .chain([near, near + 5, near - 5, near + 9000]);
        for v in values {
            for base in edges.iter().copied().chain([near]) {
                for of in [Of::Src, Of::Dst] {
                    let mut c = Clocks::absolute();
                    c.bases[of as usize] = base;
                    assert_eq!(round_trip(c, of, v).1, v, "v {v} base {base}");
                }
            }
            assert_eq!(round_trip(Clocks::absolute(), Of::Src, v).1, v);
        }
    }

    #[test]
    fn the_mapping_is_one_to_one_near_zero_and_at_the_ends() {
        let mut seen = std::collections::HashSet::new();
        for d in (0..1000u64).chain((0..1000).map(|k| MASK - k)) {
            let z = zigzag(d);
            assert!(z <= VARINT_MAX);
            assert_eq!(unzigzag(z) & MASK, d);
            assert!(seen.insert(z), "two differences on {z}");
        }
        assert_eq!(unzigzag(VARINT_MAX) & MASK, HALF);
        assert_eq!(zigzag(HALF), VARINT_MAX);
        // Small differences either way: 0, -1, 1, -2, 2, ... onto 0, 1, 2, 3, 4, ...
        let around: Vec<u64> = [0, MASK, 1, MASK - 1, 2]
            .iter()
            .map(|&d| zigzag(d))
            .collect();
        assert_eq!(around, [0, 1, 2, 3, 4]);
        // Only the low 62 bits of a difference count (it is taken modulo 2^62).
        assert_eq!(zigzag(5 | (3 << 62)), zigzag(5));
    }

    #[test]
    fn close_values_take_a_byte_and_each_chain_keeps_its_own_base() {
        let near = (1u64 << 51) + 12_345;
        let mut c = Clocks::absolute();
        let mut buf = Vec::new();
        c.put(&mut buf, Of::Src, near);
        c.put(&mut buf, Of::Dst, near + (1 << 40));
        assert_eq!(buf.len(), 16, "the first of each clock in full");
        c.put(&mut buf, Of::Src, near + 1);
        c.put(&mut buf, Of::Dst, near + (1 << 40) - 3);
        c.put(&mut buf, Of::Src, near + 1);
        assert_eq!(buf.len(), 19, "then a byte each");
        let mut d = Clocks::absolute();
        let mut r = Reader::new(&buf);
        let got: Vec<u64> = [Of::Src, Of::Dst, Of::Src, Of::Dst, Of::Src]
            .iter()
            .map(|&of| d.read(&mut r, of).unwrap())
            .collect();
        let dst = near + (1 << 40);
        assert_eq!(got, [near, dst, near + 1, dst - 3, near + 1]);
    }
}
