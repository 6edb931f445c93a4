//! What untaken deliveries hold: a peer sends tiny messages, each in a datagram padded to
//! half of a 64 KiB receive buffer (an MTU_PROBE's padding after the TOKEN), and the
//! application takes none. A delivery handed over as a slice of its datagram would keep the
//! whole buffer alive (65 536 of them, 4 GiB); the node copies small payloads out once its
//! zero-copy budget (64 MiB) is spent, so the heap grows by at most twice the payload plus
//! that budget, plus 256 bytes of bookkeeping per held delivery: the bound the README states,
//! asserted exactly. Measured with a counting allocator (65 536 deliveries: +73.5 MB, about
//! 81 bytes per delivery beyond the payload and the budget, the application's handles
//! included).
//!
//! A core test, alone in its binary on purpose: the counting allocator is the process's
//! global allocator and counts every thread, so any test running beside this one would
//! add its allocations to the measure. A new memory measurement goes in a binary of its
//! own like this one (see `docs/testing.md`).
//!
//! Run: `cargo test -p exon --test untaken_memory`.

use exon_testkit::alloc::Counting;
use std::time::Instant;

use bytes::{BufMut, BytesMut};
use exon::proto::frame::{put_mtu_probe, put_reqslots, put_token, Header};
use exon::proto::{Config, Event, Frame, Node, NodeId, Packet, Security};

#[global_allocator]
static GLOBAL: Counting = Counting;

const VICTIM: NodeId = NodeId::from_const(1);
const PEER: NodeId = NodeId::from_const(2);
const BUFFER: usize = 1 << 16;
const DELIVERIES: u64 = 65_536;
/// Bytes of bookkeeping per held delivery in the README's bound.
const PER_DELIVERY: u64 = 256;

/// A datagram from the peer holding `body`, in a fresh receive buffer of `BUFFER` bytes of
/// which it fills the first part (as the driver hands over a datagram split off its buffer).
fn datagram(body: impl FnOnce(&mut BytesMut)) -> BytesMut {
    let mut buf = BytesMut::with_capacity(BUFFER);
    Header::new(PEER, VICTIM).encode(&mut buf);
    body(&mut buf);
    let len = buf.len();
    buf.put_bytes(0, BUFFER - len);
    buf.truncate(len);
    buf.split_to(len)
}

/// The incarnation of the SLOTS the victim sent for `s`.
fn granted(node: &mut Node, now: Instant) -> Option<u64> {
    let mut out = Vec::new();
    let mut r = None;
    loop {
        out.clear();
        if node.poll_transmit(now, &mut out).is_none() {
            return r;
        }
        if let Ok(p) = Packet::decode(&bytes::Bytes::from(out.clone())) {
            for f in p.frames {
                if let Frame::Slots { r: rck, n, .. } = f {
                    if n > 0 {
                        r = Some(rck);
                    }
                }
            }
        }
    }
}

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn untaken_tiny_deliveries_hold_little_more_than_their_payload() {
    let now = Instant::now();
    let mut c = Config::default();
    c.limits.max_slots_per_record = DELIVERIES + 4096;
    // One source holds them all: its share is the whole room here.
    c.limits.max_untaken_per_source = c.limits.max_untaken;
    c.limits.max_untaken_bytes_per_source = c.limits.max_untaken_bytes;
    let mut node = Node::new(VICTIM, Security::InsecurePlaintext, c, 1 << 20).unwrap();
    exon_testkit::confirm_clock(&mut node, now);
    let mut key = 0;
    let before = exon_testkit::alloc::live();
    let mut held = Vec::with_capacity(DELIVERIES as usize);
    let mut payload = 0u64;
    let mut s = 0;
    while s < DELIVERIES {
        let n = 4096;
        let req = datagram(|b| put_reqslots(b, s, n, s));
        node.handle_datagram_buf(now, req);
        let r = granted(&mut node, now).expect("slots granted");
        for k in s..s + n {
            let tiny = vec![k as u8; 1 + (k % 16) as usize];
            payload += tiny.len() as u64;
            let d = datagram(|b| {
                put_token(b, k, r, &tiny);
                let room = BUFFER / 2 - b.len();
                put_mtu_probe(b, k, room);
            });
            assert!(d.len() >= BUFFER / 2 - 64);
            // As the driver says of a datagram split off its 64 KiB buffer.
            key += 1;
            node.set_receive_buffer(key, BUFFER);
            node.handle_datagram_buf(now, d);
            while let Some(e) = node.poll_event() {
                if let Event::Delivered { payload, id, .. } = e {
                    held.push((payload, id));
                }
            }
        }
        // Drain the replies (MTU_ACKs, none of them ACKs: nothing is taken).
        granted(&mut node, now);
        s += n;
    }
    assert_eq!(held.len() as u64, DELIVERIES);
    assert_eq!(node.untaken(), DELIVERIES as usize);
    let grown = (exon_testkit::alloc::live() - before) as u64;
    let st = node.stats();
    eprintln!(
        "{} deliveries, {payload} bytes of payload: heap +{} bytes ({} per delivery); {} kept as \
         slices within the budget, {} copied out",
        held.len(),
        grown,
        grown / DELIVERIES,
        st.pinned_deliveries,
        st.copied_deliveries
    );
    assert!(st.copied_deliveries > 60_000, "{}", st.copied_deliveries);
    // The README's bound: twice the payload, 256 bytes of bookkeeping per held delivery
    // (the node's, and the application's handle: the held list here), and the 64 MiB budget.
    let bound = 2 * payload + PER_DELIVERY * DELIVERIES + (64 << 20);
    assert!(grown <= bound, "heap +{grown} bytes, bound {bound}");
    drop(held);
}
