//! An endpoint's metrics for Prometheus: two endpoints exchange messages while
//! `exon::metrics` records their counters and gauges into `metrics-exporter-prometheus`'s
//! recorder, which a few lines of tokio serve at `http://ADDR/metrics`.
//!
//! ```text
//! cargo run --example metrics -- --addr 127.0.0.1:9898 --secs 60
//! curl -s http://127.0.0.1:9898/metrics | grep exon_messages
//! ```
//!
//! The names are documented in `docs/metrics.md`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use exon::keyfile::generate_group;
use exon::proto::Security;
use exon::{Endpoint, EndpointConfig, NodeId};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves the metrics of two endpoints sending to each other on 127.0.0.1.
#[derive(Debug, Parser)]
struct Opts {
    /// Where to serve the metrics (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:9898")]
    addr: SocketAddr,
    /// How long to run.
    #[arg(long, default_value_t = 30)]
    secs: u64,
    /// Messages sent a second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = Opts::parse();
    // 1. The Prometheus recorder, installed for the whole process.
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    // 2. Two endpoints, each recorded every second (series labeled node="1", node="2").
    let (a_id, b_id) = (NodeId::from_const(1), NodeId::from_const(2));
    let ids = generate_group(&[a_id, b_id]);
    let mut ends = Vec::new();
    for (id, identity) in [a_id, b_id].into_iter().zip(ids) {
        let security = Security::Sealed(identity);
        let ep = Endpoint::bind("127.0.0.1:0", id, security, EndpointConfig::default()).await?;
        exon::metrics::spawn(ep.handle(), Duration::from_secs(1));
        ends.push(ep);
    }
    let mut b = ends.pop().ok_or("two endpoints")?;
    let a = ends.pop().ok_or("two endpoints")?;
    a.add_peer(b_id, b.local_addr());
    tokio::spawn(async move { while b.recv().await.is_some() {} });

    // 3. The HTTP side: every request gets the text the recorder renders.
    let listener = tokio::net::TcpListener::bind(o.addr).await?;
    println!("metrics at http://{}/metrics", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = prometheus.render();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                // One read is enough for a scraper's GET; the answer closes the connection.
                if conn.read(&mut request).await.is_err() {
                    return;
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });

    // 4. Traffic: `rate` messages a second from a to b, for `secs`.
    let end = Instant::now() + Duration::from_secs(o.secs);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = (o.rate / 100).max(1);
    while Instant::now() < end {
        tick.tick().await;
        for i in 0..per_tick {
            drop(a.send(b_id, format!("message {i}")).await?);
        }
    }
    a.close(Duration::from_secs(1)).await;
    Ok(())
}
