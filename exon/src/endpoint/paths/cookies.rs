//! Cookies: the driver's defence against floods of datagrams that each cost a key agreement
//! (self-certifying ids, open groups). The core has no addresses; the driver does.
//!
//! When the core refuses a datagram for want of key-agreement budget (`key_budget`), the
//! driver answers the datagram's source address with a COOKIE_REPLY holding a cookie: an
//! HMAC-SHA256 of that address and the claimed node id under a secret only this driver
//! knows, rotated every two minutes. The peer echoes it (header flag COOKIE) until it hears
//! back; a datagram with a valid cookie for its source address proves that its sender
//! receives there, and gets a key agreement from a budget of its own, within a limit per
//! source address. A spoofed source never sees its cookie; the flooding address is held to
//! its own limit. Nothing is kept per source but a fixed table of token buckets, and only
//! once the node is under load. The rules are in `docs/security.md` and `docs/wire.md`.

use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ring::hmac;
use ring::rand::SystemRandom;
use subtle::ConstantTimeEq;

use crate::counters::counters;
use crate::endpoint::io::family::canonical;
use crate::proto::crypto::DhBudget;
use crate::proto::frame::{Cookie, CookieReply, Header, COOKIE_LEN, FLAG_COOKIE, MAX_HEADER_LEN};
use crate::proto::{NodeId, Vouch};

/// How long a cookie secret is the current one; cookies made under it stay valid for as
/// long again.
pub(crate) const COOKIE_ROTATION: Duration = Duration::from_secs(120);
/// Slots of the per-source table: a source address (IPv4 address, or IPv6 /64 prefix) is
/// hashed, under a key of this driver's, to one slot.
pub(crate) const SOURCE_SLOTS: usize = 1024;
/// COOKIE_REPLYs per second to one source slot, and at once.
pub(crate) const REPLIES_PER_SOURCE: (u64, u64) = (16, 32);
/// Vouched datagrams per second from one source slot, and at once.
pub(crate) const VOUCHED_PER_SOURCE: (u64, u64) = (32, 64);
/// COOKIE_REPLYs per second in all, and at once.
pub(crate) const REPLIES_IN_ALL: (u64, u64) = (4096, 1024);
/// COOKIE_REPLYs waiting for the next flush at most; more are dropped (and counted).
const QUEUED_REPLIES: usize = 256;
/// Domain separation of the cookie MAC.
const DOMAIN: &[u8] = b"exon v2 cookie";

counters! {
    /// The driver's counters of the cookie exchange.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct CookieStats {
        /// COOKIE_REPLYs sent: datagrams refused for want of key-agreement budget, answered.
        pub replies_sent: u64 [sum],
        /// Such datagrams not answered: their source's or the endpoint's reply limit was
        /// spent, the reply would not have been smaller than the datagram, or the queue of
        /// replies was full.
        pub replies_limited: u64 [sum],
        /// Datagrams whose valid cookie vouched for their source address.
        pub vouched: u64 [sum],
        /// Datagrams with a valid cookie whose source address had spent its limit (handled as
        /// unproven).
        pub vouch_limited: u64 [sum],
        /// Datagrams with a cookie that is not valid for their source address (handled as
        /// unproven).
        pub bad_cookies: u64 [sum],
        /// COOKIE_REPLYs received and taken (their cookie now goes in datagrams to the peer).
        pub replies_taken: u64 [sum],
        /// COOKIE_REPLYs received and dropped: malformed, for another node, from an address
        /// this endpoint does not send the peer to, or for a peer it sends nothing to.
        pub replies_dropped: u64 [sum],
    }
}

/// One slot of the per-source table.
struct Source {
    replies: DhBudget,
    vouched: DhBudget,
}

/// What the driver saw of a datagram before the node took it: enough to answer it with a
/// COOKIE_REPLY should the node refuse it for want of budget.
pub(crate) struct Seen {
    /// How the node is to treat the source address.
    pub(crate) vouch: Vouch,
    /// The first bytes of the datagram (its whole header when it has one).
    head: [u8; MAX_HEADER_LEN],
    head_len: usize,
    len: usize,
    /// It echoed a valid cookie for its source (vouched for or not).
    valid_cookie: bool,
}

/// The cookie secrets, the per-source table and the queue of replies.
pub(crate) struct Cookies {
    rng: SystemRandom,
    current: hmac::Key,
    previous: hmac::Key,
    rotate_at: Option<Instant>,
    /// Made at the first use (under load) only.
    sources: Option<Box<[Source]>>,
    hasher: foldhash::fast::RandomState,
    replies_in_all: DhBudget,
    /// Replies to send at the next flush.
    queued: Vec<(SocketAddr, CookieReply)>,
    stats: CookieStats,
}

impl Cookies {
    pub(crate) fn new() -> Cookies {
        let rng = SystemRandom::new();
        let current = new_key(&rng);
        let previous = new_key(&rng);
        Cookies {
            rng,
            current,
            previous,
            rotate_at: None,
            sources: None,
            hasher: foldhash::fast::RandomState::default(),
            replies_in_all: DhBudget::new(REPLIES_IN_ALL.0, REPLIES_IN_ALL.1),
            queued: Vec::new(),
            stats: CookieStats::default(),
        }
    }

    /// The counters of the exchange.
    pub(crate) fn stats(&self) -> CookieStats {
        self.stats
    }

    /// Takes the replies queued since the last call, to send.
    pub(crate) fn take_queued(&mut self) -> Vec<(SocketAddr, CookieReply)> {
        std::mem::take(&mut self.queued)
    }

    /// Counts a COOKIE_REPLY received: taken, or dropped.
    pub(crate) fn count_reply(&mut self, taken: bool) {
        if taken {
            self.stats.replies_taken += 1;
        } else {
            self.stats.replies_dropped += 1;
        }
    }

    fn rotate(&mut self, t: Instant) {
        match self.rotate_at {
            None => self.rotate_at = Some(t + COOKIE_ROTATION),
            Some(at) if at <= t => {
                let old = std::mem::replace(&mut self.current, new_key(&self.rng));
                // After a pause of two periods or more, the old current secret is too old
                // to stay valid as the previous one.
                self.previous = if at + COOKIE_ROTATION <= t {
                    new_key(&self.rng)
                } else {
                    old
                };
                self.rotate_at = Some(t + COOKIE_ROTATION);
            }
            Some(_) => {}
        }
    }

    /// The cookie for a datagram claiming `id` from `from` (in either form: an IPv4 address
    /// is taken as IPv4-mapped), under `key`.
    fn mac(key: &hmac::Key, from: SocketAddr, id: NodeId) -> Cookie {
        let ip = match from.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        let mut ctx = hmac::Context::with_key(key);
        ctx.update(DOMAIN);
        ctx.update(&ip);
        ctx.update(&from.port().to_be_bytes());
        ctx.update(&id.get().to_be_bytes());
        let mut c = [0u8; COOKIE_LEN];
        c.copy_from_slice(&ctx.sign().as_ref()[..COOKIE_LEN]);
        c
    }

    /// The index of `from`'s per-source slot: its IPv4 address (in either form: the
    /// IPv4-mapped one is not a /64 of its own, which every IPv4 peer of a dual-stack socket
    /// would share), or its IPv6 /64 prefix.
    fn slot(&self, from: SocketAddr) -> usize {
        let prefix: u128 = match canonical(from).ip() {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            // A /64: one host may hold a whole prefix.
            IpAddr::V6(a) => (u128::from(a) >> 64) | (1 << 64),
        };
        (self.hasher.hash_one(prefix) % SOURCE_SLOTS as u64) as usize
    }

    /// The per-source slot of `from`.
    fn source(&mut self, from: SocketAddr) -> &mut Source {
        let slot = self.slot(from);
        let sources = self.sources.get_or_insert_with(|| {
            (0..SOURCE_SLOTS)
                .map(|_| Source {
                    replies: DhBudget::new(REPLIES_PER_SOURCE.0, REPLIES_PER_SOURCE.1),
                    vouched: DhBudget::new(VOUCHED_PER_SOURCE.0, VOUCHED_PER_SOURCE.1),
                })
                .collect()
        });
        &mut sources[slot]
    }

    /// Looks at a datagram from `from` before the node takes it: a valid cookie for its
    /// source vouches for it, within that source's limit.
    pub(crate) fn look(&mut self, t: Instant, data: &[u8], from: SocketAddr) -> Seen {
        let mut seen = Seen {
            vouch: Vouch::Unproven,
            head: [0; MAX_HEADER_LEN],
            head_len: data.len().min(MAX_HEADER_LEN),
            len: data.len(),
            valid_cookie: false,
        };
        seen.head[..seen.head_len].copy_from_slice(&data[..seen.head_len]);
        if data.first().is_none_or(|f| f & FLAG_COOKIE == 0) {
            return seen; // the common case: no cookie, nothing to decode
        }
        let Some(cookie) = Header::decode_prefix(data)
            .ok()
            .and_then(|(h, _)| Some((h.src, h.seal?.cookie?)))
        else {
            return seen;
        };
        self.rotate(t);
        let (src, cookie) = cookie;
        let valid = [&self.current, &self.previous]
            .iter()
            .any(|k| bool::from(Self::mac(k, from, src).ct_eq(&cookie)));
        seen.valid_cookie = valid;
        if !valid {
            self.stats.bad_cookies += 1;
        } else if self.source(from).vouched.try_take(t) {
            self.stats.vouched += 1;
            seen.vouch = Vouch::Cookie;
        } else {
            self.stats.vouch_limited += 1;
        }
        seen
    }

    /// The node refused the datagram `seen` for want of key-agreement budget: queues a
    /// COOKIE_REPLY from `own` to its source, within the limits, if it is smaller than the
    /// datagram. A datagram that echoed a valid cookie is not answered again.
    pub(crate) fn refused(&mut self, t: Instant, own: NodeId, seen: &Seen, from: SocketAddr) {
        if seen.valid_cookie {
            return;
        }
        let Ok((h, _)) = Header::decode_prefix(&seen.head[..seen.head_len]) else {
            return;
        };
        self.rotate(t);
        let reply = CookieReply {
            src: own,
            dst: h.src,
            cookie: Self::mac(&self.current, from, h.src),
        };
        let allowed = reply.encoded_len() < seen.len
            && self.queued.len() < QUEUED_REPLIES
            && self.source(from).replies.try_take(t)
            && self.replies_in_all.try_take(t);
        if allowed {
            self.queued.push((from, reply));
            self.stats.replies_sent += 1;
        } else {
            self.stats.replies_limited += 1;
        }
    }
}

/// A fresh HMAC key from the system's random source (a key from a randomly seeded hash of
/// the clock should the source fail, which ring documents as not happening on supported
/// systems).
fn new_key(rng: &SystemRandom) -> hmac::Key {
    hmac::Key::generate(hmac::HMAC_SHA256, rng).unwrap_or_else(|_| {
        let s = foldhash::fast::RandomState::default();
        let mut b = [0u8; 32];
        for (i, c) in b.chunks_mut(8).enumerate() {
            c.copy_from_slice(&s.hash_one((i, Instant::now())).to_le_bytes());
        }
        hmac::Key::new(hmac::HMAC_SHA256, &b)
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn a_cookie_is_bound_to_the_address_the_port_and_the_id() {
        let c = Cookies::new();
        let a: SocketAddr = "127.0.0.2:4000".parse().unwrap();
        let id = NodeId::from_const(7);
        let k = &c.current;
        let base = Cookies::mac(k, a, id);
        assert_eq!(base, Cookies::mac(k, a, id));
        assert_ne!(base, Cookies::mac(k, "127.0.0.3:4000".parse().unwrap(), id));
        assert_ne!(base, Cookies::mac(k, "127.0.0.2:4001".parse().unwrap(), id));
        assert_ne!(base, Cookies::mac(k, a, NodeId::from_const(8)));
        assert_ne!(base, Cookies::mac(&c.previous, a, id));
    }

    /// An IPv4 source is one source in either form (as a dual-stack socket reports it, or
    /// not): one slot and one cookie. IPv6 sources share a slot per /64 only.
    #[test]
    fn an_ipv4_source_is_one_source_in_either_form() {
        let c = Cookies::new();
        let id = NodeId::from_const(7);
        let (a, mapped) = ("127.0.0.2:4000", "[::ffff:127.0.0.2]:4000");
        let (a, mapped): (SocketAddr, SocketAddr) = (a.parse().unwrap(), mapped.parse().unwrap());
        assert_eq!(c.slot(a), c.slot(mapped));
        assert_eq!(
            Cookies::mac(&c.current, a, id),
            Cookies::mac(&c.current, mapped, id)
        );
        // Other mapped addresses are other sources (not one ::ffff:0:0/64 for all of them):
        // 64 addresses cannot all land in one slot of 1024 by chance.
        let slots: std::collections::HashSet<_> = (1..=64u8)
            .map(|i| {
                c.slot(SocketAddr::from((
                    Ipv4Addr::new(10, 0, 0, i).to_ipv6_mapped(),
                    1,
                )))
            })
            .collect();
        assert!(slots.len() > 1);
        let same_64 = ["[2001:db8::1]:1", "[2001:db8::2]:2"].map(|s| c.slot(s.parse().unwrap()));
        assert_eq!(same_64[0], same_64[1]);
    }

    /// A datagram from `from` echoing `cookie`, claiming id 7.
    fn echoing(cookie: Cookie) -> Vec<u8> {
        let mut h = Header::new(NodeId::from_const(7), NodeId::from_const(2));
        h.seal = Some(crate::proto::frame::SealHeader {
            seq: crate::proto::crypto::Seq {
                epoch: 1,
                counter: 0,
            },
            key: None,
            cookie: Some(cookie),
        });
        let mut v = Vec::new();
        h.encode(&mut v);
        v.extend_from_slice(&[0; 20]);
        v
    }

    #[test]
    fn cookies_outlive_one_rotation_not_two_and_vouch_within_the_source_limit() {
        let t = Instant::now();
        let mut c = Cookies::new();
        let a: SocketAddr = "127.0.0.2:4000".parse().unwrap();
        let id = NodeId::from_const(7);
        c.rotate(t);
        let cookie = Cookies::mac(&c.current, a, id);
        assert_eq!(c.look(t, &echoing(cookie), a).vouch, Vouch::Cookie);
        let elsewhere: SocketAddr = "127.0.0.3:4000".parse().unwrap();
        assert_eq!(
            c.look(t, &echoing(cookie), elsewhere).vouch,
            Vouch::Unproven
        );
        assert_eq!(c.stats.bad_cookies, 1);
        // One rotation later still valid; the source's limit holds.
        let later = t + COOKIE_ROTATION;
        let vouched = (0..200)
            .filter(|_| c.look(later, &echoing(cookie), a).vouch == Vouch::Cookie)
            .count();
        assert_eq!(
            vouched as u64, VOUCHED_PER_SOURCE.1,
            "refilled to its burst"
        );
        assert!(c.stats.vouch_limited > 0);
        // Two rotations later (or after a long pause), no longer.
        let bad = c.stats.bad_cookies;
        c.look(later + COOKIE_ROTATION, &echoing(cookie), a);
        assert_eq!(c.stats.bad_cookies, bad + 1);
        let mut d = Cookies::new();
        d.rotate(t);
        let cookie = Cookies::mac(&d.current, a, id);
        d.look(t + 10 * COOKIE_ROTATION, &echoing(cookie), a);
        assert_eq!(d.stats.bad_cookies, 1);
    }

    #[test]
    fn replies_are_smaller_than_what_they_answer_and_limited_per_source() {
        let t = Instant::now();
        let mut c = Cookies::new();
        let own = NodeId::from_const(2);
        let a: SocketAddr = "127.0.0.2:4000".parse().unwrap();
        // Another source in another slot (the slots' hash is seeded at random: two
        // addresses share one once in `SOURCE_SLOTS`, and then share its limit).
        let b = (3..=255u8)
            .map(|x| SocketAddr::from(([127, 0, 0, x], 4000)))
            .find(|b| c.slot(*b) != c.slot(a))
            .unwrap();
        let mut h = Header::new(NodeId::from_const(7), own);
        h.seal = Some(crate::proto::frame::SealHeader {
            seq: crate::proto::crypto::Seq {
                epoch: 1,
                counter: 0,
            },
            key: None,
            cookie: None,
        });
        let mut small = Vec::new();
        h.encode(&mut small);
        let seen = c.look(t, &small, a);
        c.refused(t, own, &seen, a);
        assert!(c.queued.is_empty(), "a reply no smaller than the datagram");
        let mut big = small.clone();
        big.extend_from_slice(&[0; 40]);
        for from in [a, b] {
            for _ in 0..100 {
                let seen = c.look(t, &big, from);
                c.refused(t, own, &seen, from);
            }
        }
        assert_eq!(c.queued.len() as u64, 2 * REPLIES_PER_SOURCE.1);
        let (to, r) = c.queued[0];
        assert_eq!(to, a);
        assert_eq!(r.cookie, Cookies::mac(&c.current, a, NodeId::from_const(7)));
        assert_eq!((r.src, r.dst), (own, NodeId::from_const(7)));
    }
}
