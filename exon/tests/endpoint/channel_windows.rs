//! Ordered channels between endpoints whose windows differ (issue 42, item 3): a receiver
//! with `channel_window` 16, a sender with the default 1024, 600 messages over loopback with
//! 10 % of datagrams dropped (seeded). Every message acknowledged reaches the receiving
//! application in order, exactly once, and all of them arrive.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exon::endpoint::{Endpoint, EndpointConfig, Faults, Kind, LossySocket};
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::time::timeout;

use super::common::{cfg, security};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const CHANNEL: u16 = 4;
const MESSAGES: u64 = 600;
/// How long the receiver waits for its next message before the run counts as stalled.
const STALL: Duration = Duration::from_secs(3);

async fn start(id: NodeId, seed: u64, cfg: EndpointConfig) -> Endpoint {
    let mut f = Faults::default();
    f.loss = 0.1;
    f.duplicate = 0.0;
    f.reorder = 0.0;
    f.seed = seed;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    Endpoint::builder(id)
        .security(security(id))
        .config(cfg)
        .with_socket(LossySocket::new(sock, f))
        .unwrap()
}

/// What one run saw.
struct Outcome {
    /// Numbers (payloads) whose receipt said acknowledged.
    acked: BTreeSet<u64>,
    /// Payloads the receiving application got as channel messages, in the order it got them.
    received: Vec<u64>,
    /// The receiver's `beyond_window` counter.
    beyond_window: u64,
}

/// Sends [`MESSAGES`] on a channel from A (window `send_window`) to B (window
/// `recv_window`), both dropping 10 % of their datagrams (seed `seed`), B reading as they
/// come. Ends when B has all of them, or got nothing for [`STALL`].
async fn run(
    seed: u64,
    send_window: u32,
    recv_window: u32,
    rules: Option<exon::proto::Rules>,
) -> Outcome {
    let with = |w: u32| {
        let mut c = cfg();
        c.flows.channel_window = w;
        match rules {
            Some(r) => c.with_rules(r),
            None => c,
        }
    };
    let a = start(A, seed, with(send_window)).await;
    let mut b = start(B, seed ^ 0x5555, with(recv_window)).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let sender = tokio::spawn({
        let (a, acked) = (a.handle(), acked.clone());
        async move {
            let ch = a.channel(B, CHANNEL).unwrap();
            for i in 0..MESSAGES {
                let r = ch.send(i.to_be_bytes().to_vec()).await.unwrap();
                let acked = acked.clone();
                tokio::spawn(async move {
                    if let Ok(Ok(_)) = timeout(Duration::from_secs(60), r).await {
                        acked.lock().unwrap().insert(i);
                    }
                });
            }
        }
    });
    let mut received = Vec::new();
    while (received.len() as u64) < MESSAGES {
        let Ok(m) = timeout(STALL, b.recv()).await else {
            break; // stalled
        };
        let m = m.unwrap();
        match m.kind() {
            Kind::Channel {
                channel: CHANNEL, ..
            } => received.push(u64::from_be_bytes(m.payload[..].try_into().unwrap())),
            k => panic!("unexpected {k:?}"),
        }
    }
    // Let the last acknowledgements come back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sender.abort();
    let beyond_window = b.stats().await.unwrap().beyond_window;
    let acked = acked.lock().unwrap().clone();
    Outcome {
        acked,
        received,
        beyond_window,
    }
}

/// The receiving application got the messages in order, each once; every one acknowledged
/// is among them.
fn check(seed: u64, o: &Outcome) -> Result<(), String> {
    let in_order = o.received.iter().copied().eq(0..o.received.len() as u64);
    let got: BTreeSet<u64> = o.received.iter().copied().collect();
    let lost: Vec<u64> = o.acked.difference(&got).copied().collect();
    if !in_order || !lost.is_empty() {
        return Err(format!(
            "seed {seed}: received {} of {MESSAGES} (in order: {in_order}), {} acknowledged, \
             {} acknowledged and never received (first {:?}), beyond_window {}",
            o.received.len(),
            o.acked.len(),
            lost.len(),
            lost.first(),
            o.beyond_window
        ));
    }
    Ok(())
}

/// The case: every acknowledged message arrives, in order, and all 600 do.
#[tokio::test]
async fn a_receiver_with_a_smaller_window_gets_every_acknowledged_message_in_order() {
    for seed in [1, 2, 3, 4] {
        let o = run(seed, 1024, 16, None).await;
        check(seed, &o).unwrap();
        assert_eq!(o.received.len() as u64, MESSAGES, "seed {seed}: all arrive");
        assert_eq!(
            o.acked.len() as u64,
            MESSAGES,
            "seed {seed}: all acknowledged"
        );
    }
}

fn rules(advertise: bool, hold: bool) -> Option<exon::proto::Rules> {
    let mut r = exon::proto::Rules::ALL;
    r.advertise_flow_window = advertise;
    r.hold_beyond_window = hold;
    Some(r)
}

/// With the receiver's window advertised, its sender keeps to it: nothing arrives beyond.
#[tokio::test]
async fn the_sender_keeps_to_the_window_its_receiver_advertised() {
    let o = run(5, 1024, 16, None).await;
    check(5, &o).unwrap();
    assert_eq!(o.beyond_window, 0, "the sender kept to the receiver's 16");
}

/// Each of the two rules alone is enough: without the advertisement the sender sends up to
/// its own 1024, and the receiver holds what is beyond its 16 untaken for its turn; without
/// holding, the advertisement keeps the sender within the receiver's window.
#[tokio::test]
async fn either_rule_alone_keeps_every_acknowledged_message() {
    let mut beyond = 0;
    // A receiver window of 2: any hole that waits for a retransmission has arrivals beyond.
    for seed in [6, 8, 9, 10, 11] {
        let o = run(seed, 1024, 2, rules(false, true)).await;
        check(seed, &o).unwrap();
        assert_eq!(o.received.len() as u64, MESSAGES, "seed {seed}");
        beyond += o.beyond_window;
    }
    assert!(beyond > 0, "the sender went beyond the receiver's window");
    let o = run(7, 1024, 16, rules(true, false)).await;
    check(7, &o).unwrap();
    assert_eq!(o.received.len() as u64, MESSAGES);
}

/// Both rules off (the code of issue 42): the receiver takes and drops what lies more than
/// four of its windows ahead, so messages acknowledged never reach the application, and the
/// channel stalls.
#[tokio::test]
async fn without_the_rules_acknowledged_messages_are_dropped() {
    let o = run(1, 1024, 16, rules(false, false)).await;
    let e = check(1, &o).expect_err("acknowledged messages lost");
    assert!(e.contains("never received"), "{e}");
    assert!(o.beyond_window > 0);
    assert!((o.received.len() as u64) < MESSAGES, "stalled: {e}");
}

/// Streams alike: A (default stream window, 1024 chunks) and B (4 chunks of at most 8 KiB,
/// 32 KiB) write 256 KiB each way at once, both dropping 10 % of their datagrams: every byte
/// arrives exact, and neither receives beyond the window it advertised.
#[tokio::test]
async fn a_stream_between_unequal_windows_is_exact_both_ways_within_the_smaller() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut small = cfg();
    small.flows.stream_window = 4;
    small.flows.stream_window_bytes = 32 << 10;
    small.flows.stream_chunk = 8 << 10;
    let a = start(A, 21, cfg()).await;
    let mut b = start(B, 22, small).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let len = 256 << 10;
    let data = |k: u8| -> Vec<u8> { (0..len).map(|i| (i as u8).wrapping_mul(k)).collect() };
    let mut s = a.open_stream(B).unwrap();
    let mut t = timeout(Duration::from_secs(20), b.accept_stream())
        .await
        .unwrap()
        .unwrap();
    let (sa, sb) = (data(3), data(7));
    let one = async {
        let (mut r, mut w) = tokio::io::split(&mut s);
        let write = async {
            w.write_all(&sa).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let read = r.read_to_end(&mut got);
        let (_, n) = tokio::join!(write, read);
        n.unwrap();
        got
    };
    let two = async {
        let (mut r, mut w) = tokio::io::split(&mut t);
        let write = async {
            w.write_all(&sb).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let read = r.read_to_end(&mut got);
        let (_, n) = tokio::join!(write, read);
        n.unwrap();
        got
    };
    let (at_a, at_b) = timeout(Duration::from_secs(30), async { tokio::join!(one, two) })
        .await
        .unwrap();
    assert!(at_a == sb, "A read B's bytes exact");
    assert!(at_b == sa, "B read A's bytes exact");
    assert_eq!(b.stats().await.unwrap().beyond_window, 0);
    assert_eq!(a.stats().await.unwrap().beyond_window, 0);
}
