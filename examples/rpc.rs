//! Request/reply over exactly-once messages: many concurrent callers, replies correlated by
//! a request id carried in the (typed, bincode-encoded) payload.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use exon::endpoint::Handle;
use exon::proto::Security;
use exon::{Endpoint, EndpointConfig, NodeId};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Serialize, Deserialize)]
struct Request {
    id: u64,
    x: u64,
}

#[derive(Serialize, Deserialize)]
struct Reply {
    id: u64,
    square: u64,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<u64>>>>;

/// Calls the server: sends a request and waits for the reply with the same id.
async fn call(h: &Handle, server: NodeId, pending: &Pending, id: u64, x: u64) -> Option<u64> {
    let (tx, rx) = oneshot::channel();
    pending.lock().unwrap().insert(id, tx);
    drop(h.send_typed(server, &Request { id, x }).await.ok()?);
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .ok()?
        .ok()
}

/// A server squares numbers for concurrent callers over exactly-once messages on 127.0.0.1.
#[derive(Debug, Parser)]
struct Opts {
    /// Concurrent callers.
    #[arg(long, default_value_t = 100)]
    callers: u64,
    /// Calls each caller makes, one after the other.
    #[arg(long, default_value_t = 20)]
    calls: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opts = Opts::parse();
    let (server_id, client_id) = (NodeId::from_const(1), NodeId::from_const(2));
    // A closed group of two: fresh keys, each knowing the other's public key.
    let [server_ident, client_ident] = exon::keyfile::generate_group(&[server_id, client_id])
        .try_into()
        .expect("two");
    let mut server = Endpoint::bind(
        "127.0.0.1:0",
        server_id,
        Security::Sealed(server_ident),
        EndpointConfig::default(),
    )
    .await?;
    let mut client = Endpoint::bind(
        "127.0.0.1:0",
        client_id,
        Security::Sealed(client_ident),
        EndpointConfig::default(),
    )
    .await?;
    client.add_peer(server_id, server.local_addr());

    // Server: answer every request.
    let sh = server.handle();
    tokio::spawn(async move {
        while let Some(m) = server.recv().await {
            match m.decode::<Request>() {
                Ok(r) => {
                    let reply = Reply {
                        id: r.id,
                        square: r.x * r.x,
                    };
                    let _ = sh.send_typed(m.from, &reply).await;
                }
                Err(e) => eprintln!("bad request from {}: {e}", m.from),
            }
        }
    });

    // Client: one task routes replies to the callers waiting for them.
    let pending = Pending::default();
    let router = pending.clone();
    let ch = client.handle();
    tokio::spawn(async move {
        while let Some(m) = client.recv().await {
            if let Ok(r) = m.decode::<Reply>() {
                if let Some(tx) = router.lock().unwrap().remove(&r.id) {
                    let _ = tx.send(r.square);
                }
            }
        }
    });

    let (callers, calls) = (opts.callers, opts.calls);
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (h, pending) = (ch.clone(), pending.clone());
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for k in 0..calls {
                let (id, x) = (c * calls + k, c + k);
                if call(&h, server_id, &pending, id, x).await == Some(x * x) {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await?;
    }
    println!("{ok} of {} calls answered correctly", callers * calls);
    if ok != callers * calls {
        return Err("some calls failed".into());
    }
    Ok(())
}
