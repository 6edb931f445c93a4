//! The journal's live state (`exon::proto::journal::State`): what replaying the records of
//! durable one-way messages costs, per message, on the thread that writes the journal (it
//! applies every record appended, to know what a compaction keeps).
//!
//! ```text
//! cargo bench -p exon-benches --bench journal_state
//! ```
//!
//! Each message is five records: the sender's `Accepted` and `Assigned`, the receiver's
//! `Delivered` and `Taken`, and per batch of 256 the sender's `ResolvedRun` and `Reported`
//! and the receiver's `Confirmed`. `sources` spreads the messages over that many senders
//! (one receiver's journal, interleaved batches).
//!
//! Then what a restart pays for a log that grew as far as a compaction lets it: the same
//! records appended to a journal on disk (`FsBackend` in a temporary directory, one commit
//! per 256 messages, no compaction) up to the default `JournalConfig::compact_after`, then
//! the journal opened again (read, checked, replayed), best of 3.
//!
//! Prints tables; the last line is `key=value` pairs (`ns_per_msg_<sources>`, `reopen_ms`,
//! `reopen_mib`).

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use exon::durable::{FsBackend, Journal, JournalConfig};
use exon::proto::journal::{Entry, Outcome, State, Write};
use exon::proto::{MsgId, NodeId, Payload};

const BATCH: u64 = 256;
const MESSAGES: u64 = 256 * 1024;
/// Batches awaiting their verdicts at once (as `compare`'s durable one-way keeps).
const WINDOW: u64 = 16;

/// The records of `MESSAGES` messages from `sources` senders, in the order the two
/// journals append them: (sender's, receiver's).
fn records(sources: u64) -> (Vec<Entry>, Vec<Entry>) {
    let payload = Bytes::from(vec![7u8; 1024]);
    let to = NodeId::from_const(1);
    let (mut tx, mut rx) = (Vec::new(), Vec::new());
    let batches = MESSAGES / BATCH;
    for b in 0..batches + WINDOW {
        if b < batches {
            let from = NodeId::from_const(2 + b % sources);
            let slot0 = b / sources * BATCH;
            for i in 0..BATCH {
                let id = MsgId(b * BATCH + i);
                let sent = Payload::from(payload.clone());
                tx.push(Entry::Accepted {
                    id,
                    to,
                    payload: sent,
                });
                tx.push(Entry::Assigned {
                    id,
                    rck: 1,
                    slot: slot0 + i,
                });
                let (rck, slot) = (1, slot0 + i);
                let payload = payload.clone();
                rx.push(Entry::Delivered {
                    from,
                    rck,
                    slot,
                    payload,
                });
            }
        }
        // The batch a window ago is taken, acknowledged and reported.
        if let Some(d) = b.checked_sub(WINDOW) {
            let from = NodeId::from_const(2 + d % sources);
            let slot0 = d / sources * BATCH;
            for i in 0..BATCH {
                rx.push(Entry::Taken {
                    from,
                    rck: 1,
                    slot: slot0 + i,
                });
            }
            let (first, count) = (MsgId(d * BATCH), BATCH);
            let outcome = Outcome::Acknowledged;
            tx.push(Entry::ResolvedRun {
                first,
                count,
                to,
                outcome,
            });
            tx.push(Entry::Reported { first, count });
            rx.push(Entry::Confirmed {
                from,
                below: slot0 + BATCH,
            });
        }
    }
    (tx, rx)
}

/// Nanoseconds per message to apply both journals' records, the best of `rounds`.
fn measure(sources: u64, rounds: usize) -> f64 {
    let (tx, rx) = records(sources);
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let (mut s, mut r) = (State::default(), State::default());
        let t = Instant::now();
        for e in &tx {
            s.apply(e);
        }
        for e in &rx {
            r.apply(e);
        }
        let ns = t.elapsed().as_nanos() as f64 / MESSAGES as f64;
        assert!(black_box(&s).is_empty() && black_box(&r).is_empty());
        best = best.min(ns);
    }
    best
}

/// Milliseconds to open a journal of the default compaction size again, and its MiB.
fn reopen(rounds: usize) -> (f64, f64) {
    let dir = tempfile::Builder::new()
        .prefix("exon-journal-state")
        .tempdir()
        .expect("temporary directory");
    let limit = JournalConfig::default().compact_after;
    let cfg = JournalConfig {
        compact_after: u64::MAX,
        ..JournalConfig::default()
    };
    let backend = || FsBackend::open(dir.path()).expect("backend");
    let (mut j, _, _) = Journal::open(backend(), cfg.clone()).expect("open");
    let (tx, rx) = records(1);
    let (mut seq, mut n) = (0u64, 0u64);
    'fill: loop {
        for e in tx.iter().chain(&rx) {
            seq += 1;
            let entry = e.clone();
            j.append(&Write { seq, entry }).expect("append");
            n += 1;
            if n % (5 * BATCH) == 0 {
                j.commit().expect("commit");
                if j.disk_bytes() >= limit {
                    break 'fill;
                }
            }
        }
    }
    j.commit().expect("commit");
    let mib = j.disk_bytes() as f64 / f64::from(1u32 << 20);
    drop(j);
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        let (j, recovered, _) = Journal::open(backend(), cfg.clone()).expect("reopen");
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        black_box((j, recovered));
    }
    (best, mib)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 7 };
    println!("journal state: records of {MESSAGES} one-way messages applied, both journals");
    println!("{:>8} {:>12}", "sources", "ns/message");
    let mut keys = Vec::new();
    for sources in [1, 100] {
        let ns = measure(sources, rounds);
        println!("{sources:>8} {ns:>12.1}");
        keys.push(format!("ns_per_msg_{sources}={ns:.1}"));
    }
    let (ms, mib) = reopen(if quick { 1 } else { 3 });
    println!("reopening a journal of {mib:.1} MiB (the compaction size): {ms:.1} ms");
    keys.push(format!("reopen_ms={ms:.1} reopen_mib={mib:.1}"));
    println!("{}", keys.join(" "));
}
