//! Request/reply (`exon::rpc`) over real loopback UDP: calls and their replies, handler
//! errors and panics, errors that tell whether the request was executed, cancellation,
//! requests held until a server runs, and a server stopped and started again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use exon::endpoint::Endpoint;
use exon::rpc::{CallError, Failure, Request, Response};
use exon::NodeId;
use tokio::time::timeout;

use super::common::{cfg, security};

const S: NodeId = NodeId::from_const(1);
const C: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(30);

async fn start(id: NodeId) -> Endpoint {
    Endpoint::builder(id)
        .security(security(id))
        .config(cfg())
        .bind("127.0.0.1:0")
        .await
        .unwrap()
}

async fn pair() -> (Endpoint, Endpoint) {
    let (s, c) = (start(S).await, start(C).await);
    s.add_peer(C, c.local_addr());
    c.add_peer(S, s.local_addr());
    (s, c)
}

/// Squares a big-endian u64; "fail" fails, "panic" panics.
async fn square(req: Request) -> Result<Response, Failure> {
    match &req.body()[..] {
        b"fail" => Err(Failure::message("refused")),
        b"panic" => panic!("handler bug"),
        b => {
            let x = u64::from_be_bytes(b.try_into().map_err(|_| Failure::message("8 bytes"))?);
            Ok(Response::new((x * x).to_be_bytes().to_vec()))
        }
    }
}

#[tokio::test]
async fn many_concurrent_calls_each_get_their_own_reply() {
    let (s, c) = pair().await;
    let server = s.handle();
    tokio::spawn(async move { server.serve(square).await });
    let mut calls = Vec::new();
    for x in 0..300u64 {
        let h = c.handle();
        calls.push(tokio::spawn(async move {
            let r = h.call(S, x.to_be_bytes().to_vec()).await.unwrap();
            assert_eq!(u64::from_be_bytes(r[..].try_into().unwrap()), x * x);
        }));
    }
    for t in calls {
        timeout(LIMIT, t).await.unwrap().unwrap();
    }
    let stats = c.stats().await.unwrap();
    assert_eq!(stats.replies_discarded, 0);
    // The replies a server's turn made went to its core together (`Node::reply_many`),
    // each still answering its own call.
    let served = s.stats().await.unwrap().node;
    assert_eq!(served.sent, 300);
    assert!(
        served.sent_together > 0,
        "no reply went with another: {served:?}"
    );
}

#[tokio::test]
async fn handler_errors_and_panics_reach_the_caller_and_the_server_goes_on() {
    let (s, c) = pair().await;
    let server = s.handle();
    tokio::spawn(async move { server.serve(square).await });
    match timeout(LIMIT, c.call(S, "fail")).await.unwrap() {
        Err(CallError::Failed(f)) => assert_eq!(f.text(), Some("refused")),
        other => panic!("{other:?}"),
    }
    match timeout(LIMIT, c.call(S, "panic")).await.unwrap() {
        Err(e @ CallError::Panicked(_)) => {
            assert_eq!(e.executed(), Some(true));
            assert!(e.to_string().contains("handler bug"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let r = timeout(LIMIT, c.call(S, 3u64.to_be_bytes().to_vec()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r, Bytes::from(9u64.to_be_bytes().to_vec()));
}

#[tokio::test]
async fn plain_messages_and_calls_share_an_endpoint() {
    let (mut s, c) = pair().await;
    let server = s.handle();
    tokio::spawn(async move { server.serve(square).await });
    let receipt = c.send(S, "plain").await.unwrap();
    let r = timeout(LIMIT, c.call(S, 2u64.to_be_bytes().to_vec()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r[..], 4u64.to_be_bytes());
    let m = timeout(LIMIT, s.recv()).await.unwrap().unwrap();
    assert_eq!(
        m.payload, "plain",
        "the plain message, without its envelope"
    );
    timeout(LIMIT, receipt).await.unwrap().unwrap();
}

#[tokio::test]
async fn requests_wait_for_a_server_and_a_stopped_server_loses_none() {
    let (s, c) = pair().await;
    // Calls made before anyone serves wait in the server's endpoint.
    let mut calls = Vec::new();
    for x in 0..20u64 {
        let h = c.handle();
        calls.push(tokio::spawn(async move {
            h.call(S, x.to_be_bytes().to_vec()).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.stats().await.unwrap().requests_held, 20);
    // A server that never answers takes them, then stops: none is lost or acknowledged.
    let seen = Arc::new(AtomicUsize::new(0));
    let server = s.handle();
    let seen2 = seen.clone();
    let stuck = tokio::spawn(async move {
        server
            .serve(move |_req: Request| {
                seen2.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<Response, Failure>>()
            })
            .await
    });
    while seen.load(Ordering::SeqCst) < 20 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stuck.abort();
    let _ = stuck.await;
    // A new server answers every one of them, once.
    let server = s.handle();
    tokio::spawn(async move { server.serve(square).await });
    for (x, t) in calls.into_iter().enumerate() {
        let r = timeout(LIMIT, t).await.unwrap().unwrap().unwrap();
        assert_eq!(r[..], ((x * x) as u64).to_be_bytes());
    }
}

/// A second `serve` takes over: the first one's future ends (`Ok`) once every driver
/// shard hands requests to the second, and the calls after it are answered by the second.
#[tokio::test]
async fn a_second_server_takes_over_and_the_first_returns() {
    let (s, c) = pair().await;
    let first = s.handle();
    let first = tokio::spawn(async move {
        first
            .serve(|_req: Request| async { Ok::<_, Failure>(Response::new(&b"first"[..])) })
            .await
    });
    let r = timeout(LIMIT, c.handle().call(S, &b"x"[..])).await.unwrap();
    assert_eq!(r.unwrap()[..], b"first"[..]);
    let second = s.handle();
    tokio::spawn(async move {
        second
            .serve(|_req: Request| async { Ok::<_, Failure>(Response::new(&b"second"[..])) })
            .await
    });
    timeout(LIMIT, first).await.unwrap().unwrap().unwrap();
    for _ in 0..5 {
        let r = timeout(LIMIT, c.handle().call(S, &b"x"[..])).await.unwrap();
        assert_eq!(r.unwrap()[..], b"second"[..]);
    }
}

#[tokio::test]
async fn errors_say_whether_the_request_was_executed() {
    let (s, c) = pair().await;
    // Nobody serves: the request is delivered and held, never acknowledged.
    let e = c
        .call_within(S, "held", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert_eq!(e, CallError::InDoubt);
    assert_eq!(e.executed(), None);
    // A peer that was never reachable: no copy... (the request leaves, so: in doubt or
    // not executed, never a bare timeout).
    let unknown = NodeId::from_const(3);
    let e = c.call(unknown, "x").await.unwrap_err();
    assert!(matches!(e, CallError::Refused(_)), "{e:?}");
    assert_eq!(e.executed(), Some(false));
    // Executed, reply not back in time: a handler that answers after the deadline... the
    // request is acknowledged only with the reply, so a slow handler is in doubt.
    let server = s.handle();
    tokio::spawn(async move {
        server
            .serve(|_req: Request| async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok::<_, Failure>(Response::new("late"))
            })
            .await
    });
    let e = c
        .call_within(S, "slow", Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(e, CallError::InDoubt);
    // Its reply comes later, and is discarded and counted.
    let t = tokio::time::Instant::now();
    loop {
        let st = c.stats().await.unwrap();
        if st.replies_discarded >= 1 {
            break;
        }
        assert!(t.elapsed() < LIMIT, "the late reply is counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_dropped_call_discards_its_reply_and_the_request_still_runs_once() {
    let (s, c) = pair().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let server = s.handle();
    let r2 = runs.clone();
    tokio::spawn(async move {
        server
            .serve(move |req: Request| {
                r2.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok::<_, Failure>(Response::new(req.into_body()))
                }
            })
            .await
    });
    let h = c.handle();
    let call = tokio::spawn(async move { h.call(S, "dropped").await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    call.abort();
    let _ = call.await;
    let t = tokio::time::Instant::now();
    while c.stats().await.unwrap().replies_discarded < 1 {
        assert!(t.elapsed() < LIMIT);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[cfg(feature = "serde")]
#[tokio::test]
async fn typed_calls_and_typed_errors() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    enum Oops {
        Negative(i64),
    }
    let (s, c) = pair().await;
    let server = s.handle();
    tokio::spawn(async move {
        server
            .serve(|req: Request| async move {
                let x: i64 = req.decode()?;
                if x < 0 {
                    return Err(Failure::typed(&Oops::Negative(x)));
                }
                Ok(Response::typed(&(x * 2))?)
            })
            .await
    });
    let r: i64 = timeout(LIMIT, c.call_typed(S, &21i64))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r, 42);
    match timeout(LIMIT, c.call_typed::<_, i64>(S, &-5i64))
        .await
        .unwrap()
    {
        Err(CallError::Failed(f)) => assert_eq!(f.decode::<Oops>().unwrap(), Oops::Negative(-5)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn deadlines_racing_replies_end_every_call_truthfully() {
    let (s, c) = pair().await;
    let runs = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let server = s.handle();
    let r2 = runs.clone();
    tokio::spawn(async move {
        server
            .serve(move |req: Request| {
                let runs = r2.clone();
                async move {
                    let n = u64::from_be_bytes(req.body()[..].try_into().unwrap());
                    assert!(runs.lock().unwrap().insert(n), "request {n} ran twice");
                    // Handlers finish on both sides of the callers' 60 ms deadline.
                    tokio::time::sleep(Duration::from_millis(n % 120)).await;
                    Ok::<_, Failure>(Response::new(req.into_body()))
                }
            })
            .await
    });
    let n = 240u64;
    let mut calls = Vec::new();
    for i in 0..n {
        let h = c.handle();
        calls.push(tokio::spawn(async move {
            let r = h
                .call_within(S, i.to_be_bytes().to_vec(), Duration::from_millis(60))
                .await;
            (i, r)
        }));
    }
    let mut results = Vec::new();
    for t in calls {
        results.push(timeout(LIMIT, t).await.unwrap().unwrap());
    }
    // Every request that may have left reaches the server (none is lost, even those given
    // up): let them run. A call that says its request was certainly not executed (given up
    // before any copy left: possible when the machine is loaded) must never run.
    let never: Vec<u64> = results
        .iter()
        .filter(|(_, r)| matches!(r, Err(e) if e.executed() == Some(false)))
        .map(|(i, _)| *i)
        .collect();
    let t = tokio::time::Instant::now();
    while runs.lock().unwrap().len() < n as usize - never.len() {
        assert!(t.elapsed() < LIMIT, "every request runs once");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in &never {
        assert!(
            !runs.lock().unwrap().contains(i),
            "call {i} said not executed, but it ran"
        );
    }
    let mut late = 0;
    for (i, r) in &results {
        match r {
            Ok(b) => assert_eq!(b[..], i.to_be_bytes()),
            Err(e) if e.executed() == Some(false) => {}
            Err(_) => late += 1,
        }
    }
    assert!(
        late > 0 && late < n,
        "the deadline must race the replies: {late} of {n} late"
    );
    // Each late call's reply still comes, once, and is discarded and counted.
    let t = tokio::time::Instant::now();
    loop {
        let d = c.stats().await.unwrap().replies_discarded;
        assert!(d <= late, "{d} replies discarded for {late} late calls");
        if d == late {
            break;
        }
        assert!(t.elapsed() < LIMIT, "{d} of {late} late replies came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Durations past what the clock can represent, from the application: a call's wait, a
/// channel message's deadline, a close's timeout. Each means "no limit" (or as far as the
/// clock goes), where adding it to the clock panicked.
#[tokio::test]
async fn durations_beyond_the_clock_are_no_limit_and_no_panic() {
    let (s, c) = pair().await;
    let server = s.handle();
    tokio::spawn(async move { server.serve(square).await });
    let h = c.handle();
    let r = timeout(
        LIMIT,
        h.call_within(S, 3u64.to_be_bytes().to_vec(), Duration::MAX),
    )
    .await
    .expect("answered")
    .unwrap();
    assert_eq!(u64::from_be_bytes(r[..].try_into().unwrap()), 9);
    // The channel's message is acknowledged once the server's application takes it.
    let mut s = s;
    let reader = tokio::spawn(async move {
        let m = s.recv().await.expect("running");
        (s, m)
    });
    let ch = h.channel(S, 7).unwrap();
    let receipt = ch.send_within(vec![1u8; 16], Duration::MAX).await.unwrap();
    let (s, m) = timeout(LIMIT, reader).await.expect("delivered").unwrap();
    assert_eq!(&m.payload[..], &[1u8; 16]);
    timeout(LIMIT, receipt)
        .await
        .expect("settled")
        .expect("acknowledged");
    timeout(LIMIT, c.close(Duration::MAX))
        .await
        .expect("closed");
    s.close(Duration::ZERO).await;
}
