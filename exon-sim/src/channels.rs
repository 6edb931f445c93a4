//! The ordered-channel workload ([`Scenario::channels`](crate::Scenario::channels)): how many
//! channels each sender uses per receiver, their window, how many plain messages are mixed
//! in, and switches that turn the ordered flows' rules off (for the checker's self-tests).

/// How the applications use ordered channels (`exon::ordered`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelModel {
    /// Channels each node uses to each receiver (at least 1).
    pub channels: u16,
    /// Messages (and gaps) of one flow unsettled at once (`Window::messages`): the receiver
    /// holds at most one fewer out of order. Every node's window, unless `windows` says
    /// otherwise.
    pub window: u32,
    /// Per-node windows (node `i` uses `windows[i % len]`, as sender and as receiver):
    /// nodes whose windows differ, as the endpoint's `FlowConfig::channel_window` may.
    /// Empty: every node uses `window`.
    pub windows: Vec<u32>,
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
    /// Rule: a receiver advertises its window when a sender's run starts
    /// (`Envelope::window`), and the sender keeps to the smaller of its own and that one,
    /// one message at a time until it knows (`Sequencer::expect_peer_window`). Off: a
    /// sender keeps to its own window.
    pub advertise: bool,
    /// Rule: a receiver holds a message that arrives ahead of its turn untaken, however
    /// far beyond its window. Off: one at least four receiver windows ahead is taken
    /// (acknowledged) and dropped, as the endpoint did before (issue 42).
    pub hold_beyond_window: bool,
    /// Rule (durable flows, with `Scenario::durable`): a restarted sender owes a gap to
    /// every number from its mark's base (the lowest number without a verdict when its
    /// last message was accepted, `SendPosition::base`) to its next that it does not hold
    /// (a number given up may have lost its gap in the crash), as the endpoint does since
    /// 468cc46. Off: as at 2b21b29: such a number is taken as settled, and its receiver
    /// waits for it forever (or, for number 0, never learns the run).
    pub owed_gaps: bool,
    /// Rule (with [`owed_gaps`](Self::owed_gaps)): the owed gaps are sent at the restart.
    /// Off: when the application sends on the channel again, as the endpoint does at
    /// 468cc46 (`OrderedShared::channel` calls `FlowOut::send_owed_gaps`): one that no
    /// longer sends on it leaves its receiver waiting.
    pub owed_gaps_at_restart: bool,
    /// Rule: a receiver whose channel holds messages ahead of a number that has not come
    /// for this long asks the sender whether the run still lives (`Envelope::query`), and
    /// drains the run out of order when the sender answers that it is over
    /// (`Envelope::over`: it never had the run), as the endpoint does
    /// (`FlowConfig::stall_query_after`). `None`: never asked (a run its restarted sender
    /// forgot stays held, as at 916a07d).
    pub stall_query_after: Option<std::time::Duration>,
}

impl Default for ChannelModel {
    fn default() -> Self {
        ChannelModel {
            channels: 2,
            window: 8,
            windows: Vec::new(),
            window_bytes: 64 << 10,
            plain_one_in: 5,
            gaps: true,
            window_rule: true,
            first_alone: true,
            advertise: true,
            hold_beyond_window: true,
            owed_gaps: true,
            owed_gaps_at_restart: true,
            stall_query_after: Some(std::time::Duration::from_secs(1)),
        }
    }
}

impl ChannelModel {
    /// Node `node`'s window, as sender and as receiver (`exon::ordered::Window`).
    pub fn window_of(&self, node: usize) -> exon::ordered::Window {
        let messages = match self.windows.len() {
            0 => self.window,
            n => self.windows[node % n],
        };
        exon::ordered::Window {
            messages: messages.max(1),
            bytes: self.window_bytes.max(1),
        }
    }

    /// Whether every rule is on.
    pub fn all_rules(&self) -> bool {
        self.gaps
            && self.window_rule
            && self.first_alone
            && self.advertise
            && self.hold_beyond_window
            && self.owed_gaps
            && self.owed_gaps_at_restart
            && self.stall_query_after.is_some()
    }
}
