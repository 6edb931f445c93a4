//! Batched inputs. Takes reported together (`Node::handle_taken_many`): the same effect as
//! one `handle_taken` per delivery, in order, whatever senders the deliveries came from.
//! Sends handed over together (`Node::send_many`): each message as `send` would take it,
//! ids one after the other, stopping at the first `send` would refuse.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, DeliveryId, Event, MsgId, Node, NodeId, Payload, Security, SendError};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const C: NodeId = NodeId::from_const(3);

fn node(id: NodeId) -> Node {
    Node::new(id, Security::InsecurePlaintext, Config::default(), 0).unwrap()
}

/// Stores `n`'s clocks and returns its datagrams, by destination (the test kit's
/// [`datagrams`](exon_testkit::datagrams): its events stay queued, for the caller).
fn datagrams(n: &mut Node, t: Instant) -> Vec<(NodeId, Bytes)> {
    exon_testkit::datagrams(n, t)
        .into_iter()
        .map(|(tx, d)| (tx.destination, d))
        .collect()
}

/// A and C each send 300 messages to B, which takes its deliveries one call each (`many`
/// false) or all those of a drain in one call. Returns every datagram B sent, the ids its
/// calls reported taken, and the messages acknowledged to A and C.
fn run(many: bool) -> (Vec<(NodeId, Bytes)>, usize, usize) {
    let t0 = Instant::now();
    let (mut a, mut b, mut c) = (node(A), node(B), node(C));
    for n in [&mut a, &mut b, &mut c] {
        exon_testkit::confirm_clock(n, t0);
    }
    for i in 0..300u32 {
        a.send(t0, B, Bytes::from(i.to_be_bytes().to_vec()))
            .unwrap();
        c.send(t0, B, Bytes::from((i + 1000).to_be_bytes().to_vec()))
            .unwrap();
    }
    let (mut from_b, mut taken, mut acked) = (Vec::new(), 0, 0);
    for step in 0..200u64 {
        let t = t0 + Duration::from_millis(step);
        for n in [&mut a, &mut b, &mut c] {
            n.handle_timeout(t);
        }
        // A's and C's datagrams interleaved, so B's deliveries alternate senders in runs.
        let (da, dc) = (datagrams(&mut a, t), datagrams(&mut c, t));
        for i in 0..da.len().max(dc.len()) {
            for d in [da.get(i), dc.get(i)].into_iter().flatten() {
                b.handle_datagram(t, d.1.clone());
            }
        }
        let mut ids: Vec<DeliveryId> = Vec::new();
        while let Some(e) = b.poll_event() {
            if let Event::Delivered { id, .. } = e {
                ids.push(id);
            }
        }
        // Some ids twice: a take reported again is refused either way.
        if let Some(&first) = ids.first() {
            ids.push(first);
        }
        taken += if many {
            b.handle_taken_many(t, ids.iter().copied())
        } else {
            ids.iter().filter(|id| b.handle_taken(t, **id)).count()
        };
        for (to, d) in datagrams(&mut b, t) {
            match to {
                A => a.handle_datagram(t, d.clone()),
                _ => c.handle_datagram(t, d.clone()),
            };
            from_b.push((to, d));
        }
        for n in [&mut a, &mut c] {
            while let Some(e) = n.poll_event() {
                if let Event::Acknowledged { ids, .. } = e {
                    acked += ids.count() as usize;
                }
            }
        }
    }
    (from_b, taken, acked)
}

#[test]
fn takes_reported_together_are_takes_reported_one_by_one() {
    let (one, taken_one, acked_one) = run(false);
    let (many, taken_many, acked_many) = run(true);
    assert_eq!(
        (taken_one, acked_one),
        (600, 600),
        "every message taken once"
    );
    assert_eq!((taken_many, acked_many), (600, 600));
    assert_eq!(one.len(), many.len(), "as many datagrams from the receiver");
    assert!(one == many, "the receiver's datagrams differ");
}

/// Node `id`, its clock stored.
fn ready(id: NodeId, t: Instant) -> Node {
    let mut n = node(id);
    exon_testkit::confirm_clock(&mut n, t);
    n
}

/// Hands `to` the datagrams `from` has for it.
fn pass(from: &mut Node, to: &mut Node, t: Instant) {
    for (_, d) in datagrams(from, t) {
        to.handle_datagram(t, d);
    }
}

fn payloads(n: u32, size: usize) -> VecDeque<Payload> {
    (0..n)
        .map(|i| {
            let mut p = vec![0u8; size.max(4)];
            p[..4].copy_from_slice(&i.to_be_bytes());
            Bytes::from(p).into()
        })
        .collect()
}

#[test]
fn sends_handed_over_together_are_each_sent_once() {
    let t0 = Instant::now();
    let (mut a, mut b) = (ready(A, t0), ready(B, t0));
    let mut queue = payloads(500, 1000);
    let first = a.send_many(t0, B, &mut queue).unwrap();
    assert!(queue.is_empty(), "all 500 taken");
    // A second batch: its ids follow the first's.
    let mut more = payloads(100, 10);
    let second = a.send_many(t0, B, &mut more).unwrap();
    assert_eq!(second, MsgId(first.0 + 500));
    let (mut delivered, mut acked) = (Vec::new(), Vec::new());
    for step in 0..300u64 {
        let t = t0 + Duration::from_millis(step);
        a.handle_timeout(t);
        b.handle_timeout(t);
        pass(&mut a, &mut b, t);
        let mut ids = Vec::new();
        while let Some(e) = b.poll_event() {
            if let Event::Delivered { id, payload, .. } = e {
                delivered.push(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                ids.push(id);
            }
        }
        b.handle_taken_many(t, ids);
        pass(&mut b, &mut a, t);
        while let Some(e) = a.poll_event() {
            if let Event::Acknowledged { ids, .. } = e {
                acked.extend(ids.iter().map(|id| id.0));
            }
        }
    }
    delivered.sort_unstable();
    let mut want: Vec<u32> = (0..100).chain(0..500).collect();
    want.sort_unstable();
    assert_eq!(delivered, want, "each message delivered once");
    acked.sort_unstable();
    let ids: Vec<u64> = (first.0..first.0 + 600).collect();
    assert_eq!(acked, ids, "each id acknowledged once");
}

#[test]
fn a_batch_stops_at_the_first_message_send_would_refuse() {
    let t = Instant::now();
    let cfg = {
        let mut c = Config::default();
        c.limits.max_queued_per_peer = 10;
        c.limits.max_message_size = 2000;
        c
    };
    let mut a = Node::new(A, Security::InsecurePlaintext, cfg, 0).unwrap();
    // A payload too large third: the first two go, the rest stay.
    let mut q = payloads(5, 100);
    q[2] = Bytes::from(vec![0u8; 3000]).into();
    let first = a.send_many(t, B, &mut q).unwrap();
    assert_eq!(q.len(), 3);
    assert_eq!(q[0].len(), 3000, "the refused payload stays at the front");
    let err = a.send_many(t, B, &mut q).unwrap_err();
    assert_eq!(
        err,
        SendError::PayloadTooLarge {
            len: 3000,
            max: 2000
        }
    );
    assert_eq!(q.len(), 3, "nothing taken when the first is refused");
    q.pop_front();
    // The queue holds 10 at most: 2 + 2 sent, then 6 of the next 10.
    a.send_many(t, B, &mut q).unwrap();
    let mut ten = payloads(10, 100);
    let next = a.send_many(t, B, &mut ten).unwrap();
    assert_eq!(next, MsgId(first.0 + 4));
    assert_eq!(ten.len(), 4);
    assert_eq!(a.send_many(t, B, &mut ten), Err(SendError::QueueFull(B)));
    assert_eq!(
        a.send_many(t, B, &mut VecDeque::new()),
        Err(SendError::NothingToSend)
    );
    assert_eq!(
        a.send_many(t, A, &mut payloads(1, 10)),
        Err(SendError::ToSelf)
    );
    assert_eq!(a.stats().sent, 10);
}

/// A batch into a new sender record, to a receiver that takes nothing: its one slot request
/// was sized before any token set the token size, and the first token's size widens the
/// window, so the sender asks again without waiting for a verdict (none comes, the
/// deliveries being untaken) or another send. Every message is delivered.
#[test]
fn a_batch_to_a_new_peer_is_delivered_whole_while_nothing_is_taken() {
    let t0 = Instant::now();
    let (mut a, mut b) = (ready(A, t0), ready(B, t0));
    let mut queue = payloads(200, 4);
    a.send_many(t0, B, &mut queue).unwrap();
    assert_eq!((a.stats().sent, a.stats().sent_together), (200, 199));
    let mut delivered = 0;
    for step in 0..300u64 {
        let t = t0 + Duration::from_millis(step);
        a.handle_timeout(t);
        b.handle_timeout(t);
        pass(&mut a, &mut b, t);
        while let Some(e) = b.poll_event() {
            delivered += usize::from(matches!(e, Event::Delivered { .. }));
        }
        pass(&mut b, &mut a, t);
    }
    assert_eq!(delivered, 200, "messages delivered, none taken");
}

/// Every `Acknowledged` event `n` has, with its destination.
fn acknowledged(n: &mut Node) -> Vec<(NodeId, exon::proto::MsgIds)> {
    let mut out = Vec::new();
    while let Some(e) = n.poll_event() {
        if let Event::Acknowledged { to, ids } = e {
            out.push((to, ids));
        }
    }
    out
}

/// Lets `to` take everything it has delivered.
fn take_all(to: &mut Node, t: Instant) {
    let mut ids = Vec::new();
    while let Some(e) = to.poll_event() {
        if let Event::Delivered { id, .. } = e {
            ids.push(id);
        }
    }
    to.handle_taken_many(t, ids);
}

/// A verdict frame that acknowledges a batch yields one event for the whole run of ids, and
/// runs to two destinations stay apart even when their ids follow one another.
#[test]
fn a_frame_acknowledging_a_batch_is_one_event_per_destination() {
    let t0 = Instant::now();
    let (mut a, mut b, mut c) = (ready(A, t0), ready(B, t0), ready(C, t0));
    // Slots first, so that each batch leaves in one datagram and comes back in one ACK.
    for (to, peer) in [(B, &mut b), (C, &mut c)] {
        a.send(t0, to, Bytes::from_static(b"warm-up")).unwrap();
        for (dest, d) in datagrams(&mut a, t0) {
            assert_eq!(dest, to);
            peer.handle_datagram(t0, d);
        }
        pass(peer, &mut a, t0);
        pass(&mut a, peer, t0);
        take_all(peer, t0);
        pass(peer, &mut a, t0);
    }
    let warm = acknowledged(&mut a);
    assert_eq!(warm.iter().map(|(_, r)| r.count()).sum::<u64>(), 2);
    let t = t0 + Duration::from_millis(1);
    let to_b = a.send_many(t, B, &mut payloads(20, 8)).unwrap();
    let to_c = a.send_many(t, C, &mut payloads(20, 8)).unwrap();
    assert_eq!(
        to_c,
        MsgId(to_b.0 + 20),
        "the ids of the two batches follow one another"
    );
    for step in 1..200u64 {
        let t = t0 + Duration::from_millis(step);
        for (dest, d) in datagrams(&mut a, t) {
            match dest {
                B => b.handle_datagram(t, d),
                _ => c.handle_datagram(t, d),
            };
        }
        take_all(&mut b, t);
        take_all(&mut c, t);
        // B's answers, then C's, before A reports anything.
        pass(&mut b, &mut a, t);
        pass(&mut c, &mut a, t);
        if a.stats().acknowledged == 42 {
            break;
        }
    }
    let runs = acknowledged(&mut a);
    let b_run = exon::proto::MsgIds::new(to_b, MsgId(to_b.0 + 19)).unwrap();
    let c_run = exon::proto::MsgIds::new(to_c, MsgId(to_c.0 + 19)).unwrap();
    assert_eq!(runs, [(B, b_run), (C, c_run)]);
}
