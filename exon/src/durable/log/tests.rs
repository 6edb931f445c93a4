//! Tests of the log: crashes at every byte and every step, damage, rotation, faults.

use super::*;
use crate::durable::backend::{FsBackend, MemBackend};
use proptest::prelude::*;

/// Small segments: a record of up to 32 bytes, about three per segment.
fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 128,
        max_record: 32,
    }
}

fn entry(i: usize) -> Vec<u8> {
    format!("entry {i:03}").into_bytes()
}

fn open(mem: &MemBackend, cfg: LogConfig) -> (Log<MemBackend>, Recovery) {
    Log::open(mem.clone(), cfg).expect("open")
}

fn bodies(rec: &Recovery) -> Vec<Vec<u8>> {
    rec.entries.iter().map(|e| e.to_vec()).collect()
}

/// A log with entries `0..n` committed, one commit each.
fn committed(mem: &MemBackend, cfg: LogConfig, n: usize) -> Log<MemBackend> {
    let (mut log, _) = open(mem, cfg);
    for i in 0..n {
        log.append(&entry(i)).unwrap();
        assert_eq!(log.commit().unwrap(), Lsn(i as u64 + 1));
    }
    log
}

#[test]
fn empty_backend_is_an_empty_log() {
    let mem = MemBackend::new();
    let (mut log, rec) = open(&mem, LogConfig::default());
    assert!(rec.entries.is_empty());
    assert_eq!((rec.segments, rec.torn_bytes, log.disk_bytes()), (0, 0, 0));
    assert_eq!(log.commit().unwrap(), Lsn(0));
    assert_eq!(mem.stats().syncs, 0);
}

#[test]
fn lsns_count_appends_and_commit_makes_them_durable() {
    let mem = MemBackend::new();
    let (mut log, _) = open(&mem, LogConfig::default());
    assert_eq!(log.append(b"a").unwrap(), Lsn(1));
    assert_eq!(log.append(b"bc").unwrap(), Lsn(2));
    assert_eq!(log.pending_bytes(), 2 * 9 + 3);
    assert_eq!((log.last_lsn(), log.durable_lsn()), (Lsn(2), Lsn(0)));
    assert_eq!(log.commit().unwrap(), Lsn(2));
    assert_eq!((log.pending_bytes(), log.durable_lsn()), (0, Lsn(2)));
    // One batch, one sync (and the creation of the first segment, one directory sync).
    assert_eq!((mem.stats().syncs, mem.stats().dir_syncs), (1, 1));
    let (_, rec) = open(&mem, LogConfig::default());
    assert_eq!(bodies(&rec), vec![b"a".to_vec(), b"bc".to_vec()]);
}

#[test]
fn crash_at_every_byte_of_the_unsynced_tail_recovers_a_prefix() {
    let cfg = LogConfig::default();
    let tail: usize = (5..10).map(|i| record::framed_len(entry(i).len())).sum();
    for keep in 0..=tail {
        let mem = MemBackend::new();
        let mut log = committed(&mem, cfg.clone(), 5);
        for i in 5..10 {
            log.append(&entry(i)).unwrap();
        }
        mem.fail_syncs(true);
        assert!(log.commit().is_err());
        mem.fail_syncs(false);
        mem.crash(|_, unsynced| {
            assert_eq!(unsynced, tail);
            keep
        });
        let (_, rec) = open(&mem, cfg.clone());
        let whole = keep / record::framed_len(entry(0).len());
        let want: Vec<Vec<u8>> = (0..5 + whole).map(entry).collect();
        assert_eq!(bodies(&rec), want, "keep {keep}");
        let torn = keep - whole * record::framed_len(entry(0).len());
        assert_eq!(rec.torn_bytes, torn as u64);
        assert!(!rec.lost_tail_in_middle());
        // The repair is durable: a crash now changes nothing.
        mem.crash(|_, _| 0);
        let (_, again) = open(&mem, cfg.clone());
        assert_eq!((bodies(&again), again.torn_bytes), (want, 0));
    }
}

#[test]
fn flipped_byte_in_a_synced_record_of_the_last_segment_drops_the_rest() {
    let mem = MemBackend::new();
    drop(committed(&mem, LogConfig::default(), 5));
    let frame = record::framed_len(entry(0).len());
    let mut data = mem.segment(0).unwrap();
    assert_eq!(data.len(), 5 * frame);
    data[2 * frame + 12] ^= 1;
    mem.put_segment(0, data);
    let (mut log, rec) = open(&mem, LogConfig::default());
    assert_eq!(bodies(&rec), (0..2).map(entry).collect::<Vec<_>>());
    assert_eq!(rec.torn_bytes, 3 * frame as u64);
    assert_eq!(mem.segment(0).unwrap().len(), 2 * frame);
    // New entries follow the surviving ones.
    log.append(b"after").unwrap();
    log.commit().unwrap();
    let (_, rec) = open(&mem, LogConfig::default());
    assert_eq!(rec.entries.len(), 3);
    assert_eq!(&rec.entries[2][..], b"after");
    assert_eq!(rec.torn_bytes, 0);
}

#[test]
fn rotation_keeps_segments_under_the_limit_and_the_order() {
    let mem = MemBackend::new();
    let (mut log, _) = open(&mem, small());
    for batch in 0..5 {
        for i in 0..7 {
            log.append(&entry(batch * 7 + i)).unwrap();
        }
        log.commit().unwrap();
    }
    // 35 records of 18 bytes, 7 to a segment of 128 bytes.
    assert_eq!(log.segments(), 5);
    assert_eq!(log.disk_bytes(), 35 * 18);
    for seg in 0..5 {
        assert_eq!(mem.segment(seg).unwrap().len(), 7 * 18, "segment {seg}");
    }
    let (_, rec) = open(&mem, small());
    assert_eq!(bodies(&rec), (0..35).map(entry).collect::<Vec<_>>());
    assert_eq!(rec.segments, 5);
}

/// A batch that fills several segments, cut short after every number of backend calls and
/// crashed: recovery gives a prefix of the appended entries holding every committed one,
/// and never reports damage in the middle (each segment is synced before the next is made).
#[test]
fn crash_at_every_step_of_a_rotating_commit() {
    let all: Vec<Vec<u8>> = (0..25).map(entry).collect();
    let keeps = [|_| 0, |n| n / 2, |n| n];
    let mut lengths = std::collections::BTreeSet::new();
    for (keep, keep_dir) in keeps.into_iter().flat_map(|k| [(k, false), (k, true)]) {
        for ops in 0.. {
            let mem = MemBackend::new();
            let mut log = committed(&mem, small(), 5);
            for e in &all[5..] {
                log.append(e).unwrap();
            }
            mem.fail_after_ops(Some(ops));
            let done = log.commit().is_ok();
            mem.fail_after_ops(None);
            mem.crash_with(|_, n| keep(n), |_| keep_dir);
            let (_, rec) = open(&mem, small());
            let got = bodies(&rec);
            assert!(got.len() >= 5 && got[..] == all[..got.len()], "ops {ops}");
            assert!(!rec.lost_tail_in_middle(), "ops {ops}");
            lengths.insert(got.len());
            if done {
                assert_eq!(got, all);
                break;
            }
        }
    }
    // Cut at each segment boundary, and inside segments.
    assert!(lengths.len() >= 5, "{lengths:?}");
}

#[test]
fn damage_in_a_middle_segment_is_reported_and_cut() {
    let mem = MemBackend::new();
    drop(committed(&mem, small(), 20));
    assert_eq!(mem.list_segments(), vec![0, 1, 2]);
    let mut data = mem.segment(1).unwrap();
    data[18 + 10] ^= 0x80; // the second record of segment 1 (entry 8)
    mem.put_segment(1, data);
    let (mut log, rec) = open(&mem, small());
    assert!(rec.lost_tail_in_middle());
    assert_eq!(rec.damaged_segment, Some(1));
    // The rest of segment 1 (6 records) and segment 2 (6 records).
    assert_eq!(rec.dropped_bytes, 12 * 18);
    assert_eq!(bodies(&rec), (0..8).map(entry).collect::<Vec<_>>());
    assert_eq!(mem.list_segments(), vec![0, 1]);
    log.append(b"after").unwrap();
    log.commit().unwrap();
    let (_, rec) = open(&mem, small());
    assert!(!rec.lost_tail_in_middle());
    assert_eq!(rec.entries.len(), 9);
    assert_eq!(&rec.entries[8][..], b"after");
}

#[test]
fn checkpoint_keeps_only_the_live_entries() {
    let mem = MemBackend::new();
    let mut log = committed(&mem, small(), 20);
    log.append(b"uncommitted").unwrap();
    let live = [b"live one".to_vec(), b"live two".to_vec()];
    log.checkpoint(&live).unwrap();
    assert_eq!(log.durable_lsn(), Lsn(21));
    assert_eq!(mem.list_segments(), vec![3]);
    assert_eq!(log.disk_bytes(), 2 * 17 + 2 * 17);
    assert_eq!(log.bytes_since_checkpoint(), 0);
    log.append(b"later").unwrap();
    log.commit().unwrap();
    assert_eq!((log.bytes_since_checkpoint(), log.disk_bytes()), (14, 82));
    let (log, rec) = open(&mem, small());
    let want: Vec<&[u8]> = vec![b"live one", b"live two", b"later"];
    assert_eq!(rec.entries, want);
    assert_eq!(log.bytes_since_checkpoint(), 14);
}

/// The checkpoint cut short after every number of backend calls, then a crash that keeps
/// none, some or all of the unsynced writes: recovery gives either the old log or exactly the live
/// entries, and what is appended afterwards is kept.
#[test]
fn crash_at_every_step_of_a_checkpoint() {
    let old: Vec<Vec<u8>> = (0..10).map(entry).collect();
    // Begin, 12 records of 16 bytes and end: the checkpoint takes two segments.
    let live: Vec<Vec<u8>> = (0..12)
        .map(|i| format!("live {i:02}").into_bytes())
        .collect();
    let (mut saw_old, mut saw_live, mut saw_removed, mut saw_discard) = (0, 0, 0, 0);
    // Of the unsynced bytes, a crash keeps none, half (a torn checkpoint) or all; of the
    // directory changes not yet synced, none or all (some removals done).
    let keeps = [|_| 0, |n| n / 2, |n| n];
    for (keep, keep_dir) in keeps.into_iter().flat_map(|k| [(k, false), (k, true)]) {
        for ops in 0.. {
            let mem = MemBackend::new();
            let mut log = committed(&mem, small(), 10);
            mem.fail_after_ops(Some(ops));
            let done = log.checkpoint(&live).is_ok();
            mem.fail_after_ops(None);
            if !done {
                assert!(log.is_poisoned());
                assert!(matches!(log.append(b"x"), Err(LogError::Poisoned)));
            }
            mem.crash_with(|_, n| keep(n), |_| keep_dir);
            let (mut log, rec) = open(&mem, small());
            let got = bodies(&rec);
            if got == old {
                saw_old += 1;
            } else {
                assert_eq!(got, live, "ops {ops}");
                saw_live += 1;
            }
            saw_removed += usize::from(rec.removed_segments > 0);
            saw_discard += usize::from(rec.discarded_checkpoint);
            log.append(b"later").unwrap();
            log.commit().unwrap();
            let (_, rec) = open(&mem, small());
            let mut want = got;
            want.push(b"later".to_vec());
            assert_eq!(bodies(&rec), want, "ops {ops}");
            assert!(!rec.discarded_checkpoint && rec.torn_bytes == 0);
            if done {
                assert_eq!(mem.list_segments(), vec![2, 3]);
                break;
            }
        }
    }
    let saw = (saw_old, saw_live, saw_removed, saw_discard);
    assert!(saw.0 > 0 && saw.1 > 0 && saw.2 > 0 && saw.3 > 0, "{saw:?}");
}

/// A first checkpoint of a log that never committed (no older segment to fall back on): a
/// torn one recovers as an empty log, never as a part of the live entries.
#[test]
fn crash_during_the_checkpoint_of_an_empty_log() {
    let live: Vec<Vec<u8>> = (0..12).map(entry).collect();
    let mut outcomes = std::collections::BTreeSet::new();
    for ops in 0.. {
        let mem = MemBackend::new();
        let (mut log, _) = open(&mem, small());
        mem.fail_after_ops(Some(ops));
        let done = log.checkpoint(&live).is_ok();
        mem.fail_after_ops(None);
        mem.crash(|_, n| n / 2);
        let (log, rec) = open(&mem, small());
        let got = bodies(&rec);
        assert!(
            got.is_empty() || got == live,
            "ops {ops}: {} entries",
            got.len()
        );
        outcomes.insert(got.len());
        if got.is_empty() {
            assert_eq!(log.disk_bytes(), 0);
        }
        if done {
            break;
        }
    }
    assert_eq!(outcomes.into_iter().collect::<Vec<_>>(), vec![0, 12]);
}

#[test]
fn empty_checkpoint_and_bytes_since_checkpoint_after_reopen() {
    let mem = MemBackend::new();
    drop(committed(&mem, small(), 3));
    let (mut log, _) = open(&mem, small());
    assert_eq!((log.bytes_since_checkpoint(), log.disk_bytes()), (54, 54));
    log.checkpoint(std::iter::empty::<&[u8]>()).unwrap();
    assert_eq!((log.bytes_since_checkpoint(), log.disk_bytes()), (0, 34));
    let (log, rec) = open(&mem, small());
    assert!(rec.entries.is_empty());
    assert_eq!((log.bytes_since_checkpoint(), log.disk_bytes()), (0, 34));
}

#[test]
fn full_disk_poisons_and_reopening_recovers_the_committed() {
    let mem = MemBackend::new();
    let mut log = committed(&mem, small(), 4);
    mem.fail_after(10);
    log.append(b"does not fit").unwrap();
    assert!(matches!(log.commit(), Err(LogError::Full)));
    assert!(log.is_poisoned());
    assert!(matches!(log.append(b"x"), Err(LogError::Poisoned)));
    assert!(matches!(log.commit(), Err(LogError::Poisoned)));
    mem.set_full(false);
    let (mut log, rec) = Log::open(log.into_backend(), small()).unwrap();
    assert_eq!(bodies(&rec), (0..4).map(entry).collect::<Vec<_>>());
    assert_eq!(rec.torn_bytes, 10);
    log.append(b"fits now").unwrap();
    assert_eq!(log.commit().unwrap(), Lsn(1));
}

#[test]
fn failed_sync_poisons_and_is_never_retried() {
    let mem = MemBackend::new();
    let mut log = committed(&mem, small(), 1);
    let syncs = mem.stats().syncs;
    log.append(b"x").unwrap();
    mem.fail_syncs(true);
    assert!(matches!(log.commit(), Err(LogError::Io(_))));
    mem.fail_syncs(false);
    assert!(matches!(log.commit(), Err(LogError::Poisoned)));
    assert!(matches!(log.checkpoint([b"y"]), Err(LogError::Poisoned)));
    assert_eq!(mem.stats().syncs, syncs);
}

#[test]
fn oversized_entries_are_refused_without_harm() {
    let mem = MemBackend::new();
    let mut log = committed(&mem, small(), 1);
    let big = [0u8; 33];
    let err = log.append(&big).unwrap_err();
    assert!(matches!(err, LogError::RecordTooLarge { len: 33, max: 32 }));
    let err = log.checkpoint([&b"ok"[..], &big[..]]).unwrap_err();
    assert!(matches!(err, LogError::RecordTooLarge { len: 33, .. }));
    assert_eq!(log.append(&big[..32]).unwrap(), Lsn(2));
    log.commit().unwrap();
    let (_, rec) = open(&mem, small());
    assert_eq!(rec.entries.len(), 2);
    assert_eq!(mem.list_segments(), vec![0]);
}

#[test]
fn config_and_oversized_segments_are_typed_errors() {
    let bad = LogConfig {
        segment_bytes: 40,
        max_record: 32,
    };
    assert!(matches!(bad.validate(), Err(LogError::Config(_))));
    assert!(LogConfig::default().validate().is_ok());
    let mem = MemBackend::new();
    mem.put_segment(3, vec![0; 129]);
    let err = Log::open(mem.clone(), small()).unwrap_err();
    assert!(matches!(
        err,
        LogError::SegmentTooLarge { seg: 3, max: 128 }
    ));
    mem.put_segment(u64::MAX, vec![]);
    mem.put_segment(3, vec![]);
    assert!(matches!(
        Log::open(mem, small()),
        Err(LogError::SegmentNumbers)
    ));
}

#[test]
fn fs_round_trip_with_a_real_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small();
    {
        let (mut log, rec) = Log::open(FsBackend::open(dir.path()).unwrap(), cfg.clone()).unwrap();
        assert!(rec.entries.is_empty());
        for i in 0..10 {
            log.append(&entry(i)).unwrap();
        }
        log.commit().unwrap();
        log.checkpoint([b"live"]).unwrap();
        log.append(b"later").unwrap();
        log.commit().unwrap();
    }
    std::fs::write(dir.path().join("clock"), b"not a segment").unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".log"))
        .collect();
    assert_eq!(names, vec!["0000000000000002.log"]);
    // A torn write at the end.
    let path = dir.path().join("0000000000000002.log");
    let mut data = std::fs::read(&path).unwrap();
    data.extend_from_slice(&[7, 0, 0, 0, 1]);
    std::fs::write(&path, &data).unwrap();
    let (_, rec) = Log::open(FsBackend::open(dir.path()).unwrap(), cfg.clone()).unwrap();
    let want: Vec<&[u8]> = vec![b"live", b"later"];
    assert_eq!(rec.entries, want);
    assert_eq!(rec.torn_bytes, 5);
    assert_eq!(std::fs::read(&path).unwrap().len(), data.len() - 5);
}

/// A disk of segments, each garbage or valid records with some bytes changed.
fn disk() -> impl Strategy<Value = Vec<(u64, Vec<u8>)>> {
    let records = proptest::collection::vec(
        (0u8..4, proptest::collection::vec(any::<u8>(), 0..40)),
        0..8,
    );
    let segment = (
        records,
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
    )
        .prop_map(|(records, flips)| {
            let mut data = Vec::new();
            for (kind, body) in records {
                match kind {
                    0 => record::encode_begin(
                        &mut data,
                        u64::from(body.first().copied().unwrap_or(0) % 4),
                    ),
                    1 => record::encode_end(
                        &mut data,
                        u64::from(body.first().copied().unwrap_or(0) % 4),
                    ),
                    2 => data.extend_from_slice(&body),
                    _ => record::encode_entry(&mut data, &body),
                }
            }
            for (at, byte) in flips {
                if !data.is_empty() {
                    let at = at % data.len();
                    data[at] ^= byte;
                }
            }
            data
        });
    proptest::collection::vec((0u64..6, segment), 0..6)
}

proptest! {
    /// Whatever the disk holds, opening never panics, and what it repairs is durable: a
    /// crash and a second open find a clean log with the same entries.
    #[test]
    fn any_disk_opens_and_repairs_for_good(segs in disk()) {
        let mem = MemBackend::new();
        for (seg, data) in segs {
            mem.put_segment(seg, data);
        }
        let cfg = LogConfig { segment_bytes: 512, max_record: 32 };
        if let Ok((_, rec)) = Log::open(mem.clone(), cfg.clone()) {
            mem.crash(|_, _| 0);
            let (_, again) = Log::open(mem.clone(), cfg).unwrap();
            prop_assert_eq!(&again.entries, &rec.entries);
            prop_assert_eq!((again.torn_bytes, again.damaged_segment), (0, None));
            prop_assert!(!again.discarded_checkpoint && again.removed_segments == 0);
            prop_assert!(rec.entries.iter().all(|e| e.len() <= 32));
        }
    }
}
