//! The frames' encoders: each frame's encoded size and how it is appended to a datagram
//! (the ranges of GOT and the verdicts fitted to the room left).

use std::ops::Range;

use bytes::BufMut;

use super::{frame_type, Verdict};
use crate::proto::wire::codec::{put_varint, varint_len, VARINT_MAX};

/// Encoded size of a CHALLENGE or RESPONSE frame: the type and an 8-byte token.
pub const PATH_FRAME_LEN: usize = 9;

/// Appends a CHALLENGE or RESPONSE frame (`ty`) carrying `token`.
pub fn put_path(buf: &mut impl BufMut, ty: u64, token: u64) {
    put_varint(buf, ty);
    buf.put_u64(token);
}

/// Encoded size of an MTU_PROBE frame with `pad` bytes of padding.
pub fn mtu_probe_len(id: u64, pad: u64) -> usize {
    1 + varint_len(id) + varint_len(pad) + pad as usize
}

/// Appends the largest MTU_PROBE frame for probe `id` that takes at most `room` bytes, and
/// returns its size (0: not even an unpadded one fits, nothing written). It takes exactly
/// `room` bytes except where no padding length does (just past the paddings of 64 and
/// 16384 bytes, where the padding's own length field grows): then one or two bytes less.
pub fn put_mtu_probe(buf: &mut impl BufMut, id: u64, room: usize) -> usize {
    let fixed = 1 + varint_len(id);
    let mut best = None;
    for field in [1, 2, 4, 8] {
        let Some(pad) = room.checked_sub(fixed + field) else {
            continue;
        };
        let pad = (pad as u64).min(VARINT_MAX);
        if varint_len(pad) == field {
            best = best.max(Some(pad));
        } else if varint_len(pad) > field {
            // The longest padding a field of this length holds.
            let below = (1u64 << (8 * field - 2)) - 1;
            best = best.max(Some(below.min(pad)));
        }
    }
    let Some(pad) = best else {
        return 0;
    };
    put_varint(buf, frame_type::MTU_PROBE);
    put_varint(buf, id);
    put_varint(buf, pad);
    buf.put_bytes(0, pad as usize);
    mtu_probe_len(id, pad)
}

/// Encoded size of an MTU_ACK frame.
pub fn mtu_ack_len(id: u64) -> usize {
    1 + varint_len(id)
}

/// Appends an MTU_ACK frame.
pub fn put_mtu_ack(buf: &mut impl BufMut, id: u64) {
    put_varint(buf, frame_type::MTU_ACK);
    put_varint(buf, id);
}

/// Encoded size of a REQSLOTS frame.
pub fn reqslots_len(s: u64, n: u64, l: u64) -> usize {
    1 + varint_len(s) + varint_len(n) + varint_len(l)
}

/// Encoded size of a SLOTS frame.
pub fn slots_len(s: u64, r: u64, n: u64) -> usize {
    1 + varint_len(s) + varint_len(r) + varint_len(n)
}

/// Encoded size of a TOKEN frame carrying `payload_len` bytes.
pub fn token_len(s: u64, r: u64, payload_len: usize) -> usize {
    1 + varint_len(s) + varint_len(r) + varint_len(payload_len as u64) + payload_len
}

/// Appends a REQSLOTS frame.
pub fn put_reqslots(buf: &mut impl BufMut, s: u64, n: u64, l: u64) {
    put_varint(buf, frame_type::REQSLOTS);
    put_varint(buf, s);
    put_varint(buf, n);
    put_varint(buf, l);
}

/// Appends a SLOTS frame.
pub fn put_slots(buf: &mut impl BufMut, s: u64, r: u64, n: u64) {
    put_varint(buf, frame_type::SLOTS);
    put_varint(buf, s);
    put_varint(buf, r);
    put_varint(buf, n);
}

/// Which of the whole-token frames carries a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// TOKEN: the sender may drop its copy before the ACK (a durable receiver journals
    /// the payload).
    Plain,
    /// STOKEN: the sender keeps a durable copy until the ACK.
    SendersCopy,
    /// ETOKEN: a TOKEN sent before its sender's records are stored; the receiver hands
    /// it over only once the sender says they are (STORED, or a stored copy).
    Early,
    /// ESTOKEN: an STOKEN sent before its sender's records are stored, as `Early`.
    EarlySendersCopy,
}

impl TokenKind {
    /// The frame type code.
    pub fn frame_type(self) -> u64 {
        match self {
            TokenKind::Plain => frame_type::TOKEN,
            TokenKind::SendersCopy => frame_type::STOKEN,
            TokenKind::Early => frame_type::ETOKEN,
            TokenKind::EarlySendersCopy => frame_type::ESTOKEN,
        }
    }

    /// ETOKEN or ESTOKEN, as the sender keeps its copy or not.
    pub fn early(senders_copy: bool) -> TokenKind {
        if senders_copy {
            TokenKind::EarlySendersCopy
        } else {
            TokenKind::Early
        }
    }

    /// Whether the token left before its sender's records were stored.
    pub fn is_early(self) -> bool {
        matches!(self, TokenKind::Early | TokenKind::EarlySendersCopy)
    }

    /// Whether the sender keeps its copy until the ACK (STOKEN, ESTOKEN).
    pub fn senders_copy(self) -> bool {
        matches!(self, TokenKind::SendersCopy | TokenKind::EarlySendersCopy)
    }

    /// TOKEN or STOKEN, as the sender keeps its copy or not.
    pub fn stored(senders_copy: bool) -> TokenKind {
        if senders_copy {
            TokenKind::SendersCopy
        } else {
            TokenKind::Plain
        }
    }
}

/// Appends a STORED frame: the sender's records of its tokens in slots `from .. below`
/// are on stable storage.
pub fn put_stored(buf: &mut impl BufMut, from: u64, below: u64) {
    put_varint(buf, frame_type::STORED);
    put_varint(buf, from);
    put_varint(buf, below);
}

/// Encoded size of a STORED frame.
pub fn stored_len(from: u64, below: u64) -> usize {
    1 + varint_len(from) + varint_len(below)
}

/// Appends a TOKEN frame.
pub fn put_token(buf: &mut impl BufMut, s: u64, r: u64, payload: &[u8]) {
    put_token_parts(buf, (s, r, TokenKind::Plain), &[], payload);
}

/// Appends a TOKEN frame (an STOKEN with `senders_copy`: its sender keeps a durable copy
/// until the ACK) whose payload is `head` then `body`.
pub fn put_token_parts(
    buf: &mut impl BufMut,
    (s, r, kind): (u64, u64, TokenKind),
    head: &[u8],
    body: &[u8],
) {
    put_varint(buf, kind.frame_type());
    put_varint(buf, s);
    put_varint(buf, r);
    put_varint(buf, (head.len() + body.len()) as u64);
    buf.put_slice(head);
    buf.put_slice(body);
}

/// Encoded size of a FRAG frame carrying `len` bytes.
pub fn frag_len(s: u64, r: u64, total: u64, offset: u64, len: usize) -> usize {
    1 + varint_len(s)
        + varint_len(r)
        + varint_len(total)
        + varint_len(offset)
        + varint_len(len as u64)
        + len
}

/// Appends a FRAG frame.
pub fn put_frag(buf: &mut impl BufMut, s: u64, r: u64, total: u64, offset: u64, data: &[u8]) {
    put_frag_parts(buf, (s, r, false), (total, offset), (&[], data));
}

/// Appends a FRAG frame (an SFRAG with `senders_copy`) of message length `total` at `offset` whose
/// data is `a` then `b`.
pub fn put_frag_parts(
    buf: &mut impl BufMut,
    (s, r, senders_copy): (u64, u64, bool),
    (total, offset): (u64, u64),
    (a, b): (&[u8], &[u8]),
) {
    put_varint(
        buf,
        if senders_copy {
            frame_type::SFRAG
        } else {
            frame_type::FRAG
        },
    );
    put_varint(buf, s);
    put_varint(buf, r);
    put_varint(buf, total);
    put_varint(buf, offset);
    put_varint(buf, (a.len() + b.len()) as u64);
    buf.put_slice(a);
    buf.put_slice(b);
}

/// Appends a GOT frame for slot `s` of incarnation `r` with as many of `ranges` (byte
/// offsets; sorted, disjoint, non-adjacent, non-empty) as fit in `room` bytes. Returns how
/// many ranges were written (0: nothing was written).
pub fn put_got(buf: &mut impl BufMut, r: u64, s: u64, ranges: &[Range<u64>], room: usize) -> usize {
    let fixed = 1 + varint_len(r) + varint_len(s);
    let count = ranges_fitting(ranges, fixed, room);
    if count == 0 {
        return 0;
    }
    put_varint(buf, frame_type::GOT);
    put_varint(buf, r);
    put_varint(buf, s);
    put_varint(buf, count as u64);
    put_ranges(buf, &ranges[..count]);
    count
}

/// Encoded size of a REQCREDIT frame.
pub fn reqcredit_len(r: u64, s: u64, want: u64) -> usize {
    1 + varint_len(r) + varint_len(s) + varint_len(want)
}

/// Appends a REQCREDIT frame.
pub fn put_reqcredit(buf: &mut impl BufMut, r: u64, s: u64, want: u64) {
    put_varint(buf, frame_type::REQCREDIT);
    put_varint(buf, r);
    put_varint(buf, s);
    put_varint(buf, want);
}

/// Encoded size of a CREDIT frame.
pub fn credit_len(r: u64, limit: u64, max: u64) -> usize {
    1 + varint_len(r) + varint_len(limit) + varint_len(max)
}

/// Appends a CREDIT frame.
pub fn put_credit(buf: &mut impl BufMut, r: u64, limit: u64, max: u64) {
    put_varint(buf, frame_type::CREDIT);
    put_varint(buf, r);
    put_varint(buf, limit);
    put_varint(buf, max);
}

/// How many of `ranges` fit in `room` bytes after `fixed` bytes of frame fields and the
/// count.
fn ranges_fitting(ranges: &[Range<u64>], fixed: usize, room: usize) -> usize {
    let mut body = 0usize;
    let mut count = 0usize;
    let mut prev_end: Option<u64> = None;
    for rg in ranges {
        let item = range_item_len(prev_end, rg);
        if fixed + varint_len(count as u64 + 1) + body + item > room {
            break;
        }
        body += item;
        count += 1;
        prev_end = Some(rg.end);
    }
    count
}

/// Appends an ACK frame for incarnation `r` covering as many of `ranges` (sorted, disjoint,
/// non-adjacent, non-empty) as fit in `room` bytes. Returns how many ranges were written
/// (0: nothing was written, not even the frame type).
pub fn put_ack(buf: &mut impl BufMut, r: u64, ranges: &[Range<u64>], room: usize) -> usize {
    put_verdict(buf, Verdict::Ack, r, ranges, room)
}

/// Appends a verdict frame (ACK, DOUBT or RETRY), as [`put_ack`] does for ACK.
pub fn put_verdict(
    buf: &mut impl BufMut,
    verdict: Verdict,
    r: u64,
    ranges: &[Range<u64>],
    room: usize,
) -> usize {
    put_slot_ranges(buf, verdict.frame_type(), r, ranges, room)
}

/// Appends HELD(r, ranges) with as many of `ranges` as fit in `room` bytes (the layout of
/// ACK). Returns how many ranges were written (0: nothing was).
pub fn put_held(buf: &mut impl BufMut, r: u64, ranges: &[Range<u64>], room: usize) -> usize {
    put_slot_ranges(buf, frame_type::HELD, r, ranges, room)
}

fn put_slot_ranges(
    buf: &mut impl BufMut,
    ty: u64,
    r: u64,
    ranges: &[Range<u64>],
    room: usize,
) -> usize {
    // Work out how many ranges fit, then write.
    let count = ranges_fitting(ranges, 1 + varint_len(r), room);
    if count == 0 {
        return 0;
    }
    put_varint(buf, ty);
    put_varint(buf, r);
    put_varint(buf, count as u64);
    put_ranges(buf, &ranges[..count]);
    count
}

fn range_item_len(prev_end: Option<u64>, rg: &Range<u64>) -> usize {
    let first = match prev_end {
        None => rg.start,
        Some(p) => rg.start - p - 1,
    };
    varint_len(first) + varint_len(rg.end - rg.start - 1)
}

pub(super) fn put_ranges(buf: &mut impl BufMut, ranges: &[Range<u64>]) {
    let mut prev_end: Option<u64> = None;
    for rg in ranges {
        debug_assert!(rg.start < rg.end);
        match prev_end {
            None => put_varint(buf, rg.start),
            Some(p) => {
                debug_assert!(rg.start > p, "ranges must be sorted and non-adjacent");
                put_varint(buf, rg.start - p - 1)
            }
        }
        put_varint(buf, rg.end - rg.start - 1);
        prev_end = Some(rg.end);
    }
}
