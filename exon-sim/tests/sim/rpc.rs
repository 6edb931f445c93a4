//! Request/reply mode (`Scenario::rpc`): callers send requests in envelopes and end each
//! call with `exon::call::CallState`; servers execute each request when it is delivered
//! and answer it with `Node::reply` a handler's time later. The oracle checks that every
//! call's end is true (a reply is the server's one answer, not executed means never
//! executed, no reply means executed), that no request is executed twice in effect (a
//! flagged re-run of the same delivery is absorbed) and no call gets two replies, and that
//! every acknowledged request's reply reaches its caller. The journal rules that matter to
//! calls, switched off, are caught.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Node, Rules};
use exon_sim::oracle::RpcCounts;
use exon_sim::{
    DiskModel, Fault, FaultKind, JournalModel, Report, RpcModel, Scenario, Sim, ViolationKind,
    Workload,
};

/// Partitions between the server (node 0) and the callers: `k`-th from about `300 k` ms,
/// lasting 0.3 to 1.5 s, both ways, one way (server to caller: requests arrive, verdicts
/// and replies do not) or held.
fn partitions(seed: u64, n: u64) -> Vec<Fault> {
    let mut out = Vec::new();
    for k in 0..n {
        let b = 1 + ((k + seed) % 2) as usize;
        let at = Duration::from_millis(30 + 300 * k + (seed * 37) % 100);
        let len = Duration::from_millis(300 + (seed * 131 + k * 277) % 1200);
        let (kind, one_way) = match (k + seed) % 3 {
            0 => (
                FaultKind::Partition {
                    a: 0,
                    b,
                    one_way: false,
                },
                false,
            ),
            1 => (
                FaultKind::Partition {
                    a: 0,
                    b,
                    one_way: true,
                },
                true,
            ),
            _ => (FaultKind::Hold { a: 0, b }, false),
        };
        out.push(Fault { at, kind });
        out.push(Fault {
            at: at + len,
            kind: FaultKind::Heal { a: 0, b, one_way },
        });
    }
    out
}

/// `n` crashes of node `node`, spread over the first 1.2 s, each down a few milliseconds.
fn crashes(seed: u64, node: usize, n: u64) -> Vec<Fault> {
    (0..n)
        .map(|k| Fault {
            at: Duration::from_millis(40 + 1200 * k / n + 3 * (seed % 7)),
            kind: FaultKind::Restart {
                node,
                down: Duration::from_millis(2 + 5 * (k % 3)),
                keep_clock: true,
            },
        })
        .collect()
}

/// Three nodes (node 0 serves, nodes 1 and 2 call) over a lossy, duplicating, reordering
/// network, with partitions between server and callers longer than the deadlines: requests
/// are given up after 250 ms, calls after 600 ms. Handlers take 2 ms; one call in five
/// fails.
fn calls(seed: u64) -> Scenario {
    let mut sc = Scenario {
        seed,
        nodes: 3,
        workload: Workload {
            messages: 200,
            burst: 2,
            interval: Duration::from_millis(10),
            ..Workload::default()
        },
        faults: partitions(seed, 4),
        settle: Duration::from_secs(30),
        take_delay: Duration::from_millis(2),
        deadline: Some(Duration::from_millis(250)),
        rpc: Some(RpcModel {
            servers: 1,
            call_deadline: Duration::from_millis(600),
            fail_one_in: 5,
            message_one_in: 0,
            ..RpcModel::default()
        }),
        ..Scenario::default()
    };
    sc.link.loss = 0.1;
    sc.link.dup = 0.1;
    sc.link.reorder = 0.1;
    sc.link.dup_max_delay = Duration::from_secs(1);
    sc
}

/// [`calls`] where every node serves and calls (and one submission in four is a plain
/// message), without partitions, with crashes of node 0 and no journals (its calls and the
/// requests it executed are in doubt).
fn crashing_without_journals(seed: u64) -> Scenario {
    let mut sc = calls(seed);
    sc.rpc = Some(RpcModel {
        servers: 0,
        message_one_in: 4,
        ..sc.rpc.clone().unwrap_or_default()
    });
    sc.faults = crashes(seed, 0, 6);
    sc
}

/// Durable mode: two nodes, node 0 serving and crashing eight times (crashes cut commits
/// and tear unsynced writes), its handlers taking 3 ms (a crash inside one makes the
/// request come back flagged), journals syncing in 3 ms; no deadlines on requests, calls
/// given up after 20 s (past every crash and heal).
fn durable(seed: u64) -> Scenario {
    let mut sc = Scenario {
        seed,
        workload: Workload {
            messages: 200,
            burst: 4,
            interval: Duration::from_millis(5),
            ..Workload::default()
        },
        faults: crashes(seed, 0, 8),
        settle: Duration::from_secs(30),
        take_delay: Duration::from_millis(3),
        disk: Some(DiskModel {
            sync_latency: Duration::from_millis(3),
            torn_writes: true,
        }),
        durable: Some(JournalModel {
            compact_after: 4096,
            ..JournalModel::default()
        }),
        rpc: Some(RpcModel {
            servers: 1,
            call_deadline: Duration::from_secs(20),
            fail_one_in: 5,
            message_one_in: 0,
            ..RpcModel::default()
        }),
        ..Scenario::default()
    };
    sc.link.loss = 0.1;
    sc.link.dup = 0.1;
    sc.link.reorder = 0.1;
    sc.link.dup_max_delay = Duration::from_secs(1);
    sc
}

/// [`durable`] with twenty crashes of the server, each inside a commit when one is pending
/// (the disk fails part way: a prefix of the records may be durable).
fn crashes_inside_commits(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    sc.faults = crashes(seed, 0, 20);
    sc.durable = Some(JournalModel {
        compact_after: 4096,
        crash_mid_commit: 1.0,
        ..JournalModel::default()
    });
    sc
}

/// [`durable`] where both nodes serve and call (and one submission in four is a plain
/// message), and crash in turn: a caller's crash forgets its open calls, whose replies then
/// come after their end.
fn both_crashing(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    sc.rpc = Some(RpcModel {
        servers: 0,
        message_one_in: 4,
        ..sc.rpc.clone().unwrap_or_default()
    });
    sc.faults = crashes(seed, 0, 4);
    sc.faults.extend(crashes(seed + 1, 1, 4));
    sc.faults.sort_by_key(|f| f.at);
    sc
}

/// [`durable`] with syncs slower than a round trip (30 ms): an ACK sent before its record
/// is durable reaches the caller before a crash can undo the answer.
fn slow_sync(seed: u64) -> Scenario {
    let mut sc = durable(seed);
    sc.disk = Some(DiskModel {
        sync_latency: Duration::from_millis(30),
        torn_writes: true,
    });
    sc
}

fn without(mut sc: Scenario, off: fn(&mut Rules)) -> Scenario {
    let mut rules = Rules::ALL;
    off(&mut rules);
    sc.node_hook = Some(Rc::new(move |_, n: &mut Node| n.set_rules(rules)));
    sc
}

fn kinds(r: &Report) -> Vec<ViolationKind> {
    r.violations.iter().map(|v| v.kind).collect()
}

/// Runs `make` over `seeds`, each clean; returns the calls' counters summed.
fn soak(make: fn(u64) -> Scenario, seeds: std::ops::Range<u64>) -> RpcCounts {
    let mut sum = RpcCounts::default();
    for seed in seeds {
        let r = Sim::new(make(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        let c = r.rpc.expect("an RPC run reports its calls");
        let ended = c.replies + c.not_executed + c.in_doubt + c.no_reply + c.forgotten;
        assert_eq!(ended, c.calls, "every call ended: {r}");
        sum.calls += c.calls;
        sum.replies += c.replies;
        sum.failed += c.failed;
        sum.not_executed += c.not_executed;
        sum.in_doubt += c.in_doubt;
        sum.no_reply += c.no_reply;
        sum.forgotten += c.forgotten;
        sum.executions += c.executions;
        sum.reruns += c.reruns;
        sum.discarded += c.discarded;
    }
    println!("{sum:?}");
    sum
}

#[test]
fn calls_end_truthfully_under_loss_and_partitions() {
    let c = soak(calls, 0..12);
    // Every ending happened, so every claim was checked.
    assert!(c.replies > 0 && c.failed > 0, "{c:?}");
    assert!(c.not_executed > 0, "no call ended not executed: {c:?}");
    assert!(c.in_doubt > 0, "no call ended in doubt: {c:?}");
    assert!(c.no_reply > 0, "no call ended without its reply: {c:?}");
    assert!(c.discarded > 0, "no reply came after its call ended: {c:?}");
}

#[test]
fn server_crashes_without_journals_leave_calls_in_doubt_never_twice() {
    let c = soak(crashing_without_journals, 0..8);
    assert!(c.in_doubt > 0, "{c:?}");
    assert!(
        c.forgotten > 0,
        "node 0 calls too: its crashes forget calls: {c:?}"
    );
    assert_eq!(c.reruns, 0, "no journal, no flagged re-run: {c:?}");
}

#[test]
fn durable_server_crashes_keep_every_call_and_reply() {
    let c = soak(durable, 0..10);
    assert_eq!(c.calls, c.replies, "every call gets its reply: {c:?}");
    assert!(c.reruns > 0, "no crash fell inside a handler: {c:?}");
}

#[test]
fn durable_crashes_of_callers_and_servers_keep_claims_true() {
    let c = soak(both_crashing, 0..8);
    assert!(c.forgotten > 0, "no crash forgot a call: {c:?}");
    assert!(
        c.discarded > 0,
        "no reply came after its caller forgot the call: {c:?}"
    );
    assert_eq!(c.not_executed + c.in_doubt, 0, "{c:?}");
}

/// Runs `make(seed)` with one rule off, then with every rule on, over `seeds`: passes at
/// the first seed whose run with the rule off shows `kind` and whose run with every rule on
/// is clean; fails if no seed does. (Crashes inside commits meet the known limit of
/// `tests/sim/durable.rs`, a verdict stored and not reported before a crash, in some runs
/// with every rule on: those seeds do not count.)
fn self_test(
    make: fn(u64) -> Scenario,
    seeds: std::ops::Range<u64>,
    off: fn(&mut Rules),
    kind: ViolationKind,
) {
    let mut found = Vec::new();
    for seed in seeds.clone() {
        let bad = Sim::new(without(make(seed), off)).run();
        if !kinds(&bad).contains(&kind) {
            continue;
        }
        let good = Sim::new(make(seed)).run();
        if good.ok() {
            let v = bad.violations.iter().find(|v| v.kind == kind);
            let mut all = kinds(&bad);
            let mut seen = Vec::new();
            all.retain(|k| {
                !seen.contains(k) && {
                    seen.push(*k);
                    true
                }
            });
            println!("seed {seed}, rule off: {v:?}\nall: {all:?}\n{bad}");
            return;
        }
        found.push((seed, kinds(&good)));
    }
    panic!("{kind:?} in no seed of {seeds:?} whose control run is clean (control runs that failed: {found:?})");
}

#[test]
fn without_reply_in_one_record_a_server_crash_loses_an_acknowledged_reply() {
    self_test(
        crashes_inside_commits,
        0..64,
        |r| r.reply_in_one_record = false,
        ViolationKind::ReplyLost,
    );
}

#[test]
fn without_early_token_waits_for_stored_a_reply_reaches_its_call_twice() {
    // Requests and replies leave before their senders' records are synced. Handed over on
    // arrival, a request whose caller crashed before its sync runs again when the caller
    // sends it anew, and a reply whose server crashed before its `Replied` was synced comes
    // again from the re-run handler.
    self_test(
        durable,
        0..16,
        |r| r.early_token_waits_for_stored = false,
        ViolationKind::ReplyTwice,
    );
}

#[test]
fn without_journal_before_delivery_a_request_is_executed_twice() {
    // The layout the rule guards: the server journals the request (`Delivered`).
    self_test(
        durable,
        0..10,
        |r| {
            r.deliver_from_senders_copy = false;
            r.journal_before_delivery = false;
        },
        ViolationKind::ExecutedTwice,
    );
}

#[test]
fn without_journal_before_ack_an_acknowledged_request_comes_back() {
    // The server acknowledges the request before its answer is durable; a crash loses the
    // answer, and the restarted server hands the request out again after the caller saw it
    // acknowledged. (The re-run is flagged with the same stable id: a handler that keys
    // its effects by it absorbs it, and answers again.)
    self_test(
        slow_sync,
        0..64,
        |r| r.journal_before_ack = false,
        ViolationKind::RedeliveredAfterAck,
    );
}

/// Servers that answer each run of finished requests from one caller in one
/// `Node::reply_many` (as the endpoint's driver hands over a server's replies of one turn)
/// end every call truthfully, under loss, duplication, partitions and crashes with and
/// without journals, and as often as servers answering with one `Node::reply` each.
#[test]
fn replies_answered_together_end_every_call_as_one_by_one() {
    let makes: [fn(u64) -> Scenario; 4] =
        [calls, crashing_without_journals, durable, both_crashing];
    for (m, make) in makes.into_iter().enumerate() {
        for seed in 0..4 {
            let one = Sim::new(make(seed)).run();
            let mut sc = make(seed);
            if let Some(rpc) = sc.rpc.as_mut() {
                rpc.replies_together = true;
            }
            let together = Sim::new(sc).run();
            assert!(together.ok(), "{}", together.describe_failure());
            let (a, b) = (one.rpc.expect("counts"), together.rpc.expect("counts"));
            assert_eq!(a, b, "scenario {m}, seed {seed}");
        }
    }
}
