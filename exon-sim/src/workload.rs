//! Workloads: who sends how many messages to whom, and the payload format that lets the
//! oracle identify every message.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

/// Bytes of the message id at the start of every payload.
pub const ID_LEN: usize = 13;

/// What a message is, carried in its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A one-way message.
    Data = 0,
    /// An RPC request: its delivery makes the receiver send a reply.
    Request = 1,
    /// An RPC reply.
    Reply = 2,
}

/// The unique id of a simulated message: its sending node and that node's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgKey {
    /// Index of the sending node.
    pub sender: u32,
    /// Sequence number over everything that node submitted.
    pub seq: u64,
}

impl std::fmt::Display for MsgKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node{}#{}", self.sender, self.seq)
    }
}

/// Appends a payload of `len` bytes (at least [`ID_LEN`]) identifying `key`.
pub fn write_payload(buf: &mut Vec<u8>, key: MsgKey, kind: Kind, len: usize) {
    let start = buf.len();
    buf.extend_from_slice(&key.sender.to_be_bytes());
    buf.extend_from_slice(&key.seq.to_be_bytes());
    buf.push(kind as u8);
    let filled = buf.len() - start;
    buf.resize(start + len.max(filled), fill_byte(key));
}

/// The byte a payload is filled with after its id: differs between neighbouring messages,
/// so bytes of one message in another are seen.
fn fill_byte(key: MsgKey) -> u8 {
    0x5a ^ (key.seq as u8).wrapping_mul(7) ^ (key.sender as u8)
}

/// Whether `p` is message `key` whole: `len` bytes, its fill intact.
pub fn is_whole(p: &[u8], key: MsgKey, len: usize) -> bool {
    let b = fill_byte(key);
    p.len() == len
        && p.get(ID_LEN..)
            .is_none_or(|rest| rest.iter().all(|x| *x == b))
}

/// Reads the id and kind of a payload, or `None` if it is not one of ours.
pub fn read_payload(p: &[u8]) -> Option<(MsgKey, Kind)> {
    if p.len() < ID_LEN {
        return None;
    }
    let sender = u32::from_be_bytes(p[0..4].try_into().ok()?);
    let seq = u64::from_be_bytes(p[4..12].try_into().ok()?);
    let kind = match p[12] {
        0 => Kind::Data,
        1 => Kind::Request,
        2 => Kind::Reply,
        _ => return None,
    };
    Some((MsgKey { sender, seq }, kind))
}

/// The traffic pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pattern {
    /// Node `i` streams to node `i + 1` (mod N).
    #[default]
    Ring,
    /// Every node sends to random other nodes.
    ManyToMany,
    /// Every node sends requests to random other nodes, which reply to each.
    Rpc,
    /// Every node but 0 streams to node 0 (with a shared queue, competing senders at one
    /// bottleneck); node 0 streams to node 1.
    Incast,
}

/// A workload: a pattern, a message budget and a pace.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// The traffic pattern.
    pub pattern: Pattern,
    /// Messages the application submits in total (RPC: requests; replies come on top).
    pub messages: u64,
    /// Payload size in bytes (at least [`ID_LEN`]).
    pub payload_len: usize,
    /// When above `payload_len`: sizes vary per message, log-uniformly between the two
    /// (drawn from the message's id, see [`Workload::len_of`]), so that one run mixes
    /// single-TOKEN messages with messages of many fragments.
    pub max_payload_len: usize,
    /// Interval between two rounds of sends by one node.
    pub interval: Duration,
    /// Most messages one node submits per round.
    pub burst: usize,
    /// A node stops submitting to a destination with this many messages unacknowledged.
    pub max_pending: usize,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            pattern: Pattern::Ring,
            messages: 1000,
            payload_len: 32,
            max_payload_len: 0,
            interval: Duration::from_millis(1),
            burst: 256,
            max_pending: 2048,
        }
    }
}

impl Workload {
    /// The payload size of message `key`.
    pub fn len_of(&self, key: MsgKey) -> usize {
        let lo = self.payload_len.max(ID_LEN);
        let hi = self.max_payload_len;
        if hi <= lo {
            return lo;
        }
        let h = (u64::from(key.sender) << 40 ^ key.seq).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let frac = (h >> 11) as f64 / (1u64 << 53) as f64;
        let len = (lo as f64) * ((hi as f64) / (lo as f64)).powf(frac);
        (len as usize).clamp(lo, hi)
    }

    /// Messages node `i` of `n` submits on its own initiative.
    pub fn quota(&self, i: usize, n: usize) -> u64 {
        let n = n as u64;
        self.messages / n + u64::from((i as u64) < self.messages % n)
    }

    /// Destination of the next message of node `i` of `n` (never `i` itself).
    pub fn pick(&self, i: usize, n: usize, rng: &mut SmallRng) -> usize {
        match self.pattern {
            Pattern::Ring => (i + 1) % n,
            Pattern::Incast => usize::from(i == 0),
            Pattern::ManyToMany | Pattern::Rpc => {
                let j = rng.gen_range(0..n - 1);
                if j >= i {
                    j + 1
                } else {
                    j
                }
            }
        }
    }

    /// Kind of the messages a node submits on its own initiative.
    pub fn kind(&self) -> Kind {
        match self.pattern {
            Pattern::Rpc => Kind::Request,
            _ => Kind::Data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trip() {
        let mut b = Vec::new();
        let k = MsgKey {
            sender: 3,
            seq: 1 << 40,
        };
        write_payload(&mut b, k, Kind::Reply, 40);
        assert_eq!(b.len(), 40);
        assert_eq!(read_payload(&b), Some((k, Kind::Reply)));
        assert_eq!(read_payload(&b[..5]), None);
    }

    #[test]
    fn quotas_add_up() {
        let w = Workload {
            messages: 10,
            ..Workload::default()
        };
        assert_eq!((0..3).map(|i| w.quota(i, 3)).sum::<u64>(), 10);
    }
}
