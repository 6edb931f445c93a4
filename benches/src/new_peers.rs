//! The cost of a new peer: slot requests from many new node ids against one known id's.

use std::time::{Duration, Instant};

use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::frame::{put_reqslots, Header};
use exon::proto::{Config, Security};
use exon::NodeId;
use tokio::net::UdpSocket;

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

/// Feeds the endpoint `peers` requests from new ids, then as many (at most 100 000) from
/// one known id, in blocks of `block`; prints a table whose last line is `key=value` pairs.
pub fn run(peers: u64, block: u64) {
    crate::harness::runtime(0).block_on(async {
        let cfg = EndpointConfig::default().with_protocol(Config::default());
        let ep = Endpoint::bind("127.0.0.1:0", VICTIM, Security::InsecurePlaintext, cfg)
            .await
            .expect("bind");
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("socket");
        let block = block.max(1);
        let new = feed(&ep, &sock, peers, block, |i| {
            NodeId::new(1_000 + i).expect("id")
        })
        .await;
        let known = feed(&ep, &sock, peers.min(100_000), block, |_| {
            NodeId::from_const(2)
        })
        .await;
        let st = ep.stats().await.expect("stats");
        println!(
            "plaintext endpoint, REQSLOTS from {} new ids then {} from one known id, blocks of {}",
            peers,
            peers.min(100_000),
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
            peers,
            last / first,
            new_avg / known_avg
        );
    });
}
