//! The userspace link emulator between two TUN devices.
//!
//! The userspace link emulator: one thread that owns two TUN devices and forwards IP
//! packets between them through a delay, rate, loss, reordering and byte-sized queue model
//! per direction.
//!
//! The decisions come from the simulator's link model (`exon_sim::Link`): the same code
//! that drives the discrete-event simulator in virtual time decides here in real time (one
//! model, two clocks). The link only schedules; this module holds the packets and writes
//! each one out when its time comes.

use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use exon_sim::link::DropCause;
use exon_sim::{Decision, Link, LinkConfig};

use crate::testbed::sys;

/// Largest packet read from a TUN device.
const MAX_PACKET: usize = 65536;
/// Longest the loop sleeps, so that it sees a stop or a reset soon.
const MAX_WAIT: Duration = Duration::from_millis(10);

/// The impaired link, the same both ways.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Link rate in bits per second.
    pub rate_bps: u64,
    /// Round-trip time (each direction delays by half).
    pub rtt: Duration,
    /// Random loss probability per packet, each direction.
    pub loss: f64,
    /// Bytes the rate limiter queues before dropping at the tail.
    pub queue_bytes: usize,
    /// Reordering probability per packet, each direction: a packet is held back by an
    /// extra delay uniform in `[0, REORDER_MAX_DELAY]` after it crossed the link, so later
    /// packets overtake it; nothing is dropped for it.
    pub reorder: f64,
    /// Seed of the loss and reordering generators (direction b to a uses `seed + 1`).
    pub seed: u64,
}

/// Largest extra delay of a reordered packet.
pub const REORDER_MAX_DELAY: Duration = Duration::from_millis(20);

impl Impairment {
    /// The queue the testbed uses by default: one bandwidth-delay product, at least 32 KiB
    /// (below that a slow link cannot hold even a TCP initial window plus a few ACKs).
    pub fn default_queue(rate_bps: u64, rtt: Duration) -> usize {
        let bdp = (rate_bps as f64 / 8.0 * rtt.as_secs_f64()) as usize;
        bdp.max(32 * 1024)
    }

    fn link(&self, dir: usize) -> Link {
        let cfg = LinkConfig {
            latency: self.rtt / 2,
            loss: self.loss,
            rate: Some(self.rate_bps / 8),
            queue_bytes: self.queue_bytes,
            reorder: self.reorder,
            reorder_max_delay: REORDER_MAX_DELAY,
            // The emulator moves whole IP packets, which the namespaces' interface MTU
            // already bounds: the model's own size limit (for UDP payloads) stays out of it.
            mtu: usize::MAX,
            ..LinkConfig::default()
        };
        Link::new(cfg, self.seed + dir as u64)
    }
}

impl fmt::Display for Impairment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} Mbit/s, RTT {} ms, loss {}% each way, queue {} B, seed {}",
            self.rate_bps as f64 / 1e6,
            self.rtt.as_secs_f64() * 1e3,
            self.loss * 100.0,
            self.queue_bytes,
            self.seed
        )?;
        if self.reorder > 0.0 {
            write!(
                f,
                ", reorder {}% each way (held back up to {} ms)",
                self.reorder * 100.0,
                REORDER_MAX_DELAY.as_millis()
            )?;
        }
        Ok(())
    }
}

/// Counters of one direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DirCounters {
    /// Packets read from the sending side's device.
    pub received: u64,
    /// Dropped by random loss.
    pub dropped_random: u64,
    /// Dropped at the tail of the queue.
    pub dropped_queue: u64,
    /// Written to the receiving side's device.
    pub forwarded: u64,
    /// Refused by the receiving side's device.
    pub write_errors: u64,
}

impl DirCounters {
    /// `self - before`, field by field.
    pub fn since(&self, before: &DirCounters) -> DirCounters {
        DirCounters {
            received: self.received - before.received,
            dropped_random: self.dropped_random - before.dropped_random,
            dropped_queue: self.dropped_queue - before.dropped_queue,
            forwarded: self.forwarded - before.forwarded,
            write_errors: self.write_errors - before.write_errors,
        }
    }
}

impl fmt::Display for DirCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "received={} dropped_random={} dropped_queue={} forwarded={}",
            self.received, self.dropped_random, self.dropped_queue, self.forwarded
        )?;
        if self.write_errors > 0 {
            write!(f, " write_errors={}", self.write_errors)?;
        }
        Ok(())
    }
}

/// Counters shared with the controlling thread, one set per direction.
#[derive(Default)]
struct Shared {
    counters: [[AtomicU64; 5]; 2],
}

impl Shared {
    fn add(&self, dir: usize, field: usize) {
        self.counters[dir][field].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self, dir: usize) -> DirCounters {
        let c = |i: usize| self.counters[dir][i].load(Ordering::Relaxed);
        DirCounters {
            received: c(0),
            dropped_random: c(1),
            dropped_queue: c(2),
            forwarded: c(3),
            write_errors: c(4),
        }
    }
}

const RECEIVED: usize = 0;
const DROPPED_RANDOM: usize = 1;
const DROPPED_QUEUE: usize = 2;
const FORWARDED: usize = 3;
const WRITE_ERRORS: usize = 4;

/// A running emulator thread. Dropping it stops the thread and closes the devices.
pub struct Emulator {
    stop: Arc<AtomicBool>,
    reset: Arc<Mutex<Option<Impairment>>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Whether the thread got real-time priority.
    pub realtime: bool,
}

impl Emulator {
    /// Starts the thread inside the namespace `mid`, where it creates the TUN devices
    /// `names[0]` (side a) and `names[1]` (side b), and returns once they exist.
    pub fn start(mid: File, names: [&str; 2], imp: Impairment) -> std::io::Result<Emulator> {
        let stop = Arc::new(AtomicBool::new(false));
        let reset = Arc::new(Mutex::new(None));
        let shared = Arc::new(Shared::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let names = names.map(String::from);
        let (s, r, sh) = (stop.clone(), reset.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("link-emulator".into())
            .spawn(move || {
                let setup = || -> std::io::Result<[OwnedFd; 2]> {
                    sys::enter_netns(&mid)?;
                    Ok([sys::open_tun(&names[0])?, sys::open_tun(&names[1])?])
                };
                let fds = match setup() {
                    Ok(fds) => fds,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                sys::precise_timers();
                let rt = sys::realtime(50);
                let _ = ready_tx.send(Ok(rt));
                run(fds, imp, &s, &r, &sh);
            })?;
        let realtime = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("emulator thread died"))??;
        Ok(Emulator {
            stop,
            reset,
            shared,
            thread: Some(thread),
            realtime,
        })
    }

    /// Starts afresh with `imp`: new generators (same seed, so every run sees the same loss
    /// sequence), empty queues. Counters keep counting.
    pub fn reset(&self, imp: Impairment) {
        *self.reset.lock().unwrap() = Some(imp);
    }

    /// The counters so far: direction a to b, then b to a.
    pub fn counters(&self) -> [DirCounters; 2] {
        [self.shared.snapshot(0), self.shared.snapshot(1)]
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One direction: its link model and the packets it scheduled, in delivery order (a packet
/// held back for reordering goes behind those due before it; equal times keep their order).
struct Dir {
    link: Link,
    queue: VecDeque<(Instant, Vec<u8>)>,
}

fn run(
    fds: [OwnedFd; 2],
    imp: Impairment,
    stop: &AtomicBool,
    reset: &Mutex<Option<Impairment>>,
    shared: &Shared,
) {
    let raw = [fds[0].as_raw_fd(), fds[1].as_raw_fd()];
    let fresh = |imp: Impairment| {
        [0, 1].map(|d| Dir {
            link: imp.link(d),
            queue: VecDeque::new(),
        })
    };
    let mut dirs = fresh(imp);
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        if let Some(imp) = reset.lock().unwrap().take() {
            dirs = fresh(imp);
        }
        // Deliver what is due; direction d goes out on the other side's device.
        let now = Instant::now();
        for (d, dir) in dirs.iter_mut().enumerate() {
            while dir.queue.front().is_some_and(|(at, _)| *at <= now) {
                let (_, pkt) = dir.queue.pop_front().unwrap();
                let ok = sys::write_packet(raw[1 - d], &pkt);
                shared.add(d, if ok { FORWARDED } else { WRITE_ERRORS });
            }
        }
        let next = dirs
            .iter()
            .filter_map(|d| d.queue.front())
            .map(|(at, _)| *at)
            .min();
        let wait = next.map_or(MAX_WAIT, |at| {
            at.saturating_duration_since(now).min(MAX_WAIT)
        });
        let readable = match sys::poll_readable(&raw, wait) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("emulator: poll failed: {e}");
                return;
            }
        };
        for d in 0..2 {
            // Bounded, so that one busy side cannot delay the other's deliveries for long.
            for _ in 0..64 {
                if !readable[d] {
                    break;
                }
                let n = match sys::read_packet(raw[d], &mut buf) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("emulator: read failed: {e}");
                        return;
                    }
                };
                shared.add(d, RECEIVED);
                match dirs[d].link.on_datagram(Instant::now(), n) {
                    Decision::Deliver { at, .. } => {
                        let q = &mut dirs[d].queue;
                        let i = q.partition_point(|(t, _)| *t <= at);
                        q.insert(i, (at, buf[..n].to_vec()));
                    }
                    Decision::Drop(DropCause::QueueFull) => shared.add(d, DROPPED_QUEUE),
                    Decision::Drop(_) | Decision::Hold => shared.add(d, DROPPED_RANDOM),
                }
            }
        }
    }
}
