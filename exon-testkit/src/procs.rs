//! Real processes for the SIGKILL tests: a process killed and started again with the same
//! arguments, free loopback ports, a small random generator, figures from the environment,
//! and a stream between two such processes killed at random ([`KillRun`]).

use std::ffi::OsString;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A process a test kills with SIGKILL at random moments and starts again with the same
/// arguments. Dropping it (also on a panic) kills it: no process outlives its test.
#[derive(Debug)]
pub struct Proc {
    program: PathBuf,
    args: Vec<OsString>,
    child: Option<Child>,
    starts: u32,
}

impl Proc {
    /// A process of `program` with `args`, not started yet.
    pub fn new<A: Into<OsString>>(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = A>,
    ) -> Proc {
        let args = args.into_iter().map(Into::into).collect();
        Proc {
            program: program.into(),
            args,
            child: None,
            starts: 0,
        }
    }

    /// Starts it (again).
    ///
    /// # Panics
    /// When the program cannot be started.
    pub fn start(&mut self) {
        let child = Command::new(&self.program).args(&self.args).spawn();
        self.child = Some(child.unwrap_or_else(|e| panic!("start {:?}: {e}", self.program)));
        self.starts += 1;
    }

    /// SIGKILL, then waits for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether the process ended, and how (`Some(true)`: it exited successfully); `None`
    /// while it runs, or when it is not started.
    pub fn finished(&mut self) -> Option<bool> {
        let c = self.child.as_mut()?;
        c.try_wait().ok().flatten().map(|s| s.success())
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The environment variable `name` as a number, or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A free loopback port (bound, then released).
///
/// # Panics
/// When no UDP socket can be bound on 127.0.0.1.
pub fn free_addr() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    socket.local_addr().expect("local address")
}

/// A xorshift generator from `seed`: each call `rand(n)` gives a number in `0..n` (`n` > 0).
pub fn xorshift(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut s = seed | 1;
    move |n| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    }
}

/// A stream between two nodes of one program, `send` (node 1) and `recv` (node 2), each
/// killed at random moments and started again on its directory and database: the
/// figures of a SIGKILL test.
#[derive(Debug, Clone)]
pub struct KillRun {
    /// The nodes' program; its flags: the role, `--id`, `--bind`, `--peer`, `--count`,
    /// `--rate`, `--dir`, `--db`.
    pub program: PathBuf,
    /// Items in the stream.
    pub count: u64,
    /// Kills, of either side at random, one every 50 to 450 ms.
    pub kills: u64,
    /// The seed of the kills.
    pub seed: u64,
    /// Items the sender sends a second.
    pub rate: u64,
    /// The time the stream has to finish after the kills.
    pub limit: Duration,
}

/// What a [`KillRun`] left: the two databases, the kills, the time.
#[derive(Debug)]
pub struct Killed {
    /// The receiver's database.
    pub recv_db: PathBuf,
    /// The sender's database.
    pub send_db: PathBuf,
    /// Kills of the receiver.
    pub recv_kills: u32,
    /// Kills of the sender.
    pub send_kills: u32,
    /// From the start to the sender's end.
    pub elapsed: Duration,
}

impl KillRun {
    /// The run's figures from the environment: `{prefix}_KILLS`, `{prefix}_COUNT`,
    /// `{prefix}_SEED`, `{prefix}_RATE` (items a second) and `{prefix}_LIMIT_S`, with
    /// `kills` and `count` by default; the rate by default makes the stream last about half
    /// a second a kill, longer than the kills (one every 300 ms on average, and the
    /// restart).
    pub fn from_env(program: impl Into<PathBuf>, prefix: &str, kills: u64, count: u64) -> KillRun {
        let var = |name: &str, default: u64| env_or(&format!("{prefix}_{name}"), default);
        let (kills, count) = (var("KILLS", kills), var("COUNT", count));
        KillRun {
            program: program.into(),
            count,
            kills,
            seed: var("SEED", 0x9E37_79B9_7F4A_7C15),
            rate: var("RATE", (count * 2 / kills.max(1)).max(1)),
            limit: Duration::from_secs(var("LIMIT_S", 300)),
        }
    }

    /// Runs the stream under `root` until the sender exits, killing either side at random
    /// meanwhile, then kills the receiver.
    ///
    /// # Panics
    /// When the sender fails, the receiver stops on its own, or the stream does not finish
    /// within the limit.
    pub fn run(&self, root: &Path) -> Killed {
        let started = Instant::now();
        let (sa, ra) = (free_addr(), free_addr());
        let (mut recv, recv_db) = self.side("recv", 2, (ra, sa), root, 0);
        let (mut send, send_db) = self.side("send", 1, (sa, ra), root, self.rate);
        recv.start();
        send.start();
        let (recv_kills, send_kills) = self.kill_at_random(&mut recv, &mut send);
        wait_for_sender(&mut recv, &mut send, self.limit);
        recv.kill();
        Killed {
            recv_db,
            send_db,
            recv_kills,
            send_kills,
            elapsed: started.elapsed(),
        }
    }

    /// The `role` side (`send`, `recv`), node `id`, binding `bind` and sending to `peer`,
    /// with its directory and database under `root`; `rate`: items a second (the sender's).
    fn side(
        &self,
        role: &str,
        id: u64,
        (bind, peer): (SocketAddr, SocketAddr),
        root: &Path,
        rate: u64,
    ) -> (Proc, PathBuf) {
        let db = root.join(format!("{role}.redb"));
        let mut args: Vec<OsString> = vec![role.into()];
        let flags = [
            ("--id", id.to_string()),
            ("--bind", bind.to_string()),
            ("--peer", peer.to_string()),
            ("--count", self.count.to_string()),
            ("--rate", rate.to_string()),
        ];
        for (flag, value) in flags {
            args.extend([flag.into(), value.into()]);
        }
        args.extend(["--dir".into(), root.join(format!("{role}.dir")).into()]);
        args.extend(["--db".into(), db.clone().into()]);
        (Proc::new(&self.program, args), db)
    }

    /// Kills a random side every 50 to 450 ms until `kills` kills, or until the sender
    /// finished its part; returns the kills of (receiver, sender).
    fn kill_at_random(&self, recv: &mut Proc, send: &mut Proc) -> (u32, u32) {
        let mut rand = xorshift(self.seed);
        let mut done = (0, 0);
        while u64::from(done.0 + done.1) < self.kills {
            std::thread::sleep(Duration::from_millis(50 + rand(400)));
            if send.finished().is_some() {
                break;
            }
            let on_recv = rand(2) == 0;
            let victim = if on_recv { &mut *recv } else { &mut *send };
            victim.kill();
            if on_recv {
                done.0 += 1;
            } else {
                done.1 += 1;
            }
            let role = if on_recv { "recv" } else { "send" };
            eprintln!(
                "kill {}: {role} (start {})",
                done.0 + done.1,
                victim.starts()
            );
            std::thread::sleep(Duration::from_millis(rand(100)));
            victim.start();
        }
        done
    }
}

/// Waits for the sender to finish (the receiver runs until stopped).
fn wait_for_sender(recv: &mut Proc, send: &mut Proc, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(ok) = send.finished() {
            assert!(ok, "the sender failed");
            return;
        }
        assert_eq!(recv.finished(), None, "the receiver stopped");
        assert!(
            Instant::now() < deadline,
            "the stream did not finish in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
