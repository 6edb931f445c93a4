//! Exon in `compare`'s durable section: durable endpoints (`Builder::durable`, every message
//! on disk before it leaves, every delivery and take on disk before it is acknowledged)
//! one-way and request/reply, beside the same runs without durability, in one runtime.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use exon::endpoint::{Endpoint, EndpointConfig, Handle};
use exon::proto::crypto::insecure_test_security;
use exon::rpc::{Failure, Request, Response};
use exon::NodeId;
use tokio::sync::Semaphore;

use crate::durable_table::{Context, Row};
use crate::endpoint::sender_ids;
use crate::harness::runtime;
use crate::message::payload;
use crate::report::Tally;
use crate::stats::Latencies;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
/// Messages per `send_batch` of the one-way runs.
const BATCH: usize = 256;
/// Batches awaiting their verdicts at once.
const WINDOW: usize = 16;
/// Driver shards of the sharded durable receiver (`exon_durable_2shards`).
const SHARDS: usize = 2;

/// An endpoint for `id` with `shards` driver shards, knowing `peers`; durable in `dir`.
async fn bind(id: NodeId, dir: Option<&Path>, peers: &[NodeId], shards: usize) -> Endpoint {
    let b = Endpoint::builder(id)
        .security(insecure_test_security(id, peers.iter().copied()))
        .config(
            EndpointConfig::default()
                .with_linger(Duration::from_millis(200))
                .with_shards(shards),
        );
    let b = match dir {
        Some(d) => b.durable(d),
        None => b,
    };
    b.bind("127.0.0.1:0").await.expect("bind")
}

async fn pair(dir: Option<&Path>) -> (Endpoint, Endpoint) {
    let a = bind(A, dir.map(|d| d.join("a")).as_deref(), &[B], 1).await;
    let b = bind(B, dir.map(|d| d.join("b")).as_deref(), &[A], 1).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    (a, b)
}

/// The shape of a one-way run: sender endpoints, each sending to one receiving endpoint of
/// `shards` driver shards (the senders' ids spread over its shards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub senders: usize,
    pub shards: usize,
}

/// One sender and a receiver of one shard.
const ONE: Shape = Shape {
    senders: 1,
    shards: 1,
};

/// The senders' endpoints and the receiver's (durable in `dir`: `a`, `a1`, ... and `b`).
async fn endpoints(dir: Option<&Path>, shape: Shape) -> (Vec<Endpoint>, Endpoint) {
    if shape == ONE {
        let (a, b) = pair(dir).await;
        return (vec![a], b);
    }
    let ids: Vec<NodeId> = sender_ids(shape.senders, shape.shards)
        .into_iter()
        .map(NodeId::from_const)
        .collect();
    let b = bind(B, dir.map(|d| d.join("b")).as_deref(), &ids, shape.shards).await;
    let mut senders = Vec::new();
    for (j, &id) in ids.iter().enumerate() {
        let at = dir.map(|d| d.join(format!("a{j}")));
        let a = bind(id, at.as_deref(), &[B], 1).await;
        a.add_peer(B, b.local_addr());
        b.add_peer(id, a.local_addr());
        senders.push(a);
    }
    (senders, b)
}

/// One-way for `secs`: each sender of `shape` sends batches of [`BATCH`] messages, [`WINDOW`]
/// batches awaiting their verdicts; a message counts once acknowledged (taken by the
/// receiving application, one task per shard, and, durable, its take on disk). `keyed`
/// (durable only): the batches are keyed (`send_keyed_batch`, the message number as its
/// key), as an outbox sends its rows.
async fn one_way(
    dir: Option<&Path>,
    size: usize,
    secs: f64,
    keyed: bool,
    shape: Shape,
) -> (u64, Duration) {
    let (senders, b) = endpoints(dir, shape).await;
    let (b, deliveries) = b.into_deliveries();
    let readers: Vec<_> = deliveries
        .into_iter()
        .map(|mut d| {
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(1024);
                while d.recv_many(&mut buf, 1024).await > 0 {
                    buf.clear();
                }
            })
        })
        .collect();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let sending: Vec<_> = senders
        .iter()
        .map(|a| tokio::spawn(send_for(a.handle(), size, end, keyed)))
        .collect();
    let mut acked = 0;
    for t in sending {
        acked += t.await.expect("sender");
    }
    let took = start.elapsed();
    for a in senders {
        a.close(Duration::from_secs(1)).await;
    }
    b.close(Duration::ZERO).await;
    for r in readers {
        r.abort();
    }
    (acked, took)
}

/// One sender's part of [`one_way`] until `end`: how many of its messages were
/// acknowledged.
async fn send_for(a: Handle, size: usize, end: Instant, keyed: bool) -> u64 {
    let window = Arc::new(Semaphore::new(WINDOW));
    let (mut seq, mut tasks) = (0u64, Vec::new());
    while Instant::now() < end {
        let permit = window.clone().acquire_owned().await.expect("open");
        let batch: Vec<_> = (seq..seq + BATCH as u64)
            .map(|s| payload(s, size))
            .collect();
        let r = if keyed {
            a.send_keyed_batch(B, seq + 1, batch).await
        } else {
            a.send_batch(B, batch).await
        };
        seq += BATCH as u64;
        let r = r.expect("send");
        tasks.push(tokio::spawn(async move {
            let v = r.await;
            drop(permit);
            v.acknowledged() as u64
        }));
    }
    let mut acked = 0;
    for t in tasks {
        acked += t.await.expect("verdicts");
    }
    acked
}

/// Request/reply for `secs` with `callers` callers, each waiting for its reply before its
/// next request (`Handle::call`; the server echoes with `Handle::serve`; both durable or
/// neither).
async fn rpc(
    dir: Option<&Path>,
    size: usize,
    secs: f64,
    callers: u64,
) -> (u64, Duration, Latencies) {
    let (a, b) = pair(dir).await;
    let a_handle = a.handle();
    let server = b.handle();
    let serving = tokio::spawn(async move {
        let echo =
            |req: Request| std::future::ready(Ok::<_, Failure>(Response::new(req.into_body())));
        server.serve(echo).await
    });
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let handle = a_handle.clone();
        tasks.push(tokio::spawn(async move {
            let (mut n, mut lat) = (0u64, Latencies::default());
            let caller = crate::calls::Caller::Exon(handle);
            let mut seq = c << 40;
            while Instant::now() < end {
                let t = Instant::now();
                crate::calls::call(&caller, B, seq, size).await;
                lat.record(t.elapsed());
                (n, seq) = (n + 1, seq + 1);
            }
            (n, lat)
        }));
    }
    let (mut n, mut lat) = (0, Latencies::default());
    for t in tasks {
        let (k, l) = t.await.expect("caller");
        n += k;
        lat.merge(&l);
    }
    let took = start.elapsed();
    a.close(Duration::from_secs(1)).await;
    b.close(Duration::from_secs(1)).await;
    serving.await.expect("server").expect("served");
    (n, took, lat)
}

/// The exon rows of the durable table: one-way and request/reply, durable and not.
pub fn rows(cx: &Context<'_>) -> Vec<Row> {
    let s = cx.settings;
    let rt = runtime(s.threads);
    let mut out = Vec::new();
    let secs = s.secs / s.rounds as f64;
    let (mut durable, mut memory) = (Tally::default(), Tally::default());
    let mut keyed = Tally::default();
    let (mut rpc_d, mut rpc_m) = (Tally::default(), Tally::default());
    let (mut lat_d, mut lat_m) = (Latencies::default(), Latencies::default());
    for round in 0..s.rounds {
        let dir = cx.dir.join(format!("exon-{round}"));
        let (n, t) = rt.block_on(one_way(Some(&dir), s.size, secs, false, ONE));
        durable.add(n, t);
        let (n, t) = rt.block_on(one_way(None, s.size, secs, false, ONE));
        memory.add(n, t);
        let dir = cx.dir.join(format!("exon-keyed-{round}"));
        let (n, t) = rt.block_on(one_way(Some(&dir), s.size, secs, true, ONE));
        keyed.add(n, t);
        let dir = cx.dir.join(format!("exon-rpc-{round}"));
        let (n, t, l) = rt.block_on(rpc(Some(&dir), s.size, secs, s.callers));
        rpc_d.add(n, t);
        lat_d.merge(&l);
        let (n, t, l) = rt.block_on(rpc(None, s.size, secs, s.callers));
        rpc_m.add(n, t);
        lat_m.merge(&l);
    }
    let what = format!("one-way, batches of {BATCH}, {WINDOW} awaiting verdicts");
    out.push(Row {
        name: "exon_durable",
        what: format!("{what}, durable endpoints (journal synced before each step)"),
        tally: durable,
        latency: None,
    });
    out.push(Row {
        name: "exon_durable_keyed",
        what: format!("{what}, keyed (send_keyed_batch), durable endpoints"),
        tally: keyed,
        latency: None,
    });
    out.push(Row {
        name: "exon_memory",
        what: format!("{what}, the same endpoints not durable"),
        tally: memory,
        latency: None,
    });
    let what = format!("request/reply, {} callers, echo server", s.callers);
    out.push(Row {
        name: "exon_durable_rpc",
        what: format!("{what}, both durable"),
        tally: rpc_d,
        latency: Some(lat_d),
    });
    out.push(Row {
        name: "exon_memory_rpc",
        what: format!("{what}, neither durable"),
        tally: rpc_m,
        latency: Some(lat_m),
    });
    out.extend(shard_rows(cx));
    out
}

/// Two durable senders into one durable receiver of [`SHARDS`] driver shards (one journal
/// each) and, for comparison, into one of a single shard, alternating in each round, on a
/// runtime of at least [`SHARDS`] worker threads (`--threads`, if more).
fn shard_rows(cx: &Context<'_>) -> Vec<Row> {
    let s = cx.settings;
    let rt = runtime(s.threads.max(SHARDS));
    let secs = s.secs / s.rounds as f64;
    let shapes = [1, SHARDS].map(|shards| Shape {
        senders: SHARDS,
        shards,
    });
    let mut tallies = [Tally::default(), Tally::default()];
    for round in 0..s.rounds {
        for (shape, tally) in shapes.iter().zip(&mut tallies) {
            let dir = cx.dir.join(format!("exon-shards-{}-{round}", shape.shards));
            let (n, t) = rt.block_on(one_way(Some(&dir), s.size, secs, false, *shape));
            tally.add(n, t);
        }
    }
    let [one, sharded] = tallies;
    let what = format!(
        "one-way as exon_durable, from {SHARDS} durable senders, {} worker threads",
        s.threads.max(SHARDS)
    );
    vec![
        Row {
            name: "exon_durable_2to1",
            what: format!("{what}, into a receiver of one shard"),
            tally: one,
            latency: None,
        },
        Row {
            name: "exon_durable_2shards",
            what: format!("{what}, into a receiver of {SHARDS} shards (a journal each)"),
            tally: sharded,
            latency: None,
        },
    ]
}
