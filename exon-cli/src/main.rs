//! `exon`: exactly-once messaging from a shell. Keys (`keygen`), a listener that prints or
//! pipes what it receives (`listen`), a sender whose exit status is the verdicts (`send`), an
//! iperf-style benchmark between two processes or machines (`bench`), and Prometheus metrics
//! (`listen --metrics ADDR`).

mod bench;
mod keygen;
mod listen;
mod node;
mod prom;
mod send;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exactly-once messaging over UDP, from the command line.
///
/// Every datagram is sealed with the node's secret key (`exon keygen`); peers are named
/// `ID@HOST:PORT` and known by their public keys (a keyring file, or `--peer-key`). Options
/// can also come from a TOML file (`--config`), flags overriding it.
#[derive(Debug, Parser)]
#[command(name = "exon", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Writes a new secret key file and prints the public key, the self-certifying node id
    /// and the keyring line peers add.
    ///
    /// The key goes to FILE (mode 0600; an existing file is never overwritten); --show reads
    /// an existing one instead. The keyring line is `ID PUBLIC_KEY`, the line the peers'
    /// keyring files hold (--keyring FILE appends it to one).
    Keygen(keygen::Opts),
    /// Binds a node and prints each message it receives (or pipes each to a command).
    ///
    /// Each message is printed once: its payload and a newline (default), a JSON object
    /// per line (--json), or piped to a command (--exec). The first line on stderr says
    /// where it listens: `listening on ADDR node ID`. It runs until interrupted (Ctrl-C,
    /// SIGTERM) or --count messages came.
    Listen(listen::Opts),
    /// Sends messages (arguments, files, or lines of stdin); exits 0 only when every one
    /// was acknowledged.
    ///
    /// The arguments are sent first, then each --file whole, or else (no argument, no file,
    /// or --stdin) each line of stdin without its newline; then it waits for every verdict.
    /// Exit status: 0 when every message was acknowledged (the peer's application took it),
    /// 1 when some were not (stderr counts them by verdict: in doubt, not delivered,
    /// unacknowledged, refused), 2 on an error before sending (keys, addresses, flags).
    Send(send::Opts),
    /// Measures one-way messages or request/reply between two processes or machines.
    ///
    /// `exon bench server` on one side, `exon bench client` on the other, iperf-style.
    #[command(subcommand)]
    Bench(bench::Role),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Keygen(o) => keygen::run(&o),
        Command::Listen(o) => runtime().and_then(|rt| rt.block_on(listen::run(o))),
        Command::Send(o) => runtime().and_then(|rt| rt.block_on(send::run(o))),
        Command::Bench(role) => runtime().and_then(|rt| rt.block_on(bench::run(role))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// The exit status of a usage or set-up error (a key file missing, a bad address, ...).
pub const EXIT_ERROR: u8 = 2;

/// One current-thread runtime: the endpoint's driver and the command's tasks on one thread,
/// the layout the library recommends (and the one `compare` measures).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
