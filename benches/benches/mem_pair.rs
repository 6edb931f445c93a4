//! The sans-IO core's own cost: two exon nodes in memory move `--messages` 1 KB messages one
//! way, with no sockets and no runtime. Made to run under callgrind, which counts
//! instructions (stable on a noisy machine):
//!
//! ```text
//! cargo bench -p exon-benches --bench mem_pair --no-run
//! valgrind --tool=callgrind target/release/deps/mem_pair-* --messages 200000
//! ```
//!
//! `--help` lists the options. Prints messages/s and datagrams per message; the last line is
//! `key=value` pairs.

use clap::Parser;
use exon_benches::core_pair::MemPair;
use exon_benches::endpoint::DEFAULT_EXON_DATAGRAM;

/// The sans-IO core alone: two exon nodes in memory move 1 KB messages one way, with no
/// sockets and no runtime (made to run under callgrind). The last line is `key=value` pairs.
#[derive(Debug, Parser)]
#[command(name = "mem_pair")]
struct Args {
    /// Messages counted.
    #[arg(long, default_value_t = 200_000)]
    messages: u64,
    /// Exon's `max_datagram_size`.
    #[arg(long, default_value_t = DEFAULT_EXON_DATAGRAM)]
    datagram: usize,
    /// Messages sent first and not counted.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    /// Plaintext nodes instead of sealed ones (the default, as in production).
    #[arg(long)]
    plain: bool,
    /// Datagrams written per call at most (`poll_transmit_run`, as the driver does for
    /// segmented sends); 1: one `poll_output` per datagram.
    #[arg(long, default_value_t = 64)]
    run: usize,
    /// Messages sent and not yet delivered at most (0: no bound; every message is queued as
    /// soon as the sender takes it, so its queue grows with the run).
    #[arg(long, default_value_t = 0)]
    backlog: u64,
    /// Messages per `Node::send_many` call, as the driver hands over `Handle::send_batch`
    /// (0: one `send` per message).
    #[arg(long, default_value_t = 0)]
    send_many: usize,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let Args {
        messages,
        datagram,
        warmup,
        plain,
        run,
        send_many,
        backlog,
        ..
    } = Args::parse();
    let mut pair = MemPair::new(datagram, plain);
    pair.run = run.max(1);
    pair.send_many = send_many;
    pair.backlog = backlog;
    pair.run(warmup);
    let before = pair.datagrams;
    let took = pair.run(messages);
    let rate = messages as f64 / took.as_secs_f64();
    let per = (pair.datagrams - before) as f64 / messages as f64;
    let mode = if plain { "plaintext" } else { "sealed" };
    println!(
        "exon core in memory ({mode}): {messages} messages of 1 KB, {datagram}-byte datagrams"
    );
    println!("{rate:.0} messages/s, {per:.3} datagrams per message");
    println!(
        "messages={messages} datagram={datagram} run={run} send_many={send_many} sealed={} msgs_per_s={rate:.0} datagrams_per_msg={per:.3}",
        !plain
    );
}
