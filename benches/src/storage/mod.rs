//! Durable storage candidates for issue 22 (redb, fjall, an append-only log) under group commit.
//!
//! Each cell opens a fresh store in a temporary directory, inserts batches of 1 KB records
//! (each batch committed durably) for a bounded time, then deletes them in batches of the same
//! size (the "take" path, also durable). A space test inserts and deletes 10 000 records and
//! reports the store's size after each step and after its compaction.

mod engines;
mod log;

use std::error::Error;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

pub use self::engines::{Fjall, Redb};
pub use self::log::Log;

/// Errors of the candidates, boxed: the bench reports and stops.
pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Bytes of a record's payload (a delivery).
pub const PAYLOAD: usize = 1024;
/// Records per durable commit, one cell each.
pub const BATCHES: [usize; 3] = [1, 16, 256];
/// At most this many records are inserted per cell (bounds the disk used: about 100 MB).
const MAX_RECORDS: usize = 100_000;
/// Records inserted and deleted by the space test.
const SPACE_RECORDS: usize = 10_000;
/// Samples of the raw `fdatasync` latency.
const FSYNC_SAMPLES: usize = 200;

/// A record's key: the sending node, its incarnation, the message's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// The source node id.
    pub source: u64,
    /// The source's incarnation.
    pub incarnation: u64,
    /// The message's slot.
    pub slot: u64,
}

impl Key {
    /// The `i`-th key of a run: 16 sources, their slots in order, interleaved.
    pub fn nth(i: usize) -> Self {
        let i = i as u64;
        Key {
            source: i % 16,
            incarnation: 1,
            slot: i / 16,
        }
    }

    /// Big-endian bytes, so that byte order is key order.
    pub fn to_bytes(self) -> [u8; 24] {
        let mut b = [0; 24];
        b[..8].copy_from_slice(&self.source.to_be_bytes());
        b[8..16].copy_from_slice(&self.incarnation.to_be_bytes());
        b[16..].copy_from_slice(&self.slot.to_be_bytes());
        b
    }

    /// The key of [`Key::to_bytes`]'s bytes.
    pub fn from_bytes(b: &[u8; 24]) -> Self {
        let word = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Key {
            source: word(0),
            incarnation: word(8),
            slot: word(16),
        }
    }
}

/// A durable store of records: every call returns once its batch is on stable storage.
pub trait Store {
    /// Inserts one record per key, all with `payload`, in one durable commit.
    fn put(&mut self, keys: &[Key], payload: &[u8]) -> Result<()>;
    /// Deletes the records of `keys` in one durable commit.
    fn take(&mut self, keys: &[Key]) -> Result<()>;
    /// Gives back the space of deleted records, as far as the engine can.
    fn compact(&mut self) -> Result<()>;
}

/// A candidate: its name and how to open a fresh store in a directory.
struct Candidate {
    name: &'static str,
    open: fn(&Path) -> Result<Box<dyn Store>>,
}

const CANDIDATES: [Candidate; 4] = [
    Candidate {
        name: "redb",
        open: |d| Ok(Box::new(Redb::open(d)?)),
    },
    Candidate {
        name: "fjall",
        open: |d| Ok(Box::new(Fjall::open(d)?)),
    },
    Candidate {
        name: "log",
        open: |d| Ok(Box::new(Log::open(d)?)),
    },
    Candidate {
        name: "logpre",
        open: |d| Ok(Box::new(Log::open_preallocated(d)?)),
    },
];

/// One cell's figures: a candidate at one batch size.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Records inserted (and committed) per second.
    pub put_rate: f64,
    /// Median time of one batch's insert and commit.
    pub p50: Duration,
    /// 99th percentile of the same.
    pub p99: Duration,
    /// Records deleted (and committed) per second.
    pub take_rate: f64,
}

/// The space test's sizes, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Space {
    /// After inserting the records.
    pub full: u64,
    /// After deleting them all.
    pub deleted: u64,
    /// After the engine's compaction.
    pub compacted: u64,
    /// How long the compaction took.
    pub compact_time: Duration,
}

/// A 1 KB payload of pseudo-random (incompressible) bytes.
fn payload() -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..PAYLOAD)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The `q`-quantile of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// Runs one cell: batches of `batch` records inserted for about `secs`, then deleted.
fn cell(store: &mut dyn Store, batch: usize, secs: f64) -> Result<Cell> {
    let payload = payload();
    let budget = Duration::from_secs_f64(secs);
    let mut keys = Vec::with_capacity(batch);
    let mut lat = Vec::new();
    let mut n = 0;
    let start = Instant::now();
    while start.elapsed() < budget && n + batch <= MAX_RECORDS {
        keys.clear();
        keys.extend((n..n + batch).map(Key::nth));
        let t = Instant::now();
        store.put(&keys, &payload)?;
        lat.push(t.elapsed());
        n += batch;
    }
    let put_rate = n as f64 / start.elapsed().as_secs_f64();
    lat.sort_unstable();
    let mut taken = 0;
    let start = Instant::now();
    while start.elapsed() < budget && taken < n {
        keys.clear();
        keys.extend((taken..taken + batch).map(Key::nth));
        store.take(&keys)?;
        taken += batch;
    }
    let take_rate = taken as f64 / start.elapsed().as_secs_f64();
    Ok(Cell {
        put_rate,
        p50: quantile(&lat, 0.5),
        p99: quantile(&lat, 0.99),
        take_rate,
    })
}

/// Bytes allocated on disk to the files under `dir` (sparse files count what they hold).
fn disk_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            disk_bytes(&entry.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}

/// Inserts and deletes [`SPACE_RECORDS`] records in batches of 256 in a store kept in `dir`;
/// the sizes on the way.
fn space(store: &mut dyn Store, dir: &Path) -> Result<Space> {
    let payload = payload();
    let all: Vec<Key> = (0..SPACE_RECORDS).map(Key::nth).collect();
    for keys in all.chunks(256) {
        store.put(keys, &payload)?;
    }
    let full = disk_bytes(dir)?;
    for keys in all.chunks(256) {
        store.take(keys)?;
    }
    let deleted = disk_bytes(dir)?;
    let t = Instant::now();
    store.compact()?;
    let compact_time = t.elapsed();
    Ok(Space {
        full,
        deleted,
        compacted: disk_bytes(dir)?,
        compact_time,
    })
}

/// Raw `fdatasync` latency: 4 KB written then synced, [`FSYNC_SAMPLES`] times, either over
/// the same block (`append` false) or appended to a growing file; sorted.
fn fsync_latency(dir: &Path, append: bool) -> Result<Vec<Duration>> {
    let path = dir.join(if append {
        "fsync-append"
    } else {
        "fsync-overwrite"
    });
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let block = vec![0xa5_u8; 4096];
    file.write_all(&block)?;
    file.sync_all()?;
    let mut lat = Vec::with_capacity(FSYNC_SAMPLES);
    for _ in 0..FSYNC_SAMPLES {
        if !append {
            file.seek(SeekFrom::Start(0))?;
        }
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        lat.push(t.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path)?;
    lat.sort_unstable();
    Ok(lat)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn kib(bytes: u64) -> String {
    format!("{:.0} KiB", bytes as f64 / 1024.0)
}

/// Runs the fsync probe, every candidate at every batch size for about `secs` per phase, and
/// the space test, in a temporary directory under `parent` (the system's by default); prints
/// tables and a last line of `key=value` pairs.
pub fn run(secs: f64, parent: Option<&Path>) -> Result<()> {
    let root = match parent {
        Some(p) => tempfile::Builder::new()
            .prefix("exon-storage")
            .tempdir_in(p)?,
        None => tempfile::Builder::new().prefix("exon-storage").tempdir()?,
    };
    println!(
        "directory: {} ({secs} s per phase, {PAYLOAD} B payloads)",
        root.path().display()
    );
    let mut kv = Vec::new();

    let over = fsync_latency(root.path(), false)?;
    let append = fsync_latency(root.path(), true)?;
    println!("\nfdatasync of 4 KB, {FSYNC_SAMPLES} times: p50 / p99 (us)");
    for (name, lat) in [("overwrite", &over), ("append", &append)] {
        let (p50, p99) = (micros(quantile(lat, 0.5)), micros(quantile(lat, 0.99)));
        println!(
            "  {name:<9} {p50:>8.0} {p99:>8.0}   ({:.0} syncs/s at p50)",
            1e6 / p50
        );
    }
    kv.push(format!("fsync_p50_us={:.0}", micros(quantile(&over, 0.5))));
    kv.push(format!("fsync_p99_us={:.0}", micros(quantile(&over, 0.99))));
    kv.push(format!(
        "fsync_append_p50_us={:.0}",
        micros(quantile(&append, 0.5))
    ));

    let mut takes = Vec::new();
    println!("\n| store | batch | insert+commit rec/s | p50 us | p99 us | delete+commit rec/s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for cand in &CANDIDATES {
        for batch in BATCHES {
            let dir = tempfile::Builder::new()
                .prefix(cand.name)
                .tempdir_in(root.path())?;
            let c = {
                let mut store = (cand.open)(dir.path())?;
                cell(store.as_mut(), batch, secs)?
            };
            println!(
                "| {} | {batch} | {:.0} | {:.0} | {:.0} | {:.0} |",
                cand.name,
                c.put_rate,
                micros(c.p50),
                micros(c.p99),
                c.take_rate
            );
            kv.push(format!("{}_b{batch}={:.0}", cand.name, c.put_rate));
            takes.push(format!("{}_take_b{batch}={:.0}", cand.name, c.take_rate));
        }
    }
    kv.append(&mut takes);

    println!(
        "\n| store | {SPACE_RECORDS} records inserted | all deleted | compacted | compaction ms |"
    );
    println!("|---|---:|---:|---:|---:|");
    for cand in &CANDIDATES {
        let dir = tempfile::Builder::new()
            .prefix(cand.name)
            .tempdir_in(root.path())?;
        let s = {
            let mut store = (cand.open)(dir.path())?;
            space(store.as_mut(), dir.path())?
        };
        println!(
            "| {} | {} | {} | {} | {:.0} |",
            cand.name,
            kib(s.full),
            kib(s.deleted),
            kib(s.compacted),
            s.compact_time.as_secs_f64() * 1e3
        );
        kv.push(format!(
            "{}_space_deleted_kib={}",
            cand.name,
            s.deleted / 1024
        ));
        kv.push(format!(
            "{}_space_compacted_kib={}",
            cand.name,
            s.compacted / 1024
        ));
    }
    println!("\n{}", kv.join(" "));
    Ok(())
}
