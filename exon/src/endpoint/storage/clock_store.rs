//! Durable storage of the node clock's high-water mark (rule 8 of `docs/algorithm.md`).

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where an endpoint keeps its clock high-water mark, so that a restarted endpoint never
/// reuses a clock value and exactly-once survives restarts.
///
/// The driver calls [`load`](Self::load) once when the endpoint is built and
/// [`store`](Self::store) before the node may use clock values up to the stored mark. When
/// [`is_blocking`](Self::is_blocking) is true the driver runs `store` on tokio's blocking
/// thread pool (`spawn_blocking`) and keeps serving the network meanwhile; otherwise it
/// calls it inline.
pub trait ClockStore: Send + 'static {
    /// The last high-water mark stored (the clock a restarted node starts from).
    fn load(&mut self) -> io::Result<u64>;
    /// Stores `high_water` durably; returns only once a restart would see it.
    fn store(&mut self, high_water: u64) -> io::Result<()>;
    /// Whether `store` blocks (disk I/O). Default `true`.
    fn is_blocking(&self) -> bool {
        true
    }
    /// Whether this store holds a mark stored by an earlier run (`Some(true)`), holds none
    /// (`Some(false)`: a first start), or cannot tell (`None`, the default). Asked once,
    /// after [`load`](Self::load) and before any `store` of this run.
    ///
    /// A durable endpoint (`Builder::durable`) whose journal is found new while its clock
    /// store says it ran before takes the journal as lost or replaced
    /// (`Recovered::replaced`): it may have forgotten keys it had accepted, so keyed sends
    /// are refused until the application settles them (`Handle::settle_keys`). A store
    /// that answers `None` cannot tell a lost journal from a first start, and a row sent
    /// again under a forgotten key may then be delivered a second time.
    fn stored_before(&mut self) -> io::Result<Option<bool>> {
        Ok(None)
    }
}

/// Microseconds since the Unix epoch: a value that grows across restarts, used as a start
/// when nothing was stored.
pub fn wall_clock_start() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}

/// An in-memory store, the default. It starts from [`wall_clock_start`] (microseconds since
/// the Unix epoch), which grows across process restarts as long as the node hands out fewer
/// than about a million clock values per second of downtime-free operation and the wall clock
/// does not go back: good enough for most services, but only a [`FileStore`] makes
/// exactly-once survive restarts for sure.
///
/// Clones share the stored value: an endpoint rebuilt on a clone (a restart within the same
/// process, as in tests) starts from the last stored mark, and knows that it ran before
/// ([`ClockStore::stored_before`]).
#[derive(Debug, Clone)]
pub struct MemoryStore(Arc<Mark>);

/// A [`MemoryStore`]'s value, and whether anything was stored in it.
#[derive(Debug)]
struct Mark {
    value: AtomicU64,
    stored: AtomicBool,
}

impl MemoryStore {
    /// A store starting from [`wall_clock_start`].
    pub fn new() -> Self {
        Self::starting_at(wall_clock_start())
    }

    /// A store starting from `clock`.
    pub fn starting_at(clock: u64) -> Self {
        MemoryStore(Arc::new(Mark {
            value: AtomicU64::new(clock),
            stored: AtomicBool::new(false),
        }))
    }

    /// The value currently stored.
    pub fn get(&self) -> u64 {
        self.0.value.load(Ordering::SeqCst)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl ClockStore for MemoryStore {
    fn load(&mut self) -> io::Result<u64> {
        Ok(self.get())
    }

    fn store(&mut self, high_water: u64) -> io::Result<()> {
        self.0.value.fetch_max(high_water, Ordering::SeqCst);
        self.0.stored.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn is_blocking(&self) -> bool {
        false
    }

    /// Whether this store or a clone of it was stored in before.
    fn stored_before(&mut self) -> io::Result<Option<bool>> {
        Ok(Some(self.0.stored.load(Ordering::SeqCst)))
    }
}

/// A store in one small file holding the high-water mark as decimal text.
///
/// Each `store` writes a uniquely named temporary file beside it (`tempfile`), fsyncs it,
/// renames it over the file and fsyncs the directory, so a crash leaves either the old or the
/// new value, and two stores never share a temporary file. It runs on
/// tokio's blocking pool. A missing file starts from [`wall_clock_start`].
///
/// [`load`](ClockStore::load) never returns less than the wall clock
/// ([`wall_clock_start`], microseconds since the Unix epoch): a node restarted on an older
/// copy of its directory (a backup restored, a VM snapshot rolled back) then starts above
/// every clock value the lost run used, so it reuses no incarnation and no nonce epoch, as
/// long as the clock has not run ahead of the wall clock and the wall clock does not go
/// back. The clock advances by one per slot and per incarnation, and each restart moves it
/// to the stored mark, up to `clock_block` (2^20 by default, about a second of
/// microseconds) past the last value used: it stays behind the wall clock while the node
/// averages fewer than a million slots a second and restarts less than about once a
/// second (a tight crash loop runs it ahead, and a copy restored then may reuse values).
pub struct FileStore {
    path: PathBuf,
}

impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore")
            .field("path", &self.path)
            .finish()
    }
}

impl FileStore {
    /// A store at `path` (created on first store).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileStore { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl ClockStore for FileStore {
    fn load(&mut self) -> io::Result<u64> {
        match fs::read_to_string(&self.path) {
            Ok(s) => s
                .trim()
                .parse::<u64>()
                .map(|stored| stored.max(wall_clock_start()))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(wall_clock_start()),
            Err(e) => Err(e),
        }
    }

    fn store(&mut self, high_water: u64) -> io::Result<()> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // A uniquely named temporary file in the same directory (so the rename is atomic),
        // removed if anything fails before it replaces the file.
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        writeln!(tmp, "{high_water}")?;
        tmp.as_file().sync_all()?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        fs::File::open(dir)?.sync_all()
    }

    /// Whether the file exists.
    fn stored_before(&mut self) -> io::Result<Option<bool>> {
        match fs::metadata(&self.path) {
            Ok(_) => Ok(Some(true)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Some(false)),
            Err(e) => Err(e),
        }
    }
}

/// One clock store shared by the shards of an endpoint: every shard stores through it, and
/// it writes only a mark above every mark stored so far, so the store always holds the
/// highest mark any shard asked for. A restarted endpoint (with any number of shards) then
/// starts every shard above every clock value any shard used: no incarnation and no nonce
/// epoch of a peer's owner is ever reused, even when the peer moves to another shard.
#[derive(Clone)]
pub(crate) struct SharedStore {
    inner: Arc<std::sync::Mutex<(Box<dyn ClockStore>, u64)>>,
    blocking: bool,
}

impl SharedStore {
    /// Shares `store`, which holds `loaded` now.
    pub(crate) fn new(store: Box<dyn ClockStore>, loaded: u64) -> SharedStore {
        let blocking = store.is_blocking();
        SharedStore {
            inner: Arc::new(std::sync::Mutex::new((store, loaded))),
            blocking,
        }
    }
}

impl ClockStore for SharedStore {
    fn load(&mut self) -> io::Result<u64> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(inner.1)
    }

    fn store(&mut self, high_water: u64) -> io::Result<()> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if high_water <= inner.1 {
            // A mark at least as high is stored already.
            return Ok(());
        }
        inner.0.store(high_water)?;
        inner.1 = high_water;
        Ok(())
    }

    fn is_blocking(&self) -> bool {
        self.blocking
    }

    fn stored_before(&mut self) -> io::Result<Option<bool>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.0.stored_before()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every mark written.
    struct Log(Arc<std::sync::Mutex<Vec<u64>>>);

    impl ClockStore for Log {
        fn load(&mut self) -> io::Result<u64> {
            Ok(0)
        }
        fn store(&mut self, high_water: u64) -> io::Result<()> {
            self.0.lock().unwrap().push(high_water);
            Ok(())
        }
        fn is_blocking(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_shared_store_keeps_the_highest_mark_of_every_shard() {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let shared = SharedStore::new(Box::new(Log(log.clone())), 10);
        let (mut a, mut b) = (shared.clone(), shared);
        a.store(100).unwrap();
        // A lower mark from another shard is covered already: not written, never lowered.
        b.store(50).unwrap();
        b.store(100).unwrap();
        b.store(150).unwrap();
        a.store(120).unwrap();
        assert_eq!(*log.lock().unwrap(), [100, 150]);
        assert_eq!(a.load().unwrap(), 150);
    }

    #[test]
    fn file_and_memory_stores_say_whether_they_ran_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = FileStore::new(dir.path().join("clock"));
        assert_eq!(file.stored_before().unwrap(), Some(false));
        file.load().unwrap();
        assert_eq!(
            file.stored_before().unwrap(),
            Some(false),
            "a load stores nothing"
        );
        file.store(7).unwrap();
        assert_eq!(
            FileStore::new(file.path()).stored_before().unwrap(),
            Some(true)
        );
        let memory = MemoryStore::starting_at(5);
        assert_eq!(memory.clone().stored_before().unwrap(), Some(false));
        memory.clone().store(9).unwrap();
        assert_eq!(
            memory.clone().stored_before().unwrap(),
            Some(true),
            "clones share it"
        );
        // A shared store asks the one it shares; a store of the application's cannot tell.
        let mut shared = SharedStore::new(Box::new(memory.clone()), 9);
        assert_eq!(shared.stored_before().unwrap(), Some(true));
        let log = Log(Arc::new(std::sync::Mutex::new(Vec::new())));
        assert_eq!(
            SharedStore::new(Box::new(log), 0).stored_before().unwrap(),
            None
        );
    }
}
