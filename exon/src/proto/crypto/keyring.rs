//! The keyring: which public key each known node id holds (closed groups).

use super::keys::{KeyError, PublicKey};
use crate::proto::NodeId;

/// Node ids and their public keys: a datagram is accepted as from id X only if it was sealed
/// with the secret key of X's public key here (or, where self-certifying ids are allowed,
/// of the key that X is derived from).
///
/// Text form (see [`Keyring::parse`]), one peer per line:
/// ```text
/// # comments and blank lines are ignored
/// 1 3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29
/// 2 8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    keys: crate::proto::PeerMap<PublicKey>,
}

/// A keyring text that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyringError {
    /// A line is not `<node id> <public key>`.
    #[error("line {line}: expected `<node id> <64 hex digits>`")]
    BadLine {
        /// 1-based line number.
        line: usize,
    },
    /// A key could not be decoded.
    #[error("line {line}: {source}")]
    BadKey {
        /// 1-based line number.
        line: usize,
        /// Why.
        source: KeyError,
    },
    /// The keyring holds `max` peers already
    /// ([`Config::keys.max_keyring_size`](crate::proto::KeyConfig::max_keyring_size)): a new member
    /// is refused (a known one may still change its key).
    #[error("the keyring is full ({max} peers)")]
    Full {
        /// The bound.
        max: usize,
    },
    /// The same id twice with different keys.
    #[error("line {line}: node id {id} listed twice")]
    Duplicate {
        /// 1-based line number.
        line: usize,
        /// The id.
        id: NodeId,
    },
}

impl Keyring {
    /// An empty keyring.
    pub fn new() -> Keyring {
        Keyring::default()
    }

    /// Records that `id` holds `key`, replacing any earlier key for it.
    pub fn insert(&mut self, id: NodeId, key: PublicKey) {
        self.keys.insert(id, key);
    }

    /// Records `key` under its self-certifying id, which it returns.
    pub fn insert_self_certifying(&mut self, key: PublicKey) -> NodeId {
        let id = key.self_certifying_id();
        self.keys.insert(id, key);
        id
    }

    /// Forgets `id`.
    pub fn remove(&mut self, id: NodeId) -> Option<PublicKey> {
        self.keys.remove(&id)
    }

    /// The key of `id`, if known.
    pub fn get(&self, id: NodeId) -> Option<&PublicKey> {
        self.keys.get(&id)
    }

    /// Number of peers known.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no peer is known.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Iterates over ids and keys, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &PublicKey)> {
        self.keys.iter().map(|(id, k)| (*id, k))
    }

    /// Parses the text form: one `<node id> <public key hex>` per line, `#` comments.
    pub fn parse(text: &str) -> Result<Keyring, KeyringError> {
        let mut ring = Keyring::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let mut parts = content.split_whitespace();
            let (Some(id), Some(key), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(KeyringError::BadLine { line });
            };
            let id = id
                .parse::<u64>()
                .ok()
                .and_then(NodeId::new)
                .ok_or(KeyringError::BadLine { line })?;
            let key =
                PublicKey::from_hex(key).map_err(|source| KeyringError::BadKey { line, source })?;
            if ring.keys.get(&id).is_some_and(|k| *k != key) {
                return Err(KeyringError::Duplicate { line, id });
            }
            ring.insert(id, key);
        }
        Ok(ring)
    }

    /// The text form, sorted by id: [`parse`](Self::parse) reads it back.
    pub fn to_text(&self) -> String {
        let mut ids: Vec<_> = self.keys.iter().collect();
        ids.sort();
        ids.iter()
            .map(|(id, k)| format!("{} {}\n", id.get(), k.to_hex()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::keys::SecretKey;
    use super::*;

    #[test]
    fn text_form_round_trips() {
        let mut ring = Keyring::new();
        ring.insert(
            NodeId::from_const(1),
            SecretKey::from_bytes([1; 32]).public_key(),
        );
        let open = ring.insert_self_certifying(SecretKey::from_bytes([2; 32]).public_key());
        let text = format!("# peers\n\n{}", ring.to_text());
        let back = Keyring::parse(&text).unwrap();
        assert_eq!(back, ring);
        assert!(back.get(open).is_some());
    }

    #[test]
    fn bad_lines_are_errors_with_their_number() {
        assert_eq!(
            Keyring::parse("1\n"),
            Err(KeyringError::BadLine { line: 1 })
        );
        assert!(matches!(
            Keyring::parse("# x\n2 abc\n"),
            Err(KeyringError::BadKey { line: 2, .. })
        ));
        let k1 = SecretKey::from_bytes([1; 32]).public_key().to_hex();
        let k2 = SecretKey::from_bytes([2; 32]).public_key().to_hex();
        assert!(matches!(
            Keyring::parse(&format!("3 {k1}\n3 {k2}\n")),
            Err(KeyringError::Duplicate { line: 2, .. })
        ));
        assert_eq!(
            Keyring::parse(&format!("{} {k1}\n", u64::MAX)),
            Err(KeyringError::BadLine { line: 1 })
        );
    }
}
