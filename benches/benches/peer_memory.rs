//! Memory per peer, measured with a counting allocator (live heap bytes before and after):
//!
//! - the sans-IO core of a hub node talking with `--peers` nodes in memory: per *active* peer
//!   (one message queued to it and its slot request out, the sender record; and the receiver
//!   record of a peer whose message was delivered and not yet acknowledged), per peer once
//!   every exchange is acknowledged (records still held), and per *idle* peer once the idle
//!   timeout discarded the records (what stays: the pair key cache, bounded);
//! - the endpoint (driver) per peer whose address was set with `add_peer` and nothing sent
//!   (address book and known-peer set).
//!
//! ```text
//! cargo bench -p exon-benches --bench peer_memory -- --peers 1000
//! ```
//!
//! Prints a table; the last line is `key=value` pairs.

use clap::Parser;
use exon_benches::peer_memory::Counting;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Memory per peer of the exon core and endpoint (counting allocator). The last line is
/// `key=value` pairs.
#[derive(Debug, Parser)]
#[command(name = "peer_memory")]
struct Args {
    /// Peers of the hub.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    peers: u64,
    /// Payload bytes of each message.
    #[arg(long, default_value_t = 1024)]
    payload: usize,
    /// Plaintext nodes instead of sealed ones.
    #[arg(long)]
    plain: bool,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    exon_benches::peer_memory::run(args.peers, args.payload, args.plain);
}
