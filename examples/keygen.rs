//! Generates a node's secret key file and prints what its peers need: the public key, the
//! node's self-certifying id, and a keyring line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use exon::keyfile::{generate_secret, read_secret, write_secret};

/// Writes a new X25519 secret key for an exon node to `--out` (mode 0600, never overwriting),
/// or with `--show` reads an existing one; prints the public key, the self-certifying node
/// id, and the keyring line peers add (`<node id> <public key>`).
#[derive(Debug, Parser)]
struct Opts {
    /// The secret key file to create.
    #[arg(long, conflicts_with = "show")]
    out: Option<PathBuf>,
    /// An existing secret key file to read instead.
    #[arg(long)]
    show: Option<PathBuf>,
    /// The node id to print in the keyring line (default: the self-certifying id).
    #[arg(long)]
    id: Option<u64>,
}

fn main() -> ExitCode {
    let o = Opts::parse();
    let secret = match (&o.out, &o.show) {
        (Some(path), _) => {
            let key = generate_secret();
            if let Err(e) = write_secret(path, &key) {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
            println!("secret key written to {}", path.display());
            key
        }
        (None, Some(path)) => match read_secret(path) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        },
        (None, None) => {
            eprintln!("error: give --out FILE (new key) or --show FILE (existing key)");
            return ExitCode::from(2);
        }
    };
    let public = secret.public_key();
    let self_id = public.self_certifying_id();
    println!("public key:         {public}");
    println!("self-certifying id: {}", self_id.get());
    println!(
        "keyring line:       {} {public}",
        o.id.unwrap_or(self_id.get())
    );
    ExitCode::SUCCESS
}
