//! A simulated disk: what was written but not synced is lost at a crash (all of it, or a
//! prefix: the last write may be torn), and what a node recovers is read back through
//! checksums that drop a damaged tail.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

/// How the disks of a scenario behave.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskModel {
    /// Time from a write to its sync's completion (what a node waits before it may use a
    /// clock value it asked to store).
    pub sync_latency: Duration,
    /// At a crash, keep a random prefix of what was written and not synced (whole writes and
    /// a torn last one) instead of losing all of it, as a real disk may.
    pub torn_writes: bool,
}

impl Default for DiskModel {
    fn default() -> Self {
        DiskModel {
            sync_latency: Duration::from_millis(2),
            torn_writes: true,
        }
    }
}

/// One simulated file: bytes synced, then bytes written after the last sync.
#[derive(Debug, Default, Clone)]
pub struct Disk {
    durable: Vec<u8>,
    unsynced: Vec<u8>,
}

impl Disk {
    /// Appends `bytes` (not durable until [`sync`](Self::sync)).
    pub fn write(&mut self, bytes: &[u8]) {
        self.unsynced.extend_from_slice(bytes);
    }

    /// Makes everything written so far durable.
    pub fn sync(&mut self) {
        self.durable.append(&mut self.unsynced);
    }

    /// Bytes written and not yet synced.
    pub fn unsynced(&self) -> usize {
        self.unsynced.len()
    }

    /// A crash: what was not synced is lost, or with `torn` a random prefix of it survives
    /// (whole writes and part of the next).
    pub fn crash(&mut self, torn: bool, rng: &mut SmallRng) {
        let keep = if torn && !self.unsynced.is_empty() {
            rng.gen_range(0..=self.unsynced.len())
        } else {
            0
        };
        self.durable.extend_from_slice(&self.unsynced[..keep]);
        self.unsynced.clear();
    }

    /// What a restarted node reads: the durable bytes (a crash already dropped the rest).
    pub fn contents(&self) -> &[u8] {
        &self.durable
    }

    /// Shortens the file to `len` bytes (a recovery dropping a damaged tail).
    pub fn truncate(&mut self, len: usize) {
        self.durable.truncate(len);
    }
}

/// Bytes of one clock record: the high-water mark (8, little-endian) and its CRC-32 (4).
pub const CLOCK_RECORD: usize = 12;

/// The record storing clock high-water mark `hw`.
pub fn clock_record(hw: u64) -> [u8; CLOCK_RECORD] {
    let mut r = [0u8; CLOCK_RECORD];
    r[..8].copy_from_slice(&hw.to_le_bytes());
    let crc = crc32fast::hash(&r[..8]);
    r[8..].copy_from_slice(&crc.to_le_bytes());
    r
}

/// Reads a clock log: the largest high-water mark of the records before the first damaged
/// or partial one (`None` if there is none), and the length of that valid prefix (the rest
/// is a torn or corrupt tail, to be cut off).
pub fn recover_clock(log: &[u8]) -> (Option<u64>, usize) {
    let mut hw = None;
    let mut valid = 0;
    for r in log.chunks(CLOCK_RECORD) {
        if r.len() < CLOCK_RECORD || crc32fast::hash(&r[..8]).to_le_bytes() != r[8..] {
            break;
        }
        let v = u64::from_le_bytes(r[..8].try_into().expect("8 bytes"));
        hw = Some(hw.map_or(v, |h: u64| h.max(v)));
        valid += CLOCK_RECORD;
    }
    (hw, valid)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn what_was_not_synced_is_lost_at_a_crash() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut d = Disk::default();
        d.write(&clock_record(10));
        d.sync();
        d.write(&clock_record(20));
        d.crash(false, &mut rng);
        assert_eq!(recover_clock(d.contents()), (Some(10), CLOCK_RECORD));
    }

    #[test]
    fn a_torn_tail_is_dropped_and_never_read_as_a_clock() {
        let mut seen_torn = false;
        for seed in 0..200 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut d = Disk::default();
            d.write(&clock_record(10));
            d.sync();
            d.write(&clock_record(20));
            d.write(&clock_record(30));
            d.crash(true, &mut rng);
            let (hw, valid) = recover_clock(d.contents());
            // Whatever survived, the clock read is one that was written, and the valid
            // prefix is whole records.
            assert!(matches!(hw, Some(10 | 20 | 30)), "seed {seed}: {hw:?}");
            assert_eq!(valid % CLOCK_RECORD, 0);
            seen_torn |= d.contents().len() % CLOCK_RECORD != 0;
            d.truncate(valid);
            assert_eq!(recover_clock(d.contents()), (hw, valid));
        }
        assert!(seen_torn, "some crash tore a record");
    }

    #[test]
    fn a_corrupt_record_ends_the_log() {
        let mut log = Vec::new();
        for hw in [5u64, 6, 7] {
            log.extend_from_slice(&clock_record(hw));
        }
        log[CLOCK_RECORD + 3] ^= 0x40;
        assert_eq!(recover_clock(&log), (Some(5), CLOCK_RECORD));
        assert_eq!(recover_clock(&[]), (None, 0));
    }
}
