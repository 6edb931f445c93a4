//! Real processes for the SIGKILL tests: a process killed and started again with the same
//! arguments, free loopback ports, a small random generator, figures from the environment.

use std::ffi::OsString;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command};

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
