//! Counters a node keeps: traffic by frame type, retransmissions, duplicates, rejects by reason.

use super::{DecodeError, Frame};

/// Frames counted by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameCounts {
    /// REQSLOTS frames.
    pub reqslots: u64,
    /// SLOTS frames.
    pub slots: u64,
    /// TOKEN frames.
    pub token: u64,
    /// ACK frames.
    pub ack: u64,
    /// DOUBT frames.
    pub doubt: u64,
    /// RETRY frames.
    pub retry: u64,
    /// CHALLENGE frames.
    pub challenge: u64,
    /// RESPONSE frames.
    pub response: u64,
    /// FRAG frames.
    pub frag: u64,
    /// GOT frames.
    pub got: u64,
    /// REQCREDIT and CREDIT frames.
    pub credit: u64,
    /// MTU_PROBE frames.
    pub mtu_probe: u64,
    /// MTU_ACK frames.
    pub mtu_ack: u64,
}

impl FrameCounts {
    pub(crate) fn count(&mut self, f: &Frame) {
        match f {
            Frame::ReqSlots { .. } => self.reqslots += 1,
            Frame::Slots { .. } => self.slots += 1,
            Frame::Token { .. } => self.token += 1,
            Frame::Ack { .. } => self.ack += 1,
            Frame::Doubt { .. } => self.doubt += 1,
            Frame::Retry { .. } => self.retry += 1,
            Frame::Challenge { .. } => self.challenge += 1,
            Frame::Response { .. } => self.response += 1,
            Frame::Frag { .. } => self.frag += 1,
            Frame::Got { .. } => self.got += 1,
            Frame::ReqCredit { .. } | Frame::Credit { .. } => self.credit += 1,
            Frame::MtuProbe { .. } => self.mtu_probe += 1,
            Frame::MtuAck { .. } => self.mtu_ack += 1,
        }
    }

    pub(crate) fn count_verdict(&mut self, v: super::Verdict) {
        match v {
            super::Verdict::Ack => self.ack += 1,
            super::Verdict::Doubt => self.doubt += 1,
            super::Verdict::Retry => self.retry += 1,
        }
    }

    /// Sum over all types.
    pub fn total(&self) -> u64 {
        self.reqslots
            + self.slots
            + self.token
            + self.ack
            + self.doubt
            + self.retry
            + self.frag
            + self.got
            + self.credit
    }
}

/// Datagrams and frames dropped, by reason. Every one of these is something the network sent
/// that the node refused without changing its state (beyond this count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rejects {
    /// Shorter than a header.
    pub runt: u64,
    /// Wrong magic bytes.
    pub bad_magic: u64,
    /// Unsupported version.
    pub bad_version: u64,
    /// Reserved flags set.
    pub reserved_flags: u64,
    /// A field ran past the end (also: impossible counts).
    pub truncated: u64,
    /// Non-canonical integer encoding.
    pub non_canonical: u64,
    /// Unknown frame type.
    pub unknown_frame: u64,
    /// Header without frames.
    pub no_frames: u64,
    /// TOKEN payload above the configured maximum.
    pub payload_too_large: u64,
    /// ACK frame with bad ranges.
    pub bad_ack: u64,
    /// FRAG frame with no bytes, or bytes past its message's end.
    pub bad_fragment: u64,
    /// FRAG for a message above `max_message_size`, whose length contradicts its first
    /// fragment, or that would exceed the reassembly memory granted to its sender.
    pub fragment_refused: u64,
    /// MTU_PROBE whose padding is not all zero bytes.
    pub bad_padding: u64,
    /// Datagram larger than the largest UDP payload (65507 bytes).
    pub oversized: u64,
    /// Addressed to another node id.
    pub wrong_destination: u64,
    /// Claims to come from this node's own id.
    pub from_self: u64,
    /// REQSLOTS with `n` above `max_slots_request`.
    pub slots_request_too_large: u64,
    /// REQSLOTS whose `s + n` leaves the clock range.
    pub slots_overflow: u64,
    /// REQSLOTS that would push a record past `max_slots_per_record`.
    pub slots_cap: u64,
    /// REQSLOTS from a new source while `max_receiver_records` records exist.
    pub too_many_records: u64,
    /// REQSLOTS from a new source while the next clock block is not yet stored.
    pub clock_wait: u64,
    /// SLOTS granting more than was asked for.
    pub unrequested_slots: u64,
    /// SLOTS for no record whose `s` lies above anything this node ever asked for.
    pub clock_jump: u64,
    /// A reply dropped because the output queue was full (liveness only: the peer retries).
    pub outbox_full: u64,
    /// A plaintext datagram at a sealed node, or a sealed one at a plaintext node.
    pub wrong_mode: u64,
    /// A sealed datagram from an id with no known key (not in the keyring, and no acceptable self-certifying key).
    pub unknown_peer: u64,
    /// A sealed datagram whose announced key contradicts the keyring or its self-certifying id.
    pub key_mismatch: u64,
    /// A sealed datagram from an uncached self-certifying peer (or, with rule
    /// `pin_member_keys` off, keyring member) while its key-agreement budget (general, or
    /// vouched for a datagram with a valid cookie) was spent. An endpoint answers such a
    /// datagram with a COOKIE_REPLY.
    pub key_budget: u64,
    /// A sealed datagram whose tag did not verify: forged, altered, truncated, or not for this node.
    pub bad_tag: u64,
    /// REQSLOTS whose frontier `l` lies above its own `s` or above every slot the record ever held.
    pub frontier_beyond_grant: u64,
    /// TOKEN for an incarnation this node never issued (at or above its clock): no verdict.
    pub never_issued: u64,
    /// RETRY for an incarnation the receiver already acknowledged tokens of, or a verdict for a token never sent: it cannot be true.
    pub implausible_verdict: u64,
}

impl Rejects {
    pub(crate) fn count_decode(&mut self, e: DecodeError) {
        let c = match e {
            DecodeError::Runt => &mut self.runt,
            DecodeError::BadMagic => &mut self.bad_magic,
            DecodeError::UnsupportedVersion(_) => &mut self.bad_version,
            DecodeError::ReservedFlags(_) => &mut self.reserved_flags,
            DecodeError::Truncated => &mut self.truncated,
            DecodeError::NonCanonicalVarint => &mut self.non_canonical,
            DecodeError::UnknownFrame(_) => &mut self.unknown_frame,
            DecodeError::NoFrames => &mut self.no_frames,
            DecodeError::PayloadTooLarge => &mut self.payload_too_large,
            DecodeError::EmptyAck | DecodeError::ValueOutOfRange => &mut self.bad_ack,
            DecodeError::BadFragment => &mut self.bad_fragment,
            DecodeError::BadPadding => &mut self.bad_padding,
        };
        *c += 1;
    }

    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        let Rejects {
            runt,
            bad_magic,
            bad_version,
            reserved_flags,
            truncated,
            non_canonical,
            unknown_frame,
            no_frames,
            payload_too_large,
            bad_ack,
            bad_fragment,
            fragment_refused,
            bad_padding,
            oversized,
            wrong_destination,
            from_self,
            slots_request_too_large,
            slots_overflow,
            slots_cap,
            too_many_records,
            clock_wait,
            unrequested_slots,
            clock_jump,
            outbox_full,
            wrong_mode,
            unknown_peer,
            key_mismatch,
            key_budget,
            bad_tag,
            frontier_beyond_grant,
            never_issued,
            implausible_verdict,
        } = *self;
        runt + bad_magic
            + bad_version
            + reserved_flags
            + truncated
            + non_canonical
            + unknown_frame
            + no_frames
            + payload_too_large
            + bad_ack
            + bad_fragment
            + fragment_refused
            + bad_padding
            + oversized
            + wrong_destination
            + from_self
            + slots_request_too_large
            + slots_overflow
            + slots_cap
            + too_many_records
            + clock_wait
            + unrequested_slots
            + clock_jump
            + outbox_full
            + wrong_mode
            + unknown_peer
            + key_mismatch
            + key_budget
            + bad_tag
            + frontier_beyond_grant
            + never_issued
            + implausible_verdict
    }
}

/// Path MTU discovery counters (see `docs/wire.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MtuStats {
    /// MTU_PROBE datagrams sent (search, confirmation and base-size companion probes).
    pub probes_sent: u64,
    /// Probes answered by an MTU_ACK in time.
    pub probes_acked: u64,
    /// Probes unanswered when their time ran out.
    pub probes_lost: u64,
    /// Times a destination's size failed its confirmation (a black hole): its datagrams
    /// fell back to the base size and the search started again.
    pub black_hole_fallbacks: u64,
}

/// Everything a node counts. Read with [`Node::stats`](super::Node::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Datagrams handed to `handle_datagram`.
    pub datagrams_in: u64,
    /// Datagrams produced by `poll_transmit`.
    pub datagrams_out: u64,
    /// Bytes handed to `handle_datagram`.
    pub bytes_in: u64,
    /// Bytes produced by `poll_transmit`.
    pub bytes_out: u64,
    /// Frames received (in accepted datagrams), by type.
    pub frames_in: FrameCounts,
    /// Frames sent, by type.
    pub frames_out: FrameCounts,
    /// Messages accepted by `send`.
    pub sent: u64,
    /// Messages delivered to this node's embedding (`Event::Delivered`).
    pub delivered: u64,
    /// Deliveries the embedding reported taken by the application (`Node::handle_taken`):
    /// each is acknowledged only then.
    pub taken: u64,
    /// TOKENs not delivered (and not answered), and REQSLOTS not granted, because
    /// `Config::max_untaken` deliveries were waiting for the application: the sender sends
    /// them again later.
    pub held_back: u64,
    /// Messages of ours acknowledged by their receiver.
    pub acknowledged: u64,
    /// Messages of ours reported in doubt: their receiver lost the incarnation they were
    /// sent under (a restart, or an eviction under pressure), or they were given up
    /// (`Node::abandon`) after a copy left, so delivery is unknown.
    pub in_doubt: u64,
    /// Messages of ours given up (`Node::abandon`) before any copy left: certainly not
    /// delivered.
    pub not_delivered: u64,
    /// Tokens of ours the receiver answered with RETRY (never delivered): made again from
    /// fresh slots.
    pub retried: u64,
    /// Receiver records evicted to make room while full, before anything was delivered
    /// into them (their senders are told RETRY).
    pub evictions: u64,
    /// Of those, records something was delivered into, evicted because their source had
    /// been silent longest (their free slots remembered: late TOKENs get RETRY).
    pub evictions_proven: u64,
    /// Messages delivered that were put together from more than one FRAG.
    pub reassembled: u64,
    /// Messages of ours given up because their receiver takes none that large (also counted
    /// in `not_delivered`; `Event::NotDelivered`).
    pub too_large_for_peer: u64,
    /// Partial messages dropped after `Config::reassembly_timeout` without a new byte (their
    /// slots stay free: the sender's retransmissions still deliver them).
    pub partials_expired: u64,
    /// TOKEN frames sent again (after a loss was detected or the timer ran out).
    pub retransmissions: u64,
    /// Tokens declared lost from acknowledgements of tokens sent after them (fast loss
    /// recovery), each counted once per declaration.
    pub losses_detected: u64,
    /// Losses declared by loss detection (tokens or fragments) later found spurious: the
    /// first acknowledgement came before the retransmission could have been answered (see
    /// `docs/wire.md`, "Loss recovery and reordering"). Each widens the reordering window.
    pub spurious_losses: u64,
    /// Of `spurious_losses`, those whose retransmission had left: datagrams sent again for
    /// nothing (the others were acknowledged before their turn came, and did not go).
    pub spurious_retransmissions: u64,
    /// Tokens given up for lost by the retransmission timer.
    pub timeouts: u64,
    /// Probes sent when the retransmission timer first expired (a datagram past the
    /// congestion window, to have a loss at the end of a flight found from its ACK).
    pub tail_probes: u64,
    /// REQSLOTS frames sent again: after a timeout, or at once when tokens sent after one
    /// were acknowledged and no SLOTS came (the request or its answer was lost).
    pub reqslots_retransmissions: u64,
    /// Probes (SLOTS with n = 0) sent by receiver records.
    pub probes: u64,
    /// TOKEN frames that found no slot (already delivered, or stale): acknowledged, not
    /// delivered.
    pub duplicates_dropped: u64,
    /// SLOTS frames ignored because they answered an older request.
    pub stale_slots: u64,
    /// ACK ranges that removed no token (duplicate or stale acknowledgements, or ACKs for
    /// a destination with no sender record), one count per range.
    pub stale_acks: u64,
    /// Receiver records created (each is a new incarnation).
    pub incarnations: u64,
    /// Sender records discarded after their idle timeout.
    pub idle_discards: u64,
    /// Datagrams dropped at sealing because no key was known for their destination.
    pub unsealable: u64,
    /// Datagrams sent to deaf peers (unanswered for `2 * max_rto`), one at a time on their
    /// backed-off schedule.
    pub deaf_datagrams: u64,
    /// Times a deaf peer had something to send and waited for its turn.
    pub deaf_waits: u64,
    /// Deliveries handed over as slices of a receive buffer much larger than their payload,
    /// within the zero-copy budget (`Node::set_receive_buffer`).
    pub pinned_deliveries: u64,
    /// Deliveries copied out of a much larger receive buffer, the zero-copy budget spent.
    pub copied_deliveries: u64,
    /// The largest datagram `poll_transmit` produced, in bytes (path MTU discovery at work).
    pub largest_datagram_out: u64,
    /// Path MTU discovery, over all destinations.
    pub mtu: MtuStats,
    /// Things the network sent that were refused, by reason.
    pub rejects: Rejects,
}

impl FrameCounts {
    /// Adds `other`'s counts to these (counters of several nodes, such as the shards of
    /// one endpoint, summed).
    pub fn merge(&mut self, other: &FrameCounts) {
        let FrameCounts {
            reqslots,
            slots,
            token,
            ack,
            doubt,
            retry,
            challenge,
            response,
            frag,
            got,
            credit,
            mtu_probe,
            mtu_ack,
        } = other;
        self.reqslots += reqslots;
        self.slots += slots;
        self.token += token;
        self.ack += ack;
        self.doubt += doubt;
        self.retry += retry;
        self.challenge += challenge;
        self.response += response;
        self.frag += frag;
        self.got += got;
        self.credit += credit;
        self.mtu_probe += mtu_probe;
        self.mtu_ack += mtu_ack;
    }
}

impl Rejects {
    /// Adds `other`'s counts to these (counters of several nodes, such as the shards of
    /// one endpoint, summed).
    pub fn merge(&mut self, other: &Rejects) {
        let Rejects {
            bad_fragment,
            fragment_refused,
            bad_padding,
            runt,
            bad_magic,
            bad_version,
            reserved_flags,
            truncated,
            non_canonical,
            unknown_frame,
            no_frames,
            payload_too_large,
            bad_ack,
            oversized,
            wrong_destination,
            from_self,
            slots_request_too_large,
            slots_overflow,
            slots_cap,
            too_many_records,
            clock_wait,
            unrequested_slots,
            clock_jump,
            outbox_full,
            wrong_mode,
            unknown_peer,
            key_mismatch,
            key_budget,
            bad_tag,
            frontier_beyond_grant,
            never_issued,
            implausible_verdict,
        } = other;
        self.bad_fragment += bad_fragment;
        self.bad_padding += bad_padding;
        self.fragment_refused += fragment_refused;
        self.runt += runt;
        self.bad_magic += bad_magic;
        self.bad_version += bad_version;
        self.reserved_flags += reserved_flags;
        self.truncated += truncated;
        self.non_canonical += non_canonical;
        self.unknown_frame += unknown_frame;
        self.no_frames += no_frames;
        self.payload_too_large += payload_too_large;
        self.bad_ack += bad_ack;
        self.oversized += oversized;
        self.wrong_destination += wrong_destination;
        self.from_self += from_self;
        self.slots_request_too_large += slots_request_too_large;
        self.slots_overflow += slots_overflow;
        self.slots_cap += slots_cap;
        self.too_many_records += too_many_records;
        self.clock_wait += clock_wait;
        self.unrequested_slots += unrequested_slots;
        self.clock_jump += clock_jump;
        self.outbox_full += outbox_full;
        self.wrong_mode += wrong_mode;
        self.unknown_peer += unknown_peer;
        self.key_mismatch += key_mismatch;
        self.key_budget += key_budget;
        self.bad_tag += bad_tag;
        self.frontier_beyond_grant += frontier_beyond_grant;
        self.never_issued += never_issued;
        self.implausible_verdict += implausible_verdict;
    }
}

impl Stats {
    /// Adds `other`'s counts to these (counters of several nodes, such as the shards of
    /// one endpoint, summed).
    pub fn merge(&mut self, other: &Stats) {
        let Stats {
            datagrams_in,
            datagrams_out,
            bytes_in,
            bytes_out,
            frames_in,
            frames_out,
            sent,
            delivered,
            taken,
            held_back,
            acknowledged,
            in_doubt,
            not_delivered,
            retried,
            evictions,
            evictions_proven,
            retransmissions,
            losses_detected,
            spurious_losses,
            spurious_retransmissions,
            timeouts,
            tail_probes,
            reqslots_retransmissions,
            probes,
            duplicates_dropped,
            stale_slots,
            stale_acks,
            incarnations,
            idle_discards,
            unsealable,
            deaf_datagrams,
            deaf_waits,
            pinned_deliveries,
            copied_deliveries,
            rejects,
            reassembled,
            too_large_for_peer,
            partials_expired,
            largest_datagram_out,
            mtu,
        } = other;
        self.datagrams_in += datagrams_in;
        self.datagrams_out += datagrams_out;
        self.bytes_in += bytes_in;
        self.bytes_out += bytes_out;
        self.frames_in.merge(frames_in);
        self.frames_out.merge(frames_out);
        self.sent += sent;
        self.delivered += delivered;
        self.taken += taken;
        self.held_back += held_back;
        self.acknowledged += acknowledged;
        self.in_doubt += in_doubt;
        self.not_delivered += not_delivered;
        self.retried += retried;
        self.evictions += evictions;
        self.evictions_proven += evictions_proven;
        self.retransmissions += retransmissions;
        self.losses_detected += losses_detected;
        self.spurious_losses += spurious_losses;
        self.spurious_retransmissions += spurious_retransmissions;
        self.timeouts += timeouts;
        self.tail_probes += tail_probes;
        self.reqslots_retransmissions += reqslots_retransmissions;
        self.probes += probes;
        self.duplicates_dropped += duplicates_dropped;
        self.stale_slots += stale_slots;
        self.stale_acks += stale_acks;
        self.incarnations += incarnations;
        self.idle_discards += idle_discards;
        self.unsealable += unsealable;
        self.deaf_datagrams += deaf_datagrams;
        self.deaf_waits += deaf_waits;
        self.pinned_deliveries += pinned_deliveries;
        self.copied_deliveries += copied_deliveries;
        self.reassembled += reassembled;
        self.too_large_for_peer += too_large_for_peer;
        self.partials_expired += partials_expired;
        self.largest_datagram_out = self.largest_datagram_out.max(*largest_datagram_out);
        self.mtu.probes_sent += mtu.probes_sent;
        self.mtu.probes_acked += mtu.probes_acked;
        self.mtu.probes_lost += mtu.probes_lost;
        self.mtu.black_hole_fallbacks += mtu.black_hole_fallbacks;
        self.rejects.merge(rejects);
    }
}
