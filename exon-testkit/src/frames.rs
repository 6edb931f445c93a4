//! For frame-by-frame tests: nodes with an instant clock store, datagrams as decoded
//! packets, events read apart from datagrams, and small frame builders.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use exon::proto::frame::Header;
use exon::proto::{AckRanges, Config, Event, Frame, Node, NodeId, Packet, Security};

use crate::drain::datagrams;

/// The first node's id.
pub const A: NodeId = NodeId::from_const(1);
/// The second node's id.
pub const B: NodeId = NodeId::from_const(2);

thread_local! {
    /// Events taken out of each node by `feed` (whose application takes every delivery at
    /// once), for `events`, `delivered` and `acked` to read.
    static STASH: RefCell<HashMap<NodeId, Vec<Event>>> = RefCell::new(HashMap::new());
}

/// A node whose clock store confirms at once.
///
/// These frame-by-frame tests check the slot algorithm with the fixed 1200-byte datagrams
/// it was written for: path MTU discovery is switched off (its probes would interleave
/// with the frames they check; `exon/tests/core/mtu.rs` covers it), and a configuration
/// that kept the default ceiling gets 1200 bytes.
pub fn node(id: NodeId, mut cfg: Config, clock: u64, now: Instant) -> Node {
    if cfg.mtu.discovery {
        cfg.mtu.discovery = false;
        if cfg.mtu.max_datagram_size == exon::proto::MAX_DATAGRAM_SIZE {
            cfg.mtu.max_datagram_size = cfg.mtu.min_datagram_size;
        }
    }
    STASH.with(|s| s.borrow_mut().remove(&id));
    let mut n = Node::new(id, Security::InsecurePlaintext, cfg, clock).unwrap();
    store(&mut n, now);
    n
}

/// Confirms every clock mark the node asks to store, at once ([`confirm_clock`](crate::confirm_clock)).
pub use crate::drain::confirm_clock as store;

/// Every datagram the node has to send now, decoded ([`datagrams`]: its events stay queued
/// for [`feed`] and [`events`]).
pub fn out(n: &mut Node, now: Instant) -> Vec<Packet> {
    datagrams(n, now)
        .into_iter()
        .map(|(_, data)| Packet::decode(&data).unwrap())
        .collect()
}

/// The frames of `ps`, in order, but RECEIVED (the receipt times only a sender's
/// delivery-rate estimate reads, beyond the paper's algorithm): the walk-throughs compare
/// the protocol's frames.
pub fn frames(ps: &[Packet]) -> Vec<Frame> {
    ps.iter()
        .flat_map(|p| p.frames.clone())
        .filter(|f| !matches!(f, Frame::Received { .. }))
        .collect()
}

/// Feeds `ps` to `n`, whose application then takes every delivery at once (so that it is
/// acknowledged); the events are kept for [`events`].
pub fn feed(n: &mut Node, now: Instant, ps: &[Packet]) {
    feed_untaken(n, now, ps);
    while let Some(e) = n.poll_event() {
        if let Event::Delivered { id, .. } = &e {
            n.handle_taken(now, *id);
        }
        STASH.with(|s| s.borrow_mut().entry(n.id()).or_default().push(e));
    }
}

/// Feeds `ps` to `n` without taking anything: deliveries wait, unacknowledged.
pub fn feed_untaken(n: &mut Node, now: Instant, ps: &[Packet]) {
    for p in ps {
        n.handle_datagram(now, p.encode());
    }
}

/// The events of `n` not read yet: those kept by [`feed`], then the new ones.
pub fn events(n: &mut Node) -> Vec<Event> {
    let mut v = STASH.with(|s| s.borrow_mut().remove(&n.id()).unwrap_or_default());
    v.extend(std::iter::from_fn(|| n.poll_event()));
    v
}

/// A datagram from `src` to `dst` holding `frames`.
pub fn packet(src: NodeId, dst: NodeId, frames: Vec<Frame>) -> Packet {
    Packet {
        header: Header::new(src, dst),
        frames,
    }
}

/// The payloads delivered (other events are dropped).
pub fn delivered(n: &mut Node) -> Vec<Bytes> {
    events(n)
        .into_iter()
        .filter_map(|e| match e {
            Event::Delivered { payload, .. } => Some(payload),
            _ => None,
        })
        .collect()
}

/// The messages acknowledged (other events are dropped).
pub fn acked(n: &mut Node) -> usize {
    events(n)
        .iter()
        .map(|e| match e {
            Event::Acknowledged { ids, .. } => ids.count() as usize,
            _ => 0,
        })
        .sum()
}

/// A default configuration with this envelope target, low-water mark and window.
pub fn cfg(target: u64, low: u64, window: u64) -> Config {
    let mut conf = Config::default();
    conf.flow.envelope_target = target;
    conf.flow.envelope_low = low;
    conf.flow.window = window;
    conf
}

/// An ACK frame for incarnation `r` covering the slots `s`.
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
            senders_copy: false,
        }],
    )
}
