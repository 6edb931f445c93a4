//! The deaf-path oracle: what a node sends to a peer it has not heard from is bounded.
//!
//! A node is *talking into silence* to a peer from the first datagram it sends it after it
//! last accepted one from it (a pause of [`RESET_RTOS`] `max_rto` in its sending starts the
//! count again). Once that has lasted [`SILENT_RTOS`] `max_rto`, every datagram it sends the
//! peer is counted, and in any [`WINDOW`] at most [`MAX_DATAGRAMS`] datagrams and
//! [`MAX_BYTES`] bytes may go (issue: "a node that hears nothing from a peer sends it only
//! what an exponentially backed-off schedule allows").

use std::collections::VecDeque;
use std::time::Duration;

/// The sliding window the bound applies to.
pub const WINDOW: Duration = Duration::from_secs(30);
/// Most datagrams to a silent peer in one window.
pub const MAX_DATAGRAMS: usize = 60;
/// Most bytes to a silent peer in one window.
pub const MAX_BYTES: usize = 256 * 1024;
/// A peer is silent once sent to for this many `max_rto` without an answer.
pub const SILENT_RTOS: u32 = 3;
/// A pause of this many `max_rto` in sending starts the count again.
pub const RESET_RTOS: u32 = 4;

/// One direction: what `from` sends `to`.
#[derive(Debug, Clone, Default)]
struct Pair {
    /// The first datagram sent since the peer was last heard from (nanoseconds).
    since: Option<u64>,
    last_sent: u64,
    /// Datagrams sent while the peer was silent, in the window: (time, bytes).
    window: VecDeque<(u64, usize)>,
    bytes: usize,
}

/// A breach of the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flood {
    /// The sending node.
    pub from: usize,
    /// The silent peer.
    pub to: usize,
    /// Datagrams in the window.
    pub datagrams: usize,
    /// Bytes in the window.
    pub bytes: usize,
    /// How long the peer had been silent.
    pub silent_for: Duration,
}

/// Watches every directed pair of nodes.
#[derive(Debug, Clone)]
pub struct DeafWatch {
    nodes: usize,
    silent_after: u64,
    reset: u64,
    pairs: Vec<Pair>,
    /// Datagrams counted against the bound (sent to silent peers), over the run.
    pub counted: u64,
    /// The largest number of datagrams seen in one window to one silent peer.
    pub worst_datagrams: usize,
    /// The largest number of bytes seen in one window to one silent peer.
    pub worst_bytes: usize,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

impl DeafWatch {
    /// A watch over `nodes` nodes whose `max_rto` is `max_rto`.
    pub fn new(nodes: usize, max_rto: Duration) -> DeafWatch {
        DeafWatch {
            nodes,
            silent_after: nanos(max_rto * SILENT_RTOS),
            reset: nanos(max_rto * RESET_RTOS),
            pairs: vec![Pair::default(); nodes * nodes],
            counted: 0,
            worst_datagrams: 0,
            worst_bytes: 0,
        }
    }

    fn pair(&mut self, from: usize, to: usize) -> Option<&mut Pair> {
        (from < self.nodes && to < self.nodes).then(|| &mut self.pairs[from * self.nodes + to])
    }

    /// `node` accepted a datagram from `from`.
    pub fn on_heard(&mut self, node: usize, from: usize) {
        if let Some(p) = self.pair(node, from) {
            p.since = None;
        }
    }

    /// `node` restarted: it knows nothing of its peers any more.
    pub fn on_restart(&mut self, node: usize) {
        for to in 0..self.nodes {
            if let Some(p) = self.pair(node, to) {
                p.since = None;
            }
        }
    }

    /// `from` sent `to` a datagram of `size` bytes at `now` (nanoseconds). Returns the breach,
    /// if this datagram made one (the window then starts empty again, so one flood is
    /// reported about once per window).
    pub fn on_sent(&mut self, from: usize, to: usize, size: usize, now: u64) -> Option<Flood> {
        let (silent_after, reset) = (self.silent_after, self.reset);
        let p = self.pair(from, to)?;
        let since = match p.since {
            Some(s) if now.saturating_sub(p.last_sent) < reset => s,
            _ => {
                p.since = Some(now);
                now
            }
        };
        p.last_sent = now;
        if now - since <= silent_after {
            return None;
        }
        p.window.push_back((now, size));
        p.bytes += size;
        let w = nanos(WINDOW);
        while let Some(&(t, b)) = p.window.front() {
            if t + w > now {
                break;
            }
            p.window.pop_front();
            p.bytes -= b;
        }
        let (datagrams, bytes) = (p.window.len(), p.bytes);
        let breach = datagrams > MAX_DATAGRAMS || bytes > MAX_BYTES;
        if breach {
            p.window.clear();
            p.bytes = 0;
        }
        self.counted += 1;
        self.worst_datagrams = self.worst_datagrams.max(datagrams);
        self.worst_bytes = self.worst_bytes.max(bytes);
        breach.then(|| Flood {
            from,
            to,
            datagrams,
            bytes,
            silent_for: Duration::from_nanos(now - since),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn sending_into_silence_past_the_bound_is_a_flood() {
        let mut w = DeafWatch::new(2, Duration::from_secs(2));
        // 10 datagrams a second, never answered: silent after 6 s, a flood 6 s later.
        let mut flood = None;
        for i in 0..200u64 {
            if let Some(f) = w.on_sent(0, 1, 1000, i * S / 10) {
                flood = Some((i, f));
                break;
            }
        }
        let (i, f) = flood.expect("a flood");
        assert_eq!(i, 60 + 61);
        assert_eq!(f.datagrams, 61);
        assert!(f.silent_for > Duration::from_secs(6));
    }

    #[test]
    fn answers_and_pauses_end_the_silence_and_bytes_count_too() {
        let mut w = DeafWatch::new(2, Duration::from_secs(2));
        // Answered every 5 s: never silent long enough.
        for i in 0..1000u64 {
            if i % 50 == 0 {
                w.on_heard(0, 1);
            }
            assert_eq!(w.on_sent(0, 1, 60_000, i * S / 10), None);
        }
        // Paused 8 s between datagrams: each starts the count again.
        let mut w = DeafWatch::new(2, Duration::from_secs(2));
        for i in 0..100u64 {
            assert_eq!(w.on_sent(0, 1, 60_000, i * 8 * S), None);
        }
        // One large datagram a second, silent: bytes give out first.
        let mut w = DeafWatch::new(2, Duration::from_secs(2));
        let f = (0..60u64)
            .find_map(|i| w.on_sent(1, 0, 60_000, i * S))
            .expect("a flood");
        assert!(f.bytes > MAX_BYTES && f.datagrams < MAX_DATAGRAMS);
    }
}
