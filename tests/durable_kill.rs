//! Durable endpoints as separate processes on 127.0.0.1 (`src/bin/durable-node.rs`), each
//! killed with SIGKILL at random moments during a stream and started again on its directory;
//! at the end every message was processed by the receiving application exactly once, and
//! every verdict reached the sender.
//!
//! A short run is part of `cargo test`; a long one:
//! `DURABLE_KILLS=200 DURABLE_COUNT=20000 cargo test --release --test durable_kill -- --nocapture`.

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
    peer: SocketAddr,
    dir: std::path::PathBuf,
    out: std::path::PathBuf,
    count: u64,
    child: Option<Child>,
    starts: u32,
}

impl Node {
    fn start(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_durable-node"))
            .arg(self.role)
            .args(["--id", &self.id.to_string()])
            .args(["--bind", &self.bind.to_string()])
            .args(["--peer", &self.peer.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--out")
            .arg(&self.out)
            .args(["--count", &self.count.to_string()])
            .spawn()
            .expect("start durable-node");
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
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn node(
    role: &'static str,
    id: u64,
    bind: SocketAddr,
    peer: SocketAddr,
    root: &Path,
    count: u64,
) -> Node {
    Node {
        role,
        id,
        bind,
        peer,
        dir: root.join(format!("{role}.dir")),
        out: root.join(format!("{role}.out")),
        count,
        child: None,
        starts: 0,
    }
}

#[test]
fn killed_and_restarted_processes_keep_exactly_once() {
    let kills = env_or("DURABLE_KILLS", 12);
    let count = env_or("DURABLE_COUNT", 20000);
    let mut seed = env_or("DURABLE_SEED", 0x9E37_79B9_7F4A_7C15) | 1;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let root = tempfile::tempdir().unwrap();
    let (sa, ra) = (free_addr(), free_addr());
    let mut recv = node("recv", 2, ra, sa, root.path(), count);
    let mut send = node("send", 1, sa, ra, root.path(), count);
    recv.start();
    send.start();
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(50 + rand(400)));
        let victim = if rand(2) == 0 { &mut recv } else { &mut send };
        if victim.finished().is_some() {
            // The sender finished its part: nothing left to kill it in.
            continue;
        }
        victim.kill();
        eprintln!("kill {k}: {} (start {})", victim.role, victim.starts);
        std::thread::sleep(Duration::from_millis(rand(100)));
        victim.start();
    }
    // Then no more kills: the sender finishes once every verdict came; the receiver runs
    // until stopped.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(ok) = send.finished() {
            assert!(ok, "the sender failed");
            break;
        }
        assert_eq!(recv.finished(), None, "the receiver stopped");
        assert!(Instant::now() < deadline, "the stream did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    recv.kill();
    // The receiving application processed each message (stable id) exactly once, and every
    // item at least once: twice only where the sending application sent it again itself.
    let text = std::fs::read_to_string(&recv.out).unwrap();
    let mut times: HashMap<u32, u32> = HashMap::new();
    let mut keys: HashMap<String, u32> = HashMap::new();
    for line in text.lines() {
        let (i, key) = line.split_once(' ').unwrap();
        *times.entry(i.parse().unwrap()).or_default() += 1;
        *keys.entry(key.to_string()).or_default() += 1;
    }
    let twice: Vec<_> = keys.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "messages processed twice: {twice:?}");
    let progress = std::fs::read_to_string(&send.out).unwrap();
    assert!(
        progress.contains("done"),
        "every verdict reached the sender"
    );
    let mut resends: HashMap<u32, u32> = HashMap::new();
    for i in progress.lines().filter_map(|l| l.strip_prefix("resend ")) {
        *resends.entry(i.parse().unwrap()).or_default() += 1;
    }
    let mut sent_again = 0;
    for i in 0..count as u32 {
        let n = times.get(&i).copied().unwrap_or(0);
        let again = resends.get(&i).copied().unwrap_or(0);
        assert!(n >= 1, "item {i} never processed");
        assert!(
            n <= 1 + again,
            "item {i} processed {n} times, sent again {again} times"
        );
        sent_again += n - 1;
    }
    eprintln!("items processed twice because the sender application sent them again: {sent_again}");
    eprintln!(
        "{count} messages, {kills} kills: receiver started {} times, sender {} times",
        recv.starts, send.starts
    );
}
