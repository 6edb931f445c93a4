//! The append-only log: segmented, checksummed, with group commit, checkpoints and crash
//! recovery.
//!
//! Entries are appended to an in-memory batch and written and synced together by
//! [`Log::commit`]. Writes go to the newest segment; a record that would take a segment past
//! [`LogConfig::segment_bytes`] goes to a new one (the old one synced first, the new one's
//! creation made durable before it is written). [`Log::checkpoint`] writes the live entries,
//! between a begin and an end record, at the start of a new segment, and then removes every
//! older segment.
//!
//! [`Log::open`] recovers: it starts at the newest segment that opens with a checkpoint whose
//! end is in the log, and replays every entry from there on. A checkpoint without its end
//! (a crash or an error during [`Log::checkpoint`]) is discarded with its segments.
//!
//! Each segment is read up to its first record that is not intact (cut short, a length out
//! of bounds, a failing checksum, an unknown kind). A crash can only lose or tear what was
//! written after the last sync, which is in the last segment, and it leaves a prefix of
//! that write: its last record cut short, possibly followed by zeros (a file system that
//! made the size durable before the data). So the log cuts the bad record off the last
//! segment as a torn write ([`Recovery::torn_bytes`]) only if it has that shape: it runs
//! past the end of the segment once zeros from a sector boundary on are left out, and no
//! intact record starts anywhere after it (searched at every offset, so that a damaged
//! length field hides nothing). Anything else is damage to synced data, cut at the damage
//! and reported in [`Recovery::damaged_segment`] ([`Recovery::lost_synced_data`]): a bad
//! record in a segment other than the last (each was synced before the next was created),
//! a whole record whose checksum fails, intact records after the bad one, or a checkpoint
//! with entries and no end in the oldest segment left (older segments are removed only
//! once a checkpoint is synced).
//!
//! The limit: damage confined to the last record of the last segment that leaves it
//! looking cut short (its length field made to run past the end, or its last bytes zeros
//! from a sector boundary on) cannot be told from a torn write, and is cut as one. Every
//! commit's records are intact records after the previous commit's, so this concerns only
//! the last record written before the log was reopened.

use std::io;

use super::backend::Backend;
use super::record;

mod recover;

pub use recover::Recovery;

/// Default [`LogConfig::segment_bytes`]: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: usize = 64 << 20;
/// Default [`LogConfig::max_record`]: a message of the core's default largest size
/// (`Limits::max_message_size`, 16 MiB), and 4 KiB for the fields of its record.
pub const DEFAULT_MAX_RECORD: usize = (16 << 20) + 4096;

/// The log's sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// A segment is not written past this many bytes (a record that would take it past goes
    /// to a new segment); also the most [`Log::open`] reads of one segment. At least a
    /// record of `max_record` bytes and its framing (9 bytes). Default 64 MiB.
    pub segment_bytes: usize,
    /// The largest entry, in bytes. It must hold the largest record of the layer above (a
    /// message of `Limits::max_message_size` and its fields). At most 1 GiB. Default 16 MiB
    /// and 4 KiB.
    pub max_record: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            max_record: DEFAULT_MAX_RECORD,
        }
    }
}

impl LogConfig {
    /// Checks the bounds given on the fields.
    pub fn validate(&self) -> Result<(), LogError> {
        if self.max_record > 1 << 30 {
            return Err(LogError::Config("max_record is at most 1 GiB"));
        }
        if self.segment_bytes < record::framed_len(self.max_record.max(8)) {
            return Err(LogError::Config(
                "segment_bytes must hold a record of max_record bytes and its 9 bytes of framing",
            ));
        }
        Ok(())
    }
}

/// An error of the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The backend failed. After one in [`Log::commit`] or [`Log::checkpoint`] the log is
    /// poisoned.
    #[error("log I/O error: {0}")]
    Io(#[from] io::Error),
    /// The storage is full (`ENOSPC`, `EDQUOT`). The log is poisoned.
    #[error("log storage full")]
    Full,
    /// An earlier I/O error poisoned the log: what it wrote since its last successful commit
    /// may or may not be durable, and a sync is never retried on the same data. Reopen the log
    /// (recovery) to go on.
    #[error("log poisoned by an earlier I/O error: reopen it")]
    Poisoned,
    /// An entry over [`LogConfig::max_record`]; nothing was written.
    #[error("log record of {len} bytes over the limit of {max}")]
    RecordTooLarge {
        /// The entry's length.
        len: usize,
        /// [`LogConfig::max_record`].
        max: usize,
    },
    /// A segment on disk is longer than [`LogConfig::segment_bytes`] (written with a larger
    /// setting, or not by this log); it was not read.
    #[error("log segment {seg} is over segment_bytes ({max} bytes)")]
    SegmentTooLarge {
        /// The segment's number.
        seg: u64,
        /// [`LogConfig::segment_bytes`].
        max: usize,
    },
    /// The segment numbers on disk are exhausted (a segment numbered `u64::MAX`).
    #[error("log segment numbers exhausted")]
    SegmentNumbers,
    /// An invalid [`LogConfig`].
    #[error("invalid log config: {0}")]
    Config(&'static str),
}

impl LogError {
    /// An I/O error, with a full disk told apart.
    fn io(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => LogError::Full,
            _ => LogError::Io(e),
        }
    }
}

/// A log sequence number: the `n`th entry appended to a [`Log`] since it was opened is
/// `Lsn(n)`, from 1; `Lsn(0)` is before the first. [`Log::commit`] returns the one through
/// which every entry is durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

/// What [`Log::write`] wrote: the entries through `lsn`, durable once `sync` ran.
#[derive(Debug)]
pub struct Written<S> {
    /// The last entry written.
    pub lsn: Lsn,
    /// The sync to run (`None`: nothing was left to sync, the entries are durable).
    pub sync: Option<S>,
}

/// An append-only log over a [`Backend`]. See the [module documentation](self).
#[derive(Debug)]
pub struct Log<B: Backend> {
    backend: B,
    cfg: LogConfig,
    /// Each segment's number and length, oldest first; writes go to the last.
    segs: Vec<(u64, u64)>,
    /// The number of the next segment to create.
    next_seg: u64,
    /// Whether the last segment holds writes not yet synced.
    dirty: bool,
    /// The batch: encoded records not yet written.
    buf: Vec<u8>,
    /// The last entry appended.
    appended: u64,
    /// The last entry durable.
    durable: u64,
    /// Bytes written after the last checkpoint's end (or since the log's start).
    since_checkpoint: u64,
    poisoned: bool,
}

impl<B: Backend> Log<B> {
    /// Opens the log in `backend` and recovers it (see the [module documentation](self)).
    /// An empty backend is an empty log. Repairs are made durable before it returns: older
    /// segments removed, a damaged tail cut off, an incomplete checkpoint discarded.
    pub fn open(mut backend: B, cfg: LogConfig) -> Result<(Self, Recovery), LogError> {
        cfg.validate()?;
        let (found, rec) = recover::recover(&mut backend, &cfg)?;
        let log = Log {
            backend,
            cfg,
            segs: found.segs,
            next_seg: found.next_seg,
            dirty: false,
            buf: Vec::new(),
            appended: 0,
            durable: 0,
            since_checkpoint: found.since_checkpoint,
            poisoned: false,
        };
        Ok((log, rec))
    }

    /// Adds `entry` to the batch; it is durable once a [`commit`](Self::commit) returns its
    /// [`Lsn`] or a later one.
    pub fn append(&mut self, entry: &[u8]) -> Result<Lsn, LogError> {
        self.check()?;
        let max = self.cfg.max_record;
        if entry.len() > max {
            return Err(LogError::RecordTooLarge {
                len: entry.len(),
                max,
            });
        }
        record::encode_entry(&mut self.buf, entry);
        self.appended += 1;
        Ok(Lsn(self.appended))
    }

    /// Writes the batch and syncs it: every entry appended so far is durable when it
    /// returns, and the result is the [`Lsn`] of the last. After an error the log is
    /// poisoned.
    pub fn commit(&mut self) -> Result<Lsn, LogError> {
        self.check()?;
        let result = self.write_batch().and_then(|()| self.sync_last());
        self.poison_on(result)?;
        self.durable = self.appended;
        Ok(Lsn(self.durable))
    }

    /// Writes the batch without syncing it, so that the next batch can be appended and
    /// written while this one syncs (pipelined group commit). Returns the [`Lsn`] of the last
    /// entry written and the sync that makes every entry through it durable, to run apart
    /// (on another thread); report its success with [`synced`](Self::synced), its failure
    /// with [`poison`](Self::poison). Segments filled on the way are synced here, as in
    /// [`commit`](Self::commit). No sync is returned when nothing was written since the
    /// last [`commit`](Self::commit). After an error the log is poisoned.
    pub fn write(&mut self) -> Result<Written<B::Sync>, LogError> {
        self.check()?;
        let sync = match self.write_unsynced() {
            Ok(sync) => sync,
            Err(e) => {
                self.poison();
                return Err(LogError::io(e));
            }
        };
        if sync.is_none() {
            self.durable = self.appended;
        }
        Ok(Written {
            lsn: Lsn(self.appended),
            sync,
        })
    }

    /// A sync returned by [`write`](Self::write) succeeded: every entry through `lsn` is
    /// durable.
    pub fn synced(&mut self, lsn: Lsn) {
        self.durable = self.durable.max(lsn.0.min(self.appended));
    }

    /// A sync returned by [`write`](Self::write) failed: the log is poisoned (a sync is
    /// never retried on the same data; reopen it).
    pub fn poison(&mut self) {
        self.poisoned = true;
        self.buf = Vec::new();
    }

    /// Commits the batch, then writes a checkpoint holding exactly the entries of `live`
    /// (between a begin and an end record, from a new segment on: each segment's creation is
    /// made durable before it is written), syncs it, and removes every older segment (then
    /// syncs the directory). Afterwards recovery replays `live`, then what is appended later. The
    /// checkpoint is encoded in memory first, so an entry over the limit fails before any
    /// write. After an I/O error the log is poisoned; a checkpoint cut short by an error or
    /// a crash is discarded by recovery, and the older segments are still there.
    pub fn checkpoint<I>(&mut self, live: I) -> Result<(), LogError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.commit()?;
        let n = self.next_seg;
        record::encode_begin(&mut self.buf, n);
        for entry in live {
            let entry = entry.as_ref();
            if entry.len() > self.cfg.max_record {
                self.buf.clear();
                let max = self.cfg.max_record;
                return Err(LogError::RecordTooLarge {
                    len: entry.len(),
                    max,
                });
            }
            record::encode_entry(&mut self.buf, entry);
        }
        record::encode_end(&mut self.buf, n);
        let result = self.write_checkpoint(n);
        self.poison_on(result)
    }

    /// Bytes appended and not yet written (the batch), so that the caller can close a
    /// batch by size.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The last entry made durable by [`commit`](Self::commit).
    pub fn durable_lsn(&self) -> Lsn {
        Lsn(self.durable)
    }

    /// The last entry appended.
    pub fn last_lsn(&self) -> Lsn {
        Lsn(self.appended)
    }

    /// The bytes of all segments.
    pub fn disk_bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.1).sum()
    }

    /// Bytes written after the last checkpoint (all bytes if there was none), to decide
    /// when to [`checkpoint`](Self::checkpoint).
    pub fn bytes_since_checkpoint(&self) -> u64 {
        self.since_checkpoint
    }

    /// The number of segments.
    pub fn segments(&self) -> usize {
        self.segs.len()
    }

    /// Whether an I/O error poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.cfg
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Gives the backend back, to reopen the log on it (after a poisoning, for instance).
    /// The batch is dropped.
    pub fn into_backend(self) -> B {
        self.backend
    }

    fn check(&self) -> Result<(), LogError> {
        if self.poisoned {
            return Err(LogError::Poisoned);
        }
        Ok(())
    }

    fn poison_on(&mut self, result: io::Result<()>) -> Result<(), LogError> {
        result.map_err(|e| {
            self.poison();
            LogError::io(e)
        })
    }

    /// Writes the batch, starting new segments as they fill up; each segment left behind
    /// is synced, the last is left to sync.
    fn write_batch(&mut self) -> io::Result<()> {
        let buf = std::mem::take(&mut self.buf);
        let mut at = 0;
        while at < buf.len() {
            let (seg, len) = match self.segs.last() {
                Some(&last) => last,
                None => {
                    self.new_segment()?;
                    continue;
                }
            };
            let room = (self.cfg.segment_bytes as u64).saturating_sub(len);
            let mut end = at;
            while end < buf.len() {
                let next = record::encoded_len(&buf[end..]);
                // An empty segment takes any record (validation makes every one fit).
                if (end - at + next) as u64 > room && !(end == at && len == 0) {
                    break;
                }
                end += next;
            }
            if end == at {
                self.new_segment()?;
                continue;
            }
            self.dirty = true;
            self.backend.append(seg, &buf[at..end])?;
            let written = (end - at) as u64;
            if let Some(last) = self.segs.last_mut() {
                last.1 += written;
            }
            self.since_checkpoint += written;
            at = end;
        }
        self.buf = buf;
        self.buf.clear();
        Ok(())
    }

    /// Writes the batch; returns a detached sync of the last segment if it was written
    /// since its last sync.
    fn write_unsynced(&mut self) -> io::Result<Option<B::Sync>> {
        self.write_batch()?;
        match self.segs.last() {
            Some(&(seg, _)) if self.dirty => self.backend.detached_sync(seg).map(Some),
            _ => Ok(None),
        }
    }

    /// Syncs the last segment if it was written.
    fn sync_last(&mut self) -> io::Result<()> {
        if let (true, Some(&(seg, _))) = (self.dirty, self.segs.last()) {
            self.backend.sync(seg)?;
        }
        self.dirty = false;
        Ok(())
    }

    /// Syncs the last segment, then creates the next one and makes its creation durable.
    fn new_segment(&mut self) -> io::Result<()> {
        self.sync_last()?;
        let seg = self.next_seg;
        let next = seg
            .checked_add(1)
            .ok_or_else(|| io::Error::other("segment numbers exhausted"))?;
        self.backend.create(seg)?;
        self.backend.sync_dir()?;
        self.segs.push((seg, 0));
        self.next_seg = next;
        Ok(())
    }

    /// Writes the encoded checkpoint `n` (in the batch) from a new segment `n` on, syncs it
    /// and removes the older segments.
    fn write_checkpoint(&mut self, n: u64) -> io::Result<()> {
        self.new_segment()?;
        debug_assert_eq!(self.segs.last().map(|s| s.0), Some(n));
        self.write_batch()?;
        self.sync_last()?;
        let first = self.segs.iter().position(|s| s.0 == n).unwrap_or(0);
        for i in 0..first {
            self.backend.remove(self.segs[i].0)?;
        }
        if first > 0 {
            self.backend.sync_dir()?;
        }
        self.segs.drain(..first);
        // The end record is the last thing written.
        self.since_checkpoint = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
