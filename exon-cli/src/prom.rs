//! `--metrics ADDR`: the endpoint's metrics (`exon::metrics`) in Prometheus' text format at
//! `http://ADDR/metrics`, served by a small HTTP/1.1 responder (one request per connection).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read; a longer one is answered 431.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request, and to read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's `metrics` recorder, starts recording
/// `handle`'s metrics every `every`, binds `addr` and serves them; returns the bound address
/// (port 0 picks a free one).
pub async fn serve(
    addr: SocketAddr,
    handle: exon::Handle,
    every: Duration,
) -> anyhow::Result<SocketAddr> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    metrics::set_global_recorder(recorder).context("a metrics recorder is installed already")?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind the metrics address {addr}"))?;
    let bound = listener.local_addr()?;
    let exporter = exon::metrics::Exporter::new(handle).interval(every);
    // One recording before the first scrape can come, so that no scrape sees nothing.
    exon::metrics::describe();
    exporter.record().await;
    exporter.spawn();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors, most likely: let some close.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let p = prometheus.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(CLIENT_TIMEOUT, answer(stream, &p)).await;
            });
        }
    });
    Ok(bound)
}

/// Reads one request head and answers it: `GET /metrics` (or `/`) gets the metrics,
/// anything else 404 or 405.
async fn answer(mut stream: TcpStream, prometheus: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return respond(&mut stream, "431 Request Header Fields Too Large", "").await;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next().unwrap_or(&[]), parts.next().unwrap_or(&[]));
    if method != b"GET" {
        return respond(&mut stream, "405 Method Not Allowed", "").await;
    }
    match path {
        b"/metrics" | b"/" => {
            prometheus.run_upkeep();
            respond(&mut stream, "200 OK", &prometheus.render()).await
        }
        _ => respond(&mut stream, "404 Not Found", "metrics are at /metrics\n").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
