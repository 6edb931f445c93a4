//! The durable section of `compare`: the disk's sync latency, NATS JetStream as the durable,
//! deduplicating broker a user would otherwise pick, and the place where exon's durable mode
//! will plug in ([`exon_durable_rows`]).
//!
//! Everything durable lives under one temporary directory (`--dir`, else the system's), made
//! for the run and removed after it: the sync probe's file and each NATS server's store.
//!
//! NATS: `nats-server` (found at `$NATS_SERVER`, on `PATH` or in `$(go env GOPATH)/bin`; built
//! with `go install` when only `go` is there) runs as a child process on a free loopback
//! port, with JetStream, file storage and, for every row but `nats_js_nofsync`,
//! `sync_interval: always` (each write is fsynced before its publish is acknowledged). Every
//! message carries a `Nats-Msg-Id` header, so the stream deduplicates (its default two-minute
//! window); a message counts only when its PubAck came back and was not a duplicate, and at
//! the end each stream must hold exactly the messages acknowledged and must refuse a resent
//! id as a duplicate.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::PublishMessage, stream};
use tokio::task::JoinSet;

pub use crate::durable_table::{Context, JournalCost, Row, Settings};
use crate::harness::{runtime, BATCH_DEADLINE};
use crate::message::payload;
use crate::report::{alternate, mb_s};
use crate::stats::Latencies;

/// How many async publishes await their PubAck at once (`nats_js`, `nats_js_nofsync`).
pub const NATS_WINDOW: usize = 256;
/// What the bench installs when it finds no `nats-server` but finds `go`.
pub const NATS_MODULE: &str = "github.com/nats-io/nats-server/v2@latest";
/// How long that `go install` may take before NATS is skipped.
pub const GO_INSTALL_LIMIT: Duration = Duration::from_secs(600);
/// How long a started server has to accept connections.
const SERVER_START_LIMIT: Duration = Duration::from_secs(15);
/// Bytes written (then `sync_data`) per sample of the sync probe.
pub const SYNC_BYTES: usize = 1024;
/// NATS refuses payloads above its `max_payload` (1 MiB by default).
const NATS_MAX_PAYLOAD: usize = 1 << 20;

/// Exon's rows of the durable table (`durable_exon.rs`): `exon_durable` (one-way msgs/s, each
/// message counted once acknowledged by a durable receiver), `exon_durable_rpc` (p50/p99),
/// and the same runs without durability beside them, measured in `cx.dir`, the directory
/// the other durable systems and the sync probe use.
pub fn exon_durable_rows(cx: &Context<'_>) -> Vec<Row> {
    crate::durable_exon::rows(cx)
}

/// Runs the durable section and prints its table; returns the keys for the last line.
pub fn run(s: &Settings) -> Vec<String> {
    let root = match &s.dir {
        Some(p) => tempfile::Builder::new()
            .prefix("exon-durable")
            .tempdir_in(p),
        None => tempfile::Builder::new().prefix("exon-durable").tempdir(),
    }
    .expect("a temporary directory for the durable systems");
    let dir = root.path();
    println!(
        "\ndurable systems, {} B messages, in {} ({} rounds of {:.2} s per system)",
        s.size,
        dir.display(),
        s.rounds,
        s.secs / s.rounds as f64
    );
    let mut keys = Vec::new();

    let sync = sync_latency(dir, s.sync_samples).expect("the sync probe");
    let (p50, p99) = (sync.quantile_us(0.5), sync.quantile_us(0.99));
    println!(
        "disk sync: {SYNC_BYTES} B appended + sync_data, {} times: p50 {p50:.0} us, p99 {p99:.0} us",
        sync.len()
    );
    keys.push(format!("fsync_p50_us={p50:.0}"));
    keys.push(format!("fsync_p99_us={p99:.0}"));

    let cx = Context { dir, settings: s };
    let mut rows = Vec::new();
    match nats_rows(&cx) {
        Ok(r) => rows.extend(r),
        Err(why) => {
            println!("nats_js: skipped ({why})");
            keys.push("nats_js=skipped".into());
        }
    }
    rows.extend(exon_durable_rows(&cx));
    print_rows(&rows, s.size as u64);
    for r in &rows {
        keys.push(format!("{}={:.0}", r.name, r.tally.rate()));
        if let Some(l) = &r.latency {
            keys.push(format!("{}_p50_us={:.0}", r.name, l.quantile_us(0.5)));
            keys.push(format!("{}_p99_us={:.0}", r.name, l.quantile_us(0.99)));
        }
        if let Some(j) = &r.journal {
            let (b, n, c) = j.per_message();
            keys.push(format!("{}_journal_b_per_msg={b:.0}", r.name));
            keys.push(format!("{}_journal_records_per_msg={n:.2}", r.name));
            keys.push(format!("{}_syncs_per_msg={c:.4}", r.name));
        }
    }
    keys
}

fn print_rows(rows: &[Row], size: u64) {
    if rows.is_empty() {
        return;
    }
    println!(
        "{:<16} {:>10} {:>8} {:>8} {:>8} {:>10}  per round (msgs/s); what",
        "system", "msgs/s", "MB/s", "p50 us", "p99 us", "verified"
    );
    for r in rows {
        let q = |q: f64| {
            r.latency
                .as_ref()
                .map_or("-".into(), |l| format!("{:.0}", l.quantile_us(q)))
        };
        println!(
            "{:<16} {:>10.0} {:>8.1} {:>8} {:>8} {:>10}  {}; {}",
            r.name,
            r.tally.rate(),
            mb_s(r.tally.rate(), size),
            q(0.5),
            q(0.99),
            r.tally.messages,
            r.tally.rounds(),
            r.what
        );
    }
    let costs: Vec<_> = rows
        .iter()
        .filter_map(|r| r.journal.map(|j| (r.name, j)))
        .collect();
    if costs.is_empty() {
        return;
    }
    println!("journal per message (both ends' journals, record framing left out):");
    println!(
        "{:<20} {:>10} {:>10} {:>10}",
        "system", "bytes", "records", "syncs"
    );
    for (name, j) in costs {
        let (b, n, c) = j.per_message();
        println!("{name:<20} {b:>10.0} {n:>10.2} {c:>10.4}");
    }
}

/// The disk's sync latency: `samples` times, [`SYNC_BYTES`] appended to a file in `dir` and
/// `sync_data` (fdatasync: the file grows, so its size is flushed too, as for a log).
pub fn sync_latency(dir: &Path, samples: usize) -> std::io::Result<Latencies> {
    let path = dir.join("sync-probe");
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)?;
    let block = vec![0x5Au8; SYNC_BYTES];
    let mut lat = Latencies::default();
    for _ in 0..samples {
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        lat.record(t.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(lat)
}

/// The NATS rows, or why there are none.
fn nats_rows(cx: &Context<'_>) -> Result<Vec<Row>, String> {
    let s = cx.settings;
    if let Some(why) = &s.skip_nats {
        return Err(why.clone());
    }
    if s.size > NATS_MAX_PAYLOAD {
        return Err(format!("size {} above NATS's default max_payload", s.size));
    }
    let bin = find_nats_server()?;
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("nats: {} ({version})", bin.display());
    let rt = runtime(s.threads);
    let (size, callers) = (s.size, s.callers);
    // The fsync rows alternate in rounds, as compare's other systems do; the row without
    // fsync runs after them, on a server of its own, so that the writeback of what it wrote
    // does not land in the middle of the others' syncs.
    let fsync = NatsServer::start(&bin, &cx.dir.join("nats-fsync"), true)?;
    let flows = rt.block_on(async {
        let js = fsync.jetstream().await?;
        Ok::<_, String>(vec![
            JsFlow::new(
                "nats_js",
                format!("async publish, {NATS_WINDOW} awaiting PubAck, fsync always"),
                js.clone(),
                "ASYNC",
                Pattern::Window(NATS_WINDOW),
                size,
            )
            .await?,
            JsFlow::new(
                "nats_js_sync",
                "sync publish, 1 caller (publish, await PubAck, repeat), fsync always".into(),
                js.clone(),
                "SYNC",
                Pattern::Callers(1),
                size,
            )
            .await?,
            JsFlow::new(
                "nats_js_rpc",
                format!(
                    "sync publish, {callers} concurrent callers (as compare's rpc), fsync always"
                ),
                js,
                "RPC",
                Pattern::Callers(callers),
                size,
            )
            .await?,
        ])
    })?;
    let mut rows = measure(&rt, flows, s);
    drop(fsync);
    let nofsync = NatsServer::start(&bin, &cx.dir.join("nats-nofsync"), false)?;
    let flows = rt.block_on(async {
        let js = nofsync.jetstream().await?;
        Ok::<_, String>(vec![
            JsFlow::new(
                "nats_js_nofsync",
                format!(
                    "async publish, {NATS_WINDOW} awaiting PubAck, default sync (no fsync before \
                 the ack)"
                ),
                js,
                "ASYNC",
                Pattern::Window(NATS_WINDOW),
                size,
            )
            .await?,
        ])
    })?;
    rows.insert(1, measure(&rt, flows, s).remove(0));
    drop(nofsync);
    println!(
        "nats: every stream holds exactly the messages acknowledged, and refused a resent \
         Nats-Msg-Id as a duplicate"
    );
    Ok(rows)
}

/// Warms the flows up, runs them in alternating rounds, verifies their streams.
fn measure(rt: &tokio::runtime::Runtime, mut flows: Vec<JsFlow>, s: &Settings) -> Vec<Row> {
    let slot = Duration::from_secs_f64(s.secs / s.rounds as f64);
    for f in &mut flows {
        rt.block_on(f.run(f.warmup())); // warm up: stream files, connection
        f.latency = Latencies::default();
    }
    let tallies = alternate(&mut flows, s.rounds, slot, |_, f| {
        let n = f.batch();
        rt.block_on(f.run(n))
    });
    let mut rows = Vec::new();
    for (mut f, tally) in flows.into_iter().zip(tallies) {
        rt.block_on(f.verify());
        let latency = matches!(f.pattern, Pattern::Callers(_)).then(|| f.latency.clone());
        rows.push(Row {
            name: f.name,
            what: f.what.clone(),
            tally,
            latency,
            journal: None,
        });
    }
    rows
}

/// How a flow publishes.
#[derive(Debug, Clone, Copy)]
enum Pattern {
    /// One publisher, this many publishes awaiting their acknowledgement at once.
    Window(usize),
    /// This many callers, each publishing and awaiting the acknowledgement, one at a time.
    Callers(u64),
}

/// One JetStream stream and the way it is published to.
struct JsFlow {
    name: &'static str,
    what: String,
    js: jetstream::Context,
    stream: String,
    subject: String,
    pattern: Pattern,
    size: usize,
    /// Messages published and acknowledged so far (the next message id).
    acked: u64,
    latency: Latencies,
}

impl JsFlow {
    async fn new(
        name: &'static str,
        what: String,
        js: jetstream::Context,
        stream: &str,
        pattern: Pattern,
        size: usize,
    ) -> Result<JsFlow, String> {
        let subject = format!("bench.{}", stream.to_lowercase());
        let config = stream::Config {
            name: stream.into(),
            subjects: vec![subject.clone()],
            storage: stream::StorageType::File,
            num_replicas: 1,
            ..Default::default()
        };
        // JetStream may still be starting when the server first accepts connections.
        let start = Instant::now();
        loop {
            match js.create_stream(config.clone()).await {
                Ok(_) => break,
                Err(e) if start.elapsed() > SERVER_START_LIMIT => {
                    return Err(format!("creating stream {stream}: {e}"))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        Ok(JsFlow {
            name,
            what,
            js,
            stream: stream.into(),
            subject,
            pattern,
            size,
            acked: 0,
            latency: Latencies::default(),
        })
    }

    /// Messages per batch (a batch is timed from its first publish to its last ack).
    fn batch(&self) -> u64 {
        match self.pattern {
            Pattern::Window(_) => 2_000,
            Pattern::Callers(c) => (c * 5).max(100),
        }
    }

    fn warmup(&self) -> u64 {
        match self.pattern {
            Pattern::Window(_) => 500,
            Pattern::Callers(c) => (c * 2).max(20),
        }
    }

    /// Publishes messages `acked..acked + n`, each with its number as `Nats-Msg-Id`; returns
    /// the messages acknowledged (all, or it panics) and the time.
    async fn run(&mut self, n: u64) -> (u64, Duration) {
        let base = self.acked;
        let start = Instant::now();
        match self.pattern {
            Pattern::Window(window) => {
                let mut inflight = VecDeque::with_capacity(window);
                for seq in base..base + n {
                    if inflight.len() == window {
                        let (seq, ack) = inflight.pop_front().unwrap();
                        check(seq, ack.await, true);
                    }
                    let ack = publish(&self.js, &self.subject, seq, self.size).await;
                    inflight.push_back((seq, ack));
                }
                for (seq, ack) in inflight {
                    check(seq, ack.await, true);
                }
            }
            Pattern::Callers(c) => {
                let mut set = JoinSet::new();
                for k in 0..c.min(n) {
                    let (js, subject, size) = (self.js.clone(), self.subject.clone(), self.size);
                    set.spawn(async move {
                        let mut lat = Vec::new();
                        let mut seq = base + k;
                        while seq < base + n {
                            let t = Instant::now();
                            let ack = publish(&js, &subject, seq, size).await;
                            check(seq, ack.await, false);
                            lat.push(t.elapsed());
                            seq += c;
                        }
                        lat
                    });
                }
                while let Some(lat) = set.join_next().await {
                    self.latency.extend(lat.expect("caller task"));
                }
            }
        }
        let took = start.elapsed();
        self.acked += n;
        (n, took)
    }

    /// Checks that the stream holds exactly the messages acknowledged, and that a resent id
    /// is refused as a duplicate (deduplication is on).
    async fn verify(&mut self) {
        let mut st = self.js.get_stream(&self.stream).await.expect("stream info");
        let state = st.info().await.expect("stream info").state.clone();
        assert_eq!(
            (state.messages, state.last_sequence),
            (self.acked, self.acked),
            "{}: the stream holds other messages than those acknowledged",
            self.name
        );
        let seq = self.acked - 1;
        let ack = publish(&self.js, &self.subject, seq, self.size)
            .await
            .await
            .expect("ack of the resent message");
        assert!(
            ack.duplicate,
            "{}: a resent Nats-Msg-Id was stored",
            self.name
        );
    }
}

/// Publishes message `seq` (`size` bytes, `Nats-Msg-Id: seq`); returns its ack future.
async fn publish(
    js: &jetstream::Context,
    subject: &str,
    seq: u64,
    size: usize,
) -> jetstream::context::PublishAckFuture {
    let msg = PublishMessage::build()
        .payload(payload(seq, size))
        .message_id(seq.to_string());
    tokio::time::timeout(BATCH_DEADLINE, js.send_publish(subject.to_string(), msg))
        .await
        .expect("publish in time")
        .expect("publish")
}

/// An acknowledgement must be a new message, and (one publisher) in publish order.
fn check(
    seq: u64,
    ack: Result<jetstream::publish::PublishAck, jetstream::context::PublishError>,
    ordered: bool,
) {
    let ack = ack.unwrap_or_else(|e| panic!("PubAck of message {seq}: {e}"));
    assert!(!ack.duplicate, "message {seq} acknowledged as a duplicate");
    if ordered {
        assert_eq!(ack.sequence, seq + 1, "message {seq} stored out of order");
    }
}

/// A `nats-server` child process with JetStream, its store in `dir`; killed (and waited
/// for) when dropped, on every way out of the run, panics included. On Linux it also dies
/// with the bench (a parent-death signal), should the bench be killed outright.
struct NatsServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl NatsServer {
    fn start(bin: &Path, dir: &Path, fsync: bool) -> Result<NatsServer, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = free_port().map_err(|e| format!("a free port: {e}"))?;
        let store = dir.join("store");
        let sync = if fsync {
            "\n  sync_interval: always"
        } else {
            ""
        };
        let conf = format!(
            "listen: \"127.0.0.1:{port}\"\njetstream {{\n  store_dir: {:?}{sync}\n}}\n",
            store.display().to_string()
        );
        let conf_path = dir.join("nats.conf");
        let log = dir.join("nats.log");
        std::fs::write(&conf_path, conf).map_err(|e| format!("{}: {e}", conf_path.display()))?;
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let mut server = NatsServer { child, port, log };
        server.wait_ready()?;
        Ok(server)
    }

    fn addr(&self) -> SocketAddr {
        (Ipv4Addr::LOCALHOST, self.port).into()
    }

    /// Waits until the server accepts connections (or says why it will not).
    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "nats-server exited ({status}): {}",
                    self.log_tail()
                ));
            }
            if TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if start.elapsed() > SERVER_START_LIMIT {
                return Err(format!(
                    "nats-server not accepting connections after {:?}: {}",
                    SERVER_START_LIMIT,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        let mut s = String::new();
        let _ = std::fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut s));
        let lines: Vec<&str> = s.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    async fn jetstream(&self) -> Result<jetstream::Context, String> {
        let client = async_nats::ConnectOptions::new()
            .connect(format!("nats://{}", self.addr()))
            .await
            .map_err(|e| format!("connecting to nats-server: {e}"))?;
        // The bench bounds the acks in flight itself; the client's limit stays above it.
        Ok(jetstream::ContextBuilder::new()
            .max_ack_inflight(4 * NATS_WINDOW.max(1024))
            .backpressure_on_inflight(true)
            .build(client))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}

/// A loopback port nobody listens on now (the server binds it a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Finds `nats-server`: `$NATS_SERVER`, then `PATH`, then `$(go env GOPATH)/bin`; failing
/// those, with `go` present, installs it with `go install` (bounded by
/// [`GO_INSTALL_LIMIT`]). `Err` says why NATS is skipped.
pub fn find_nats_server() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NATS_SERVER") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("NATS_SERVER={} is not a file", p.display()))
        };
    }
    if let Some(p) = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
    {
        return Ok(p);
    }
    let Some(gobin) = go_bin_dir() else {
        return Err(
            "no nats-server ($NATS_SERVER, PATH) and no `go` to build it; install it with \
             `go install github.com/nats-io/nats-server/v2@latest` or set NATS_SERVER"
                .into(),
        );
    };
    let p = gobin.join("nats-server");
    if p.is_file() {
        return Ok(p);
    }
    println!(
        "nats: no nats-server found; running `go install {NATS_MODULE}` (at most {} s)",
        GO_INSTALL_LIMIT.as_secs()
    );
    let mut child = Command::new("go")
        .args(["install", NATS_MODULE])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("go install: {e}"))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > GO_INSTALL_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "go install {NATS_MODULE} took over {} s",
                    GO_INSTALL_LIMIT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(format!("go install: {e}")),
        }
    };
    if !status.success() || !p.is_file() {
        return Err(format!(
            "go install {NATS_MODULE} failed ({status}) or left no {}",
            p.display()
        ));
    }
    Ok(p)
}

/// Where `go install` puts binaries (`GOBIN`, else `GOPATH/bin`); `None` without `go`.
fn go_bin_dir() -> Option<PathBuf> {
    let env = |key: &str| -> Option<String> {
        let out = Command::new("go").args(["env", key]).output().ok()?;
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !v.is_empty()).then_some(v)
    };
    if let Some(b) = env("GOBIN") {
        return Some(PathBuf::from(b));
    }
    // GOPATH may list several directories; `go install` uses the first.
    let gopath = env("GOPATH")?;
    std::env::split_paths(&gopath).next().map(|d| d.join("bin"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sync_probe_counts_its_samples_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let l = sync_latency(dir.path(), 5).unwrap();
        assert_eq!(l.len(), 5);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
