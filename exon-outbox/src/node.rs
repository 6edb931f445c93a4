//! What the SIGKILL tests' nodes (`outbox-node`, `channel-node`) share: their flags and
//! their durable endpoint.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use exon::proto::crypto::insecure_test_security;
use exon::{Endpoint, EndpointConfig, NodeId};

use crate::Error;

/// Which side a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The sender.
    Send,
    /// The receiver (`ack_after_processing`: it acknowledges each message once its effect
    /// is stored).
    Recv,
}

/// The flags of a node of a SIGKILL test (the harness: `exon_testkit::procs::KillRun`).
#[derive(Debug, clap::Args)]
pub struct NodeOpts {
    /// Which side.
    #[arg(value_enum)]
    pub role: Role,
    /// The endpoint's directory (clock and journal).
    #[arg(long)]
    pub dir: PathBuf,
    /// This node's id, 1 or 2 (the other is 3 minus it).
    #[arg(long)]
    pub id: u64,
    /// Address to bind.
    #[arg(long)]
    pub bind: SocketAddr,
    /// The other node's address.
    #[arg(long)]
    pub peer: SocketAddr,
    /// The application's database.
    #[arg(long)]
    pub db: PathBuf,
    /// Items in the stream.
    #[arg(long)]
    pub count: u64,
    /// Items sent a second at most (0: as fast as the endpoint takes them).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
}

impl NodeOpts {
    /// The node's durable endpoint on its directory, bound and knowing the other node;
    /// returns it and the other node's id. A receiver acknowledges each message once the
    /// application says so (`ack_after_processing`).
    pub async fn endpoint(&self) -> Result<(Endpoint, NodeId), Error> {
        let id = |n: u64| {
            NodeId::new(n)
                .filter(|_| (1..=2).contains(&self.id))
                .ok_or(Error::Id(self.id))
        };
        let (me, other) = (id(self.id)?, id(3 - self.id.min(2))?);
        let mut cfg = EndpointConfig::default();
        cfg.ack_after_processing = self.role == Role::Recv;
        cfg.protocol.timers.idle_timeout = Duration::from_millis(500);
        let ep = Endpoint::builder(me)
            .security(insecure_test_security(me, [other]))
            .config(cfg)
            .durable(&self.dir)
            .bind(self.bind)
            .await?;
        ep.add_peer(other, self.peer);
        Ok((ep, other))
    }
}
