//! Faults on a schedule: partitions and heals, holds and releases, node restarts, and
//! changes of a path's MTU.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Drop everything between `a` and `b` (from `a` to `b` only if `one_way`).
    Partition {
        /// One node.
        a: usize,
        /// The other node.
        b: usize,
        /// Only the direction `a -> b`.
        one_way: bool,
    },
    /// Keep everything sent between `a` and `b` (both ways) until the release.
    Hold {
        /// One node.
        a: usize,
        /// The other node.
        b: usize,
    },
    /// Restores the links between `a` and `b` (from `a` to `b` only if `one_way`),
    /// releasing held datagrams.
    Heal {
        /// One node.
        a: usize,
        /// The other node.
        b: usize,
        /// Only the direction `a -> b`.
        one_way: bool,
    },
    /// Sets the MTU of the links between `a` and `b` (both ways) to `mtu` bytes: below the
    /// size in use, a black hole for larger datagrams until the senders find it. Healing
    /// leaves it as it is.
    Mtu {
        /// One node.
        a: usize,
        /// The other node.
        b: usize,
        /// The new MTU (largest UDP payload carried).
        mtu: usize,
    },
    /// Crashes `node`; it comes back after `down` with its stored clock high-water mark and
    /// nothing else, or (`keep_clock: false`, the rule 8 scenario, expected to break
    /// exactly-once) with clock 0.
    Restart {
        /// The node.
        node: usize,
        /// How long it stays down.
        down: Duration,
        /// Whether it restarts from its stored clock high-water mark.
        keep_clock: bool,
    },
}

/// A fault at a point of virtual time after the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// When, from the start of the run.
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
}

/// Makes a random schedule within `span`: `partitions` partitions or holds, each healed
/// later, and `restarts` restarts (keeping the clock).
pub fn random_schedule(
    rng: &mut SmallRng,
    nodes: usize,
    span: Duration,
    partitions: usize,
    restarts: usize,
) -> Vec<Fault> {
    let mut out = Vec::new();
    if nodes < 2 || span.is_zero() {
        return out;
    }
    let pair = |rng: &mut SmallRng| {
        let a = rng.gen_range(0..nodes);
        let b = (a + rng.gen_range(1..nodes)) % nodes;
        (a, b)
    };
    for _ in 0..partitions {
        let (a, b) = pair(rng);
        let start = span.mul_f64(rng.gen_range(0.0..0.8));
        let len = span.mul_f64(rng.gen_range(0.01..0.2));
        // A one-way partition heals only its own direction: each direction of a pair
        // follows its own schedule.
        let (kind, one_way) = match rng.gen_range(0..3) {
            0 => (
                FaultKind::Partition {
                    a,
                    b,
                    one_way: false,
                },
                false,
            ),
            1 => (
                FaultKind::Partition {
                    a,
                    b,
                    one_way: true,
                },
                true,
            ),
            _ => (FaultKind::Hold { a, b }, false),
        };
        out.push(Fault { at: start, kind });
        out.push(Fault {
            at: start + len,
            kind: FaultKind::Heal { a, b, one_way },
        });
    }
    for _ in 0..restarts {
        out.push(Fault {
            at: span.mul_f64(rng.gen_range(0.0..0.9)),
            kind: FaultKind::Restart {
                node: rng.gen_range(0..nodes),
                down: Duration::from_millis(rng.gen_range(1..500)),
                keep_clock: true,
            },
        });
    }
    out.sort_by_key(|f| f.at);
    out
}
