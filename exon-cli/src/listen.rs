//! `exon listen`: bind a node and print each message it receives, or pipe each to a
//! command.

use std::io::Write;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use clap::Args;
use exon::Message;
use tokio::io::AsyncWriteExt;

use crate::node::{self, NodeOpts};

/// The options of `exon listen` (its help is in `main.rs`).
#[derive(Debug, Args)]
pub struct Opts {
    #[command(flatten)]
    node: NodeOpts,
    /// One JSON object per message and line: `id` (the sender's id, the receiver
    /// incarnation and the slot, joined by dots: unique, the same if a durable node hands it
    /// out again), `from` (the sender's node id), `length` (bytes), `encoding` (`utf8`, or
    /// `base64` when the payload is not UTF-8 text) and `payload` in that encoding.
    #[arg(long)]
    json: bool,
    /// Runs `sh -c CMD` for each message, the payload on its stdin (with EXON_FROM and
    /// EXON_ID in its environment), one at a time; the message is acknowledged to its
    /// sender only once the command exits 0, so a failed command leaves it unacknowledged.
    #[arg(long, value_name = "CMD")]
    exec: Option<String>,
    /// Keeps this node reachable by each --peer while the two are quiet: a keepalive (a
    /// datagram holding PING alone) to it after 1, 2, 4, then every 8 s without a datagram
    /// from it, so a NAT in front of this node keeps its mapping, and the peer learns the
    /// new address if the NAT moved it. For a listener behind a NAT whose senders are known.
    #[arg(long)]
    keep_reachable: bool,
    /// Exits after this many messages.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Serves the endpoint's metrics for Prometheus at http://ADDR/metrics (port 0: any
    /// free port; the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// How often the metrics are read from the endpoint.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = node::parse_duration)]
    metrics_interval: Duration,
}

/// Messages taken from the endpoint at once.
const TAKE: usize = 256;

/// Runs `exon listen`.
pub async fn run(o: Opts) -> anyhow::Result<ExitCode> {
    let mut n = o.node.resolve("127.0.0.1:7000")?;
    n.config.ack_after_processing = o.exec.is_some();
    let mut ep = node::bind(&n).await?;
    eprintln!("listening on {} node {}", ep.local_addr(), n.id.get());
    if o.keep_reachable {
        for (peer, _) in &n.peers {
            ep.keep_reachable(*peer, true)?;
        }
    }
    if let Some(addr) = o.metrics.clone().or(n.metrics.clone()) {
        let addr = node::resolve(&addr).context("--metrics")?;
        let bound = crate::prom::serve(addr, ep.handle(), o.metrics_interval).await?;
        eprintln!("metrics on http://{bound}/metrics");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut buf = Vec::with_capacity(TAKE);
    let mut seen = 0u64;
    let limit = o.count.unwrap_or(u64::MAX);
    let mut interrupted = std::pin::pin!(interrupted());
    while seen < limit {
        buf.clear();
        let want = TAKE.min((limit - seen).min(TAKE as u64) as usize);
        tokio::select! {
            n = ep.recv_many(&mut buf, want) => if n == 0 { break },
            _ = &mut interrupted => break,
        }
        for m in buf.drain(..) {
            seen += 1;
            match &o.exec {
                Some(cmd) => {
                    if let Err(e) = pipe(cmd, &m).await {
                        eprintln!("message {} not acknowledged: {e:#}", id_of(&m));
                    }
                }
                None if o.json => writeln!(out, "{}", json_line(&m))?,
                None => {
                    out.write_all(&m.payload)?;
                    if !m.payload.ends_with(b"\n") {
                        out.write_all(b"\n")?;
                    }
                }
            }
        }
        out.flush()?;
    }
    // Acknowledgements of the last messages still have to reach their senders.
    let report = ep.close(Duration::from_millis(500)).await;
    if report.undelivered > 0 {
        eprintln!(
            "{} messages were delivered and not taken (their senders see them unacknowledged)",
            report.undelivered
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves at Ctrl-C or SIGTERM.
pub async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// A message's id: sender, receiver incarnation and slot.
fn id_of(m: &Message) -> String {
    let (from, r, s) = m.stable_id();
    format!("{}.{r}.{s}", from.get())
}

/// The `--json` line of a message.
fn json_line(m: &Message) -> serde_json::Value {
    let (encoding, payload) = match std::str::from_utf8(&m.payload) {
        Ok(text) => ("utf8", text.to_string()),
        Err(_) => (
            "base64",
            base64::engine::general_purpose::STANDARD.encode(&m.payload),
        ),
    };
    serde_json::json!({
        "id": id_of(m),
        "from": m.from.get(),
        "length": m.payload.len(),
        "encoding": encoding,
        "payload": payload,
    })
}

/// Runs `cmd` with the message on its stdin; acknowledges the message if it exits 0.
async fn pipe(cmd: &str, m: &Message) -> anyhow::Result<()> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("EXON_FROM", m.from.get().to_string())
        .env("EXON_ID", id_of(m))
        .stdin(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run `{cmd}`"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input is not an error.
        let _ = stdin.write_all(&m.payload).await;
    }
    let status = child.wait().await?;
    if !status.success() {
        anyhow::bail!("`{cmd}` failed ({status})");
    }
    m.ack();
    Ok(())
}
