//! The ordered-channel workload ([`Scenario::channels`](crate::Scenario::channels)): how many
//! channels each sender uses per receiver, their window, how many plain messages are mixed
//! in, and switches that turn the ordered flows' rules off (for the checker's self-tests).

/// How the applications use ordered channels (`exon::ordered`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelModel {
    /// Channels each node uses to each receiver (at least 1).
    pub channels: u16,
    /// Messages (and gaps) of one flow unsettled at once (`Window::messages`): the receiver
    /// holds at most one fewer out of order.
    pub window: u32,
    /// Bytes of one flow unsettled at once (`Window::bytes`).
    pub window_bytes: usize,
    /// One submission in this many (drawn at random) is a plain message
    /// (`Envelope::message`) instead of a channel message; `0`: none.
    pub plain_one_in: u64,
    /// Rule: a message given up (told not delivered or in doubt) is replaced by a gap of
    /// the same number. Off: the sender sends no gap (its receiver waits forever).
    pub gaps: bool,
    /// Rule: a sender sends only with room in the flow's window (`Sequencer::has_room`).
    /// Off: it sends whenever it likes (the first message of a run still goes alone
    /// unless [`first_alone`](Self::first_alone) is off too).
    pub window_rule: bool,
    /// Rule: the first message of a run travels alone, nothing more until it (or its gap)
    /// is acknowledged. Off: the sender numbers and sends from 0 at once (bounded by the
    /// window unless [`window_rule`](Self::window_rule) is off too).
    pub first_alone: bool,
}

impl Default for ChannelModel {
    fn default() -> Self {
        ChannelModel {
            channels: 2,
            window: 8,
            window_bytes: 64 << 10,
            plain_one_in: 5,
            gaps: true,
            window_rule: true,
            first_alone: true,
        }
    }
}

impl ChannelModel {
    /// The window senders use (`exon::ordered::Window`).
    pub fn window(&self) -> exon::ordered::Window {
        exon::ordered::Window {
            messages: self.window.max(1),
            bytes: self.window_bytes.max(1),
        }
    }

    /// Whether every rule is on.
    pub fn all_rules(&self) -> bool {
        self.gaps && self.window_rule && self.first_alone
    }
}
