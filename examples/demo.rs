//! Placeholder for the main job (filled by the driver issue): two in-memory nodes exchange
//! messages over a lossy, duplicating link and the result is verified.
use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, Event, Node, NodeId};

fn main() {
    let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
    let mut a = Node::new(a_id, Config::default(), 0).expect("config");
    let mut b = Node::new(b_id, Config::default(), 0).expect("config");
    let mut now = Instant::now();
    let total = 10_000u32;
    let mut next = 0u32;
    let mut delivered = HashSet::new();
    let mut acked = 0;
    let mut buf = Vec::new();
    let mut seq = 0u64;
    while acked < total {
        while next < total && !a.is_full(b_id, 4) {
            a.send(now, b_id, Bytes::copy_from_slice(&next.to_be_bytes()))
                .expect("send");
            next += 1;
        }
        pump(&mut a, &mut b, now, &mut seq, &mut buf);
        pump(&mut b, &mut a, now, &mut seq, &mut buf);
        while let Some(e) = b.poll_event() {
            if let Event::Delivered { payload, .. } = e {
                assert!(delivered.insert(payload), "duplicate delivery");
            }
        }
        while let Some(e) = a.poll_event() {
            if let Event::Acknowledged { .. } = e {
                acked += 1;
            }
        }
        now += Duration::from_millis(1);
        a.handle_timeout(now);
        b.handle_timeout(now);
    }
    println!(
        "sent={total} delivered={} acknowledged={acked} duplicates=0",
        delivered.len()
    );
}

/// Moves every datagram `from` has to `to`, dropping one in 20 and duplicating one in 33.
fn pump(from: &mut Node, to: &mut Node, now: Instant, seq: &mut u64, buf: &mut Vec<u8>) {
    while let Some(hw) = from.poll_clock_store() {
        from.handle_clock_stored(now, hw);
    }
    buf.clear();
    while let Some(t) = from.poll_transmit(now, buf) {
        *seq += 1;
        let data = Bytes::copy_from_slice(&buf[buf.len() - t.size..]);
        if *seq % 20 != 0 {
            to.handle_datagram(now, data.clone());
        }
        if *seq % 33 == 0 {
            to.handle_datagram(now, data);
        }
    }
}
