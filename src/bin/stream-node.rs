//! One end of the stream crash test (`tests/stream_kill.rs`), as a process of its own, to be
//! killed with SIGKILL at any moment and started again on the same directory: a durable
//! byte stream from `send` to `recv` goes on across restarts of either end.
//!
//! `send` opens a stream to the receiver on its first start (and notes `opened` in its file
//! `--out`); started again, it takes the stream back from `take_recovered_streams`. It
//! writes the pseudo-random source `--seed` (`exon_testkit::procs::source`) from the
//! stream's `write_offset` (what was written and stored before the restart) to `--bytes`,
//! shuts its side, reads the receiver's side to its end, waits until the receiver has read
//! everything (`finished`), writes `--done` and exits.
//!
//! `recv` accepts the stream (or takes it back after a restart) and appends what it reads
//! to its file `--out` before it reads again: on a durable stream a chunk read to its end
//! counts as read only once the application reads again, so after a restart the stream
//! goes on at `read_offset`, after bytes the file has, and the first `file length -
//! read_offset` bytes read are skipped (`--work-ms` between the write and the next read
//! makes that case common; `--log` notes both figures at each start). At the end of the
//! stream it writes `--done`, shuts its side, and then runs until killed: the sender may
//! still need acknowledgements.
//!
//! ```text
//! stream-node recv --dir /tmp/b --id 2 --bind 127.0.0.1:7002 --peer 127.0.0.1:7001 --out /tmp/b.bytes --done /tmp/b.done
//! stream-node send --dir /tmp/a --id 1 --bind 127.0.0.1:7001 --peer 127.0.0.1:7002 --out /tmp/a.notes --done /tmp/a.done --bytes 1048576
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use exon::endpoint::Stream;
use exon::EndpointConfig;
use exon_testkit::procs::source;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod node;

use node::Role;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// An end of the stream crash test.
#[derive(Debug, Parser)]
struct Opts {
    // Its side (`send`, `recv`), --id, --dir, --bind, --peer.
    #[command(flatten)]
    node: node::Side,
    /// The application's own file: the bytes read (`recv`), or its notes (`send`).
    #[arg(long)]
    out: PathBuf,
    /// Written once this end's part is done.
    #[arg(long)]
    done: PathBuf,
    /// Bytes in the stream (`send`).
    #[arg(long, default_value_t = 0)]
    bytes: u64,
    /// The source's seed (`send`).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bytes written a second at most (`send`; 0: as fast as the stream takes them).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Milliseconds of work after each read, between writing the bytes to `--out` and
    /// reading again (`recv`): a kill then finds bytes in the file that the stream does not
    /// count as read.
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// Where each start with a stream notes the file's length and the stream's `read_offset`
    /// (`recv`).
    #[arg(long)]
    log: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let o = Opts::parse();
    if o.node.role == Role::Send && o.done.exists() {
        // Its part was done (the receiver read every byte): nothing to send.
        return Ok(());
    }
    let (mut ep, other) = o.node.endpoint(EndpointConfig::default()).await?;
    let mut got = ep.take_recovered_streams();
    if got.len() > 1 {
        return Err(format!("{} streams recovered, one opened", got.len()).into());
    }
    match o.node.role {
        Role::Send => {
            let (notes, _) = node::open_lines(&o.out)?;
            let opened = notes.lines().any(|l| l == "opened");
            let mut s = match got.pop() {
                Some(s) => s,
                // (A kill between `open_stream` and the opening's journal record, a few
                // milliseconds after a start, would end here too: the test kills later.)
                None if opened => {
                    return Err(
                        "send: the stream opened before this start was not recovered".into(),
                    )
                }
                None => {
                    let s = ep.handle().open_stream(other)?;
                    append(&o.out, b"opened\n")?;
                    s
                }
            };
            send(&mut s, &o).await?;
            File::create(&o.done)?;
            drop(s);
            let _ = ep.close(Duration::from_secs(2)).await;
            Ok(())
        }
        Role::Recv => {
            let have = std::fs::metadata(&o.out).map_or(0, |m| m.len());
            let mut s = match got.pop() {
                Some(s) => Some(s),
                None if have == 0 => Some(ep.accept_stream().await.ok_or("recv: closed")?),
                // Read to its end before, and closed: the sender is done.
                None if o.done.exists() => None,
                None => {
                    let lost = "bytes read before this start, and the stream was not recovered";
                    return Err(format!("recv: {have} {lost}").into());
                }
            };
            if let Some(s) = &mut s {
                recv(s, &o, have).await?;
            }
            // Runs until killed, the stream kept: the sender may still need
            // acknowledgements.
            std::future::pending().await
        }
    }
}

/// Writes the source from the stream's `write_offset` to `--bytes`, shuts this side, reads
/// the receiver's side to its end (it writes nothing), and waits until the receiver has read
/// every byte.
async fn send(s: &mut Stream, o: &Opts) -> Res<()> {
    let from = s.write_offset();
    if from > o.bytes {
        return Err(format!(
            "send: write_offset {from} past the stream's {} bytes",
            o.bytes
        )
        .into());
    }
    let started = tokio::time::Instant::now();
    let mut buf = vec![0u8; 64 << 10];
    let mut at = from;
    while at < o.bytes {
        let len = (o.bytes - at).min(buf.len() as u64) as usize;
        source(o.seed, at, &mut buf[..len]);
        s.write_all(&buf[..len]).await?;
        at += len as u64;
        if o.rate > 0 {
            let due = Duration::from_secs_f64((at - from) as f64 / o.rate as f64);
            tokio::time::sleep_until(started + due).await;
        }
    }
    s.shutdown().await?;
    let mut tail = [0u8; 64];
    if s.read(&mut tail).await? != 0 {
        return Err("send: the receiver wrote bytes".into());
    }
    s.finished().await?;
    Ok(())
}

/// Reads the stream to its end, appending to `--out` what the file does not have yet
/// (`have` bytes before this start), then writes `--done` and shuts this side.
async fn recv(s: &mut Stream, o: &Opts, have: u64) -> Res<()> {
    // Bytes read again that the file has: the stream goes on after those dealt with.
    let at = s.read_offset();
    if let Some(log) = &o.log {
        append(log, format!("{have} {at}\n").as_bytes())?;
    }
    let mut skip = have.checked_sub(at).ok_or_else(|| {
        format!("recv: read_offset {at} past the {have} bytes of the file: bytes lost")
    })?;
    // Plain writes, no fsync: a SIGKILL keeps what was written (the page cache outlives
    // the process); only a machine's crash would lose it, and this test kills processes.
    let mut file = OpenOptions::new().create(true).append(true).open(&o.out)?;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let dup = skip.min(n as u64) as usize;
        skip -= dup as u64;
        // Written before the next read: only then is the chunk counted as read.
        file.write_all(&buf[dup..n])?;
        if o.work_ms > 0 {
            tokio::time::sleep(Duration::from_millis(o.work_ms)).await;
        }
    }
    if skip > 0 {
        return Err(format!("recv: the stream ended {skip} bytes before the file's end").into());
    }
    File::create(&o.done)?;
    s.shutdown().await?;
    s.finished().await?;
    Ok(())
}

/// Appends `line` to the file at `path`.
fn append(path: &std::path::Path, line: &[u8]) -> Res<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    f.write_all(line)?;
    Ok(())
}
