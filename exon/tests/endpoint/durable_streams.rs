//! Durable streams (issue 44, item 2): on durable endpoints each side of a stream keeps its
//! position in the journal (marks), so a stream goes on across restarts of either end:
//! `take_recovered_streams` hands it back, reading goes on at `read_offset` (after what was
//! read and dealt with: a chunk counts as read once the application reads again), writing
//! at `write_offset` (what was stored), and the bytes arrive exact. With the rule
//! `durable_flows` off, nothing is recovered and the stream breaks (old behaviour).

use std::time::Duration;

use exon::endpoint::{Endpoint, Stream};
use exon::NodeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use super::common::{durable_flows, stop};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(20);

fn pair(a: &Endpoint, b: &Endpoint) {
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
}

/// The stream's bytes: a pattern no shift of itself matches (`procs::source`).
pub(super) fn data(len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    exon_testkit::procs::source(0x2545_f491_4f6c_dd1d, 0, &mut bytes);
    bytes
}

/// Reads from `s` into `store` (the application's own store: what it dealt with) until
/// `until` bytes are there or the stream ends; `skip`: bytes read again that the store
/// already holds (a restart resumed before them).
async fn read_into(s: &mut Stream, store: &mut Vec<u8>, until: usize) -> std::io::Result<()> {
    let mut skip = store.len() as u64 - s.read_offset();
    let mut buf = vec![0u8; 7000];
    while store.len() < until {
        let n = timeout(LIMIT, s.read(&mut buf)).await.expect("in time")?;
        if n == 0 {
            break;
        }
        let dup = (skip as usize).min(n);
        skip -= dup as u64;
        store.extend_from_slice(&buf[dup..n]);
    }
    Ok(())
}

/// The receiver restarts mid-stream, then the sender: the stream goes on each time, and
/// the bytes the receiver's application keeps are exactly those written.
#[tokio::test]
async fn a_durable_stream_goes_on_across_restarts_of_either_end() {
    let whole = data(3 << 20);
    for rule in [true, false] {
        let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = durable_flows(A, adir.path(), rule, false).await;
        let mut b = durable_flows(B, bdir.path(), rule, false).await;
        pair(&a, &b);
        let mut w = a.handle().open_stream(B).unwrap();
        let first = whole[..1 << 20].to_vec();
        let writer = tokio::spawn(async move {
            w.write_all(&first).await.unwrap();
            w.flush().await.unwrap();
            w
        });
        let mut r = timeout(LIMIT, b.accept_stream()).await.unwrap().unwrap();
        let mut store = Vec::new();
        read_into(&mut r, &mut store, 400 << 10).await.unwrap();
        // The receiver stops mid-stream (its stream object outlives it: a crash, not an
        // abort).
        stop(b).await;
        drop(r);
        let mut b = durable_flows(B, bdir.path(), rule, false).await;
        pair(&a, &b);
        let mut got = b.take_recovered_streams();
        if !rule {
            assert!(got.is_empty(), "rule off: no stream survives");
            drop(writer);
            stop(a).await;
            stop(b).await;
            continue;
        }
        assert_eq!(got.len(), 1);
        let mut r = got.pop().unwrap();
        assert_eq!((r.peer(), r.is_opener()), (A, false));
        assert!(
            r.read_offset() <= store.len() as u64,
            "after what was dealt with"
        );
        let mut w = timeout(LIMIT, writer).await.unwrap().unwrap();
        read_into(&mut r, &mut store, 1 << 20).await.unwrap();
        assert_eq!(store.len(), 1 << 20);
        // The sender stops, with more written and not all read.
        w.write_all(&whole[1 << 20..2 << 20]).await.unwrap();
        w.flush().await.unwrap();
        stop(a).await;
        drop(w);
        let mut a = durable_flows(A, adir.path(), rule, false).await;
        pair(&a, &b);
        let mut got = a.take_recovered_streams();
        assert_eq!(got.len(), 1);
        let mut w = got.pop().unwrap();
        assert!(w.is_opener());
        let from = w.write_offset() as usize;
        assert!((1 << 20..=2 << 20).contains(&from), "{from}");
        let rest = whole[from..].to_vec();
        let writer = tokio::spawn(async move {
            w.write_all(&rest).await.unwrap();
            w.shutdown().await.unwrap();
            timeout(LIMIT, w.finished()).await.unwrap().unwrap();
        });
        read_into(&mut r, &mut store, usize::MAX).await.unwrap();
        assert!(
            store == whole,
            "bytes exact: {} of {}",
            store.len(),
            whole.len()
        );
        timeout(LIMIT, writer).await.unwrap().unwrap();
        drop(r);
        stop(a).await;
        stop(b).await;
    }
}

/// The writer shuts its side while the reader holds its last chunk of bytes (read to its
/// end, not yet counted as read): the stream's end comes as an empty chunk queued behind
/// it. The reader's next read takes the chunk and hits the end: the empty last chunk must
/// be taken then too, or the writer's `finished` waits for it for ever (the reader has
/// nothing more to read, and keeps its stream open). Found by `tests/stream_kill.rs`.
#[tokio::test]
async fn a_durable_stream_s_end_queued_behind_a_chunk_is_taken_at_the_end() {
    let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = durable_flows(A, adir.path(), true, false).await;
    let mut b = durable_flows(B, bdir.path(), true, false).await;
    pair(&a, &b);
    let whole = data(100_000);
    let mut w = a.handle().open_stream(B).unwrap();
    w.write_all(&whole).await.unwrap();
    w.flush().await.unwrap();
    let mut r = timeout(LIMIT, b.accept_stream()).await.unwrap().unwrap();
    let mut store = Vec::new();
    // Every byte read: the last chunk read to its end, not yet counted as read.
    read_into(&mut r, &mut store, whole.len()).await.unwrap();
    assert!(store == whole);
    // The end, with nothing buffered: an empty last chunk, behind the reader's last one.
    w.shutdown().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut buf = [0u8; 16];
    let n = timeout(LIMIT, r.read(&mut buf)).await.unwrap().unwrap();
    assert_eq!(n, 0, "the end");
    // The reader keeps its stream: the writer hears that everything was read.
    let done = timeout(Duration::from_secs(5), w.finished()).await;
    assert!(
        matches!(done, Ok(Ok(()))),
        "the writer's finished: {done:?}"
    );
    r.shutdown().await.unwrap();
    assert_eq!(timeout(LIMIT, w.read(&mut buf)).await.unwrap().unwrap(), 0);
    timeout(LIMIT, r.finished()).await.unwrap().unwrap();
    drop((w, r));
    stop(a).await;
    stop(b).await;
}
