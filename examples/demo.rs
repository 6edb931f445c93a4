//! The main job: two endpoints on 127.0.0.1 exchange messages over real UDP with loss,
//! duplication and reordering injected by an in-process [`LossySocket`], then the run is
//! verified: every message delivered exactly once and acknowledged.
//!
//! ```sh
//! cargo run --release --example demo -- --count 100000 --loss 0.05 --dup 0.01 --reorder 0.01
//! ```
//! Exits non-zero if exactly-once did not hold.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use exon::endpoint::{Endpoint, EndpointConfig, Faults, LossySocket};
use exon::NodeId;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::net::UdpSocket;

/// Command-line options.
struct Opts {
    count: u64,
    faults: Faults,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        count: 100_000,
        faults: Faults::default(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut val = || args.next().ok_or(format!("{flag} needs a value"));
        let bad = |e: &dyn std::fmt::Display| format!("bad value for {flag}: {e}");
        match flag.as_str() {
            "--count" => o.count = val()?.parse().map_err(|e| bad(&e))?,
            "--loss" => o.faults.loss = val()?.parse().map_err(|e| bad(&e))?,
            "--dup" => o.faults.duplicate = val()?.parse().map_err(|e| bad(&e))?,
            "--reorder" => o.faults.reorder = val()?.parse().map_err(|e| bad(&e))?,
            "--seed" => o.faults.seed = val()?.parse().map_err(|e| bad(&e))?,
            _ => {
                return Err(format!(
                    "unknown flag {flag}; use --count N --loss P --dup P --reorder P --seed S"
                ))
            }
        }
    }
    Ok(o)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(opts).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(o: Opts) -> Result<bool, Box<dyn std::error::Error>> {
    let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
    let cfg = EndpointConfig::default();
    let sock = |seed| async move {
        let s = UdpSocket::bind("127.0.0.1:0").await?;
        Ok::<_, std::io::Error>(LossySocket::new(s, Faults { seed, ..o.faults }))
    };
    let a_sock = std::sync::Arc::new(sock(o.faults.seed).await?);
    let b_sock = std::sync::Arc::new(sock(o.faults.seed ^ 0xb).await?);
    let a = Endpoint::builder(a_id)
        .config(cfg.clone())
        .with_socket(a_sock.clone())?;
    let mut b = Endpoint::builder(b_id)
        .config(cfg)
        .with_socket(b_sock.clone())?;
    a.add_peer(b_id, b.local_addr());
    b.add_peer(a_id, a.local_addr());

    println!(
        "exon demo: {} messages n1 -> n2 over 127.0.0.1, loss {:.1} %, duplication {:.1} %, reordering {:.1} %",
        o.count,
        o.faults.loss * 100.0,
        o.faults.duplicate * 100.0,
        o.faults.reorder * 100.0
    );
    let bar = ProgressBar::new(o.count);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} delivered {per_sec} eta {eta}",
    )?);
    let start = Instant::now();
    let count = o.count;
    let sender = a.handle();
    let send_task = tokio::spawn(async move {
        let mut receipts = Vec::with_capacity(count as usize);
        for i in 0..count {
            receipts.push(sender.send(b_id, i.to_be_bytes().to_vec()).await?);
        }
        let mut acked = 0u64;
        for r in receipts {
            if r.await.is_ok() {
                acked += 1;
            }
        }
        Ok::<u64, exon::endpoint::Error>(acked)
    });

    let mut seen = vec![false; count as usize];
    let (mut delivered, mut duplicates, mut foreign) = (0u64, 0u64, 0u64);
    while delivered < count {
        let m = match tokio::time::timeout(Duration::from_secs(30), b.recv()).await {
            Ok(Some(m)) => m,
            _ => break,
        };
        let Ok(bytes) = <[u8; 8]>::try_from(&m.payload[..]) else {
            foreign += 1;
            continue;
        };
        match seen.get_mut(u64::from_be_bytes(bytes) as usize) {
            Some(s) if *s => duplicates += 1,
            Some(s) => {
                *s = true;
                delivered += 1;
                bar.inc(1);
            }
            None => foreign += 1,
        }
    }
    let acked = tokio::time::timeout(Duration::from_secs(30), send_task)
        .await
        .map_err(|_| "timed out waiting for acknowledgements")???;
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    let a_report = a.close(Duration::from_secs(5)).await;
    let b_report = b.close(Duration::from_secs(1)).await;
    let s = a_report.stats.node;
    let injected = (
        a_sock.dropped() + b_sock.dropped(),
        a_sock.duplicated() + b_sock.duplicated(),
        a_sock.reordered() + b_sock.reordered(),
    );
    println!(
        "injected: {} datagrams dropped, {} duplicated, {} reordered",
        injected.0, injected.1, injected.2
    );
    println!(
        "sent={} delivered={delivered} duplicates={duplicates} acknowledged={acked} \
         throughput={:.0} msg/s retransmissions={} (lost by ACKs {}, by timeout {}, tail probes {}) \
         elapsed={:.2}s",
        s.sent,
        delivered as f64 / elapsed.as_secs_f64(),
        s.retransmissions,
        s.losses_detected,
        s.timeouts,
        s.tail_probes,
        elapsed.as_secs_f64()
    );
    let dropped_by_receiver = b_report.stats.node.duplicates_dropped;
    println!("receiver dropped {dropped_by_receiver} duplicate tokens before delivery");
    let ok = duplicates == 0
        && foreign == 0
        && delivered == count
        && acked == count
        && a_report.unacknowledged.is_empty();
    if ok {
        println!("OK: exactly-once held");
    } else {
        println!("FAILED: exactly-once did not hold");
    }
    Ok(ok)
}
