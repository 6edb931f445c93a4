//! The slot request of a sender record: the outstanding REQSLOTS, when it left, whether it
//! must go (again), and the frontier frozen by the rule-2 self-test.

use std::time::{Duration, Instant};

/// The outstanding REQSLOTS of one destination (at most one: at `s = sck`).
#[derive(Debug, Default)]
pub(crate) struct SlotRequest {
    /// The largest `n` asked for (`None`: no request outstanding).
    n: Option<u64>,
    /// When it was last sent (`None`: not sent yet).
    sent_at: Option<Instant>,
    /// Sent more than once: its answer gives no RTT sample (Karn's rule).
    retransmitted: bool,
    /// It must go out in the next datagram to the destination.
    due: bool,
    /// The sequence number of the datagram that carried it (loss detection judges it as a
    /// token: once later datagrams are acknowledged and no SLOTS came, it was lost).
    seq: Option<u64>,
    /// Test-only: a frontier frozen before the token that triggered the request was recorded
    /// (the defect rule 2 corrects).
    frontier_override: Option<u64>,
    /// The most slots the receiver was seen to allow: set to what this sender held when a
    /// grant came trimmed (the receiver's limits are lower than this sender's window), raised
    /// step by step by grants in full, so a sender neither asks in vain nor stays below a
    /// receiver whose room grew back.
    ceiling: Option<u64>,
    /// The smallest `n` any transmission of the outstanding request carried (a request
    /// sent again may ask for more): a grant below it was trimmed by the receiver.
    least_sent: Option<u64>,
    /// A waiver owed to the receiver (`Rules::request_carries_waiver`): its probe showed a
    /// record of slots below this value that the sender holds nothing of. It goes again
    /// before each transmission of the request, until a grant shows the receiver took it.
    waiver: Option<u64>,
    /// A frontier notice owed (`Rules::abandon_tells_frontier`): a message given up in
    /// this slot left fragments the receiver may hold in reassembly memory until the
    /// frontier passes the slot, and only a REQSLOTS carries the frontier. Once the
    /// frontier is past it, REQSLOTS(s, 0, l) goes unless a request carrying `l` does.
    notice: Option<u64>,
}

impl SlotRequest {
    /// The number of slots asked for, while a request is outstanding.
    #[inline]
    pub fn asked(&self) -> Option<u64> {
        self.n
    }

    /// Whether a request is outstanding.
    #[inline]
    pub fn is_outstanding(&self) -> bool {
        self.n.is_some()
    }

    /// Whether it must go out in the next datagram.
    #[inline]
    pub fn is_due(&self) -> bool {
        self.due
    }

    /// A new request for `n` slots, due at once.
    pub fn ask(&mut self, n: u64) {
        self.n = Some(n);
        self.least_sent = None;
        self.sent_at = None;
        self.retransmitted = false;
        self.due = true;
    }

    /// Sends the outstanding request again at once (a cookie came back for it). Returns
    /// whether one was waiting for its answer.
    pub fn again_now(&mut self) -> bool {
        if self.waits_for_answer() {
            self.resend();
            true
        } else {
            false
        }
    }

    /// Whether a request left and waits for its SLOTS.
    #[inline]
    pub fn waits_for_answer(&self) -> bool {
        self.n.is_some() && self.sent_at.is_some() && !self.due
    }

    /// It is to go again (lost, or timed out): no RTT sample from its answer.
    fn resend(&mut self) {
        self.due = true;
        self.retransmitted = true;
    }

    /// It went out at `now` in the datagram of sequence number `seq`.
    pub fn on_sent(&mut self, now: Instant, seq: u64) {
        self.least_sent = match (self.least_sent, self.n) {
            (Some(l), Some(n)) => Some(l.min(n)),
            (l, n) => l.or(n),
        };
        self.due = false;
        self.sent_at = Some(now);
        self.seq = Some(seq);
        self.frontier_override = None;
    }

    /// Its SLOTS came at `now` granting `granted` of what was asked: the request is over.
    /// `held` is how many slots the sender holds with them, and `step` how far a grant in
    /// full raises a ceiling learnt from a trimmed one (by an eighth, at least `step`). Returns the RTT sample it gives (none
    /// for a request sent more than once).
    pub fn on_granted(
        &mut self,
        now: Instant,
        granted: u64,
        held: u64,
        step: u64,
    ) -> Option<Duration> {
        // Trimmed only if below what every transmission asked for (an answer to an earlier,
        // smaller transmission grants less than the latest asks).
        let least = self.least_sent.or(self.n).unwrap_or(granted);
        self.ceiling = if granted < least {
            Some(held)
        } else {
            self.ceiling
                .map(|c| c.max(held).saturating_add(step.max(c / 8)))
        };
        self.least_sent = None;
        self.waiver = None;
        let sample = self
            .sent_at
            .filter(|_| !self.retransmitted)
            .map(|t| now.saturating_duration_since(t));
        self.n = None;
        self.sent_at = None;
        self.due = false;
        self.frontier_override = None;
        sample
    }

    /// Message in slot `slot` was given up with fragments out: the receiver is to learn
    /// once the frontier passes it.
    pub fn owe_notice(&mut self, slot: u64) {
        self.notice = Some(self.notice.map_or(slot, |o| o.max(slot)));
    }

    /// Whether the frontier notice owed may go: the frontier `l` passed its slot.
    #[inline]
    pub fn notice_due(&self, l: u64) -> bool {
        self.notice.is_some_and(|s| l > s)
    }

    /// A REQSLOTS carrying the frontier `l` left: a notice it passes is no longer owed.
    #[inline]
    pub fn told_frontier(&mut self, l: u64) {
        if self.notice_due(l) {
            self.notice = None;
        }
    }

    /// A probe showed the receiver holding slots below `w` this sender holds nothing of:
    /// the waiver REQSLOTS(w, 0, w) is owed until a request is granted.
    pub fn owe_waiver(&mut self, w: u64) {
        self.waiver = Some(self.waiver.map_or(w, |o| o.max(w)));
    }

    /// The waiver owed with the request, if any.
    #[inline]
    pub fn waiver(&self) -> Option<u64> {
        self.waiver
    }

    /// The most slots worth holding for this receiver, as far as its grants showed
    /// (`None`: no grant was ever trimmed).
    #[inline]
    pub fn ceiling(&self) -> Option<u64> {
        self.ceiling
    }

    /// Its answer is overdue at this instant, given the retransmission timeout `rto`.
    #[inline]
    pub fn deadline(&self, rto: Duration) -> Option<Instant> {
        self.sent_at
            .filter(|_| self.waits_for_answer())
            .map(|t| t + rto)
    }

    /// Timed out: asked again, for `want` slots at least as many as before.
    pub fn on_timeout(&mut self, want: u64) {
        if let Some(asked) = self.n {
            self.n = Some(want.max(asked));
            self.resend();
        }
    }

    /// The datagram that carried it and when, for loss detection, while it waits.
    pub fn in_flight(&self) -> Option<(u64, Instant)> {
        match (self.seq, self.sent_at) {
            (Some(seq), Some(t)) if self.waits_for_answer() => Some((seq, t)),
            _ => None,
        }
    }

    /// Loss detection found it lost: it goes again.
    pub fn on_lost(&mut self) {
        self.resend();
        self.seq = None;
    }

    /// The frontier frozen by the rule-2 self-test, if any.
    #[inline]
    pub fn frontier_override(&self) -> Option<u64> {
        self.frontier_override
    }

    /// The rule-2 defect (self-test only): freezes the frontier at `l`.
    pub fn freeze_frontier(&mut self, l: u64) {
        self.frontier_override = Some(l);
    }

    /// A frozen frontier lasts only while its request does.
    pub fn end_send(&mut self) {
        if self.n.is_none() {
            self.frontier_override = None;
        }
    }
}
