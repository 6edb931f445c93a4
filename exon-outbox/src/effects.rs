//! The receiver's database in redb: the effects of the messages it processed, and their
//! stable ids, committed together.

use std::collections::HashMap;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::Error;

/// A message's stable id at the receiver (`Message::stable_id()`): the sender, the
/// receiver incarnation, the slot.
pub type StableId = (u64, u64, u64);

/// The ids of the messages processed.
const PROCESSED: TableDefinition<StableId, ()> = TableDefinition::new("processed");
/// The effects, one row per processing, in order: the item and the message's id. A message
/// processed twice would leave two rows (the test counts them).
const EFFECTS: TableDefinition<u64, (u64, StableId)> = TableDefinition::new("effects");

/// A message delivered to the receiving application.
#[derive(Debug, Clone, Copy)]
pub struct Delivered {
    /// Its stable id.
    pub id: StableId,
    /// The item it carries.
    pub item: u64,
    /// Whether it was handed out before a restart and not acknowledged then.
    pub redelivery: bool,
}

/// The receiver's database.
#[derive(Debug)]
pub struct Effects {
    db: Database,
}

/// What the effects say: how many times each item was processed, and under how many ids.
#[derive(Debug, Default)]
pub struct Tally {
    /// Times each item was processed.
    pub items: HashMap<u64, u32>,
    /// Effects recorded under a stable id that another effect has too.
    pub same_id: u64,
    /// Effects in all.
    pub effects: u64,
}

impl Tally {
    /// Items of `1..=count` processed more than once, and the extra times.
    pub fn twice(&self, count: u64) -> u64 {
        (1..=count)
            .map(|i| u64::from(self.items.get(&i).copied().unwrap_or(0).saturating_sub(1)))
            .sum()
    }

    /// Items of `1..=count` never processed.
    pub fn missing(&self, count: u64) -> u64 {
        (1..=count).filter(|i| !self.items.contains_key(i)).count() as u64
    }

    /// Effects of items outside `1..=count`.
    pub fn strays(&self, count: u64) -> u64 {
        let stray = |i: &u64| *i == 0 || *i > count;
        self.items
            .iter()
            .filter(|(i, _)| stray(i))
            .map(|(_, n)| u64::from(*n))
            .sum()
    }
}

impl Effects {
    /// Opens (or creates) the database at `path`, with its tables.
    pub fn open(path: &Path) -> Result<Effects, Error> {
        let db = Database::create(path)?;
        let tx = db.begin_write()?;
        tx.open_table(PROCESSED)?;
        tx.open_table(EFFECTS)?;
        tx.commit()?;
        Ok(Effects { db })
    }

    /// Processes `batch` in one transaction: each message's effect and its stable id
    /// together, except a redelivery whose id is there already (processed before the
    /// crash). Returns how many were processed now. Once it returns, every message of the
    /// batch may be acknowledged.
    pub fn process(&self, batch: &[Delivered]) -> Result<usize, Error> {
        let tx = self.db.begin_write()?;
        let mut n = 0;
        {
            let mut processed = tx.open_table(PROCESSED)?;
            let mut effects = tx.open_table(EFFECTS)?;
            let mut next = effects.last()?.map_or(0, |(k, _)| k.value() + 1);
            for m in batch {
                // Unflagged messages were never handed out before: no lookup.
                if m.redelivery && processed.get(m.id)?.is_some() {
                    continue;
                }
                processed.insert(m.id, ())?;
                effects.insert(next, (m.item, m.id))?;
                next += 1;
                n += 1;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// Counts the effects.
    pub fn tally(&self) -> Result<Tally, Error> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(EFFECTS)?;
        let mut tally = Tally::default();
        let mut ids: HashMap<StableId, u32> = HashMap::new();
        for row in table.iter()? {
            let (item, id) = row?.1.value();
            *tally.items.entry(item).or_default() += 1;
            *ids.entry(id).or_default() += 1;
            tally.effects += 1;
        }
        tally.same_id = ids
            .values()
            .filter(|n| **n > 1)
            .map(|n| u64::from(*n))
            .sum();
        Ok(tally)
    }
}
