//! Sized payloads carrying their sequence number, and the exactly-once check.
//!
//! Every message has the size the run asks for (`--size`, [`PAYLOAD`] bytes by default) and
//! carries its sequence number in its first and its last 8 bytes; receivers check its length,
//! that both copies agree and that each arrives exactly once (a duplicate, a truncated or
//! torn message, or a stranger panics), and only verified messages count.

use bytes::Bytes;

/// Default size of every message and reply (`--size`).
pub const PAYLOAD: usize = 1024;
/// Smallest message size: room for the sequence number at both ends.
pub const MIN_SIZE: usize = 16;
/// Largest message size the runners accept (TCP frames carry a 32-bit length; exon's
/// default `max_message_size` is 16 MiB).
pub const MAX_SIZE: usize = 1 << 30;
/// Payload bytes a round of messages may hold at once by default: batches are sized so that
/// `batch x size` stays about this (at most the 1 KiB defaults), bounding memory and time.
pub const BATCH_BYTES: u64 = 64 << 20;
/// Message size of the sharded one-way runs (`--pairs`, `--shards`).
pub const SHARDED_SIZE: usize = 1024;

/// A payload of `size` bytes (at least [`MIN_SIZE`]) starting and ending with `seq`. Every
/// system gets its payloads from here, one allocation and fill each, as a user handing
/// each message over as a fresh buffer would. Never inlined, so that an instruction count
/// (`scripts/instruction-budget.py`) charges its allocation to the application, not to the
/// runtime polling the application's task.
#[inline(never)]
pub fn payload(seq: u64, size: usize) -> Bytes {
    assert!(size >= MIN_SIZE, "payload smaller than {MIN_SIZE} bytes");
    let mut v = vec![0xA5u8; size];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    v[size - 8..].copy_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

/// The sequence number of a payload that should be `size` bytes long (panics on a
/// malformed one: another length, or first and last 8 bytes that disagree).
pub fn seq_of(p: &[u8], size: usize) -> u64 {
    assert_eq!(p.len(), size, "payload of unexpected size");
    let first = u64::from_be_bytes(p[..8].try_into().unwrap());
    let last = u64::from_be_bytes(p[p.len() - 8..].try_into().unwrap());
    assert_eq!(first, last, "payload torn: first and last 8 bytes differ");
    first
}

/// The default messages per batch for `size`-byte messages: `base` (the 1 KiB default) or
/// fewer, so that a batch holds about [`BATCH_BYTES`] of payload at most (at least 1).
pub fn batch_for(size: usize, base: u64) -> u64 {
    (BATCH_BYTES / size.max(1) as u64).clamp(1, base)
}

/// Exactly-once check: a bitmap of the sequence numbers seen.
#[derive(Default)]
pub struct Seen {
    bits: Vec<u64>,
    count: u64,
}

impl Seen {
    /// Records `seq`; panics if it was seen before.
    pub fn record(&mut self, seq: u64) {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if w >= self.bits.len() {
            self.bits.resize((w + 1).next_power_of_two(), 0);
        }
        assert!(
            self.bits[w] & (1 << b) == 0,
            "message {seq} delivered twice"
        );
        self.bits[w] |= 1 << b;
        self.count += 1;
    }

    /// Distinct sequence numbers recorded.
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_carries_its_sequence_number_at_both_ends() {
        let p = payload(0x0102_0304_0506_0708, 64);
        assert_eq!(p.len(), 64);
        assert_eq!(seq_of(&p, 64), 0x0102_0304_0506_0708);
    }

    #[test]
    #[should_panic(expected = "torn")]
    fn a_torn_payload_panics() {
        let mut p = payload(7, 32).to_vec();
        p[31] ^= 1;
        seq_of(&p, 32);
    }

    #[test]
    #[should_panic(expected = "delivered twice")]
    fn a_duplicate_panics() {
        let mut seen = Seen::default();
        seen.record(1000);
        seen.record(3);
        assert_eq!(seen.count(), 2);
        seen.record(1000);
    }

    #[test]
    fn batches_shrink_with_the_size() {
        assert_eq!(batch_for(1024, 10_000), 10_000);
        assert_eq!(batch_for(1 << 20, 10_000), 64);
        assert_eq!(batch_for(1 << 30, 10_000), 1);
    }
}
