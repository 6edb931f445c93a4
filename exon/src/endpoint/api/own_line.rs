//! A value alone on its cache lines ([`OwnLine`]): one thread's writes to it do not evict
//! what other threads read beside it, nor theirs it.

use std::ops::Deref;

/// `T` aligned (and so padded) to 128 bytes: two 64-byte lines, as x86 fetches lines in
/// adjacent pairs. For the few fields written by one thread for every message and read or
/// written by another (a receipt slab's free stack, the next message id).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct OwnLine<T>(pub(crate) T);

impl<T> Deref for OwnLine<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_has_its_lines_to_itself() {
        struct Two {
            a: OwnLine<u64>,
            b: OwnLine<u64>,
        }
        let t = Two {
            a: OwnLine(1),
            b: OwnLine(2),
        };
        let (pa, pb) = (&t.a as *const _ as usize, &t.b as *const _ as usize);
        assert!(pa.abs_diff(pb) >= 128);
        assert_eq!((pa % 128, pb % 128), (0, 0));
        assert_eq!(*t.a + *t.b, 3);
    }
}
