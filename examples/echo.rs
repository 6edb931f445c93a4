//! Echo: a server node sends every message back to its sender; a client sends a few lines
//! and prints what comes back. The server never calls `add_peer`: it learns the client's
//! address from its datagrams.

use std::time::Duration;

use clap::Parser;
use exon::proto::Security;
use exon::{Endpoint, EndpointConfig, NodeId};

/// An echo server and a client on 127.0.0.1: the client sends each line and prints what comes
/// back.
#[derive(Debug, Parser)]
struct Opts {
    /// The lines to send.
    #[arg(default_values_t = ["exactly", "once", "over", "udp"].map(String::from))]
    lines: Vec<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opts = Opts::parse();
    let (server_id, client_id) = (NodeId::from_const(10), NodeId::from_const(11));
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

    let echo = server.handle();
    tokio::spawn(async move {
        while let Some(m) = server.recv().await {
            // The receipt is dropped: the endpoint still makes sure the reply arrives.
            let _ = echo.send(m.from, m.payload).await;
        }
    });

    let lines = &opts.lines;
    for line in lines {
        drop(client.send(server_id, line.as_bytes().to_vec()).await?);
    }
    for _ in lines {
        let m = tokio::time::timeout(Duration::from_secs(5), client.recv())
            .await?
            .ok_or("endpoint stopped")?;
        println!(
            "echo from {}: {}",
            m.from,
            String::from_utf8_lossy(&m.payload)
        );
    }
    client.close(Duration::from_secs(1)).await;
    Ok(())
}
