//! Room for durable flows' marks (`Limits::max_marks`, `Rules::reserve_flow_marks`): a
//! durable flow never goes on without its position. A channel or stream this endpoint opens
//! beyond the room is refused (`Error::TooManyFlows`), a peer's channel beyond it is not
//! delivered, a peer's stream beyond it is reset, and a stream dropped gives its room back.
//! With the rule off, the old defect: a peer's channel beyond the room is taken without its
//! position, and after the receiver's restart it goes on out of order.

use std::time::Duration;

use exon::endpoint::{Endpoint, Error, Kind};
use exon::NodeId;
use tokio::io::AsyncWriteExt;
use tokio::time::timeout;

use super::common::{bind_durable, cfg, security, stop};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(20);
/// How long a message that must not come is waited for.
const QUIET: Duration = Duration::from_millis(800);

/// A durable endpoint whose journals keep at most `max_marks` marks, with the rule
/// `reserve_flow_marks` as given.
async fn bind(id: NodeId, dir: &std::path::Path, rule: bool, max_marks: usize) -> Endpoint {
    let mut rules = exon::proto::Rules::ALL;
    rules.reserve_flow_marks = rule;
    let mut c = cfg().with_rules(rules);
    c.protocol.limits.max_marks = max_marks;
    bind_durable(id, dir, c, security(id)).await.unwrap()
}

fn pair(a: &Endpoint, b: &Endpoint) {
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
}

/// The channel and number of `b`'s next message, if one comes in time.
async fn next(b: &mut Endpoint, within: Duration) -> Option<Kind> {
    let m = timeout(within, b.recv()).await.ok()??;
    let kind = m.kind();
    m.ack();
    Some(kind)
}

/// An endpoint that has no room left for a new flow's marks refuses to open one, with a
/// typed error: a channel takes one mark, a stream two.
#[tokio::test]
async fn a_new_flow_without_room_for_its_marks_is_refused() {
    let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = bind(A, adir.path(), true, 2).await;
    let b = bind(B, bdir.path(), true, 64).await;
    pair(&a, &b);
    let h = a.handle();
    h.channel(B, 0).unwrap();
    assert_eq!(
        h.open_stream(B).err(),
        Some(Error::TooManyFlows { max: 2 }),
        "two marks, one left"
    );
    h.channel(B, 1).unwrap();
    h.channel(B, 0)
        .expect("a channel made already has its room");
    assert_eq!(h.channel(B, 2).err(), Some(Error::TooManyFlows { max: 2 }));
    stop(a).await;
    stop(b).await;
}

/// A peer's channel that finds no room for its receiver's mark is not delivered (held
/// untaken), while the channels with room go on. With the rule off it is delivered and
/// taken without its position: after the receiver's restart it goes on out of order.
#[tokio::test]
async fn a_peers_channel_without_room_for_its_mark_is_not_delivered() {
    for rule in [true, false] {
        let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = bind(A, adir.path(), true, 64).await;
        let mut b = bind(B, bdir.path(), rule, 1).await;
        pair(&a, &b);
        let (c0, c1) = (
            a.handle().channel(B, 0).unwrap(),
            a.handle().channel(B, 1).unwrap(),
        );
        drop(c0.send(&b"0"[..]).await.unwrap());
        let first = next(&mut b, LIMIT).await;
        assert_eq!(first, Some(Kind::Channel { channel: 0, seq: 0 }));
        drop(c1.send(&b"1"[..]).await.unwrap());
        let other = next(&mut b, QUIET).await;
        if rule {
            assert_eq!(other, None, "no room for its position: not delivered");
            let stats = b.handle().stats().await.unwrap();
            assert!(stats.channels_full > 0);
            drop(c0.send(&b"0"[..]).await.unwrap());
            let more = next(&mut b, LIMIT).await;
            assert_eq!(more, Some(Kind::Channel { channel: 0, seq: 1 }));
        } else {
            assert_eq!(other, Some(Kind::Channel { channel: 1, seq: 0 }));
            tokio::time::sleep(Duration::from_millis(100)).await;
            stop(b).await;
            b = bind(B, bdir.path(), rule, 1).await;
            pair(&a, &b);
            drop(c1.send(&b"1"[..]).await.unwrap());
            let after = next(&mut b, LIMIT).await;
            assert_eq!(
                after,
                Some(Kind::Unordered { channel: 1, seq: 1 }),
                "rule off: its position was lost"
            );
        }
        stop(a).await;
        stop(b).await;
    }
}

/// A peer's stream that finds no room for its two marks is reset; once a stream is dropped
/// its room comes back and a new one is accepted.
#[tokio::test]
async fn a_peers_stream_without_room_is_reset_and_a_dropped_one_gives_room_back() {
    let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = bind(A, adir.path(), true, 64).await;
    let mut b = bind(B, bdir.path(), true, 2).await;
    pair(&a, &b);
    let mut s1 = a.handle().open_stream(B).unwrap();
    s1.write_all(b"one").await.unwrap();
    s1.flush().await.unwrap();
    let t1 = timeout(LIMIT, b.accept_stream()).await.unwrap().unwrap();
    let s2 = a.handle().open_stream(B).unwrap();
    let refused = timeout(LIMIT, s2.finished()).await.expect("reset in time");
    assert!(refused.is_err(), "no room: reset");
    assert!(
        timeout(QUIET, b.accept_stream()).await.is_err(),
        "not accepted"
    );
    // B is done with the first stream: its two marks go, their room with them.
    drop(t1);
    drop(s1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _s3 = a.handle().open_stream(B).unwrap();
    let t3 = timeout(LIMIT, b.accept_stream()).await.expect("room again");
    assert!(t3.is_some());
    stop(a).await;
    stop(b).await;
}
