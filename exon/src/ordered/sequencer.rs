//! The sender's side of one ordered flow: numbers its messages, bounds how many are
//! unsettled (the receiver holds at most that many out of order), and says when a message
//! given up needs a gap sent in its place.

use std::collections::BTreeMap;

/// How many messages, and bytes, of one flow may be unsettled at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Messages (and gaps) sent and not yet acknowledged. At least 1.
    pub messages: u32,
    /// Their bytes: a message larger than this still goes, alone.
    pub bytes: usize,
}

impl Default for Window {
    fn default() -> Window {
        Window {
            messages: 1024,
            bytes: 8 << 20,
        }
    }
}

/// What a verdict means for the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Acknowledged: its place in the window is free.
    Done,
    /// Given up (not delivered, or in doubt): send a gap for this number, and report its
    /// verdict through [`Sequencer::on_gap`]. The place stays taken until then.
    SendGap,
    /// The message was not one of this flow's unsettled messages (nothing changes).
    Unknown,
}

/// One flow's sender state.
///
/// Rules (each checked by the simulator's channel properties):
/// * numbers are consecutive from 0 within a run;
/// * the first message of a run travels alone: nothing more is sent until it (or its gap)
///   is acknowledged, so that a receiver that has never seen this run can tell a late
///   message of an old run (numbered above 0) from a new run's start;
/// * at most [`Window::messages`] messages and gaps are unsettled, holding at most
///   [`Window::bytes`] bytes (one larger message may go alone); a sequencer made to
///   [`expect_peer_window`](Self::expect_peer_window) keeps to the smaller of its own window
///   and the one its receiver advertised ([`on_peer_window`](Self::on_peer_window)), and
///   until that is known has one message or gap unsettled at a time;
/// * every message given up is replaced by a gap of the same number, kept until
///   acknowledged, so the receiver never waits for it forever.
#[derive(Debug, Clone)]
pub struct Sequencer {
    run: u32,
    next: u64,
    window: Window,
    /// The receiver's window: `None` while it is awaited (one message at a time).
    peer: Option<Window>,
    /// Unsettled messages and gaps: number to bytes (0 for a gap).
    unsettled: BTreeMap<u64, usize>,
    bytes: usize,
    /// Whether number 0 (or its gap) was acknowledged.
    opened: bool,
    /// The flow's last message was sent: nothing more may be.
    ended: bool,
}

impl Sequencer {
    /// A flow of run `run` (chosen by the endpoint at random when it starts).
    pub fn new(run: u32, window: Window) -> Sequencer {
        let window = Window {
            messages: window.messages.max(1),
            bytes: window.bytes.max(1),
        };
        Sequencer {
            run,
            next: 0,
            window,
            peer: Some(window),
            unsettled: BTreeMap::new(),
            bytes: 0,
            opened: false,
            ended: false,
        }
    }

    /// A durable flow's sequencer after a restart ([`position`](crate::ordered::position)):
    /// run `run`, the numbers below `next` given out before it, `unsettled` the messages and
    /// gaps recovered without a verdict (number and bytes, 0 for a gap), and the receiver's
    /// window if it was known (else one message at a time until it is advertised again).
    /// Number 0 was acknowledged unless it is among `unsettled`.
    pub fn resume(
        run: u32,
        next: u64,
        window: Window,
        peer: Option<Window>,
        unsettled: impl IntoIterator<Item = (u64, usize)>,
    ) -> Sequencer {
        let mut s = Sequencer::new(run, window);
        s.peer = peer.map(|w| Window {
            messages: w.messages.max(1),
            bytes: w.bytes.max(1),
        });
        s.next = next;
        for (seq, len) in unsettled {
            if seq < next && s.unsettled.insert(seq, len).is_none() {
                s.bytes += len;
            }
        }
        s.opened = next > 0 && !s.unsettled.contains_key(&0);
        s
    }

    /// The flow's last message was sent before a restart ([`resume`](Self::resume)):
    /// nothing more may be.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Makes the sequencer wait for its receiver's window: until
    /// [`on_peer_window`](Self::on_peer_window), one message or gap at a time.
    pub fn expect_peer_window(mut self) -> Sequencer {
        self.peer = None;
        self
    }

    /// The receiver advertised its window: from now on at most the smaller of each bound
    /// (own and advertised; at least 1 message and 1 byte) is unsettled. Messages already
    /// unsettled beyond it stay so; no new one goes until they fit.
    pub fn on_peer_window(&mut self, w: Window) {
        self.peer = Some(Window {
            messages: w.messages.max(1),
            bytes: w.bytes.max(1),
        });
    }

    /// The receiver's window, once known (its own window for a sequencer that does not
    /// [`expect_peer_window`](Self::expect_peer_window)).
    pub fn peer_window(&self) -> Option<Window> {
        self.peer
    }

    /// What bounds the unsettled messages now: the smaller of the own and the receiver's
    /// windows, or one message while the receiver's is awaited.
    pub fn limit(&self) -> Window {
        match self.peer {
            Some(p) => Window {
                messages: self.window.messages.min(p.messages),
                bytes: self.window.bytes.min(p.bytes),
            },
            None => Window {
                messages: 1,
                bytes: self.window.bytes,
            },
        }
    }

    /// The run.
    pub fn run(&self) -> u32 {
        self.run
    }

    /// The own window (as configured; see [`limit`](Self::limit) for what bounds now).
    pub fn window(&self) -> Window {
        self.window
    }

    /// The number the next message gets.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether a message of `len` bytes may be sent now.
    pub fn has_room(&self, len: usize) -> bool {
        if self.ended {
            return false;
        }
        if self.unsettled.is_empty() {
            return true;
        }
        let limit = self.limit();
        self.opened
            && self.unsettled.len() < limit.messages as usize
            && self.bytes.saturating_add(len) <= limit.bytes
    }

    /// Whether the flow's last message was sent.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Numbers a message of `len` bytes (`last` ends the flow). Call only with room
    /// ([`has_room`](Self::has_room)); returns `None` without it.
    pub fn assign(&mut self, len: usize, last: bool) -> Option<u64> {
        if !self.has_room(len) {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        self.unsettled.insert(seq, len);
        self.bytes += len;
        self.ended = last;
        Some(seq)
    }

    /// Takes back the number just assigned: the message could not be handed over.
    pub fn unassign(&mut self, seq: u64) {
        if seq + 1 == self.next {
            if let Some(len) = self.unsettled.remove(&seq) {
                self.bytes -= len;
                self.next = seq;
                self.ended = false;
            }
        }
    }

    /// Message `seq`'s verdict: `delivered`, or given up.
    pub fn on_verdict(&mut self, seq: u64, delivered: bool) -> Settled {
        let Some(len) = self.unsettled.get_mut(&seq) else {
            return Settled::Unknown;
        };
        if delivered {
            self.settle(seq);
            return Settled::Done;
        }
        // Its gap takes its place, with no bytes.
        self.bytes -= *len;
        *len = 0;
        Settled::SendGap
    }

    /// The gap sent for `seq` was acknowledged.
    pub fn on_gap(&mut self, seq: u64) {
        self.settle(seq);
    }

    fn settle(&mut self, seq: u64) {
        if let Some(len) = self.unsettled.remove(&seq) {
            self.bytes -= len;
            if seq == 0 {
                self.opened = true;
            }
        }
    }

    /// The lowest number unsettled, if any.
    pub fn lowest_unsettled(&self) -> Option<u64> {
        self.unsettled.keys().next().copied()
    }

    /// Messages and gaps unsettled.
    pub fn unsettled(&self) -> usize {
        self.unsettled.len()
    }

    /// Whether every message sent is settled.
    pub fn is_idle(&self) -> bool {
        self.unsettled.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_flow_goes_on_with_its_numbers_and_its_unsettled_messages() {
        let w = Window {
            messages: 3,
            bytes: 100,
        };
        // Numbers 0..5 given out, 3 and 4 without a verdict, the receiver's window known.
        let mut s = Sequencer::resume(7, 5, w, Some(w), [(3, 10), (4, 0)]);
        assert_eq!((s.run(), s.next(), s.unsettled()), (7, 5, 2));
        assert_eq!(s.assign(1, false), Some(5));
        assert!(!s.has_room(1), "the window of 3 is full");
        assert_eq!(s.on_verdict(3, true), Settled::Done);
        s.on_gap(4);
        assert_eq!(s.assign(1, false), Some(6));
        // Number 0 not settled: the run's first message still goes alone.
        let mut s = Sequencer::resume(7, 1, w, None, [(0, 10)]);
        assert!(!s.has_room(1));
        assert_eq!(s.on_verdict(0, true), Settled::Done);
        assert_eq!(s.assign(1, false), Some(1));
        assert!(!s.has_room(1), "the receiver's window is awaited");
    }

    #[test]
    fn the_first_message_goes_alone_then_the_window_bounds() {
        let mut s = Sequencer::new(
            9,
            Window {
                messages: 3,
                bytes: 100,
            },
        );
        assert_eq!(s.assign(10, false), Some(0));
        assert!(
            !s.has_room(1),
            "nothing after the first until it is settled"
        );
        assert_eq!(s.on_verdict(0, true), Settled::Done);
        assert_eq!(s.assign(10, false), Some(1));
        assert_eq!(s.assign(10, false), Some(2));
        assert_eq!(s.assign(10, false), Some(3));
        assert_eq!(s.assign(10, false), None, "three unsettled");
        assert_eq!(s.on_verdict(2, false), Settled::SendGap);
        assert!(!s.has_room(1), "the gap keeps its place");
        s.on_gap(2);
        assert!(s.has_room(80));
        assert!(!s.has_room(81), "bytes: 20 unsettled");
        assert_eq!(s.on_verdict(7, true), Settled::Unknown);
    }

    #[test]
    fn the_receivers_window_bounds_once_known_and_one_at_a_time_before() {
        let own = Window {
            messages: 8,
            bytes: 1000,
        };
        let mut s = Sequencer::new(3, own).expect_peer_window();
        assert_eq!(s.assign(1, false), Some(0));
        s.on_verdict(0, true);
        assert_eq!(s.assign(1, false), Some(1));
        assert!(
            !s.has_room(1),
            "one at a time until the receiver's window is known"
        );
        s.on_verdict(1, true);
        s.on_peer_window(Window {
            messages: 2,
            bytes: 1 << 20,
        });
        assert_eq!(
            s.limit(),
            Window {
                messages: 2,
                bytes: 1000
            }
        );
        assert_eq!(s.assign(1, false), Some(2));
        assert_eq!(s.assign(1, false), Some(3));
        assert!(!s.has_room(1), "the receiver's 2");
        // A larger advertised window does not raise the own one.
        s.on_peer_window(Window {
            messages: 100,
            bytes: 10,
        });
        assert_eq!(
            s.limit(),
            Window {
                messages: 8,
                bytes: 10
            }
        );
        assert!(
            s.has_room(8) && !s.has_room(9),
            "bytes: the receiver's 10, 2 unsettled"
        );
    }

    #[test]
    fn a_large_message_goes_alone_and_the_last_ends_the_flow() {
        let mut s = Sequencer::new(
            1,
            Window {
                messages: 8,
                bytes: 10,
            },
        );
        assert_eq!(s.assign(1000, false), Some(0));
        s.on_verdict(0, true);
        assert_eq!(s.assign(1000, true), Some(1));
        assert!(s.is_ended() && !s.has_room(0));
        s.unassign(1);
        assert!(!s.is_ended() && s.is_idle());
        assert_eq!(s.assign(5, true), Some(1));
    }
}
