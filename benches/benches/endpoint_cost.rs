//! The endpoint's own cost per message: a sending and a receiving exon endpoint on one
//! current-thread runtime (one OS thread) move `--messages` 1 KB messages one way over
//! loopback UDP. Made to run under callgrind, which counts the user-space instructions of
//! both drivers, both cores and the application tasks (the kernel's share is not counted):
//!
//! ```text
//! cargo bench -p exon-benches --bench endpoint_cost --no-run
//! valgrind --tool=callgrind target/release/deps/endpoint_cost-* --messages 20000
//! valgrind --tool=callgrind target/release/deps/endpoint_cost-* --messages 60000
//! ```
//!
//! The difference of two runs divided by the difference of their message counts is the cost
//! per message without the setup. `--batch B` hands messages over with `Handle::send_batch`,
//! `B` per call (0: one `send` per message). `--help` lists the options; the last line is
//! `key=value` pairs.

#[path = "common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use exon::proto::NodeId;

/// Two exon endpoints on one thread move 1 KB messages one way over loopback (made to run
/// under callgrind). The last line is `key=value` pairs.
#[derive(Debug, Parser)]
#[command(name = "endpoint_cost")]
struct Args {
    /// Messages counted.
    #[arg(long, default_value_t = 20_000)]
    messages: u64,
    /// Messages sent first (not counted).
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Messages per `send_batch` call (0: one `send` per message).
    #[arg(long, default_value_t = 0)]
    batch: usize,
    /// Plaintext endpoints instead of sealed ones.
    #[arg(long)]
    plain: bool,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let took = rt.block_on(run(&args));
    let rate = args.messages as f64 / took.as_secs_f64();
    let mode = if args.plain { "plaintext" } else { "sealed" };
    println!(
        "two endpoints on one thread ({mode}): {} messages of 1 KB, batch {}",
        args.messages, args.batch
    );
    println!("{rate:.0} messages/s");
    println!(
        "messages={} batch={} sealed={} msgs_per_s={rate:.0}",
        args.messages, args.batch, !args.plain
    );
}

async fn run(args: &Args) -> Duration {
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let cfg = common::exon_config(common::DEFAULT_EXON_DATAGRAM);
    let mut b = common::exon_endpoint_with(local, 2, cfg.clone(), args.plain);
    let a = common::exon_endpoint_with(local, 1, cfg, args.plain);
    let b_id = NodeId::from_const(2);
    a.add_peer(b_id, b.local_addr());
    let total = args.warmup + args.messages;
    let receiver = tokio::spawn(async move {
        let mut seen = common::Seen::default();
        let mut started = None;
        while seen.count() < total {
            let m = b.recv().await.expect("endpoint running");
            seen.record(common::seq_of(&m.payload, common::SHARDED_SIZE));
            if seen.count() == args_warmup_marker() {
                started = Some(Instant::now());
            }
        }
        (b, started)
    });
    WARMUP.store(args.warmup, std::sync::atomic::Ordering::Relaxed);
    let mut seq = 0;
    while seq < total {
        if args.batch == 0 {
            drop(
                a.send(b_id, common::payload(seq, common::SHARDED_SIZE))
                    .await
                    .expect("send"),
            );
            seq += 1;
        } else {
            let n = (args.batch as u64).min(total - seq);
            let batch = (seq..seq + n).map(|q| common::payload(q, common::SHARDED_SIZE));
            drop(a.send_batch(b_id, batch).await.expect("send_batch"));
            seq += n;
        }
    }
    let (b, started) = receiver.await.expect("receiver");
    let took = started.map_or(Duration::ZERO, |s| s.elapsed());
    a.close(Duration::from_secs(1)).await;
    b.close(Duration::from_millis(100)).await;
    took
}

static WARMUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn args_warmup_marker() -> u64 {
    WARMUP.load(std::sync::atomic::Ordering::Relaxed).max(1)
}
