//! The sans-IO core's own cost: two exon nodes in memory move `--messages` 1 KB messages one
//! way, with no sockets and no runtime. Made to run under callgrind, which counts
//! instructions (stable on a noisy machine):
//!
//! ```text
//! cargo bench -p exon-benches --bench mem_pair --no-run
//! valgrind --tool=callgrind target/release/deps/mem_pair-* --messages 200000
//! ```
//!
//! Options: `--messages N` (default 200000), `--datagram B` exon's `max_datagram_size`
//! (default 1472), `--warmup N` messages sent first and not counted (default 10000). Prints
//! messages/s and datagrams per message; the last line is `key=value` pairs.

#[path = "common/mod.rs"]
mod common;

use common::MemPair;

fn main() {
    let mut messages = 200_000u64;
    let mut datagram = common::DEFAULT_EXON_DATAGRAM;
    let mut warmup = 10_000u64;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{arg} needs a number"))
        };
        match arg.as_str() {
            "--bench" => {}
            "--messages" => messages = val(),
            "--datagram" => datagram = val() as usize,
            "--warmup" => warmup = val(),
            other => panic!("unknown argument {other:?}"),
        }
    }
    let mut pair = MemPair::new(datagram);
    pair.run(warmup);
    let before = pair.datagrams;
    let took = pair.run(messages);
    let rate = messages as f64 / took.as_secs_f64();
    let per = (pair.datagrams - before) as f64 / messages as f64;
    println!("exon core in memory: {messages} messages of 1 KB, {datagram}-byte datagrams");
    println!("{rate:.0} messages/s, {per:.3} datagrams per message");
    println!(
        "messages={messages} datagram={datagram} msgs_per_s={rate:.0} datagrams_per_msg={per:.3}"
    );
}
