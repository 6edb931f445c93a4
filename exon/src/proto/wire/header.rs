//! The datagram header (version and flags, node ids and, sealed, the nonce, key and
//! cookie) and the cookie reply: encode and decode.

use bytes::BufMut;

use crate::proto::crypto::keys::{PublicKey, KEY_LEN};
use crate::proto::crypto::seal::Seq;
use crate::proto::wire::codec::{put_varint, varint_len, Reader};
use crate::proto::{DecodeError, NodeId};

/// The wire version this implementation speaks: the high four bits of every datagram's
/// first byte (its low four bits are the flags).
pub const VERSION: u8 = 5;
/// Smallest possible header: the version and flags byte and two one-byte node ids.
pub const MIN_HEADER_LEN: usize = 3;
/// Largest possible header: a sealed one with eight-byte node ids and epoch, the counter,
/// the sender's public key and a cookie.
pub const MAX_HEADER_LEN: usize = 1 + 8 + 8 + 8 + 1 + KEY_LEN + COOKIE_LEN;

/// Header flag: the sender has nothing more to send right now, so the receiver should
/// acknowledge this datagram's tokens at once instead of waiting for more (delayed ACKs).
pub const FLAG_ACK_NOW: u8 = 0x01;
/// Header flag: the datagram is sealed (epoch and counter follow the node ids, the frames
/// are encrypted, a 16-byte tag ends the datagram).
pub const FLAG_SEALED: u8 = 0x02;
/// Header flag (sealed datagrams only): the sender's 32-byte public key follows the counter,
/// for receivers that accept self-certifying ids.
pub const FLAG_KEY: u8 = 0x04;
/// Header flag (sealed datagrams only): a 16-byte cookie follows the counter (and the
/// public key, if any): the receiver's proof that this sender receives at its source
/// address, echoed from a [`CookieReply`]. Alone, without [`FLAG_SEALED`], it marks a
/// [`CookieReply`], which is no header.
pub const FLAG_COOKIE: u8 = 0x08;
/// The first byte of a [`CookieReply`]: the version and [`FLAG_COOKIE`] alone.
pub const COOKIE_REPLY_START: u8 = VERSION << 4 | FLAG_COOKIE;
/// Bytes in a cookie.
pub const COOKIE_LEN: usize = 16;

/// A cookie: a receiver's MAC of a sender's source address (and node id), which the sender
/// echoes to get a key agreement under load (`docs/security.md`).
pub type Cookie = [u8; COOKIE_LEN];

/// The datagram an endpoint under load sends to the source address of a datagram it
/// refused for want of key-agreement budget: `0x58 src dst cookie`, where
/// `src` is the refusing node, `dst` the node the refused datagram claimed to come from.
/// Not sealed (the refusing node has no key for its peer yet: that is the point).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CookieReply {
    /// The node that refused the datagram and issued the cookie.
    pub src: NodeId,
    /// The node the refused datagram claimed to come from.
    pub dst: NodeId,
    /// The cookie to echo in the header (flag [`FLAG_COOKIE`]) of datagrams to `src`.
    pub cookie: Cookie,
}

impl CookieReply {
    /// Encoded size.
    pub fn encoded_len(&self) -> usize {
        1 + varint_len(self.src.get()) + varint_len(self.dst.get()) + COOKIE_LEN
    }

    /// Appends the datagram.
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_u8(COOKIE_REPLY_START);
        put_varint(buf, self.src.get());
        put_varint(buf, self.dst.get());
        buf.put_slice(&self.cookie);
    }

    /// Whether `data` is a cookie reply by its first byte (it may still not decode).
    pub fn is_one(data: &[u8]) -> bool {
        data.first() == Some(&COOKIE_REPLY_START)
    }

    /// Decodes a whole datagram; trailing bytes are an error.
    pub fn decode(data: &[u8]) -> Result<CookieReply, DecodeError> {
        let mut r = Reader::new(data);
        let flags = decode_start(&mut r)?;
        if flags != FLAG_COOKIE {
            return Err(DecodeError::ReservedFlags(flags));
        }
        let src = NodeId::new(r.varint()?).ok_or(DecodeError::ValueOutOfRange)?;
        let dst = NodeId::new(r.varint()?).ok_or(DecodeError::ValueOutOfRange)?;
        let mut cookie = [0u8; COOKIE_LEN];
        cookie.copy_from_slice(r.bytes(COOKIE_LEN)?);
        if r.remaining() != 0 {
            return Err(DecodeError::Truncated);
        }
        Ok(CookieReply { src, dst, cookie })
    }
}

/// Largest header of a plaintext datagram (both node ids take eight bytes).
pub const MAX_PLAIN_HEADER_LEN: usize = 1 + 8 + 8;

/// The clear part of a sealed datagram's header: the sequence number that forms the nonce,
/// and the sender's public key where it announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealHeader {
    /// Epoch and counter: the AEAD nonce, unique per sender over its life.
    pub seq: Seq,
    /// The sender's public key (flag [`FLAG_KEY`]).
    pub key: Option<PublicKey>,
    /// A cookie the receiver gave this sender for its address (flag [`FLAG_COOKIE`]).
    pub cookie: Option<Cookie>,
}

/// The datagram header: who sent it and to whom. It travels in the clear (it is
/// authenticated, not encrypted, in a sealed datagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The sending node.
    pub src: NodeId,
    /// The node the datagram is meant for.
    pub dst: NodeId,
    /// Flag [`FLAG_ACK_NOW`]: acknowledge this datagram's tokens without delay (set on the
    /// last datagram of a burst).
    pub ack_now: bool,
    /// Present on sealed datagrams (flag [`FLAG_SEALED`]).
    pub seal: Option<SealHeader>,
}

impl Header {
    /// A plaintext header from `src` to `dst` with no flag set.
    pub fn new(src: NodeId, dst: NodeId) -> Header {
        Header {
            src,
            dst,
            ack_now: false,
            seal: None,
        }
    }

    /// Encoded size of this header.
    pub fn encoded_len(&self) -> usize {
        let seal = self.seal.map_or(0, |h| {
            varint_len(h.seq.epoch)
                + 1
                + h.key.map_or(0, |_| KEY_LEN)
                + h.cookie.map_or(0, |_| COOKIE_LEN)
        });
        1 + varint_len(self.src.get()) + varint_len(self.dst.get()) + seal
    }

    fn flags(&self) -> u8 {
        let mut f = if self.ack_now { FLAG_ACK_NOW } else { 0 };
        if let Some(h) = self.seal {
            f |= FLAG_SEALED;
            if h.key.is_some() {
                f |= FLAG_KEY;
            }
            if h.cookie.is_some() {
                f |= FLAG_COOKIE;
            }
        }
        f
    }

    /// Appends the header.
    pub fn encode(&self, buf: &mut impl BufMut) {
        buf.put_u8(VERSION << 4 | self.flags());
        put_varint(buf, self.src.get());
        put_varint(buf, self.dst.get());
        if let Some(h) = self.seal {
            put_varint(buf, h.seq.epoch);
            buf.put_u8(h.seq.counter);
            if let Some(k) = h.key {
                buf.put_slice(k.as_bytes());
            }
            if let Some(c) = h.cookie {
                buf.put_slice(&c);
            }
        }
    }

    /// Decodes the header at the start of `data`; returns it and its length in bytes.
    #[inline]
    pub fn decode_prefix(data: &[u8]) -> Result<(Header, usize), DecodeError> {
        let mut r = Reader::new(data);
        let h = Header::decode(&mut r)?;
        Ok((h, r.position()))
    }

    #[inline]
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Header, DecodeError> {
        let flags = decode_start(r)?;
        if flags & (FLAG_KEY | FLAG_COOKIE) != 0 && flags & FLAG_SEALED == 0 {
            return Err(DecodeError::ReservedFlags(flags));
        }
        // Any decoded varint is at most VARINT_MAX, so these cannot fail.
        let src = NodeId::new(r.varint()?).ok_or(DecodeError::ValueOutOfRange)?;
        let dst = NodeId::new(r.varint()?).ok_or(DecodeError::ValueOutOfRange)?;
        let seal = if flags & FLAG_SEALED != 0 {
            let epoch = r.varint()?;
            let counter = r.u8()?;
            let key = if flags & FLAG_KEY != 0 {
                let mut k = [0u8; KEY_LEN];
                k.copy_from_slice(r.bytes(KEY_LEN)?);
                Some(PublicKey::from_bytes(k))
            } else {
                None
            };
            let cookie = if flags & FLAG_COOKIE != 0 {
                let mut c = [0u8; COOKIE_LEN];
                c.copy_from_slice(r.bytes(COOKIE_LEN)?);
                Some(c)
            } else {
                None
            };
            Some(SealHeader {
                seq: Seq { epoch, counter },
                key,
                cookie,
            })
        } else {
            None
        };
        Ok(Header {
            src,
            dst,
            ack_now: flags & FLAG_ACK_NOW != 0,
            seal,
        })
    }
}

/// Checks the length and the version every datagram starts with; returns its flags.
fn decode_start(r: &mut Reader<'_>) -> Result<u8, DecodeError> {
    if r.remaining() < MIN_HEADER_LEN {
        return Err(DecodeError::Runt);
    }
    let first = r.u8()?;
    if first >> 4 != VERSION {
        return Err(DecodeError::UnsupportedVersion(first >> 4));
    }
    Ok(first & 0x0f)
}
