//! The endpoint's message envelope: one kind byte (and a call id for requests and replies)
//! before the application's bytes, so that plain messages, requests and replies share one
//! exactly-once channel (`docs/wire.md`, "Message envelope"). Sans-IO: the driver, the RPC
//! layer and the simulator use it alike.

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

/// The most bytes an envelope adds to the application's bytes.
pub const MAX_OVERHEAD: usize = 1 + 8;

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

    /// Seals a plain message: its kind byte as the payload's head, `body` not copied.
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
    fn hostile_bytes_are_errors_never_panics() {
        assert_eq!(Envelope::open(Bytes::new()), Err(EnvelopeError::Empty));
        assert_eq!(
            Envelope::open(Bytes::from_static(&[0x09, 1])),
            Err(EnvelopeError::Kind(9))
        );
        // A request whose call id says 8 bytes and has 2.
        assert_eq!(
            Envelope::open(Bytes::from_static(&[REQUEST, 0xC0, 1])),
            Err(EnvelopeError::Truncated)
        );
        for len in 0..12 {
            for seed in 0..=255u8 {
                let data: Vec<u8> = (0..len).map(|i| seed.wrapping_mul(31) ^ i as u8).collect();
                let _ = Envelope::open(Bytes::from(data));
            }
        }
    }
}
