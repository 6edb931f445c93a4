//! Shared by the frame-by-frame tests: nodes with an instant clock store, datagrams as
//! decoded packets, and small frame builders.
#![allow(dead_code)]

use std::time::Instant;

use bytes::Bytes;
use exon::proto::frame::Header;
use exon::proto::{AckRanges, Config, Event, Frame, Node, NodeId, Packet};

pub const A: NodeId = NodeId::from_const(1);
pub const B: NodeId = NodeId::from_const(2);

/// A node whose clock store confirms at once.
pub fn node(id: NodeId, cfg: Config, clock: u64, now: Instant) -> Node {
    let mut n = Node::new(id, cfg, clock).unwrap();
    store(&mut n, now);
    n
}

pub fn store(n: &mut Node, now: Instant) {
    while let Some(hw) = n.poll_clock_store() {
        n.handle_clock_stored(now, hw);
    }
}

/// Every datagram the node has to send now, decoded.
pub fn out(n: &mut Node, now: Instant) -> Vec<Packet> {
    store(n, now);
    let mut v = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = n.poll_transmit(now, &mut buf) {
        let data = Bytes::copy_from_slice(&buf[buf.len() - t.size..]);
        v.push(Packet::decode(&data).unwrap());
    }
    v
}

pub fn frames(ps: &[Packet]) -> Vec<Frame> {
    ps.iter().flat_map(|p| p.frames.clone()).collect()
}

pub fn feed(n: &mut Node, now: Instant, ps: &[Packet]) {
    for p in ps {
        n.handle_datagram(now, p.encode());
    }
}

pub fn packet(src: NodeId, dst: NodeId, frames: Vec<Frame>) -> Packet {
    Packet {
        header: Header::new(src, dst),
        frames,
    }
}

pub fn delivered(n: &mut Node) -> Vec<Bytes> {
    let mut v = Vec::new();
    while let Some(e) = n.poll_event() {
        if let Event::Delivered { payload, .. } = e {
            v.push(payload);
        }
    }
    v
}

pub fn acked(n: &mut Node) -> usize {
    let mut c = 0;
    while let Some(e) = n.poll_event() {
        if let Event::Acknowledged { .. } = e {
            c += 1;
        }
    }
    c
}

pub fn cfg(target: u64, low: u64, window: u64) -> Config {
    let mut conf = Config::default();
    conf.envelope_target = target;
    conf.envelope_low = low;
    conf.window = window;
    conf
}

pub fn ack(r: u64, s: std::ops::Range<u64>) -> Frame {
    Frame::Ack {
        r,
        ranges: AckRanges::from_ranges(&[s]).unwrap(),
    }
}

/// The incarnation of the one SLOTS frame in `p`.
pub fn slots_r(p: &[Packet]) -> u64 {
    match frames(p).as_slice() {
        [Frame::Slots { r, .. }] => *r,
        f => panic!("expected one SLOTS, got {f:?}"),
    }
}

/// A datagram with one TOKEN frame.
pub fn token(src: NodeId, dst: NodeId, s: u64, r: u64, payload: &'static [u8]) -> Packet {
    packet(
        src,
        dst,
        vec![Frame::Token {
            s,
            r,
            payload: Bytes::from_static(payload),
        }],
    )
}
