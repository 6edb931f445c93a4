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

use std::time::{Duration, Instant};

use clap::Parser;
use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::frame::{put_reqslots, Header};
use exon::proto::{Config, Security};
use exon::NodeId;
use tokio::net::UdpSocket;

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

const VICTIM: NodeId = NodeId::from_const(1);

/// A REQSLOTS datagram from `src` to the victim.
fn request(src: NodeId, buf: &mut Vec<u8>) {
    buf.clear();
    Header::new(src, VICTIM).encode(buf);
    put_reqslots(buf, 1, 4, 1);
}

/// Sends `count` requests, the `i`-th from `id(i)`, in blocks; returns the time each block
/// took, from its first send until the endpoint counted its last datagram.
async fn feed(
    ep: &Endpoint,
    sock: &UdpSocket,
    count: u64,
    block: u64,
    id: impl Fn(u64) -> NodeId,
) -> Vec<Duration> {
    let to = ep.local_addr();
    let mut buf = Vec::new();
    let mut times = Vec::new();
    let mut base = ep.stats().await.expect("stats").node.datagrams_in;
    let mut i = 0;
    while i < count {
        let n = block.min(count - i);
        let start = Instant::now();
        for k in 0..n {
            request(id(i + k), &mut buf);
            sock.send_to(&buf, to).await.expect("send");
        }
        let want = base + n;
        let deadline = start + Duration::from_secs(10);
        loop {
            let got = ep.stats().await.expect("stats").node.datagrams_in;
            if got >= want || Instant::now() > deadline {
                base = got;
                break;
            }
            tokio::task::yield_now().await;
        }
        times.push(start.elapsed());
        i += n;
    }
    times
}

fn per_datagram_us(times: &[Duration], block: u64) -> f64 {
    let total: Duration = times.iter().sum();
    total.as_secs_f64() * 1e6 / (times.len() as u64 * block).max(1) as f64
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let cfg = EndpointConfig::default().with_protocol(Config::default());
        let ep = Endpoint::bind("127.0.0.1:0", VICTIM, Security::InsecurePlaintext, cfg)
            .await
            .expect("bind");
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("socket");
        let block = args.block.max(1);
        let new = feed(&ep, &sock, args.peers, block, |i| {
            NodeId::new(1_000 + i).expect("id")
        })
        .await;
        let known = feed(&ep, &sock, args.peers.min(100_000), block, |_| {
            NodeId::from_const(2)
        })
        .await;
        let st = ep.stats().await.expect("stats");
        println!(
            "plaintext endpoint, REQSLOTS from {} new ids then {} from one known id, blocks of {}",
            args.peers,
            args.peers.min(100_000),
            block
        );
        println!("| peers so far | us per datagram (block) |");
        println!("|---|---|");
        let mut mark = 1;
        for (k, t) in new.iter().enumerate() {
            let peers = (k as u64 + 1) * block;
            if peers >= mark || k + 1 == new.len() {
                let us = t.as_secs_f64() * 1e6 / block as f64;
                println!("| {peers} | {us:.2} |");
                mark = peers * 10;
            }
        }
        let blocks = new.len().clamp(1, 10);
        let first = per_datagram_us(&new[..blocks], block);
        let last = per_datagram_us(&new[new.len() - blocks..], block);
        let new_avg = per_datagram_us(&new, block);
        let known_avg = per_datagram_us(&known, block);
        println!(
            "first {blocks} blocks {first:.2} us, last {blocks} blocks {last:.2} us per datagram; \
             all new ids {new_avg:.2} us, one known id {known_avg:.2} us; receiver incarnations {}, \
             evictions {}, datagrams in {}",
            st.node.incarnations,
            st.node.evictions,
            st.node.datagrams_in
        );
        println!(
            "peers={} first_us={first:.3} last_us={last:.3} last_over_first={:.3} new_us={new_avg:.3} known_us={known_avg:.3} new_over_known={:.3}",
            args.peers,
            last / first,
            new_avg / known_avg
        );
    });
}
