//! One node of the outbox SIGKILL test (`tests/outbox_kill.rs`), sender or receiver, as a
//! process of its own, to be killed at any moment and started again on the same directory
//! and database. The application's store is a redb database on both sides (`--db`).
//!
//! `recv` (runs until killed) commits each message's effect with its stable id in one
//! transaction, then acknowledges it. `send` writes `--count` rows to its outbox on its
//! first start, sends every row still there with `send_keyed`, deletes each once
//! acknowledged, and exits once the outbox is empty.
//!
//! ```text
//! outbox-node recv --dir /tmp/b --id 2 --bind 127.0.0.1:7002 --peer 127.0.0.1:7001 --db /tmp/b.redb --count 2000
//! outbox-node send --dir /tmp/a --id 1 --bind 127.0.0.1:7001 --peer 127.0.0.1:7002 --db /tmp/a.redb --count 2000
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use exon::proto::crypto::insecure_test_security;
use exon::{Endpoint, EndpointConfig, NodeId};
use exon_outbox::{receiver, sender, Effects, Error, Outbox};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Role {
    Send,
    Recv,
}

/// A node of the outbox crash test.
#[derive(Debug, Parser)]
struct Opts {
    /// Which side.
    role: Role,
    /// The endpoint's directory (clock and journal).
    #[arg(long)]
    dir: PathBuf,
    /// This node's id, 1 or 2 (the other is 3 minus it).
    #[arg(long)]
    id: u64,
    /// Address to bind.
    #[arg(long)]
    bind: SocketAddr,
    /// The other node's address.
    #[arg(long)]
    peer: SocketAddr,
    /// The application's database (its outbox, or its effects).
    #[arg(long)]
    db: PathBuf,
    /// Rows in the outbox.
    #[arg(long)]
    count: u64,
    /// Rows written to the outbox in one transaction.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
    /// Rows sent a second at most (0: as fast as the endpoint takes them).
    #[arg(long, default_value_t = 0)]
    rate: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let o = Opts::parse();
    let id = |n: u64| {
        NodeId::new(n)
            .filter(|_| (1..=2).contains(&o.id))
            .ok_or(Error::Id(o.id))
    };
    let (me, other) = (id(o.id)?, id(3 - o.id.min(2))?);
    let mut cfg = EndpointConfig::default();
    cfg.ack_after_processing = matches!(o.role, Role::Recv);
    cfg.protocol.timers.idle_timeout = Duration::from_millis(500);
    let mut ep = Endpoint::builder(me)
        .security(insecure_test_security(me, [other]))
        .config(cfg)
        .durable(&o.dir)
        .bind(o.bind)
        .await?;
    ep.add_peer(other, o.peer);
    match o.role {
        Role::Recv => receiver::run(ep, Effects::open(&o.db)?).await,
        Role::Send => {
            let (count, batch, rate) = (o.count, o.batch, o.rate);
            let plan = sender::Plan { count, batch, rate };
            sender::run(&mut ep, other, Outbox::open(&o.db)?, plan).await
        }
    }
}
