//! What every node-running subcommand shares: its identity, keys, peers and address, from
//! flags and from a TOML configuration file (flags win), and binding the endpoint.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use base64::Engine;
use clap::Args;
use exon::keyfile::{read_keyring, read_secret};
use exon::proto::{Identity, Keyring, PublicKey, Security};
use exon::{Endpoint, EndpointConfig, NodeId};
use serde::Deserialize;

/// The options of a node: `--config`, identity, keys, peers, address.
#[derive(Debug, Clone, Args)]
pub struct NodeOpts {
    /// A TOML configuration file with any of the options below (`id`, `bind`, `key`,
    /// `keyring`, `peers`, `peer_keys`, `open`, `insecure`, `metrics`) and an `[endpoint]` table
    /// (exon's `EndpointConfig`); flags override it. Paths in it are relative to its folder.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// This node's id (default: the id the keyring gives this node's public key, else the
    /// key's self-certifying id; 1 with --insecure).
    #[arg(long)]
    pub id: Option<u64>,
    /// The address to bind, HOST:PORT (port 0: any free port; listen and bench server print
    /// the address bound).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// This node's secret key file (`exon keygen --out FILE` makes one) [default: exon.key].
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// A keyring file: the public keys of the peers this node accepts and seals to, one
    /// `ID PUBLIC_KEY` line each (the lines `exon keygen` prints).
    #[arg(long, value_name = "FILE")]
    pub keyring: Option<PathBuf>,
    /// A peer and its address, ID@HOST:PORT (repeatable).
    #[arg(long = "peer", value_name = "ID@HOST:PORT")]
    pub peers: Vec<String>,
    /// A peer's public key, ID=KEY, the key as 64 hex digits, 44 base64 characters, or a
    /// file holding a keyring line or the key (repeatable).
    #[arg(long = "peer-key", value_name = "ID=KEY")]
    pub peer_keys: Vec<String>,
    /// Also accepts peers whose id is the self-certifying id of their key (an open group),
    /// beside those in the keyring.
    #[arg(long)]
    pub open: bool,
    /// Plaintext datagrams: no keys, no authentication, anyone who reaches the socket can
    /// forge any peer. For loopback tests and benchmarks only.
    #[arg(long)]
    pub insecure: bool,
}

/// The configuration file: the same options as the flags, and the endpoint's own.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    id: Option<u64>,
    bind: Option<String>,
    key: Option<PathBuf>,
    keyring: Option<PathBuf>,
    #[serde(default)]
    peers: Vec<String>,
    #[serde(default)]
    peer_keys: Vec<String>,
    #[serde(default)]
    open: bool,
    #[serde(default)]
    insecure: bool,
    /// `exon listen`: where to serve Prometheus metrics.
    pub metrics: Option<String>,
    /// exon's endpoint configuration (`EndpointConfig`, its serde form).
    endpoint: Option<EndpointConfig>,
}

/// Reads the configuration file, if one is given; relative paths in it are made relative to
/// its folder.
pub fn read_config(path: Option<&Path>) -> anyhow::Result<FileConfig> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    let mut c: FileConfig = toml::from_str(&text)
        .with_context(|| format!("{} is not a valid configuration", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    for p in [&mut c.key, &mut c.keyring].into_iter().flatten() {
        if p.is_relative() {
            *p = dir.join(&*p);
        }
    }
    Ok(c)
}

/// A node's settings, flags and file merged.
#[derive(Debug)]
pub struct Node {
    /// This node's id.
    pub id: NodeId,
    /// How datagrams are protected.
    pub security: Security,
    /// Where to bind.
    pub bind: String,
    /// The peers given with their addresses.
    pub peers: Vec<(NodeId, SocketAddr)>,
    /// The keyring file given (sealed mode), for messages.
    pub keyring: Option<PathBuf>,
    /// The endpoint's configuration.
    pub config: EndpointConfig,
    /// The configuration file's `metrics` address.
    pub metrics: Option<String>,
}

/// The default secret key file.
const DEFAULT_KEY: &str = "exon.key";

impl NodeOpts {
    /// Merges the flags with the configuration file (flags win; a list given as flags
    /// replaces the file's) and loads the keys. `default_bind` is used when neither gives
    /// an address.
    pub fn resolve(&self, default_bind: &str) -> anyhow::Result<Node> {
        let file = read_config(self.config.as_deref())?;
        let pick = |flags: &Vec<String>, file: &Vec<String>| {
            if flags.is_empty() {
                file.clone()
            } else {
                flags.clone()
            }
        };
        let peers = pick(&self.peers, &file.peers)
            .iter()
            .map(|p| parse_peer(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let peer_keys = pick(&self.peer_keys, &file.peer_keys)
            .iter()
            .map(|p| parse_peer_key(p))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let insecure = self.insecure || file.insecure;
        let id = self.id.or(file.id);
        let mut keyring_given = None;
        let (id, security) = if insecure {
            let id = id.unwrap_or(1);
            (node_id(id)?, Security::InsecurePlaintext)
        } else {
            let key = self
                .key
                .clone()
                .or(file.key)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_KEY));
            let keyring = self.keyring.clone().or(file.keyring);
            keyring_given.clone_from(&keyring);
            sealed(
                id,
                &key,
                keyring.as_deref(),
                &peer_keys,
                self.open || file.open,
            )?
        };
        let bind = self
            .bind
            .clone()
            .or(file.bind)
            .unwrap_or_else(|| default_bind.to_string());
        Ok(Node {
            id,
            security,
            bind,
            peers,
            keyring: keyring_given,
            config: file.endpoint.unwrap_or_default(),
            metrics: file.metrics,
        })
    }
}

/// The sealed identity: the secret key, the keyring and the extra peer keys.
fn sealed(
    id: Option<u64>,
    key: &Path,
    keyring: Option<&Path>,
    peer_keys: &[(NodeId, PublicKey)],
    open: bool,
) -> anyhow::Result<(NodeId, Security)> {
    if !key.exists() {
        bail!(
            "no key file at {k}: run `exon keygen --out {k}` (or give --key FILE; --insecure \
             runs without keys)",
            k = key.display()
        );
    }
    let secret = read_secret(key).map_err(|e| anyhow!("bad secret key file: {e}"))?;
    let public = secret.public_key();
    let mut ring = match keyring {
        Some(path) if !path.exists() => bail!(
            "no keyring file at {}: put the peers' keyring lines (printed by `exon keygen`) \
             in it",
            path.display()
        ),
        Some(path) => read_keyring(path).map_err(|e| anyhow!("bad keyring file: {e}"))?,
        None => Keyring::new(),
    };
    for (peer, k) in peer_keys {
        ring.insert(*peer, *k);
    }
    let id = match id {
        Some(id) => node_id(id)?,
        None => ring
            .iter()
            .find(|(_, k)| **k == public)
            .map(|(id, _)| id)
            .unwrap_or_else(|| public.self_certifying_id()),
    };
    let identity = Identity::new(secret)
        .with_keyring(ring)
        .allow_self_certifying(open);
    Ok((id, Security::Sealed(identity)))
}

fn node_id(id: u64) -> anyhow::Result<NodeId> {
    NodeId::new(id).ok_or_else(|| anyhow!("node id {id} is above the largest, 2^62 - 1"))
}

/// Splits `ID<sep>REST` (`what` and `form` name it in errors) into the node id and the rest.
fn split_id<'a>(
    text: &'a str,
    sep: char,
    what: &str,
    form: &str,
) -> anyhow::Result<(NodeId, &'a str)> {
    let (id, rest) = text
        .split_once(sep)
        .ok_or_else(|| anyhow!("{what} `{text}`: expected {form}"))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|_| anyhow!("{what} `{text}`: `{id}` is not a node id (a number)"))?;
    Ok((node_id(id)?, rest))
}

/// Parses `ID@HOST:PORT` (a host name is resolved; `[::1]:7000` for IPv6).
pub fn parse_peer(text: &str) -> anyhow::Result<(NodeId, SocketAddr)> {
    let (id, addr) = split_id(text, '@', "peer", "ID@HOST:PORT, e.g. 2@127.0.0.1:7000")?;
    Ok((id, resolve(addr)?))
}

/// Resolves `HOST:PORT` to its first address.
pub fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .map_err(|e| anyhow!("address `{addr}`: {e} (expected HOST:PORT, e.g. 127.0.0.1:7000)"))?
        .next()
        .ok_or_else(|| anyhow!("address `{addr}` resolves to nothing"))
}

/// Parses `ID=KEY`, the key as hex, base64, or a file holding it (or a keyring line).
pub fn parse_peer_key(text: &str) -> anyhow::Result<(NodeId, PublicKey)> {
    let (id, key) = split_id(text, '=', "peer key", "ID=KEY (hex, base64 or a file)")?;
    Ok((id, parse_public_key(key.trim())?))
}

/// A public key as 64 hex digits, 44 base64 characters, or a file whose last word on its
/// first line that is not a comment is one of those.
fn parse_public_key(text: &str) -> anyhow::Result<PublicKey> {
    if let Some(k) = key_from_text(text) {
        return Ok(k);
    }
    let path = Path::new(text);
    if path.is_file() {
        let content = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the key file {}", path.display()))?;
        let line = content
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .find(|l| !l.is_empty())
            .unwrap_or("");
        return line
            .split_whitespace()
            .last()
            .and_then(key_from_text)
            .ok_or_else(|| {
                anyhow!(
                    "{}: no public key in it (expected a keyring line, `ID KEY`, or the key)",
                    path.display()
                )
            });
    }
    bail!(
        "`{text}` is not a public key (64 hex digits or 44 base64 characters) nor a file; \
         `exon keygen --show KEY_FILE` prints a node's"
    )
}

fn key_from_text(text: &str) -> Option<PublicKey> {
    if let Ok(k) = PublicKey::from_hex(text) {
        return Some(k);
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    PublicKey::from_hex(&to_hex(&bytes)).ok()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses a duration: a number with a unit, `ms`, `s` or `m` (`1.5s`, `250ms`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        return Err(format!("`{text}`: give a unit, e.g. 5s, 250ms or 2m"));
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (e.g. 5s, 250ms)"))?;
    if !(v.is_finite() && v >= 0.0 && v * scale < 1e9) {
        return Err(format!("`{text}` is out of range"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Binds the node's endpoint and adds its peers.
pub async fn bind(node: &Node) -> anyhow::Result<Endpoint> {
    let addr = resolve(&node.bind).context("--bind")?;
    let ep = Endpoint::builder(node.id)
        .security(node.security.clone())
        .config(node.config.clone())
        .bind(addr)
        .await
        .with_context(|| format!("cannot bind {addr}"))?;
    for (id, addr) in &node.peers {
        ep.add_peer(*id, *addr);
    }
    Ok(ep)
}

/// The peer a command talks to: `--to`, else the only `--peer`.
pub fn target(node: &Node, to: Option<u64>) -> anyhow::Result<NodeId> {
    match (to, node.peers.as_slice()) {
        (Some(id), _) => node_id(id),
        (None, [(id, _)]) => Ok(*id),
        (None, []) => bail!("no peer: give --peer ID@HOST:PORT"),
        (None, _) => bail!("several peers: say which with --to ID"),
    }
}

/// A bind address of the same family as `peer` and any port: where a client binds by
/// default.
pub fn any_addr_for(peers: &[(NodeId, SocketAddr)]) -> &'static str {
    match peers.first() {
        Some((_, SocketAddr::V6(_))) => "[::]:0",
        _ => "0.0.0.0:0",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_and_keys_parse_or_say_what_is_wrong() {
        let (id, addr) = parse_peer("7@127.0.0.1:7000").unwrap();
        assert_eq!((id.get(), addr.port()), (7, 7000));
        assert!(parse_peer("[::1]:7000").is_err());
        assert!(parse_peer("x@127.0.0.1:1")
            .unwrap_err()
            .to_string()
            .contains("node id"));
        let key = exon::keyfile::generate_secret().public_key();
        let (_, k) = parse_peer_key(&format!("3={}", key.to_hex())).unwrap();
        assert_eq!(k, key);
        let hex = key.to_hex();
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        assert_eq!(parse_peer_key(&format!("3={b64}")).unwrap().1, key);
        assert!(parse_peer_key("3=nothing-like-a-key").is_err());
        assert!(parse_peer_key("3").is_err());
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
