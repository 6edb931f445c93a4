//! Real processes for the SIGKILL tests: a process killed and started again with the same
//! arguments, kills at random moments, the wait for a process's end, free loopback ports, a
//! small random generator, figures from the environment, a pseudo-random byte source any
//! part of which can be made again on its own, and a stream between two such processes
//! killed at random ([`KillRun`]).

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

    /// The program's file name and its first argument (`outbox-node send`).
    pub fn name(&self) -> String {
        let program = self.program.file_name().unwrap_or(self.program.as_os_str());
        let first = self.args.first().map(|a| a.to_string_lossy());
        format!(
            "{} {}",
            program.to_string_lossy(),
            first.unwrap_or_default()
        )
    }

    /// Waits until it exits, for at most `limit`, while `running` (a process that runs
    /// until killed) goes on.
    ///
    /// # Panics
    /// When it fails, when `running` stops, or past `limit`.
    pub fn wait_for_exit(&mut self, running: &mut Proc, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(ok) = self.finished() {
                assert!(ok, "{} failed (its error above)", self.name());
                return;
            }
            let stopped = running.finished();
            assert_eq!(
                stopped,
                None,
                "{} stopped (its error above)",
                running.name()
            );
            assert!(
                Instant::now() < deadline,
                "{} did not finish in {limit:?}",
                self.name()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Kills one of `procs`, chosen at random, after each pause (`least` ms and up to `spread`
/// ms more) and starts it again after up to 100 ms, until `kills` kills or until one of
/// them ended by itself; `seed` makes the choices. Each kill is reported on stderr, with
/// `note()` after it. Returns the kills of each.
pub fn kill_at_random(
    procs: [&mut Proc; 2],
    kills: u64,
    (least, spread): (u64, u64),
    seed: u64,
    mut note: impl FnMut() -> String,
) -> [u32; 2] {
    let mut rand = xorshift(seed);
    let mut done = [0u32; 2];
    let started = Instant::now();
    let [a, b] = procs;
    while u64::from(done[0] + done[1]) < kills {
        std::thread::sleep(Duration::from_millis(least + rand(spread.max(1))));
        if a.finished().is_some() || b.finished().is_some() {
            break;
        }
        let i = usize::from(rand(2) == 1);
        let victim = if i == 0 { &mut *a } else { &mut *b };
        victim.kill();
        done[i] += 1;
        eprintln!(
            "{:6.1} s: kill {}: {} (start {}){}",
            started.elapsed().as_secs_f64(),
            done[0] + done[1],
            victim.name(),
            victim.starts(),
            note()
        );
        std::thread::sleep(Duration::from_millis(rand(100)));
        victim.start();
    }
    done
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

/// Bytes `offset..offset + buf.len()` of the pseudo-random source `seed` (SplitMix64 of each
/// 8-byte word's index): any part is made again on its own, so a writer restarted at some
/// offset goes on with the same bytes, and a test checks what arrived without keeping it.
/// No shift of the source matches it (a byte lost or repeated shows).
pub fn source(seed: u64, offset: u64, buf: &mut [u8]) {
    for (at, b) in (offset..).zip(buf) {
        let mut z = seed.wrapping_add((at / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        *b = (z >> (8 * (at % 8))) as u8;
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
        let procs = [&mut recv, &mut send];
        let [recv_kills, send_kills] =
            kill_at_random(procs, self.kills, (50, 400), self.seed, String::new);
        send.wait_for_exit(&mut recv, self.limit);
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
}

#[cfg(test)]
mod tests {
    use super::source;

    #[test]
    fn any_part_of_the_source_is_made_again_alike() {
        let mut whole = vec![0u8; 1000];
        source(7, 0, &mut whole);
        let mut part = vec![0u8; 101];
        source(7, 333, &mut part);
        assert_eq!(part, whole[333..434]);
        let mut other = vec![0u8; 1000];
        source(8, 0, &mut other);
        assert_ne!(other, whole, "another seed, other bytes");
        assert_ne!(whole[1..], whole[..999], "no shift by one matches");
    }
}
