//! One durable node of the crash test (`tests/durable_kill.rs`), as a process of its own, to
//! be killed with SIGKILL at any moment and started again on the same directory.
//!
//! `recv` (which runs until killed) processes each message exactly once for real: its effect (a line naming the
//! message) and the message's stable id go to its own file in one write, and only then is the
//! message acknowledged (`ack_after_processing`). A redelivery after a crash whose stable id
//! is in the file was processed already: it is acknowledged, not processed again. That is how
//! an application turns exon's flagged redeliveries into exactly-once processing.
//!
//! `send` hands `--count` messages to a durable endpoint, noting each in its file once exon
//! stored it, then waits for every verdict. Started again after a crash it takes the
//! messages recovered from its journal (exon sends them again) and sends what is neither
//! noted nor recovered, noting each such send as a `resend`: an item exon stored and
//! acknowledged before the application could note it is sent twice, as two messages (the
//! gap every application has between its own store and exon's).
//!
//! ```text
//! durable-node recv --dir /tmp/b --id 2 --bind 127.0.0.1:7002 --peer 127.0.0.1:7001 --out /tmp/b.out --count 2000
//! durable-node send --dir /tmp/a --id 1 --bind 127.0.0.1:7001 --peer 127.0.0.1:7002 --out /tmp/a.out --count 2000
//! ```

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use exon::{Endpoint, EndpointConfig};

mod node;

use node::Role;

/// A durable node of the crash test.
#[derive(Debug, Parser)]
struct Opts {
    // Its side (`send`, `recv`), --id, --dir, --bind, --peer.
    #[command(flatten)]
    node: node::Side,
    /// The application's own file (its effects, or its progress).
    #[arg(long)]
    out: PathBuf,
    /// Messages in the stream.
    #[arg(long)]
    count: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = Opts::parse();
    let mut cfg = EndpointConfig::default();
    cfg.ack_after_processing = o.node.role == Role::Recv;
    let (mut ep, other) = o.node.endpoint(cfg).await?;
    let text = std::fs::read_to_string(&o.out).unwrap_or_default();
    let mut out = OpenOptions::new().create(true).append(true).open(&o.out)?;
    match o.node.role {
        Role::Recv => {
            // The application's store: the stable ids it processed, and the messages.
            let mut done: HashSet<String> = HashSet::new();
            let mut seen: HashSet<String> = HashSet::new();
            for line in text.lines() {
                let mut f = line.splitn(2, ' ');
                if let (Some(i), Some(key)) = (f.next(), f.next()) {
                    seen.insert(i.to_string());
                    done.insert(key.to_string());
                }
            }
            // Runs until killed: the sender may still need acknowledgements.
            loop {
                let Some(m) = ep.recv().await else { break };
                let (from, r, s) = m.stable_id();
                let key = format!("{from} {r} {s}");
                if m.is_redelivery() && done.contains(&key) {
                    // Processed before the crash, acknowledged after it.
                    m.ack();
                    continue;
                }
                let i = u32::from_be_bytes(m.payload[..4].try_into()?);
                // The effect and the id, in one write.
                out.write_all(format!("{i} {key}\n").as_bytes())?;
                seen.insert(i.to_string());
                done.insert(key);
                m.ack();
            }
        }
        Role::Send => {
            // The application's progress: the items it knows exon stored.
            let mut stored: HashSet<u32> = HashSet::new();
            for line in text.lines() {
                if let Some(i) = line.strip_prefix("stored ") {
                    stored.insert(i.parse()?);
                }
            }
            let restarted = !text.is_empty();
            let mut receipts = recovered(&mut ep, &mut stored)?;
            // What is neither stored nor recovered was never stored, or was acknowledged
            // and resolved before the application noted it stored: sent (again).
            let todo: Vec<u32> = (0..o.count).filter(|i| !stored.contains(i)).collect();
            // Each item is noted the moment exon says it is stored, by a task of its own, so
            // that the gap above stays small.
            let out = std::sync::Arc::new(std::sync::Mutex::new(out));
            let mut notes = Vec::with_capacity(todo.len());
            for i in todo {
                if restarted {
                    let line = format!("resend {i}\n");
                    out.lock().map_err(|_| "lock")?.write_all(line.as_bytes())?;
                }
                let mut r = ep.send(other, i.to_be_bytes().to_vec()).await?;
                let out = out.clone();
                notes.push(tokio::spawn(async move {
                    let stored = r.stored().await;
                    if stored.is_ok() {
                        let line = format!("stored {i}\n");
                        let _ = out.lock().map(|mut f| f.write_all(line.as_bytes()));
                    }
                    stored.map(|_| r)
                }));
            }
            for n in notes {
                receipts.push(n.await??);
            }
            for r in receipts {
                r.await?;
            }
            out.lock().map_err(|_| "lock")?.write_all(b"done\n")?;
            let _ = ep.close(Duration::from_secs(2)).await;
        }
    }
    Ok(())
}

/// The messages recovered from the journal, which exon sends again itself under the ids
/// they had: their items are noted in `stored`, and their receipts returned.
fn recovered(
    ep: &mut Endpoint,
    stored: &mut HashSet<u32>,
) -> Result<Vec<exon::endpoint::Receipt>, Box<dyn std::error::Error>> {
    let mut receipts = Vec::new();
    for r in ep.take_recovered() {
        if r.settled {
            // Resolved before the crash, its verdict not yet reported: it is not sent
            // again, and this application keeps no ids to tell which item it was
            // (exon-outbox's keyed sends do).
            continue;
        }
        let item = r.payload.get(..4).ok_or("a recovered message too short")?;
        stored.insert(u32::from_be_bytes(item.try_into()?));
        receipts.push(r.receipt);
    }
    Ok(receipts)
}
