//! Storage backends for the log: segments as files in a directory ([`FsBackend`]), or an
//! in-memory disk that can crash and fail on demand ([`MemBackend`]).
//!
//! A segment is named by a number. The log appends to segments, syncs them, truncates a
//! damaged tail, and creates and removes whole segments; nothing is overwritten in place.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod mem;

pub use mem::{MemBackend, MemStats, MemSync};

/// A sync of one segment taken from its backend and run apart from it (on another thread),
/// while appends go on: what was appended to the segment before it was taken is durable
/// once [`run`](Self::run) returns `Ok`; what is appended meanwhile may or may not be.
pub trait DetachedSync: Send + 'static {
    /// Makes the segment's data durable (`fdatasync`).
    fn run(self) -> io::Result<()>;
}

/// Where a log's segments live: files in a directory, or a simulated disk.
///
/// Durability follows POSIX files: appended bytes are durable once [`sync`](Self::sync)
/// returns; a created or removed segment only once [`sync_dir`](Self::sync_dir) returns.
pub trait Backend: Send + 'static {
    /// A sync run apart from the backend ([`detached_sync`](Self::detached_sync)).
    type Sync: DetachedSync;
    /// The segment numbers present, in any order.
    fn list(&mut self) -> io::Result<Vec<u64>>;
    /// The whole content of segment `seg`. Fails with [`io::ErrorKind::FileTooLarge`] if it
    /// is longer than `max` bytes, without reading it (a hostile disk must not make the
    /// reader allocate without bound).
    fn read(&mut self, seg: u64, max: usize) -> io::Result<Vec<u8>>;
    /// Creates segment `seg`, empty. Fails if it exists.
    fn create(&mut self, seg: u64) -> io::Result<()>;
    /// Appends `bytes` to segment `seg` (not durable until [`sync`](Self::sync)). A full
    /// disk fails with [`io::ErrorKind::StorageFull`].
    fn append(&mut self, seg: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes the data of segment `seg` durable (`fdatasync`).
    fn sync(&mut self, seg: u64) -> io::Result<()>;
    /// A sync of segment `seg` to run apart from the backend, so that the next appends
    /// need not wait for it (a group commit written while the previous one syncs).
    fn detached_sync(&mut self, seg: u64) -> io::Result<Self::Sync>;
    /// Cuts segment `seg` to `len` bytes, at most its length (durable after
    /// [`sync`](Self::sync)).
    fn truncate(&mut self, seg: u64, len: u64) -> io::Result<()>;
    /// Removes segment `seg`.
    fn remove(&mut self, seg: u64) -> io::Result<()>;
    /// Makes the creations and removals so far durable (`fsync` of the directory).
    fn sync_dir(&mut self) -> io::Result<()>;
}

/// Segments as files `{seg:016x}.log` in a directory; other files there are ignored.
#[derive(Debug)]
pub struct FsBackend {
    dir: PathBuf,
    /// Open handles of the segments appended to, kept for the next append (shared with the
    /// detached syncs under way).
    files: HashMap<u64, Arc<File>>,
}

impl FsBackend {
    /// Uses `dir` for the segments. If it does not exist, it is created and its entry made
    /// durable (the parent directory synced).
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir)?;
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            File::open(parent.unwrap_or(Path::new(".")))?.sync_all()?;
        }
        Ok(FsBackend {
            dir,
            files: HashMap::new(),
        })
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, seg: u64) -> PathBuf {
        self.dir.join(format!("{seg:016x}.log"))
    }

    /// The open handle of `seg`, opened for appending if it is not yet.
    fn file(&mut self, seg: u64) -> io::Result<&Arc<File>> {
        if !self.files.contains_key(&seg) {
            let file = OpenOptions::new().append(true).open(self.path(seg))?;
            self.files.insert(seg, Arc::new(file));
        }
        Ok(self.files.get(&seg).expect("inserted above"))
    }
}

/// A detached `fdatasync` of a segment file ([`FsBackend`]'s [`Backend::Sync`]).
#[derive(Debug)]
pub struct FsSync(Arc<File>);

impl DetachedSync for FsSync {
    fn run(self) -> io::Result<()> {
        self.0.sync_data()
    }
}

/// The segment number of a file name `{seg:016x}.log` (lowercase hex), if it is one.
fn segment_number(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".log")?;
    let lower = hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if hex.len() != 16 || !lower {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

impl Backend for FsBackend {
    type Sync = FsSync;

    fn list(&mut self) -> io::Result<Vec<u64>> {
        let mut segs = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Some(seg) = entry.file_name().to_str().and_then(segment_number) {
                if entry.file_type()?.is_file() {
                    segs.push(seg);
                }
            }
        }
        Ok(segs)
    }

    fn read(&mut self, seg: u64, max: usize) -> io::Result<Vec<u8>> {
        let file = File::open(self.path(seg))?;
        let too_large = || io::Error::new(io::ErrorKind::FileTooLarge, "segment over the limit");
        let len = usize::try_from(file.metadata()?.len()).map_err(|_| too_large())?;
        if len > max {
            return Err(too_large());
        }
        // Bounded even if the file grows meanwhile.
        let mut data = Vec::with_capacity(len);
        file.take(max as u64 + 1).read_to_end(&mut data)?;
        if data.len() > max {
            return Err(too_large());
        }
        Ok(data)
    }

    fn create(&mut self, seg: u64) -> io::Result<()> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(self.path(seg))?;
        self.files.insert(seg, Arc::new(file));
        Ok(())
    }

    fn append(&mut self, seg: u64, bytes: &[u8]) -> io::Result<()> {
        (&**self.file(seg)?).write_all(bytes)
    }

    fn sync(&mut self, seg: u64) -> io::Result<()> {
        self.file(seg)?.sync_data()
    }

    fn detached_sync(&mut self, seg: u64) -> io::Result<FsSync> {
        Ok(FsSync(Arc::clone(self.file(seg)?)))
    }

    fn truncate(&mut self, seg: u64, len: u64) -> io::Result<()> {
        self.file(seg)?.set_len(len)
    }

    fn remove(&mut self, seg: u64) -> io::Result<()> {
        self.files.remove(&seg);
        std::fs::remove_file(self.path(seg))
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_names_and_limits() {
        assert_eq!(segment_number("00000000000000ff.log"), Some(255));
        assert_eq!(segment_number("00000000000000FF.log"), None);
        assert_eq!(segment_number("ff.log"), None);
        assert_eq!(segment_number("clock"), None);
        let dir = tempfile::tempdir().unwrap();
        let mut fs = FsBackend::open(dir.path().join("log")).unwrap();
        std::fs::write(fs.dir().join("clock"), b"x").unwrap();
        fs.create(7).unwrap();
        fs.append(7, b"abcdef").unwrap();
        fs.sync(7).unwrap();
        fs.sync_dir().unwrap();
        assert_eq!(fs.list().unwrap(), vec![7]);
        let err = fs.read(7, 5).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        fs.truncate(7, 2).unwrap();
        fs.append(7, b"z").unwrap();
        assert_eq!(fs.read(7, 5).unwrap(), b"abz");
        fs.remove(7).unwrap();
        assert!(fs.list().unwrap().is_empty());
    }
}
