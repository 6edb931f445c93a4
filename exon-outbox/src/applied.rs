//! The channel receiver's database in redb (`channel-node recv`): the channel's numbers it
//! applied, in the order applied, and the next number due, committed together; and any
//! breach of the channel's order it met.

use std::collections::HashMap;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::Error;

/// The effects, one row per message applied, in order: the message's number. A number
/// applied twice leaves two rows.
const APPLIED: TableDefinition<u64, u64> = TableDefinition::new("applied");
/// `next`: the number due next (one above the highest applied); `skipped`: flagged
/// redeliveries of numbers applied before (only acknowledged).
const STATE: TableDefinition<&str, u64> = TableDefinition::new("state");
/// What broke the channel's order, in the order met.
const VIOLATIONS: TableDefinition<u64, &str> = TableDefinition::new("violations");

/// A message delivered to the channel's receiving application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrival {
    /// Message `seq` of channel 0, carrying `item` (the sender's item, which it numbers
    /// as the channel does: `item` must be `seq`).
    Seq {
        /// Its number in the channel.
        seq: u64,
        /// The item it carries.
        item: u64,
        /// Whether it was handed out before a restart and not acknowledged then.
        redelivery: bool,
    },
    /// Anything else (a gap, a message out of the channel's order, of another channel, a
    /// plain message): a breach, described.
    Other(String),
}

/// The receiver's database.
#[derive(Debug)]
pub struct Applied {
    db: Database,
}

/// What the database says: the numbers applied, in order, and the breaches recorded.
#[derive(Debug, Default)]
pub struct Order {
    /// The numbers applied, in the order applied.
    pub seqs: Vec<u64>,
    /// The breaches met, in order.
    pub violations: Vec<String>,
    /// Flagged redeliveries of numbers applied before: only acknowledged.
    pub skipped: u64,
}

impl Order {
    /// Numbers of `0..count` applied more than once: the extra times.
    pub fn twice(&self, count: u64) -> u64 {
        let mut times: HashMap<u64, u64> = HashMap::new();
        for &s in self.seqs.iter().filter(|s| **s < count) {
            *times.entry(s).or_default() += 1;
        }
        times.values().map(|n| n - 1).sum()
    }

    /// Numbers of `0..count` never applied.
    pub fn missing(&self, count: u64) -> u64 {
        let mut seen = vec![false; usize::try_from(count).unwrap_or(usize::MAX)];
        for &s in &self.seqs {
            if let Some(slot) = usize::try_from(s).ok().and_then(|i| seen.get_mut(i)) {
                *slot = true;
            }
        }
        seen.iter().filter(|s| !**s).count() as u64
    }

    /// Numbers applied out of order: each one that is not one above the number applied
    /// before it (the first: not 0).
    pub fn out_of_order(&self) -> u64 {
        let mut want = 0;
        let mut n = 0;
        for &s in &self.seqs {
            if s != want {
                n += 1;
            }
            want = s.wrapping_add(1);
        }
        n
    }

    /// Numbers applied that are not in `0..count`.
    pub fn strays(&self, count: u64) -> u64 {
        self.seqs.iter().filter(|s| **s >= count).count() as u64
    }
}

impl Applied {
    /// Opens (or creates) the database at `path`, with its tables.
    pub fn open(path: &Path) -> Result<Applied, Error> {
        let db = Database::create(path)?;
        let tx = db.begin_write()?;
        tx.open_table(APPLIED)?;
        tx.open_table(STATE)?;
        tx.open_table(VIOLATIONS)?;
        tx.commit()?;
        Ok(Applied { db })
    }

    /// Applies `batch` in one transaction: a flagged redelivery of a number below the one
    /// due was applied before the crash (the numbers below the one due are those applied)
    /// and is skipped; any other message is applied (a row), and a breach is recorded
    /// when its number is not the one due, or its item not its number. Returns how many
    /// were applied now. Once it returns, every message of the batch may be acknowledged.
    pub fn apply(&self, batch: &[Arrival]) -> Result<usize, Error> {
        let tx = self.db.begin_write()?;
        let mut n = 0;
        {
            let mut applied = tx.open_table(APPLIED)?;
            let mut state = tx.open_table(STATE)?;
            let mut violations = tx.open_table(VIOLATIONS)?;
            let mut next = state.get("next")?.map_or(0, |v| v.value());
            let mut skipped = state.get("skipped")?.map_or(0, |v| v.value());
            let mut row = applied.last()?.map_or(0, |(k, _)| k.value() + 1);
            let mut breach = violations.last()?.map_or(0, |(k, _)| k.value() + 1);
            let mut record = |what: String| -> Result<(), Error> {
                violations.insert(breach, what.as_str())?;
                breach += 1;
                Ok(())
            };
            for a in batch {
                let (seq, item, redelivery) = match a {
                    Arrival::Seq {
                        seq,
                        item,
                        redelivery,
                    } => (*seq, *item, *redelivery),
                    Arrival::Other(what) => {
                        record(what.clone())?;
                        continue;
                    }
                };
                if redelivery && seq < next {
                    skipped += 1;
                    continue;
                }
                if seq != next {
                    let flag = if redelivery { "flagged" } else { "unflagged" };
                    record(format!("number {seq} ({flag}) arrived when {next} was due"))?;
                }
                if item != seq {
                    record(format!("item {item} arrived as number {seq}"))?;
                }
                applied.insert(row, seq)?;
                row += 1;
                next = next.max(seq + 1);
                n += 1;
            }
            state.insert("next", next)?;
            state.insert("skipped", skipped)?;
        }
        tx.commit()?;
        Ok(n)
    }

    /// Reads what was applied, and the breaches.
    pub fn order(&self) -> Result<Order, Error> {
        let tx = self.db.begin_read()?;
        let mut order = Order::default();
        for row in tx.open_table(APPLIED)?.iter()? {
            order.seqs.push(row?.1.value());
        }
        for row in tx.open_table(VIOLATIONS)?.iter()? {
            order.violations.push(row?.1.value().to_string());
        }
        let state = tx.open_table(STATE)?;
        order.skipped = state.get("skipped")?.map_or(0, |v| v.value());
        Ok(order)
    }
}
