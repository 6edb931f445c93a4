//! `exon keygen`: a new secret key file, and what peers need to know of it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use exon::keyfile::{generate_secret, read_secret, write_secret};
use exon::proto::SecretKey;

/// The options of `exon keygen` (its help is in `main.rs`).
#[derive(Debug, Args)]
pub struct Opts {
    /// The secret key file to create.
    #[arg(long, value_name = "FILE", required_unless_present = "show")]
    out: Option<PathBuf>,
    /// Reads an existing secret key file instead of making one.
    #[arg(long, value_name = "FILE", conflicts_with = "out")]
    show: Option<PathBuf>,
    /// The node id of the keyring line (default: the key's self-certifying id).
    #[arg(long)]
    id: Option<u64>,
    /// Also appends the keyring line to this keyring file (created if missing), the file
    /// `--keyring` of the other commands reads.
    #[arg(long, value_name = "FILE")]
    keyring: Option<PathBuf>,
}

/// Runs `exon keygen`.
pub fn run(o: &Opts) -> anyhow::Result<ExitCode> {
    let secret: SecretKey = match (&o.out, &o.show) {
        (Some(path), _) => {
            if path.exists() {
                bail!(
                    "{} exists: a secret key is never overwritten (remove it, or read it with \
                     `exon keygen --show {}`)",
                    path.display(),
                    path.display()
                );
            }
            let key = generate_secret();
            write_secret(path, &key)
                .with_context(|| format!("cannot write the key file {}", path.display()))?;
            eprintln!("secret key written to {} (keep it private)", path.display());
            key
        }
        (None, Some(path)) => read_secret(path).map_err(|e| anyhow!("{e}"))?,
        (None, None) => bail!("give --out FILE (a new key) or --show FILE (an existing one)"),
    };
    let public = secret.public_key();
    let self_id = public.self_certifying_id().get();
    let id = match o.id {
        Some(id) if exon::NodeId::new(id).is_none() => {
            bail!("node id {id} is above the largest, 2^62 - 1")
        }
        Some(id) => id,
        None => self_id,
    };
    let line = format!("{id} {public}");
    if let Some(ring) = &o.keyring {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(ring)
            .with_context(|| format!("cannot open the keyring file {}", ring.display()))?;
        writeln!(f, "{line}")
            .with_context(|| format!("cannot write the keyring file {}", ring.display()))?;
        eprintln!("keyring line appended to {}", ring.display());
    }
    println!("public key:         {public}");
    println!("self-certifying id: {self_id}");
    println!("keyring line:       {line}");
    Ok(ExitCode::SUCCESS)
}
