//! The frames' encoders: each frame's encoded size and how it is appended to a datagram
//! (the ranges of GOT and the verdicts fitted to the room left).

use std::ops::Range;

use bytes::BufMut;

use super::{frame_type, Verdict};
use crate::proto::wire::clocks::Clocks;
use crate::proto::wire::clocks::Of::{self, Dst, Src};
use crate::proto::wire::codec::{put_varint, varint_len, VARINT_MAX};

/// Encoded size of a CHALLENGE or RESPONSE frame: the type and an 8-byte token.
pub const PATH_FRAME_LEN: usize = 9;

/// Encoded size of a PING frame (its type alone).
pub const PING_FRAME_LEN: usize = 1;

/// Encoded size of a RECEIVED frame: the type and a 2-byte time.
pub const RECEIVED_FRAME_LEN: usize = 3;

/// The unit of a RECEIVED frame's time, in microseconds.
pub const RECEIPT_UNIT_MICROS: u64 = 32;

/// Appends a RECEIVED frame carrying the receipt time `at` (units of
/// [`RECEIPT_UNIT_MICROS`], wrapping).
pub fn put_received(buf: &mut impl BufMut, at: u16) {
    put_varint(buf, frame_type::RECEIVED);
    buf.put_u16(at);
}

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

/// Encoded size of a REQSLOTS frame written on its own (see [`Clocks::absolute`]).
pub fn reqslots_len(s: u64, n: u64, l: u64) -> usize {
    Clocks::absolute().reqslots_len(s, n, l)
}

/// Encoded size of a SLOTS frame written on its own.
pub fn slots_len(s: u64, r: u64, n: u64) -> usize {
    Clocks::absolute().slots_len(s, r, n)
}

/// Encoded size of a TOKEN frame carrying `payload_len` bytes, written on its own.
pub fn token_len(s: u64, r: u64, payload_len: usize) -> usize {
    Clocks::absolute().token_len(s, r, payload_len)
}

/// Appends a REQSLOTS frame, written on its own: its clock fields in full, as the first
/// frame of a plaintext datagram has them.
pub fn put_reqslots(buf: &mut impl BufMut, s: u64, n: u64, l: u64) {
    Clocks::absolute().put_reqslots(buf, s, n, l);
}

/// Appends a SLOTS frame, written on its own.
pub fn put_slots(buf: &mut impl BufMut, s: u64, r: u64, n: u64) {
    Clocks::absolute().put_slots(buf, s, r, n);
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

/// Appends a STORED frame written on its own: the sender's records of its tokens in slots
/// `from .. below` are on stable storage.
pub fn put_stored(buf: &mut impl BufMut, from: u64, below: u64) {
    Clocks::absolute().put_stored(buf, from, below);
}

/// Encoded size of a STORED frame written on its own.
pub fn stored_len(from: u64, below: u64) -> usize {
    Clocks::absolute().stored_len(from, below)
}

/// Appends a TOKEN frame written on its own, with frames after it in its datagram (it
/// gives its `len`).
pub fn put_token(buf: &mut impl BufMut, s: u64, r: u64, payload: &[u8]) {
    let token = (s, r, TokenKind::Plain, false);
    Clocks::absolute().put_token_parts(buf, token, &[], payload);
}

/// Appends a TOKEN frame written on its own as its datagram's last frame (no `len`: its
/// payload runs to the end of the datagram).
pub fn put_token_last(buf: &mut impl BufMut, s: u64, r: u64, payload: &[u8]) {
    let token = (s, r, TokenKind::Plain, true);
    Clocks::absolute().put_token_parts(buf, token, &[], payload);
}

/// Appends a TOKEN frame written on its own (an STOKEN with `senders_copy`: its sender
/// keeps a durable copy until the ACK) whose payload is `head` then `body`; with the
/// last flag of `token`, as its datagram's last frame.
pub fn put_token_parts(
    buf: &mut impl BufMut,
    token: (u64, u64, TokenKind, bool),
    head: &[u8],
    body: &[u8],
) {
    Clocks::absolute().put_token_parts(buf, token, head, body);
}

/// The bytes of a TOKEN's or FRAG's `len` field for `len` bytes: what its
/// [`frame_type::TO_END`] form saves.
pub fn len_field(len: usize) -> usize {
    varint_len(len as u64)
}

/// Encoded size of a FRAG frame carrying `len` bytes, written on its own.
pub fn frag_len(s: u64, r: u64, total: u64, offset: u64, len: usize) -> usize {
    Clocks::absolute().frag_len(s, r, total, offset, len)
}

/// Appends a FRAG frame written on its own, with frames after it in its datagram.
pub fn put_frag(buf: &mut impl BufMut, s: u64, r: u64, total: u64, offset: u64, data: &[u8]) {
    let slot = (s, r, false, false);
    Clocks::absolute().put_frag_parts(buf, slot, (total, offset), (&[], data));
}

/// Appends a FRAG frame written on its own (an SFRAG with `senders_copy`) of message
/// length `total` at `offset` whose data is `a` then `b`; with the last flag of `slot`, as
/// its datagram's last frame.
pub fn put_frag_parts(
    buf: &mut impl BufMut,
    slot: (u64, u64, bool, bool),
    at: (u64, u64),
    data: (&[u8], &[u8]),
) {
    Clocks::absolute().put_frag_parts(buf, slot, at, data);
}

/// Appends a GOT frame written on its own for slot `s` of incarnation `r` with as many of
/// `ranges` (byte offsets; sorted, disjoint, non-adjacent, non-empty) as fit in `room`
/// bytes. Returns how many ranges were written (0: nothing was written).
pub fn put_got(buf: &mut impl BufMut, r: u64, s: u64, ranges: &[Range<u64>], room: usize) -> usize {
    Clocks::absolute().put_got(buf, r, s, ranges, room)
}

/// Encoded size of a REQCREDIT frame written on its own.
pub fn reqcredit_len(r: u64, s: u64, want: u64) -> usize {
    Clocks::absolute().reqcredit_len(r, s, want)
}

/// Appends a REQCREDIT frame written on its own.
pub fn put_reqcredit(buf: &mut impl BufMut, r: u64, s: u64, want: u64) {
    Clocks::absolute().put_reqcredit(buf, r, s, want);
}

/// Encoded size of a CREDIT frame written on its own.
pub fn credit_len(r: u64, limit: u64, max: u64) -> usize {
    Clocks::absolute().credit_len(r, limit, max)
}

/// Appends a CREDIT frame written on its own.
pub fn put_credit(buf: &mut impl BufMut, r: u64, limit: u64, max: u64) {
    Clocks::absolute().put_credit(buf, r, limit, max);
}

/// Appends an ACK frame written on its own for incarnation `r` covering as many of
/// `ranges` (sorted, disjoint, non-adjacent, non-empty) as fit in `room` bytes. Returns
/// how many ranges were written (0: nothing was written, not even the frame type).
pub fn put_ack(buf: &mut impl BufMut, r: u64, ranges: &[Range<u64>], room: usize) -> usize {
    put_verdict(buf, Verdict::Ack, r, ranges, room)
}

/// Appends a verdict frame (ACK, DOUBT or RETRY) written on its own, as [`put_ack`] does
/// for ACK.
pub fn put_verdict(
    buf: &mut impl BufMut,
    verdict: Verdict,
    r: u64,
    ranges: &[Range<u64>],
    room: usize,
) -> usize {
    Clocks::absolute().put_slot_ranges(buf, verdict.frame_type(), r, ranges, room)
}

/// Appends HELD(r, ranges) written on its own with as many of `ranges` as fit in `room`
/// bytes (the layout of ACK). Returns how many ranges were written (0: nothing was).
pub fn put_held(buf: &mut impl BufMut, r: u64, ranges: &[Range<u64>], room: usize) -> usize {
    Clocks::absolute().put_slot_ranges(buf, frame_type::HELD, r, ranges, room)
}

/// The frames with clock fields, written on the chains of the datagram they go in: each
/// `*_len` is the size the `put_*` of the same values would append now.
impl Clocks {
    /// Encoded size of a REQSLOTS frame.
    pub fn reqslots_len(self, s: u64, n: u64, l: u64) -> usize {
        self.fields_len(&[C(Src, s), V(n), C(Src, l)])
    }

    /// Appends REQSLOTS(s, n, l): `s` and `l` of the sender's clock.
    pub fn put_reqslots(&mut self, buf: &mut impl BufMut, s: u64, n: u64, l: u64) {
        self.put_fields(buf, frame_type::REQSLOTS, &[C(Src, s), V(n), C(Src, l)]);
    }

    /// Encoded size of a SLOTS frame.
    pub fn slots_len(self, s: u64, r: u64, n: u64) -> usize {
        self.fields_len(&[C(Dst, s), C(Src, r), V(n)])
    }

    /// Appends SLOTS(s, r, n): `s` of the receiver's clock (the slots it asked for), `r`
    /// of the sender's (its incarnation).
    pub fn put_slots(&mut self, buf: &mut impl BufMut, s: u64, r: u64, n: u64) {
        self.put_fields(buf, frame_type::SLOTS, &[C(Dst, s), C(Src, r), V(n)]);
    }

    /// Encoded size of a STORED frame.
    pub fn stored_len(self, from: u64, below: u64) -> usize {
        self.fields_len(&[C(Src, from), C(Src, below)])
    }

    /// Appends STORED(from, below): slots of the sender's clock.
    pub fn put_stored(&mut self, buf: &mut impl BufMut, from: u64, below: u64) {
        self.put_fields(buf, frame_type::STORED, &[C(Src, from), C(Src, below)]);
    }

    /// Slot `s` (of the sender's clock) and incarnation `r` (of the receiver's) of a TOKEN
    /// or FRAG, worked out on these chains.
    #[inline]
    pub fn slot_fields(&self, s: u64, r: u64) -> SlotFields {
        let mut after = *self;
        let xs = after.encoded(Src, s);
        let xr = after.encoded(Dst, r);
        SlotFields { xs, xr, after }
    }

    /// Encoded size of a TOKEN frame (any kind) carrying `payload_len` bytes.
    #[inline]
    pub fn token_len(self, s: u64, r: u64, payload_len: usize) -> usize {
        self.slot_fields(s, r).token_len(payload_len)
    }

    /// Appends a TOKEN frame of `kind` whose payload is `head` then `body`: `s` of the
    /// sender's clock, `r` of the receiver's; with `to_end`, as its datagram's last frame.
    #[inline]
    pub fn put_token_parts(
        &mut self,
        buf: &mut impl BufMut,
        (s, r, kind, to_end): (u64, u64, TokenKind, bool),
        head: &[u8],
        body: &[u8],
    ) {
        self.slot_fields(s, r)
            .put_token(self, buf, (kind, to_end), (head, body));
    }

    /// Encoded size of a FRAG frame carrying `len` bytes.
    pub fn frag_len(self, s: u64, r: u64, total: u64, offset: u64, len: usize) -> usize {
        self.slot_fields(s, r).frag_len(total, offset, len)
    }

    /// Appends a FRAG frame (an SFRAG with `senders_copy`) of message length `total` at
    /// `offset` whose data is `a` then `b`; with `to_end`, as its datagram's last frame.
    pub fn put_frag_parts(
        &mut self,
        buf: &mut impl BufMut,
        (s, r, senders_copy, to_end): (u64, u64, bool, bool),
        (total, offset): (u64, u64),
        data: (&[u8], &[u8]),
    ) {
        let fields = self.slot_fields(s, r);
        fields.put_frag(self, buf, (senders_copy, total, offset, to_end), data);
    }

    /// Appends GOT(r, s, ranges) with as many of `ranges` (byte offsets, written in full)
    /// as fit in `room` bytes: `r` of the sender's clock, `s` of the receiver's. Returns
    /// how many ranges were written (0: nothing was written).
    pub fn put_got(
        &mut self,
        buf: &mut impl BufMut,
        r: u64,
        s: u64,
        ranges: &[Range<u64>],
        room: usize,
    ) -> usize {
        let head = [C(Src, r), C(Dst, s)];
        self.put_ranged(buf, (frame_type::GOT, &head), None, ranges, room)
    }

    /// Encoded size of a REQCREDIT frame.
    pub fn reqcredit_len(self, r: u64, s: u64, want: u64) -> usize {
        self.fields_len(&[C(Dst, r), C(Src, s), V(want)])
    }

    /// Appends REQCREDIT(r, s, want): `r` of the receiver's clock, `s` of the sender's.
    pub fn put_reqcredit(&mut self, buf: &mut impl BufMut, r: u64, s: u64, want: u64) {
        self.put_fields(buf, frame_type::REQCREDIT, &[C(Dst, r), C(Src, s), V(want)]);
    }

    /// Encoded size of a CREDIT frame.
    pub fn credit_len(self, r: u64, limit: u64, max: u64) -> usize {
        self.fields_len(&[C(Src, r), V(limit), V(max)])
    }

    /// Appends CREDIT(r, limit, max): `r` of the sender's clock.
    pub fn put_credit(&mut self, buf: &mut impl BufMut, r: u64, limit: u64, max: u64) {
        self.put_fields(buf, frame_type::CREDIT, &[C(Src, r), V(limit), V(max)]);
    }

    /// Encoded size of a frame of `fields` (its type a byte).
    fn fields_len(mut self, fields: &[Field]) -> usize {
        1 + fields.iter().map(|&f| self.field_len(f)).sum::<usize>()
    }

    /// Appends a frame of type `ty` made of `fields`.
    fn put_fields(&mut self, buf: &mut impl BufMut, ty: u64, fields: &[Field]) {
        put_varint(buf, ty);
        for &f in fields {
            self.put_field(buf, f);
        }
    }

    /// Appends a verdict frame (ACK, DOUBT, RETRY, LOST) for incarnation `r` covering as
    /// many of `ranges` (sorted, disjoint, non-adjacent, non-empty) as fit in `room` bytes.
    /// Returns how many ranges were written (0: nothing was written, not even the type).
    pub fn put_verdict(
        &mut self,
        buf: &mut impl BufMut,
        (verdict, r): (Verdict, u64),
        ranges: &[Range<u64>],
        room: usize,
    ) -> usize {
        self.put_slot_ranges(buf, verdict.frame_type(), r, ranges, room)
    }

    /// Appends HELD(r, ranges), as [`put_verdict`](Self::put_verdict).
    pub fn put_held(
        &mut self,
        buf: &mut impl BufMut,
        r: u64,
        ranges: &[Range<u64>],
        room: usize,
    ) -> usize {
        self.put_slot_ranges(buf, frame_type::HELD, r, ranges, room)
    }

    /// A frame of type `ty` laid out as ACK: `r` of the sender's clock, the first range's
    /// start of the receiver's (the slots of its tokens).
    fn put_slot_ranges(
        &mut self,
        buf: &mut impl BufMut,
        ty: u64,
        r: u64,
        ranges: &[Range<u64>],
        room: usize,
    ) -> usize {
        self.put_ranged(buf, (ty, &[C(Src, r)]), Some(Dst), ranges, room)
    }

    /// A frame of type `ty` and fields `head`, then as many of `ranges` as fit in `room`
    /// bytes, the first start a clock field of `first` (`None`: a plain value). Returns
    /// how many ranges were written (0: nothing was written, not even the type).
    fn put_ranged(
        &mut self,
        buf: &mut impl BufMut,
        (ty, head): (u64, &[Field]),
        first: Option<Of>,
        ranges: &[Range<u64>],
        room: usize,
    ) -> usize {
        let start = |g: &Range<u64>| first.map_or(V(g.start), |of| C(of, g.start));
        // Work out how many ranges fit, then write.
        let mut at = *self;
        let fixed = 1 + head.iter().map(|&f| at.field_len(f)).sum::<usize>();
        let first = ranges.first().map_or(0, |g| at.field_len(start(g)));
        let count = ranges_fitting(ranges, fixed, first, room);
        if count == 0 {
            return 0;
        }
        self.put_fields(buf, ty, head);
        put_varint(buf, count as u64);
        self.put_field(buf, start(&ranges[0]));
        put_ranges_after_first(buf, &ranges[..count]);
        count
    }

    /// The bytes field `f` takes, its chain moved on.
    #[inline]
    fn field_len(&mut self, f: Field) -> usize {
        match f {
            C(of, v) => self.take_len(of, v),
            V(v) => varint_len(v),
        }
    }

    /// Appends field `f`.
    #[inline]
    fn put_field(&mut self, buf: &mut impl BufMut, f: Field) {
        match f {
            C(of, v) => self.put(buf, of, v),
            V(v) => put_varint(buf, v),
        }
    }
}

/// The slot and incarnation of a TOKEN or FRAG worked out once on the datagram's chains:
/// its size and its writing then share the differences (a sender sizes each token before
/// it writes it).
#[derive(Debug, Clone, Copy)]
pub struct SlotFields {
    /// The varints standing for `s` and `r`.
    xs: u64,
    xr: u64,
    /// The chains once they are written.
    after: Clocks,
}

impl SlotFields {
    /// Encoded size of a TOKEN frame carrying `payload_len` bytes with these fields.
    #[inline]
    pub fn token_len(&self, payload_len: usize) -> usize {
        1 + varint_len(self.xs) + varint_len(self.xr) + varint_len(payload_len as u64) + payload_len
    }

    /// Encoded size of a FRAG frame of message length `total` at `offset` carrying `len`
    /// bytes with these fields.
    #[inline]
    pub fn frag_len(&self, total: u64, offset: u64, len: usize) -> usize {
        1 + varint_len(self.xs)
            + varint_len(self.xr)
            + varint_len(total)
            + varint_len(offset)
            + varint_len(len as u64)
            + len
    }

    /// Appends the TOKEN of `kind` whose payload is `head` then `body`, and moves the
    /// chains `c` (those these fields were worked out on) past it. With `to_end` it is
    /// written as its datagram's last frame: its type's [`frame_type::TO_END`] form,
    /// without `len` ([`token_len`](Self::token_len) less [`len_field`]).
    #[inline]
    pub fn put_token(
        &self,
        c: &mut Clocks,
        buf: &mut impl BufMut,
        (kind, to_end): (TokenKind, bool),
        (head, body): (&[u8], &[u8]),
    ) {
        let end = if to_end { frame_type::TO_END } else { 0 };
        put_varint(buf, kind.frame_type() | end);
        put_varint(buf, self.xs);
        put_varint(buf, self.xr);
        if !to_end {
            put_varint(buf, (head.len() + body.len()) as u64);
        }
        buf.put_slice(head);
        buf.put_slice(body);
        *c = self.after;
    }

    /// Appends a FRAG (an SFRAG with `senders_copy`) of message length `total` at `offset`
    /// whose data is `a` then `b`, and moves the chains `c` past it; with `to_end`, as its
    /// datagram's last frame (as [`put_token`](Self::put_token)).
    #[inline]
    pub fn put_frag(
        &self,
        c: &mut Clocks,
        buf: &mut impl BufMut,
        (senders_copy, total, offset, to_end): (bool, u64, u64, bool),
        (a, b): (&[u8], &[u8]),
    ) {
        let ty = if senders_copy {
            frame_type::SFRAG
        } else {
            frame_type::FRAG
        };
        put_varint(buf, if to_end { ty | frame_type::TO_END } else { ty });
        put_varint(buf, self.xs);
        put_varint(buf, self.xr);
        put_varint(buf, total);
        put_varint(buf, offset);
        if !to_end {
            put_varint(buf, (a.len() + b.len()) as u64);
        }
        buf.put_slice(a);
        buf.put_slice(b);
        *c = self.after;
    }
}

/// A field of a frame of varints only.
#[derive(Clone, Copy)]
enum Field {
    /// A clock field, of the clock given.
    C(Of, u64),
    /// Any other value.
    V(u64),
}
use Field::{C, V};

/// How many of `ranges` fit in `room` bytes after `fixed` bytes of frame fields and the
/// count, the first range's start taking `first` bytes.
fn ranges_fitting(ranges: &[Range<u64>], fixed: usize, first: usize, room: usize) -> usize {
    let mut body = 0usize;
    let mut count = 0usize;
    let mut prev_end: Option<u64> = None;
    for rg in ranges {
        let item = match prev_end {
            None => first + varint_len(rg.end - rg.start - 1),
            Some(p) => varint_len(rg.start - p - 1) + varint_len(rg.end - rg.start - 1),
        };
        if fixed + varint_len(count as u64 + 1) + body + item > room {
            break;
        }
        body += item;
        count += 1;
        prev_end = Some(rg.end);
    }
    count
}

/// Appends `ranges` as an ACK lays them out after the first range's start (written by the
/// caller): the first's length, then each later range's gap and length.
pub(super) fn put_ranges_after_first(buf: &mut impl BufMut, ranges: &[Range<u64>]) {
    let mut prev_end: Option<u64> = None;
    for rg in ranges {
        debug_assert!(rg.start < rg.end);
        if let Some(p) = prev_end {
            debug_assert!(rg.start > p, "ranges must be sorted and non-adjacent");
            put_varint(buf, rg.start - p - 1);
        }
        put_varint(buf, rg.end - rg.start - 1);
        prev_end = Some(rg.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chains at a few places: none, near the values, far from them.
    fn bases() -> Vec<Clocks> {
        let near = 1u64 << 51;
        let mut out = vec![Clocks::absolute()];
        for (s, d) in [(near, near + 40), (3, VARINT_MAX), (near + (1 << 20), 0)] {
            let mut c = Clocks::absolute();
            let mut sink = Vec::new();
            c.put(&mut sink, Src, s);
            c.put(&mut sink, Dst, d);
            out.push(c);
        }
        out
    }

    /// Every `*_len` on the chains is what the matching `put_*` appends, and both move the
    /// chains alike (the next field costs the same after either).
    #[test]
    fn each_size_on_the_chains_is_what_is_written() {
        let near = (1u64 << 51) + 9;
        let ranges = [near..near + 3, near + 10..near + 11];
        for c in bases() {
            for (s, r) in [(near, near - 7), (0, VARINT_MAX), (near + 100_000, 1)] {
                let check = |len: usize, put: &dyn Fn(&mut Clocks, &mut Vec<u8>)| {
                    let mut w = c;
                    let mut buf = Vec::new();
                    put(&mut w, &mut buf);
                    assert_eq!(len, buf.len(), "s {s} r {r} bases {c:?}");
                    // Read back on the same chains, and written again from the values:
                    // the same bytes, and the chains end where the writer's did.
                    let mut frames = Vec::new();
                    let body = bytes::Bytes::from(buf.clone());
                    super::super::decode_frames_on(&body, usize::MAX, c, &mut frames).unwrap();
                    let (mut again, mut chains) = (Vec::new(), c);
                    for (i, f) in frames.iter().enumerate() {
                        if i + 1 == frames.len() {
                            f.encode_last_on(&mut chains, &mut again);
                        } else {
                            f.encode_on(&mut chains, &mut again);
                        }
                    }
                    assert_eq!(again, buf);
                    assert_eq!(chains, w);
                };
                let l = s.saturating_sub(1);
                check(c.reqslots_len(s, 5, l), &|w, b| w.put_reqslots(b, s, 5, l));
                check(c.slots_len(s, r, 64), &|w, b| w.put_slots(b, s, r, 64));
                // A frame alone ends its datagram: the TO_END forms, without `len`.
                check(c.token_len(s, r, 100) - len_field(100), &|w, b| {
                    w.put_token_parts(b, (s, r, TokenKind::Plain, true), &[1; 40], &[2; 60]);
                });
                check(c.frag_len(s, r, 9000, 4000, 50) - len_field(50), &|w, b| {
                    w.put_frag_parts(b, (s, r, true, true), (9000, 4000), (&[3; 50], &[]));
                });
                // With a frame after it, `len` is written.
                check(c.token_len(s, r, 100) + 1, &|w, b| {
                    w.put_token_parts(b, (s, r, TokenKind::Plain, false), &[1; 40], &[2; 60]);
                    put_varint(b, frame_type::PING);
                });
                let from = s.saturating_sub(3);
                check(c.stored_len(from, s), &|w, b| w.put_stored(b, from, s));
                check(c.reqcredit_len(r, s, 1 << 20), &|w, b| {
                    w.put_reqcredit(b, r, s, 1 << 20);
                });
                check(c.credit_len(r, 1 << 16, 1 << 20), &|w, b| {
                    w.put_credit(b, r, 1 << 16, 1 << 20);
                });
                // Ranges fitted to the room: never past it, and all of them with room.
                for room in [0, 5, 12, 20, 64] {
                    let mut w = c;
                    let mut buf = Vec::new();
                    let k = w.put_verdict(&mut buf, (Verdict::Ack, r), &ranges, room);
                    assert!(buf.len() <= room, "room {room}: {}", buf.len());
                    assert!(k == 2 || room < 64, "room {room}: {k}");
                    let mut buf = Vec::new();
                    let k = w.put_got(&mut buf, r, s, &[0..100, 200..300], room);
                    assert!(buf.len() <= room, "GOT, room {room}: {}", buf.len());
                    assert!(k == 2 || room < 64, "GOT, room {room}: {k}");
                }
            }
        }
    }
}
