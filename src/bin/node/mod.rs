//! What the crash tests' nodes (`durable-node`, `rpc-node`, `rpc-caller`, `stream-node`)
//! share: the flags of a durable endpoint on loopback and of its one peer, and that endpoint;
//! for the one-way tests' nodes (`durable-node`, `stream-node`), their side and id too.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use exon::endpoint::BindError;
use exon::proto::crypto::insecure_test_security;
use exon::{Endpoint, EndpointConfig, NodeId};

/// Which side of a one-way crash test a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[allow(dead_code)] // (the RPC nodes' sides are their programs)
pub enum Role {
    Send,
    Recv,
}

/// A node of a one-way crash test: its side, its id and its [`Net`].
#[derive(Debug, clap::Args)]
#[allow(dead_code)] // (the RPC nodes' ids are fixed)
pub struct Side {
    /// Which side.
    #[arg(value_enum)]
    pub role: Role,
    /// This node's id, 1 or 2 (the other is 3 minus it).
    #[arg(long)]
    pub id: u64,
    #[command(flatten)]
    pub net: Net,
}

#[allow(dead_code)] // (the RPC nodes' ids are fixed)
impl Side {
    /// This node's durable endpoint ([`Net::endpoint`]), and the other node's id.
    pub async fn endpoint(
        &self,
        cfg: EndpointConfig,
    ) -> Result<(Endpoint, NodeId), Box<dyn std::error::Error>> {
        let id = |n: u64| {
            NodeId::new(n)
                .filter(|_| (1..=2).contains(&self.id))
                .ok_or("--id: 1 or 2")
        };
        let (me, other) = (id(self.id)?, id(3 - self.id.min(2))?);
        Ok((self.net.endpoint(me, other, cfg).await?, other))
    }
}

/// Where a node keeps its state, where it listens, and where its peer is.
#[derive(Debug, clap::Args)]
pub struct Net {
    /// The endpoint's directory (clock and journal).
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to bind.
    #[arg(long)]
    pub bind: SocketAddr,
    /// The other node's address.
    #[arg(long)]
    pub peer: SocketAddr,
}

impl Net {
    /// Node `me`'s durable endpoint on `dir` and `bind`, configured by `cfg` (a peer's
    /// silence noticed after half a second), with `other` at `peer`; both are in the test
    /// keyring.
    pub async fn endpoint(
        &self,
        me: NodeId,
        other: NodeId,
        mut cfg: EndpointConfig,
    ) -> Result<Endpoint, BindError> {
        cfg.protocol.timers.idle_timeout = Duration::from_millis(500);
        let ep = Endpoint::builder(me)
            .security(insecure_test_security(me, [other]))
            .config(cfg)
            .durable(&self.dir)
            .bind(self.bind)
            .await?;
        ep.add_peer(other, self.peer);
        Ok(ep)
    }
}
