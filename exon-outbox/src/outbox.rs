//! The sender's outbox in redb: the rows it must send (key -> payload), deleted once their
//! verdict is in, and what it learned on the way (failures, counters).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::Error;

/// The rows still to be acknowledged: the key (it grows, and is the `send_keyed` key) and
/// the payload.
const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
/// Counters: how many rows were written (`filled`), and how each row was settled
/// ([`How::name`]).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Verdicts other than acknowledged, in the order they came: what the application would
/// act on (write a new row, alert someone).
const FAILED: TableDefinition<u64, &str> = TableDefinition::new("failed");

/// How a row (or a message) was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Its `send_keyed` was accepted in this run; the verdict came on that receipt.
    Accepted,
    /// Its key was refused (accepted before the crash) and its message was among the
    /// recovered ones: the verdict came on the recovered receipt.
    Recovered,
    /// Its key was refused and its message was not recovered: exon resolved it before the
    /// crash (the sender's gap of unkeyed sends, closed).
    ResolvedBefore,
    /// A verdict exon stored before the crash and reported again after it (a settled
    /// recovered message): it carries no key, only its message id.
    Settled,
}

impl How {
    /// The counter's name in the `meta` table.
    pub fn name(self) -> &'static str {
        match self {
            How::Accepted => "accepted",
            How::Recovered => "recovered",
            How::ResolvedBefore => "resolved before the crash",
            How::Settled => "settled verdicts reported again",
        }
    }
}

/// What the sender learned of one row or message.
#[derive(Debug, Clone)]
pub struct Done {
    /// The outbox row (`None` for a settled verdict, which carries no key).
    pub row: Option<u64>,
    /// Exon's message id, when known.
    pub id: Option<exon::MsgId>,
    /// Why it was not acknowledged, or `None` when it was (or is taken to be).
    pub failure: Option<String>,
    /// How it was settled.
    pub how: How,
}

/// The sender's database.
#[derive(Debug)]
pub struct Outbox {
    db: Database,
}

impl Outbox {
    /// Opens (or creates) the database at `path`, with its tables.
    pub fn open(path: &Path) -> Result<Outbox, Error> {
        let db = Database::create(path)?;
        let tx = db.begin_write()?;
        tx.open_table(OUTBOX)?;
        tx.open_table(META)?;
        tx.open_table(FAILED)?;
        tx.commit()?;
        Ok(Outbox { db })
    }

    /// Writes rows `1..=count` (payload: [`item_payload`](crate::item_payload) of the key)
    /// that are not written yet, `batch` to a transaction: the application's changes that
    /// make each send necessary would be in the same transactions.
    pub fn fill(&self, count: u64, batch: u64) -> Result<(), Error> {
        loop {
            let tx = self.db.begin_write()?;
            {
                let mut meta = tx.open_table(META)?;
                let filled = meta.get("filled")?.map_or(0, |v| v.value());
                if filled >= count {
                    return Ok(());
                }
                let end = count.min(filled + batch.max(1));
                let mut rows = tx.open_table(OUTBOX)?;
                for key in filled + 1..=end {
                    rows.insert(key, crate::item_payload(key).as_slice())?;
                }
                meta.insert("filled", end)?;
            }
            tx.commit()?;
        }
    }

    /// The rows still there, in key order.
    pub fn rows(&self) -> Result<Vec<(u64, Vec<u8>)>, Error> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OUTBOX)?;
        let mut rows = Vec::with_capacity(table.len()? as usize);
        for row in table.iter()? {
            let (k, v) = row?;
            rows.push((k.value(), v.value().to_vec()));
        }
        Ok(rows)
    }

    /// Settles `done` in one transaction: each row is deleted, each failure recorded, and
    /// the counters updated.
    pub fn settle(&self, done: &[Done]) -> Result<(), Error> {
        let tx = self.db.begin_write()?;
        {
            let mut rows = tx.open_table(OUTBOX)?;
            let mut meta = tx.open_table(META)?;
            let mut failed = tx.open_table(FAILED)?;
            let mut next = failed.last()?.map_or(0, |(k, _)| k.value() + 1);
            for d in done {
                if let Some(row) = d.row {
                    rows.remove(row)?;
                }
                let n = meta.get(d.how.name())?.map_or(0, |v| v.value());
                meta.insert(d.how.name(), n + 1)?;
                if let Some(why) = &d.failure {
                    let line = format!("row {:?} id {:?}: {why}", d.row, d.id);
                    failed.insert(next, line.as_str())?;
                    next += 1;
                }
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Rows left in the outbox.
    pub fn len(&self) -> Result<u64, Error> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(OUTBOX)?.len()?)
    }

    /// Whether the outbox is empty.
    pub fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.len()? == 0)
    }

    /// The verdicts other than acknowledged, as recorded.
    pub fn failures(&self) -> Result<Vec<String>, Error> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(FAILED)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            out.push(row?.1.value().to_string());
        }
        Ok(out)
    }

    /// The counters: rows written (`filled`) and rows settled each way ([`How::name`]).
    pub fn counters(&self) -> Result<Vec<(String, u64)>, Error> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(META)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            out.push((k.value().to_string(), v.value()));
        }
        Ok(out)
    }
}
