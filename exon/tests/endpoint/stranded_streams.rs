//! A stream whose writer crashed and came back without a journal: its reader held chunks
//! ahead of one that never comes (the old writer forgot it). Asked about the stalled run
//! (`FlowConfig::stall_query_after`), the new writer says it is over, and the stream breaks
//! with `ConnectionReset` instead of waiting for ever; a live writer is asked and never
//! says so. The stream counterpart of `stranded_runs.rs`.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use exon::endpoint::{Endpoint, EndpointConfig, Stream};
use exon::NodeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::time::timeout;

use super::common::cfg;
use super::stranded_runs::{bind, crashing, live_pair, Crashing, MISSING};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(20);
const FIRST: &[u8] = b"chunk zero";
const LATER: [&[u8]; 2] = [b"chunk two", b"chunk three"];

/// Writes `FIRST`, waits until the reader's application has it (`read`), then writes
/// `MISSING` and `LATER`, each a chunk of its own.
async fn write_chunks(w: &mut Stream, read: tokio::sync::oneshot::Receiver<()>) {
    w.write_all(FIRST).await.unwrap();
    w.flush().await.unwrap();
    timeout(LIMIT, read).await.unwrap().unwrap();
    for body in [MISSING, LATER[0], LATER[1]] {
        w.write_all(body).await.unwrap();
        w.flush().await.unwrap();
        // One chunk each: the next is written once this one has left.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A opens a stream to B at `b` and writes its chunks (`MISSING` never arrives), then
/// crashes when told.
fn crashing_writer(b: SocketAddr, read: tokio::sync::oneshot::Receiver<()>) -> Crashing {
    crashing(b, |a| async move {
        let mut w = a.handle().open_stream(B).unwrap();
        write_chunks(&mut w, read).await;
        (a, w)
    })
}

/// Reads `FIRST` from the stream B accepts, and tells the writer so.
async fn read_first(b: &mut Endpoint, read: tokio::sync::oneshot::Sender<()>) -> Stream {
    let mut r = timeout(LIMIT, b.accept_stream()).await.unwrap().unwrap();
    let mut buf = vec![0u8; FIRST.len()];
    timeout(LIMIT, r.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(buf, FIRST);
    read.send(()).unwrap();
    r
}

/// A writes its chunks to B and crashes; it comes back without a journal. What B's reader
/// gets within `wait` after that (`None`: still waiting), and B's count of runs over.
async fn after_a_restart(query: Option<Duration>, wait: Duration) -> (Option<ErrorKind>, u64) {
    let mut config: EndpointConfig = cfg();
    config.flows.stall_query_after = query;
    let mut b = bind(B, UdpSocket::bind("127.0.0.1:0").await.unwrap(), config).await;
    let (read_tx, read_rx) = tokio::sync::oneshot::channel();
    let baddr = b.local_addr();
    let a = crashing_writer(baddr, read_rx);
    let mut r = read_first(&mut b, read_tx).await;
    a.crash().await;
    let a = bind(A, UdpSocket::bind("127.0.0.1:0").await.unwrap(), cfg()).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let mut buf = [0u8; 64];
    let got = match timeout(wait, r.read(&mut buf)).await {
        Err(_) => None,
        Ok(Ok(n)) => panic!("read {:?} past the missing chunk", &buf[..n]),
        Ok(Err(e)) => Some(e.kind()),
    };
    let overs = b.stats().await.unwrap().runs_over;
    drop(a);
    (got, overs)
}

#[tokio::test]
async fn a_stream_its_restarted_writer_forgot_breaks_when_the_writer_says_it_is_over() {
    let (got, overs) = after_a_restart(Some(Duration::from_millis(200)), LIMIT).await;
    assert_eq!(got, Some(ErrorKind::ConnectionReset));
    assert_eq!(overs, 1);
}

#[tokio::test]
async fn without_the_question_the_reader_of_a_forgotten_stream_waits() {
    let (got, overs) = after_a_restart(None, Duration::from_secs(2)).await;
    assert_eq!(got, None);
    assert_eq!(overs, 0);
}

/// A live writer is asked about its stalled stream again and again, and never says it is
/// over: when its missing chunk finally arrives, the reader gets every byte in order.
#[tokio::test]
async fn a_live_writers_stalled_stream_is_asked_about_and_goes_on() {
    let (a, mut b) = live_pair().await;
    let mut w = a.handle().open_stream(B).unwrap();
    let (read_tx, read_rx) = tokio::sync::oneshot::channel();
    let writer = tokio::spawn(async move {
        write_chunks(&mut w, read_rx).await;
        w.shutdown().await.unwrap();
        timeout(LIMIT, w.finished()).await.unwrap().unwrap();
    });
    let mut r = read_first(&mut b, read_tx).await;
    let mut rest = Vec::new();
    timeout(LIMIT, r.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest, [MISSING, LATER[0], LATER[1]].concat());
    timeout(LIMIT, writer).await.unwrap().unwrap();
    let stats = b.stats().await.unwrap();
    assert!(stats.run_queries >= 2, "asked {} times", stats.run_queries);
    assert_eq!(stats.runs_over, 0);
}

/// A writer crashes with nothing of its stream missing at its reader (no stall: the reader
/// has read every chunk and waits for more). When it comes back without a journal and opens
/// a new stream, the reader asks about the old one's run (`query` off: it does not), and
/// the old stream breaks with `ConnectionReset`, the new one goes on.
async fn a_restarted_writer_opens_a_new_stream(query: Option<Duration>) -> Option<ErrorKind> {
    let mut config: EndpointConfig = cfg();
    config.flows.stall_query_after = query;
    let mut b = bind(B, UdpSocket::bind("127.0.0.1:0").await.unwrap(), config).await;
    let (read_tx, read_rx) = tokio::sync::oneshot::channel();
    let a = crashing(b.local_addr(), |a| async move {
        let mut w = a.handle().open_stream(B).unwrap();
        w.write_all(FIRST).await.unwrap();
        w.flush().await.unwrap();
        timeout(LIMIT, read_rx).await.unwrap().unwrap();
        (a, w)
    });
    let mut old = read_first(&mut b, read_tx).await;
    a.crash().await;
    let a = bind(A, UdpSocket::bind("127.0.0.1:0").await.unwrap(), cfg()).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let mut w = a.handle().open_stream(B).unwrap();
    w.write_all(LATER[0]).await.unwrap();
    w.shutdown().await.unwrap();
    let mut new = timeout(LIMIT, b.accept_stream()).await.unwrap().unwrap();
    let mut got = Vec::new();
    timeout(LIMIT, new.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, LATER[0]);
    let mut buf = [0u8; 64];
    let got = match timeout(Duration::from_secs(2), old.read(&mut buf)).await {
        Err(_) => None,
        Ok(Ok(n)) => panic!("read {:?} from a forgotten stream", &buf[..n]),
        Ok(Err(e)) => Some(e.kind()),
    };
    timeout(LIMIT, w.finished()).await.unwrap().unwrap();
    got
}

#[tokio::test]
async fn a_stream_its_writer_forgot_breaks_when_the_writer_comes_back_with_another() {
    let got = a_restarted_writer_opens_a_new_stream(Some(Duration::from_millis(200))).await;
    assert_eq!(got, Some(ErrorKind::ConnectionReset));
}

#[tokio::test]
async fn without_the_question_a_stream_its_writer_forgot_waits() {
    let got = a_restarted_writer_opens_a_new_stream(None).await;
    assert_eq!(got, None);
}
