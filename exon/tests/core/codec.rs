//! Wire format properties: `decode(encode(p)) == p` for every packet, `encode(decode(x)) == x`
//! for every valid datagram, and no panic on any bytes.

use std::ops::Range;

use bytes::Bytes;
use exon::proto::codec::VARINT_MAX;
use exon::proto::frame::{validate, Header};
use exon::proto::{AckRanges, DecodeError, Frame, NodeId, Packet};
use proptest::prelude::*;

/// Values spread over every varint length.
fn varint() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..64,
        64u64..16384,
        16384u64..(1 << 30),
        (1u64 << 30)..=VARINT_MAX
    ]
}

fn node_id() -> impl Strategy<Value = NodeId> {
    varint().prop_map(|v| NodeId::new(v).unwrap())
}

fn ack_ranges() -> impl Strategy<Value = AckRanges> {
    (
        varint(),
        proptest::collection::vec((0u64..1000, 0u64..1000), 1..20),
    )
        .prop_filter_map("ranges past 2^62", |(start, items)| {
            let mut ranges: Vec<Range<u64>> = Vec::new();
            let mut next = start;
            for (gap, len) in items {
                let s = next.checked_add(gap)?;
                let e = s.checked_add(len + 1)?;
                ranges.push(s..e);
                next = e + 1;
            }
            AckRanges::from_ranges(&ranges)
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (varint(), varint(), varint()).prop_map(|(s, n, l)| Frame::ReqSlots { s, n, l }),
        (varint(), varint(), varint()).prop_map(|(s, r, n)| Frame::Slots { s, r, n }),
        (
            varint(),
            varint(),
            proptest::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(s, r, p)| Frame::Token {
                s,
                r,
                payload: Bytes::from(p),
                senders_copy: false
            }),
        (
            varint(),
            varint(),
            proptest::collection::vec(any::<u8>(), 0..300),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(s, r, p, early, senders_copy)| if early {
                Frame::EarlyToken {
                    s,
                    r,
                    payload: Bytes::from(p),
                    senders_copy,
                }
            } else {
                Frame::Token {
                    s,
                    r,
                    payload: Bytes::from(p),
                    senders_copy: true,
                }
            }),
        (varint(), varint()).prop_map(|(from, below)| Frame::Stored { from, below }),
        (varint(), ack_ranges()).prop_map(|(r, ranges)| Frame::Ack { r, ranges }),
        (varint(), ack_ranges()).prop_map(|(r, ranges)| Frame::Doubt { r, ranges }),
        (varint(), ack_ranges()).prop_map(|(r, ranges)| Frame::Retry { r, ranges }),
        (varint(), ack_ranges()).prop_map(|(r, ranges)| Frame::Lost { r, ranges }),
        (varint(), ack_ranges()).prop_map(|(r, ranges)| Frame::Held { r, ranges }),
        (varint(), 0u64..300).prop_map(|(id, pad)| Frame::MtuProbe { id, pad }),
        varint().prop_map(|id| Frame::MtuAck { id }),
        Just(Frame::Ping),
    ]
}

fn packet() -> impl Strategy<Value = Packet> {
    (
        node_id(),
        node_id(),
        any::<bool>(),
        proptest::collection::vec(frame(), 1..8),
    )
        .prop_map(|(src, dst, ack_now, frames)| Packet {
            header: Header {
                src,
                dst,
                ack_now,
                seal: None,
            },
            frames,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_of_encode_is_identity(p in packet()) {
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        prop_assert_eq!(Packet::decode(&bytes), Ok(p));
    }

    /// Mutated valid datagrams: whatever decodes re-encodes to the very same bytes.
    #[test]
    fn encode_of_decode_is_identity(p in packet(), edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4), cut in any::<prop::sample::Index>(), truncate in any::<bool>()) {
        let mut v = p.encode().to_vec();
        for (i, b) in edits {
            let i = i.index(v.len());
            v[i] = b;
        }
        if truncate {
            v.truncate(cut.index(v.len() + 1));
        }
        let x = Bytes::from(v);
        if let Ok(decoded) = Packet::decode(&x) {
            prop_assert_eq!(decoded.encode(), x);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(v in proptest::collection::vec(any::<u8>(), 0..200)) {
        let x = Bytes::from(v);
        if let Ok(p) = Packet::decode(&x) {
            prop_assert_eq!(p.encode(), x);
        }
    }
}

fn one_token() -> Packet {
    Packet {
        header: Header::new(NodeId::from_const(1), NodeId::from_const(2)),
        frames: vec![Frame::Token {
            s: 5,
            r: 7,
            payload: Bytes::from_static(b"hello"),
            senders_copy: false,
        }],
    }
}

#[test]
fn rejects_by_reason() {
    let good = one_token().encode();
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = good.to_vec();
        f(&mut v);
        validate(&Bytes::from(v), usize::MAX).map(|_| ())
    };
    assert_eq!(with(&|v| v.truncate(2)), Err(DecodeError::Runt));
    assert_eq!(
        with(&|v| v[0] = b'`'),
        Err(DecodeError::UnsupportedVersion(6))
    );
    assert_eq!(
        with(&|v| v[0] = 0x40),
        Err(DecodeError::UnsupportedVersion(4))
    );
    assert_eq!(
        with(&|v| v[0] = 0x30),
        Err(DecodeError::UnsupportedVersion(3))
    );
    assert_eq!(
        with(&|v| v[0] = 0x94),
        Err(DecodeError::UnsupportedVersion(9))
    );
    assert_eq!(
        with(&|v| v[0] |= 0x04),
        Err(DecodeError::ReservedFlags(0x04))
    );
    assert_eq!(with(&|v| v.truncate(3)), Err(DecodeError::NoFrames));
    // The datagram's last TOKEN runs to its end (its type's TO_END form, no length): a
    // byte more or less is a longer or shorter payload, never garbage or a cut.
    let payload = |v: Vec<u8>| match &Packet::decode(&Bytes::from(v)).unwrap().frames[..] {
        [Frame::Token { payload, .. }] => payload.clone(),
        f => panic!("{f:?}"),
    };
    let mut longer = good.to_vec();
    longer.push(0x03);
    assert_eq!(payload(longer), &b"hello\x03"[..]);
    assert_eq!(payload(good[..good.len() - 1].to_vec()), &b"hell"[..]);
    // The same TOKEN with its length, last: refused (a datagram has one encoding).
    let mut v = good[..3].to_vec();
    exon::proto::frame::put_token(&mut v, 5, 7, b"hello");
    assert_eq!(
        validate(&Bytes::from(v.clone()), usize::MAX).map(|_| ()),
        Err(DecodeError::LengthAtEnd)
    );
    // With a frame after it, the length is what it must be: bytes after the frames are
    // garbage, a cut one is cut.
    v.push(0x16);
    assert!(validate(&Bytes::from(v.clone()), usize::MAX).is_ok());
    let mut garbage = v.clone();
    garbage.push(0);
    assert_eq!(
        validate(&Bytes::from(garbage), usize::MAX).map(|_| ()),
        Err(DecodeError::UnknownFrame(0))
    );
    let mut cut = v.clone();
    cut.push(0x03);
    assert_eq!(
        validate(&Bytes::from(cut), usize::MAX).map(|_| ()),
        Err(DecodeError::Truncated),
        "trailing garbage"
    );
    // A payload length far beyond the bytes present is refused before anything is sliced.
    let mut v = good[..3].to_vec();
    v.extend_from_slice(&[0x03, 5, 7, 0xbf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        validate(&Bytes::from(v), usize::MAX).map(|_| ()),
        Err(DecodeError::Truncated)
    );
    // An ACK claiming 2^40 ranges in a few bytes.
    let mut v = good[..3].to_vec();
    v.extend_from_slice(&[0x04, 1, 0xc0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        validate(&Bytes::from(v), usize::MAX).map(|_| ()),
        Err(DecodeError::Truncated)
    );
    // An ACK range running past 2^62.
    let mut v = good[..3].to_vec();
    v.extend_from_slice(&[
        0x04, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05,
    ]);
    assert_eq!(
        validate(&Bytes::from(v), usize::MAX).map(|_| ()),
        Err(DecodeError::ValueOutOfRange)
    );
    // MTU_PROBE padding that runs past the end, or is not all zero bytes.
    let mut v = good[..3].to_vec();
    v.extend_from_slice(&[0x0c, 1, 5, 0, 0, 0, 0]);
    assert_eq!(
        validate(&Bytes::from(v.clone()), usize::MAX).map(|_| ()),
        Err(DecodeError::Truncated)
    );
    v.push(0);
    assert!(validate(&Bytes::from(v.clone()), usize::MAX).is_ok());
    v[10] = 1;
    assert_eq!(
        validate(&Bytes::from(v), usize::MAX).map(|_| ()),
        Err(DecodeError::BadPadding)
    );
    // A payload larger than the configured maximum.
    assert_eq!(
        validate(&good, 4).map(|_| ()),
        Err(DecodeError::PayloadTooLarge)
    );
}

/// The header and framing of a 1 KB message, with small and with large clock values.
#[test]
fn overhead_of_a_1kb_token() {
    let mk = |s: u64, r: u64| Packet {
        header: Header::new(NodeId::from_const(1), NodeId::from_const(2)),
        frames: vec![Frame::Token {
            s,
            r,
            payload: Bytes::from(vec![0u8; 1024]),
            senders_copy: false,
        }],
    };
    // Clocks below 2^30 (a file store starting at 0): 3-byte header, 9-byte TOKEN framing
    // (the datagram's last frame writes no length).
    assert_eq!(mk(1 << 20, 1 << 20).encoded_len() - 1024, 12);
    // Clocks derived from wall-clock microseconds (about 2^51): 8-byte s and r in the
    // first frame of a plaintext datagram.
    assert_eq!(mk(1 << 51, 1 << 51).encoded_len() - 1024, 20);
}

/// What the clock chains save (`docs/wire.md`, "Clock fields"), with clocks near 2^51: the
/// later tokens of a datagram, and a sealed request or reply whose ACK rides with it.
#[test]
fn clock_fields_on_the_chains_cost_what_the_table_says() {
    use exon::proto::crypto::Seq;
    use exon::proto::frame::SealHeader;
    let (a, b) = ((1u64 << 51) + 123_456, (1u64 << 51) + 9_876_543_210);
    let token = |s: u64, r: u64, len: usize| Frame::Token {
        s,
        r,
        payload: Bytes::from(vec![0u8; len]),
        senders_copy: false,
    };
    let plain = |frames: Vec<Frame>| Packet {
        header: Header::new(NodeId::from_const(1), NodeId::from_const(2)),
        frames,
    };
    // Ten 100-byte tokens in one datagram: the first's framing 19 bytes, each later one's 5
    // (type, s and r a byte each, a 2-byte length), against 19 each in full; the last
    // writes no length (it runs to the datagram's end).
    let ten = plain((0..10).map(|k| token(a + k, b, 100)).collect());
    assert_eq!(ten.encoded_len() - 3 - 1000, 19 + 9 * 5 - 2);
    // Sealed, the sender's chain starts at the epoch: a token 1 000 slots after it pays 2
    // bytes for `s`; the receiver's incarnation, met first, 8.
    let sealed = |frames: Vec<Frame>| {
        let mut header = Header::new(NodeId::from_const(1), NodeId::from_const(2));
        header.seal = Some(SealHeader {
            seq: Seq {
                epoch: a,
                counter: 7,
            },
            key: None,
            cookie: None,
        });
        Packet { header, frames }
    };
    let one = sealed(vec![token(a + 1_000, b, 1024)]);
    assert_eq!(one.encoded_len() - 12 - 1024, 1 + 2 + 8);
    // The receiver's chain starts at the epoch too: a receiver started five minutes after
    // the sender has its incarnation 4 bytes away.
    let five_minutes = sealed(vec![token(a + 1_000, a + 300_000_000, 1024)]);
    assert_eq!(five_minutes.encoded_len() - 12 - 1024, 1 + 2 + 4);
    // A reply and the ACK of its request: the ACK's `r` (the server's incarnation, taken
    // just before its epoch) a byte, the request's slot in full, the reply's slot (5 000
    // after) 2 bytes, the caller's incarnation (20 000 slots before its request's) 4 bytes,
    // no length: 19 bytes of framing where version 2 wrote 38.
    let ack = Frame::Ack {
        r: a - 2,
        ranges: AckRanges::from_ranges(std::slice::from_ref(&(b..b + 1))).unwrap(),
    };
    let reply = sealed(vec![ack, token(a + 5_000, b - 20_000, 1024)]);
    assert_eq!(
        reply.encoded_len() - 12 - 1024,
        (1 + 1 + 1 + 8 + 1) + (1 + 2 + 4)
    );
}

/// An MTU_PROBE fills exactly the room it is given, except just past the padding lengths
/// where its length field grows (64 and 16384 bytes): then one or two bytes less.
#[test]
fn an_mtu_probe_fills_the_room_it_is_given() {
    use exon::proto::frame::put_mtu_probe;
    let mut short = 0;
    for id in [0u64, 63, 64, 1 << 20, 1 << 40] {
        for room in (0..300usize).chain(16_300..16_500).chain([65_507]) {
            let mut buf = Vec::new();
            let n = put_mtu_probe(&mut buf, id, room);
            assert_eq!(n, buf.len());
            let min = 1 + exon::proto::codec::varint_len(id) + 1;
            if room < min {
                assert_eq!(n, 0);
                continue;
            }
            assert!(n <= room && n + 2 >= room, "id {id} room {room}: {n}");
            short += usize::from(n != room);
            let frames = Packet::decode(&{
                let mut d = Vec::new();
                Header::new(NodeId::from_const(1), NodeId::from_const(2)).encode(&mut d);
                d.extend_from_slice(&buf);
                Bytes::from(d)
            })
            .unwrap()
            .frames;
            assert!(matches!(frames[..], [Frame::MtuProbe { id: i, .. }] if i == id));
        }
    }
    assert_eq!(short, 15, "three sizes per id cannot be filled exactly");
}

/// PING is its type byte alone, and decodes to nothing but itself.
#[test]
fn a_ping_is_one_byte() {
    let mut buf = Vec::new();
    Frame::Ping.encode(&mut buf);
    assert_eq!(buf, [0x16]);
    assert_eq!(Frame::Ping.encoded_len(), 1);
    let mut d = Vec::new();
    Header::new(NodeId::from_const(1), NodeId::from_const(2)).encode(&mut d);
    d.extend_from_slice(&buf);
    let frames = Packet::decode(&Bytes::from(d)).unwrap().frames;
    assert!(matches!(frames[..], [Frame::Ping]));
}

/// The committed fuzz seed corpus holds valid datagrams of every frame type.
#[test]
fn fuzz_seed_corpus_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/packet_decode");
    let mut kinds = std::collections::HashSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let data = Bytes::from(std::fs::read(entry.unwrap().path()).unwrap());
        let p = Packet::decode(&data).expect("seed decodes");
        assert_eq!(p.encode(), data);
        kinds.extend(p.frames.iter().map(Frame::name));
    }
    assert_eq!(kinds.len(), 9, "seeds cover every frame type: {kinds:?}");
}
