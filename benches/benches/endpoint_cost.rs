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
//! `B` per call (0: one `send` per message). `--rpc C` measures calls instead: `C` callers
//! call a server echoing 1 KB (`--messages` calls, after `--warmup`), the server on a thread
//! of its own (callgrind's thread 2) and the callers on another (thread 3), as `compare
//! rpc` runs them. `--help` lists the options; the last line is `key=value` pairs.

use clap::Parser;
use exon_benches::endpoint::{one_thread_cost, two_thread_cost};

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
    /// Each endpoint on its own thread (callgrind's `--separate-threads=yes` then counts
    /// the sender and the receiver apart).
    #[arg(long)]
    threads: bool,
    /// Calls instead of one-way messages: this many concurrent callers, one call of 1 KB
    /// each at a time, to a server echoing it.
    #[arg(long)]
    rpc: Option<u64>,
    /// Exon's `max_datagram_size`.
    #[arg(long, default_value_t = exon_benches::endpoint::DEFAULT_EXON_DATAGRAM)]
    datagram: usize,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    if let Some(callers) = args.rpc {
        return rpc(&args, callers.max(1));
    }
    let took = if args.threads {
        two_thread_cost(
            args.messages,
            args.warmup,
            args.batch,
            args.plain,
            args.datagram,
        )
    } else {
        let rt = exon_benches::harness::runtime(0);
        rt.block_on(one_thread_cost(
            args.messages,
            args.warmup,
            args.batch,
            args.plain,
            args.datagram,
        ))
    };
    let rate = args.messages as f64 / took.as_secs_f64();
    let mode = if args.plain { "plaintext" } else { "sealed" };
    println!(
        "two endpoints on {} ({mode}): {} messages of 1 KB, batch {}",
        if args.threads {
            "two threads"
        } else {
            "one thread"
        },
        args.messages,
        args.batch
    );
    println!("{rate:.0} messages/s");
    println!(
        "messages={} batch={} sealed={} threads={} msgs_per_s={rate:.0}",
        args.messages,
        args.batch,
        !args.plain,
        if args.threads { 2 } else { 1 }
    );
}

/// `--rpc`: calls from `callers` concurrent callers to an echo server (each side on a thread
/// of its own), `args.warmup` first, then `args.messages` counted.
fn rpc(args: &Args, callers: u64) {
    use exon_benches::systems::RpcKind;
    let kind = if args.plain {
        RpcKind::ExonPlain
    } else {
        RpcKind::Exon
    };
    let mut rpc = exon_benches::rpc::Rpc::new(kind, args.datagram, exon_benches::message::PAYLOAD);
    if args.warmup > 0 {
        rpc.run(args.warmup, callers);
    }
    let (took, _) = rpc.run(args.messages, callers);
    drop(rpc);
    let rate = args.messages as f64 / took.as_secs_f64();
    println!(
        "calls of 1 KB ({}), {callers} callers: {} calls",
        kind.name(),
        args.messages
    );
    println!(
        "calls={} callers={callers} calls_per_s={rate:.0}",
        args.messages
    );
}
