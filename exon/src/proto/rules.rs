//! Switches for the corrections to Algorithm 1 listed in `docs/algorithm.md`, so that tests
//! can show the checker catching each defect. Only the `rule-switches` feature can turn a rule off.

/// Which corrections to Algorithm 1 are in force. All are on by default and in every build
/// without the `rule-switches` cargo feature, which exists for the simulator's self-test only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rules {
    /// Rule 1: the first send to a destination requests slots.
    pub first_send_requests_slots: bool,
    /// Rule 2: the token is recorded before the frontier `l` is computed.
    pub token_before_frontier: bool,
    /// Rule 3: a token keeps the incarnation it was made under; envelopes of an old
    /// incarnation are discarded.
    pub token_keeps_incarnation: bool,
    /// Rule 4: a token for a record that does not exist is acknowledged.
    pub ack_without_record: bool,
    /// Rule 5: SLOTS for no record raises the clock before the waiver is sent.
    pub raise_clock_on_orphan_slots: bool,
    /// Rule 6: requests beyond `max_slots_request`, records beyond the caps, and slots beyond
    /// `max_slots_per_record` are refused.
    pub bounded_input: bool,
    /// Rule 7: receiver records holding slots probe a silent sender.
    pub receiver_probe: bool,
    /// Beyond the paper (the gap behind rule 8, see `docs/algorithm.md`): a TOKEN for an incarnation lost in a
    /// restart is answered DOUBT, and one evicted unused is answered RETRY, instead of the
    /// rule-4 ACK that would acknowledge a message never delivered.
    pub doubt_lost_incarnations: bool,
}

impl Rules {
    /// Every correction on.
    pub const ALL: Rules = Rules {
        first_send_requests_slots: true,
        token_before_frontier: true,
        token_keeps_incarnation: true,
        ack_without_record: true,
        raise_clock_on_orphan_slots: true,
        bounded_input: true,
        receiver_probe: true,
        doubt_lost_incarnations: true,
    };
}

impl Default for Rules {
    fn default() -> Self {
        Rules::ALL
    }
}
