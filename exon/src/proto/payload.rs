//! A message's bytes as the core keeps them: a short head written before a body, so that an
//! embedding can put a small envelope before the application's bytes without copying them.

use bytes::{BufMut, Bytes, BytesMut};

/// Most bytes a head holds in place; a longer head is joined to the body (one copy).
pub const HEAD_MAX: usize = 15;

/// A message's bytes: `head` then `body`, sent as one payload (the receiver sees their
/// concatenation). `From<Bytes>` gives a payload with no head.
#[derive(Clone, Default)]
pub struct Payload {
    head: [u8; HEAD_MAX],
    head_len: u8,
    body: Bytes,
}

impl Payload {
    /// `head` then `body`. A head longer than [`HEAD_MAX`] is joined to the body (a copy).
    /// Inline: a head of a length known where it is called is written as a constant.
    #[inline]
    pub fn with_head(head: &[u8], body: Bytes) -> Payload {
        if head.len() > HEAD_MAX {
            return Payload::joined(head, &body);
        }
        let mut h = [0; HEAD_MAX];
        h[..head.len()].copy_from_slice(head);
        Payload {
            head: h,
            head_len: head.len() as u8,
            body,
        }
    }

    /// `head` and `body` joined in one buffer (a head too long to keep apart).
    #[cold]
    fn joined(head: &[u8], body: &Bytes) -> Payload {
        let mut joined = BytesMut::with_capacity(head.len() + body.len());
        joined.put_slice(head);
        joined.put_slice(body);
        Payload::from(joined.freeze())
    }

    /// The head.
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        usize::from(self.head_len) + self.body.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `from..to` of the concatenation, as the part in the head and the part in the
    /// body. `from <= to <= len()`.
    pub fn slices(&self, from: usize, to: usize) -> (&[u8], &[u8]) {
        let h = self.head();
        let (hf, ht) = (from.min(h.len()), to.min(h.len()));
        let (bf, bt) = (from.saturating_sub(h.len()), to.saturating_sub(h.len()));
        (&h[hf..ht], &self.body[bf..bt])
    }

    /// Appends the whole payload to `buf`.
    pub fn put(&self, buf: &mut impl BufMut) {
        buf.put_slice(self.head());
        buf.put_slice(&self.body);
    }

    /// The payload as one buffer: the body itself when there is no head, else a copy.
    pub fn to_bytes(&self) -> Bytes {
        if self.head_len == 0 {
            return self.body.clone();
        }
        let mut b = BytesMut::with_capacity(self.len());
        self.put(&mut b);
        b.freeze()
    }
}

impl From<Bytes> for Payload {
    fn from(body: Bytes) -> Payload {
        Payload {
            head: [0; HEAD_MAX],
            head_len: 0,
            body,
        }
    }
}

impl From<&'static [u8]> for Payload {
    fn from(body: &'static [u8]) -> Payload {
        Payload::from(Bytes::from_static(body))
    }
}

impl From<Vec<u8>> for Payload {
    fn from(body: Vec<u8>) -> Payload {
        Payload::from(Bytes::from(body))
    }
}

impl PartialEq for Payload {
    /// Compares the bytes, wherever the head ends.
    fn eq(&self, other: &Payload) -> bool {
        self.len() == other.len() && self.to_bytes() == other.to_bytes()
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payload")
            .field("head", &self.head())
            .field("body", &self.body)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_concatenation() {
        let p = Payload::with_head(&[1, 2, 3], Bytes::from_static(&[4, 5, 6, 7]));
        let whole: Vec<u8> = (1..=7).collect();
        assert_eq!(p.len(), 7);
        assert_eq!(p.to_bytes()[..], whole[..]);
        for from in 0..=7 {
            for to in from..=7 {
                let (a, b) = p.slices(from, to);
                assert_eq!([a, b].concat(), whole[from..to], "{from}..{to}");
            }
        }
    }

    #[test]
    fn a_long_head_is_joined_and_no_head_is_no_copy() {
        let head = [9u8; HEAD_MAX + 1];
        let p = Payload::with_head(&head, Bytes::from_static(b"ab"));
        assert_eq!(p.len(), HEAD_MAX + 3);
        assert_eq!(&p.to_bytes()[HEAD_MAX + 1..], b"ab");
        let body = Bytes::from_static(b"body");
        let p = Payload::from(body.clone());
        assert_eq!(p.to_bytes().as_ptr(), body.as_ptr());
        assert_eq!(
            Payload::with_head(&[1], Bytes::from_static(&[2])),
            Payload::from(vec![1, 2])
        );
    }
}
