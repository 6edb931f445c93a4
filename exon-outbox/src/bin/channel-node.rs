//! One node of the ordered-channel SIGKILL test (`tests/channel_kill.rs`), sender or
//! receiver, as a process of its own, to be killed at any moment and started again on the
//! same directory and database.
//!
//! `send` sends items `0..count` on durable channel 0, item `i` as the channel's number
//! `i`, going on after each restart from `Channel::next_seq()` (what was accepted before
//! is exon's to send again), and exits once every message has its verdict. `recv` (runs
//! until killed) applies each message in order into its redb database (`--db`), then
//! acknowledges it; a breach of the order is recorded there. The sender keeps nothing of
//! its own: its `--db` is not used.
//!
//! ```text
//! channel-node recv --dir /tmp/b --id 2 --bind 127.0.0.1:7002 --peer 127.0.0.1:7001 --db /tmp/b.redb --count 2000
//! channel-node send --dir /tmp/a --id 1 --bind 127.0.0.1:7001 --peer 127.0.0.1:7002 --db /tmp/a.redb --count 2000 --rate 500
//! ```

use clap::Parser;
use exon_outbox::node::{NodeOpts, Role};
use exon_outbox::{channel, Applied, Error};

/// A node of the channel crash test.
#[derive(Debug, Parser)]
struct Opts {
    #[command(flatten)]
    node: NodeOpts,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let Opts { node } = Opts::parse();
    let (mut ep, other) = node.endpoint().await?;
    match node.role {
        Role::Recv => channel::recv(ep, Applied::open(&node.db)?).await,
        Role::Send => channel::send(&mut ep, other, node.count, node.rate).await,
    }
}
