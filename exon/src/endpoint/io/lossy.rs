//! A fault-injecting socket wrapper: loss, duplication and reordering, in process.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::io::socket::RecvMeta;

/// Fault rates applied to outgoing datagrams by a [`LossySocket`], each a probability in
/// `0.0..=1.0`. Start from `Faults::default()` and set the fields to change (the struct is
/// `#[non_exhaustive]`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Faults {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is sent twice.
    pub duplicate: f64,
    /// Probability that a datagram is held back and sent after the next one.
    pub reorder: f64,
    /// Seed of the fault generator (runs with the same seed make the same choices).
    pub seed: u64,
}

impl Default for Faults {
    /// 5 % loss, 1 % duplication, 1 % reordering.
    fn default() -> Self {
        Faults {
            loss: 0.05,
            duplicate: 0.01,
            reorder: 0.01,
            seed: 0x5eed,
        }
    }
}

/// Wraps a [`DatagramSocket`] and injects the [`Faults`] on every send (one datagram at a
/// time: it sends no segmented batches). Receiving is passed through unchanged, batches
/// included (and stays cancel safe).
#[derive(Debug)]
pub struct LossySocket<S> {
    inner: S,
    faults: Faults,
    state: Mutex<State>,
    dropped: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
}

#[derive(Debug)]
struct State {
    rng: u64,
    held: Option<(Vec<u8>, SocketAddr)>,
}

/// What happens to one datagram.
enum Fate {
    Drop,
    Send { copies: usize, hold: bool },
}

impl<S> LossySocket<S> {
    /// Wraps `inner` with `faults`.
    pub fn new(inner: S, faults: Faults) -> Self {
        LossySocket {
            inner,
            faults,
            state: Mutex::new(State {
                rng: faults.seed | 1,
                held: None,
            }),
            dropped: AtomicU64::new(0),
            duplicated: AtomicU64::new(0),
            reordered: AtomicU64::new(0),
        }
    }

    /// Datagrams dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Datagrams sent twice so far.
    pub fn duplicated(&self) -> u64 {
        self.duplicated.load(Ordering::Relaxed)
    }

    /// Datagrams held back behind a later one so far.
    pub fn reordered(&self) -> u64 {
        self.reordered.load(Ordering::Relaxed)
    }

    fn fate(&self, buf: &[u8], target: SocketAddr) -> (Fate, Option<(Vec<u8>, SocketAddr)>) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut roll = || {
            let mut x = st.rng;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            st.rng = x;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let (l, d, r) = (roll(), roll(), roll());
        if l < self.faults.loss {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return (Fate::Drop, None);
        }
        let copies = if d < self.faults.duplicate {
            self.duplicated.fetch_add(1, Ordering::Relaxed);
            2
        } else {
            1
        };
        if r < self.faults.reorder && st.held.is_none() {
            self.reordered.fetch_add(1, Ordering::Relaxed);
            st.held = Some((buf.to_vec(), target));
            return (Fate::Send { copies, hold: true }, None);
        }
        let released = st.held.take();
        (
            Fate::Send {
                copies,
                hold: false,
            },
            released,
        )
    }
}

impl<S: DatagramSocket> DatagramSocket for LossySocket<S> {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        let (fate, released) = self.fate(buf, target);
        match fate {
            Fate::Drop => Ok(buf.len()),
            Fate::Send { copies, hold } => {
                // A held datagram goes out (copies - 1 times now, the rest when released).
                let now = if hold { copies - 1 } else { copies };
                for _ in 0..now {
                    self.inner.send_to(buf, target).await?;
                }
                if let Some((data, to)) = released {
                    self.inner.send_to(&data, to).await?;
                }
                Ok(buf.len())
            }
        }
    }

    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl std::future::Future<Output = io::Result<(usize, SocketAddr)>> + Send {
        self.inner.recv_from(buf)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn reach(&self) -> io::Result<crate::endpoint::Reach> {
        self.inner.reach()
    }

    fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        self.inner.set_buffer_sizes(bytes)
    }

    fn route_payload(&self, peer: SocketAddr) -> Option<usize> {
        self.inner.route_payload(peer)
    }

    fn max_recv_segments(&self) -> usize {
        self.inner.max_recv_segments()
    }

    fn recv_batch(
        &self,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> impl std::future::Future<Output = io::Result<usize>> + Send {
        self.inner.recv_batch(bufs, meta)
    }
}
