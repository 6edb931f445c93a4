//! Thin wrappers over the Linux calls the testbed needs.
//!
//! Thin wrappers over the Linux calls the testbed needs: signals, network namespaces, TUN
//! devices, `ppoll`, scheduling and the per-socket TCP congestion control.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// Set by SIGINT, SIGTERM or SIGHUP; the harness polls it and cleans up.
pub static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Installs the interrupt handlers (signal-hook's flag handlers: they only set the flag).
pub fn catch_interrupts() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&INTERRUPTED)) {
            eprintln!("testbed: cannot catch signal {sig}: {e}");
        }
    }
}

/// True once an interrupt arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The effective user id is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True if process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Moves the calling thread into the network namespace behind `ns` (a file under
/// `/var/run/netns`). Only this thread changes namespace.
pub fn enter_netns(ns: &File) -> io::Result<()> {
    // SAFETY: setns on a valid fd; affects only the calling thread's network namespace.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
}

/// For `pre_exec` of a child: enter the namespace `ns_fd` and die with the parent.
/// Only async-signal-safe calls.
pub fn child_setup(ns_fd: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls on a valid fd, allowed between fork and exec.
    unsafe {
        check(libc::setns(ns_fd, libc::CLONE_NEWNET))?;
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
    }
    Ok(())
}

/// `ifreq` as `TUNSETIFF` reads it: a name and the flags, padded to the kernel's size.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Opens a new TUN device `name` (layer 3, no packet information header), non-blocking, in
/// the calling thread's network namespace. The device goes away when the fd is closed.
pub fn open_tun(name: &str) -> io::Result<OwnedFd> {
    let path = CString::new("/dev/net/tun").unwrap();
    // SAFETY: open with a valid C string.
    let fd = check(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK) })?;
    // SAFETY: fd was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::other("interface name too long"));
    }
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads an ifreq, which IfReq lays out.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })?;
    Ok(fd)
}

/// Timer slack of the calling thread at 1 ns, so that short sleeps end on time.
pub fn precise_timers() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Puts the calling thread under SCHED_FIFO at `priority`; false if refused.
pub fn realtime(priority: i32) -> bool {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; p is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
}

/// Waits until one of `fds` is readable or `timeout` passes; returns which were readable.
pub fn poll_readable(fds: &[RawFd; 2], timeout: Duration) -> io::Result<[bool; 2]> {
    let mut p = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: p holds two valid pollfds, ts a valid timespec, no signal mask change.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok([false; 2]);
        }
        return Err(e);
    }
    Ok(p.map(|p| p.revents & (libc::POLLIN | libc::POLLERR) != 0))
}

/// Reads one packet; `None` when none is waiting.
pub fn read_packet(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

/// Writes one packet; false if the kernel refused it.
pub fn write_packet(fd: RawFd, pkt: &[u8]) -> bool {
    // SAFETY: pkt is valid for pkt.len() bytes.
    let n = unsafe { libc::write(fd, pkt.as_ptr().cast(), pkt.len()) };
    n == pkt.len() as isize
}

/// Sets the TCP congestion control of socket `fd` (e.g. "cubic", "bbr") and reads it back.
pub fn set_congestion(fd: RawFd, name: &str) -> io::Result<String> {
    // SAFETY: the option value is valid for its length.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    })?;
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf and len are valid and len holds buf's size.
    check(unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let s = &buf[..len as usize];
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    Ok(String::from_utf8_lossy(&s[..end]).into_owned())
}

/// Has the kernel pace the TCP socket `fd` at its congestion control's rate, whatever the
/// congestion control (CUBIC included; BBR always paces): a maximum pacing rate other than
/// "unlimited" turns on TCP's internal pacing where no fq qdisc paces (Linux 4.13 and
/// later). The maximum set here, about 4 GB/s, never binds.
pub fn set_tcp_pacing(fd: RawFd) -> io::Result<()> {
    let rate: u32 = u32::MAX - 1;
    // SAFETY: the option value is valid for its length.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&rate as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Sets the TCP socket `fd`'s largest segment (TCP_MAXSEG), before it connects or listens.
pub fn set_tcp_mss(fd: RawFd, mss: u32) -> io::Result<()> {
    let v = mss as libc::c_int;
    // SAFETY: the option value is valid for its length.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}
