//! TCP on loopback: length-prefixed frames, the one-way sides, the RPC server and caller.

use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, oneshot};

use std::net::SocketAddr;
use std::sync::mpsc as std_mpsc;

use tokio::net::{TcpListener, TcpStream};

use crate::calls::{route, Caller, Pending};
use crate::harness::{Cmd, Progress, LOCALHOST};
use crate::message::{payload, seq_of, Seen};

/// Listens on loopback, hands the address to `addr_tx`, and accepts one connection (no
/// Nagle).
pub async fn accept_one(addr_tx: &std_mpsc::Sender<SocketAddr>) -> TcpStream {
    let l = TcpListener::bind(LOCALHOST).await.unwrap();
    addr_tx.send(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A connection to `addr` (no Nagle).
pub async fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Writes frames (u32 length, payload) of `size`-byte messages for every `Send` command;
/// flushes after each batch.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    w: W,
    size: usize,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    while let Some(cmd) = cmds.recv().await {
        if let Cmd::Send { start, n } = cmd {
            for seq in start..start + n {
                write_frame(&mut w, &payload(seq, size)).await;
            }
            w.flush().await.unwrap();
        }
    }
    w.shutdown().await.ok();
}

/// Writes one frame: `p`'s length (4 bytes, big-endian), then `p`.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, p: &[u8]) {
    let len = u32::try_from(p.len()).expect("frame length fits 32 bits");
    w.write_u32(len).await.unwrap();
    w.write_all(p).await.unwrap();
}

/// Reads one frame into `buf` with exact reads (its 4-byte length, then that many bytes);
/// false at a clean end of stream. A frame longer than `max` panics before anything is
/// allocated for it.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> bool {
    let len = match r.read_u32().await {
        Ok(l) => l as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return false,
        Err(e) => panic!("read: {e}"),
    };
    assert!(len <= max, "frame of {len} bytes, more than {max}");
    buf.resize(len, 0);
    r.read_exact(buf).await.unwrap();
    true
}

/// True when `buf` starts with a whole frame.
pub fn frame_buffered(buf: &[u8]) -> bool {
    buf.len() >= 4 && buf.len() >= 4 + u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize
}

/// Reads frames of `size`-byte messages until the end of the stream or `stop`, verifying
/// each into `progress`.
pub async fn read_frames<R: AsyncRead + Unpin>(
    r: R,
    size: usize,
    mut stop: oneshot::Receiver<()>,
    progress: Arc<Progress>,
) {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let (mut seen, mut buf) = (Seen::default(), Vec::new());
    while next_verified(&mut r, &mut buf, &mut seen, size, &mut stop).await {
        progress.verified(seen.count());
    }
}

/// Reads the next frame into `buf` and verifies its `size`-byte message exactly once into
/// `seen`; false at the end of the stream or once `stop` fires.
async fn next_verified<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    seen: &mut Seen,
    size: usize,
    stop: &mut oneshot::Receiver<()>,
) -> bool {
    tokio::select! {
        more = read_frame(r, buf, size) => {
            if more {
                seen.record(seq_of(buf, size));
            }
            more
        }
        _ = stop => false,
    }
}

/// Answers every framed `size`-byte request on a TCP connection (its read and write
/// halves, TLS or not) with an echo until `stop` or the end of the stream. Returns the
/// requests served (each verified exactly once).
pub async fn serve_tcp<R, W>(r: R, w: W, mut stop: oneshot::Receiver<()>, size: usize) -> u64
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let (mut seen, mut buf) = (Seen::default(), Vec::new());
    while next_verified(&mut r, &mut buf, &mut seen, size, &mut stop).await {
        write_frame(&mut w, &buf).await;
        // Flush when the next request is not already buffered whole.
        if !frame_buffered(r.buffer()) {
            w.flush().await.unwrap();
        }
    }
    seen.count()
}

/// A TCP caller multiplexing every caller over one connection (its read and write halves,
/// TLS or not): a writer task and a reader task that routes `size`-byte replies, both
/// pushed onto `tasks`.
pub fn tcp_caller<R, W>(
    r: R,
    w: W,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    size: usize,
) -> Caller
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let pending = Pending::default();
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    // Writer: every caller's requests through one buffered writer, flushed when no more
    // requests wait.
    tasks.push(tokio::spawn(async move {
        let mut w = BufWriter::with_capacity(64 * 1024, w);
        while let Some(mut req) = rx.recv().await {
            loop {
                write_frame(&mut w, &req).await;
                match rx.try_recv() {
                    Ok(r) => req = r,
                    Err(_) => break,
                }
            }
            w.flush().await.unwrap();
        }
    }));
    // Reader: demultiplexes replies to their callers.
    let router = pending.clone();
    tasks.push(tokio::spawn(async move {
        let mut r = BufReader::with_capacity(64 * 1024, r);
        let mut buf = Vec::new();
        while read_frame(&mut r, &mut buf, size).await {
            route(&router, Bytes::copy_from_slice(&buf), size);
        }
    }));
    Caller::Tcp {
        writer: tx,
        pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_buffered_once_whole() {
        assert!(!frame_buffered(&[0, 0, 0]));
        assert!(frame_buffered(&[0, 0, 0, 0]));
        assert!(!frame_buffered(&[0, 0, 0, 2, 9]));
        assert!(frame_buffered(&[0, 0, 0, 2, 9, 9, 1]));
    }
}
