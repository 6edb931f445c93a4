//! A durable RPC caller of the crash test (`tests/rpc_kill.rs`), as a process of its own, to
//! be killed with SIGKILL in the middle of its calls and started again on the same
//! directory, against an `rpc-node` server.
//!
//! Started with `--issue N`, it calls requests `0 .. N` (the request is `n` and attempt 0,
//! two big-endian u64, as `rpc-node` reads it). At every start it takes the calls its
//! journal recovered (`Endpoint::take_recovered_calls`) and waits for them too. Each call's
//! end is a line of its file, written and synced: `ok n seq` (the reply: `n`, and the
//! server's count of effects before it), `noreply n`, `err n error`; each start writes
//! `start recovered k acknowledged a redelivered r` (of the `k` calls recovered, `a` had
//! their request acknowledged before the kill, `r` their reply handed out before it). A
//! call's line written, and only then is the call acknowledged (`Handle::call_acked`,
//! `CallReply::acked`): a kill before that recovers it. A recovered call flagged
//! `redelivery` whose `n` already has an `ok` line is not written again (the reply reached
//! the call, and its line the file, before the kill): the lookup a caller that keeps what
//! replies did makes. It exits once every call has ended.
//!
//! ```text
//! rpc-caller --dir /tmp/c --bind 127.0.0.1:7001 --peer 127.0.0.1:7002 --out /tmp/c.replies --issue 200
//! ```

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use exon::rpc::CallError;
use exon::{EndpointConfig, NodeId};

mod node;

/// The server's id; the client is 1.
const SERVER: u64 = 2;
const CLIENT: u64 = 1;

/// A durable RPC caller of the crash test.
#[derive(Debug, Parser)]
struct Opts {
    // --dir, --bind, --peer (the server's address).
    #[command(flatten)]
    net: node::Net,
    /// Where each call's end is written.
    #[arg(long)]
    out: PathBuf,
    /// Calls requests `0 .. issue` (the first start only).
    #[arg(long)]
    issue: Option<u64>,
}

/// The caller's file, and the requests it holds a reply of.
struct Replies {
    file: File,
    ok: HashSet<u64>,
}

impl Replies {
    fn open(o: &Opts) -> std::io::Result<Replies> {
        let (text, file) = node::open_lines(&o.out)?;
        let ok = text
            .lines()
            .filter_map(|l| l.strip_prefix("ok ")?.split(' ').next()?.parse().ok())
            .collect();
        Ok(Replies { file, ok })
    }

    /// Writes `line` and syncs it.
    fn write(&mut self, line: &str) -> std::io::Result<()> {
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }

    /// Writes how call `n` ended (a redelivered reply already written is not written again).
    fn end(&mut self, n: u64, result: &Result<Bytes, CallError>, redelivery: bool) {
        let line = match result {
            Ok(r) if r.len() == 16 => {
                if redelivery && self.ok.contains(&n) {
                    return;
                }
                self.ok.insert(n);
                let seq = u64::from_be_bytes(r[8..].try_into().expect("8 bytes"));
                format!("ok {n} {seq}\n")
            }
            Ok(r) => format!("err {n} reply of {} bytes\n", r.len()),
            Err(CallError::NoReply) => format!("noreply {n}\n"),
            Err(e) => format!("err {n} {e:?}\n"),
        };
        self.write(&line).expect("write the replies file");
    }
}

fn request(n: u64) -> Vec<u8> {
    let mut body = n.to_be_bytes().to_vec();
    body.extend_from_slice(&0u64.to_be_bytes());
    body
}

#[tokio::main(worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = Opts::parse();
    let (me, server) = (
        NodeId::new(CLIENT).ok_or("id")?,
        NodeId::new(SERVER).ok_or("id")?,
    );
    let mut ep = o
        .net
        .endpoint(me, server, EndpointConfig::default())
        .await?;
    let replies = Arc::new(Mutex::new(Replies::open(&o)?));
    let recovered = ep.take_recovered_calls();
    let acknowledged = recovered.iter().filter(|c| c.acknowledged).count();
    let redelivered = recovered.iter().filter(|c| c.redelivery).count();
    let start = format!(
        "start recovered {} acknowledged {acknowledged} redelivered {redelivered}\n",
        recovered.len()
    );
    replies.lock().expect("replies").write(&start)?;
    let mut tasks = Vec::new();
    for c in recovered {
        let n = u64::from_be_bytes(c.request[..8].try_into()?);
        let replies = replies.clone();
        tasks.push(tokio::spawn(async move {
            let r = c.reply.acked().await;
            replies
                .lock()
                .expect("replies")
                .end(n, r.result(), c.redelivery);
            drop(r.ack());
        }));
    }
    for n in 0..o.issue.unwrap_or(0) {
        let (h, replies) = (ep.handle(), replies.clone());
        tasks.push(tokio::spawn(async move {
            let r = h.call_acked(server, request(n)).await;
            replies.lock().expect("replies").end(n, r.result(), false);
            drop(r.ack());
        }));
    }
    for t in tasks {
        t.await?;
    }
    // Replies for calls no longer open, for the test's report.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Some(s) = ep.stats().await {
        eprintln!("rpc-caller: replies discarded {}", s.replies_discarded);
    }
    Ok(())
}
