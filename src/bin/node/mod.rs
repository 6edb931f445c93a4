//! What the crash tests' nodes (`durable-node`, `rpc-node`, `rpc-caller`, `stream-node`)
//! share: the flags of a durable endpoint on loopback (its driver shards too) and of its
//! peer (or peers, `--peer ID=ADDR` repeated), and that endpoint; for the one-way tests'
//! nodes (`durable-node`, `stream-node`), their side and id too; and the append-only line
//! files the nodes keep their own state in ([`open_lines`]).

use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// This node's id: 1 or 2 (the other is 3 minus it), or any where every `--peer`
    /// names its id.
    #[arg(long)]
    pub id: u64,
    #[command(flatten)]
    pub net: Net,
}

#[allow(dead_code)] // (the RPC nodes' ids are fixed)
impl Side {
    /// This node's durable endpoint ([`Net::endpoint`]), and its (first) peer's id.
    pub async fn endpoint(
        &self,
        cfg: EndpointConfig,
    ) -> Result<(Endpoint, NodeId), Box<dyn std::error::Error>> {
        let (me, other) = self.ids()?;
        let first = self.net.peers(other)[0].0;
        Ok((self.net.endpoint(me, other, cfg).await?, first))
    }

    /// Its peers' ids (the other node's for a `--peer` without an id).
    pub fn peer_ids(&self) -> Result<Vec<NodeId>, Box<dyn std::error::Error>> {
        let (_, other) = self.ids()?;
        Ok(self.net.peers(other).into_iter().map(|p| p.0).collect())
    }

    /// This node's id, and the other node's of a pair (3 minus it, for a `--peer` without
    /// an id; any where every peer names its id).
    fn ids(&self) -> Result<(NodeId, NodeId), Box<dyn std::error::Error>> {
        let me = NodeId::new(self.id).ok_or("--id")?;
        if (1..=2).contains(&self.id) {
            return Ok((me, NodeId::new(3 - self.id).ok_or("--id")?));
        }
        if self.net.peer.iter().any(|p| p.id.is_none()) {
            return Err("--id: 1 or 2, or an id with every --peer".into());
        }
        Ok((me, me))
    }
}

/// Where a node keeps its state (and in how many shards), where it listens, and where its
/// peers are.
#[derive(Debug, clap::Args)]
pub struct Net {
    /// The endpoint's directory (clock and journal).
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to bind.
    #[arg(long)]
    pub bind: SocketAddr,
    /// The other node's address (`ADDR`), or a peer's id and address (`ID=ADDR`);
    /// repeated for several peers.
    #[arg(long, required = true)]
    pub peer: Vec<Peer>,
    /// Driver shards of the endpoint (a journal each).
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
}

/// A peer on the command line: `ADDR` (the other node of a pair), or `ID=ADDR`.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub id: Option<NodeId>,
    pub addr: SocketAddr,
}

impl std::str::FromStr for Peer {
    type Err = String;

    fn from_str(s: &str) -> Result<Peer, String> {
        let (id, addr) = match s.split_once('=') {
            Some((id, addr)) => {
                let id = id.parse().ok().and_then(NodeId::new);
                (Some(id.ok_or(format!("a node id: {s}"))?), addr)
            }
            None => (None, s),
        };
        let addr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
        Ok(Peer { id, addr })
    }
}

impl Net {
    /// The peers, with `other` for one named by its address alone.
    pub fn peers(&self, other: NodeId) -> Vec<(NodeId, SocketAddr)> {
        let id = |p: &Peer| p.id.unwrap_or(other);
        self.peer.iter().map(|p| (id(p), p.addr)).collect()
    }

    /// Node `me`'s durable endpoint of `--shards` shards on `dir` and `bind`, configured by
    /// `cfg` (a peer's silence noticed after half a second), with its peers (`other` for a
    /// `--peer` without an id) at their addresses; all are in the test keyring.
    pub async fn endpoint(
        &self,
        me: NodeId,
        other: NodeId,
        mut cfg: EndpointConfig,
    ) -> Result<Endpoint, BindError> {
        cfg.protocol.timers.idle_timeout = Duration::from_millis(500);
        let peers = self.peers(other);
        let ep = Endpoint::builder(me)
            .security(insecure_test_security(me, peers.iter().map(|p| p.0)))
            .config(cfg.with_shards(self.shards))
            .durable(&self.dir)
            .bind(self.bind)
            .await?;
        for (id, addr) in peers {
            ep.add_peer(id, addr);
        }
        Ok(ep)
    }
}

/// The whole lines of the append-only file at `path` (empty if there is none), and the file
/// opened to append.
///
/// A SIGKILL can cut a `write` short where it crosses a page, leaving a torn last line; such a
/// line was never synced, so what it records never happened: it is cut off the file (and left
/// out of the text) before anything is appended after it.
pub fn open_lines(path: &Path) -> std::io::Result<(String, File)> {
    let mut text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    if whole < text.len() {
        file.set_len(whole as u64)?;
        file.sync_data()?;
        text.truncate(whole);
    }
    Ok((text, file))
}

#[cfg(test)]
mod tests {
    use super::open_lines;
    use std::io::Write;

    #[test]
    fn a_torn_last_line_is_cut_off_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("effects");
        let (text, _) = open_lines(&path).unwrap();
        assert_eq!(text, "", "no file: no lines");
        std::fs::write(&path, "1 0 0 n1 1 5\n2 0 1 n1 1 6\n3 0 2 n1 ").unwrap();
        let (text, mut file) = open_lines(&path).unwrap();
        assert_eq!(text, "1 0 0 n1 1 5\n2 0 1 n1 1 6\n");
        file.write_all(b"3 1 2 n1 1 8\n").unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert_eq!(after, "1 0 0 n1 1 5\n2 0 1 n1 1 6\n3 1 2 n1 1 8\n");
        let (again, _) = open_lines(&path).unwrap();
        assert_eq!(again, after, "whole lines are kept as they are");
    }
}
