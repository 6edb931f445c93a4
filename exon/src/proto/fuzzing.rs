//! `Arbitrary` for the wire types (feature `arbitrary`): every generated value is a valid
//! packet, so fuzzers can check `decode(encode(p)) == p`.

use arbitrary::{Arbitrary, Result, Unstructured};
use bytes::Bytes;

use crate::proto::wire::codec::VARINT_MAX;
use crate::proto::{AckRanges, Frame, Header, NodeId, Packet};

fn varint(u: &mut Unstructured<'_>) -> Result<u64> {
    // Spread values over every encoded length.
    let v = match u.int_in_range(0u8..=3)? {
        0 => u.int_in_range(0..=63)?,
        1 => u.int_in_range(64..=16383)?,
        2 => u.int_in_range(16384..=(1 << 30) - 1)?,
        _ => u.int_in_range((1 << 30)..=VARINT_MAX)?,
    };
    Ok(v)
}

impl<'a> Arbitrary<'a> for NodeId {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(NodeId::new(varint(u)?).unwrap_or(NodeId::MAX))
    }
}

impl<'a> Arbitrary<'a> for AckRanges {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut next = varint(u)?;
        let count = u.int_in_range(1usize..=16)?;
        let mut ranges = Vec::with_capacity(count);
        for _ in 0..count {
            let gap = u.int_in_range(0u64..=1000)?;
            let len = u.int_in_range(1u64..=1000)?;
            let Some(start) = next.checked_add(gap) else {
                break;
            };
            let Some(end) = start.checked_add(len).filter(|&e| e <= VARINT_MAX + 1) else {
                break;
            };
            ranges.push(start..end);
            next = end + 1;
        }
        if ranges.is_empty() {
            ranges.push(0..1);
        }
        AckRanges::from_ranges(&ranges).ok_or(arbitrary::Error::IncorrectFormat)
    }
}

impl<'a> Arbitrary<'a> for Frame {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let k = u.int_in_range(0u8..=19)?;
        Ok(match k {
            0 => Frame::ReqSlots {
                s: varint(u)?,
                n: varint(u)?,
                l: varint(u)?,
            },
            1 => Frame::Slots {
                s: varint(u)?,
                r: varint(u)?,
                n: varint(u)?,
            },
            2 => {
                let len = u.int_in_range(0usize..=1500)?;
                Frame::Token {
                    s: varint(u)?,
                    r: varint(u)?,
                    payload: Bytes::copy_from_slice(u.bytes(len.min(u.len()))?),
                    senders_copy: bool::arbitrary(u)?,
                }
            }
            3 | 4 | 5 | 13 | 16 => ranged(u, k)?,
            6 => Frame::Challenge {
                token: u64::arbitrary(u)?,
            },
            7 => {
                let len = u.int_in_range(1usize..=1500)?;
                let data = Bytes::copy_from_slice(u.bytes(len.min(u.len()))?);
                if data.is_empty() {
                    return Err(arbitrary::Error::NotEnoughData);
                }
                let offset = varint(u)?.min(VARINT_MAX - data.len() as u64);
                let end = offset + data.len() as u64;
                let total = end + varint(u)?.min(VARINT_MAX - end);
                Frame::Frag {
                    s: varint(u)?,
                    r: varint(u)?,
                    total,
                    offset,
                    data,
                    senders_copy: bool::arbitrary(u)?,
                }
            }
            8 => Frame::Got {
                r: varint(u)?,
                s: varint(u)?,
                ranges: AckRanges::arbitrary(u)?,
            },
            9 => Frame::ReqCredit {
                r: varint(u)?,
                s: varint(u)?,
                want: varint(u)?,
            },
            10 => Frame::Credit {
                r: varint(u)?,
                limit: varint(u)?,
                max: varint(u)?,
            },
            11 => Frame::Response {
                token: u64::arbitrary(u)?,
            },
            12 => Frame::MtuProbe {
                id: varint(u)?,
                pad: u.int_in_range(0u64..=1500)?,
            },
            14 => {
                let len = u.int_in_range(0usize..=1500)?;
                Frame::EarlyToken {
                    s: varint(u)?,
                    r: varint(u)?,
                    payload: Bytes::copy_from_slice(u.bytes(len.min(u.len()))?),
                    senders_copy: bool::arbitrary(u)?,
                }
            }
            15 => Frame::Stored {
                from: varint(u)?,
                below: varint(u)?,
            },
            17 => Frame::Ping,
            18 => Frame::Received {
                at: u16::arbitrary(u)?,
            },
            _ => Frame::MtuAck { id: varint(u)? },
        })
    }
}

/// A frame of incarnation and slot ranges: ACK (`k` 3), DOUBT (4), RETRY (5), LOST (13) or
/// HELD (any other).
fn ranged(u: &mut Unstructured<'_>, k: u8) -> Result<Frame> {
    let (r, ranges) = (varint(u)?, AckRanges::arbitrary(u)?);
    Ok(match k {
        3 => Frame::Ack { r, ranges },
        4 => Frame::Doubt { r, ranges },
        5 => Frame::Retry { r, ranges },
        13 => Frame::Lost { r, ranges },
        _ => Frame::Held { r, ranges },
    })
}

impl<'a> Arbitrary<'a> for Packet {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let header = Header {
            src: NodeId::arbitrary(u)?,
            dst: NodeId::arbitrary(u)?,
            ack_now: bool::arbitrary(u)?,
            seal: None,
        };
        let count = u.int_in_range(1usize..=8)?;
        let mut frames = Vec::with_capacity(count);
        for _ in 0..count {
            frames.push(Frame::arbitrary(u)?);
        }
        Ok(Packet { header, frames })
    }
}
