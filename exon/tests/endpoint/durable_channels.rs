//! Durable channels (issue 44, item 2): on durable endpoints a channel's numbering and its
//! receiver's next number due live in the journal (marks), so the channel goes on across
//! restarts of either side: in order, nothing skipped, nothing twice, its unacknowledged
//! messages sent again from the journal. With the rule `durable_flows` off, the channel
//! starts over after a restart (old behaviour): the receiver releases out of order.

use std::time::Duration;

use exon::endpoint::{Endpoint, Kind, Message};
use exon::NodeId;
use tokio::time::timeout;

use super::common::{durable_flows, stop};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(20);

fn pair(a: &Endpoint, b: &Endpoint) {
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
}

/// Sends items `range` on channel 0 from `a` to B, in a task that waits for every receipt.
fn send(a: &Endpoint, range: std::ops::Range<u64>) -> tokio::task::JoinHandle<()> {
    let ch = a.handle().channel(B, 0).unwrap();
    tokio::spawn(async move {
        let mut receipts = Vec::new();
        for x in range {
            let r = timeout(LIMIT, ch.send(x.to_be_bytes().to_vec())).await;
            receipts.push(r.expect("room in the window in time").unwrap());
        }
        for r in receipts {
            timeout(LIMIT, r)
                .await
                .expect("acknowledged in time")
                .unwrap();
        }
    })
}

/// Receives `n` messages at `b`: (item, channel number, redelivery), acknowledging each.
async fn recv(b: &mut Endpoint, n: usize) -> Vec<(u64, Option<u64>, bool)> {
    let mut got = Vec::new();
    while got.len() < n {
        let m: Message = timeout(LIMIT, b.recv()).await.expect("in time").unwrap();
        let seq = match m.kind() {
            Kind::Channel { channel: 0, seq } => Some(seq),
            _ => None,
        };
        let x = u64::from_be_bytes(m.payload[..].try_into().unwrap());
        got.push((x, seq, m.is_redelivery()));
        m.ack();
    }
    got
}

fn in_order(got: &[(u64, Option<u64>, bool)], range: std::ops::Range<u64>) -> bool {
    got.len() as u64 == range.end - range.start
        && got
            .iter()
            .zip(range)
            .all(|(&(x, seq, again), want)| x == want && seq == Some(want) && !again)
}

/// Both sides restart in turn between batches: with the rule on, the channel's numbers go
/// on (each batch arrives in order with the numbers of its items); off, a restarted side
/// starts the channel over and the numbers no longer match.
#[tokio::test]
async fn a_durable_channel_goes_on_across_restarts_of_either_side() {
    for rule in [true, false] {
        let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = durable_flows(A, adir.path(), rule, false).await;
        let mut b = durable_flows(B, bdir.path(), rule, false).await;
        pair(&a, &b);
        let sent = send(&a, 0..100);
        assert!(in_order(&recv(&mut b, 100).await, 0..100));
        sent.await.unwrap();
        // The receiver restarts.
        stop(b).await;
        let mut b = durable_flows(B, bdir.path(), rule, false).await;
        pair(&a, &b);
        let sent = send(&a, 100..200);
        let second = recv(&mut b, 100).await;
        sent.await.unwrap();
        // The sender restarts.
        stop(a).await;
        let mut a = durable_flows(A, adir.path(), rule, false).await;
        pair(&a, &b);
        // Every message was acknowledged: at most verdicts stored and maybe not reported.
        assert!(a.take_recovered().iter().all(|r| r.settled));
        let next = a.handle().channel(B, 0).unwrap().next_seq();
        let sent = send(&a, 200..300);
        let third = recv(&mut b, 100).await;
        sent.await.unwrap();
        if rule {
            assert!(in_order(&second, 100..200), "{second:?}");
            assert_eq!(next, 200);
            assert!(in_order(&third, 200..300), "{third:?}");
        } else {
            assert!(
                !in_order(&second, 100..200) || !in_order(&third, 200..300),
                "rule off: the channel starts over"
            );
        }
        stop(a).await;
        stop(b).await;
    }
}

/// A sender that stops with messages stored and not acknowledged (its receiver away) sends
/// them again after its restart, on their channel and in their places, and reports them as
/// recovered; a receiver that stops with messages handed out and not acknowledged gets them
/// again, flagged, in order, and then the rest.
#[tokio::test]
async fn unacknowledged_channel_messages_survive_restarts_of_either_side() {
    let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = durable_flows(A, adir.path(), true, false).await;
    let mut b = durable_flows(B, bdir.path(), true, true).await;
    pair(&a, &b);
    let sent = send(&a, 0..10);
    assert!(in_order(&recv(&mut b, 10).await, 0..10));
    sent.await.unwrap();
    // B hands out 20 messages and stops before acknowledging them.
    let ch = a.handle().channel(B, 0).unwrap();
    let mut receipts = Vec::new();
    for x in 10..30u64 {
        receipts.push(ch.send(x.to_be_bytes().to_vec()).await.unwrap());
    }
    let mut handed = Vec::new();
    while handed.len() < 20 {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        handed.push(m); // never acknowledged
    }
    drop(handed);
    stop(b).await;
    // A stores 30 more while B is away, and stops.
    for x in 30..60u64 {
        receipts.push(ch.send(x.to_be_bytes().to_vec()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(ch);
    stop(a).await;
    drop(receipts);
    let mut a = durable_flows(A, adir.path(), true, false).await;
    let mut b = durable_flows(B, bdir.path(), true, true).await;
    pair(&a, &b);
    let recovered: Vec<_> = a
        .take_recovered()
        .into_iter()
        .filter(|r| !r.settled)
        .collect();
    let mut seqs: Vec<u64> = recovered
        .iter()
        .map(|r| r.channel.expect("a channel message").1)
        .collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (10..60).collect::<Vec<_>>(),
        "every unacknowledged message"
    );
    assert_eq!(a.handle().channel(B, 0).unwrap().next_seq(), 60);
    let got = recv(&mut b, 50).await;
    for (i, &(x, seq, again)) in got.iter().enumerate() {
        let want = 10 + i as u64;
        assert_eq!((x, seq), (want, Some(want)), "{got:?}");
        assert_eq!(again, want < 30, "handed out before the restart: flagged");
    }
    for r in recovered {
        timeout(LIMIT, r.receipt).await.unwrap().unwrap();
    }
    let sent = send(&a, 60..70);
    assert!(in_order(&recv(&mut b, 10).await, 60..70));
    sent.await.unwrap();
    stop(a).await;
    stop(b).await;
}

/// A durable endpoint for node `id` in `dir`, with the rule `mark_flow_window` as given.
async fn bind_window_rule(id: NodeId, dir: &std::path::Path, rule: bool, later: bool) -> Endpoint {
    let mut rules = exon::proto::Rules::ALL;
    rules.mark_flow_window = rule;
    super::common::durable_rules(id, dir, rules, later).await
}

/// A sender restarted after it learned its receiver's window, and before it sent anything
/// more, still knows that window: its resumed channel has many messages in flight at once
/// (the receiver, which did not restart, does not advertise it again). With the rule
/// `mark_flow_window` off, the window was not kept and the channel goes on one message at
/// a time for good.
#[tokio::test]
async fn a_resumed_channel_keeps_its_receivers_window() {
    for rule in [true, false] {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let bind_a = || bind_window_rule(A, dirs[0].path(), rule, false);
        let a = bind_a().await;
        let mut b = bind_window_rule(B, dirs[1].path(), true, true).await;
        pair(&a, &b);
        let ch = a.handle().channel(B, 0).unwrap();
        let receipt = ch.send(vec![0u8]).await.unwrap();
        timeout(LIMIT, b.recv()).await.unwrap().unwrap().ack();
        timeout(LIMIT, receipt).await.unwrap().unwrap();
        // The window's advert comes, and is kept (the journal syncs it).
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(ch);
        stop(a).await;
        let a = bind_a().await;
        pair(&a, &b);
        let ch = a.handle().channel(B, 0).unwrap();
        let sender = tokio::spawn(async move {
            let mut receipts = Vec::new();
            for x in 1..=10u8 {
                receipts.push(ch.send(vec![x]).await.unwrap());
            }
            receipts
        });
        // B holds what arrives, unacknowledged: the sender's window of it, or one.
        let mut held = Vec::new();
        while let Ok(Some(m)) = timeout(Duration::from_millis(700), b.recv()).await {
            held.push(m);
        }
        let in_flight = held.len();
        if rule {
            assert_eq!(in_flight, 10, "the window is known after the restart");
        } else {
            assert_eq!(in_flight, 1, "rule off: one message at a time");
        }
        held.into_iter().for_each(|m| m.ack());
        sender.abort();
        stop(a).await;
        stop(b).await;
    }
}

/// Sends that wait for the node's clock to be stored (a tiny `clock_block`: dozens of
/// waits) keep their payloads and their channel's positions: none is refused (the driver
/// keeps a copy exactly when the clock may refuse, `Sends::admit`: one fewer and this
/// fails), and after the sender's restart the channel goes on at the right number.
#[tokio::test]
async fn sends_waiting_for_the_clock_keep_their_positions() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let bind_a = || {
        let mut c = super::common::cfg();
        c.protocol.clock_block = 4;
        super::common::bind_durable(A, dirs[0].path(), c, super::common::security(A))
    };
    let a = bind_a().await.unwrap();
    let mut b = durable_flows(B, dirs[1].path(), true, false).await;
    pair(&a, &b);
    let sent = send(&a, 0..200);
    assert!(in_order(&recv(&mut b, 200).await, 0..200));
    sent.await.unwrap();
    stop(a).await;
    let a = bind_a().await.unwrap();
    pair(&a, &b);
    assert_eq!(a.handle().channel(B, 0).unwrap().next_seq(), 200);
    let sent = send(&a, 200..220);
    assert!(in_order(&recv(&mut b, 20).await, 200..220));
    sent.await.unwrap();
    stop(a).await;
    stop(b).await;
}
