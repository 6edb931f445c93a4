//! `exon send`: messages to one peer, and an exit status from their verdicts.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use exon::endpoint::{Error, Receipt, ReceiptError};
use exon::proto::SendError;

use crate::node::{self, NodeOpts};

/// The options of `exon send` (its help is in `main.rs`).
#[derive(Debug, Args)]
pub struct Opts {
    #[command(flatten)]
    node: NodeOpts,
    /// The peer to send to (default: the only --peer).
    #[arg(long, value_name = "ID")]
    to: Option<u64>,
    /// Messages to send.
    #[arg(value_name = "MESSAGE")]
    messages: Vec<String>,
    /// A file to send as one message (repeatable).
    #[arg(long = "file", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Sends each line of stdin as a message (the default when no message or file is
    /// given).
    #[arg(long)]
    stdin: bool,
    /// Gives each message up if not acknowledged this long after it was sent (verdict in
    /// doubt, or not delivered if no copy ever left).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = node::parse_duration)]
    deadline: Duration,
    /// Prints a line per message on stdout: its id and verdict.
    #[arg(long, short)]
    verbose: bool,
}

/// Runs `exon send`.
pub async fn run(o: Opts) -> anyhow::Result<ExitCode> {
    let n = o.node.resolve("")?;
    let mut n = n;
    if n.bind.is_empty() {
        n.bind = node::any_addr_for(&n.peers).to_string();
    }
    let to = node::target(&n, o.to)?;
    let mut payloads: Vec<Bytes> = o.messages.iter().map(|m| Bytes::from(m.clone())).collect();
    for f in &o.files {
        let bytes =
            std::fs::read(f).with_context(|| format!("cannot read the file {}", f.display()))?;
        payloads.push(bytes.into());
    }
    let ep = node::bind(&n).await?;
    let mut receipts = Vec::new();
    let send = |p: Bytes| {
        let ep = &ep;
        async move {
            ep.send_within(to, p, o.deadline)
                .await
                .context("send refused")
        }
    };
    for p in payloads {
        receipts.push(send(p).await?);
    }
    if o.stdin || (o.messages.is_empty() && o.files.is_empty()) {
        // Lines are read on a thread of their own: stdin blocks.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(1024);
        std::thread::spawn(move || {
            let mut lock = std::io::stdin().lock();
            loop {
                let mut line = Vec::new();
                match lock.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if line.ends_with(b"\n") {
                            line.pop();
                        }
                        if tx.blocking_send(Ok(line)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        break;
                    }
                }
            }
        });
        while let Some(line) = rx.recv().await {
            let line = line.context("cannot read stdin")?;
            receipts.push(send(line.into()).await?);
        }
    }
    let verdicts = Verdicts::wait(receipts, o.verbose).await;
    let heard = ep.stats().await.is_some_and(|s| s.node.datagrams_in > 0);
    // Verdicts are in: close at once (nothing is outstanding).
    ep.close(Duration::from_millis(100)).await;
    eprintln!("{}", verdicts.summary());
    for id in &verdicts.no_key {
        // Refused before anything left: the peer's key is missing here, not the peer there.
        eprintln!(
            "node {id} has no public key in the keyring given{}: nothing was sent to it. Add \
             its keyring line (`exon keygen` printed it) there, or give --peer-key {id}=KEY.",
            n.keyring
                .as_ref()
                .map(|k| format!(" ({})", k.display()))
                .unwrap_or_default(),
        );
    }
    let unkeyed = verdicts.no_key_messages;
    if !verdicts.all_acknowledged() && !heard && unkeyed < verdicts.unacknowledged_total() {
        let at = n.peers.iter().find(|(id, _)| *id == to).map(|(_, a)| a);
        eprintln!(
            "nothing came back from node {}{}: is `exon listen` running there, with this \
             node's public key in its keyring? (A listener that heard node {} from another \
             address lately does not hear it from this one yet: give `exon send` a fixed \
             --bind address.)",
            to.get(),
            at.map(|a| format!(" at {a}")).unwrap_or_default(),
            n.id.get()
        );
    }
    Ok(if verdicts.all_acknowledged() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Messages counted by verdict.
#[derive(Debug, Default, PartialEq, Eq)]
struct Verdicts {
    acknowledged: u64,
    in_doubt: u64,
    not_delivered: u64,
    unacknowledged: u64,
    refused: u64,
    /// Peers refused because the keyring has no public key for them, and how many
    /// messages were refused so.
    no_key: std::collections::BTreeSet<u64>,
    no_key_messages: u64,
}

impl Verdicts {
    /// Waits for every receipt, in order.
    async fn wait(receipts: Vec<Receipt>, verbose: bool) -> Verdicts {
        let mut v = Verdicts::default();
        for r in receipts {
            let id = r.id().0;
            let verdict = r.await;
            v.count(&verdict);
            if verbose {
                match verdict {
                    Ok(_) => println!("{id} acknowledged"),
                    Err(e) => println!("{id} {}", kind(&e)),
                }
            }
        }
        v
    }

    fn count(&mut self, verdict: &Result<exon::MsgId, ReceiptError>) {
        let c = match verdict {
            Ok(_) => &mut self.acknowledged,
            Err(ReceiptError::InDoubt) => &mut self.in_doubt,
            Err(ReceiptError::NotDelivered) => &mut self.not_delivered,
            Err(ReceiptError::Refused(e)) => {
                if let Error::Send(SendError::UnknownKey(id)) = e {
                    self.no_key.insert(id.get());
                    self.no_key_messages += 1;
                }
                &mut self.refused
            }
            Err(_) => &mut self.unacknowledged,
        };
        *c += 1;
    }

    fn total(&self) -> u64 {
        self.acknowledged + self.in_doubt + self.not_delivered + self.unacknowledged + self.refused
    }

    /// The messages not acknowledged, whatever their verdict.
    fn unacknowledged_total(&self) -> u64 {
        self.total() - self.acknowledged
    }

    fn all_acknowledged(&self) -> bool {
        self.acknowledged == self.total()
    }

    /// `N sent: N acknowledged` and, if any, the other verdicts with their counts.
    fn summary(&self) -> String {
        let mut s = format!("{} sent: {} acknowledged", self.total(), self.acknowledged);
        for (n, what) in [
            (
                self.in_doubt,
                "in doubt (delivered at most once, maybe not at all)",
            ),
            (self.not_delivered, "not delivered (certainly not)"),
            (
                self.unacknowledged,
                "unacknowledged (this node stopped first)",
            ),
            (self.refused, "refused (never sent)"),
        ] {
            if n > 0 {
                s.push_str(&format!(", {n} {what}"));
            }
        }
        s
    }
}

/// A verdict's name, as `--verbose` prints it.
fn kind(e: &ReceiptError) -> &'static str {
    match e {
        ReceiptError::InDoubt => "in_doubt",
        ReceiptError::NotDelivered => "not_delivered",
        ReceiptError::Refused(_) => "refused",
        _ => "unacknowledged",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_each_verdict() {
        let mut v = Verdicts::default();
        v.count(&Ok(exon::MsgId(1)));
        v.count(&Err(ReceiptError::InDoubt));
        v.count(&Err(ReceiptError::InDoubt));
        v.count(&Err(ReceiptError::NotDelivered));
        assert!(!v.all_acknowledged());
        let s = v.summary();
        assert!(s.starts_with("4 sent: 1 acknowledged, 2 in doubt"), "{s}");
        assert!(s.contains("1 not delivered"), "{s}");
        assert!(!s.contains("refused"), "{s}");
        assert!(Verdicts::default().all_acknowledged());
    }

    #[test]
    fn a_refusal_for_a_missing_key_names_the_peer() {
        let mut v = Verdicts::default();
        let three = exon::NodeId::new(3).unwrap();
        v.count(&Err(ReceiptError::Refused(Error::Send(
            SendError::UnknownKey(three),
        ))));
        v.count(&Err(ReceiptError::Refused(Error::Closed)));
        assert_eq!(v.refused, 2);
        assert_eq!(v.no_key.iter().copied().collect::<Vec<_>>(), [3]);
        assert_eq!(v.no_key_messages, 1);
        assert_eq!(v.unacknowledged_total(), 2);
    }
}
