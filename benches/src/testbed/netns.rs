//! The testbed's plumbing: namespaces, TUN devices and endpoint processes.
//!
//! The testbed's plumbing: two end namespaces joined through the emulator's TUN devices in
//! a middle namespace, and the endpoint processes started inside them. Everything created
//! is removed by `Drop` (also on error, panic or interrupt), and stale namespaces of dead
//! runs are removed at start.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::testbed::emulator::{DirCounters, Emulator, Impairment};
use crate::testbed::sys;

/// Prefix of every namespace the testbed creates: `exontb-<pid>-<a|b|m>`.
const PREFIX: &str = "exontb-";
/// Address of side a (the sender or RPC client).
pub const ADDR_A: &str = "10.200.0.1";
/// Address of side b (the receiver or RPC server).
pub const ADDR_B: &str = "10.200.0.2";
/// MTU of both TUN devices.
pub const MTU: usize = 1500;

/// An error of the harness (not of a measured system).
pub type Result<T> = std::result::Result<T, String>;

/// Runs `ip` with `args`; an error carries its stderr.
fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why the testbed cannot run here, if it cannot (not root, no TUN, no `ip`).
pub fn unsupported() -> Option<String> {
    if !sys::is_root() {
        return Some("needs root (network namespaces and TUN devices)".into());
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        return Some(format!("cannot open /dev/net/tun: {e}"));
    }
    if Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        return Some("the `ip` command (iproute2) is missing".into());
    }
    None
}

/// Removes namespaces of our prefix whose owning process is gone.
pub fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !sys::pid_alive(p)) {
            eprintln!("testbed: removing stale namespace {name}");
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// A network namespace that is deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn create(name: String) -> Result<Netns> {
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        // No IPv6 chatter (router solicitations) on the link: only the measured traffic.
        for key in ["all", "default"] {
            let path = format!("net.ipv6.conf.{key}.disable_ipv6=1");
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns.name, "sysctl", "-qw", &path])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        Ok(ns)
    }

    fn file(&self) -> Result<File> {
        File::open(format!("/var/run/netns/{}", self.name))
            .map_err(|e| format!("open namespace {}: {e}", self.name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("testbed: {e}");
        }
    }
}

/// The two end namespaces, the middle one and the emulator between them.
pub struct Testbed {
    // Field order is drop order: the emulator (and its devices) before the namespaces.
    emulator: Emulator,
    a: Netns,
    b: Netns,
    _mid: Netns,
}

/// Which end a process runs in.
#[derive(Debug, Clone, Copy)]
pub enum Side {
    /// 10.200.0.1: sender, RPC client.
    A,
    /// 10.200.0.2: receiver, RPC server.
    B,
}

impl Testbed {
    /// Creates the namespaces and devices and starts the emulator with `imp`.
    pub fn new(imp: Impairment) -> Result<Testbed> {
        let pid = std::process::id();
        let ns = |s: &str| Netns::create(format!("{PREFIX}{pid}-{s}"));
        let (mid, a, b) = (ns("m")?, ns("a")?, ns("b")?);
        let emulator = Emulator::start(mid.file()?, ["tba", "tbb"], imp)
            .map_err(|e| format!("link emulator: {e}"))?;
        for (dev, end, local, peer) in [("tba", &a, ADDR_A, ADDR_B), ("tbb", &b, ADDR_B, ADDR_A)] {
            ip(&["-n", &mid.name, "link", "set", dev, "netns", &end.name])?;
            let n = &end.name;
            ip(&["-n", n, "link", "set", dev, "mtu", &MTU.to_string()])?;
            let local = format!("{local}/32");
            ip(&["-n", n, "addr", "add", &local, "peer", peer, "dev", dev])?;
            ip(&["-n", n, "link", "set", dev, "up"])?;
        }
        Ok(Testbed {
            emulator,
            a,
            b,
            _mid: mid,
        })
    }

    /// Whether the emulator runs at real-time priority.
    pub fn realtime(&self) -> bool {
        self.emulator.realtime
    }

    /// Restarts the link model with `imp` (fresh generators and queues).
    pub fn reset(&self, imp: Impairment) {
        self.emulator.reset(imp);
        // Let packets of the previous run that were already scheduled leave.
        std::thread::sleep(Duration::from_millis(50));
    }

    /// The emulator's counters: a to b, then b to a.
    pub fn counters(&self) -> [DirCounters; 2] {
        self.emulator.counters()
    }

    /// Starts this bench binary again inside `side`'s namespace with `args`.
    pub fn spawn(&self, side: Side, args: &[String]) -> Result<Proc> {
        let ns = match side {
            Side::A => &self.a,
            Side::B => &self.b,
        };
        let file = ns.file()?;
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let fd = file.as_raw_fd();
        // SAFETY: the closure only makes async-signal-safe system calls.
        unsafe {
            cmd.pre_exec(move || sys::child_setup(fd));
        }
        let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
        drop(file);
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            name: args.join(" "),
            stdin: child.stdin.take(),
            child,
            lines,
        })
    }
}

/// An endpoint process; killed on drop if still running.
pub struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Waits for the report `tag` (other lines are echoed) and returns its fields. Fails on
    /// timeout, exit or interrupt.
    pub fn expect(&mut self, tag: &str, timeout: Duration) -> Result<HashMap<String, String>> {
        let deadline = Instant::now() + timeout;
        loop {
            if sys::interrupted() {
                return Err("interrupted".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no {tag} from `{}` within {timeout:?}", self.name));
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) => {
                    if let Some(fields) = report(&line, tag) {
                        return Ok(fields);
                    }
                    println!("  [{}] {line}", self.name);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string());
                    return Err(format!(
                        "`{}` ended before {tag} ({})",
                        self.name,
                        status.unwrap_or_else(|e| e.to_string())
                    ));
                }
            }
        }
    }

    /// Sends a line to the process's stdin (ignored if it already closed it).
    pub fn tell(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "{line}").and_then(|_| s.flush());
        }
    }

    /// Closes its stdin (the role's end of input), leaving it running.
    pub fn close_input(&mut self) {
        self.stdin.take();
    }

    /// Closes stdin and waits up to `timeout` for the process to exit, then kills it.
    pub fn finish(mut self, timeout: Duration) {
        self.stdin.take();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !sys::interrupted() {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The fields of `line` if it is the report `tag` of an endpoint process: a JSON object
/// whose `event` is `tag` and whose other fields are strings.
pub fn report(line: &str, tag: &str) -> Option<HashMap<String, String>> {
    let mut fields: HashMap<String, String> = serde_json::from_str(line).ok()?;
    (fields.remove("event")? == tag).then_some(fields)
}
