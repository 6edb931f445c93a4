//! The one-way roles: a verifying receiver, and a sender as fast as it can.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};

use super::{
    exon_peer, local_a, quic_cert, quic_server, say, tcp_connect, tcp_listen, wait_for, Control,
    RoleArgs, System,
};
use crate::endpoint::exon_endpoint;
use crate::message::{payload, seq_of, Seen};
use crate::quic::quic_connect;
use crate::tcp::{read_frame, write_frame};

/// What a one-way receiver task shares: distinct messages verified, highest sequence.
#[derive(Default)]
struct Tally {
    count: AtomicU64,
    max_seq: AtomicU64,
}

impl Tally {
    fn record(&self, seen: &mut Seen, p: &[u8], size: usize) {
        let seq = seq_of(p, size);
        seen.record(seq);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
        self.count.store(seen.count(), Ordering::Release);
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }
}

async fn read_all<R: AsyncRead + Unpin>(r: R, tally: Arc<Tally>, size: usize) {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let (mut seen, mut buf) = (Seen::default(), Vec::new());
    while read_frame(&mut r, &mut buf, size).await {
        tally.record(&mut seen, &buf, size);
    }
}

/// One-way receiver: verifies every message, measures goodput over `secs` after `warmup`
/// from the first delivery, then checks that all `EXPECT`ed messages arrived.
pub(super) async fn recv(a: &RoleArgs, mut ctl: Control) {
    let tally = Arc::new(Tally::default());
    let t = tally.clone();
    let size = a.size;
    let mut keep = None; // the QUIC endpoint, alive until the end
    match a.system {
        System::Exon => {
            let mut ep = exon_endpoint(a.addr, 2, a.exon.config());
            say("READY", &[]);
            tokio::spawn(async move {
                let mut seen = Seen::default();
                while let Some(m) = ep.recv().await {
                    t.record(&mut seen, &m.payload, size);
                }
            });
        }
        System::TcpCubic | System::TcpBbr => {
            let s = tcp_listen(a).await;
            tokio::spawn(read_all(s, t, size));
        }
        System::ExonStream => {
            let mut ep = exon_endpoint(a.addr, 2, a.exon.config());
            say("READY", &[]);
            tokio::spawn(async move {
                let s = ep.accept_stream().await.expect("a stream");
                read_all(s, t, size).await;
                // The endpoint stays until the process ends (the stream's acknowledgements).
                std::future::pending::<()>().await;
                drop(ep);
            });
        }
        System::Quic => {
            let ep = quic_server(a);
            let conn = ep.accept().await.unwrap().await.unwrap();
            keep = Some((ep, conn.clone()));
            tokio::spawn(async move { read_all(conn.accept_uni().await.unwrap(), t, size).await });
        }
    }
    let series = a.series.map(|every| sample(&tally, every));
    let far = Instant::now() + Duration::from_secs(3600);
    wait_for(far, || tally.count() > 0).await;
    tokio::time::sleep(a.warmup).await;
    let (c0, t0) = (tally.count(), Instant::now());
    tokio::time::sleep(a.secs).await;
    let (c1, t1) = (tally.count(), Instant::now());
    let rate = (c1 - c0) as f64 / (t1 - t0).as_secs_f64();
    say(
        "MEASURED",
        &[
            ("rate", format!("{rate:.1}")),
            ("in_window", (c1 - c0).to_string()),
        ],
    );

    // The end: every message the sender wrote must arrive, exactly once.
    let expected: u64 = loop {
        let line = ctl.lines.recv().await.expect("EXPECT from the harness");
        if let Some(n) = line.strip_prefix("EXPECT ") {
            break n.trim().parse().expect("EXPECT count");
        }
    };
    let complete = wait_for(Instant::now() + a.drain, || tally.count() >= expected).await;
    let max_seq = tally.max_seq.load(Ordering::Relaxed);
    assert!(
        tally.count() == 0 || max_seq < expected,
        "message {max_seq} never sent"
    );
    let mut done = vec![
        ("rate", format!("{rate:.1}")),
        ("delivered", tally.count().to_string()),
        ("expected", expected.to_string()),
        ("complete", complete.to_string()),
    ];
    if let (Some((t0_ms, samples)), Some(every)) = (series, a.series) {
        let samples = samples.lock().unwrap();
        let list: Vec<String> = samples.iter().map(u64::to_string).collect();
        done.push(("series_t0_ms", t0_ms.to_string()));
        done.push(("series_ms", every.as_millis().to_string()));
        done.push(("series", list.join(",")));
    }
    say("DONE", &done);
    ctl.until_eof().await;
    if let Some((ep, conn)) = keep {
        conn.close(0u32.into(), b"done");
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
    }
}

/// Milliseconds since the Unix epoch: the one clock that the receivers of several flows
/// (separate processes) and the harness share.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Samples `tally`'s count every `every` from now on (the first sample at once); returns
/// the wall-clock time of the first sample and the samples so far.
fn sample(tally: &Arc<Tally>, every: Duration) -> (u64, Arc<Mutex<Vec<u64>>>) {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let (t, s) = (tally.clone(), samples.clone());
    let t0 = unix_ms();
    tokio::spawn(async move {
        // Late ticks fire in a burst, so sample k stays at about t0 + k * every.
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            s.lock().unwrap().push(t.count());
        }
    });
    (t0, samples)
}

/// Writes frames of `size`-byte messages with sequence numbers from 0 until `stop`; returns
/// the count and `w`.
async fn write_until<W: AsyncWrite + Unpin>(w: W, stop: &AtomicBool, size: usize) -> (u64, W) {
    let mut w = BufWriter::with_capacity(64 * 1024, w);
    let mut seq = 0;
    while !stop.load(Ordering::Relaxed) {
        write_frame(&mut w, &payload(seq, size)).await;
        seq += 1;
    }
    w.flush().await.unwrap();
    (seq, w.into_inner())
}

/// One-way sender: sends as fast as the system lets it until `STOP`, says how many it
/// sent, and keeps its side open (retransmitting) until the end of input.
pub(super) async fn send(a: &RoleArgs, mut ctl: Control) {
    let stop = ctl.stop.clone();
    match a.system {
        System::Exon => {
            let ep = exon_endpoint(local_a(), 1, a.exon.config());
            ep.add_peer(exon_peer(), a.addr);
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                drop(
                    ep.send(exon_peer(), payload(seq, a.size))
                        .await
                        .expect("send"),
                );
                seq += 1;
            }
            let s = ep.stats().await.expect("endpoint running");
            say(
                "SENT",
                &[
                    ("n", seq.to_string()),
                    ("retransmissions", s.node.retransmissions.to_string()),
                    (
                        "spurious_found",
                        s.node.spurious_retransmissions.to_string(),
                    ),
                    ("losses_detected", s.node.losses_detected.to_string()),
                    ("timeouts", s.node.timeouts.to_string()),
                    ("datagrams_out", s.node.datagrams_out.to_string()),
                ],
            );
            ctl.until_eof().await;
            ep.close(Duration::from_millis(200)).await;
        }
        System::ExonStream => {
            let ep = exon_endpoint(local_a(), 1, a.exon.config());
            ep.add_peer(exon_peer(), a.addr);
            let s = ep.open_stream(exon_peer()).expect("open_stream");
            let (n, mut s) = write_until(s, &stop, a.size).await;
            s.shutdown().await.ok();
            let st = ep.stats().await.expect("endpoint running");
            say(
                "SENT",
                &[
                    ("n", n.to_string()),
                    ("retransmissions", st.node.retransmissions.to_string()),
                    ("losses_detected", st.node.losses_detected.to_string()),
                    ("timeouts", st.node.timeouts.to_string()),
                    ("tail_probes", st.node.tail_probes.to_string()),
                    ("datagrams_out", st.node.datagrams_out.to_string()),
                ],
            );
            ctl.until_eof().await;
            drop(s);
            ep.close(Duration::from_millis(200)).await;
        }
        System::TcpCubic | System::TcpBbr => {
            let s = tcp_connect(a).await;
            let (n, mut s) = write_until(s, &stop, a.size).await;
            s.shutdown().await.ok();
            say("SENT", &[("n", n.to_string())]);
            ctl.until_eof().await;
        }
        System::Quic => {
            let (ep, conn) = quic_connect(local_a(), a.addr, quic_cert(a)).await;
            let s = conn.open_uni().await.unwrap();
            let (n, mut s) = write_until(s, &stop, a.size).await;
            s.finish().unwrap();
            let st = conn.stats();
            say(
                "SENT",
                &[
                    ("n", n.to_string()),
                    ("lost_packets", st.path.lost_packets.to_string()),
                ],
            );
            ctl.until_eof().await;
            conn.close(0u32.into(), b"done");
            let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
        }
    }
}
