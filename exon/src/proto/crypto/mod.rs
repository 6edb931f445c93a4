//! Datagram security: node identities (X25519 keys), the keyring, and sealing every datagram
//! with AES-128-GCM under keys bound to both node ids.
//!
//! The core stays sans-IO: it never generates keys or reads a random source. Nonces come
//! from the node clock (see [`Seq`]); per-peer keys are soft state recomputed from the
//! long-term keys. The scheme is described in `docs/security.md`.

mod cache;
mod keyring;
pub(crate) mod keys;
pub(crate) mod seal;

pub use keyring::{Keyring, KeyringError};
pub use keys::{KeyError, PublicKey, SecretKey, KEY_LEN};
pub use seal::{Seq, TAG_LEN};

use std::time::Instant;

pub(crate) use cache::DhBudget;
use cache::KeyCache;
use seal::PairKeys;

use crate::proto::wire::header::{Cookie, Header, SealHeader};
use crate::proto::{Config, ConfigError, NodeId, PeerMap};

/// How a node protects its datagrams.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Security {
    /// Every datagram sealed (authenticated and encrypted) under keys bound to node ids: the
    /// default and the only safe choice on a network others can send to.
    Sealed(Identity),
    /// No authentication: anyone who can send a datagram to the node can impersonate any
    /// peer, acknowledge messages that were never delivered, or have one delivered twice.
    /// For loopback tests and benchmarks against plaintext peers only.
    InsecurePlaintext,
}

/// A node's secret key and the peers it accepts.
#[derive(Debug, Clone)]
pub struct Identity {
    secret: SecretKey,
    keyring: Keyring,
    self_certifying: bool,
}

impl Identity {
    /// An identity with secret key `secret`, an empty keyring, and no self-certifying peers.
    pub fn new(secret: SecretKey) -> Identity {
        Identity {
            secret,
            keyring: Keyring::new(),
            self_certifying: false,
        }
    }

    /// Uses `keyring` for the peers' keys (closed groups).
    pub fn with_keyring(mut self, keyring: Keyring) -> Identity {
        self.keyring = keyring;
        self
    }

    /// Also accepts peers not in the keyring whose id is the self-certifying id of the key
    /// their datagrams carry (open groups). Off by default.
    pub fn allow_self_certifying(mut self, allow: bool) -> Identity {
        self.self_certifying = allow;
        self
    }

    /// The public key to give to peers.
    pub fn public_key(&self) -> PublicKey {
        self.secret.public_key()
    }

    /// The keyring.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// The keyring, to add or remove peers.
    pub fn keyring_mut(&mut self) -> &mut Keyring {
        &mut self.keyring
    }
}

/// A sealed identity for tests: node `id`'s secret key, and a keyring with the keys of
/// `peers`, all derived from the node ids alone, so anyone can compute them. The datagrams
/// are sealed exactly as in production; only the keys are public. Never use it where
/// others can reach the sockets.
pub fn insecure_test_security(id: NodeId, peers: impl IntoIterator<Item = NodeId>) -> Security {
    let mut keyring = Keyring::new();
    for p in peers {
        keyring.insert(p, insecure_test_secret(p).public_key());
    }
    Security::Sealed(Identity::new(insecure_test_secret(id)).with_keyring(keyring))
}

/// The secret key [`insecure_test_security`] gives node `id`: SHA-256("exon insecure test
/// key" || id as 8 bytes big-endian), so every id has its own key pair (X25519 clamping
/// ignores the low three bits of the first byte, so the id cannot simply be the key's first
/// bytes: ids 0 to 7 would share one key).
pub fn insecure_test_secret(id: NodeId) -> SecretKey {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"exon insecure test key");
    ctx.update(&id.get().to_be_bytes());
    let mut b = [0u8; KEY_LEN];
    b.copy_from_slice(ctx.finish().as_ref());
    SecretKey::from_bytes(b)
}

/// Why a sealed datagram was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// Plaintext datagram at a sealed node, or sealed at a plaintext one.
    WrongMode,
    /// No key is known for the source (not in the keyring, and no acceptable announced key).
    UnknownPeer,
    /// The announced key does not match the keyring or the source's self-certifying id.
    KeyMismatch,
    /// The budget of key agreements for uncached sources is spent.
    Busy,
    /// The tag did not verify: forged, altered, truncated, or sealed for someone else.
    BadTag,
}

/// The datagram keys shared with one keyring member, derived once for its current key.
#[derive(Debug)]
struct Member {
    key: PublicKey,
    /// `None` when the member's key is weak (nothing can be sealed for it or opened from it).
    keys: Option<PairKeys>,
}

/// Cookies a node holds at most (for peers it sends to that have not answered yet).
const MAX_COOKIES: usize = 4096;

/// The sealing state of a node: present unless the node runs in plaintext.
#[derive(Debug)]
pub(crate) struct Sealer {
    id: NodeId,
    secret: SecretKey,
    public: PublicKey,
    /// Whether our own datagrams carry our public key (our id is self-certifying).
    announce: bool,
    keyring: Keyring,
    max_keyring: usize,
    /// Keys of keyring members, derived at most once per member key and kept while it is a
    /// member (rule `pin_member_keys`).
    members: PeerMap<Member>,
    self_certifying: bool,
    cache: KeyCache,
    budget: DhBudget,
    /// The budget of key agreements for datagrams the embedding vouches for.
    vouched: DhBudget,
    /// Cookies peers gave this node, echoed in datagrams to them until one answers.
    cookies: PeerMap<Cookie>,
    epoch: Option<u64>,
    counter: u8,
    /// Key agreements done for incoming datagrams from sources with no derived keys.
    agreements: u64,
}

/// Whether the embedding vouches for a datagram's source address (the core knows none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Vouch {
    /// Nothing is known of the source address: any key agreement comes from the general
    /// budget (`Config::keys.agreements_per_sec`).
    #[default]
    Unproven,
    /// The datagram echoed a valid cookie for its source address, within that address's
    /// limit: a key agreement comes from the vouched budget
    /// (`Config::keys.cookie_agreements_per_sec`).
    Cookie,
}

impl Sealer {
    /// The sealing state of node `id`, or `None` in plaintext mode.
    pub fn new(
        id: NodeId,
        security: Security,
        cfg: &Config,
    ) -> Result<Option<Sealer>, ConfigError> {
        let Security::Sealed(identity) = security else {
            return Ok(None);
        };
        let public = identity.secret.public_key();
        if identity.keyring.get(id).is_some_and(|k| *k != public) {
            return Err(ConfigError::KeyringConflict);
        }
        if identity.keyring.len() > cfg.keys.max_keyring_size {
            return Err(ConfigError::KeyringTooLarge {
                members: identity.keyring.len(),
                max: cfg.keys.max_keyring_size,
            });
        }
        Ok(Some(Sealer {
            id,
            announce: public.self_certifying_id() == id,
            secret: identity.secret,
            public,
            keyring: identity.keyring,
            max_keyring: cfg.keys.max_keyring_size,
            members: PeerMap::default(),
            self_certifying: identity.self_certifying,
            cache: KeyCache::new(cfg.keys.cache_size),
            budget: DhBudget::new(cfg.keys.agreements_per_sec, cfg.keys.agreement_burst),
            vouched: DhBudget::new(
                cfg.keys.cookie_agreements_per_sec,
                cfg.keys.cookie_agreement_burst,
            ),
            cookies: PeerMap::default(),
            epoch: None,
            counter: 0,
            agreements: 0,
        }))
    }

    /// The keyring.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// Adds (or replaces) `id`'s key in the keyring; refused when the keyring is full.
    pub fn add_peer_key(&mut self, id: NodeId, key: PublicKey) -> Result<(), KeyringError> {
        if self.keyring.get(id).is_none() && self.keyring.len() >= self.max_keyring {
            return Err(KeyringError::Full {
                max: self.max_keyring,
            });
        }
        if self.keyring.get(id) != Some(&key) {
            self.members.remove(&id);
            self.cache.remove(id);
        }
        self.keyring.insert(id, key);
        Ok(())
    }

    /// Removes `id` from the keyring, with the keys derived for it.
    pub fn remove_peer_key(&mut self, id: NodeId) -> Option<PublicKey> {
        self.members.remove(&id);
        self.cache.remove(id);
        self.keyring.remove(id)
    }

    /// This node's public key.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// Whether a key is known for sending to `peer`.
    pub fn knows(&self, peer: NodeId) -> bool {
        self.keyring.get(peer).is_some() || self.cache.public_key(peer).is_some()
    }

    /// Key agreements done for incoming datagrams from sources with no derived keys.
    pub fn agreements(&self) -> u64 {
        self.agreements
    }

    /// Peers with cached keys (keyring members' kept keys not included).
    pub fn cached_peers(&self) -> usize {
        self.cache.len()
    }

    /// Keeps `cookie` to echo in datagrams to `peer` until it answers. When this node
    /// holds `MAX_COOKIES` already, they are all forgotten first (a cookie is soft state:
    /// a peer still under load sends it again).
    pub fn set_cookie(&mut self, peer: NodeId, cookie: Cookie) {
        if self.cookies.len() >= MAX_COOKIES && !self.cookies.contains_key(&peer) {
            self.cookies.clear();
        }
        self.cookies.insert(peer, cookie);
    }

    /// The header fields of the next datagram to `peer`, or `None` when a new epoch must be
    /// taken from the clock first ([`start_epoch`](Self::start_epoch)).
    pub fn next_seal_header(&mut self, peer: NodeId) -> Option<SealHeader> {
        let epoch = self.epoch?;
        let seq = Seq {
            epoch,
            counter: self.counter,
        };
        match self.counter.checked_add(1) {
            Some(c) => self.counter = c,
            None => self.epoch = None, // every counter of this epoch is used
        }
        Some(SealHeader {
            seq,
            key: self.announce.then_some(self.public),
            cookie: self.cookies.get(&peer).copied(),
        })
    }

    /// Starts a new epoch: `epoch` is a clock value this node will never use again, in this
    /// run or a later one.
    pub fn start_epoch(&mut self, epoch: u64) {
        self.epoch = Some(epoch);
        self.counter = 0;
    }

    /// Whether sealing needs a new epoch.
    pub fn needs_epoch(&self) -> bool {
        self.epoch.is_none()
    }

    fn derive(&self, peer: NodeId, key: &PublicKey) -> Option<PairKeys> {
        PairKeys::derive(&self.secret, (self.id, &self.public), (peer, key))
    }

    /// The kept keys of keyring member `id` (derived now if it has none for its current
    /// key, which `derived` reports), or `None` when `id` is no member. `Some(None)`: the
    /// member's key is weak.
    fn member(&mut self, id: NodeId, derived: &mut bool) -> Option<Option<&PairKeys>> {
        if !self.members.contains_key(&id) {
            let key = *self.keyring.get(id)?;
            *derived = true;
            let keys = self.derive(id, &key);
            self.members.insert(id, Member { key, keys });
        }
        self.members.get(&id).map(|m| m.keys.as_ref())
    }

    /// The kept keys of keyring member `id`, if derived already: one lookup, for every
    /// datagram to or from a member after the first. A member's kept keys are always those
    /// of its key in the keyring (`add_peer_key` and `remove_peer_key` drop them when the
    /// key changes or goes).
    #[inline]
    fn kept(&self, id: NodeId) -> Option<&Member> {
        let m = self.members.get(&id)?;
        debug_assert_eq!(
            self.keyring.get(id),
            Some(&m.key),
            "kept keys of another key"
        );
        Some(m)
    }

    /// Seals the datagram `buf[start..]`: the header is `buf[start..body]`, the frames
    /// `buf[body..]`; appends the tag. Returns false (and leaves `buf` alone) when no key is
    /// known for `peer`.
    #[allow(clippy::too_many_arguments)]
    pub fn seal(
        &mut self,
        peer: NodeId,
        seq: Seq,
        buf: &mut Vec<u8>,
        start: usize,
        body: usize,
        pinned: impl Fn(NodeId) -> bool,
        pin_members: bool,
    ) -> bool {
        if pin_members {
            if let Some(m) = self.kept(peer) {
                return m
                    .keys
                    .as_ref()
                    .is_some_and(|k| seal_with(k, seq, buf, start, body));
            }
            if let Some(keys) = self.member(peer, &mut false) {
                return keys.is_some_and(|k| seal_with(k, seq, buf, start, body));
            }
        }
        if let Some(keys) = self.cache.get(peer) {
            return seal_with(keys, seq, buf, start, body);
        }
        // Not cached: only the keyring can say (a key learned from a self-certifying peer
        // lives in the cache alone, kept there while the peer has records).
        let Some(key) = self.keyring.get(peer).copied() else {
            return false;
        };
        let Some(keys) = self.derive(peer, &key) else {
            return false;
        };
        let sealed = seal_with(&keys, seq, buf, start, body);
        // Cached for the next datagrams, unless every cached peer is busy (then derived
        // again next time).
        self.cache.insert(peer, key, keys, &pinned);
        sealed
    }

    /// Opens a sealed datagram from `header.src`: `data[..body]` is the header, the rest the
    /// sealed frames and tag. Returns the plaintext length (the frames now lie in
    /// `data[body..body + len]`).
    ///
    /// A keyring member's keys are derived once and kept (with `pin_members`): a forgery
    /// in its name costs a tag check. Any other source whose keys are not cached costs a
    /// key agreement from the budget `vouch` names, and is refused (`Busy`) when it is
    /// spent.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &mut self,
        now: Instant,
        header: &Header,
        data: &mut [u8],
        body: usize,
        pinned: impl Fn(NodeId) -> bool,
        pin_members: bool,
        vouch: Vouch,
    ) -> Result<usize, OpenError> {
        let Some(sh) = header.seal else {
            return Err(OpenError::WrongMode);
        };
        let src = header.src;
        let (aad, rest) = data.split_at_mut(body);
        if let Some(m) = pin_members.then(|| self.kept(src)).flatten() {
            // A member whose keys are kept (as below, without a lookup of the keyring).
            if sh.key.is_some_and(|k| k != m.key) {
                return Err(OpenError::KeyMismatch);
            }
            let opened = match &m.keys {
                Some(keys) => keys.open(sh.seq, aad, rest).ok_or(OpenError::BadTag),
                None => Err(OpenError::KeyMismatch),
            };
            let len = opened?;
            if !self.cookies.is_empty() {
                self.cookies.remove(&src);
            }
            return Ok(len);
        }
        if pin_members && self.keyring.get(src).is_some() {
            if sh.key.is_some_and(|k| Some(&k) != self.keyring.get(src)) {
                return Err(OpenError::KeyMismatch);
            }
            let mut derived = false;
            let opened = match self.member(src, &mut derived).flatten() {
                Some(keys) => keys.open(sh.seq, aad, rest).ok_or(OpenError::BadTag),
                None => Err(OpenError::KeyMismatch),
            };
            self.agreements += u64::from(derived);
            let len = opened?;
            self.cookies.remove(&src);
            return Ok(len);
        }
        if let Some(cached) = self.cache.public_key(src).copied() {
            if sh.key.is_some_and(|k| k != cached) {
                return Err(OpenError::KeyMismatch);
            }
            if let Some(keys) = self.cache.get(src) {
                let len = keys.open(sh.seq, aad, rest).ok_or(OpenError::BadTag)?;
                self.cookies.remove(&src);
                return Ok(len);
            }
        }
        let key = match (self.keyring.get(src), sh.key) {
            (Some(k), Some(announced)) if *k != announced => return Err(OpenError::KeyMismatch),
            (Some(k), _) => *k,
            (None, Some(announced)) if self.self_certifying => {
                if announced.self_certifying_id() != src {
                    return Err(OpenError::KeyMismatch);
                }
                announced
            }
            (None, _) => return Err(OpenError::UnknownPeer),
        };
        let budget = match vouch {
            Vouch::Unproven => &mut self.budget,
            Vouch::Cookie => &mut self.vouched,
        };
        if !budget.try_take(now) {
            return Err(OpenError::Busy);
        }
        self.agreements += 1;
        let keys = self.derive(src, &key).ok_or(OpenError::KeyMismatch)?;
        let len = keys.open(sh.seq, aad, rest).ok_or(OpenError::BadTag)?;
        // Authenticated: only now may the source take a place in the cache.
        self.cache.insert(src, key, keys, pinned);
        self.cookies.remove(&src);
        Ok(len)
    }
}

fn seal_with(keys: &PairKeys, seq: Seq, buf: &mut Vec<u8>, start: usize, body: usize) -> bool {
    let (head, frames) = buf[start..].split_at_mut(body - start);
    let tag = keys.seal(seq, head, frames);
    buf.extend_from_slice(&tag);
    true
}
