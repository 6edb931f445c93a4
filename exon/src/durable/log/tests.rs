//! Tests of the log: crashes at every byte and every step, damage, rotation, faults.

use super::*;
use crate::durable::backend::{DetachedSync, FsBackend, MemBackend};
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
        assert!(!rec.lost_synced_data());
        // The repair is durable: a crash now changes nothing.
        mem.crash(|_, _| 0);
        let (_, again) = open(&mem, cfg.clone());
        assert_eq!((bodies(&again), again.torn_bytes), (want, 0));
    }
}

/// Issue 42, item 5: a flipped byte inside a synced record of the last segment, with intact
/// records after it, is damage to synced data, not a torn write: the log is cut there and
/// says so (the journal then answers DOUBT for what the records held).
#[test]
fn flipped_byte_in_a_synced_record_of_the_last_segment_is_damage() {
    let mem = MemBackend::new();
    drop(committed(&mem, LogConfig::default(), 5));
    let frame = record::framed_len(entry(0).len());
    let mut data = mem.segment(0).unwrap();
    assert_eq!(data.len(), 5 * frame);
    data[2 * frame + 12] ^= 1;
    mem.put_segment(0, data);
    let (mut log, rec) = open(&mem, LogConfig::default());
    assert_eq!(bodies(&rec), (0..2).map(entry).collect::<Vec<_>>());
    assert!(rec.lost_synced_data());
    assert_eq!(rec.damaged_segment, Some(0));
    assert_eq!((rec.torn_bytes, rec.dropped_bytes), (0, 3 * frame as u64));
    assert_eq!(mem.segment(0).unwrap().len(), 2 * frame);
    // New entries follow the surviving ones; the repair was made durable.
    log.append(b"after").unwrap();
    log.commit().unwrap();
    let (_, rec) = open(&mem, LogConfig::default());
    assert_eq!(rec.entries.len(), 3);
    assert_eq!(&rec.entries[2][..], b"after");
    assert_eq!((rec.torn_bytes, rec.damaged_segment), (0, None));
}

/// Damage to a record's length field that makes it run past the end of the segment looks
/// like a record cut short; the intact records after it tell it apart from a torn write.
#[test]
fn a_damaged_length_field_does_not_hide_the_records_after_it() {
    let frame = record::framed_len(entry(0).len());
    for (byte, mask) in [(2, 1), (1, 0x40), (0, 0x80), (3, 0x01)] {
        let mem = MemBackend::new();
        drop(committed(&mem, LogConfig::default(), 5));
        let mut data = mem.segment(0).unwrap();
        data[frame + byte] ^= mask;
        mem.put_segment(0, data);
        let (_, rec) = open(&mem, LogConfig::default());
        assert_eq!(bodies(&rec), vec![entry(0)], "byte {byte}");
        assert!(rec.lost_synced_data(), "byte {byte}");
        assert_eq!(rec.torn_bytes, 0);
    }
}

/// The last record of the last segment, written whole and damaged: a torn write never
/// leaves a whole record with a failing checksum.
#[test]
fn a_damaged_last_record_written_whole_is_damage() {
    let frame = record::framed_len(entry(0).len());
    for at in [4, 8, 9, frame - 1] {
        let mem = MemBackend::new();
        drop(committed(&mem, LogConfig::default(), 5));
        let mut data = mem.segment(0).unwrap();
        data[4 * frame + at] ^= 0x20;
        mem.put_segment(0, data);
        let (_, rec) = open(&mem, LogConfig::default());
        assert_eq!(bodies(&rec), (0..4).map(entry).collect::<Vec<_>>());
        assert!(rec.lost_synced_data(), "at {at}");
    }
}

/// The documented limit: damage confined to the last record of the last segment that
/// leaves it looking cut short (here its length made to run past the end) cannot be told
/// from a torn write, and is cut as one.
#[test]
fn limit_a_last_record_damaged_to_look_cut_short_is_taken_for_a_torn_write() {
    let frame = record::framed_len(entry(0).len());
    let mem = MemBackend::new();
    drop(committed(&mem, LogConfig::default(), 5));
    let mut data = mem.segment(0).unwrap();
    data[4 * frame + 1] ^= 0x01;
    mem.put_segment(0, data);
    let (_, rec) = open(&mem, LogConfig::default());
    assert_eq!(bodies(&rec), (0..4).map(entry).collect::<Vec<_>>());
    assert!(!rec.lost_synced_data());
    assert_eq!(rec.torn_bytes, frame as u64);
}

/// Zeros after a torn write (a size made durable before its data, from the synced end or a
/// sector boundary on) are still a torn write.
#[test]
fn zeros_after_a_torn_write_are_a_torn_write() {
    let big = |i: usize| vec![b'a' + (i % 26) as u8; 300];
    for (keep, zeros_to) in [
        (0, 700),
        (10, 512),
        (203, 1024),
        (715, 1536),
        (1227, 2048),
        (618, 1024),
    ] {
        let mem = MemBackend::new();
        let (mut log, _) = open(&mem, LogConfig::default());
        log.append(&big(0)).unwrap();
        log.commit().unwrap();
        let synced = mem.segment(0).unwrap();
        let mut batch = Vec::new();
        for i in 1..8 {
            record::encode_entry(&mut batch, &big(i));
        }
        let mut data = synced.clone();
        data.extend_from_slice(&batch[..keep]);
        data.resize(synced.len().max(zeros_to), 0);
        mem.put_segment(0, data.clone());
        let (_, rec) = open(&mem, LogConfig::default());
        assert!(!rec.lost_synced_data(), "keep {keep}");
        let whole = keep / record::framed_len(300);
        assert_eq!(rec.entries.len(), 1 + whole, "keep {keep}");
        assert_eq!(
            rec.torn_bytes as usize,
            data.len() - synced.len() - whole * 309
        );
    }
}

/// A checkpoint with entries whose end is damaged, in the oldest segment left (the older
/// ones were removed once it was synced): its entries are lost, and that is damage, even
/// where the end looks cut short.
#[test]
fn a_damaged_checkpoint_with_nothing_older_is_damage() {
    let mem = MemBackend::new();
    let mut log = committed(&mem, LogConfig::default(), 5);
    log.checkpoint([b"live one", b"live two"]).unwrap();
    drop(log);
    assert_eq!(mem.list_segments(), vec![1]);
    let mut data = mem.segment(1).unwrap();
    let end = data.len() - record::framed_len(8);
    data[end + 1] ^= 0x01; // the end's length now runs past the segment's end
    mem.put_segment(1, data);
    let (_, rec) = open(&mem, LogConfig::default());
    assert!(rec.entries.is_empty());
    assert!(rec.discarded_checkpoint);
    assert!(rec.lost_synced_data());
    assert_eq!(rec.damaged_segment, Some(1));
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
            assert!(!rec.lost_synced_data(), "ops {ops}");
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
    assert!(rec.lost_synced_data());
    assert_eq!(rec.damaged_segment, Some(1));
    // The rest of segment 1 (6 records) and segment 2 (6 records).
    assert_eq!(rec.dropped_bytes, 12 * 18);
    assert_eq!(bodies(&rec), (0..8).map(entry).collect::<Vec<_>>());
    assert_eq!(mem.list_segments(), vec![0, 1]);
    log.append(b"after").unwrap();
    log.commit().unwrap();
    let (_, rec) = open(&mem, small());
    assert!(!rec.lost_synced_data());
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

/// Entries of up to 300 bytes: a batch spans sectors.
fn bodies_strategy(batches: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
    let body = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        (0usize..300, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ];
    proptest::collection::vec(proptest::collection::vec(body, 1..5), batches)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A crash in a commit leaves any prefix of the unsynced batch, possibly followed by
    /// zeros (from the synced end or a sector boundary on, up to any size): never damage,
    /// and every committed entry is recovered.
    #[test]
    fn a_torn_unsynced_tail_is_never_damage(
        batches in bodies_strategy(1..5),
        tail in bodies_strategy(1..2),
        keep in any::<prop::sample::Index>(),
        zeros in any::<Option<(prop::sample::Index, prop::sample::Index)>>(),
    ) {
        let mem = MemBackend::new();
        let (mut log, _) = open(&mem, LogConfig::default());
        let mut want = Vec::new();
        for batch in &batches {
            for e in batch {
                log.append(e).unwrap();
                want.push(e.clone());
            }
            log.commit().unwrap();
        }
        let synced = mem.segment(0).unwrap();
        let mut unsynced = Vec::new();
        for e in &tail[0] {
            record::encode_entry(&mut unsynced, e);
        }
        let mut data = synced.clone();
        match zeros {
            None => data.extend_from_slice(&unsynced[..keep.index(unsynced.len() + 1)]),
            Some((size, written)) => {
                // The size reached the disk, the data up to the synced end or a sector
                // boundary.
                let size = size.index(unsynced.len() + 1);
                let upto = synced.len() + written.index(size + 1);
                let upto = (upto / 512 * 512).max(synced.len());
                data.extend_from_slice(&unsynced[..upto - synced.len()]);
                data.resize(synced.len() + size, 0);
            }
        }
        mem.put_segment(0, data);
        let (_, rec) = open(&mem, LogConfig::default());
        prop_assert!(!rec.lost_synced_data());
        let got = bodies(&rec);
        prop_assert!(got.len() >= want.len());
        prop_assert_eq!(&got[..want.len()], &want[..]);
        prop_assert_eq!(&got[want.len()..], &tail[0][..got.len() - want.len()]);
    }

    /// A byte of a synced record changed, with a later synced record intact (and a torn
    /// tail or none after it): always damage, and the log is cut at the damaged record.
    #[test]
    fn damaged_synced_records_with_intact_ones_after_are_always_damage(
        batches in bodies_strategy(1..5),
        tail in bodies_strategy(1..2),
        flip in any::<prop::sample::Index>(),
        mask in 1u8..=255,
        keep in any::<prop::sample::Index>(),
    ) {
        let mem = MemBackend::new();
        let (mut log, _) = open(&mem, LogConfig::default());
        let mut want = Vec::new();
        for batch in &batches {
            for e in batch {
                log.append(e).unwrap();
                want.push(e.clone());
            }
            log.commit().unwrap();
        }
        prop_assume!(want.len() >= 2);
        let mut data = mem.segment(0).unwrap();
        let last = data.len() - record::framed_len(want[want.len() - 1].len());
        let at = flip.index(last);
        data[at] ^= mask;
        let mut unsynced = Vec::new();
        for e in &tail[0] {
            record::encode_entry(&mut unsynced, e);
        }
        data.extend_from_slice(&unsynced[..keep.index(unsynced.len() + 1)]);
        mem.put_segment(0, data);
        let (_, rec) = open(&mem, LogConfig::default());
        prop_assert!(rec.lost_synced_data());
        prop_assert_eq!(rec.torn_bytes, 0);
        // Cut at the record holding the changed byte.
        let mut start = 0;
        let mut before = 0;
        for e in &want {
            let next = start + record::framed_len(e.len());
            if next > at {
                break;
            }
            start = next;
            before += 1;
        }
        prop_assert_eq!(bodies(&rec), want[..before].to_vec());
    }
}

#[test]
fn a_detached_sync_makes_durable_what_was_written_before_it_and_not_after() {
    let mem = MemBackend::new();
    let (mut log, _) = open(&mem, LogConfig::default());
    log.append(&entry(0)).unwrap();
    let first = log.write().unwrap();
    assert_eq!(first.lsn, Lsn(1));
    // The next group is written while the first one's sync has not run.
    log.append(&entry(1)).unwrap();
    let second = log.write().unwrap();
    assert_eq!((second.lsn, log.durable_lsn()), (Lsn(2), Lsn(0)));
    first.sync.expect("a sync to run").run().unwrap();
    log.synced(first.lsn);
    assert_eq!(log.durable_lsn(), Lsn(1));
    // A crash now keeps the first group only: the second was not synced.
    let snapshot = MemBackend::new();
    for (seg, data) in mem.synced_segments() {
        snapshot.put_segment(seg, data);
    }
    let (_, rec) = open(&snapshot, LogConfig::default());
    assert_eq!(bodies(&rec), vec![entry(0)]);
    second.sync.expect("a sync to run").run().unwrap();
    log.synced(second.lsn);
    mem.crash(|_, _| 0);
    let (_, rec) = open(&mem, LogConfig::default());
    assert_eq!(bodies(&rec), vec![entry(0), entry(1)]);
}

#[test]
fn write_with_nothing_new_after_a_commit_has_no_sync_and_a_failed_one_poisons() {
    let mem = MemBackend::new();
    let mut log = committed(&mem, LogConfig::default(), 2);
    let nothing = log.write().unwrap();
    assert!(nothing.sync.is_none());
    assert_eq!((nothing.lsn, log.durable_lsn()), (Lsn(2), Lsn(2)));
    log.append(&entry(2)).unwrap();
    let w = log.write().unwrap();
    mem.fail_syncs(true);
    assert!(w.sync.expect("a sync to run").run().is_err());
    log.poison();
    assert!(matches!(log.append(&entry(3)), Err(LogError::Poisoned)));
    assert_eq!(log.durable_lsn(), Lsn(2));
}

#[test]
fn writes_across_segments_sync_the_ones_left_behind() {
    let cfg = small();
    let mem = MemBackend::new();
    let (mut log, _) = open(&mem, cfg.clone());
    for i in 0..10 {
        log.append(&entry(i)).unwrap();
    }
    let w = log.write().unwrap();
    assert!(log.segments() > 1);
    // Without the last segment's sync, a crash keeps every segment before it.
    let snapshot = MemBackend::new();
    for (seg, data) in mem.synced_segments() {
        snapshot.put_segment(seg, data);
    }
    let (_, rec) = open(&snapshot, cfg.clone());
    let kept = rec.entries.len();
    assert!(kept > 0 && kept < 10, "kept {kept}");
    w.sync.expect("a sync to run").run().unwrap();
    mem.crash(|_, _| 0);
    let (_, rec) = open(&mem, cfg);
    assert_eq!(rec.entries.len(), 10);
}
