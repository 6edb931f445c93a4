//! Durable endpoints as separate processes on 127.0.0.1 (`src/bin/durable-node.rs`), each
//! killed with SIGKILL at random moments during a stream and started again on its directory;
//! at the end every message was processed by the receiving application exactly once, and
//! every verdict reached the sender.
//!
//! A short run is part of `cargo test`; a long one:
//! `DURABLE_KILLS=200 DURABLE_COUNT=20000 cargo test --release --test durable_kill -- --nocapture`.
//! `DURABLE_SHARDS=2` runs two senders and two receivers, each endpoint of two driver shards
//! (one journal each), every sender sending to every receiver, the peers of each endpoint
//! on both its shards; `DURABLE_COUNT` is the items of all pairs together. `DURABLE_RATE`
//! paces each sender (messages a second), so that the senders are killed too.

mod common;
use common::whole_lines;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A free loopback port (bound, then released).
fn free_addr() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Node {
    role: &'static str,
    id: u64,
    bind: SocketAddr,
    /// The other side's nodes: ids and addresses.
    peers: Vec<(u64, SocketAddr)>,
    shards: usize,
    dir: std::path::PathBuf,
    out: std::path::PathBuf,
    count: u64,
    /// Senders: messages a second at most (0: unpaced).
    rate: u64,
    child: Option<Child>,
    starts: u32,
}

impl Node {
    fn start(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_durable-node"));
        cmd.arg(self.role)
            .args(["--id", &self.id.to_string()])
            .args(["--bind", &self.bind.to_string()])
            .args(["--shards", &self.shards.to_string()]);
        for (id, addr) in &self.peers {
            cmd.args(["--peer", &format!("{id}={addr}")]);
        }
        cmd.arg("--dir")
            .arg(&self.dir)
            .arg("--out")
            .arg(&self.out)
            .args(["--count", &self.count.to_string()]);
        if self.rate > 0 && self.role == "send" {
            cmd.args(["--rate", &self.rate.to_string()]);
        }
        let child = cmd.spawn().expect("start durable-node");
        self.child = Some(child);
        self.starts += 1;
    }

    /// SIGKILL, then wait for the process to be gone.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process ended (successfully: it finished its part).
    fn finished(&mut self) -> Option<bool> {
        let c = self.child.as_mut()?;
        c.try_wait().unwrap().map(|s| s.success())
    }

    fn name(&self) -> String {
        format!("{} n{}", self.role, self.id)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Node ids, one owned by each of `shards` shards (`shard_of`), none of `taken`: a
/// sharded endpoint's peers then fall on every shard.
fn ids(shards: usize, taken: &[u64]) -> Vec<u64> {
    (0..shards)
        .map(|k| {
            (1..1000)
                .find(|&id| {
                    let n = exon::NodeId::new(id).unwrap();
                    !taken.contains(&id) && exon::endpoint::shard_of(n, shards) == k
                })
                .unwrap()
        })
        .collect()
}

/// `shards` senders and as many receivers, each with `shards` driver shards: every sender
/// sends `count` items to every receiver, and each endpoint's peers fall on all its
/// shards.
fn nodes(shards: usize, root: &Path, (count, rate): (u64, u64)) -> (Vec<Node>, Vec<Node>) {
    let senders = ids(shards, &[]);
    let receivers = ids(shards, &senders);
    let addrs: HashMap<u64, SocketAddr> = senders
        .iter()
        .chain(&receivers)
        .map(|&id| (id, free_addr()))
        .collect();
    let make = |role, id: u64, others: &[u64]| Node {
        role,
        id,
        bind: addrs[&id],
        peers: others.iter().map(|o| (*o, addrs[o])).collect(),
        shards,
        dir: root.join(format!("{role}{id}.dir")),
        out: root.join(format!("{role}{id}.out")),
        count,
        rate,
        child: None,
        starts: 0,
    };
    (
        senders
            .iter()
            .map(|&id| make("send", id, &receivers))
            .collect(),
        receivers
            .iter()
            .map(|&id| make("recv", id, &senders))
            .collect(),
    )
}

/// How many times each line of `lines` occurs.
fn counts<'a>(lines: impl Iterator<Item = &'a str>) -> HashMap<String, u32> {
    let mut m = HashMap::new();
    for l in lines {
        *m.entry(l.to_string()).or_default() += 1;
    }
    m
}

#[test]
fn killed_and_restarted_processes_keep_exactly_once() {
    let kills = env_or("DURABLE_KILLS", 12);
    let shards = env_or("DURABLE_SHARDS", 1).max(1) as usize;
    // Items in all, split over the pairs of a sender and a receiver.
    let count = env_or("DURABLE_COUNT", 20000) / (shards * shards) as u64;
    let mut seed = env_or("DURABLE_SEED", 0x9E37_79B9_7F4A_7C15) | 1;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let root = tempfile::tempdir().unwrap();
    // Each sender's pace (messages a second, 0: unpaced), to make the streams outlast the
    // kills.
    let rate = env_or("DURABLE_RATE", 0);
    let (mut send, mut recv) = nodes(shards, root.path(), (count, rate));
    for n in recv.iter_mut().chain(send.iter_mut()) {
        n.start();
    }
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(50 + rand(400)));
        let pick = rand(2 * shards as u64) as usize;
        let victim = if pick < shards {
            &mut recv[pick]
        } else {
            &mut send[pick - shards]
        };
        if victim.finished().is_some() {
            // The sender finished its part: nothing left to kill it in.
            continue;
        }
        victim.kill();
        eprintln!("kill {k}: {} (start {})", victim.name(), victim.starts);
        std::thread::sleep(Duration::from_millis(rand(100)));
        victim.start();
    }
    // Then no more kills: the senders finish once every verdict came; the receivers run
    // until stopped.
    let deadline = Instant::now() + Duration::from_secs(120);
    while send.iter_mut().any(|s| s.finished().is_none()) {
        for r in recv.iter_mut() {
            assert_eq!(r.finished(), None, "{} stopped", r.name());
        }
        assert!(Instant::now() < deadline, "the streams did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    for s in send.iter_mut() {
        assert_eq!(s.finished(), Some(true), "{} failed", s.name());
    }
    for r in recv.iter_mut() {
        r.kill();
    }
    // Each receiving application processed each message (stable id) exactly once, and
    // every item at least once: twice only where the sending application sent it again
    // itself. Items are named `<peer>.<item>` on both sides.
    let mut sent_again = 0;
    let progress: Vec<String> = send.iter().map(|s| whole_lines(&s.out)).collect();
    for (s, p) in send.iter().zip(&progress) {
        assert!(p.contains("done"), "every verdict reached {}", s.name());
    }
    for r in &recv {
        let text = whole_lines(&r.out);
        let pairs = text.lines().map(|l| l.split_once(' ').unwrap());
        let times = counts(pairs.clone().map(|(item, _)| item));
        let keys = counts(pairs.map(|(_, key)| key));
        let twice: Vec<_> = keys.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "processed twice at {}: {twice:?}",
            r.name()
        );
        for (s, p) in send.iter().zip(&progress) {
            let resends = counts(p.lines().filter_map(|l| l.strip_prefix("resend ")));
            for i in 0..count {
                let n = times.get(&format!("n{}.{i}", s.id)).copied().unwrap_or(0);
                let again = resends.get(&format!("n{}.{i}", r.id)).copied().unwrap_or(0);
                assert!(
                    n >= 1,
                    "item {i} of {} never processed at {}",
                    s.name(),
                    r.name()
                );
                assert!(
                    n <= 1 + again,
                    "item {i} of {} processed {n} times at {}, sent again {again} times",
                    s.name(),
                    r.name()
                );
                sent_again += n - 1;
            }
        }
    }
    eprintln!("items processed twice because the sender application sent them again: {sent_again}");
    let starts = |ns: &[Node]| ns.iter().map(|n| n.starts.to_string()).collect::<Vec<_>>();
    eprintln!(
        "{} messages, {shards} shard(s), {kills} kills: receivers started {:?} times, senders {:?}",
        count * (shards * shards) as u64,
        starts(&recv),
        starts(&send)
    );
}
