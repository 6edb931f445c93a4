//! The journal engine alone in `compare`'s durable section (`journal_engine`): exon's own
//! journal (`exon::durable::Journal` on `FsBackend`), two of them as a durable pair has, each
//! writing on a thread of its own the records `exon_durable` writes per message, committed
//! once per batch of `BATCH` messages: the ceiling the protocol's rows are measured
//! against, so that the gap between the engine and the protocol shows.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::durable::{FsBackend, Journal, JournalConfig};
use exon::proto::journal::{Entry, Outcome, Write};
use exon::proto::{MsgId, NodeId};

use crate::durable_table::{Context, JournalCost, Row};
use crate::message::payload;
use crate::report::Tally;

/// Messages per commit.
const BATCH: u64 = 256;
const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const RCK: u64 = 1 << 20;

/// Which end's records a journal writes.
#[derive(Clone, Copy)]
enum End {
    /// `Accepted`, `Assigned` per message, a `ResolvedRun` and a `Reported` per batch.
    Sender,
    /// `Handed` (no payload: the sender keeps it until the ACK), `Taken` per message,
    /// `Confirmed` per batch.
    Receiver,
}

/// The records of messages `first .. first + BATCH` on `end`.
fn batch(end: End, first: u64, size: usize) -> Vec<Entry> {
    let mut out = Vec::with_capacity(3 * BATCH as usize + 1);
    for n in first..first + BATCH {
        let id = MsgId(n);
        let bytes: Bytes = payload(n, size);
        match end {
            End::Sender => out.extend([
                Entry::Accepted {
                    id,
                    to: B,
                    payload: bytes.into(),
                },
                Entry::Assigned {
                    id,
                    rck: RCK,
                    slot: n,
                },
            ]),
            End::Receiver => out.extend([
                Entry::Handed {
                    from: A,
                    rck: RCK,
                    slot: n,
                },
                Entry::Taken {
                    from: A,
                    rck: RCK,
                    slot: n,
                },
            ]),
        }
    }
    if let End::Sender = end {
        out.push(Entry::ResolvedRun {
            first: MsgId(first),
            count: BATCH,
            to: B,
            outcome: Outcome::Acknowledged,
        });
    }
    out.push(match end {
        End::Sender => Entry::Reported {
            first: MsgId(first),
            count: BATCH,
        },
        End::Receiver => Entry::Confirmed {
            from: A,
            below: first + BATCH,
        },
    });
    out
}

/// One end's journal in `dir` for `secs`: messages written and committed, and the bytes
/// and records.
fn run_end(dir: &Path, end: End, size: usize, secs: f64) -> (u64, Duration, JournalCost) {
    let backend = FsBackend::open(dir).expect("journal directory");
    let (mut j, _, _) = Journal::open(backend, JournalConfig::default()).expect("open");
    let (mut seq, mut n) = (0u64, 0u64);
    let mut cost = JournalCost::default();
    let start = Instant::now();
    let end_at = start + Duration::from_secs_f64(secs);
    while Instant::now() < end_at {
        for entry in batch(end, n, size) {
            seq += 1;
            cost.bytes += entry.encoded_len() as u64;
            cost.records += 1;
            j.append(&Write { seq, entry }).expect("append");
        }
        j.commit().expect("commit");
        cost.commits += 1;
        n += BATCH;
    }
    cost.messages = n;
    (n, start.elapsed(), cost)
}

/// The `journal_engine` row: both ends at once, a thread each, round after round.
pub fn row(cx: &Context<'_>) -> Row {
    let s = cx.settings;
    let secs = s.secs / s.rounds as f64;
    let (mut tally, mut journal) = (Tally::default(), JournalCost::default());
    for round in 0..s.rounds {
        let dir = cx.dir.join(format!("engine-{round}"));
        let (a, b) = (dir.join("a"), dir.join("b"));
        let size = s.size;
        let sender = thread::spawn(move || run_end(&a, End::Sender, size, secs));
        let receiver = thread::spawn(move || run_end(&b, End::Receiver, size, secs));
        let (sa, sb) = (
            sender.join().expect("sender"),
            receiver.join().expect("receiver"),
        );
        // A message costs both ends: the slower end's rate is the pair's.
        let (n, t) = if sa.0 as f64 / sa.1.as_secs_f64() < sb.0 as f64 / sb.1.as_secs_f64() {
            (sa.0, sa.1)
        } else {
            (sb.0, sb.1)
        };
        tally.add(n, t);
        let mut both = sa.2;
        both.add(sb.2);
        both.messages = n;
        journal.add(both);
    }
    Row {
        name: "journal_engine",
        what: format!(
            "exon's journal alone, two (one per end, a thread each), each message's records \
             as exon_durable writes them, one commit per {BATCH} messages"
        ),
        tally,
        latency: None,
        journal: Some(journal),
    }
}
