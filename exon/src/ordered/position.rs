//! Where a durable flow stands, as its journal marks keep it: a sender's run, next number,
//! bytes sent and its receiver's window ([`SendPosition`]); a receiver's run, next number
//! due and bytes released ([`RecvPosition`]); and the lane each is kept under.

use bytes::{Bytes, BytesMut};

use crate::ordered::Window;
use crate::proto::codec::{put_varint, Reader};

/// The mark lane of a flow whose wire code is `flow_code` (a channel's or a stream's, as the
/// receiver names it), for its sending side (`sending`) or its receiving side at this node.
pub fn lane(flow_code: u64, sending: bool) -> u64 {
    (flow_code << 1) | u64::from(!sending)
}

/// The flow code and side a lane names: `(flow_code, sending)`.
pub fn from_lane(lane: u64) -> (u64, bool) {
    (lane >> 1, lane & 1 == 0)
}

const SEND: u64 = 1;
const RECV: u64 = 2;

/// A durable flow's sender, as of its last message accepted (kept with that message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendPosition {
    /// The flow's run: kept across restarts, so the receiver goes on with it.
    pub run: u32,
    /// The number the next message gets.
    pub next: u64,
    /// A stream's bytes sent before the next chunk (0 for a channel).
    pub offset: u64,
    /// The receiver's window, once advertised.
    pub peer_window: Option<Window>,
    /// A stream's last chunk was sent (its writing is shut down).
    pub ended: bool,
    /// The lowest number without a verdict once this message was accepted (itself, or an
    /// older one): a number given up whose gap a crash lost is at or above it, so a
    /// restarted channel sends a gap for every number from here to `next` it does not
    /// hold (a gap for a number its receiver released already is discarded there).
    pub base: u64,
}

/// A durable flow's receiver, as of its last take (kept with that take).
///
/// For a channel, `next` is the next number due (numbers below it were released to the
/// application, some maybe not taken yet: they come back flagged after a restart). For a
/// stream, whose chunks are taken in order, it is the number after the last chunk taken,
/// `offset` the bytes of the chunks taken (where reading goes on after a restart), and
/// `ended` says the last chunk was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvPosition {
    /// The sender's run.
    pub run: u32,
    /// The next number (see above).
    pub next: u64,
    /// A stream's bytes taken.
    pub offset: u64,
    /// A stream's last chunk was taken.
    pub ended: bool,
}

impl SendPosition {
    /// The mark's value.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(32);
        put_varint(&mut b, SEND);
        put_varint(&mut b, u64::from(self.run));
        put_varint(&mut b, self.next);
        put_varint(&mut b, self.offset);
        let (m, by) = self
            .peer_window
            .map_or((0, 0), |w| (u64::from(w.messages), w.bytes as u64));
        put_varint(&mut b, m);
        put_varint(&mut b, by);
        put_varint(&mut b, u64::from(self.ended));
        put_varint(&mut b, self.base);
        b.freeze()
    }

    /// The flow's mark `kept`, with its receiver's window for run `run` now `window`:
    /// `None` when `kept` is not a sender's position of that run, or knows it already. The
    /// endpoint keeps it with the take of the window's advert, so a restarted sender knows
    /// the window though it sent nothing after learning it.
    pub fn learnt_window(kept: &[u8], run: u32, window: Window) -> Option<Bytes> {
        let mut pos = SendPosition::decode(kept)?;
        if pos.run != run || pos.peer_window == Some(window) {
            return None;
        }
        pos.peer_window = Some(window);
        Some(pos.encode())
    }

    /// `value`, a flow's position kept with a new message, with the receiver's window of
    /// the flow's mark so far (`kept`) when it knows none and `kept` is of the same run (a
    /// message numbered before the window came, stored after it was learnt): `None` when
    /// `value` stays as it is. A window once kept is not forgotten within its run.
    pub fn keep_window(value: &[u8], kept: Option<&[u8]>) -> Option<Bytes> {
        let mut pos = SendPosition::decode(value)?;
        if pos.peer_window.is_some() {
            return None;
        }
        let old = SendPosition::decode(kept?)?;
        if old.run != pos.run {
            return None;
        }
        pos.peer_window = Some(old.peer_window?);
        Some(pos.encode())
    }

    /// Reads a mark's value (`None` for anything else: a damaged or foreign mark).
    pub fn decode(v: &[u8]) -> Option<SendPosition> {
        let mut r = Reader::new(v);
        if r.varint().ok()? != SEND {
            return None;
        }
        let run = u32::try_from(r.varint().ok()?).ok()?;
        let next = r.varint().ok()?;
        let offset = r.varint().ok()?;
        let messages = u32::try_from(r.varint().ok()?).ok()?;
        let bytes = usize::try_from(r.varint().ok()?).ok()?;
        let ended = flag(&mut r)?;
        let base = r.varint().ok()?;
        if r.remaining() != 0 || base > next {
            return None;
        }
        let peer_window = (messages > 0).then_some(Window {
            messages,
            bytes: bytes.max(1),
        });
        Some(SendPosition {
            run,
            next,
            offset,
            peer_window,
            ended,
            base,
        })
    }
}

impl RecvPosition {
    /// The mark's value.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(24);
        put_varint(&mut b, RECV);
        put_varint(&mut b, u64::from(self.run));
        put_varint(&mut b, self.next);
        put_varint(&mut b, self.offset);
        put_varint(&mut b, u64::from(self.ended));
        b.freeze()
    }

    /// Reads a mark's value (`None` for anything else).
    pub fn decode(v: &[u8]) -> Option<RecvPosition> {
        let mut r = Reader::new(v);
        if r.varint().ok()? != RECV {
            return None;
        }
        let run = u32::try_from(r.varint().ok()?).ok()?;
        let next = r.varint().ok()?;
        let offset = r.varint().ok()?;
        let ended = flag(&mut r)?;
        if r.remaining() != 0 {
            return None;
        }
        Some(RecvPosition {
            run,
            next,
            offset,
            ended,
        })
    }
}

/// A flag: 0 or 1.
fn flag(r: &mut Reader<'_>) -> Option<bool> {
    match r.varint().ok()? {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::journal::MAX_MARK_BYTES;

    #[test]
    fn positions_round_trip_within_a_mark_and_reject_other_bytes() {
        let s = SendPosition {
            run: u32::MAX,
            next: u64::MAX >> 2,
            offset: u64::MAX >> 2,
            peer_window: Some(Window {
                messages: u32::MAX,
                bytes: 1 << 40,
            }),
            ended: true,
            base: 3,
        };
        let e = s.encode();
        assert!(e.len() <= MAX_MARK_BYTES);
        assert_eq!(SendPosition::decode(&e), Some(s));
        assert_eq!(
            RecvPosition::decode(&e),
            None,
            "a sender's mark is not a receiver's"
        );
        let r = RecvPosition {
            run: 7,
            next: 9,
            offset: 1 << 33,
            ended: false,
        };
        assert_eq!(RecvPosition::decode(&r.encode()), Some(r));
        for cut in 0..e.len() {
            assert_eq!(SendPosition::decode(&e[..cut]), None);
        }
        let mut long = r.encode().to_vec();
        long.push(0);
        assert_eq!(RecvPosition::decode(&long), None);
    }

    /// A window learnt is kept in the flow's mark, and a later position without one (a
    /// message numbered before it came) keeps it too, within the same run only.
    #[test]
    fn a_learnt_window_stays_in_the_mark_within_its_run() {
        let w = Window {
            messages: 64,
            bytes: 1 << 20,
        };
        let pos = |run, next, peer_window| SendPosition {
            run,
            next,
            offset: 0,
            peer_window,
            ended: false,
            base: 0,
        };
        let kept = pos(7, 1, None).encode();
        let learnt = SendPosition::learnt_window(&kept, 7, w).expect("learnt");
        assert_eq!(SendPosition::decode(&learnt), Some(pos(7, 1, Some(w))));
        assert_eq!(SendPosition::learnt_window(&learnt, 7, w), None, "known");
        assert_eq!(
            SendPosition::learnt_window(&kept, 8, w),
            None,
            "another run"
        );
        let later = pos(7, 2, None).encode();
        let kept_too = SendPosition::keep_window(&later, Some(&learnt)).expect("kept");
        assert_eq!(SendPosition::decode(&kept_too), Some(pos(7, 2, Some(w))));
        assert_eq!(SendPosition::keep_window(&later, Some(&kept)), None);
        assert_eq!(SendPosition::keep_window(&later, None), None);
        let other_run = pos(8, 0, None).encode();
        assert_eq!(SendPosition::keep_window(&other_run, Some(&learnt)), None);
    }

    #[test]
    fn lanes_tell_the_two_sides_of_a_flow_apart() {
        assert_ne!(lane(5, true), lane(5, false));
        assert_eq!(from_lane(lane(5, true)), (5, true));
        assert_eq!(from_lane(lane(5, false)), (5, false));
    }
}
