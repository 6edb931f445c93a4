//! Calls that survive their caller (issue 44, item 3): a durable caller stopped with calls
//! in flight and restarted on its directory gets them back from `take_recovered_calls`,
//! and each one's reply reaches it exactly once, the server having run each request once.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exon::endpoint::Endpoint;
use exon::rpc::{Failure, Request, Response};
use exon::NodeId;
use tokio::time::timeout;

use super::common::{bind_durable, cfg, security};

const S: NodeId = NodeId::from_const(1);
const C: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(30);

async fn durable(id: NodeId, dir: &Path, recover_calls: bool) -> Endpoint {
    let mut rules = exon::proto::Rules::ALL;
    rules.recover_calls = recover_calls;
    let c = cfg()
        .with_rules(rules)
        .with_call_deadline(Duration::from_secs(3));
    bind_durable(id, dir, c, security(id)).await.unwrap()
}

/// How often the server's handler ran each request, and how many began.
#[derive(Default)]
pub(super) struct Runs {
    pub(super) began: AtomicUsize,
    pub(super) done: Mutex<HashMap<u64, u32>>,
}

/// Serves `x -> x * x` slowly, counting runs.
pub(super) fn serve_slowly(server: &Endpoint, runs: Arc<Runs>) {
    let h = server.handle();
    tokio::spawn(async move {
        h.serve(move |req: Request| {
            let runs = runs.clone();
            async move {
                runs.began.fetch_add(1, Ordering::SeqCst);
                let x = u64::from_be_bytes(req.body()[..].try_into().unwrap());
                tokio::time::sleep(Duration::from_millis(500)).await;
                *runs.done.lock().unwrap().entry(x).or_default() += 1;
                Ok::<_, Failure>(Response::new((x * x).to_be_bytes().to_vec()))
            }
        })
        .await
    });
}

/// With the rule `recover_calls` on, every recovered call gets its reply, once; off, the
/// replies find no call and are discarded (the calls end without them).
#[tokio::test]
async fn a_durable_caller_restarted_mid_call_gets_every_reply_once() {
    for rule in [true, false] {
        let (sdir, cdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let n = 40u64;
        let server = durable(S, sdir.path(), true).await;
        let caller = durable(C, cdir.path(), rule).await;
        server.add_peer(C, caller.local_addr());
        caller.add_peer(S, server.local_addr());
        let runs = Arc::new(Runs::default());
        serve_slowly(&server, runs.clone());
        let old_replies = Arc::new(AtomicUsize::new(0));
        for x in 0..n {
            let (h, seen) = (caller.handle(), old_replies.clone());
            tokio::spawn(async move {
                if h.call(S, x.to_be_bytes().to_vec()).await.is_ok() {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        // Every request is at the server, inside its slow handler: the caller dies.
        timeout(LIMIT, async {
            while runs.began.load(Ordering::SeqCst) < n as usize {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("every request reaches the handler");
        drop(caller.close(Duration::ZERO).await);
        drop(caller);
        let mut caller = durable(C, cdir.path(), rule).await;
        caller.add_peer(S, server.local_addr());
        server.add_peer(C, caller.local_addr());
        let calls = caller.take_recovered_calls();
        assert_eq!(calls.len() as u64, n, "every stored request is recovered");
        assert!(caller.take_recovered().is_empty(), "no plain message");
        let mut ids = HashMap::new();
        let mut replies = Vec::new();
        for call in calls {
            assert_eq!(call.to, S);
            assert!(!call.redelivery, "no reply had come");
            let x = u64::from_be_bytes(call.request[..].try_into().unwrap());
            assert!(ids.insert(call.call_id, x).is_none(), "distinct call ids");
            replies.push(tokio::spawn(async move { (x, call.reply.await) }));
        }
        let mut got = 0;
        for r in replies {
            let (x, reply) = timeout(LIMIT, r).await.unwrap().unwrap();
            match reply {
                Ok(r) => {
                    assert!(rule, "rule off: a reply reached a call");
                    assert_eq!(u64::from_be_bytes(r[..].try_into().unwrap()), x * x);
                    got += 1;
                }
                Err(e) => {
                    assert!(!rule, "rule on: call {x} ended {e:?}");
                    assert_ne!(e.executed(), Some(false), "{e:?}");
                }
            }
        }
        // A new call takes an id none of the recovered calls had, and is answered.
        let y = caller
            .call(S, 1000u64.to_be_bytes().to_vec())
            .await
            .unwrap();
        assert_eq!(u64::from_be_bytes(y[..].try_into().unwrap()), 1_000_000);
        let stats = caller.stats().await.unwrap();
        assert_eq!(
            old_replies.load(Ordering::SeqCst),
            0,
            "no reply before the restart"
        );
        if rule {
            assert_eq!(got, n, "every recovered call got its reply");
            assert_eq!(stats.replies_discarded, 0, "no reply discarded");
        } else {
            assert_eq!(
                stats.replies_discarded, n,
                "rule off: every reply discarded"
            );
        }
        let done = runs.done.lock().unwrap().clone();
        assert_eq!(done.len() as u64, n + 1);
        assert!(
            done.values().all(|&k| k == 1),
            "each request ran once: {done:?}"
        );
        drop(caller.close(Duration::ZERO).await);
        drop(server.close(Duration::ZERO).await);
    }
}

/// A plaintext socket that loses every datagram it sends that grants slots (a SLOTS frame
/// with n > 0): its peer's messages to it (a server's replies) cannot leave, while its own
/// go and are acknowledged.
struct NoGrants {
    socket: tokio::net::UdpSocket,
}

impl NoGrants {
    async fn bind() -> Arc<NoGrants> {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        Arc::new(NoGrants { socket })
    }

    fn grants(buf: &[u8]) -> bool {
        exon::proto::Packet::decode(&bytes::Bytes::copy_from_slice(buf)).is_ok_and(|p| {
            p.frames
                .iter()
                .any(|f| matches!(f, exon::proto::Frame::Slots { n, .. } if *n > 0))
        })
    }
}

impl exon::endpoint::DatagramSocket for NoGrants {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> std::io::Result<usize> {
        if NoGrants::grants(buf) {
            return Ok(buf.len());
        }
        self.socket.send_to(buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
        self.socket.recv_from(buf).await
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }
}

/// A durable plaintext endpoint (its datagrams readable by [`NoGrants`]) with the rule
/// `hold_call_requests` as `hold`, over `socket` or a plain one.
async fn plaintext(id: NodeId, dir: &Path, hold: bool, socket: Option<Arc<NoGrants>>) -> Endpoint {
    let mut rules = exon::proto::Rules::ALL;
    rules.hold_call_requests = hold;
    let c = cfg()
        .with_rules(rules)
        .with_call_deadline(Duration::from_secs(10));
    let b = Endpoint::builder(id)
        .security(exon::proto::Security::InsecurePlaintext)
        .config(c)
        .durable(dir);
    match socket {
        Some(s) => b.with_socket(s).unwrap(),
        None => b.bind("127.0.0.1:0").await.unwrap(),
    }
}

/// Issue 44, item 3: a durable caller whose requests the server acknowledged (executed,
/// replies on their way) stops before the replies come, and is started again on its
/// directory: with the rule `hold_call_requests`, its journal kept the requests past their
/// acknowledgement, the calls are recovered (acknowledged, not sent again) and each reply
/// reaches its call once, none discarded. Off, nothing is recovered and every reply is
/// discarded.
#[tokio::test]
async fn a_call_acknowledged_before_its_caller_restarts_gets_its_reply_once() {
    for hold in [true, false] {
        let (sdir, cdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let n = 5u64;
        let server = plaintext(S, sdir.path(), true, None).await;
        let socket = NoGrants::bind().await;
        let caller = plaintext(C, cdir.path(), hold, Some(socket.clone())).await;
        server.add_peer(C, caller.local_addr());
        caller.add_peer(S, server.local_addr());
        let runs = Arc::new(Runs::default());
        let h = server.handle();
        let counted = runs.clone();
        tokio::spawn(async move {
            h.serve(move |req: Request| {
                let runs = counted.clone();
                async move {
                    runs.began.fetch_add(1, Ordering::SeqCst);
                    let x = u64::from_be_bytes(req.body()[..].try_into().unwrap());
                    *runs.done.lock().unwrap().entry(x).or_default() += 1;
                    Ok::<_, Failure>(Response::new((x * x).to_be_bytes().to_vec()))
                }
            })
            .await
        });
        let old_replies = Arc::new(AtomicUsize::new(0));
        let mut old_calls = Vec::new();
        for x in 0..n {
            let (h, seen) = (caller.handle(), old_replies.clone());
            old_calls.push(tokio::spawn(async move {
                if h.call(S, x.to_be_bytes().to_vec()).await.is_ok() {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        // Every request acknowledged (executed, its reply queued at the server, which
        // cannot send it): the verdicts stored, the caller dies.
        timeout(LIMIT, async {
            while caller.stats().await.unwrap().node.acknowledged < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("every request acknowledged");
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(caller.close(Duration::ZERO).await);
        drop(caller);
        // The process is gone: its calls with it (their endpoint stored nothing more).
        for c in old_calls {
            c.abort();
        }
        assert_eq!(old_replies.load(Ordering::SeqCst), 0, "no reply came");
        let mut caller = plaintext(C, cdir.path(), hold, None).await;
        caller.add_peer(S, server.local_addr());
        server.add_peer(C, caller.local_addr());
        let calls = caller.take_recovered_calls();
        assert!(caller.take_recovered().is_empty(), "no plain message");
        if hold {
            assert_eq!(calls.len() as u64, n, "every call waiting for its reply");
        } else {
            assert!(calls.is_empty(), "rule off: nothing held");
        }
        let mut replies = Vec::new();
        for call in calls {
            assert!(call.acknowledged, "executed before the restart");
            assert!(!call.redelivery, "no reply had come");
            let x = u64::from_be_bytes(call.request[..].try_into().unwrap());
            replies.push(tokio::spawn(async move { (x, call.reply.await) }));
        }
        for r in replies {
            let (x, reply) = timeout(LIMIT, r).await.unwrap().unwrap();
            let r = reply.unwrap_or_else(|e| panic!("call {x}: {e:?}"));
            assert_eq!(u64::from_be_bytes(r[..].try_into().unwrap()), x * x);
        }
        // Rule off: the replies come, and find no call.
        let want = if hold { 0 } else { n };
        let discarded = timeout(LIMIT, async {
            loop {
                let d = caller.stats().await.unwrap().replies_discarded;
                if d >= want {
                    // A little longer: a reply discarded late would show.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return caller.stats().await.unwrap().replies_discarded;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the replies come");
        assert_eq!(discarded, want, "hold {hold}: replies discarded");
        let done = runs.done.lock().unwrap().clone();
        assert_eq!(done.len() as u64, n);
        assert!(done.values().all(|&k| k == 1), "each ran once: {done:?}");
        assert_eq!(runs.began.load(Ordering::SeqCst) as u64, n);
        drop(caller.close(Duration::ZERO).await);
        drop(server.close(Duration::ZERO).await);
    }
}

/// `Handle::call_acked`: a durable caller stopped after its call got its reply and before
/// its application acknowledged the outcome (had stored what the reply did) gets the call
/// back, acknowledged, its reply handed out again and flagged; once acknowledged, a restart
/// brings nothing back.
#[tokio::test]
async fn a_call_outcome_not_acknowledged_comes_back_flagged_after_a_restart() {
    let (sdir, cdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let server = durable(S, sdir.path(), true).await;
    let caller = durable(C, cdir.path(), true).await;
    server.add_peer(C, caller.local_addr());
    caller.add_peer(S, server.local_addr());
    let runs = Arc::new(Runs::default());
    serve_slowly(&server, runs.clone());
    let outcome = caller.call_acked(S, 7u64.to_be_bytes().to_vec()).await;
    let reply = outcome.result().as_ref().expect("the reply").clone();
    assert_eq!(u64::from_be_bytes(reply[..].try_into().unwrap()), 49);
    // The process stops before the application acknowledged the outcome.
    drop(caller.close(Duration::ZERO).await);
    drop(caller);
    drop(outcome);
    let mut caller = durable(C, cdir.path(), true).await;
    caller.add_peer(S, server.local_addr());
    server.add_peer(C, caller.local_addr());
    let mut calls = caller.take_recovered_calls();
    assert_eq!(calls.len(), 1, "the call comes back");
    let call = calls.pop().unwrap();
    assert!(call.acknowledged && call.redelivery, "{call:?}");
    let again = timeout(LIMIT, call.reply.acked())
        .await
        .expect("the reply, handed out again");
    assert_eq!(again.result().as_ref().unwrap(), &reply);
    assert_eq!(again.ack().unwrap(), reply);
    // Acknowledged: its take and release stored (a graceful close waits for the journal).
    drop(caller.close(Duration::from_secs(5)).await);
    drop(caller);
    let mut caller = durable(C, cdir.path(), true).await;
    assert!(caller.take_recovered_calls().is_empty(), "nothing left");
    let stats = caller.stats().await.unwrap();
    assert_eq!(stats.replies_discarded, 0);
    assert_eq!(runs.done.lock().unwrap().get(&7), Some(&1), "run once");
    drop(caller.close(Duration::ZERO).await);
    drop(server.close(Duration::ZERO).await);
}

/// Calls `S` with each of `xs` at once; their ends in order.
async fn call_all(
    caller: &Endpoint,
    xs: std::ops::Range<u64>,
) -> Vec<Result<bytes::Bytes, exon::rpc::CallError>> {
    let calls: Vec<_> = xs
        .map(|x| {
            let h = caller.handle();
            tokio::spawn(async move { h.call(S, x.to_be_bytes().to_vec()).await })
        })
        .collect();
    let mut ends = Vec::new();
    for c in calls {
        ends.push(c.await.unwrap());
    }
    ends
}

/// A caller restarted without its journal (a durable one whose journal was lost, its clock
/// kept; or one not durable) calls a server that still holds slots of the caller's old
/// incarnation: the replies go in them and are told in doubt (nothing covers the old
/// incarnation). With the rule `resend_doubted_replies` the server sends each such reply
/// once more, in the caller's new incarnation, and every call gets its reply; off, those
/// calls end at their deadline, executed without a reply. The reply's payload comes back
/// from the core with its doubt (the driver keeps no copy), a durable server's through its
/// journal's verdict record too (the last case).
#[tokio::test]
async fn replies_told_in_doubt_reach_a_caller_restarted_without_its_journal() {
    let cases = [
        (true, true, false),
        (false, true, false),
        (true, false, false),
        (false, false, false),
        (true, false, true),
    ];
    for (rule, durable_caller, durable_server) in cases {
        let cdir = tempfile::tempdir().unwrap();
        let sdir = tempfile::tempdir().unwrap();
        let bind_caller = || async {
            if durable_caller {
                durable(C, cdir.path(), true).await
            } else {
                let c = cfg().with_call_deadline(Duration::from_secs(3));
                Endpoint::builder(C)
                    .security(security(C))
                    .config(c)
                    .bind("127.0.0.1:0")
                    .await
                    .unwrap()
            }
        };
        let mut rules = exon::proto::Rules::ALL;
        rules.resend_doubted_replies = rule;
        let server = if durable_server {
            durable(S, sdir.path(), true).await
        } else {
            Endpoint::builder(S)
                .security(security(S))
                .config(cfg().with_rules(rules))
                .bind("127.0.0.1:0")
                .await
                .unwrap()
        };
        let caller = bind_caller().await;
        server.add_peer(C, caller.local_addr());
        caller.add_peer(S, server.local_addr());
        let h = server.handle();
        tokio::spawn(async move {
            h.serve(|req: Request| async move {
                let x = u64::from_be_bytes(req.body()[..].try_into().unwrap());
                Ok::<_, Failure>(Response::new((x * x).to_be_bytes().to_vec()))
            })
            .await
        });
        let square = |r: &[u8]| u64::from_be_bytes(r.try_into().unwrap());
        // Replies in slots the caller's first incarnation granted, a few to spare.
        for (x, r) in (0..20u64).zip(call_all(&caller, 0..20).await) {
            assert_eq!(square(&r.unwrap()), x * x);
        }
        // Every reply acknowledged (none of them in doubt after the restart).
        timeout(LIMIT, async {
            while server.stats().await.unwrap().node.acknowledged < 20 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the first replies acknowledged");
        drop(caller.close(Duration::ZERO).await);
        drop(caller);
        if durable_caller {
            std::fs::remove_dir_all(cdir.path().join("journal")).unwrap();
        }
        let caller = bind_caller().await;
        caller.add_peer(S, server.local_addr());
        server.add_peer(C, caller.local_addr());
        let ends = timeout(LIMIT, call_all(&caller, 100..110)).await.unwrap();
        let got = ends.iter().filter(|r| r.is_ok()).count();
        for (x, r) in (100..110u64).zip(&ends) {
            match r {
                Ok(r) => assert_eq!(square(r), x * x),
                Err(e) => {
                    assert!(
                        !rule,
                        "rule on, durable {durable_caller}, {durable_server}: call {x} ended {e:?}"
                    );
                    assert_eq!(e.executed(), Some(true), "call {x}: {e:?}");
                }
            }
        }
        let resent = server.stats().await.unwrap().replies_resent;
        if rule {
            assert_eq!(got, 10, "every call got its reply");
            assert!(
                resent > 0,
                "some reply went in an old slot and was sent again"
            );
        } else {
            assert!(
                got < 10,
                "rule off (durable {durable_caller}, {durable_server}): replies lost to calls"
            );
            assert_eq!(resent, 0);
        }
    }
}
