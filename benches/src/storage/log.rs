//! An append-only log of checksummed records, synced with `fdatasync`, deletes as tombstones.
//!
//! A record is `len: u32` (the bytes after the checksum), `crc: u32` (CRC32 of those bytes),
//! `kind: u8` (1 put, 0 tombstone), the 24-byte key and, for a put, the payload; all little
//! endian. Recovery reads records until the first one that is short or fails its checksum
//! (a torn write at the tail). Compaction rewrites the live records to a new file and renames
//! it over the old one.
//!
//! Appending grows the file, so each `fdatasync` also commits the new size; the preallocated
//! variant sets the file's length ahead (sparse, as fjall does for its journal) and writes at
//! its own offset, leaving the size unchanged on most syncs.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{Key, Result, Store};

const PUT: u8 = 1;
const TOMBSTONE: u8 = 0;
/// `len` and `crc`.
const HEADER: usize = 8;

/// Bytes the preallocated variant sets the length ahead by.
const AHEAD: u64 = 64 << 20;

/// The log file.
pub struct Log {
    file: File,
    dir: PathBuf,
    path: PathBuf,
    buf: Vec<u8>,
    /// Where the next record goes.
    end: u64,
    /// Whether the file's length is set ahead of `end`.
    preallocated: bool,
}

impl Log {
    /// Creates an empty log in `dir`, appended to (the file grows with each batch).
    pub fn open(dir: &Path) -> Result<Self> {
        Self::create(dir, false)
    }

    /// Creates an empty log in `dir` whose length is set 64 MiB ahead of its records.
    pub fn open_preallocated(dir: &Path) -> Result<Self> {
        Self::create(dir, true)
    }

    fn create(dir: &Path, preallocated: bool) -> Result<Self> {
        let path = dir.join("deliveries.log");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        if preallocated {
            file.set_len(AHEAD)?;
        }
        let dir = dir.to_path_buf();
        Ok(Log {
            file,
            dir,
            path,
            buf: Vec::new(),
            end: 0,
            preallocated,
        })
    }

    /// Writes the buffered records at the end and syncs them.
    fn append(&mut self) -> Result<()> {
        self.file.write_all_at(&self.buf, self.end)?;
        self.end += self.buf.len() as u64;
        if self.preallocated && self.end > self.file.metadata()?.len() {
            self.file.set_len(self.end + AHEAD)?;
        }
        self.file.sync_data()?;
        self.buf.clear();
        Ok(())
    }
}

/// Appends one record to `buf`.
fn encode(buf: &mut Vec<u8>, kind: u8, key: Key, payload: &[u8]) {
    let start = buf.len();
    buf.extend_from_slice(&[0; HEADER]);
    buf.push(kind);
    buf.extend_from_slice(&key.to_bytes());
    buf.extend_from_slice(payload);
    let body = start + HEADER;
    let len = u32::try_from(buf.len() - body).expect("record under 4 GiB");
    let crc = crc32fast::hash(&buf[body..]);
    buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
    buf[start + 4..body].copy_from_slice(&crc.to_le_bytes());
}

/// The live records of a log's bytes: each put's key and byte range, less the keys a later
/// tombstone deleted. Stops at the first short or corrupt record.
fn live(data: &[u8]) -> HashMap<Key, Range<usize>> {
    let mut live = HashMap::new();
    let mut at = 0;
    while let Some(header) = data.get(at..at + HEADER) {
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let body = at + HEADER;
        let Some(bytes) = data.get(body..body + len) else {
            break;
        };
        if len < 25 || crc32fast::hash(bytes) != crc {
            break;
        }
        let key = Key::from_bytes(bytes[1..25].try_into().expect("24 bytes"));
        if bytes[0] == PUT {
            live.insert(key, at..body + len);
        } else {
            live.remove(&key);
        }
        at = body + len;
    }
    live
}

impl Store for Log {
    fn put(&mut self, keys: &[Key], payload: &[u8]) -> Result<()> {
        for &k in keys {
            encode(&mut self.buf, PUT, k, payload);
        }
        self.append()
    }

    fn take(&mut self, keys: &[Key]) -> Result<()> {
        for &k in keys {
            encode(&mut self.buf, TOMBSTONE, k, &[]);
        }
        self.append()
    }

    /// Reads the whole log, writes its live records to a new file, syncs it, renames it over
    /// the log and syncs the directory.
    fn compact(&mut self) -> Result<()> {
        let mut data = std::fs::read(&self.path)?;
        data.truncate(usize::try_from(self.end)?);
        let mut ranges: Vec<Range<usize>> = live(&data).into_values().collect();
        ranges.sort_unstable_by_key(|r| r.start);
        let tmp = self.dir.join("deliveries.log.new");
        let mut out = File::create(&tmp)?;
        let mut end = 0;
        for r in ranges {
            end += r.len() as u64;
            out.write_all(&data[r])?;
        }
        if self.preallocated {
            out.set_len(end + AHEAD)?;
        }
        out.sync_data()?;
        std::fs::rename(&tmp, &self.path)?;
        File::open(&self.dir)?.sync_all()?;
        self.file = out;
        self.end = end;
        Ok(())
    }
}
