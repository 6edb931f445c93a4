//! Calls that survive their caller (issue 44, item 3): a durable caller stopped with calls
//! in flight and restarted on its directory gets them back from `take_recovered_calls`,
//! and each one's reply reaches it exactly once, the server having run each request once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exon::endpoint::Endpoint;
use exon::rpc::{Failure, Request, Response};
use exon::NodeId;
use tokio::time::timeout;

use super::common::{cfg, security};

const S: NodeId = NodeId::from_const(1);
const C: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(30);

async fn durable(id: NodeId, dir: &Path, recover_calls: bool) -> Endpoint {
    let mut rules = exon::proto::Rules::ALL;
    rules.recover_calls = recover_calls;
    let c = cfg()
        .with_rules(rules)
        .with_call_deadline(Duration::from_secs(3));
    Endpoint::builder(id)
        .security(security(id))
        .config(c)
        .durable(dir)
        .bind("127.0.0.1:0")
        .await
        .unwrap()
}

/// How often the server's handler ran each request, and how many began.
#[derive(Default)]
struct Runs {
    began: AtomicUsize,
    done: Mutex<HashMap<u64, u32>>,
}

/// Serves `x -> x * x` slowly, counting runs.
fn serve_slowly(server: &Endpoint, runs: Arc<Runs>) {
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
