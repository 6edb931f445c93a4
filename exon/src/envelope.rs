//! The endpoint's message envelope: one kind byte (and a call id for requests and replies, or
//! a flow, run and sequence number for ordered messages) before the application's bytes, so
//! that plain messages, requests, replies, channels and streams share one exactly-once
//! channel (`docs/wire.md`, "Message envelope"). Sans-IO: the driver, the RPC layer and the
//! simulator use it alike.

use bytes::{Buf, BufMut, Bytes};

use crate::proto::codec::{put_varint, varint_len, Reader};
use crate::proto::Payload;

/// Kind byte of a plain message.
const MESSAGE: u8 = 0x00;
/// Kind byte of a request.
const REQUEST: u8 = 0x01;
/// Kind byte of a reply carrying the handler's answer.
const REPLY: u8 = 0x02;
/// Kind byte of a reply carrying the handler's error.
const FAILED: u8 = 0x03;
/// Kind byte of a reply saying the handler panicked.
const PANICKED: u8 = 0x04;

/// Kind byte of an ordered message (a channel's message, a stream's chunk).
const ORDERED: u8 = 0x05;
/// Kind byte of the last ordered message of its flow (a stream's end).
const ORDERED_LAST: u8 = 0x06;
/// Kind byte of a gap: the ordered message of that sequence number was given up.
const GAP: u8 = 0x07;
/// Kind byte of a stream's abort.
const RESET: u8 = 0x08;
/// Kind byte of a receiver's window, advertised to a flow's sender.
const WINDOW: u8 = 0x09;
/// Kind byte of a flow receiver's question to its sender: does this run still live?
const QUERY: u8 = 0x0a;
/// Kind byte of a flow sender's answer: that run is over (it has no such run).
const OVER: u8 = 0x0b;

/// The most bytes an envelope adds to the application's bytes: an ordered message's kind,
/// flow (8), run (4) and sequence number (8).
pub const MAX_OVERHEAD: usize = 1 + 8 + 4 + 8;

/// Largest stream id a flow can name (the flow's two low bits say what it is).
pub const MAX_STREAM_ID: u64 = (1 << 60) - 1;

/// An ordered flow between two nodes, as the receiver of a message names it: a channel, or
/// one direction of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flow {
    /// Channel `n` from the sender to the receiver (each direction is its own channel).
    Channel(u16),
    /// Stream `id`, opened by the message's sender (`opener_sent`) or by its receiver.
    Stream {
        /// The stream's id, in its opener's numbering (at most [`MAX_STREAM_ID`]).
        id: u64,
        /// Whether the sender of the message opened the stream.
        opener_sent: bool,
    },
}

impl Flow {
    /// The flow's varint on the wire: the id shifted past two tag bits (a durable flow's
    /// journal mark is kept under [`position::lane`](crate::ordered::position::lane) of it).
    pub fn code(self) -> u64 {
        match self {
            Flow::Channel(n) => u64::from(n) << 2,
            Flow::Stream { id, opener_sent } => {
                (id.min(MAX_STREAM_ID) << 2) | if opener_sent { 1 } else { 2 }
            }
        }
    }

    /// The flow a wire code names (`None` for a code no flow has): the inverse of
    /// [`code`](Self::code).
    pub fn from_code(code: u64) -> Option<Flow> {
        let id = code >> 2;
        match code & 3 {
            0 => u16::try_from(id).ok().map(Flow::Channel),
            1 => Some(Flow::Stream {
                id,
                opener_sent: true,
            }),
            2 => Some(Flow::Stream {
                id,
                opener_sent: false,
            }),
            _ => None,
        }
    }

    /// The same flow as the other end names it (a stream's opener seen from the other side).
    pub fn reversed(self) -> Flow {
        match self {
            Flow::Channel(n) => Flow::Channel(n),
            Flow::Stream { id, opener_sent } => Flow::Stream {
                id,
                opener_sent: !opener_sent,
            },
        }
    }
}

/// Where an ordered message stands in its flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Place {
    /// The flow.
    pub flow: Flow,
    /// The sender's run: chosen at random each time an endpoint starts, so that a flow's
    /// numbering starting over after a restart is told from the old one.
    pub run: u32,
    /// The message's number in its flow and run, from 0.
    pub seq: u64,
}

/// How a call ended at the server, as its reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The handler answered; the body is its response.
    Answered,
    /// The handler returned an error; the body is the error.
    Failed,
    /// The handler panicked; the body is the panic's message (UTF-8, maybe empty).
    Panicked,
}

/// One message, opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// A plain message.
    Message(Bytes),
    /// A request of call `call`.
    Request {
        /// The caller's id of the call.
        call: u64,
        /// The request.
        body: Bytes,
    },
    /// The reply to call `call`.
    Reply {
        /// The caller's id of the call.
        call: u64,
        /// How the call ended.
        outcome: Outcome,
        /// The response, the error, or the panic's message.
        body: Bytes,
    },
    /// An ordered message: a channel's message or a stream's chunk.
    Ordered {
        /// Its flow, run and number.
        place: Place,
        /// Whether it is the last of its flow (a stream's end).
        last: bool,
        /// The application's bytes.
        body: Bytes,
    },
    /// The ordered message at `place` was given up by its sender: its receiver skips it.
    Gap(Place),
    /// The stream of `place.flow` is aborted (`place.seq` is 0).
    Reset(Place),
    /// The receiver of flow `place.flow` (named as this envelope's receiver, the flow's
    /// sender, sees it) asks whether the sender's run `place.run` still lives: it holds
    /// messages of it ahead of number `place.seq`, which has not come for a while, or (a
    /// stream) the sender's node has shown another run since. (A sender that restarted
    /// without a journal forgot the run, and its missing numbers never come.)
    Query(Place),
    /// The sender of flow `place.flow` (named as this envelope's receiver sees it) has no
    /// run `place.run`, and never will again: what a channel's receiver holds of it is
    /// handed over out of order and the run forgotten; a stream breaks.
    Over(Place),
    /// The receiver of the flow `flow` (named as the receiver of this envelope, the flow's
    /// sender, sees it) advertises its window for the sender's run `run`: the sender keeps
    /// at most `messages` messages and gaps, and `bytes` bytes, of the flow unsettled.
    Window {
        /// The flow, as its sender names it.
        flow: Flow,
        /// The sender's run the window is for.
        run: u32,
        /// Messages and gaps unsettled at once (at most `u32::MAX`).
        messages: u32,
        /// Their bytes (at most `2^62 - 1` on the wire).
        bytes: u64,
    },
}

/// Why bytes are not an envelope (an authenticated peer that does not speak it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// No kind byte.
    #[error("empty message: no envelope")]
    Empty,
    /// An unknown kind byte.
    #[error("unknown envelope kind {0:#04x}")]
    Kind(u8),
    /// The call id is cut short, or wider than 8 bytes.
    #[error("envelope call id truncated")]
    Truncated,
    /// An ordered message's flow, run or number is cut short or names no flow.
    #[error("ordered envelope malformed")]
    Ordered,
}

impl Envelope {
    /// Opens `data`: the bodies are `data` itself, advanced past the envelope (no copy, no
    /// reference count touched). Any bytes are safe.
    pub fn open(mut data: Bytes) -> Result<Envelope, EnvelopeError> {
        let Some(&kind) = data.first() else {
            return Err(EnvelopeError::Empty);
        };
        if kind == MESSAGE {
            data.advance(1);
            return Ok(Envelope::Message(data));
        }
        if (ORDERED..=OVER).contains(&kind) {
            return open_ordered(kind, data);
        }
        let outcome = match kind {
            REQUEST => None,
            REPLY => Some(Outcome::Answered),
            FAILED => Some(Outcome::Failed),
            PANICKED => Some(Outcome::Panicked),
            k => return Err(EnvelopeError::Kind(k)),
        };
        let mut r = Reader::new(&data[1..]);
        let call = r.varint().map_err(|_| EnvelopeError::Truncated)?;
        let at = data.len() - r.remaining();
        data.advance(at);
        Ok(match outcome {
            None => Envelope::Request { call, body: data },
            Some(outcome) => Envelope::Reply {
                call,
                outcome,
                body: data,
            },
        })
    }

    /// The body of `data` if it is a plain message's envelope, without the work of
    /// [`open`](Self::open) for the other kinds (the common case's short way); `Err` gives
    /// `data` back as it was otherwise.
    #[inline]
    pub fn open_message(mut data: Bytes) -> Result<Bytes, Bytes> {
        if data.first() != Some(&MESSAGE) {
            return Err(data);
        }
        data.advance(1);
        Ok(data)
    }

    /// Seals a plain message: its kind byte as the payload's head, `body` not copied.
    #[inline]
    pub fn message(body: Bytes) -> Payload {
        Payload::with_head(&[MESSAGE], body)
    }

    /// Seals the request of call `call` (`body` not copied).
    pub fn request(call: u64, body: Bytes) -> Payload {
        with_call(REQUEST, call, body)
    }

    /// Seals the reply to call `call` (`body` not copied).
    pub fn reply(call: u64, outcome: Outcome, body: Bytes) -> Payload {
        let kind = match outcome {
            Outcome::Answered => REPLY,
            Outcome::Failed => FAILED,
            Outcome::Panicked => PANICKED,
        };
        with_call(kind, call, body)
    }

    /// The bytes a request or reply envelope adds before a body, for call `call`.
    pub fn call_overhead(call: u64) -> usize {
        1 + varint_len(call)
    }

    /// Seals an ordered message at `place` (`body` not copied); `last` ends its flow.
    pub fn ordered(place: Place, last: bool, body: Bytes) -> Payload {
        with_place(if last { ORDERED_LAST } else { ORDERED }, place, body)
    }

    /// Seals a gap: the ordered message at `place` was given up.
    pub fn gap(place: Place) -> Payload {
        with_place(GAP, place, Bytes::new())
    }

    /// Seals the abort of the stream of `place.flow`.
    pub fn reset(place: Place) -> Payload {
        with_place(RESET, place, Bytes::new())
    }

    /// Seals a flow receiver's question about its sender's run `place.run`, next due
    /// number `place.seq` (see [`Envelope::Query`]).
    pub fn query(place: Place) -> Payload {
        with_place(QUERY, place, Bytes::new())
    }

    /// Seals a flow sender's answer: it has no run `place.run` (see [`Envelope::Over`]).
    pub fn over(place: Place) -> Payload {
        with_place(OVER, place, Bytes::new())
    }

    /// Seals a receiver's window for flow `flow` (as its sender names it) of run `run`
    /// (see [`Envelope::Window`]).
    pub fn window(flow: Flow, run: u32, messages: u32, bytes: u64) -> Payload {
        let place = Place {
            flow,
            run,
            seq: u64::from(messages),
        };
        let mut b = Vec::with_capacity(8);
        put_varint(&mut b, bytes.min(crate::proto::codec::VARINT_MAX));
        with_place(WINDOW, place, Bytes::from(b))
    }
}

fn with_place(kind: u8, place: Place, body: Bytes) -> Payload {
    let mut head = [0u8; MAX_OVERHEAD];
    let mut w = &mut head[..];
    w.put_u8(kind);
    put_varint(&mut w, place.flow.code());
    w.put_u32_le(place.run);
    put_varint(&mut w, place.seq.min(crate::proto::codec::VARINT_MAX));
    let len = MAX_OVERHEAD - w.len();
    Payload::with_head(&head[..len], body)
}

fn open_ordered(kind: u8, mut data: Bytes) -> Result<Envelope, EnvelopeError> {
    let mut r = Reader::new(&data[1..]);
    let flow = r.varint().ok().and_then(Flow::from_code);
    let run = r.bytes(4).ok();
    let seq = r.varint().ok();
    let (Some(flow), Some(run), Some(seq)) = (flow, run, seq) else {
        return Err(EnvelopeError::Ordered);
    };
    let run = u32::from_le_bytes([run[0], run[1], run[2], run[3]]);
    let place = Place { flow, run, seq };
    let at = data.len() - r.remaining();
    data.advance(at);
    Ok(match kind {
        ORDERED | ORDERED_LAST => Envelope::Ordered {
            place,
            last: kind == ORDERED_LAST,
            body: data,
        },
        GAP => Envelope::Gap(place),
        RESET => Envelope::Reset(place),
        QUERY => Envelope::Query(place),
        OVER => Envelope::Over(place),
        _ => {
            let mut r = Reader::new(&data);
            let bytes = r.varint().map_err(|_| EnvelopeError::Ordered)?;
            Envelope::Window {
                flow,
                run,
                messages: u32::try_from(seq).unwrap_or(u32::MAX),
                bytes,
            }
        }
    })
}

fn with_call(kind: u8, call: u64, body: Bytes) -> Payload {
    let mut head = [0u8; MAX_OVERHEAD];
    let mut w = &mut head[..];
    w.put_u8(kind);
    put_varint(&mut w, call);
    let len = MAX_OVERHEAD - w.len();
    Payload::with_head(&head[..len], body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let body = Bytes::from_static(b"payload");
        assert_eq!(
            Envelope::open(Envelope::message(body.clone()).to_bytes()),
            Ok(Envelope::Message(body.clone()))
        );
        for call in [0, 1, 63, 64, 1 << 30, (1 << 62) - 1] {
            assert_eq!(
                Envelope::open(Envelope::request(call, body.clone()).to_bytes()),
                Ok(Envelope::Request {
                    call,
                    body: body.clone()
                })
            );
            for outcome in [Outcome::Answered, Outcome::Failed, Outcome::Panicked] {
                let sealed = Envelope::reply(call, outcome, body.clone()).to_bytes();
                assert_eq!(sealed.len(), Envelope::call_overhead(call) + body.len());
                assert!(sealed.len() <= MAX_OVERHEAD + body.len());
                assert_eq!(
                    Envelope::open(sealed),
                    Ok(Envelope::Reply {
                        call,
                        outcome,
                        body: body.clone()
                    })
                );
            }
        }
    }

    #[test]
    fn the_short_way_opens_exactly_the_plain_messages() {
        let body = Bytes::from_static(b"payload");
        let place = Place {
            flow: Flow::Channel(3),
            run: 9,
            seq: 4,
        };
        let mut cases = vec![
            Envelope::message(body.clone()).to_bytes(),
            Envelope::message(Bytes::new()).to_bytes(),
            Envelope::request(7, body.clone()).to_bytes(),
            Envelope::reply(7, Outcome::Answered, body.clone()).to_bytes(),
            Envelope::ordered(place, false, body.clone()).to_bytes(),
            Envelope::gap(place).to_bytes(),
            Bytes::new(),
        ];
        cases.extend((0..=u8::MAX).map(|k| Bytes::from(vec![k, 1, 2])));
        for data in cases {
            match Envelope::open_message(data.clone()) {
                Ok(b) => assert_eq!(Envelope::open(data), Ok(Envelope::Message(b))),
                Err(back) => {
                    assert_eq!(back, data, "given back unchanged");
                    assert!(!matches!(Envelope::open(data), Ok(Envelope::Message(_))));
                }
            }
        }
    }

    #[test]
    fn ordered_kinds_round_trip_within_the_inline_head() {
        let body = Bytes::from_static(b"chunk");
        let flows = [
            Flow::Channel(0),
            Flow::Channel(u16::MAX),
            Flow::Stream {
                id: 0,
                opener_sent: true,
            },
            Flow::Stream {
                id: MAX_STREAM_ID,
                opener_sent: false,
            },
        ];
        for flow in flows {
            for (run, seq) in [
                (0, 0),
                (u32::MAX, crate::proto::codec::VARINT_MAX),
                (7, 300),
            ] {
                let place = Place { flow, run, seq };
                for last in [false, true] {
                    let sealed = Envelope::ordered(place, last, body.clone());
                    assert!(sealed.len() <= MAX_OVERHEAD + body.len());
                    assert_eq!(
                        Envelope::open(sealed.to_bytes()),
                        Ok(Envelope::Ordered {
                            place,
                            last,
                            body: body.clone()
                        })
                    );
                }
                assert_eq!(
                    Envelope::open(Envelope::gap(place).to_bytes()),
                    Ok(Envelope::Gap(place))
                );
                assert_eq!(
                    Envelope::open(Envelope::reset(place).to_bytes()),
                    Ok(Envelope::Reset(place))
                );
                assert_eq!(
                    Envelope::open(Envelope::query(place).to_bytes()),
                    Ok(Envelope::Query(place))
                );
                assert_eq!(
                    Envelope::open(Envelope::over(place).to_bytes()),
                    Ok(Envelope::Over(place))
                );
            }
            for (messages, bytes) in [(0, 0), (16, 4 << 20), (u32::MAX, (1 << 62) - 1)] {
                assert_eq!(
                    Envelope::open(Envelope::window(flow, 9, messages, bytes).to_bytes()),
                    Ok(Envelope::Window {
                        flow,
                        run: 9,
                        messages,
                        bytes
                    })
                );
            }
            assert_eq!(flow.reversed().reversed(), flow);
        }
        // A channel's message, and a stream's chunk below 2^30 in a stream id below 2^28
        // (those the endpoint uses), are not copied: their envelope fits the inline head.
        for flow in [
            Flow::Channel(u16::MAX),
            Flow::Stream {
                id: (1 << 28) - 1,
                opener_sent: true,
            },
        ] {
            let place = Place {
                flow,
                run: u32::MAX,
                seq: (1 << 30) - 1,
            };
            let sealed = Envelope::ordered(place, true, body.clone());
            assert!(sealed.head().len() <= crate::proto::HEAD_MAX);
        }
        // A channel number wider than 16 bits, and the unused flow tag, name no flow.
        let mut bad = vec![ORDERED];
        put_varint(&mut bad, 1 << 20);
        bad.extend_from_slice(&[0; 5]);
        assert_eq!(Envelope::open(bad.into()), Err(EnvelopeError::Ordered));
        assert_eq!(
            Envelope::open(Bytes::from_static(&[GAP, 3, 0, 0, 0, 0, 0])),
            Err(EnvelopeError::Ordered)
        );
        assert_eq!(
            Envelope::open(Bytes::from_static(&[RESET, 1, 0, 0])),
            Err(EnvelopeError::Ordered)
        );
        // A window without its bytes.
        assert_eq!(
            Envelope::open(Bytes::from_static(&[WINDOW, 0, 0, 0, 0, 0, 16])),
            Err(EnvelopeError::Ordered)
        );
    }

    #[test]
    fn hostile_bytes_are_errors_never_panics() {
        assert_eq!(Envelope::open(Bytes::new()), Err(EnvelopeError::Empty));
        assert_eq!(
            Envelope::open(Bytes::from_static(&[0x0C, 1])),
            Err(EnvelopeError::Kind(0x0C))
        );
        // A request whose call id says 8 bytes and has 2.
        assert_eq!(
            Envelope::open(Bytes::from_static(&[REQUEST, 0xC0, 1])),
            Err(EnvelopeError::Truncated)
        );
        for len in 0..24 {
            for seed in 0..=255u8 {
                let data: Vec<u8> = (0..len).map(|i| seed.wrapping_mul(31) ^ i as u8).collect();
                let _ = Envelope::open(Bytes::from(data));
            }
        }
    }
}
