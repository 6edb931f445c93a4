//! The two storage engines measured, redb (a B-tree) and fjall (an LSM tree), as [`Store`]s.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use redb::{Durability, TableDefinition};

use super::{Key, Result, Store};

/// The one table: (source, incarnation, slot) -> payload.
const TABLE: TableDefinition<(u64, u64, u64), &[u8]> = TableDefinition::new("deliveries");

/// A redb database, every commit `Durability::Immediate` (written and synced on return).
pub struct Redb {
    db: redb::Database,
}

impl Redb {
    /// Creates the database file in `dir`, with its table.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = redb::Database::create(dir.join("deliveries.redb"))?;
        let tx = db.begin_write()?;
        tx.open_table(TABLE)?;
        tx.commit()?;
        Ok(Redb { db })
    }

    fn commit(
        &self,
        f: impl FnOnce(&mut redb::Table<(u64, u64, u64), &[u8]>) -> Result<()>,
    ) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(Durability::Immediate)?;
        {
            let mut table = tx.open_table(TABLE)?;
            f(&mut table)?;
        }
        tx.commit()?;
        Ok(())
    }
}

impl Store for Redb {
    fn put(&mut self, keys: &[Key], payload: &[u8]) -> Result<()> {
        self.commit(|t| {
            for k in keys {
                t.insert((k.source, k.incarnation, k.slot), payload)?;
            }
            Ok(())
        })
    }

    fn take(&mut self, keys: &[Key]) -> Result<()> {
        self.commit(|t| {
            for k in keys {
                t.remove((k.source, k.incarnation, k.slot))?;
            }
            Ok(())
        })
    }

    /// `Database::compact` until it finds nothing more to do.
    fn compact(&mut self) -> Result<()> {
        while self.db.compact()? {}
        Ok(())
    }
}

/// A fjall database with one keyspace, every write batch persisted with
/// `PersistMode::SyncData` (`fdatasync` of the journal, as redb and the log do) on commit.
pub struct Fjall {
    db: Database,
    keyspace: Keyspace,
}

impl Fjall {
    /// Creates the database in `dir`, with its keyspace.
    pub fn open(dir: &Path) -> Result<Self> {
        let db = Database::builder(dir.join("deliveries.fjall")).open()?;
        let keyspace = db.keyspace("deliveries", KeyspaceCreateOptions::default)?;
        Ok(Fjall { db, keyspace })
    }
}

impl Store for Fjall {
    fn put(&mut self, keys: &[Key], payload: &[u8]) -> Result<()> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncData));
        for k in keys {
            batch.insert(&self.keyspace, &k.to_bytes()[..], payload);
        }
        batch.commit()?;
        Ok(())
    }

    fn take(&mut self, keys: &[Key]) -> Result<()> {
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncData));
        for k in keys {
            batch.remove(&self.keyspace, &k.to_bytes()[..]);
        }
        batch.commit()?;
        Ok(())
    }

    /// Flushes the memtable and compacts the tree at once (fjall's own test hooks; left
    /// alone, it flushes and compacts in the background when its thresholds are reached).
    fn compact(&mut self) -> Result<()> {
        self.keyspace.rotate_memtable_and_wait()?;
        self.keyspace.major_compact()?;
        Ok(())
    }
}
