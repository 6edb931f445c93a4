//! Per-pair datagram keys (X25519 + HKDF-SHA256) and AES-128-GCM sealing and opening.

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use ring::hkdf::{Salt, HKDF_SHA256};

use super::keys::{PublicKey, SecretKey};
use crate::proto::NodeId;

/// Bytes of the authentication tag at the end of a sealed datagram.
pub const TAG_LEN: usize = 16;

const SALT: &[u8] = b"exon v2 static-static";
const INFO: &[u8] = b"exon v2 datagram key";

/// The position of a sealed datagram in its sender's sequence: the epoch (a value of the
/// sender's node clock, never reused across restarts) and a counter within it. Together they
/// form the AEAD nonce, and they only grow over a node's life, so a receiver can tell a
/// fresher datagram from an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq {
    /// A clock value the sender reserved for this epoch.
    pub epoch: u64,
    /// The datagram's number within the epoch (256 datagrams an epoch: a sender takes a new
    /// epoch from its clock after every 256th).
    pub counter: u8,
}

impl Seq {
    /// The 96-bit AEAD nonce: epoch (8 bytes, big-endian), three zero bytes, then the
    /// counter.
    fn nonce(self) -> Nonce {
        let mut n = [0u8; aead::NONCE_LEN];
        n[..8].copy_from_slice(&self.epoch.to_be_bytes());
        n[11] = self.counter;
        Nonce::assume_unique_for_key(n)
    }
}

/// The two keys one node uses with one peer: one to seal what it sends, one to open what it
/// receives. Soft state: recomputed from the long-term keys whenever needed.
pub(crate) struct PairKeys {
    seal: LessSafeKey,
    open: LessSafeKey,
}

impl std::fmt::Debug for PairKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairKeys(..)")
    }
}

impl PairKeys {
    /// Derives the keys between `own` (with secret `secret`) and `peer`, or `None` when the
    /// peer's key is weak. One key per direction: HKDF-SHA256 over the X25519 secret, with
    /// the sender's and receiver's ids and public keys as context, so a key is bound to
    /// both node ids and to the direction.
    pub fn derive(
        secret: &SecretKey,
        own: (NodeId, &PublicKey),
        peer: (NodeId, &PublicKey),
    ) -> Option<PairKeys> {
        let shared = secret.agree(peer.1)?;
        let prk = Salt::new(HKDF_SHA256, SALT).extract(&shared);
        let key = |from: (NodeId, &PublicKey), to: (NodeId, &PublicKey)| {
            let (f, t) = (from.0.get().to_be_bytes(), to.0.get().to_be_bytes());
            let info = [INFO, &f, &t, from.1.as_bytes(), to.1.as_bytes()];
            let okm = prk.expand(&info, &AES_128_GCM).ok()?;
            Some(LessSafeKey::new(UnboundKey::from(okm)))
        };
        Some(PairKeys {
            seal: key(own, peer)?,
            open: key(peer, own)?,
        })
    }

    /// Encrypts `body` in place, authenticating `header` with it; returns the tag to append.
    pub fn seal(&self, seq: Seq, header: &[u8], body: &mut [u8]) -> [u8; TAG_LEN] {
        let tag = self
            .seal
            .seal_in_place_separate_tag(seq.nonce(), Aad::from(header), body)
            .expect("AES-GCM seals any datagram-sized input");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Checks and decrypts `body_and_tag` in place; returns the length of the plaintext, or
    /// `None` when the datagram was not sealed by the peer for this node, was altered, or
    /// the tag is missing.
    pub fn open(&self, seq: Seq, header: &[u8], body_and_tag: &mut [u8]) -> Option<usize> {
        self.open
            .open_in_place(seq.nonce(), Aad::from(header), body_and_tag)
            .ok()
            .map(|plain| plain.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (PairKeys, PairKeys) {
        let (a, b) = (
            SecretKey::from_bytes([1; 32]),
            SecretKey::from_bytes([2; 32]),
        );
        let (pa, pb) = (a.public_key(), b.public_key());
        let (ia, ib) = (NodeId::from_const(1), NodeId::from_const(2));
        (
            PairKeys::derive(&a, (ia, &pa), (ib, &pb)).unwrap(),
            PairKeys::derive(&b, (ib, &pb), (ia, &pa)).unwrap(),
        )
    }

    const SEQ: Seq = Seq {
        epoch: 9,
        counter: 3,
    };

    #[test]
    fn what_one_side_seals_the_other_opens() {
        let (a, b) = pair();
        let mut body = b"frames".to_vec();
        let tag = a.seal(SEQ, b"hdr", &mut body);
        assert_ne!(&body[..], b"frames");
        body.extend_from_slice(&tag);
        assert_eq!(b.open(SEQ, b"hdr", &mut body), Some(6));
        assert_eq!(&body[..6], b"frames");
    }

    #[test]
    fn any_change_is_refused() {
        let (a, b) = pair();
        let mut body = b"frames".to_vec();
        let tag = a.seal(SEQ, b"hdr", &mut body);
        body.extend_from_slice(&tag);
        let other = Seq { counter: 4, ..SEQ };
        assert_eq!(b.open(other, b"hdr", &mut body.clone()), None, "nonce");
        assert_eq!(b.open(SEQ, b"hdR", &mut body.clone()), None, "header");
        for i in 0..body.len() {
            let mut flipped = body.clone();
            flipped[i] ^= 0x01;
            assert_eq!(b.open(SEQ, b"hdr", &mut flipped), None, "bit in byte {i}");
        }
        let mut short = body[..body.len() - 1].to_vec();
        assert_eq!(b.open(SEQ, b"hdr", &mut short), None, "truncated tag");
        // A node cannot open its own datagrams: each direction has its own key.
        assert_eq!(a.open(SEQ, b"hdr", &mut body.clone()), None, "reflected");
    }

    #[test]
    fn a_third_key_cannot_open() {
        let (a, _) = pair();
        // Node 3's holder claims to be node 2 when sealing for node 1.
        let c = SecretKey::from_bytes([3; 32]);
        let pa = SecretKey::from_bytes([1; 32]).public_key();
        let pc = c.public_key();
        let forged = PairKeys::derive(
            &c,
            (NodeId::from_const(2), &pc),
            (NodeId::from_const(1), &pa),
        )
        .unwrap();
        let mut body = b"frames".to_vec();
        let tag = forged.seal(SEQ, b"hdr", &mut body);
        body.extend_from_slice(&tag);
        assert_eq!(a.open(SEQ, b"hdr", &mut body), None);
    }
}
