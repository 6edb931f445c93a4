//! Scaled one-way on loopback: several sender endpoints into one sharded receiving
//! endpoint, and the same shape over TCP.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use exon::proto::NodeId;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::endpoint::{
    exon_config, exon_endpoint_sharded, exon_endpoint_with, sender_ids, verify_deliveries,
    MAX_PAIRS,
};
use crate::harness::{runtime, spawn_rt, Cmd, Progress, BATCH_DEADLINE, LOCALHOST};
use crate::message::{payload, seq_of, Seen, SHARDED_SIZE};
use crate::tcp::{frame_buffered, read_frame, write_frames};

/// The receiver's counters, once it stopped.
type Counters = Arc<Mutex<Option<exon::endpoint::EndpointStats>>>;

/// What a [`ShardedOneWay`] receiver hands its constructor: the receiving thread, its stop
/// signal, the verification channel, the progress and where its counters land.
type ReceiverParts = (
    JoinHandle<()>,
    oneshot::Sender<()>,
    std_mpsc::Receiver<u64>,
    Arc<Progress>,
    Counters,
);

/// One-way with `pairs` senders (each an endpoint on its own thread) and one receiving
/// endpoint of `shards` driver shards (on a runtime of `shards` worker threads when above
/// 1, one task per shard taking its messages); every message is verified exactly once per
/// sender.
pub struct ShardedOneWay {
    cmds: Vec<mpsc::UnboundedSender<Cmd>>,
    stop: Option<oneshot::Sender<()>>,
    done: std_mpsc::Receiver<u64>,
    progress: Arc<Progress>,
    verified: u64,
    next: u64,
    threads: Vec<JoinHandle<()>>,
    stats: Counters,
}

impl ShardedOneWay {
    /// Sets the senders and the receiver up; `send_batch` messages per `send_batch` call (0:
    /// one `send` per message).
    pub fn new(
        plain: bool,
        pairs: usize,
        shards: usize,
        datagram: usize,
        send_batch: usize,
    ) -> ShardedOneWay {
        assert!(
            (1..=MAX_PAIRS as usize).contains(&pairs),
            "1 to {MAX_PAIRS} pairs"
        );
        let (progress, done) = Progress::new();
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let p = progress.clone();
        let stats = Arc::new(Mutex::new(None));
        let stats_out = stats.clone();
        let receiver = std::thread::Builder::new()
            .name("recv".into())
            .spawn(move || {
                let workers = if shards > 1 { shards } else { 0 };
                runtime(workers).block_on(async move {
                    let cfg = exon_config(datagram);
                    let local: SocketAddr = LOCALHOST.parse().unwrap();
                    let ep = exon_endpoint_sharded(local, 2, cfg, plain, shards);
                    addr_tx.send(ep.local_addr()).unwrap();
                    let (h, deliveries) = ep.into_deliveries();
                    let total = Arc::new(AtomicU64::new(0));
                    let tasks: Vec<_> = deliveries
                        .into_iter()
                        .map(|d| {
                            let (total, p) = (total.clone(), p.clone());
                            tokio::spawn(verify_deliveries(d, SHARDED_SIZE, total, p))
                        })
                        .collect();
                    let _ = stop_rx.await;
                    *stats_out.lock().unwrap() = h.stats().await;
                    h.close(Duration::from_millis(100)).await;
                    for t in tasks {
                        let _ = t.await;
                    }
                })
            })
            .expect("thread");
        let addr = addr_rx.recv().expect("receiver address");
        let ids = Arc::new(sender_ids(pairs, shards));
        let parts = (receiver, stop_tx, done, progress, stats);
        ShardedOneWay::with_senders(pairs, parts, move |j, mut cmd_rx| {
            let ids = ids.clone();
            async move {
                let local: SocketAddr = LOCALHOST.parse().unwrap();
                let a = exon_endpoint_with(local, ids[j], exon_config(datagram), plain);
                let b = NodeId::from_const(2);
                a.add_peer(b, addr);
                while let Some(cmd) = cmd_rx.recv().await {
                    if let Cmd::Send { start, n } = cmd {
                        if send_batch == 0 {
                            for seq in start..start + n {
                                drop(a.send(b, payload(seq, SHARDED_SIZE)).await.expect("send"));
                            }
                        } else {
                            let mut seq = start;
                            while seq < start + n {
                                let k = (send_batch as u64).min(start + n - seq);
                                let batch = (seq..seq + k).map(|q| payload(q, SHARDED_SIZE));
                                drop(a.send_batch(b, batch).await.expect("send_batch"));
                                seq += k;
                            }
                        }
                    }
                }
                a.close(Duration::from_secs(1)).await;
            }
        })
    }

    /// Starts `pairs` sender threads, sender `j` running `sender(j, its commands)` on its own
    /// runtime, beside the receiver `parts` describe (its thread, stop signal, progress and
    /// counters).
    fn with_senders<S, Fut>(pairs: usize, parts: ReceiverParts, sender: S) -> ShardedOneWay
    where
        S: Fn(usize, mpsc::UnboundedReceiver<Cmd>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let (receiver, stop, done, progress, stats) = parts;
        let mut cmds = Vec::new();
        let mut threads = Vec::new();
        for j in 0..pairs {
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<Cmd>();
            cmds.push(cmd_tx);
            let sender = sender.clone();
            threads.push(spawn_rt("send", move || sender(j, cmd_rx)));
        }
        threads.push(receiver);
        ShardedOneWay {
            cmds,
            stop: Some(stop),
            done,
            progress,
            verified: 0,
            next: 0,
            threads,
            stats,
        }
    }

    /// The same shape over TCP, for comparison: `pairs` sender threads, each with one
    /// connection writing framed `SHARDED_SIZE`-byte messages, to one receiving process
    /// whose runtime has `pairs` worker threads (one task per connection, each verifying
    /// its connection's messages exactly once).
    pub fn new_tcp(pairs: usize) -> ShardedOneWay {
        assert!(
            (1..=MAX_PAIRS as usize).contains(&pairs),
            "1 to {MAX_PAIRS} pairs"
        );
        let (progress, done) = Progress::new();
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let p = progress.clone();
        let receiver = std::thread::Builder::new()
            .name("recv".into())
            .spawn(move || {
                runtime(if pairs > 1 { pairs } else { 0 }).block_on(async move {
                    let l = TcpListener::bind(LOCALHOST).await.unwrap();
                    addr_tx.send(l.local_addr().unwrap()).unwrap();
                    let total = Arc::new(AtomicU64::new(0));
                    for _ in 0..pairs {
                        let (s, _) = l.accept().await.unwrap();
                        s.set_nodelay(true).unwrap();
                        // Ends with the runtime, once the receiver stops.
                        tokio::spawn(verify_connection(s, total.clone(), p.clone()));
                    }
                    let _ = stop_rx.await;
                })
            })
            .expect("thread");
        let addr = addr_rx.recv().expect("receiver address");
        let parts = (
            receiver,
            stop_tx,
            done,
            progress,
            Arc::new(Mutex::new(None)),
        );
        ShardedOneWay::with_senders(pairs, parts, move |_, cmd_rx| async move {
            let s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            write_frames(s, SHARDED_SIZE, cmd_rx).await;
        })
    }

    /// Sends about `n` messages (an equal share per sender) and returns once the receiver
    /// verified all of them; returns the messages and the time.
    pub fn run(&mut self, n: u64) -> (u64, Duration) {
        let share = (n / self.cmds.len() as u64).max(1);
        let n = share * self.cmds.len() as u64;
        self.verified += n;
        self.progress.expect(self.verified);
        let t = Instant::now();
        for c in &self.cmds {
            c.send(Cmd::Send {
                start: self.next,
                n: share,
            })
            .expect("sender alive");
        }
        self.next += share;
        match self.done.recv_timeout(BATCH_DEADLINE) {
            Ok(c) => assert_eq!(c, self.verified),
            Err(e) => panic!("sharded one-way: batch of {n} not verified ({e})"),
        }
        (n, t.elapsed())
    }

    /// Stops everything; returns the receiver's counters.
    pub fn finish(mut self) -> Option<exon::endpoint::EndpointStats> {
        self.shutdown();
        self.stats.lock().unwrap().take()
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(r) = self.threads.pop() {
            let _ = r.join();
        }
        self.cmds.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for ShardedOneWay {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Verifies one connection's framed messages exactly once, adding them to `total` once per
/// buffered run of frames and reporting it to `progress`.
async fn verify_connection(s: TcpStream, total: Arc<AtomicU64>, p: Arc<Progress>) {
    let mut r = BufReader::with_capacity(64 * 1024, s);
    let (mut seen, mut buf) = (Seen::default(), Vec::new());
    let mut reported = 0;
    while read_frame(&mut r, &mut buf, SHARDED_SIZE).await {
        seen.record(seq_of(&buf, SHARDED_SIZE));
        // Counted once per buffered run of frames.
        if !frame_buffered(r.buffer()) {
            let n = seen.count() - reported;
            reported = seen.count();
            p.verified(total.fetch_add(n, std::sync::atomic::Ordering::AcqRel) + n);
        }
    }
}
