//! Request/reply over exactly-once messages: a server squares numbers with `Handle::serve`,
//! many concurrent callers ask it with `Handle::call_typed`. The endpoint correlates each
//! reply with its call; a failed call says whether its request was executed.

use clap::Parser;
use exon::proto::Security;
use exon::rpc::{CallError, Failure, Request, Response};
use exon::{Endpoint, EndpointConfig, NodeId};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Square {
    x: u64,
}

#[derive(Serialize, Deserialize)]
struct Squared {
    square: u64,
}

/// The server's handler: runs once per request (a handler's error goes back to its caller as
/// `CallError::Failed`).
async fn square(req: Request) -> Result<Response, Failure> {
    let Square { x } = req.decode()?;
    let square = x.checked_mul(x).ok_or(Failure::message("overflow"))?;
    Ok(Response::typed(&Squared { square })?)
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
    let server = Endpoint::bind(
        "127.0.0.1:0",
        server_id,
        Security::Sealed(server_ident),
        EndpointConfig::default(),
    )
    .await?;
    let client = Endpoint::bind(
        "127.0.0.1:0",
        client_id,
        Security::Sealed(client_ident),
        EndpointConfig::default(),
    )
    .await?;
    client.add_peer(server_id, server.local_addr());

    let sh = server.handle();
    tokio::spawn(async move { sh.serve(square).await });

    let mut tasks = Vec::new();
    for c in 0..opts.callers {
        let h = client.handle();
        let calls = opts.calls;
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            for k in 0..calls {
                let x = c + k;
                match h.call_typed::<_, Squared>(server_id, &Square { x }).await {
                    Ok(r) if r.square == x * x => {}
                    Ok(r) => {
                        failed += 1;
                        eprintln!("square({x}): wrong answer {}", r.square);
                    }
                    Err(e) => {
                        failed += 1;
                        report(x, &e);
                    }
                }
            }
            failed
        }));
    }
    let mut failed = 0;
    for t in tasks {
        failed += t.await?;
    }
    let total = opts.callers * opts.calls;
    println!("{} of {total} calls answered correctly", total - failed);
    if failed > 0 {
        return Err(format!("{failed} calls failed").into());
    }
    Ok(())
}

/// What a failed call tells: whether its request ran at the server (never a bare timeout).
fn report(x: u64, e: &CallError) {
    match e.executed() {
        // Safe to retry (a retry is a new request).
        Some(false) => eprintln!("square({x}) not executed: {e}"),
        Some(true) => eprintln!("square({x}) executed, but: {e}"),
        // Executed at most once: ask the server before doing it again.
        None => eprintln!("square({x}) in doubt: {e}"),
    }
}
