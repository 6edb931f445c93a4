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
//! Several peers (`--peer ID=ADDR`, repeated) and driver shards (`--shards`) make a sharded
//! durable endpoint: a sender sends `--count` items to each of its peers, in turn, a
//! receiver takes them from each of its own; items are named `<peer>.<item>` in both files.
//!
//! ```text
//! durable-node recv --dir /tmp/b --id 2 --bind 127.0.0.1:7002 --peer 127.0.0.1:7001 --out /tmp/b.out --count 2000
//! durable-node send --dir /tmp/a --id 1 --bind 127.0.0.1:7001 --peer 127.0.0.1:7002 --out /tmp/a.out --count 2000
//! ```

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use exon::{Endpoint, EndpointConfig, NodeId};

mod node;

use node::Role;

/// A durable node of the crash test.
#[derive(Debug, Parser)]
struct Opts {
    // Its side (`send`, `recv`), --id, --dir, --bind, --peer (repeated), --shards.
    #[command(flatten)]
    node: node::Side,
    /// The application's own file (its effects, or its progress).
    #[arg(long)]
    out: PathBuf,
    /// Messages in the stream to each peer.
    #[arg(long)]
    count: u32,
    /// `send`: messages a second at most (all peers together), so that the stream
    /// outlasts the kills; unpaced without it.
    #[arg(long)]
    rate: Option<u32>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = Opts::parse();
    let mut cfg = EndpointConfig::default();
    cfg.ack_after_processing = o.node.role == Role::Recv;
    let (ep, _) = o.node.endpoint(cfg).await?;
    let (text, out) = node::open_lines(&o.out)?;
    match o.node.role {
        Role::Recv => receive(ep, &text, out).await,
        Role::Send => {
            let peers = o.node.peer_ids()?;
            send(ep, &peers, (o.count, o.rate), (&text, out)).await
        }
    }
}

/// `recv`: processes each message once (its effect and its stable id in one write to
/// `out`, which held `text` at the start), until killed.
async fn receive(
    mut ep: Endpoint,
    text: &str,
    mut out: std::fs::File,
) -> Result<(), Box<dyn std::error::Error>> {
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
        let item = format!("{from}.{i}");
        // The effect and the id, in one write.
        out.write_all(format!("{item} {key}\n").as_bytes())?;
        seen.insert(item);
        done.insert(key);
        m.ack();
    }
    Ok(())
}

/// `send`: sends `count` items to each of `peers` (paced at `rate` a second), noting in
/// `out` (which held `text` at the start) each one stored, then waits for every verdict.
async fn send(
    mut ep: Endpoint,
    peers: &[NodeId],
    (count, rate): (u32, Option<u32>),
    (text, out): (&str, std::fs::File),
) -> Result<(), Box<dyn std::error::Error>> {
    // The application's progress: the items it knows exon stored.
    let mut stored: HashSet<String> = HashSet::new();
    for line in text.lines() {
        if let Some(item) = line.strip_prefix("stored ") {
            stored.insert(item.to_string());
        }
    }
    let restarted = !text.is_empty();
    let mut receipts = recovered(&mut ep, &mut stored)?;
    // What is neither stored nor recovered was never stored, or was acknowledged and
    // resolved before the application noted it stored: sent (again). Items go to the peers
    // in turn.
    let todo: Vec<(NodeId, u32)> = (0..count)
        .flat_map(|i| peers.iter().map(move |&to| (to, i)))
        .filter(|(to, i)| !stored.contains(&format!("{to}.{i}")))
        .collect();
    // Each item is noted the moment exon says it is stored, by a task of its own, so that
    // the gap above stays small.
    let out = std::sync::Arc::new(std::sync::Mutex::new(out));
    let mut notes = Vec::with_capacity(todo.len());
    let pace = rate.map(|r| Duration::from_secs(1) / r.max(1));
    let start = tokio::time::Instant::now();
    for (k, (to, i)) in todo.into_iter().enumerate() {
        if let Some(p) = pace {
            tokio::time::sleep_until(start + p * k as u32).await;
        }
        if restarted {
            let line = format!("resend {to}.{i}\n");
            out.lock().map_err(|_| "lock")?.write_all(line.as_bytes())?;
        }
        let mut r = ep.send(to, i.to_be_bytes().to_vec()).await?;
        let out = out.clone();
        notes.push(tokio::spawn(async move {
            let stored = r.stored().await;
            if stored.is_ok() {
                let line = format!("stored {to}.{i}\n");
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
    Ok(())
}

/// The messages recovered from the journal, which exon sends again itself under the ids
/// they had: their items (`<peer>.<item>`) are noted in `stored`, and their receipts
/// returned.
fn recovered(
    ep: &mut Endpoint,
    stored: &mut HashSet<String>,
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
        let i = u32::from_be_bytes(item.try_into()?);
        stored.insert(format!("{}.{i}", r.to));
        receipts.push(r.receipt);
    }
    Ok(receipts)
}
