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

use clap::Parser;
use exon_outbox::node::{NodeOpts, Role};
use exon_outbox::{receiver, sender, Effects, Error, Outbox};

/// A node of the outbox crash test.
#[derive(Debug, Parser)]
struct Opts {
    #[command(flatten)]
    node: NodeOpts,
    /// Rows written to the outbox in one transaction.
    #[arg(long, default_value_t = 1000)]
    batch: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let o = Opts::parse();
    let (mut ep, other) = o.node.endpoint().await?;
    let db = &o.node.db;
    match o.node.role {
        Role::Recv => receiver::run(ep, Effects::open(db)?).await,
        Role::Send => {
            let (count, batch, rate) = (o.node.count, o.batch, o.node.rate);
            let plan = sender::Plan { count, batch, rate };
            sender::run(&mut ep, other, Outbox::open(db)?, plan).await
        }
    }
}
