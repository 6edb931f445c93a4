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
    // Read from the newest segment back to the newest complete checkpoint.
    let mut segs = std::collections::VecDeque::new();
    let mut start = 0;
    for (i, &seg) in numbers.iter().enumerate().rev() {
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
        segs.push_front(Segment {
            seg,
            valid: records.offset(),
            data: Bytes::from(data),
            first,
            ends,
        });
        let segs = segs.make_contiguous();
        if let Some(Record::Begin(n)) = segs[0].first {
            if n == seg && has_end(segs, n) {
                start = i;
                break;
            }
        }
    }
    let segs = Vec::from(segs);
    let mut rec = Recovery {
        removed_segments: start,
        ..Recovery::default()
    };
    for &seg in &numbers[..start] {
        backend.remove(seg)?;
    }
    if start > 0 {
        backend.sync_dir()?;
    }

    // Replay; find where the log must be cut (damage, or an unended checkpoint).
    let mut begun = None; // (segment index, offset, entries before, number)
    let mut cut = None; // (segment index, offset)
    let mut end_at = None; // just after the last checkpoint end: (segment index, offset)
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
            let lost = (s.data.len() - s.valid) as u64;
            if j + 1 == segs.len() && record::torn_tail(&s.data, s.valid, cfg.max_record) {
                rec.torn_bytes = lost;
            } else {
                rec.damaged_segment = Some(s.seg);
                let later: usize = segs[j + 1..].iter().map(|s| s.data.len()).sum();
                rec.dropped_bytes = lost + later as u64;
            }
            cut = Some((j, s.valid));
            break;
        }
    }
    if let Some((j, at, n, _)) = begun {
        // A checkpoint that begins the oldest segment left has nothing older to fall back
        // on: older segments are removed only after a checkpoint's end is synced, so one
        // with entries and no end was damaged (a checkpoint of a log that never committed
        // has no entries in the journal's use).
        if (j, at) == (0, 0) && rec.entries.len() > n && rec.damaged_segment.is_none() {
            rec.damaged_segment = Some(segs[0].seg);
            rec.dropped_bytes = segs.iter().map(|s| s.data.len() as u64).sum();
            rec.torn_bytes = 0;
        }
        rec.entries.truncate(n);
        rec.discarded_checkpoint = true;
        cut = Some((j, at));
    }
    let mut lens: Vec<(u64, u64)> = segs.iter().map(|s| (s.seg, s.data.len() as u64)).collect();
    if let Some((j, at)) = cut {
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
    }
    let since_checkpoint = match end_at {
        Some((j, at)) if j < lens.len() => {
            lens[j].1.saturating_sub(at as u64) + lens[j + 1..].iter().map(|s| s.1).sum::<u64>()
        }
        _ => lens.iter().map(|s| s.1).sum(),
    };
    rec.segments = lens.len();
    let found = Recovered {
        segs: lens,
        next_seg,
        since_checkpoint,
    };
    Ok((found, rec))
}
