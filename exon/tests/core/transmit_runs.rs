//! Runs of datagrams (`Node::poll_transmit_run`): one call writes what calls of
//! `poll_transmit` in a row would have written to the same peer, byte for byte, in runs a
//! segmented send (GSO) can carry: every datagram the size of the first but the last, which
//! may be shorter.

use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::crypto::insecure_test_security;
use exon::proto::{Config, Event, Node, NodeId, Security};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

fn node(id: NodeId, sealed: bool) -> Node {
    let security = if sealed {
        insecure_test_security(id, [A, B])
    } else {
        Security::InsecurePlaintext
    };
    let mut cfg = Config::default();
    cfg.mtu.discovery = false;
    cfg.mtu.max_datagram_size = 1472;
    Node::new(id, security, cfg, 0).unwrap()
}

/// Stores clocks, then writes every datagram `n` has (one `poll_transmit` each with
/// `run` 0, else `poll_transmit_run(.., run)`), then takes its deliveries. Returns the
/// datagrams, and the runs' datagram counts.
fn drain(n: &mut Node, t: Instant, run: usize) -> (Vec<Bytes>, Vec<usize>) {
    // The transmit calls are this file's subject: only the clock goes through the kit.
    exon_testkit::confirm_clock(n, t);
    let (mut out, mut runs) = (Vec::new(), Vec::new());
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if run == 0 {
            let Some(tx) = n.poll_transmit(t, &mut buf) else {
                break;
            };
            assert_eq!(tx.size, buf.len());
            out.push(Bytes::copy_from_slice(&buf));
            runs.push(1);
            continue;
        }
        let Some(r) = n.poll_transmit_run(t, &mut buf, run) else {
            break;
        };
        assert!(r.count >= 1 && r.count <= run, "{r:?}");
        assert_eq!(r.size, buf.len());
        let mut at = 0;
        for (i, size) in r.sizes().enumerate() {
            // Every datagram but the last is of the run's segment size; the last no larger.
            assert!(size == r.segment_size || (i + 1 == r.count && size <= r.segment_size));
            out.push(Bytes::copy_from_slice(&buf[at..at + size]));
            at += size;
        }
        runs.push(r.count);
    }
    let mut taken = Vec::new();
    while let Some(e) = n.poll_event() {
        if let Event::Delivered { id, .. } = e {
            taken.push(id);
        }
    }
    for id in taken {
        n.handle_taken(t, id);
    }
    (out, runs)
}

/// A sends 600 messages of 1000 bytes to B; A's datagrams are written one call each
/// (`run` 0) or in runs of at most `run`. Returns every datagram A sent, its runs, and how
/// many messages B delivered.
fn exchange(sealed: bool, run: usize) -> (Vec<Bytes>, Vec<usize>, usize) {
    let t0 = Instant::now();
    let (mut a, mut b) = (node(A, sealed), node(B, sealed));
    for i in 0..600u32 {
        let mut p = vec![i as u8; 1000];
        p[..4].copy_from_slice(&i.to_be_bytes());
        a.send(t0, B, Bytes::from(p)).unwrap();
    }
    let (mut sent, mut runs, mut delivered) = (Vec::new(), Vec::new(), 0);
    for step in 0..400u64 {
        let t = t0 + Duration::from_millis(step);
        a.handle_timeout(t);
        b.handle_timeout(t);
        let (out, r) = drain(&mut a, t, run);
        runs.extend(r);
        for d in &out {
            b.handle_datagram(t, d.clone());
        }
        sent.extend(out);
        delivered = b.stats().delivered;
        let (back, _) = drain(&mut b, t, 0);
        for d in back {
            a.handle_datagram(t, d);
        }
    }
    (sent, runs, delivered as usize)
}

#[test]
fn a_run_is_what_single_datagrams_would_have_been() {
    for sealed in [false, true] {
        let (single, _, n1) = exchange(sealed, 0);
        let (runs, counts, n2) = exchange(sealed, 16);
        assert_eq!(
            (n1, n2),
            (600, 600),
            "sealed {sealed}: everything delivered"
        );
        assert_eq!(
            single.len(),
            runs.len(),
            "sealed {sealed}: as many datagrams"
        );
        assert!(
            single == runs,
            "sealed {sealed}: the datagrams differ byte for byte"
        );
        // Runs really form: a window's burst goes out in runs of more than one datagram.
        let multi = counts.iter().filter(|&&c| c > 1).count();
        assert!(multi >= 10, "sealed {sealed}: runs {counts:?}");
        assert!(counts.iter().all(|&c| c <= 16));
    }
}
