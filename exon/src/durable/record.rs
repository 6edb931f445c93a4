//! The framing of the log's records, and reading them back from a segment's bytes.
//!
//! A record is `[len: u32 LE][crc: u32 LE][kind: u8][body]`: `len` counts `kind` and
//! `body`, `crc` is the CRC-32 (IEEE) of those same bytes. The body of an entry is the
//! caller's bytes; that of a checkpoint's begin or end is the checkpoint's number (`u64 LE`).

use std::ops::Range;

/// `len` and `crc`.
pub(crate) const HEADER: usize = 8;

const ENTRY: u8 = 1;
const BEGIN: u8 = 2;
const END: u8 = 3;

/// A record read back from a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    /// An entry: the range of its body in the segment's bytes.
    Entry(Range<usize>),
    /// The start of checkpoint `n`.
    Begin(u64),
    /// The end of checkpoint `n`.
    End(u64),
}

/// The bytes a record with a body of `body_len` bytes takes in a segment.
pub(crate) fn framed_len(body_len: usize) -> usize {
    HEADER + 1 + body_len
}

/// Appends an entry record to `buf`.
pub(crate) fn encode_entry(buf: &mut Vec<u8>, body: &[u8]) {
    encode(buf, ENTRY, body);
}

/// Appends the begin record of checkpoint `n` to `buf`.
pub(crate) fn encode_begin(buf: &mut Vec<u8>, n: u64) {
    encode(buf, BEGIN, &n.to_le_bytes());
}

/// Appends the end record of checkpoint `n` to `buf`.
pub(crate) fn encode_end(buf: &mut Vec<u8>, n: u64) {
    encode(buf, END, &n.to_le_bytes());
}

/// Appends a record; `body` is at most `u32::MAX - 1` bytes (the log checks its bound).
fn encode(buf: &mut Vec<u8>, kind: u8, body: &[u8]) {
    let len = u32::try_from(1 + body.len()).expect("record bounded by LogConfig");
    let mut crc = crc32fast::Hasher::new();
    crc.update(&[kind]);
    crc.update(body);
    buf.reserve(framed_len(body.len()));
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&crc.finalize().to_le_bytes());
    buf.push(kind);
    buf.extend_from_slice(body);
}

/// The length of the record at the start of `buf`, which [`encode`] wrote.
pub(crate) fn encoded_len(buf: &[u8]) -> usize {
    let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes"));
    HEADER + len as usize
}

/// The records of a segment's bytes, in order, up to the first damaged one: one cut short,
/// whose length is out of bounds (zero, or a body over `max_body`), whose checksum fails, or
/// whose kind or body is not one this log writes. Never panics; allocates nothing.
#[derive(Debug, Clone)]
pub(crate) struct Records<'a> {
    data: &'a [u8],
    at: usize,
    max_body: usize,
}

impl<'a> Records<'a> {
    /// The records of `data`, entries of at most `max_body` bytes.
    pub fn new(data: &'a [u8], max_body: usize) -> Self {
        Records {
            data,
            at: 0,
            max_body,
        }
    }

    /// The end of the last record read: once the iterator is done, the bytes that are intact.
    pub fn offset(&self) -> usize {
        self.at
    }

    /// The record at `self.at` and its length, if it is intact.
    fn parse(&self) -> Option<(Record, usize)> {
        let at = self.at;
        let header = self.data.get(at..at.checked_add(HEADER)?)?;
        let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
        if len == 0 || len - 1 > self.max_body.max(8) {
            return None;
        }
        let start = at + HEADER;
        let bytes = self.data.get(start..start + len)?;
        if crc32fast::hash(bytes) != crc {
            return None;
        }
        let body = &bytes[1..];
        let number = || body.try_into().ok().map(u64::from_le_bytes);
        let record = match bytes[0] {
            ENTRY if body.len() <= self.max_body => Record::Entry(start + 1..start + len),
            BEGIN => Record::Begin(number()?),
            END => Record::End(number()?),
            _ => return None,
        };
        Some((record, HEADER + len))
    }
}

/// A file system that persists a file's size before its data shows the blocks it lost as
/// zeros, from a sector boundary on (or from the synced end, where the last synced sector
/// was written whole).
const SECTOR: usize = 512;

/// The length field of the header at `at`, if the header is there and its length in bounds
/// for a record of kind `kind` (the byte after the header) as [`Records`] reads it; the
/// kind is not checked when it is past the end of `data`.
fn plausible_len(data: &[u8], at: usize, max_body: usize) -> Option<usize> {
    let field = data.get(at..at.checked_add(4)?)?;
    let len = u32::from_le_bytes(field.try_into().ok()?) as usize;
    let ok = match data.get(at + HEADER) {
        _ if len == 0 => false,
        Some(&ENTRY) => len - 1 <= max_body,
        Some(&(BEGIN | END)) => len == 9,
        Some(_) => false,
        None => len - 1 <= max_body.max(8),
    };
    ok.then_some(len)
}

/// The end of what looks written in `data`: past its last byte that is not zero.
fn written_end(data: &[u8]) -> usize {
    data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

/// Whether the damage that ended a scan of the last segment's `data` at `at` (the end of
/// its last intact record) can be a write torn by a crash, rather than damage to records
/// that were synced. A crash loses or tears only what was written after the last sync: it
/// leaves a prefix of the last write (its last record cut short), possibly followed by
/// zeros (a size made durable before the data, from a sector boundary or the synced end
/// on). So it is taken for a torn write only if
///
/// * the record at `at` is cut short by the end of the segment, once zeros from a sector
///   boundary on are left out (a whole record whose checksum fails was written whole, and
///   a torn write never leaves a header with a length out of bounds), and
/// * no intact record starts after `at` (a torn write leaves nothing intact after the
///   record it cut): the bytes after `at` are searched at every offset, so a length field
///   that was damaged does not hide the records after it.
///
/// What this cannot tell apart: damage confined to the last record of the segment that
/// leaves it looking cut short (its length field made to run past the end, or damage in a
/// record whose last bytes are zeros from a sector boundary on). The search is bounded:
/// past about eight times the bytes after `at` in checksummed bytes and headers read (a
/// disk made to cost more is not a torn write), it answers "damaged".
pub(crate) fn torn_tail(data: &[u8], at: usize, max_body: usize) -> bool {
    let at = at.min(data.len());
    cut_short(data, at, max_body) && !intact_record_after(data, at, max_body)
}

/// Whether the record at `at` runs past the end of `data`, zeros from a sector boundary on
/// left out (see [`torn_tail`]).
fn cut_short(data: &[u8], at: usize, max_body: usize) -> bool {
    let written = written_end(data);
    if written <= at {
        // Nothing but zeros after the intact records.
        return true;
    }
    let end = if written < data.len() {
        written.next_multiple_of(SECTOR).min(data.len())
    } else {
        data.len()
    };
    if end - at <= HEADER {
        // Zeros, or a header cut short.
        return true;
    }
    match plausible_len(&data[..end], at, max_body) {
        Some(len) => at + HEADER + len > end,
        None => false,
    }
}

/// Whether an intact record starts anywhere after `at`, followed by what looks like records
/// up to the end (each header's length in bounds, the last record possibly cut short, then
/// possibly zeros). The look at the following headers is cheap and comes first, so that
/// checksums are computed for few candidates. Bounded work: past the budget, `true`.
fn intact_record_after(data: &[u8], at: usize, max_body: usize) -> bool {
    let written = written_end(data);
    let mut budget = (data.len() as u64)
        .saturating_sub(at as u64)
        .saturating_mul(8)
        .saturating_add(1 << 20);
    let mut spend = |n: usize| match budget.checked_sub(n as u64 + 1) {
        Some(b) => {
            budget = b;
            true
        }
        None => false,
    };
    for p in at.saturating_add(1)..written {
        let Some(len) = plausible_len(data, p, max_body) else {
            continue;
        };
        let mut q = p + HEADER + len;
        if q > data.len() {
            continue;
        }
        let follows = loop {
            if !spend(0) {
                return true;
            }
            if q >= written || data.len() - q <= HEADER {
                break true;
            }
            match plausible_len(data, q, max_body) {
                None => break false,
                Some(l) if q + HEADER + l > data.len() => break true,
                Some(l) => q += HEADER + l,
            }
        };
        if !follows {
            continue;
        }
        if !spend(len) {
            return true;
        }
        let mut one = Records::new(data, max_body);
        one.at = p;
        if one.parse().is_some() {
            return true;
        }
    }
    false
}

impl Iterator for Records<'_> {
    type Item = (usize, Record);

    fn next(&mut self) -> Option<(usize, Record)> {
        let (record, len) = self.parse()?;
        let at = self.at;
        self.at += len;
        Some((at, record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    struct Scan {
        records: Vec<(usize, Record)>,
        valid: usize,
    }

    fn scan(data: &[u8], max_body: usize) -> Scan {
        let mut it = Records::new(data, max_body);
        let records = it.by_ref().collect();
        Scan {
            records,
            valid: it.offset(),
        }
    }

    #[test]
    fn round_trip_and_damage() {
        let mut buf = Vec::new();
        encode_begin(&mut buf, 7);
        encode_entry(&mut buf, b"hello");
        encode_entry(&mut buf, b"");
        encode_end(&mut buf, 7);
        assert_eq!(encoded_len(&buf), framed_len(8));
        let s = scan(&buf, 16);
        let want = vec![
            (0, Record::Begin(7)),
            (17, Record::Entry(26..31)),
            (31, Record::Entry(40..40)),
            (40, Record::End(7)),
        ];
        assert_eq!((s.records, s.valid), (want, buf.len()));
        // Too large for the bound: the scan ends before the entry.
        assert_eq!(scan(&buf, 4).valid, 17);
        // A flipped bit in the entry's body ends the scan there.
        let mut bad = buf.clone();
        bad[28] ^= 0x10;
        assert_eq!(scan(&bad, 16).valid, 17);
        // A torn last record.
        assert_eq!(scan(&buf[..buf.len() - 1], 16).valid, 40);
        // Zeros (a tail a file system may show after a crash).
        let mut zeros = buf.clone();
        zeros.extend_from_slice(&[0; 20]);
        assert_eq!(scan(&zeros, 16).valid, buf.len());
    }

    #[test]
    fn wrong_kind_or_number_size_ends_the_scan() {
        let mut buf = Vec::new();
        encode(&mut buf, 9, b"x");
        assert_eq!(scan(&buf, 16).valid, 0);
        buf.clear();
        encode(&mut buf, BEGIN, b"1234");
        assert_eq!(scan(&buf, 16).valid, 0);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512), max in 0usize..64) {
            let s = scan(&data, max);
            prop_assert!(s.valid <= data.len());
            for (at, r) in &s.records {
                prop_assert!(*at < s.valid);
                if let Record::Entry(range) = r {
                    prop_assert!(range.end <= s.valid && range.len() <= max);
                }
            }
        }
    }
}
