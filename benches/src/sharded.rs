//! Scaled one-way: several sender endpoints into one sharded receiving endpoint, or TCP.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use exon::proto::NodeId;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::endpoint::{
    exon_config, exon_endpoint_sharded, exon_endpoint_with, sender_ids, verify_deliveries,
    MAX_PAIRS,
};
use crate::harness::{runtime, spawn_rt, Cmd, Crew, Progress, BATCH_DEADLINE, LOCALHOST};
use crate::message::{payload, seq_of, Seen, SHARDED_SIZE};
use crate::tcp::{frame_buffered, read_frame, write_frames};

/// The receiver's counters, once it stopped.
type Counters = Arc<Mutex<Option<exon::endpoint::EndpointStats>>>;

/// One-way with `pairs` senders (each an endpoint on its own thread) and one receiving
/// endpoint of `shards` driver shards (on a runtime of `shards` worker threads when above
/// 1, one task per shard taking its messages); every message is verified exactly once per
/// sender.
pub struct ShardedOneWay {
    crew: Crew,
    done: std_mpsc::Receiver<u64>,
    progress: Arc<Progress>,
    verified: u64,
    next: u64,
    stats: Counters,
}

/// A started receiver: its thread and stop signal (in a crew without senders yet), its
/// progress and the channel that reports it, its address.
struct Receiver {
    crew: Crew,
    progress: Arc<Progress>,
    done: std_mpsc::Receiver<u64>,
    addr: SocketAddr,
}

/// Starts the receiver of `pairs` senders (1 to [`MAX_PAIRS`]) on its own thread, in a
/// runtime of `workers` worker threads (0: current-thread): `receiver(address, stop,
/// progress)` publishes its address, then verifies messages until `stop`.
fn spawn_receiver<F, Fut>(pairs: usize, workers: usize, receiver: F) -> Receiver
where
    F: FnOnce(std_mpsc::Sender<SocketAddr>, oneshot::Receiver<()>, Arc<Progress>) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()>,
{
    assert!(
        (1..=MAX_PAIRS as usize).contains(&pairs),
        "1 to {MAX_PAIRS} pairs"
    );
    let (progress, done) = Progress::new();
    let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let p = progress.clone();
    let thread = std::thread::Builder::new()
        .name("recv".into())
        .spawn(move || runtime(workers).block_on(receiver(addr_tx, stop_rx, p)))
        .expect("thread");
    Receiver {
        crew: Crew::new(thread, stop_tx),
        progress,
        done,
        addr: addr_rx.recv().expect("receiver address"),
    }
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
        let stats = Arc::new(Mutex::new(None));
        let stats_out = stats.clone();
        let workers = if shards > 1 { shards } else { 0 };
        let receiver = spawn_receiver(pairs, workers, move |addr_tx, stop_rx, p| async move {
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
        });
        let addr = receiver.addr;
        let ids = Arc::new(sender_ids(pairs, shards));
        ShardedOneWay::with_senders(pairs, receiver, stats, move |j, mut cmd_rx| {
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
    /// runtime, beside the started `receiver`, whose counters land in `stats`.
    fn with_senders<S, Fut>(
        pairs: usize,
        receiver: Receiver,
        stats: Counters,
        sender: S,
    ) -> ShardedOneWay
    where
        S: Fn(usize, mpsc::UnboundedReceiver<Cmd>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let Receiver {
            mut crew,
            progress,
            done,
            ..
        } = receiver;
        for j in 0..pairs {
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<Cmd>();
            let sender = sender.clone();
            crew.add_sender(cmd_tx, spawn_rt("send", move || sender(j, cmd_rx)));
        }
        ShardedOneWay {
            crew,
            done,
            progress,
            verified: 0,
            next: 0,
            stats,
        }
    }

    /// The same shape over TCP, for comparison: `pairs` sender threads, each with one
    /// connection writing framed `SHARDED_SIZE`-byte messages, to one receiving process
    /// whose runtime has `pairs` worker threads (one task per connection, each verifying
    /// its connection's messages exactly once).
    pub fn new_tcp(pairs: usize) -> ShardedOneWay {
        let workers = if pairs > 1 { pairs } else { 0 };
        let receiver = spawn_receiver(pairs, workers, move |addr_tx, stop_rx, p| async move {
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
        });
        let addr = receiver.addr;
        let stats = Arc::new(Mutex::new(None));
        ShardedOneWay::with_senders(pairs, receiver, stats, move |_, cmd_rx| async move {
            let s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            write_frames(s, SHARDED_SIZE, cmd_rx).await;
        })
    }

    /// Sends about `n` messages (an equal share per sender) and returns once the receiver
    /// verified all of them; returns the messages and the time.
    pub fn run(&mut self, n: u64) -> (u64, Duration) {
        let senders = self.crew.cmds();
        let share = (n / senders.len() as u64).max(1);
        let n = share * senders.len() as u64;
        self.verified += n;
        self.progress.expect(self.verified);
        let t = Instant::now();
        for c in senders {
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
        self.crew.shutdown();
        self.stats.lock().unwrap().take()
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
