//! One-way messages: node 1 sends 1000 numbered messages to node 2 and waits for every
//! receipt; node 2 checks it got each exactly once.

use std::time::Duration;

use clap::Parser;
use exon::proto::Security;
use exon::{Endpoint, EndpointConfig, NodeId};

/// Node 1 sends numbered messages to node 2 on 127.0.0.1 and waits for every receipt; node 2
/// checks it got each exactly once.
#[derive(Debug, Parser)]
struct Opts {
    /// Messages to send.
    #[arg(long, default_value_t = 1000)]
    count: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let opts = Opts::parse();
    let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
    // A closed group of two: fresh keys, each knowing the other's public key.
    let [a_ident, b_ident] = exon::keyfile::generate_group(&[a_id, b_id])
        .try_into()
        .expect("two");
    let a = Endpoint::bind(
        "127.0.0.1:0",
        a_id,
        Security::Sealed(a_ident),
        EndpointConfig::default(),
    )
    .await?;
    let mut b = Endpoint::bind(
        "127.0.0.1:0",
        b_id,
        Security::Sealed(b_ident),
        EndpointConfig::default(),
    )
    .await?;
    a.add_peer(b_id, b.local_addr());

    let n = opts.count;
    let mut receipts = Vec::new();
    for i in 0..n {
        receipts.push(a.send(b_id, i.to_be_bytes().to_vec()).await?);
    }
    let mut seen = vec![false; n as usize];
    for _ in 0..n {
        let m = tokio::time::timeout(Duration::from_secs(10), b.recv())
            .await?
            .ok_or("endpoint stopped")?;
        let i = u32::from_be_bytes(m.payload[..].try_into()?) as usize;
        assert!(!std::mem::replace(&mut seen[i], true), "duplicate {i}");
    }
    for r in receipts {
        r.await?;
    }
    let report = a.close(Duration::from_secs(2)).await;
    println!(
        "{n} messages delivered once and acknowledged; clean close: {}",
        report.is_clean()
    );
    Ok(())
}
