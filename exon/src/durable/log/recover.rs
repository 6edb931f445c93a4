//! Recovery: reading the segments back, replaying them, and repairing the log.

use std::collections::BTreeSet;
use std::io;

use bytes::Bytes;

use super::{LogConfig, LogError};
use crate::durable::backend::Backend;
use crate::durable::record::{self, Record, Records};

/// What [`Log::open`](super::Log::open) found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// The entries to replay, in order: those of the last complete checkpoint, then those
    /// appended after it. (Each shares the buffer of its segment; copy one to keep it long.)
    pub entries: Vec<Bytes>,
    /// The segments the log holds now.
    pub segments: usize,
    /// Bytes cut off the end of the last segment as a write torn by a crash: the last
    /// record cut short by the end of the segment (and possibly zeros after it), with no
    /// intact record after it. Only what was never synced can look like this (see
    /// [`Recovery::damaged_segment`] for the one exception).
    pub torn_bytes: u64,
    /// The segment whose synced records are damaged, if any: synced data was lost. It is
    /// damage in a segment other than the last (each was synced before the next one was
    /// created), damage in the last one that is not shaped like a torn write (a whole
    /// record whose checksum fails, or an intact record after the bad one), or a checkpoint
    /// with entries and no end in the oldest segment (older segments are removed only once
    /// a checkpoint is synced). The log was cut at the damage and the later segments
    /// removed; the bytes are in `dropped_bytes`. Not detected: damage confined to the last
    /// record of the last segment that leaves it looking cut short, which is cut as a torn
    /// write.
    pub damaged_segment: Option<u64>,
    /// Bytes dropped because of `damaged_segment`.
    pub dropped_bytes: u64,
    /// Whether an incomplete checkpoint (begun, never ended) was discarded. Its entries were
    /// copies of live ones, so nothing is lost, unless `damaged_segment` is that of the
    /// checkpoint.
    pub discarded_checkpoint: bool,
    /// Segments removed because a checkpoint after them made them obsolete (a crash came
    /// between the checkpoint and their removal).
    pub removed_segments: usize,
}

impl Recovery {
    /// Whether records that were synced were found damaged and cut
    /// ([`damaged_segment`](Self::damaged_segment)): what they held is lost, and the
    /// layer above must not vouch for it.
    pub fn lost_synced_data(&self) -> bool {
        self.damaged_segment.is_some()
    }
}

/// A segment read back by `Log::open`.
struct Segment {
    seg: u64,
    data: Bytes,
    /// The intact bytes: up to the first damaged record.
    valid: usize,
    /// The first record, if intact.
    first: Option<Record>,
    /// The numbers of the checkpoint ends in the segment, of those that may match a begin
    /// (the number of a segment up to this one), so bounded by the number of segments.
    ends: BTreeSet<u64>,
}

impl Segment {
    fn damaged(&self) -> bool {
        self.valid < self.data.len()
    }
}

/// Whether the checkpoint `n` begun at the start of `segs[0]` has its end in `segs`, before
/// any damage in a segment that is not the last.
fn has_end(segs: &[Segment], n: u64) -> bool {
    for (i, s) in segs.iter().enumerate() {
        if s.ends.contains(&n) {
            return true;
        }
        if s.damaged() && i + 1 < segs.len() {
            return false;
        }
    }
    false
}

/// The state of the log after recovery.
pub(super) struct Recovered {
    /// Each segment's number and length, oldest first.
    pub segs: Vec<(u64, u64)>,
    /// The number of the next segment to create.
    pub next_seg: u64,
    /// Bytes after the last checkpoint's end (all bytes if there is none).
    pub since_checkpoint: u64,
}

/// A place in the log: (segment index, offset).
type At = (usize, usize);

/// Reads the log in `backend` back, replays it and repairs it (see [`Log::open`]).
///
/// [`Log::open`]: super::Log::open
pub(super) fn recover<B: Backend>(
    backend: &mut B,
    cfg: &LogConfig,
) -> Result<(Recovered, Recovery), LogError> {
    let mut numbers = backend.list()?;
    numbers.sort_unstable();
    numbers.dedup();
    let next_seg = match numbers.last() {
        Some(&n) => n.checked_add(1).ok_or(LogError::SegmentNumbers)?,
        None => 0,
    };
    let (segs, start) = read_back(backend, cfg, &numbers)?;
    let mut rec = Recovery {
        removed_segments: start,
        ..Recovery::default()
    };
    remove_obsolete(backend, &numbers[..start])?;
    let (cut, end_at) = replay(&segs, cfg, &mut rec);
    let mut lens: Vec<(u64, u64)> = segs.iter().map(|s| (s.seg, s.data.len() as u64)).collect();
    if let Some(cut) = cut {
        cut_log(backend, &mut lens, cut)?;
    }
    let since_checkpoint = since_checkpoint(&lens, end_at);
    rec.segments = lens.len();
    let found = Recovered {
        segs: lens,
        next_seg,
        since_checkpoint,
    };
    Ok((found, rec))
}

/// Reads the segments `numbers` (sorted) from the newest back to the newest complete
/// checkpoint. Returns them oldest first, and the index in `numbers` of the oldest one read:
/// the segments before it are obsolete.
fn read_back<B: Backend>(
    backend: &mut B,
    cfg: &LogConfig,
    numbers: &[u64],
) -> Result<(Vec<Segment>, usize), LogError> {
    let mut segs = std::collections::VecDeque::new();
    let mut start = 0;
    for (i, &seg) in numbers.iter().enumerate().rev() {
        segs.push_front(read_segment(backend, cfg, numbers, seg)?);
        let segs = segs.make_contiguous();
        if let Some(Record::Begin(n)) = segs[0].first {
            if n == seg && has_end(segs, n) {
                start = i;
                break;
            }
        }
    }
    Ok((Vec::from(segs), start))
}

/// Reads segment `seg` back: its intact bytes, its first record, and its checkpoint ends
/// (of those that may match a begin: the number of a segment of `numbers` up to this one).
fn read_segment<B: Backend>(
    backend: &mut B,
    cfg: &LogConfig,
    numbers: &[u64],
    seg: u64,
) -> Result<Segment, LogError> {
    let data = backend.read(seg, cfg.segment_bytes).map_err(|e| {
        if e.kind() == io::ErrorKind::FileTooLarge {
            LogError::SegmentTooLarge {
                seg,
                max: cfg.segment_bytes,
            }
        } else {
            LogError::Io(e)
        }
    })?;
    let (mut first, mut ends) = (None, BTreeSet::new());
    let mut records = Records::new(&data, cfg.max_record);
    for (at, r) in records.by_ref() {
        match r {
            Record::End(n) if n <= seg && numbers.binary_search(&n).is_ok() => {
                ends.insert(n);
            }
            _ => {}
        }
        if at == 0 {
            first = Some(r);
        }
    }
    Ok(Segment {
        seg,
        valid: records.offset(),
        data: Bytes::from(data),
        first,
        ends,
    })
}

/// Removes the segments a later checkpoint made obsolete, then syncs the directory (if
/// there were any).
fn remove_obsolete<B: Backend>(backend: &mut B, obsolete: &[u64]) -> Result<(), LogError> {
    for &seg in obsolete {
        backend.remove(seg)?;
    }
    if !obsolete.is_empty() {
        backend.sync_dir()?;
    }
    Ok(())
}

/// Replays `segs` into `rec.entries`, recording in `rec` what was damaged or discarded.
/// Returns where the log must be cut (damage, or an unended checkpoint), and where the last
/// checkpoint ended (just after its end).
fn replay(segs: &[Segment], cfg: &LogConfig, rec: &mut Recovery) -> (Option<At>, Option<At>) {
    let mut begun = None; // (segment index, offset, entries before, number)
    let mut cut = None;
    let mut end_at = None; // just after the last checkpoint end
    for (j, s) in segs.iter().enumerate() {
        for (at, r) in Records::new(&s.data, cfg.max_record) {
            match r {
                Record::Entry(body) => rec.entries.push(s.data.slice(body)),
                Record::Begin(n) if begun.is_none() => {
                    begun = Some((j, at, rec.entries.len(), n));
                }
                Record::End(n) if begun.is_some_and(|b| b.3 == n) => {
                    begun = None;
                    end_at = Some((j, at + record::framed_len(8)));
                }
                Record::Begin(_) | Record::End(_) => {}
            }
        }
        if s.damaged() {
            record_damage(segs, j, cfg, rec);
            cut = Some((j, s.valid));
            break;
        }
    }
    if let Some((j, at, entries, _)) = begun {
        cut = Some(discard_checkpoint(segs, rec, (j, at), entries));
    }
    (cut, end_at)
}

/// Segment `segs[j]` is damaged: in the last segment, a tail shaped like a torn write
/// (cut); anywhere else, synced data lost (it and the later segments dropped).
fn record_damage(segs: &[Segment], j: usize, cfg: &LogConfig, rec: &mut Recovery) {
    let s = &segs[j];
    let lost = (s.data.len() - s.valid) as u64;
    if j + 1 == segs.len() && record::torn_tail(&s.data, s.valid, cfg.max_record) {
        rec.torn_bytes = lost;
    } else {
        rec.damaged_segment = Some(s.seg);
        let later: usize = segs[j + 1..].iter().map(|s| s.data.len()).sum();
        rec.dropped_bytes = lost + later as u64;
    }
}

/// Discards the checkpoint begun at `begun` and never ended (`entries`: the entries replayed
/// before it): its entries go, and the log is cut where it began (returned).
fn discard_checkpoint(segs: &[Segment], rec: &mut Recovery, begun: At, entries: usize) -> At {
    // A checkpoint that begins the oldest segment left has nothing older to fall back
    // on: older segments are removed only after a checkpoint's end is synced, so one
    // with entries and no end was damaged (a checkpoint of a log that never committed
    // has no entries in the journal's use).
    if begun == (0, 0) && rec.entries.len() > entries && rec.damaged_segment.is_none() {
        rec.damaged_segment = Some(segs[0].seg);
        rec.dropped_bytes = segs.iter().map(|s| s.data.len() as u64).sum();
        rec.torn_bytes = 0;
    }
    rec.entries.truncate(entries);
    rec.discarded_checkpoint = true;
    begun
}

/// Cuts the log at `(j, at)`: the later segments are removed (newest first, then the
/// directory synced), and segment `j` is truncated there and synced; `lens` follows.
fn cut_log<B: Backend>(
    backend: &mut B,
    lens: &mut Vec<(u64, u64)>,
    (j, at): At,
) -> Result<(), LogError> {
    // Later segments go first: until the cut segment is repaired, a crash leaves a
    // log that recovery cuts at the same place.
    for &(seg, _) in lens[j + 1..].iter().rev() {
        backend.remove(seg)?;
    }
    if j + 1 < lens.len() {
        backend.sync_dir()?;
    }
    lens.truncate(j + 1);
    if lens[j].1 > at as u64 {
        backend.truncate(lens[j].0, at as u64)?;
        backend.sync(lens[j].0)?;
        lens[j].1 = at as u64;
    }
    Ok(())
}

/// Bytes after the last checkpoint's end `end_at`, in the segments of `lens` (all bytes if
/// there is none, or the cut took it).
fn since_checkpoint(lens: &[(u64, u64)], end_at: Option<At>) -> u64 {
    match end_at {
        Some((j, at)) if j < lens.len() => {
            lens[j].1.saturating_sub(at as u64) + lens[j + 1..].iter().map(|s| s.1).sum::<u64>()
        }
        _ => lens.iter().map(|s| s.1).sum(),
    }
}
