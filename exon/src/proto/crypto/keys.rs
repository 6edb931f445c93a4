//! Long-term X25519 keys, their text form, and self-certifying node ids.

use std::fmt;

use ring::digest;
use x25519_dalek::StaticSecret;

use crate::proto::NodeId;

/// Bytes in a secret or public key.
pub const KEY_LEN: usize = 32;

/// Domain separation for self-certifying ids.
const ID_DOMAIN: &[u8] = b"exon v2 self-certifying node id";

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text is not 64 hexadecimal digits.
    #[error("a key is 64 hexadecimal digits (32 bytes)")]
    BadEncoding,
    /// The public key is a low-order point: no shared secret can be agreed with it.
    #[error("weak public key (low-order point)")]
    WeakKey,
}

/// A node's long-term X25519 secret key. Only its holder can seal datagrams accepted as
/// coming from the node id bound to its public key.
///
/// Debug output never shows the key; the memory is wiped when the key is dropped.
#[derive(Clone)]
pub struct SecretKey(StaticSecret);

impl SecretKey {
    /// A secret key from its 32 bytes (clamping is applied when it is used, as X25519 says).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> SecretKey {
        SecretKey(StaticSecret::from(bytes))
    }

    /// Parses 64 hexadecimal digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<SecretKey, KeyError> {
        Ok(SecretKey::from_bytes(parse_hex(text)?))
    }

    /// The key as 64 lower-case hexadecimal digits: keep it secret.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0.as_bytes())
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(x25519_dalek::PublicKey::from(&self.0).to_bytes())
    }

    /// Static-static X25519 with `peer`; `None` for a low-order peer key (the result would be
    /// predictable).
    pub(crate) fn agree(&self, peer: &PublicKey) -> Option<[u8; KEY_LEN]> {
        let shared = self
            .0
            .diffie_hellman(&x25519_dalek::PublicKey::from(peer.0));
        shared.was_contributory().then(|| shared.to_bytes())
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey(public {})", self.public_key())
    }
}

/// A node's X25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey(pub(crate) [u8; KEY_LEN]);

impl PublicKey {
    /// A public key from its 32 bytes.
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> PublicKey {
        PublicKey(bytes)
    }

    /// The 32 bytes.
    pub const fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Parses 64 hexadecimal digits (surrounding white space ignored).
    pub fn from_hex(text: &str) -> Result<PublicKey, KeyError> {
        Ok(PublicKey(parse_hex(text)?))
    }

    /// The key as 64 lower-case hexadecimal digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The self-certifying node id of this key: the first 62 bits of
    /// SHA-256("exon v2 self-certifying node id" || key). A node whose id is derived this
    /// way can be accepted by peers that never heard of it (open groups): its datagrams
    /// carry the public key, and the receiver checks the id against it.
    pub fn self_certifying_id(&self) -> NodeId {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(ID_DOMAIN);
        ctx.update(&self.0);
        let d = ctx.finish();
        let mut first = [0u8; 8];
        first.copy_from_slice(&d.as_ref()[..8]);
        NodeId::from_const(u64::from_be_bytes(first) >> 2)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

fn parse_hex(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let mut out = [0u8; KEY_LEN];
    hex::decode_to_slice(text.trim(), &mut out).map_err(|_| KeyError::BadEncoding)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_agree_on_the_shared_secret() {
        let a = SecretKey::from_bytes([1; 32]);
        let b = SecretKey::from_bytes([2; 32]);
        assert_eq!(a.agree(&b.public_key()), b.agree(&a.public_key()));
        assert_ne!(a.agree(&b.public_key()), a.agree(&a.public_key()));
    }

    #[test]
    fn low_order_keys_give_no_secret() {
        let a = SecretKey::from_bytes([1; 32]);
        assert_eq!(a.agree(&PublicKey::from_bytes([0; 32])), None);
    }

    #[test]
    fn hex_round_trips_and_rejects_bad_text() {
        let a = SecretKey::from_bytes([7; 32]);
        let again = SecretKey::from_hex(&format!(" {}\n", a.to_hex())).unwrap();
        assert_eq!(again.public_key(), a.public_key());
        let p = a.public_key();
        assert_eq!(PublicKey::from_hex(&p.to_hex()), Ok(p));
        assert_eq!(PublicKey::from_hex("abcd"), Err(KeyError::BadEncoding));
        assert_eq!(
            PublicKey::from_hex(&"zz".repeat(32)),
            Err(KeyError::BadEncoding)
        );
        assert!(
            !format!("{a:?}").contains(&a.to_hex()),
            "debug leaks the key"
        );
    }

    #[test]
    fn self_certifying_ids_differ_per_key_and_fit_a_varint() {
        let p = SecretKey::from_bytes([1; 32]).public_key();
        let q = SecretKey::from_bytes([2; 32]).public_key();
        assert_ne!(p.self_certifying_id(), q.self_certifying_id());
        assert_eq!(p.self_certifying_id(), p.self_certifying_id());
        assert!(p.self_certifying_id() <= NodeId::MAX);
    }
}
