//! The frames (REQSLOTS, SLOTS, TOKEN and its kinds STOKEN, ETOKEN and ESTOKEN, STORED, the
//! verdicts ACK, DOUBT, RETRY, LOST, path validation, path MTU probes, and the fragment
//! frames FRAG, GOT, HELD, REQCREDIT, CREDIT): encode and decode.
//!
//! The byte-by-byte layout is documented in `docs/wire.md`. Decoding is zero-copy (TOKEN
//! payloads and ACK ranges are slices of the received [`Bytes`]), never panics, never
//! allocates in proportion to a length field, and accepts only canonical encodings, so a
//! valid datagram re-encodes to the very same bytes.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use crate::proto::wire::clocks::{Clocks, Of};
use crate::proto::wire::codec::{put_varint, varint_len, Reader, VARINT_MAX};
pub use crate::proto::wire::header::*;
use crate::proto::DecodeError;

mod encode;
use encode::put_ranges_after_first;
pub use encode::*;

/// Frame type codes.
pub mod frame_type {
    /// REQSLOTS(s, n, l)
    pub const REQSLOTS: u64 = 0x01;
    /// SLOTS(s, r, n)
    pub const SLOTS: u64 = 0x02;
    /// TOKEN(s, r, payload)
    pub const TOKEN: u64 = 0x03;
    /// ACK(r, ranges of s)
    pub const ACK: u64 = 0x04;
    /// DOUBT(r, ranges of s)
    pub const DOUBT: u64 = 0x05;
    /// RETRY(r, ranges of s)
    pub const RETRY: u64 = 0x06;
    /// CHALLENGE(token): path validation, answered with RESPONSE(token).
    pub const CHALLENGE: u64 = 0x07;
    /// RESPONSE(token): the answer to a CHALLENGE.
    pub const RESPONSE: u64 = 0x08;
    /// FRAG(s, r, total, offset, data): a piece of a message too large for one TOKEN.
    pub const FRAG: u64 = 0x09;
    /// GOT(r, s, ranges of bytes): the bytes of a fragmented message the receiver holds.
    pub const GOT: u64 = 0x0A;
    /// REQCREDIT(r, s, want): the sender asks for reassembly memory.
    pub const REQCREDIT: u64 = 0x0B;
    /// CREDIT(r, limit, max): the reassembly memory the receiver reserved for the sender.
    pub const CREDIT: u64 = 0x0E;
    /// MTU_PROBE(id, pad): path MTU discovery, padded to the size probed, answered with
    /// MTU_ACK(id).
    pub const MTU_PROBE: u64 = 0x0C;
    /// MTU_ACK(id): the answer to an MTU_PROBE.
    pub const MTU_ACK: u64 = 0x0D;
    /// LOST(r, ranges of s): a durable receiver lost incarnation `r` in a restart and
    /// delivered nothing into these slots.
    pub const LOST: u64 = 0x0F;
    /// STOKEN(s, r, payload): a TOKEN whose sender keeps a durable copy of the payload
    /// until the ACK, whatever happens: a durable receiver need not journal it.
    pub const STOKEN: u64 = 0x10;
    /// SFRAG(s, r, total, offset, data): a FRAG of such a message.
    pub const SFRAG: u64 = 0x11;
    /// ETOKEN(s, r, payload): a TOKEN sent before its sender's records of it are on
    /// stable storage; handed over once the sender says they are.
    pub const ETOKEN: u64 = 0x12;
    /// ESTOKEN(s, r, payload): an STOKEN sent so.
    pub const ESTOKEN: u64 = 0x14;
    /// STORED(from, below): the sender's records of its tokens in slots `from .. below`
    /// are on stable storage.
    pub const STORED: u64 = 0x13;
    /// HELD(r, ranges of s): the messages in these slots of incarnation `r` are held whole
    /// at the receiver, not yet taken (GOT of every byte, for many messages at once).
    pub const HELD: u64 = 0x15;
    /// PING: nothing; its datagram shows the sender's current address (a keepalive).
    pub const PING: u64 = 0x16;
    /// RECEIVED(t): when (on the receiver's own clock, in units of 32 microseconds, modulo
    /// 2^16) the newest datagram with tokens, fragments or a granted slot request from the
    /// peer arrived, written before the verdicts it sends that peer (the delivery rate's
    /// receipt interval).
    pub const RECEIVED: u64 = 0x17;

    /// Added to the type of a TOKEN, STOKEN, ETOKEN, ESTOKEN, FRAG or SFRAG (0x23, 0x30,
    /// 0x32, 0x34, 0x29, 0x31): the frame is its datagram's last and writes no `len`, its
    /// payload (data) running to the end of the datagram. Such a frame that ends its
    /// datagram is always written so, and only such a frame: one that gives its `len` and
    /// ends the datagram is refused (`DecodeError::LengthAtEnd`), so each datagram keeps
    /// one encoding.
    pub const TO_END: u64 = 0x20;

    /// Whether `ty` (its [`TO_END`] bit cleared) carries a payload and a `len`: a TOKEN
    /// kind or a FRAG kind.
    pub const fn has_len(ty: u64) -> bool {
        matches!(ty, TOKEN | STOKEN | ETOKEN | ESTOKEN | FRAG | SFRAG)
    }
}

/// A receiver's answer to a TOKEN: the three frames that carry incarnation and slot ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// ACK: the token was delivered, now or before; the sender may forget it.
    Ack,
    /// DOUBT: the token's incarnation was lost (the receiver restarted, or forgot it under
    /// pressure), so whether it was delivered is unknown. The sender must not send it again
    /// (it might be delivered twice) and reports it as in doubt.
    Doubt,
    /// RETRY: the token's incarnation was discarded before any token was delivered into it,
    /// so it was certainly not delivered. The sender makes a new token from fresh slots.
    Retry,
    /// LOST: a durable receiver lost the token's incarnation in a restart, and its journal
    /// holds no delivery in that slot: certainly not delivered. The sender makes a new
    /// token from fresh slots, as for RETRY, even for an incarnation it saw acknowledged.
    Lost,
}

impl Verdict {
    /// The frame type code.
    pub fn frame_type(self) -> u64 {
        match self {
            Verdict::Ack => frame_type::ACK,
            Verdict::Doubt => frame_type::DOUBT,
            Verdict::Retry => frame_type::RETRY,
            Verdict::Lost => frame_type::LOST,
        }
    }

    /// Short upper-case name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ack => "ACK",
            Verdict::Doubt => "DOUBT",
            Verdict::Retry => "RETRY",
            Verdict::Lost => "LOST",
        }
    }
}

/// One protocol frame. Several may share a datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Sender asks the receiver for slots `s .. s+n`, and waives every slot below `l`.
    ReqSlots {
        /// The sender record's clock `sck`: first slot number asked for.
        s: u64,
        /// Number of slots asked for (0 only waives).
        n: u64,
        /// Collection frontier: the sender holds no token or envelope below it.
        l: u64,
    },
    /// Receiver grants slots `s .. s+n` under its incarnation `r` (n = 0: a probe).
    Slots {
        /// The `s` of the REQSLOTS this answers.
        s: u64,
        /// The receiver record's incarnation `rck`.
        r: u64,
        /// Number of slots granted.
        n: u64,
    },
    /// A message payload in slot `s` of incarnation `r`.
    Token {
        /// Slot number.
        s: u64,
        /// Incarnation the token was made under.
        r: u64,
        /// The application's message.
        payload: Bytes,
        /// The sender keeps a durable copy of the payload until the ACK, whatever happens
        /// (STOKEN): a durable receiver relies on it and journals no payload
        /// (`docs/durability.md`, "One copy of a payload").
        senders_copy: bool,
    },
    /// ETOKEN (ESTOKEN): a TOKEN (an STOKEN) sent before the sender's records of it are
    /// on stable storage: the receiver hands it over only once the sender says they are
    /// (a STORED frame covering its slot, or a TOKEN or STOKEN of the same slot).
    EarlyToken {
        /// Slot number.
        s: u64,
        /// Incarnation the token was made under.
        r: u64,
        /// The application's message.
        payload: Bytes,
        /// ESTOKEN: as [`Frame::Token`]'s `senders_copy`.
        senders_copy: bool,
    },
    /// STORED: the sender's records of its tokens in slots `from .. below` (sender clock
    /// values, never reused) are on stable storage. `from` is where the sender's record
    /// began in its current run: a restarted sender vouches for nothing of an earlier one.
    Stored {
        /// The first slot covered.
        from: u64,
        /// One past the last slot covered.
        below: u64,
    },
    /// Receiver acknowledges the tokens in `ranges` of incarnation `r`.
    Ack {
        /// Incarnation of the acknowledged tokens.
        r: u64,
        /// Acknowledged slot numbers.
        ranges: AckRanges,
    },
    /// Receiver no longer knows incarnation `r` (lost in a restart or forgotten): the tokens
    /// in `ranges` may or may not have been delivered.
    Doubt {
        /// Incarnation of the tokens in doubt.
        r: u64,
        /// Their slot numbers.
        ranges: AckRanges,
    },
    /// Receiver discarded incarnation `r` before anything was delivered into it: the tokens
    /// in `ranges` were not delivered and must be sent again in fresh slots.
    Retry {
        /// Incarnation of the tokens to send again.
        r: u64,
        /// Their slot numbers.
        ranges: AckRanges,
    },
    /// A durable receiver lost incarnation `r` in a restart and its journal holds no
    /// delivery in the slots of `ranges`: not delivered, to send again in fresh slots.
    Lost {
        /// Incarnation of the tokens to send again.
        r: u64,
        /// Their slot numbers.
        ranges: AckRanges,
    },
    /// Path validation: "answer this token". Sent to a peer's new address; the RESPONSE,
    /// authenticated and arriving from that address, proves the peer is there.
    Challenge {
        /// An unpredictable value (sealed, only the peer can read it).
        token: u64,
    },
    /// The answer to a CHALLENGE, with its token.
    Response {
        /// The CHALLENGE's token.
        token: u64,
    },
    /// A piece of the message in slot `s` of incarnation `r`, for messages larger than one
    /// TOKEN: bytes `offset .. offset + data.len()` of a message of `total` bytes.
    Frag {
        /// Slot number.
        s: u64,
        /// Incarnation the token was made under.
        r: u64,
        /// Length of the whole message (at least 1).
        total: u64,
        /// Where `data` starts in the message (`offset + data.len() <= total`).
        offset: u64,
        /// The bytes (at least one).
        data: Bytes,
        /// An SFRAG: as [`Frame::Token`]'s `senders_copy`.
        senders_copy: bool,
    },
    /// Receiver holds `ranges` (byte offsets) of the fragmented message in slot `s` of
    /// incarnation `r`. Not a verdict: the message is acknowledged by ACK once whole and
    /// taken; GOT only stops the sender from sending those bytes again.
    Got {
        /// Incarnation of the token.
        r: u64,
        /// Slot number.
        s: u64,
        /// Byte ranges received.
        ranges: AckRanges,
    },
    /// Receiver holds the messages in the slots of `ranges` of incarnation `r` whole and
    /// untaken. Not a verdict: what a GOT of every byte says of each, for a set of slots.
    Held {
        /// Incarnation of the tokens.
        r: u64,
        /// Slot numbers of the messages held.
        ranges: AckRanges,
    },
    /// Sender asks its receiver record of incarnation `r` to reserve `want` bytes of
    /// reassembly memory for its fragmented messages in progress (a total, not an
    /// increment); `s` is the slot of a message waiting for it. A receiver without that
    /// incarnation answers as it would a TOKEN for `(s, r)` (DOUBT, RETRY or ACK), so a
    /// message waiting under a lost incarnation is never stranded.
    ReqCredit {
        /// Incarnation the waiting messages were made under.
        r: u64,
        /// Slot of one of them.
        s: u64,
        /// Bytes wanted in all.
        want: u64,
    },
    /// Receiver reserved `limit` bytes of reassembly memory for the sender in incarnation
    /// `r`: the sender may have fragmented messages of that many bytes in progress at once.
    Credit {
        /// Incarnation of the receiver record holding the reservation.
        r: u64,
        /// Bytes reserved in all.
        limit: u64,
        /// The largest message the receiver takes (its `max_message_size`): a larger one is
        /// never granted credit, so its sender gives it up as not delivered.
        max: u64,
    },
    /// Path MTU discovery: "answer this probe". Its `pad` zero bytes make the datagram as
    /// large as the size probed.
    MtuProbe {
        /// The probe's id, echoed in the MTU_ACK.
        id: u64,
        /// Zero bytes of padding after the field.
        pad: u64,
    },
    /// The answer to an MTU_PROBE: a datagram of its size reached this node.
    MtuAck {
        /// The MTU_PROBE's id.
        id: u64,
    },
    /// Nothing but its datagram: an authenticated datagram from the sender's current
    /// address, sent by a node waiting for something from the peer while it has nothing
    /// else to send (a caller whose requests are acknowledged, waiting for their replies),
    /// so that a NAT keeps its mapping and a peer whose datagrams can no longer reach it
    /// learns where it is now. The receiver does nothing with it.
    Ping,
    /// The receiver's time of its newest receipt from the peer (tokens, fragments or slot
    /// requests), in units of [`RECEIPT_UNIT_MICROS`] modulo 2^16, on its own clock: the
    /// peer's delivery-rate samples take the receipt interval between two of these as a
    /// lower bound on their interval, so acknowledgements that bunch up on the way back
    /// (ACK compression) do not inflate the rate. Written before the verdict, GOT and HELD
    /// frames of a datagram; it applies to those of its datagram only.
    Received {
        /// The receipt time, in units of [`RECEIPT_UNIT_MICROS`], wrapping.
        at: u16,
    },
}

impl Frame {
    /// Short upper-case name, as in the paper.
    pub fn name(&self) -> &'static str {
        match self {
            Frame::ReqSlots { .. } => "REQSLOTS",
            Frame::Slots { .. } => "SLOTS",
            Frame::Token {
                senders_copy: false,
                ..
            } => "TOKEN",
            Frame::Token {
                senders_copy: true, ..
            } => "STOKEN",
            Frame::EarlyToken {
                senders_copy: false,
                ..
            } => "ETOKEN",
            Frame::EarlyToken {
                senders_copy: true, ..
            } => "ESTOKEN",
            Frame::Stored { .. } => "STORED",
            Frame::Ack { .. } => "ACK",
            Frame::Doubt { .. } => "DOUBT",
            Frame::Retry { .. } => "RETRY",
            Frame::Lost { .. } => "LOST",
            Frame::Challenge { .. } => "CHALLENGE",
            Frame::Response { .. } => "RESPONSE",
            Frame::Frag {
                senders_copy: false,
                ..
            } => "FRAG",
            Frame::Frag {
                senders_copy: true, ..
            } => "SFRAG",
            Frame::Got { .. } => "GOT",
            Frame::Held { .. } => "HELD",
            Frame::ReqCredit { .. } => "REQCREDIT",
            Frame::Credit { .. } => "CREDIT",
            Frame::MtuProbe { .. } => "MTU_PROBE",
            Frame::MtuAck { .. } => "MTU_ACK",
            Frame::Ping => "PING",
            Frame::Received { .. } => "RECEIVED",
        }
    }

    /// For the verdict frames (ACK, DOUBT, RETRY): which one, its incarnation and ranges.
    pub fn verdict(&self) -> Option<(Verdict, u64, &AckRanges)> {
        match self {
            Frame::Ack { r, ranges } => Some((Verdict::Ack, *r, ranges)),
            Frame::Doubt { r, ranges } => Some((Verdict::Doubt, *r, ranges)),
            Frame::Retry { r, ranges } => Some((Verdict::Retry, *r, ranges)),
            Frame::Lost { r, ranges } => Some((Verdict::Lost, *r, ranges)),
            _ => None,
        }
    }

    /// Appends this frame written on its own: its clock fields in full, as the first frame
    /// of a plaintext datagram has them (see [`Clocks::absolute`]).
    pub fn encode(&self, buf: &mut impl BufMut) {
        self.encode_on(&mut Clocks::absolute(), buf);
    }

    /// Appends this frame with its clock fields on the chains `c` of the datagram it goes
    /// in (`docs/wire.md`, "Clock fields"), moving them on, with frames after it (a TOKEN
    /// or FRAG gives its `len`).
    pub fn encode_on(&self, c: &mut Clocks, buf: &mut impl BufMut) {
        self.encode_as(c, buf, false);
    }

    /// As [`encode_on`](Self::encode_on), as its datagram's last frame: a TOKEN or FRAG in
    /// its [`frame_type::TO_END`] form, without `len`.
    pub fn encode_last_on(&self, c: &mut Clocks, buf: &mut impl BufMut) {
        self.encode_as(c, buf, true);
    }

    /// [`encode_on`](Self::encode_on), or with `last` [`encode_last_on`](Self::encode_last_on).
    fn encode_as(&self, c: &mut Clocks, buf: &mut impl BufMut, last: bool) {
        match self {
            Frame::ReqSlots { s, n, l } => c.put_reqslots(buf, *s, *n, *l),
            Frame::Slots { s, r, n } => c.put_slots(buf, *s, *r, *n),
            Frame::Token {
                s,
                r,
                payload,
                senders_copy,
            } => {
                let kind = TokenKind::stored(*senders_copy);
                c.put_token_parts(buf, (*s, *r, kind, last), &[], payload);
            }
            Frame::EarlyToken {
                s,
                r,
                payload,
                senders_copy,
            } => {
                let kind = TokenKind::early(*senders_copy);
                c.put_token_parts(buf, (*s, *r, kind, last), &[], payload);
            }
            Frame::Stored { from, below } => c.put_stored(buf, *from, *below),
            Frame::Challenge { token } => put_path(buf, frame_type::CHALLENGE, *token),
            Frame::Response { token } => put_path(buf, frame_type::RESPONSE, *token),
            Frame::Frag {
                s,
                r,
                total,
                offset,
                data,
                senders_copy,
            } => {
                let slot = (*s, *r, *senders_copy, last);
                c.put_frag_parts(buf, slot, (*total, *offset), (&[], data));
            }
            Frame::Got { r, s, ranges } => {
                put_varint(buf, frame_type::GOT);
                c.put(buf, Of::Src, *r);
                c.put(buf, Of::Dst, *s);
                put_varint(buf, ranges.count);
                put_varint(buf, ranges.first);
                buf.put_slice(&ranges.raw);
            }
            Frame::Held { r, ranges } => ranges.put(c, buf, frame_type::HELD, *r),
            Frame::ReqCredit { r, s, want } => c.put_reqcredit(buf, *r, *s, *want),
            Frame::Credit { r, limit, max } => c.put_credit(buf, *r, *limit, *max),
            Frame::MtuProbe { id, pad } => {
                put_varint(buf, frame_type::MTU_PROBE);
                put_varint(buf, *id);
                put_varint(buf, *pad);
                buf.put_bytes(0, *pad as usize);
            }
            Frame::MtuAck { id } => put_mtu_ack(buf, *id),
            Frame::Ping => put_varint(buf, frame_type::PING),
            Frame::Received { at } => put_received(buf, *at),
            Frame::Ack { .. } | Frame::Doubt { .. } | Frame::Retry { .. } | Frame::Lost { .. } => {
                if let Some((v, r, ranges)) = self.verdict() {
                    ranges.put(c, buf, v.frame_type(), r);
                }
            }
        }
    }

    /// Encoded size of this frame written on its own ([`encode`](Self::encode)).
    pub fn encoded_len(&self) -> usize {
        let c = Clocks::absolute();
        match self {
            Frame::ReqSlots { s, n, l } => c.reqslots_len(*s, *n, *l),
            Frame::Slots { s, r, n } => c.slots_len(*s, *r, *n),
            Frame::Token { s, r, payload, .. } | Frame::EarlyToken { s, r, payload, .. } => {
                c.token_len(*s, *r, payload.len())
            }
            Frame::Stored { from, below } => c.stored_len(*from, *below),
            Frame::Challenge { .. } | Frame::Response { .. } => PATH_FRAME_LEN,
            Frame::Frag {
                s,
                r,
                total,
                offset,
                data,
                ..
            } => c.frag_len(*s, *r, *total, *offset, data.len()),
            Frame::Got { r, s, ranges } => {
                1 + varint_len(*r) + varint_len(*s) + ranges.encoded_len(varint_len(ranges.first))
            }
            Frame::ReqCredit { r, s, want } => c.reqcredit_len(*r, *s, *want),
            Frame::Credit { r, limit, max } => c.credit_len(*r, *limit, *max),
            Frame::MtuProbe { id, pad } => mtu_probe_len(*id, *pad),
            Frame::MtuAck { id } => mtu_ack_len(*id),
            Frame::Ping => PING_FRAME_LEN,
            Frame::Received { .. } => RECEIVED_FRAME_LEN,
            Frame::Ack { r, ranges }
            | Frame::Held { r, ranges }
            | Frame::Doubt { r, ranges }
            | Frame::Retry { r, ranges }
            | Frame::Lost { r, ranges } => {
                1 + varint_len(*r) + ranges.encoded_len(varint_len(ranges.first))
            }
        }
    }
}

/// The slot ranges of an ACK frame, kept in their validated wire form (no allocation when
/// decoding): the first range's start as a value (on the wire it may be written against
/// the datagram's clock chain), the rest as received. Ranges are sorted, disjoint and
/// non-adjacent by construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRanges {
    count: u64,
    /// The first range's start.
    first: u64,
    /// The first range's length less one, then each later range's gap and length less one.
    raw: Bytes,
}

impl AckRanges {
    /// Builds ranges from sorted, disjoint, non-adjacent, non-empty ranges whose ends are at
    /// most `2^62`. Returns `None` for an empty list or one that breaks those conditions.
    pub fn from_ranges(ranges: &[Range<u64>]) -> Option<AckRanges> {
        let first = ranges.first()?.start;
        let mut prev_end: Option<u64> = None;
        for rg in ranges {
            if rg.start >= rg.end || rg.end > VARINT_MAX + 1 {
                return None;
            }
            if prev_end.is_some_and(|p| rg.start <= p) {
                return None;
            }
            prev_end = Some(rg.end);
        }
        let mut raw = BytesMut::new();
        put_ranges_after_first(&mut raw, ranges);
        Some(AckRanges {
            count: ranges.len() as u64,
            first,
            raw: raw.freeze(),
        })
    }

    /// Appends a frame of type `ty` laid out as ACK: `ty`, `r` (of the sender's clock),
    /// then these ranges (the first start of the receiver's), on the chains `c`.
    fn put(&self, c: &mut Clocks, buf: &mut impl BufMut, ty: u64, r: u64) {
        put_varint(buf, ty);
        c.put(buf, Of::Src, r);
        put_varint(buf, self.count);
        c.put(buf, Of::Dst, self.first);
        buf.put_slice(&self.raw);
    }

    /// Encoded size of the count and the ranges, the first start taking `first` bytes.
    fn encoded_len(&self, first: usize) -> usize {
        varint_len(self.count) + first + self.raw.len()
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Always false: an ACK frame has at least one range.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The ranges, in increasing order.
    pub fn iter(&self) -> AckRangeIter<'_> {
        AckRangeIter {
            reader: Reader::new(&self.raw),
            left: self.count,
            prev_end: None,
            first: self.first,
        }
    }

    /// Reads the count and the ranges: the first start with `first` (in full, or on the
    /// datagram's clock chain), the rest checked and kept as received.
    fn decode(
        r: &mut Reader<'_>,
        whole: &Bytes,
        first: impl FnOnce(&mut Reader<'_>) -> Result<u64, DecodeError>,
    ) -> Result<AckRanges, DecodeError> {
        let count = r.varint()?;
        if count == 0 {
            return Err(DecodeError::EmptyAck);
        }
        // Each range takes at least two bytes: reject impossible counts before looping.
        if count > (r.remaining() / 2) as u64 {
            return Err(DecodeError::Truncated);
        }
        let first = first(r)?;
        let start = r.position();
        let mut it = AckRangeIter {
            reader: r.clone(),
            left: count,
            prev_end: None,
            first,
        };
        for item in &mut it {
            item?;
        }
        *r = it.reader;
        Ok(AckRanges {
            count,
            first,
            raw: whole.slice(start..r.position()),
        })
    }
}

/// Iterator over the ranges of an [`AckRanges`].
#[derive(Debug, Clone)]
pub struct AckRangeIter<'a> {
    reader: Reader<'a>,
    left: u64,
    prev_end: Option<u64>,
    /// The first range's start.
    first: u64,
}

impl AckRangeIter<'_> {
    fn step(&mut self) -> Result<Range<u64>, DecodeError> {
        let start = match self.prev_end {
            None => self.first,
            Some(p) => p
                .checked_add(self.reader.varint()?)
                .and_then(|v| v.checked_add(1))
                .ok_or(DecodeError::ValueOutOfRange)?,
        };
        let len_m1 = self.reader.varint()?;
        let end = start
            .checked_add(len_m1)
            .and_then(|v| v.checked_add(1))
            .filter(|&e| e <= VARINT_MAX + 1)
            .ok_or(DecodeError::ValueOutOfRange)?;
        self.prev_end = Some(end);
        Ok(start..end)
    }
}

impl Iterator for AckRangeIter<'_> {
    type Item = Result<Range<u64>, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let item = self.step();
        if item.is_err() {
            self.left = 0;
        }
        Some(item)
    }
}

/// Parses a datagram's header and returns an iterator over its frames.
///
/// The iterator yields each frame or the first error, then stops. Use [`validate`] to check
/// a whole datagram before acting on any of it.
pub fn parse(data: &Bytes, max_payload: usize) -> Result<(Header, Frames<'_>), DecodeError> {
    let mut r = Reader::new(data);
    let header = Header::decode(&mut r)?;
    let clocks = Clocks::of(&header);
    Ok((
        header,
        Frames {
            reader: r,
            whole: data,
            max_payload,
            failed: false,
            clocks,
        },
    ))
}

/// Decodes the frames of a datagram's body (everything after the header; for a sealed
/// datagram, the opened plaintext) into `frames`, cleared first: at least one frame, every
/// frame valid, no byte left over. On error `frames` is left empty. The body's clock
/// fields are read as a datagram with no base has them ([`Clocks::absolute`]: plaintext);
/// [`decode_frames_on`] takes the bases of the header the body came with.
pub fn decode_frames_into(
    body: &Bytes,
    max_payload: usize,
    frames: &mut Vec<Frame>,
) -> Result<(), DecodeError> {
    decode_frames_on(body, max_payload, Clocks::absolute(), frames)
}

/// As [`decode_frames_into`], the clock fields read on the chains `clocks` start with
/// ([`Clocks::of`] the datagram's header).
pub fn decode_frames_on(
    body: &Bytes,
    max_payload: usize,
    clocks: Clocks,
    frames: &mut Vec<Frame>,
) -> Result<(), DecodeError> {
    frames.clear();
    let it = Frames {
        reader: Reader::new(body),
        whole: body,
        max_payload,
        failed: false,
        clocks,
    };
    for f in it {
        match f {
            Ok(f) => frames.push(f),
            Err(e) => {
                frames.clear();
                return Err(e);
            }
        }
    }
    if frames.is_empty() {
        return Err(DecodeError::NoFrames);
    }
    Ok(())
}

/// Checks a whole datagram: a valid header, at least one frame, every frame valid, and no
/// byte left over. Returns the header and the number of frames.
pub fn validate(data: &Bytes, max_payload: usize) -> Result<(Header, usize), DecodeError> {
    let (header, frames) = parse(data, max_payload)?;
    let mut count = 0;
    for f in frames {
        f?;
        count += 1;
    }
    if count == 0 {
        return Err(DecodeError::NoFrames);
    }
    Ok((header, count))
}

/// Iterator over the frames of a datagram.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    reader: Reader<'a>,
    whole: &'a Bytes,
    max_payload: usize,
    failed: bool,
    /// Where the datagram's clock chains stand.
    clocks: Clocks,
}

impl Frames<'_> {
    /// The payload of a frame with a `len` (a TOKEN or FRAG kind), at most `max` bytes:
    /// the rest of the datagram when its type had [`frame_type::TO_END`] (`to_end`), else
    /// `len` bytes, which must leave bytes after them.
    fn payload(&mut self, to_end: bool, max: usize) -> Result<Bytes, DecodeError> {
        if to_end {
            return self.reader.rest(self.whole, max);
        }
        let payload = self.reader.length_prefixed(self.whole, max)?;
        if self.reader.remaining() == 0 {
            return Err(DecodeError::LengthAtEnd);
        }
        Ok(payload)
    }

    /// The rest of a TOKEN, STOKEN, ETOKEN or ESTOKEN (`ty`, its [`frame_type::TO_END`]
    /// bit as `to_end`): they share their layout.
    fn token(&mut self, ty: u64, to_end: bool) -> Result<Frame, DecodeError> {
        let (r, c) = (&mut self.reader, &mut self.clocks);
        let (s, rck) = (c.read(r, Of::Src)?, c.read(r, Of::Dst)?);
        let payload = self.payload(to_end, self.max_payload)?;
        Ok(match ty {
            frame_type::ETOKEN | frame_type::ESTOKEN => Frame::EarlyToken {
                s,
                r: rck,
                payload,
                senders_copy: ty == frame_type::ESTOKEN,
            },
            _ => Frame::Token {
                s,
                r: rck,
                payload,
                senders_copy: ty == frame_type::STOKEN,
            },
        })
    }

    /// The rest of an ACK, DOUBT, RETRY, LOST or HELD (`ty`): they share their layout.
    fn slot_ranges(&mut self, ty: u64) -> Result<Frame, DecodeError> {
        let c = &mut self.clocks;
        let r = c.read(&mut self.reader, Of::Src)?;
        let ranges = AckRanges::decode(&mut self.reader, self.whole, |r| c.read(r, Of::Dst))?;
        Ok(match ty {
            frame_type::ACK => Frame::Ack { r, ranges },
            frame_type::DOUBT => Frame::Doubt { r, ranges },
            frame_type::RETRY => Frame::Retry { r, ranges },
            frame_type::LOST => Frame::Lost { r, ranges },
            _ => Frame::Held { r, ranges },
        })
    }

    fn frame(&mut self) -> Result<Frame, DecodeError> {
        let ty = self.reader.varint()?;
        let to_end = ty & frame_type::TO_END != 0 && frame_type::has_len(ty & !frame_type::TO_END);
        let ty = if to_end { ty & !frame_type::TO_END } else { ty };
        let (r, c) = (&mut self.reader, &mut self.clocks);
        Ok(match ty {
            frame_type::REQSLOTS => Frame::ReqSlots {
                s: c.read(r, Of::Src)?,
                n: r.varint()?,
                l: c.read(r, Of::Src)?,
            },
            frame_type::SLOTS => Frame::Slots {
                s: c.read(r, Of::Dst)?,
                r: c.read(r, Of::Src)?,
                n: r.varint()?,
            },
            frame_type::TOKEN | frame_type::STOKEN | frame_type::ETOKEN | frame_type::ESTOKEN => {
                return self.token(ty, to_end);
            }
            frame_type::STORED => Frame::Stored {
                from: c.read(r, Of::Src)?,
                below: c.read(r, Of::Src)?,
            },
            frame_type::ACK
            | frame_type::DOUBT
            | frame_type::RETRY
            | frame_type::LOST
            | frame_type::HELD => return self.slot_ranges(ty),
            frame_type::CHALLENGE | frame_type::RESPONSE => {
                let b = r.bytes(8)?;
                let token = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                if ty == frame_type::CHALLENGE {
                    Frame::Challenge { token }
                } else {
                    Frame::Response { token }
                }
            }
            frame_type::FRAG | frame_type::SFRAG => {
                let s = c.read(r, Of::Src)?;
                let rr = c.read(r, Of::Dst)?;
                let total = r.varint()?;
                let offset = r.varint()?;
                // Bounded by the datagram itself: a sender cuts fragments to fill its
                // datagrams, whatever header it has.
                let data = self.payload(to_end, self.whole.len())?;
                let end = offset
                    .checked_add(data.len() as u64)
                    .ok_or(DecodeError::ValueOutOfRange)?;
                if data.is_empty() || end > total {
                    return Err(DecodeError::BadFragment);
                }
                Frame::Frag {
                    s,
                    r: rr,
                    total,
                    offset,
                    data,
                    senders_copy: ty == frame_type::SFRAG,
                }
            }
            frame_type::GOT => Frame::Got {
                r: c.read(r, Of::Src)?,
                s: c.read(r, Of::Dst)?,
                ranges: AckRanges::decode(r, self.whole, |r| r.varint())?,
            },
            frame_type::REQCREDIT => Frame::ReqCredit {
                r: c.read(r, Of::Dst)?,
                s: c.read(r, Of::Src)?,
                want: r.varint()?,
            },
            frame_type::CREDIT => Frame::Credit {
                r: c.read(r, Of::Src)?,
                limit: r.varint()?,
                max: r.varint()?,
            },
            frame_type::MTU_PROBE => {
                let id = r.varint()?;
                let pad = r.varint()?;
                if pad > r.remaining() as u64 {
                    return Err(DecodeError::Truncated);
                }
                // Zero bytes only: a datagram has one encoding.
                if r.bytes(pad as usize)?.iter().any(|&b| b != 0) {
                    return Err(DecodeError::BadPadding);
                }
                Frame::MtuProbe { id, pad }
            }
            frame_type::MTU_ACK => Frame::MtuAck { id: r.varint()? },
            frame_type::PING => Frame::Ping,
            frame_type::RECEIVED => {
                let b = r.bytes(2)?;
                Frame::Received {
                    at: u16::from_be_bytes([b[0], b[1]]),
                }
            }
            other => return Err(DecodeError::UnknownFrame(other)),
        })
    }
}

impl Iterator for Frames<'_> {
    type Item = Result<Frame, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.reader.remaining() == 0 {
            return None;
        }
        let f = self.frame();
        self.failed = f.is_err();
        Some(f)
    }
}

/// A whole datagram as values: a header and its frames. Convenient for tests, tools and
/// fuzzing; the node itself decodes frames one at a time without building this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Sender and destination.
    pub header: Header,
    /// At least one frame.
    pub frames: Vec<Frame>,
}

impl Packet {
    /// Decodes a whole datagram, rejecting anything [`validate`] rejects.
    pub fn decode(data: &Bytes) -> Result<Packet, DecodeError> {
        let (header, count) = validate(data, usize::MAX)?;
        let (_, frames) = parse(data, usize::MAX)?;
        let mut out = Vec::with_capacity(count);
        for f in frames {
            out.push(f?);
        }
        Ok(Packet {
            header,
            frames: out,
        })
    }

    /// Encodes the datagram.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        self.header.encode(&mut buf);
        let mut clocks = Clocks::of(&self.header);
        let last = self.frames.len().saturating_sub(1);
        for (i, f) in self.frames.iter().enumerate() {
            f.encode_as(&mut clocks, &mut buf, i == last);
        }
        buf.freeze()
    }

    /// Encoded size of the datagram (its frames' clock fields on the datagram's chains).
    pub fn encoded_len(&self) -> usize {
        self.encode().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::crypto::Seq;
    use crate::proto::NodeId;

    #[test]
    fn a_cookie_reply_round_trips_and_refuses_anything_else() {
        let r = CookieReply {
            src: NodeId::from_const(2),
            dst: NodeId::MAX,
            cookie: [7; COOKIE_LEN],
        };
        let mut v = Vec::new();
        r.encode(&mut v);
        assert_eq!(v.len(), r.encoded_len());
        assert_eq!(v.len(), 1 + 1 + 8 + 16);
        assert!(CookieReply::is_one(&v));
        assert_eq!(CookieReply::decode(&v), Ok(r));
        // Trailing or missing bytes, other flags: refused, and never a header.
        let mut long = v.clone();
        long.push(0);
        assert!(CookieReply::decode(&long).is_err());
        assert!(CookieReply::decode(&v[..v.len() - 1]).is_err());
        assert!(Header::decode_prefix(&v).is_err());
        let mut other = v.clone();
        other[0] = COOKIE_REPLY_START | FLAG_SEALED;
        assert!(!CookieReply::is_one(&other));
        assert!(CookieReply::decode(&other).is_err());
    }

    #[test]
    fn a_cookie_in_the_header_round_trips_and_needs_the_sealed_flag() {
        let mut h = Header::new(NodeId::from_const(1), NodeId::from_const(2));
        h.seal = Some(SealHeader {
            seq: Seq {
                epoch: 9,
                counter: 3,
            },
            key: None,
            cookie: Some([5; COOKIE_LEN]),
        });
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(v.len(), h.encoded_len());
        assert_eq!(v[0], VERSION << 4 | FLAG_SEALED | FLAG_COOKIE);
        assert_eq!(Header::decode_prefix(&v), Ok((h, v.len())));
        let mut plain = Vec::new();
        Header::new(NodeId::from_const(1), NodeId::from_const(2)).encode(&mut plain);
        plain[0] |= FLAG_COOKIE;
        assert_eq!(
            Header::decode_prefix(&plain),
            Err(DecodeError::ReservedFlags(FLAG_COOKIE))
        );
    }
}
