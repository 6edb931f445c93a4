//! Counters a node keeps: traffic by frame type, retransmissions, duplicates, rejects by reason.

use crate::counters::counters;
use crate::proto::{DecodeError, Frame};

counters! {
    /// Frames counted by type.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct FrameCounts {
        /// REQSLOTS frames.
        pub reqslots: u64 [sum],
        /// SLOTS frames.
        pub slots: u64 [sum],
        /// TOKEN, STOKEN, ETOKEN and ESTOKEN frames.
        pub token: u64 [sum],
        /// ACK frames.
        pub ack: u64 [sum],
        /// DOUBT frames.
        pub doubt: u64 [sum],
        /// RETRY frames.
        pub retry: u64 [sum],
        /// LOST frames.
        pub lost: u64 [sum],
        /// CHALLENGE frames.
        pub challenge: u64 [sum],
        /// RESPONSE frames.
        pub response: u64 [sum],
        /// FRAG frames.
        pub frag: u64 [sum],
        /// GOT frames.
        pub got: u64 [sum],
        /// HELD frames.
        pub held: u64 [sum],
        /// REQCREDIT and CREDIT frames.
        pub credit: u64 [sum],
        /// MTU_PROBE frames.
        pub mtu_probe: u64 [sum],
        /// MTU_ACK frames.
        pub mtu_ack: u64 [sum],
        /// PING frames.
        pub ping: u64 [sum],
        /// STORED frames.
        pub stored: u64 [sum],
        /// RECEIVED frames.
        pub received: u64 [sum],}
}

impl FrameCounts {
    /// Sum over all types.
    pub fn total(&self) -> u64 {
        self.sum_of_counters()
    }

    pub(crate) fn count(&mut self, f: &Frame) {
        match f {
            Frame::ReqSlots { .. } => self.reqslots += 1,
            Frame::Slots { .. } => self.slots += 1,
            Frame::Token { .. } | Frame::EarlyToken { .. } => self.token += 1,
            Frame::Stored { .. } => self.stored += 1,
            Frame::Ack { .. } => self.ack += 1,
            Frame::Doubt { .. } => self.doubt += 1,
            Frame::Retry { .. } => self.retry += 1,
            Frame::Lost { .. } => self.lost += 1,
            Frame::Challenge { .. } => self.challenge += 1,
            Frame::Response { .. } => self.response += 1,
            Frame::Frag { .. } => self.frag += 1,
            Frame::Got { .. } => self.got += 1,
            Frame::Held { .. } => self.held += 1,
            Frame::ReqCredit { .. } | Frame::Credit { .. } => self.credit += 1,
            Frame::MtuProbe { .. } => self.mtu_probe += 1,
            Frame::MtuAck { .. } => self.mtu_ack += 1,
            Frame::Ping => self.ping += 1,
            Frame::Received { .. } => self.received += 1,
        }
    }

    pub(crate) fn count_verdict(&mut self, v: crate::proto::Verdict) {
        match v {
            crate::proto::Verdict::Ack => self.ack += 1,
            crate::proto::Verdict::Doubt => self.doubt += 1,
            crate::proto::Verdict::Retry => self.retry += 1,
            crate::proto::Verdict::Lost => self.lost += 1,
        }
    }
}

counters! {
    /// Datagrams and frames dropped, by reason. Every one of these is something the network sent
    /// that the node refused without changing its state (beyond this count).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct Rejects {
        /// Shorter than a header.
        pub runt: u64 [sum],
        /// Unsupported version.
        pub bad_version: u64 [sum],
        /// Flags of sealed datagrams on a plaintext one.
        pub reserved_flags: u64 [sum],
        /// A field ran past the end (also: impossible counts).
        pub truncated: u64 [sum],
        /// Non-canonical encoding: an integer not in its shortest form, or a TOKEN or FRAG
        /// ending its datagram with its length written.
        pub non_canonical: u64 [sum],
        /// Unknown frame type.
        pub unknown_frame: u64 [sum],
        /// Header without frames.
        pub no_frames: u64 [sum],
        /// TOKEN payload above the configured maximum.
        pub payload_too_large: u64 [sum],
        /// ACK frame with bad ranges.
        pub bad_ack: u64 [sum],
        /// FRAG frame with no bytes, or bytes past its message's end.
        pub bad_fragment: u64 [sum],
        /// FRAG for a message above `max_message_size`, whose length contradicts its first
        /// fragment, or that would exceed the reassembly memory granted to its sender.
        pub fragment_refused: u64 [sum],
        /// MTU_PROBE whose padding is not all zero bytes.
        pub bad_padding: u64 [sum],
        /// Datagram larger than the largest UDP payload (65507 bytes).
        pub oversized: u64 [sum],
        /// Addressed to another node id.
        pub wrong_destination: u64 [sum],
        /// Claims to come from this node's own id.
        pub from_self: u64 [sum],
        /// REQSLOTS whose `s + n` leaves the clock range.
        pub slots_overflow: u64 [sum],
        /// REQSLOTS that would push a record past `max_slots_per_record`.
        pub slots_cap: u64 [sum],
        /// REQSLOTS from a new source while `max_receiver_records` records exist.
        pub too_many_records: u64 [sum],
        /// REQSLOTS from a new source while the next clock block is not yet stored.
        pub clock_wait: u64 [sum],
        /// SLOTS granting more than was asked for.
        pub unrequested_slots: u64 [sum],
        /// SLOTS for no record whose `s` lies above anything this node ever asked for.
        pub clock_jump: u64 [sum],
        /// A reply dropped because the output queue was full (liveness only: the peer retries).
        pub outbox_full: u64 [sum],
        /// A plaintext datagram at a sealed node, or a sealed one at a plaintext node.
        pub wrong_mode: u64 [sum],
        /// A sealed datagram from an id with no known key (not in the keyring, and no acceptable self-certifying key).
        pub unknown_peer: u64 [sum],
        /// A sealed datagram whose announced key contradicts the keyring or its self-certifying id.
        pub key_mismatch: u64 [sum],
        /// A sealed datagram from an uncached self-certifying peer (or, with rule
        /// `pin_member_keys` off, keyring member) while its key-agreement budget (general, or
        /// vouched for a datagram with a valid cookie) was spent. An endpoint answers such a
        /// datagram with a COOKIE_REPLY.
        pub key_budget: u64 [sum],
        /// A sealed datagram whose tag did not verify: forged, altered, truncated, or not for this node.
        pub bad_tag: u64 [sum],
        /// REQSLOTS whose frontier `l` lies above its own `s`, or (plaintext, where it cannot
        /// be told from a forgery) above every slot the record ever held.
        pub frontier_beyond_grant: u64 [sum],
        /// TOKEN for an incarnation this node never issued (at or above its clock): no verdict.
        pub never_issued: u64 [sum],
        /// RETRY for an incarnation the receiver already acknowledged tokens of, or a verdict for a token never sent: it cannot be true.
        pub implausible_verdict: u64 [sum],}
}

impl Rejects {
    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        self.sum_of_counters()
    }

    pub(crate) fn count_decode(&mut self, e: DecodeError) {
        let c = match e {
            DecodeError::Runt => &mut self.runt,
            DecodeError::UnsupportedVersion(_) => &mut self.bad_version,
            DecodeError::ReservedFlags(_) => &mut self.reserved_flags,
            DecodeError::Truncated => &mut self.truncated,
            DecodeError::NonCanonicalVarint | DecodeError::LengthAtEnd => &mut self.non_canonical,
            DecodeError::UnknownFrame(_) => &mut self.unknown_frame,
            DecodeError::NoFrames => &mut self.no_frames,
            DecodeError::PayloadTooLarge => &mut self.payload_too_large,
            DecodeError::EmptyAck | DecodeError::ValueOutOfRange => &mut self.bad_ack,
            DecodeError::BadFragment => &mut self.bad_fragment,
            DecodeError::BadPadding => &mut self.bad_padding,
        };
        *c += 1;
    }
}

counters! {
    /// Path MTU discovery counters (see `docs/wire.md`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct MtuStats {
        /// MTU_PROBE datagrams sent (search, confirmation and base-size companion probes).
        pub probes_sent: u64 [sum],
        /// Probes answered by an MTU_ACK in time.
        pub probes_acked: u64 [sum],
        /// Probes unanswered when their time ran out.
        pub probes_lost: u64 [sum],
        /// Times a destination's size failed its confirmation (a black hole): its datagrams
        /// fell back to the base size and the search started again.
        pub black_hole_fallbacks: u64 [sum],}
}

counters! {
    /// Everything a node counts. Read with [`Node::stats`](crate::proto::Node::stats).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct Stats {
        /// Datagrams handed to `handle_datagram`.
        pub datagrams_in: u64 [sum],
        /// Datagrams produced by `poll_transmit`.
        pub datagrams_out: u64 [sum],
        /// Bytes handed to `handle_datagram`.
        pub bytes_in: u64 [sum],
        /// Bytes produced by `poll_transmit`.
        pub bytes_out: u64 [sum],
        /// Frames received (in accepted datagrams), by type.
        pub frames_in: FrameCounts [nested],
        /// Frames sent, by type.
        pub frames_out: FrameCounts [nested],
        /// Messages accepted by `send`.
        pub sent: u64 [sum],
        /// Of `sent`, the messages `send_many` or `reply_many` accepted after the first of
        /// its call (outside durable mode): each saved a call's checks and lookups. The calls that queued
        /// messages are `sent - sent_together`.
        pub sent_together: u64 [sum],
        /// Messages delivered to this node's embedding (`Event::Delivered`).
        pub delivered: u64 [sum],
        /// Deliveries the embedding reported taken by the application (`Node::handle_taken`):
        /// each is acknowledged only then.
        pub taken: u64 [sum],
        /// Durable mode: deliveries recovered from the journal untaken after a restart and
        /// handed to the application again, flagged (`DeliveryId::is_redelivery`).
        pub redelivered: u64 [sum],
        /// Early deliveries (ETOKEN) whose sender passed their slot without storing them
        /// (it restarted before its sync): dropped, never handed over.
        pub early_dropped: u64 [sum],
        /// Durable mode: messages recovered from the journal after a restart, to be sent
        /// again.
        pub recovered_messages: u64 [sum],
        /// TOKENs not delivered (and not answered), and REQSLOTS not granted, because
        /// `Config::limits.max_untaken` deliveries (or their source's share,
        /// `max_untaken_per_source`) were waiting for the application: the sender sends them
        /// again later.
        pub held_back: u64 [sum],
        /// Sealed: REQSLOTS from a sender that restarted while this node held its record (a
        /// frontier above every slot the record ever held, within the sender's clock). Not
        /// granted; the sender is probed, and its waiver ends the record.
        pub sender_restarts: u64 [sum],
        /// REQSLOTS granted in part: `n` above `Config::limits.max_slots_request`, or more than
        /// the record's `max_slots_per_record` left room for. The sender learns the number
        /// granted from SLOTS and asks again for the rest.
        pub slots_trimmed: u64 [sum],
        /// Messages of ours acknowledged by their receiver.
        pub acknowledged: u64 [sum],
        /// Messages of ours reported in doubt: their receiver lost the incarnation they were
        /// sent under (a restart, or an eviction under pressure), or they were given up
        /// (`Node::abandon`) after a whole copy left, so delivery is unknown.
        pub in_doubt: u64 [sum],
        /// Messages of ours given up (`Node::abandon`) before any whole copy left: certainly
        /// not delivered.
        pub not_delivered: u64 [sum],
        /// Tokens of ours the receiver answered with RETRY (never delivered): made again from
        /// fresh slots.
        pub retried: u64 [sum],
        /// Receiver records evicted to make room while full, before anything was delivered
        /// into them (their senders are told RETRY).
        pub evictions: u64 [sum],
        /// Of those, records something was delivered into, evicted because their source had
        /// been silent longest (their free slots remembered: late TOKENs get RETRY).
        pub evictions_proven: u64 [sum],
        /// Messages delivered that were put together from more than one FRAG.
        pub reassembled: u64 [sum],
        /// Messages of ours given up because their receiver takes none that large (also counted
        /// in `not_delivered`, `Event::NotDelivered`, or, when a whole copy may have left
        /// before, in `in_doubt`, `Event::InDoubt`).
        pub too_large_for_peer: u64 [sum],
        /// Partial messages dropped after `Config::timers.reassembly_timeout` without a new byte (their
        /// slots stay free: the sender's retransmissions still deliver them).
        pub partials_expired: u64 [sum],
        /// TOKEN frames sent again (after a loss was detected or the timer ran out).
        pub retransmissions: u64 [sum],
        /// Tokens declared lost from acknowledgements of tokens sent after them (fast loss
        /// recovery), each counted once per declaration.
        pub losses_detected: u64 [sum],
        /// Losses declared by loss detection (tokens or fragments) later found spurious: the
        /// first acknowledgement came before the retransmission could have been answered (see
        /// `docs/wire.md`, "Loss recovery and reordering"). Each widens the reordering window.
        pub spurious_losses: u64 [sum],
        /// Of `spurious_losses`, those whose retransmission had left: datagrams sent again for
        /// nothing (the others were acknowledged before their turn came, and did not go).
        pub spurious_retransmissions: u64 [sum],
        /// Tokens given up for lost by the retransmission timer.
        pub timeouts: u64 [sum],
        /// Probes sent when the retransmission timer first expired (a datagram past the
        /// congestion window, to have a loss at the end of a flight found from its ACK).
        pub tail_probes: u64 [sum],
        /// REQSLOTS frames sent again: after a timeout, or at once when tokens sent after one
        /// were acknowledged and no SLOTS came (the request or its answer was lost).
        pub reqslots_retransmissions: u64 [sum],
        /// Probes (SLOTS with n = 0) sent by receiver records.
        pub probes: u64 [sum],
        /// TOKEN frames that found no slot (already delivered, or stale): acknowledged, not
        /// delivered.
        pub duplicates_dropped: u64 [sum],
        /// SLOTS frames ignored because they answered an older request.
        pub stale_slots: u64 [sum],
        /// Verdict ranges that removed no token (duplicate or stale acknowledgements, ACKs
        /// for a destination with no sender record, other verdicts wholly below the
        /// frontier), one count per range.
        pub stale_acks: u64 [sum],
        /// Receiver records created (each is a new incarnation).
        pub incarnations: u64 [sum],
        /// Sender records discarded after their idle timeout.
        pub idle_discards: u64 [sum],
        /// Datagrams dropped at sealing because no key was known for their destination.
        pub unsealable: u64 [sum],
        /// Datagrams sent to deaf peers (unanswered for `2 * max_rto`), one at a time on their
        /// backed-off schedule.
        pub deaf_datagrams: u64 [sum],
        /// Times a deaf peer had something to send and waited for its turn.
        pub deaf_waits: u64 [sum],
        /// Times ACKs owed to a peer waited for tokens the pacer was about to let go to it,
        /// to ride in their datagram instead of one of their own (`AckConfig::ride_paced_tokens`).
        pub acks_held_for_tokens: u64 [sum],
        /// Deliveries handed over as slices of a receive buffer much larger than their payload,
        /// within the zero-copy budget (`Node::set_receive_buffer`).
        pub pinned_deliveries: u64 [sum],
        /// Deliveries copied out of a much larger receive buffer, the zero-copy budget spent.
        pub copied_deliveries: u64 [sum],
        /// The largest datagram `poll_transmit` produced, in bytes (path MTU discovery at work).
        pub largest_datagram_out: u64 [max],
        /// Path MTU discovery, over all destinations.
        pub mtu: MtuStats [nested],
        /// Things the network sent that were refused, by reason.
        pub rejects: Rejects [nested],}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_every_counter_and_keeps_the_largest_datagram() {
        let mut a = Stats {
            datagrams_in: 3,
            copied_deliveries: 2,
            largest_datagram_out: 1200,
            ..Stats::default()
        };
        a.frames_in.mtu_ack = 1;
        a.rejects.bad_tag = 4;
        a.mtu.probes_lost = 5;
        let mut b = a;
        b.largest_datagram_out = 9000;
        a.merge(&b);
        assert_eq!((a.datagrams_in, a.copied_deliveries), (6, 4));
        assert_eq!(a.largest_datagram_out, 9000);
        assert_eq!(
            (a.frames_in.mtu_ack, a.rejects.bad_tag, a.mtu.probes_lost),
            (2, 8, 10)
        );
        assert_eq!(a.frames_in.total(), 2);
        assert_eq!(a.rejects.total(), 8);
    }
}
