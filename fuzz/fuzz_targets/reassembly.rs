//! The reassembler, through a plaintext node: a receiver record with a reassembly grant is
//! fed arbitrary FRAG frames (true pieces of known messages, in any order, duplicated, or
//! lies: wrong lengths, wrong bytes, other slots and incarnations), REQCREDIT and waivers,
//! with time moving on. Checked after every step: no panic, memory within the grant and the
//! cap, each message delivered at most once, and a message altered only when the fuzzer
//! told a lie (an authenticated sender can garble its own message, nobody else's).
#![no_main]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use bytes::{BufMut, Bytes};
use exon::proto::{Config, Event, Frame, Header, Node, NodeId, Packet, Security};
use exon_testkit::{confirm_clock, datagrams, drain_taking};
use libfuzzer_sys::fuzz_target;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
/// Slots the fuzzer's messages use (granted by the first REQSLOTS).
const SLOTS: u64 = 8;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A true piece of message `msg`: `len` bytes from `offset` (both folded into range).
    Piece { msg: u8, offset: u32, len: u16 },
    /// A lie about message `msg`: a piece claiming another length, or carrying wrong bytes.
    Lie { msg: u8, total: u32, offset: u32, len: u16, wrong_bytes: bool },
    /// A piece for a slot or incarnation the fuzzer picks freely.
    Stray { s: u16, r_delta: i8, total: u32, offset: u32, len: u16 },
    /// The sender asks for this much reassembly memory.
    Credit { want: u32 },
    /// The sender waives slots below this one.
    Waive { below: u8 },
    /// Time moves on (seconds), timers run.
    Advance { secs: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    lens: [u32; SLOTS as usize],
    ops: Vec<Op>,
}

fn config() -> Config {
    let mut c = Config::default();
    c.limits.max_message_size = 1 << 20;
    c.limits.max_reassembly_per_source = 1 << 20;
    c.limits.max_reassembly_bytes = 2 << 20;
    c.mtu.max_datagram_size = 1200;
    c.timers.reassembly_timeout = Duration::from_secs(20);
    c
}

fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k as u32).wrapping_mul(2654435761).wrapping_add(i as u32) as u8).collect()
}

fn datagram(frames: Vec<Frame>) -> Bytes {
    Packet {
        header: Header::new(A, B),
        frames,
    }
    .encode()
}

fuzz_target!(|input: Input| {
    let cfg = config();
    let mut now = Instant::now();
    let mut b = Node::new(B, Security::InsecurePlaintext, cfg.clone(), 5_000).unwrap();
    confirm_clock(&mut b, now);
    let s0 = 100u64;
    b.handle_datagram(now, datagram(vec![Frame::ReqSlots { s: s0, n: SLOTS, l: s0 }]));
    let mut rck = None;
    for (_, d) in datagrams(&mut b, now) {
        let p = Packet::decode(&d).unwrap();
        for f in p.frames {
            if let Frame::Slots { r, .. } = f {
                rck = Some(r);
            }
        }
    }
    let Some(r) = rck else { return };
    let msgs: Vec<Vec<u8>> = input
        .lens
        .iter()
        .enumerate()
        .map(|(i, l)| body(i, 1 + (*l as usize) % 40_000))
        .collect();
    let mut lied: HashSet<u64> = HashSet::new();
    let mut delivered: HashMap<u64, usize> = HashMap::new();
    for op in input.ops.iter().take(2000) {
        let frame = match *op {
            Op::Piece { msg, offset, len } => {
                let i = (msg as u64 % SLOTS) as usize;
                let m = &msgs[i];
                let off = offset as usize % m.len();
                let end = (off + 1 + len as usize % 1100).min(m.len());
                Frame::Frag {
                    s: s0 + i as u64,
                    r,
                    total: m.len() as u64,
                    offset: off as u64,
                    data: Bytes::copy_from_slice(&m[off..end]),
                    senders_copy: false,
                }
            }
            Op::Lie { msg, total, offset, len, wrong_bytes } => {
                let i = msg as u64 % SLOTS;
                lied.insert(s0 + i);
                let total = 1 + total as u64 % (2 << 20);
                let off = offset as u64 % total;
                let n = (1 + len as u64 % 1100).min(total - off);
                let mut d = Vec::with_capacity(n as usize);
                d.put_bytes(if wrong_bytes { 0xEE } else { 0x11 }, n as usize);
                Frame::Frag {
                    s: s0 + i,
                    r,
                    total,
                    offset: off,
                    data: Bytes::from(d),
                    senders_copy: false,
                }
            }
            Op::Stray { s, r_delta, total, offset, len } => {
                let total = 1 + total as u64 % (2 << 20);
                let off = offset as u64 % total;
                let n = (1 + len as u64 % 1100).min(total - off);
                let s = s0.saturating_sub(4) + s as u64 % 32;
                lied.insert(s);
                Frame::Frag {
                    s,
                    r: r.saturating_add_signed(r_delta as i64),
                    total,
                    offset: off,
                    data: Bytes::from(vec![0x22; n as usize]),
                    senders_copy: false,
                }
            }
            Op::Credit { want } => Frame::ReqCredit {
                r,
                s: s0,
                want: want as u64 * 16,
            },
            Op::Waive { below } => {
                let l = s0 + below as u64 % (SLOTS + 1);
                Frame::ReqSlots { s: s0 + SLOTS, n: 0, l }
            }
            Op::Advance { secs } => {
                now += Duration::from_secs(secs as u64 % 40);
                b.handle_timeout(now);
                continue;
            }
        };
        b.handle_datagram(now, datagram(vec![frame]));
        // The replies go nowhere; each delivery is checked (and taken).
        drain_taking(&mut b, now, |_, _, _| {}, |e| {
            if let Event::Delivered { payload, .. } = e {
                // The slot is recovered from the bytes: each true message is distinct.
                let slot = msgs.iter().position(|m| m[..] == payload[..]).map(|i| s0 + i as u64);
                match slot {
                    Some(s) => {
                        let n = delivered.entry(s).or_default();
                        *n += 1;
                        assert_eq!(*n, 1, "slot {s} delivered twice");
                    }
                    None => {
                        // Only a slot that received lies may deliver something else.
                        assert!(!lied.is_empty(), "a message delivered altered with no lie told");
                    }
                }
            }
        });
        assert!(b.reassembly_granted() <= cfg.limits.max_reassembly_bytes);
        assert!(b.reassembly_in_use() <= b.reassembly_granted());
    }
});
