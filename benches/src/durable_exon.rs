//! Exon in `compare`'s durable section: durable endpoints (`Builder::durable`, every message
//! on disk before it leaves, every delivery and take on disk before it is acknowledged)
//! one-way and request/reply, beside the same runs without durability, in one runtime.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::crypto::insecure_test_security;
use exon::rpc::{Failure, Request, Response};
use exon::NodeId;
use tokio::sync::Semaphore;

use crate::durable_table::{Context, Row};
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

async fn bind(id: NodeId, dir: Option<&Path>) -> Endpoint {
    let peer = NodeId::new(3 - id.get()).expect("id");
    let b = Endpoint::builder(id)
        .security(insecure_test_security(id, [peer]))
        .config(EndpointConfig::default().with_linger(Duration::from_millis(200)));
    let b = match dir {
        Some(d) => b.durable(d),
        None => b,
    };
    b.bind("127.0.0.1:0").await.expect("bind")
}

async fn pair(dir: Option<&Path>) -> (Endpoint, Endpoint) {
    let a = bind(A, dir.map(|d| d.join("a")).as_deref()).await;
    let b = bind(B, dir.map(|d| d.join("b")).as_deref()).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    (a, b)
}

/// One-way for `secs`: batches of [`BATCH`] messages, [`WINDOW`] batches awaiting their
/// verdicts; a message counts once acknowledged (taken by the receiving application, and,
/// durable, its take on disk). `keyed` (durable only): the batches are keyed
/// (`send_keyed_batch`, the message number as its key), as an outbox sends its rows.
async fn one_way(dir: Option<&Path>, size: usize, secs: f64, keyed: bool) -> (u64, Duration) {
    let (a, mut b) = pair(dir).await;
    let reader = tokio::spawn(async move {
        let mut buf = Vec::with_capacity(1024);
        while b.recv_many(&mut buf, 1024).await > 0 {
            buf.clear();
        }
    });
    let window = Arc::new(Semaphore::new(WINDOW));
    let (mut seq, mut tasks) = (0u64, Vec::new());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
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
    let took = start.elapsed();
    a.close(Duration::from_secs(1)).await;
    reader.abort();
    (acked, took)
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
        let (n, t) = rt.block_on(one_way(Some(&dir), s.size, secs, false));
        durable.add(n, t);
        let (n, t) = rt.block_on(one_way(None, s.size, secs, false));
        memory.add(n, t);
        let dir = cx.dir.join(format!("exon-keyed-{round}"));
        let (n, t) = rt.block_on(one_way(Some(&dir), s.size, secs, true));
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
    out
}
