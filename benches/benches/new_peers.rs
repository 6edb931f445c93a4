//! The cost of a new peer: a plaintext endpoint on loopback fed slot requests (REQSLOTS) from
//! `--peers` distinct node ids, one datagram each, in blocks of `--block` (each block sent
//! once the endpoint has taken the last), against the same number of requests from one known
//! id. The time per block, from the first block to the last, shows whether learning and
//! evicting a peer costs the same at 1e3 peers as at 1e6 (no pass over the address book or
//! the record table per new peer).
//!
//! ```text
//! cargo bench -p exon-benches --bench new_peers -- --peers 1000000
//! ```
//!
//! Prints a table; the last line is `key=value` pairs (`last_over_first`: the last blocks'
//! cost per datagram over the first blocks'; `new_over_known`: the new peers' average over
//! the known id's).

use clap::Parser;

/// Feeds a plaintext endpoint slot requests from many new node ids, then from one known id,
/// and prints the cost per datagram as the number of peers grows.
#[derive(Debug, Parser)]
#[command(name = "new_peers")]
struct Args {
    /// Distinct node ids (one request each).
    #[arg(long, default_value_t = 1_000_000)]
    peers: u64,
    /// Datagrams per block (the endpoint takes a whole block before the next is sent).
    #[arg(long, default_value_t = 1_000)]
    block: u64,
    /// Passed by `cargo bench` to every bench target; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    exon_benches::new_peers::run(args.peers, args.block);
}
