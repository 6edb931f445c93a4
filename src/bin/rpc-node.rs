//! A durable RPC server of the crash test (`tests/rpc_kill.rs`), as a process of its own, to
//! be killed with SIGKILL at any moment and started again on the same directory.
//!
//! Its handler executes a request for real: the effect (a line naming the request, with the
//! request's stable id and the answer) goes to its own file in one write, synced, and only
//! then does the handler return the answer. A request handed out again after a crash
//! ([`Request::is_redelivery`]) whose stable id is in the file was executed already: the
//! handler answers what it answered then, without applying the effect again. That is how a
//! handler turns exon's flagged redeliveries into exactly-once execution. Each redelivery is
//! noted in a second file, for the test's counts.
//!
//! The request is `n` and `attempt` (two big-endian u64); the effect line is
//! `n attempt seq from incarnation slot`, where `seq` is the number of effects applied
//! before it; the answer is `n` and `seq` (two big-endian u64), so that an answer made by a
//! second execution would differ from the first.
//!
//! ```text
//! rpc-node --dir /tmp/s --bind 127.0.0.1:7002 --peer 127.0.0.1:7001 --out /tmp/s.effects --log /tmp/s.redeliveries
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use exon::rpc::{Failure, Request, Response};
use exon::{EndpointConfig, NodeId};

mod node;

/// The server's id; the client is 1.
const SERVER: u64 = 2;
const CLIENT: u64 = 1;

/// A durable RPC server of the crash test.
#[derive(Debug, Parser)]
struct Opts {
    // --dir, --bind, --peer (the client's address).
    #[command(flatten)]
    net: node::Net,
    /// The handler's own store: the effects, with the stable ids.
    #[arg(long)]
    out: PathBuf,
    /// Where the redeliveries are noted.
    #[arg(long)]
    log: PathBuf,
    /// Most milliseconds a handler waits before, and again after, applying its effect.
    #[arg(long, default_value_t = 4)]
    work_ms: u64,
}

/// The handler's store: the effects file, and what it holds (stable id to answer).
struct Store {
    file: File,
    log: File,
    done: HashMap<String, (u64, u64)>,
    applied: u64,
}

impl Store {
    fn open(o: &Opts) -> std::io::Result<Store> {
        let (text, file) = node::open_lines(&o.out)?;
        let mut done = HashMap::new();
        let mut applied = 0;
        for line in text.lines() {
            // n attempt seq from incarnation slot
            let f: Vec<&str> = line.split(' ').collect();
            let [n, _, seq, from, r, s] = f[..] else {
                return Err(std::io::Error::other(format!("bad effect line {line:?}")));
            };
            let parse = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| std::io::Error::other(format!("bad effect line {line:?}")))
            };
            done.insert(format!("{from} {r} {s}"), (parse(n)?, parse(seq)?));
            applied += 1;
        }
        let (_, log) = node::open_lines(&o.log)?;
        Ok(Store {
            file,
            log,
            done,
            applied,
        })
    }
}

fn answer(n: u64, seq: u64) -> Response {
    let mut body = n.to_be_bytes().to_vec();
    body.extend_from_slice(&seq.to_be_bytes());
    Response::new(body)
}

/// Executes `req` once: see the module's comment.
async fn execute(
    req: Request,
    store: Arc<Mutex<Store>>,
    work_ms: u64,
) -> Result<Response, Failure> {
    let body = req.body();
    if body.len() != 16 {
        return Err(Failure::message("16 bytes"));
    }
    let n = u64::from_be_bytes(body[..8].try_into().expect("8 bytes"));
    let attempt = u64::from_be_bytes(body[8..].try_into().expect("8 bytes"));
    let (from, r, s) = req.stable_id();
    let key = format!("{from} {r} {s}");
    // Some work before the effect, and some after, so that kills land in both gaps.
    let pause = |salt: u64| Duration::from_millis((n.wrapping_mul(31) ^ salt) % (work_ms + 1));
    tokio::time::sleep(pause(attempt)).await;
    let seq = {
        let mut st = store
            .lock()
            .map_err(|_| Failure::message("store poisoned"))?;
        if req.is_redelivery() {
            let found = st.done.get(&key).copied();
            let line = format!(
                "{n} {key} {}\n",
                if found.is_some() { "applied" } else { "new" }
            );
            st.log.write_all(line.as_bytes())?;
            if let Some((m, seq)) = found {
                if m != n {
                    return Err(Failure::message(format!(
                        "stable id {key} names request {m}, redelivered as {n}"
                    )));
                }
                return Ok(answer(n, seq));
            }
        } else if st.done.contains_key(&key) {
            return Err(Failure::message(format!(
                "stable id {key} delivered again unflagged"
            )));
        }
        let seq = st.applied;
        // The effect and the id in one write, synced before the answer leaves.
        let line = format!("{n} {attempt} {seq} {key}\n");
        st.file.write_all(line.as_bytes())?;
        st.file.sync_data()?;
        st.done.insert(key, (n, seq));
        st.applied += 1;
        seq
    };
    tokio::time::sleep(pause(!attempt)).await;
    Ok(answer(n, seq))
}

#[tokio::main(worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = Opts::parse();
    let (me, client) = (
        NodeId::new(SERVER).ok_or("id")?,
        NodeId::new(CLIENT).ok_or("id")?,
    );
    let ep = o
        .net
        .endpoint(me, client, EndpointConfig::default())
        .await?;
    let store = Arc::new(Mutex::new(Store::open(&o)?));
    let work_ms = o.work_ms;
    // Runs until killed.
    ep.handle()
        .serve(move |req| execute(req, store.clone(), work_ms))
        .await?;
    Ok(())
}
