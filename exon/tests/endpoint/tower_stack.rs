//! tower over exon RPC (`exon::rpc::Client`) on loopback UDP: a timeout, concurrency-limit,
//! buffer and power-of-two-choices balance stack over two servers, and `poll_ready` as the
//! destination queue's back-pressure.
//!
//! Why no `tower::retry` layer: a retry is a *new* request, which the server executes
//! again, so a retry after a timeout or an in-doubt call can run a request twice. exon's
//! [`CallError::executed`] says when a retry is safe (`Some(false)`: certainly not
//! executed, and never will be); a retry policy would have to see the `CallError` under
//! tower's boxed errors and retry only then, and a timeout layer above it hides exactly that
//! (its `Elapsed` says nothing of the request). So the stack below has no retry, and its
//! timeout is a backstop set well above the calls' own deadline ([`Client::with_deadline`]),
//! which ends a call with an error that tells the truth.

use std::future::poll_fn;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::Config;
use exon::rpc::{CallError, Client, Failure, Request, Response};
use exon::NodeId;
use tokio::time::timeout;
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};
use tower::util::BoxCloneService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

const S1: NodeId = NodeId::from_const(1);
const S2: NodeId = NodeId::from_const(2);
const C: NodeId = NodeId::from_const(3);
const LIMIT: Duration = Duration::from_secs(30);

fn cfg(conf: Config) -> EndpointConfig {
    EndpointConfig::default().with_protocol(conf)
}

fn protocol() -> Config {
    let mut conf = Config::default();
    conf.timers.initial_rtt = Duration::from_millis(20);
    conf.timers.probe_interval = Duration::from_millis(50);
    conf.timers.max_probe_interval = Duration::from_millis(200);
    conf.timers.idle_timeout = Duration::from_millis(300);
    conf
}

async fn start(id: NodeId, conf: Config) -> Endpoint {
    let security = exon::proto::crypto::insecure_test_security(id, (1..4).map(NodeId::from_const));
    Endpoint::builder(id)
        .security(security)
        .config(cfg(conf))
        .bind("127.0.0.1:0")
        .await
        .unwrap()
}

/// What the servers saw: executions per server, and requests in their handlers at once
/// (over both servers), the most of which is kept.
#[derive(Default)]
struct Seen {
    runs: [AtomicUsize; 2],
    now: AtomicUsize,
    most: AtomicUsize,
}

/// The answer to request `x`.
fn answer(x: u64) -> u64 {
    x.wrapping_mul(x) ^ 0x5eed
}

/// Serves on `ep` as server `i`: counts the run, holds the request a while (so that calls
/// pile up to the client's limit), answers `answer(x)`.
fn serve(ep: &Endpoint, i: usize, seen: Arc<Seen>) {
    let h = ep.handle();
    tokio::spawn(async move {
        h.serve(move |req: Request| {
            let seen = seen.clone();
            async move {
                seen.runs[i].fetch_add(1, Ordering::SeqCst);
                let now = seen.now.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most.fetch_max(now, Ordering::SeqCst);
                let x = u64::from_be_bytes(
                    req.body()[..]
                        .try_into()
                        .map_err(|_| Failure::message("8 bytes"))?,
                );
                tokio::time::sleep(Duration::from_millis(2 + x % 7)).await;
                seen.now.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Failure>(Response::new(answer(x).to_be_bytes().to_vec()))
            }
        })
        .await
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tower_stack_balances_limits_and_runs_each_call_once() {
    const CALLS: u64 = 600;
    const CONCURRENCY: usize = 8;
    let (s1, s2, c) = (
        start(S1, protocol()).await,
        start(S2, protocol()).await,
        start(C, protocol()).await,
    );
    for (id, s) in [(S1, &s1), (S2, &s2)] {
        s.add_peer(C, c.local_addr());
        c.add_peer(id, s.local_addr());
    }
    let seen = Arc::new(Seen::default());
    serve(&s1, 0, seen.clone());
    serve(&s2, 1, seen.clone());

    let client = |to| {
        PendingRequests::new(
            c.handle().client(to).with_deadline(LIMIT),
            CompleteOnResponse::default(),
        )
    };
    let balance = Balance::new(ServiceList::new(vec![client(S1), client(S2)]));
    // The buffer makes the stack cloneable (one worker drives the balancer); the limit,
    // under it, holds every clone's calls together to CONCURRENCY; the timeout is a
    // backstop (see the module's comment).
    let stack = ServiceBuilder::new()
        .buffer(64)
        .timeout(2 * LIMIT)
        .concurrency_limit(CONCURRENCY)
        .service(balance);
    // Boxed, so that the tasks below hold a future whose `Send` is plain to see (the
    // compiler cannot prove it of the buffer's own future inside `tokio::spawn`).
    let stack: BoxCloneService<Bytes, Bytes, BoxError> = BoxCloneService::new(stack);

    let mut calls = Vec::new();
    for x in 0..CALLS {
        let svc = stack.clone();
        calls.push(tokio::spawn(async move {
            let body = Bytes::from(x.to_be_bytes().to_vec());
            (x, svc.oneshot(body).await)
        }));
    }
    for t in calls {
        let (x, r) = timeout(3 * LIMIT, t).await.unwrap().unwrap();
        let r = r.unwrap_or_else(|e: BoxError| panic!("call {x}: {e}"));
        assert_eq!(r[..], answer(x).to_be_bytes(), "the answer to call {x}");
    }

    let runs = [0, 1].map(|i| seen.runs[i].load(Ordering::SeqCst));
    let most = seen.most.load(Ordering::SeqCst);
    eprintln!("runs per server {runs:?}, at most {most} in handlers at once");
    assert_eq!(
        runs[0] + runs[1],
        CALLS as usize,
        "each call ran exactly once"
    );
    for (i, n) in runs.iter().enumerate() {
        assert!(
            *n >= CALLS as usize / 5,
            "server {i} got {n} of {CALLS} calls: not balanced"
        );
    }
    assert!(
        most <= CONCURRENCY,
        "{most} requests in handlers at once, over the limit {CONCURRENCY}"
    );
    // The limit was reached, so the check above could have failed.
    assert!(most >= CONCURRENCY / 2, "only {most} at once: no load");
    assert_eq!(c.stats().await.unwrap().replies_discarded, 0);
}

/// `Client::poll_ready`, polled once.
async fn ready_now(client: &mut Client) -> Poll<Result<(), CallError>> {
    poll_fn(|cx| Poll::Ready(client.poll_ready(cx))).await
}

#[tokio::test]
async fn poll_ready_is_pending_while_the_destination_queue_is_full() {
    // The server runs no handler yet: the requests it gets are held there, unacknowledged,
    // so their slots stay taken; the client holds at most four slots and queues two
    // messages more, and then its queue is full.
    let server_conf = protocol();
    let mut client_conf = protocol();
    client_conf.flow.window = 4;
    client_conf.flow.envelope_target = 4;
    client_conf.flow.envelope_low = 2;
    client_conf.limits.max_queued_per_peer = 2;
    let (s, c) = (start(S1, server_conf).await, start(C, client_conf).await);
    s.add_peer(C, c.local_addr());
    c.add_peer(S1, s.local_addr());
    let mut client = c.handle().client(S1).with_deadline(LIMIT);

    let mut calls = Vec::new();
    let t = tokio::time::Instant::now();
    loop {
        match ready_now(&mut client).await {
            Poll::Ready(r) => r.unwrap(),
            Poll::Pending => break,
        }
        assert!(calls.len() < 100, "the queue never filled");
        assert!(t.elapsed() < LIMIT, "the queue never filled");
        let x = calls.len() as u64;
        let call = client.call(Bytes::from(x.to_be_bytes().to_vec()));
        calls.push(tokio::spawn(call));
        // Let the call reach the driver, and the driver the core.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queued = calls.len();
    eprintln!("queue full after {queued} calls");
    // Two queued (four more in flight once slots came): no more.
    assert!((2..=6).contains(&queued), "queue full after {queued} calls");
    // Still full while nobody answers (and a waiter is woken only by room).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ready_now(&mut client).await.is_pending());
    let ready = tokio::spawn(async move {
        let r = poll_fn(|cx| client.poll_ready(cx)).await;
        (client, r)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!ready.is_finished(), "ready with nobody answering");

    // The server starts answering: the queue drains, and the client is ready again.
    let h = s.handle();
    tokio::spawn(async move {
        h.serve(|req: Request| async move {
            let x = u64::from_be_bytes(req.body()[..].try_into().unwrap());
            Ok::<_, Failure>(Response::new(answer(x).to_be_bytes().to_vec()))
        })
        .await
    });
    let (mut client, r) = timeout(LIMIT, ready).await.unwrap().unwrap();
    r.unwrap();
    let r = timeout(LIMIT, client.call(Bytes::from(7u64.to_be_bytes().to_vec())))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r[..], answer(7).to_be_bytes());
    let mut bad = Vec::new();
    for (x, t) in calls.into_iter().enumerate() {
        let r = timeout(LIMIT, t).await.unwrap().unwrap();
        match r {
            Ok(r) => assert_eq!(
                r[..],
                answer(x as u64).to_be_bytes(),
                "the answer to call {x}"
            ),
            Err(e) => bad.push((x, e)),
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(client.in_flight(), 0);
}
