//! A stream whose writer's host is bounced (not durable: the restarted writer forgot it)
//! while its reader has read everything and waits for more, through random loss. When the
//! restarted writer opens a new stream, the reader asks about the old one's run and the
//! old stream breaks with `ConnectionReset`, the new one is read whole: the questions and
//! their answers survive loss and the doubt of the old incarnation's slots.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::*;
use exon::endpoint::{Endpoint, MemoryStore};
use exon::NodeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::UdpSocket;

/// The writer's host.
const WRITER: NodeId = NodeId::from_const(1);
const FIRST: &[u8] = b"written before the bounce";
const SECOND: &[u8] = b"written after it";

/// The writer: opens a stream to the reader and writes `FIRST` (its first boot), or
/// `SECOND` and ends the stream (after a bounce); then stays up. Its clock store outlives
/// a bounce (the model's stable storage for the clock); nothing else does.
fn writer(sim: &mut turmoil::Sim<'static>, booted: Arc<AtomicBool>) {
    let store = MemoryStore::starting_at(1);
    sim.host("w", move || {
        let (booted, store) = (booted.clone(), store.clone());
        async move {
            let again = booted.swap(true, Ordering::SeqCst);
            let socket = UdpSocket::bind(("0.0.0.0", PORT)).await?;
            let ep = Endpoint::builder(WRITER)
                .security(security(WRITER))
                .config(cfg())
                .clock_store(store)
                .with_socket(socket)?;
            ep.add_peer(SERVER, SocketAddr::new(turmoil::lookup("r"), PORT));
            let mut s = ep.handle().open_stream(SERVER)?;
            s.write_all(if again { SECOND } else { FIRST }).await?;
            if again {
                s.shutdown().await?;
            } else {
                s.flush().await?;
            }
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

#[test]
fn a_bounced_writers_old_stream_breaks_when_it_opens_a_new_one() {
    let mut sim = sim(120, |b| {
        b.fail_rate(0.05);
    });
    let booted = Arc::new(AtomicBool::new(false));
    writer(&mut sim, booted.clone());
    let read_first = Arc::new(AtomicBool::new(false));
    let done = read_first.clone();
    let outcome = Arc::new(Mutex::new(None));
    let record = outcome.clone();
    sim.client("r", async move {
        let mut ep = endpoint(SERVER).await?;
        ep.add_peer(WRITER, SocketAddr::new(turmoil::lookup("w"), PORT));
        let mut old = ep.accept_stream().await.expect("the first stream");
        let mut buf = vec![0u8; FIRST.len()];
        old.read_exact(&mut buf).await?;
        assert_eq!(buf, FIRST);
        done.store(true, Ordering::SeqCst);
        let mut new = ep
            .accept_stream()
            .await
            .expect("the stream after the bounce");
        let mut got = Vec::new();
        new.read_to_end(&mut got).await?;
        assert_eq!(got, SECOND);
        let mut more = [0u8; 16];
        let kind = match old.read(&mut more).await {
            Ok(n) => panic!("read {n} bytes of a forgotten stream"),
            Err(e) => e.kind(),
        };
        *record.lock().unwrap() = Some(kind);
        Ok(())
    });
    let mut bounced = false;
    run(&mut sim, |_, sim| {
        if !bounced && read_first.load(Ordering::SeqCst) {
            sim.bounce("w");
            bounced = true;
        }
    });
    assert!(bounced, "the reader never read the first bytes");
    assert_eq!(*outcome.lock().unwrap(), Some(ErrorKind::ConnectionReset));
}
