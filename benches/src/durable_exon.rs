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

use crate::durable_table::{Context, JournalCost, Row};
use crate::endpoint::sender_ids;
use crate::harness::runtime;
use crate::message::payload;
use crate::report::Tally;
use crate::stats::Latencies;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
/// Messages per `send_batch` of the one-way runs, and the smaller batch of the `_b16` rows.
const BATCH: usize = 256;
const SMALL_BATCH: usize = 16;
/// Batches awaiting their verdicts at once.
const WINDOW: usize = 16;
/// Driver shards of the sharded durable receiver (`exon_durable_2shards`).
const SHARDS: usize = 2;

/// An endpoint for `id` with `shards` driver shards, knowing `peers`; durable in `dir`.
///
/// `EXON_BENCH_EARLY_TOKENS=0` turns `FlowConfig::early_tokens` off (every token waits
/// for its records): the same binary measures the syncs in series and overlapping.
async fn bind(id: NodeId, dir: Option<&Path>, peers: &[NodeId], shards: usize) -> Endpoint {
    let mut cfg = EndpointConfig::default()
        .with_linger(Duration::from_millis(200))
        .with_shards(shards);
    if std::env::var("EXON_BENCH_EARLY_TOKENS").is_ok_and(|v| v == "0") {
        cfg.protocol.flow.early_tokens = false;
    }
    let b = Endpoint::builder(id)
        .security(insecure_test_security(id, peers.iter().copied()))
        .config(cfg);
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

/// How a one-way run sends: messages per `send_batch`, and whether keyed.
#[derive(Debug, Clone, Copy)]
struct Sending {
    batch: usize,
    keyed: bool,
}

/// Plain batches of [`BATCH`].
const PLAIN: Sending = Sending {
    batch: BATCH,
    keyed: false,
};

/// What the journals of `endpoints` wrote, for `messages`.
async fn journal_cost(endpoints: &[Handle], messages: u64) -> JournalCost {
    let mut c = JournalCost {
        messages,
        ..JournalCost::default()
    };
    for e in endpoints {
        if let Some(st) = e.stats().await {
            c.bytes += st.journal_written_bytes;
            c.records += st.journal_writes;
            c.commits += st.journal_commits;
        }
    }
    c
}

/// One-way for `secs`: each sender of `shape` sends batches of `how.batch` messages,
/// [`WINDOW`] batches awaiting their verdicts; a message counts once acknowledged (taken by
/// the receiving application, one task per shard, and, durable, its take on disk).
/// `how.keyed` (durable only): the batches are keyed (`send_keyed_batch`, the message
/// number as its key), as an outbox sends its rows. Also says what the journals wrote.
async fn one_way(
    dir: Option<&Path>,
    size: usize,
    secs: f64,
    how: Sending,
    shape: Shape,
) -> (u64, Duration, JournalCost) {
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
        .map(|a| tokio::spawn(send_for(a.handle(), size, end, how)))
        .collect();
    let mut acked = 0;
    for t in sending {
        acked += t.await.expect("sender");
    }
    let took = start.elapsed();
    let mut all: Vec<Handle> = senders.iter().map(|a| a.handle()).collect();
    all.push(b.clone());
    let cost = journal_cost(&all, acked).await;
    for a in senders {
        a.close(Duration::from_secs(1)).await;
    }
    b.close(Duration::ZERO).await;
    for r in readers {
        r.abort();
    }
    (acked, took, cost)
}

/// One sender's part of [`one_way`] until `end`: how many of its messages were
/// acknowledged.
async fn send_for(a: Handle, size: usize, end: Instant, how: Sending) -> u64 {
    let Sending { batch, keyed } = how;
    let window = Arc::new(Semaphore::new(WINDOW));
    let (mut seq, mut tasks) = (0u64, Vec::new());
    while Instant::now() < end {
        let permit = window.clone().acquire_owned().await.expect("open");
        let msgs: Vec<_> = (seq..seq + batch as u64)
            .map(|s| payload(s, size))
            .collect();
        let r = if keyed {
            a.send_keyed_batch(B, seq + 1, msgs).await
        } else {
            a.send_batch(B, msgs).await
        };
        seq += batch as u64;
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
) -> (u64, Duration, Latencies, JournalCost) {
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
    let cost = journal_cost(&[a.handle(), b.handle()], n).await;
    a.close(Duration::from_secs(1)).await;
    b.close(Duration::from_secs(1)).await;
    serving.await.expect("server").expect("served");
    (n, took, lat, cost)
}

/// A row's figures over the rounds.
#[derive(Default)]
struct Acc {
    tally: Tally,
    latency: Option<Latencies>,
    journal: JournalCost,
}

impl Acc {
    fn add(&mut self, (n, t, j): (u64, Duration, JournalCost)) {
        self.tally.add(n, t);
        self.journal.add(j);
    }

    fn add_rpc(&mut self, (n, t, l, j): (u64, Duration, Latencies, JournalCost)) {
        self.add((n, t, j));
        self.latency
            .get_or_insert_with(Latencies::default)
            .merge(&l);
    }

    fn row(self, name: &'static str, what: String, durable: bool) -> Row {
        Row {
            name,
            what,
            tally: self.tally,
            latency: self.latency,
            journal: durable.then_some(self.journal),
        }
    }
}

/// The exon rows of the durable table: one-way (batches of `BATCH` and of
/// `SMALL_BATCH`) and request/reply, durable and not.
pub fn rows(cx: &Context<'_>) -> Vec<Row> {
    let s = cx.settings;
    let rt = runtime(s.threads);
    let secs = s.secs / s.rounds as f64;
    let small = Sending {
        batch: SMALL_BATCH,
        keyed: false,
    };
    let keyed = Sending {
        batch: BATCH,
        keyed: true,
    };
    let mut acc: [Acc; 7] = Default::default();
    for round in 0..s.rounds {
        let dir = |what: &str| cx.dir.join(format!("exon-{what}-{round}"));
        let d = dir("one-way");
        acc[0].add(rt.block_on(one_way(Some(&d), s.size, secs, PLAIN, ONE)));
        acc[1].add(rt.block_on(one_way(None, s.size, secs, PLAIN, ONE)));
        let d = dir("keyed");
        acc[2].add(rt.block_on(one_way(Some(&d), s.size, secs, keyed, ONE)));
        let d = dir("small");
        acc[3].add(rt.block_on(one_way(Some(&d), s.size, secs, small, ONE)));
        acc[4].add(rt.block_on(one_way(None, s.size, secs, small, ONE)));
        let d = dir("rpc");
        acc[5].add_rpc(rt.block_on(rpc(Some(&d), s.size, secs, s.callers)));
        acc[6].add_rpc(rt.block_on(rpc(None, s.size, secs, s.callers)));
    }
    let [durable, memory, keyed, small_d, small_m, rpc_d, rpc_m] = acc;
    let what = |b: usize| format!("one-way, batches of {b}, {WINDOW} awaiting verdicts");
    let rpc_what = format!("request/reply, {} callers, echo server", s.callers);
    let mut out = vec![
        durable.row(
            "exon_durable",
            format!(
                "{}, durable endpoints (journal synced before each step)",
                what(BATCH)
            ),
            true,
        ),
        keyed.row(
            "exon_durable_keyed",
            format!(
                "{}, keyed (send_keyed_batch), durable endpoints",
                what(BATCH)
            ),
            true,
        ),
        memory.row(
            "exon_memory",
            format!("{}, the same endpoints not durable", what(BATCH)),
            false,
        ),
        small_d.row(
            "exon_durable_b16",
            format!("{}, durable endpoints", what(SMALL_BATCH)),
            true,
        ),
        small_m.row(
            "exon_memory_b16",
            format!("{}, not durable", what(SMALL_BATCH)),
            false,
        ),
        rpc_d.row(
            "exon_durable_rpc",
            format!("{rpc_what}, both durable"),
            true,
        ),
        rpc_m.row(
            "exon_memory_rpc",
            format!("{rpc_what}, neither durable"),
            false,
        ),
    ];
    out.extend(shard_rows(cx));
    out.push(crate::durable_engine::row(cx));
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
    let mut accs: [Acc; 2] = Default::default();
    for round in 0..s.rounds {
        for (shape, acc) in shapes.iter().zip(&mut accs) {
            let dir = cx.dir.join(format!("exon-shards-{}-{round}", shape.shards));
            acc.add(rt.block_on(one_way(Some(&dir), s.size, secs, PLAIN, *shape)));
        }
    }
    let [one, sharded] = accs;
    let what = format!(
        "one-way as exon_durable, from {SHARDS} durable senders, {} worker threads",
        s.threads.max(SHARDS)
    );
    vec![
        one.row(
            "exon_durable_2to1",
            format!("{what}, into a receiver of one shard"),
            true,
        ),
        sharded.row(
            "exon_durable_2shards",
            format!("{what}, into a receiver of {SHARDS} shards (a journal each)"),
            true,
        ),
    ]
}
