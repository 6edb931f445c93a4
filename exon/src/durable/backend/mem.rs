//! [`MemBackend`]: an in-memory disk that crashes and fails on demand, for tests.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Backend, DetachedSync};

/// An in-memory disk for tests: a cheaply cloned handle to shared state, so that a test
/// keeps a handle while the log that owns another one "crashes".
///
/// It keeps, per segment, what a crash would leave (the durable content, and whether the
/// directory entry is durable) beside what is visible now. Faults: a byte budget after which
/// appends fail with [`io::ErrorKind::StorageFull`], failing syncs, and an operation budget
/// after which every mutating call fails (to stop a sequence at each of its steps).
#[derive(Debug, Clone, Default)]
pub struct MemBackend {
    disk: Arc<Mutex<MemDisk>>,
}

/// Counters of a [`MemBackend`], for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Successful [`Backend::sync`] calls.
    pub syncs: u64,
    /// Successful [`Backend::sync_dir`] calls.
    pub dir_syncs: u64,
    /// Bytes appended (those of a failed append included).
    pub bytes_written: u64,
}

#[derive(Debug, Default)]
struct MemDisk {
    segs: BTreeMap<u64, MemSeg>,
    /// Bytes appends may still write before failing with `StorageFull`; `None`: no limit.
    space: Option<u64>,
    /// Mutating calls that may still succeed; `None`: no limit.
    ops: Option<u64>,
    fail_syncs: bool,
    /// How long each sync takes (a slow disk).
    sync_delay: std::time::Duration,
    stats: MemStats,
}

#[derive(Debug, Default)]
struct MemSeg {
    /// The content visible now.
    data: Vec<u8>,
    /// The content a crash leaves.
    durable: Vec<u8>,
    /// Whether the segment is listed now.
    listed: bool,
    /// Whether a crash leaves it listed.
    durable_listed: bool,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected failure: {what}"))
}

fn not_found(seg: u64) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no segment {seg}"))
}

impl MemDisk {
    /// Spends one mutating operation of the budget.
    fn op(&mut self, what: &str) -> io::Result<()> {
        match &mut self.ops {
            Some(0) => Err(injected(what)),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn seg(&mut self, seg: u64) -> io::Result<&mut MemSeg> {
        match self.segs.get_mut(&seg) {
            Some(s) if s.listed => Ok(s),
            _ => Err(not_found(seg)),
        }
    }
}

impl MemBackend {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    fn disk(&self) -> MutexGuard<'_, MemDisk> {
        // A test that panicked while holding the lock poisons it; the disk state is still
        // consistent (every method finishes its change before it can fail).
        self.disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Simulates a power loss. Per segment, the bytes appended since its last sync are lost
    /// except the first `keep(seg, unsynced_len)` of them (clamped; a torn last write), and a
    /// truncation not yet synced is undone. Segments created or removed since the last
    /// [`sync_dir`](Backend::sync_dir) are gone or back. Fault settings stay.
    pub fn crash(&self, keep: impl FnMut(u64, usize) -> usize) {
        self.crash_with(keep, |_| false);
    }

    /// [`crash`](Self::crash), except that the creation or removal of segment `seg` since
    /// the last [`sync_dir`](Backend::sync_dir) persists if `keep_dir(seg)` (a file system may
    /// write some directory changes before it is asked to).
    pub fn crash_with(
        &self,
        mut keep: impl FnMut(u64, usize) -> usize,
        mut keep_dir: impl FnMut(u64) -> bool,
    ) {
        let mut disk = self.disk();
        for (&n, s) in disk.segs.iter_mut() {
            if s.listed != s.durable_listed && keep_dir(n) {
                s.durable_listed = s.listed;
            }
        }
        disk.segs.retain(|_, s| s.durable_listed);
        for (&n, s) in disk.segs.iter_mut() {
            if s.listed && s.data.starts_with(&s.durable) {
                let unsynced = s.data.len() - s.durable.len();
                let kept = keep(n, unsynced).min(unsynced);
                s.data.truncate(s.durable.len() + kept);
            } else {
                s.data = s.durable.clone();
            }
            s.durable = s.data.clone();
            s.listed = true;
        }
    }

    /// Lets appends write `n` more bytes, then fail with [`io::ErrorKind::StorageFull`] (the
    /// append that crosses the limit writes its bytes up to it).
    pub fn fail_after(&self, n: u64) {
        self.disk().space = Some(n);
    }

    /// Makes every append fail with [`io::ErrorKind::StorageFull`] (`true`), or lifts any
    /// space limit (`false`).
    pub fn set_full(&self, full: bool) {
        self.disk().space = full.then_some(0);
    }

    /// Makes [`Backend::sync`] and [`Backend::sync_dir`] fail (without making anything
    /// durable) while `fail` is set.
    pub fn fail_syncs(&self, fail: bool) {
        self.disk().fail_syncs = fail;
    }

    /// Makes every sync take `delay` (slept before it takes effect, without holding the
    /// disk): a slow disk, so that writes and syncs overlap in tests.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.disk().sync_delay = delay;
    }

    /// Sleeps for the sync delay.
    fn sync_wait(&self) {
        let delay = self.disk().sync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }

    /// Lets `n` more mutating calls (create, append, sync, truncate, remove, sync_dir)
    /// succeed, then fails every one (`Some`); `None` lifts the limit.
    pub fn fail_after_ops(&self, n: Option<u64>) {
        self.disk().ops = n;
    }

    /// The counters so far.
    pub fn stats(&self) -> MemStats {
        self.disk().stats
    }

    /// The segments listed now, in order.
    pub fn list_segments(&self) -> Vec<u64> {
        let disk = self.disk();
        disk.segs
            .iter()
            .filter(|(_, s)| s.listed)
            .map(|(&n, _)| n)
            .collect()
    }

    /// The visible content of segment `seg`, if it is listed.
    pub fn segment(&self, seg: u64) -> Option<Vec<u8>> {
        let disk = self.disk();
        disk.segs
            .get(&seg)
            .filter(|s| s.listed)
            .map(|s| s.data.clone())
    }

    /// The synced content of each segment whose creation is durable, in order: what a
    /// crash leaves at least (for tests that damage synced data).
    pub fn synced_segments(&self) -> Vec<(u64, Vec<u8>)> {
        let disk = self.disk();
        disk.segs
            .iter()
            .filter(|(_, s)| s.durable_listed)
            .map(|(&n, s)| (n, s.durable.clone()))
            .collect()
    }

    /// Changes byte `at` of the synced content of segment `seg` (XOR `mask`), as bit rot or
    /// a bad sector would: in what a crash leaves and in what is visible now. Returns
    /// whether there was such a byte.
    pub fn damage_synced(&self, seg: u64, at: usize, mask: u8) -> bool {
        let mut disk = self.disk();
        let Some(s) = disk.segs.get_mut(&seg) else {
            return false;
        };
        if at >= s.durable.len() {
            return false;
        }
        s.durable[at] ^= mask;
        if let Some(b) = s.data.get_mut(at) {
            *b ^= mask;
        }
        true
    }

    /// Replaces segment `seg` with `data`, durably (as if written and synced long ago):
    /// for tests that damage a disk.
    pub fn put_segment(&self, seg: u64, data: Vec<u8>) {
        let s = MemSeg {
            durable: data.clone(),
            data,
            listed: true,
            durable_listed: true,
        };
        self.disk().segs.insert(seg, s);
    }
}

/// A detached sync of a [`MemBackend`] segment: it makes durable what the segment held when
/// it was taken (not what was appended since), unless the segment was truncated below that
/// or removed meanwhile.
#[derive(Debug)]
pub struct MemSync {
    disk: Arc<Mutex<MemDisk>>,
    seg: u64,
    len: usize,
}

impl DetachedSync for MemSync {
    fn run(self) -> io::Result<()> {
        let backend = MemBackend { disk: self.disk };
        backend.sync_wait();
        let mut disk = backend.disk();
        disk.op("sync")?;
        if disk.fail_syncs {
            return Err(injected("sync"));
        }
        disk.stats.syncs += 1;
        // A removed segment: nothing left to sync (as `fdatasync` of an unlinked file).
        if let Some(s) = disk.segs.get_mut(&self.seg).filter(|s| s.listed) {
            if self.len > s.durable.len() && self.len <= s.data.len() {
                s.durable = s.data[..self.len].to_vec();
            }
        }
        Ok(())
    }
}

impl Backend for MemBackend {
    type Sync = MemSync;

    fn list(&mut self) -> io::Result<Vec<u64>> {
        Ok(self.list_segments())
    }

    fn read(&mut self, seg: u64, max: usize) -> io::Result<Vec<u8>> {
        let mut disk = self.disk();
        let s = disk.seg(seg)?;
        if s.data.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                "segment over the limit",
            ));
        }
        Ok(s.data.clone())
    }

    fn create(&mut self, seg: u64) -> io::Result<()> {
        let mut disk = self.disk();
        disk.op("create")?;
        let s = disk.segs.entry(seg).or_default();
        if s.listed {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "segment exists",
            ));
        }
        s.listed = true;
        s.data.clear();
        Ok(())
    }

    fn append(&mut self, seg: u64, bytes: &[u8]) -> io::Result<()> {
        let mut disk = self.disk();
        disk.op("append")?;
        disk.seg(seg)?;
        let room = disk
            .space
            .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let written = bytes.len().min(room);
        if let Some(n) = &mut disk.space {
            *n -= written as u64;
        }
        disk.stats.bytes_written += written as u64;
        disk.seg(seg)?.data.extend_from_slice(&bytes[..written]);
        if written < bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "simulated full disk",
            ));
        }
        Ok(())
    }

    fn sync(&mut self, seg: u64) -> io::Result<()> {
        self.sync_wait();
        let mut disk = self.disk();
        disk.op("sync")?;
        if disk.fail_syncs {
            return Err(injected("sync"));
        }
        let s = disk.seg(seg)?;
        s.durable = s.data.clone();
        disk.stats.syncs += 1;
        Ok(())
    }

    fn detached_sync(&mut self, seg: u64) -> io::Result<MemSync> {
        let len = self.disk().seg(seg)?.data.len();
        Ok(MemSync {
            disk: Arc::clone(&self.disk),
            seg,
            len,
        })
    }

    fn truncate(&mut self, seg: u64, len: u64) -> io::Result<()> {
        let mut disk = self.disk();
        disk.op("truncate")?;
        let s = disk.seg(seg)?;
        match usize::try_from(len) {
            Ok(len) if len <= s.data.len() => {
                s.data.truncate(len);
                Ok(())
            }
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "can only shrink",
            )),
        }
    }

    fn remove(&mut self, seg: u64) -> io::Result<()> {
        let mut disk = self.disk();
        disk.op("remove")?;
        let s = disk.seg(seg)?;
        s.listed = false;
        s.data.clear();
        Ok(())
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        let mut disk = self.disk();
        disk.op("sync_dir")?;
        if disk.fail_syncs {
            return Err(injected("sync_dir"));
        }
        disk.segs.retain(|_, s| s.listed);
        for s in disk.segs.values_mut() {
            s.durable_listed = true;
        }
        disk.stats.dir_syncs += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_crash_keeps_synced_data_and_a_chosen_prefix_of_the_rest() {
        let mut mem = MemBackend::new();
        mem.create(1).unwrap();
        mem.sync_dir().unwrap();
        mem.append(1, b"abc").unwrap();
        mem.sync(1).unwrap();
        mem.append(1, b"defg").unwrap();
        mem.create(2).unwrap(); // never made durable by sync_dir
        mem.crash(|seg, unsynced| {
            assert_eq!((seg, unsynced), (1, 4));
            2
        });
        assert_eq!(mem.list().unwrap(), vec![1]);
        assert_eq!(mem.read(1, 100).unwrap(), b"abcde");
        assert_eq!(mem.stats().syncs, 1);
    }

    #[test]
    fn mem_crash_undoes_unsynced_truncations_and_removals() {
        let mut mem = MemBackend::new();
        mem.put_segment(3, b"hello".to_vec());
        mem.put_segment(4, b"world".to_vec());
        mem.truncate(3, 2).unwrap();
        mem.remove(4).unwrap();
        assert_eq!(mem.list().unwrap(), vec![3]);
        mem.crash(|_, _| 0);
        assert_eq!(mem.list().unwrap(), vec![3, 4]);
        assert_eq!(mem.segment(3).unwrap(), b"hello");
        mem.remove(4).unwrap();
        mem.sync_dir().unwrap();
        mem.crash(|_, _| 0);
        assert_eq!(mem.list().unwrap(), vec![3]);
        // Directory changes a file system wrote early.
        mem.create(5).unwrap();
        mem.create(6).unwrap();
        mem.remove(3).unwrap();
        mem.crash_with(|_, _| 0, |seg| seg != 5);
        assert_eq!(mem.list().unwrap(), vec![6]);
    }

    #[test]
    fn mem_damage_changes_synced_bytes_only() {
        let mut mem = MemBackend::new();
        mem.create(1).unwrap();
        mem.sync_dir().unwrap();
        mem.append(1, b"abc").unwrap();
        mem.sync(1).unwrap();
        mem.append(1, b"de").unwrap();
        assert_eq!(mem.synced_segments(), vec![(1, b"abc".to_vec())]);
        assert!(mem.damage_synced(1, 1, 0x01));
        assert!(!mem.damage_synced(1, 3, 0x01), "not synced");
        assert_eq!(mem.segment(1).unwrap(), b"accde");
        mem.crash(|_, _| 0);
        assert_eq!(mem.segment(1).unwrap(), b"acc");
    }

    #[test]
    fn mem_faults_fail_as_configured() {
        let mut mem = MemBackend::new();
        mem.create(0).unwrap();
        mem.fail_after(4);
        let err = mem.append(0, b"123456").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::StorageFull);
        assert_eq!(mem.segment(0).unwrap(), b"1234");
        mem.set_full(false);
        mem.fail_syncs(true);
        assert!(mem.sync(0).is_err());
        mem.fail_syncs(false);
        mem.fail_after_ops(Some(1));
        mem.sync(0).unwrap();
        assert!(mem.append(0, b"x").is_err());
        assert_eq!(
            mem.read(0, 3).unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
    }
}
