//! A durable RPC server as a separate process on 127.0.0.1 (`src/bin/rpc-node.rs`), killed
//! with SIGKILL at random moments while calls are in flight (each start once it executed
//! something) and started again on its directory; at the end every request was executed at most once, exactly once where its
//! call says it was, and every reply was the one its execution made.
//!
//! The client runs in this process: numbered requests, a window of them in flight, each
//! call retried (as a new attempt) only when its error says the request was certainly not
//! executed (`CallError::executed() == Some(false)`).
//!
//! A second test kills the *caller* (`src/bin/rpc-caller.rs`, durable) mid-call and
//! starts it again on its directory: its calls come back (`take_recovered_calls`), and
//! every executed request's reply is received exactly once across its runs.
//!
//! A short run is part of `cargo test`; a long one:
//! `RPC_KILLS=200 RPC_CALLS=20000 cargo test --release --test rpc_kill -- --nocapture`
//! (also `RPC_WINDOW`, calls in flight; `RPC_SEED`; `RPC_DEADLINE_S`, each call's deadline).

mod common;
use common::whole_lines;

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use exon::endpoint::Handle;
use exon::proto::crypto::insecure_test_security;
use exon::rpc::CallError;
use exon::{Endpoint, EndpointConfig, NodeId};

const SERVER: NodeId = NodeId::from_const(2);
const CLIENT: NodeId = NodeId::from_const(1);
/// Attempts of one request, at most (each certainly not executed but the last).
const MAX_ATTEMPTS: u64 = 20;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Random numbers below `n` (xorshift, seeded by `RPC_SEED`).
fn random() -> impl FnMut(u64) -> u64 {
    let mut seed = env_or("RPC_SEED", 0x2545_F491_4F6C_DD1D) | 1;
    move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// A free loopback port (bound, then released): the server binds it at every start.
fn free_addr() -> SocketAddr {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The server process.
struct Server {
    bind: SocketAddr,
    peer: SocketAddr,
    dir: PathBuf,
    out: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    starts: u32,
    /// Most milliseconds the handler waits before, and again after, its effect.
    work_ms: u64,
}

impl Server {
    fn new(root: &Path, bind: SocketAddr, peer: SocketAddr) -> Server {
        Server {
            bind,
            peer,
            dir: root.join("server.dir"),
            out: root.join("server.effects"),
            log: root.join("server.redeliveries"),
            child: None,
            starts: 0,
            work_ms: 4,
        }
    }

    fn start(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_rpc-node"))
            .args(["--bind", &self.bind.to_string()])
            .args(["--work-ms", &self.work_ms.to_string()])
            .args(["--peer", &self.peer.to_string()])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--out")
            .arg(&self.out)
            .arg("--log")
            .arg(&self.log)
            .spawn()
            .expect("start rpc-node");
        self.child = Some(child);
        self.starts += 1;
    }

    /// SIGKILL, then wait for the process to be gone.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Panics if the process ended by itself (it serves until killed).
    fn check_running(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Some(status) = c.try_wait().unwrap() {
                panic!("the server exited by itself: {status}");
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How one attempt of a call ended: the reply's `(n, seq)`, or the error.
type Attempt = Result<(u64, u64), CallError>;

/// Calls request `n` until it is executed or may have been: a new attempt only after one
/// that certainly was not.
async fn call(h: Handle, n: u64, deadline: Duration) -> Vec<Attempt> {
    let mut attempts = Vec::new();
    for attempt in 0..MAX_ATTEMPTS {
        let mut body = n.to_be_bytes().to_vec();
        body.extend_from_slice(&attempt.to_be_bytes());
        let r = h.call_within(SERVER, body, deadline).await.map(|reply| {
            assert_eq!(
                reply.len(),
                16,
                "request {n}: reply of {} bytes",
                reply.len()
            );
            let m = u64::from_be_bytes(reply[..8].try_into().unwrap());
            let seq = u64::from_be_bytes(reply[8..].try_into().unwrap());
            (m, seq)
        });
        let again = matches!(&r, Err(e) if e.executed() == Some(false));
        attempts.push(r);
        if !again {
            break;
        }
    }
    attempts
}

/// The client: requests numbered from 0, `window` in flight, until `stop` and at least
/// `calls` made. Returns each request's attempts.
async fn client(
    h: Handle,
    stop: Arc<AtomicBool>,
    in_flight: Arc<AtomicUsize>,
    calls: u64,
    window: usize,
    deadline: Duration,
) -> Vec<Vec<Attempt>> {
    let permits = Arc::new(tokio::sync::Semaphore::new(window));
    let next = AtomicU64::new(0);
    let mut tasks = Vec::new();
    loop {
        let n = next.fetch_add(1, Ordering::Relaxed);
        if n >= calls && stop.load(Ordering::SeqCst) {
            break;
        }
        let permit = permits.clone().acquire_owned().await.unwrap();
        let (h, in_flight) = (h.clone(), in_flight.clone());
        in_flight.fetch_add(1, Ordering::SeqCst);
        tasks.push(tokio::spawn(async move {
            let r = call(h, n, deadline).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            r
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// One effect line of the server's store.
struct Effect {
    attempt: u64,
    seq: u64,
    key: String,
}

/// The bytes of the server's effects file so far (0 before it exists).
fn effects_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The server's effects, by request number; checks that `seq` counts the lines.
fn effects(path: &Path) -> HashMap<u64, Vec<Effect>> {
    let text = whole_lines(path);
    let mut by_n: HashMap<u64, Vec<Effect>> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "effect line {line:?}");
        let num = |v: &str| v.parse::<u64>().unwrap();
        let (n, attempt, seq) = (num(f[0]), num(f[1]), num(f[2]));
        assert_eq!(seq, i as u64, "effect line {i} says seq {seq}");
        by_n.entry(n).or_default().push(Effect {
            attempt,
            seq,
            key: f[3..].join(" "),
        });
    }
    by_n
}

#[test]
fn killed_rpc_servers_execute_each_request_exactly_once() {
    let kills = env_or("RPC_KILLS", 20);
    let calls = env_or("RPC_CALLS", 600);
    let window = env_or("RPC_WINDOW", 32) as usize;
    let deadline = Duration::from_secs(env_or("RPC_DEADLINE_S", 20));
    let mut rand = random();
    let began = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server_addr = free_addr();
    let mut cfg = EndpointConfig::default();
    cfg.protocol.timers.idle_timeout = Duration::from_millis(500);
    let ep = rt.block_on(async {
        Endpoint::builder(CLIENT)
            .security(insecure_test_security(CLIENT, [SERVER]))
            .config(cfg)
            .bind("127.0.0.1:0")
            .await
            .unwrap()
    });
    ep.add_peer(SERVER, server_addr);
    let mut server = Server::new(root.path(), server_addr, ep.local_addr());
    server.start();

    let stop = Arc::new(AtomicBool::new(false));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let calling = rt.spawn(client(
        ep.handle(),
        stop.clone(),
        in_flight.clone(),
        calls,
        window,
        deadline,
    ));
    let mut kills_in_flight = 0;
    for k in 0..kills {
        let started_at = effects_len(&server.out);
        std::thread::sleep(Duration::from_millis(50 + rand(400)));
        // Each kill lands once this start has executed something (a loaded machine can
        // take longer to start the server than the pause above): kills that only ever
        // hit a starting server would interrupt no handler.
        let patience = Instant::now() + Duration::from_secs(10);
        while effects_len(&server.out) == started_at
            && in_flight.load(Ordering::SeqCst) > 0
            && Instant::now() < patience
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        server.check_running();
        let busy = in_flight.load(Ordering::SeqCst);
        server.kill();
        if busy > 0 {
            kills_in_flight += 1;
        }
        if k % 10 == 0 || k + 1 == kills {
            eprintln!("kill {k}: {busy} calls in flight");
        }
        std::thread::sleep(Duration::from_millis(rand(100)));
        server.start();
    }
    // No more kills: the client finishes its calls.
    stop.store(true, Ordering::SeqCst);
    let finish = Duration::from_secs(120) + deadline * MAX_ATTEMPTS as u32;
    let results = rt
        .block_on(async { tokio::time::timeout(finish, calling).await })
        .expect("the calls did not finish")
        .unwrap();
    server.check_running();
    server.kill();
    let stats = rt.block_on(ep.stats()).unwrap();

    // The server's store: each request executed at most once (and each stable id once).
    let effects = effects(&server.out);
    let mut keys = HashSet::new();
    for (n, es) in &effects {
        assert!(
            (*n as usize) < results.len(),
            "an effect for request {n}, never made"
        );
        assert_eq!(es.len(), 1, "request {n} executed {} times", es.len());
        assert!(
            keys.insert(es[0].key.clone()),
            "stable id {} twice",
            es[0].key
        );
    }
    let (mut replies, mut in_doubt, mut no_reply, mut not_executed) = (0, 0, 0, 0);
    for (n, attempts) in results.iter().enumerate() {
        let n = n as u64;
        let es = effects.get(&n).map(Vec::as_slice).unwrap_or_default();
        let (last, earlier) = attempts.split_last().unwrap();
        let last_attempt = earlier.len() as u64;
        // Attempts that were certainly not executed: none has an effect.
        for (a, r) in earlier.iter().enumerate() {
            let e = r.as_ref().unwrap_err();
            assert_eq!(e.executed(), Some(false), "request {n} attempt {a}: {e:?}");
            assert!(
                es.iter().all(|x| x.attempt != a as u64),
                "request {n} attempt {a} not executed ({e:?}), yet its effect is there"
            );
            not_executed += 1;
        }
        let executed = es.iter().find(|x| x.attempt == last_attempt);
        match last {
            Ok((m, seq)) => {
                replies += 1;
                assert_eq!(*m, n, "request {n} got the reply to {m}");
                let e = executed.unwrap_or_else(|| panic!("request {n} replied, no effect"));
                assert_eq!(e.seq, *seq, "request {n}: the reply is not its execution's");
            }
            Err(CallError::NoReply) => {
                no_reply += 1;
                assert!(executed.is_some(), "request {n}: NoReply, no effect");
            }
            Err(CallError::InDoubt) => in_doubt += 1,
            Err(e) if e.executed() == Some(false) => {
                // Given up after MAX_ATTEMPTS.
                not_executed += 1;
                assert!(
                    es.is_empty(),
                    "request {n} never executed, yet its effect is there"
                );
            }
            Err(e) => panic!("request {n} attempt {last_attempt}: {e:?}"),
        }
    }
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    let redelivered = log.lines().count();
    let redelivered_applied = log.lines().filter(|l| l.ends_with(" applied")).count();
    eprintln!(
        "{} calls ({replies} replies, {no_reply} no reply, {in_doubt} in doubt, \
         {not_executed} attempts not executed), {} effects; {kills} kills ({kills_in_flight} \
         with calls in flight), server started {} times; redeliveries seen by the handler: \
         {redelivered} ({redelivered_applied} applied before the crash, answered from the \
         store); client replies discarded: {}; {:.1} s",
        results.len(),
        effects.len(),
        server.starts,
        stats.replies_discarded,
        began.elapsed().as_secs_f64(),
    );
    // With deadlines far longer than a restart, nearly every call gets its reply.
    assert!(
        replies * 10 >= results.len() * 9,
        "only {replies} of {} calls got their reply",
        results.len()
    );
    assert!(
        kills == 0 || kills_in_flight > 0,
        "no kill landed with calls in flight"
    );
    // Kills amid calls interrupt handlers: their requests come back, flagged.
    assert!(
        kills_in_flight < 5 || redelivered > 0,
        "{kills_in_flight} kills amid calls, and no request came back flagged"
    );
}

/// The caller process (`rpc-caller`): durable, killed and started again.
struct Caller {
    args: Vec<String>,
    out: PathBuf,
    child: Option<Child>,
}

impl Caller {
    fn start(&mut self, issue: Option<u64>) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rpc-caller"));
        cmd.args(&self.args);
        if let Some(n) = issue {
            cmd.args(["--issue", &n.to_string()]);
        }
        self.child = Some(cmd.spawn().expect("start rpc-caller"));
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How many calls the caller's starts recovered: in all, those whose request had been
/// acknowledged, and those whose reply had been handed out.
#[derive(Debug, Default)]
struct Recovered {
    calls: usize,
    acknowledged: usize,
    redelivered: usize,
}

/// The caller's file: `ok` replies by request (their `seq`s), `noreply` requests, and how
/// many calls its starts recovered.
fn caller_lines(path: &Path) -> (HashMap<u64, Vec<u64>>, HashSet<u64>, Recovered) {
    let text = whole_lines(path);
    let (mut ok, mut no_reply, mut recovered) = (
        HashMap::<u64, Vec<u64>>::new(),
        HashSet::new(),
        Recovered::default(),
    );
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |v: &str| v.parse::<u64>().unwrap();
        match f[..] {
            ["ok", n, seq] => ok.entry(num(n)).or_default().push(num(seq)),
            ["noreply", n] => drop(no_reply.insert(num(n))),
            ["start", "recovered", k, "acknowledged", a, "redelivered", r] => {
                recovered.calls += num(k) as usize;
                recovered.acknowledged += num(a) as usize;
                recovered.redelivered += num(r) as usize;
            }
            // A call that ended otherwise ("err n error"): it has no reply line.
            ["err", ..] => eprintln!("caller: {line}"),
            _ => panic!("caller line {line:?}"),
        }
    }
    (ok, no_reply, recovered)
}

/// Issue 44, item 3: a durable caller killed with SIGKILL mid-call and started again gets
/// its calls back, those whose request the server acknowledged before the kill included
/// (held in its journal until the call is acknowledged by the caller's application:
/// `Handle::call_acked`); every request executed has its reply received exactly once (a
/// recovered call ending `NoReply` only where the reply came before the kill), none twice,
/// and no request without an effect has a reply.
///
/// Heavy (seconds in a release build, a release build of the workspace's binaries first):
/// `cargo test --release --test rpc_kill -- --ignored --nocapture` (also
/// `RPC_CALLER_KILLS`, `RPC_CALLER_CALLS`, `RPC_SEED`).
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_killed_durable_caller_receives_every_reply_once() {
    let kills = env_or("RPC_CALLER_KILLS", 12);
    let calls = env_or("RPC_CALLER_CALLS", 1000);
    let mut rand = random();
    let root = tempfile::tempdir().unwrap();
    let (server_addr, caller_addr) = (free_addr(), free_addr());
    let mut server = Server::new(root.path(), server_addr, caller_addr);
    server.work_ms = 300;
    server.start();
    let out = root.path().join("caller.replies");
    let mut caller = Caller {
        args: vec![
            "--dir".into(),
            root.path().join("caller.dir").display().to_string(),
            "--bind".into(),
            caller_addr.to_string(),
            "--peer".into(),
            server_addr.to_string(),
            "--out".into(),
            out.display().to_string(),
        ],
        out: out.clone(),
        child: None,
    };
    caller.start(Some(calls));
    // The kills begin once the server executed a first request: the calls are flowing
    // (a caller killed before its first start reached the server would leave nothing to
    // recover, and its later starts issue nothing: seen once in CI, with both processes
    // slow to start on a loaded machine).
    let began = Instant::now();
    while effects_len(&server.out) == 0 {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "no request executed in 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(100 + rand(300)));
        caller.kill();
        std::thread::sleep(Duration::from_millis(rand(100)));
        caller.start(None);
    }
    // The last run waits for its recovered calls, then exits.
    let began = Instant::now();
    let status = loop {
        if let Some(s) = caller.child.as_mut().unwrap().try_wait().unwrap() {
            break s;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the caller did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "the caller failed: {status}");
    server.check_running();
    server.kill();
    let effects = effects(&server.out);
    let (ok, no_reply, recovered) = caller_lines(&caller.out);
    let missing = effects.keys().filter(|n| !ok.contains_key(n)).count();
    assert_eq!(
        missing, 0,
        "{missing} executed requests without a reply received"
    );
    for (n, es) in &effects {
        assert!(*n < calls, "an effect for request {n}, never made");
        assert_eq!(es.len(), 1, "request {n} executed {} times", es.len());
        let got = ok.get(n).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            got,
            [es[0].seq],
            "request {n}: replies {got:?}, executed as {}",
            es[0].seq
        );
    }
    for n in ok.keys().chain(&no_reply) {
        assert!(effects.contains_key(n), "request {n}: a reply, no effect");
    }
    eprintln!(
        "{calls} calls, {} executed, {} replies, {} recovered calls ended NoReply (their \
         reply came before the kill); {kills} kills; {} calls recovered, {} of them \
         acknowledged before the kill, {} with their reply handed out before it",
        effects.len(),
        ok.len(),
        no_reply.len(),
        recovered.calls,
        recovered.acknowledged,
        recovered.redelivered,
    );
    // (Whether a kill came between a request's acknowledgement and its call's end depends
    // on the kills' timing: the figures say, the test does not require it.)
    assert!(recovered.calls > 0, "no kill left a call to recover");
}
