//! A two-way outage over real UDP on 127.0.0.1 (issue 46): a stream flows through a relay
//! that stops carrying both directions for 3 s; how long after the heal do its bytes move
//! again? The issue asks for 0.5 s, and the test asserts it for both writers: one that goes
//! on writing through the cut, and one that wrote 1 MiB into the cut and then waits (its
//! bytes in flight into the dead path, as a burst of calls would be). What finds the heal:
//! the sender's retransmission timer, whose backoff stops at `TimerConfig::max_backoff`
//! (400 ms) while the peer is not yet deaf, and the receiver's probe
//! (`Rules::probe_prompts_resend`). Before the cap, the waiting writer resumed 0.5-1.4 s
//! after the heal with the probe and 1.9-2.1 s without it (the timer backed off to
//! `max_rto`, 2 s); with it, 23-92 ms and 0.17-0.46 s (three runs each, this 2-core VM).
//! Heavy (about 25 s).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exon::endpoint::{Endpoint, EndpointConfig};
use exon::proto::crypto::insecure_test_security;
use exon::proto::Rules;
use exon::NodeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

use crate::serially;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);

/// A relay between `a` and `b` that drops both directions while `cut` is set.
async fn relay(a: SocketAddr, b: SocketAddr, cut: Arc<AtomicBool>) -> SocketAddr {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            if cut.load(Ordering::Relaxed) {
                continue;
            }
            let to = if from == a { b } else { a };
            let _ = sock.send_to(&buf[..n], to).await;
        }
    });
    addr
}

/// Streams bytes from A to B for `before`, cuts both ways for `cut_for`, heals, and returns
/// how long after the heal B's next bytes came. `steady`: the writer goes on writing 16 KiB
/// every 5 ms through the cut; otherwise it writes 1 MiB at once as the cut comes (in
/// flight into the dead path, as a burst of calls would be) and nothing more.
async fn resume_after(before: Duration, cut_for: Duration, steady: bool, rules: Rules) -> Duration {
    let bind = |id| {
        Endpoint::builder(id)
            .security(insecure_test_security(id, [A, B]))
            .config(EndpointConfig::default())
            .rules(rules)
            .bind("127.0.0.1:0")
    };
    let (a, mut b) = (bind(A).await.unwrap(), bind(B).await.unwrap());
    let cut = Arc::new(AtomicBool::new(false));
    let addr = relay(a.local_addr(), b.local_addr(), cut.clone()).await;
    a.add_peer(B, addr);
    let reads: Arc<Mutex<Vec<(Instant, usize)>>> = Default::default();
    let r = reads.clone();
    let reader = tokio::spawn(async move {
        let mut s = b.accept_stream().await.expect("a stream");
        let mut buf = vec![0u8; 64 << 10];
        let mut at = 0u64;
        loop {
            let n = s.read(&mut buf).await.expect("read");
            if n == 0 {
                return at;
            }
            for (i, &x) in buf[..n].iter().enumerate() {
                assert_eq!(x, ((at + i as u64) % 251) as u8, "bytes exact");
            }
            at += n as u64;
            r.lock().unwrap().push((Instant::now(), n));
        }
    });
    let mut s = a.open_stream(B).unwrap();
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let w = written.clone();
    let cut_seen = cut.clone();
    let writer = tokio::spawn(async move {
        // 16 KiB every 5 ms, each byte its position modulo 251, until told to stop; without
        // `steady`, once the cut comes, 1 MiB at once (in flight into the dead path) and
        // then nothing.
        let mut at = 0u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut burst_done = false;
        while Instant::now() < deadline && w.load(Ordering::Relaxed) == 0 {
            let len = match (steady, cut_seen.load(Ordering::Relaxed), burst_done) {
                (true, _, _) | (false, false, _) => 16384,
                (false, true, false) => 1 << 20,
                (false, true, true) => 0,
            };
            if len > 0 {
                let chunk: Vec<u8> = (at..at + len).map(|i| (i % 251) as u8).collect();
                s.write_all(&chunk).await.unwrap();
                at += len;
                burst_done |= len == 1 << 20;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        s.shutdown().await.unwrap();
        s.finished().await.unwrap();
        at
    });
    tokio::time::sleep(before).await;
    cut.store(true, Ordering::Relaxed);
    tokio::time::sleep(cut_for).await;
    let healed = Instant::now();
    cut.store(false, Ordering::Relaxed);
    let resumed = loop {
        if let Some(&(t, _)) = reads.lock().unwrap().iter().find(|(t, _)| *t > healed) {
            break t;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(20),
            "no bytes 20 s after the heal"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    written.store(1, Ordering::Relaxed);
    let sent = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer ends")
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the reader ends")
        .unwrap();
    assert_eq!(got, sent, "every byte, once");
    resumed - healed
}

#[test]
#[ignore = "heavy (CI runs it: a 3 s outage, six times)"]
fn a_stream_resumes_within_half_a_second_of_a_two_way_outage() {
    serially(async {
        for steady in [true, false] {
            let mut waits = Vec::new();
            for _ in 0..3 {
                let cut = Duration::from_secs(3);
                let before = Duration::from_millis(500);
                waits.push(resume_after(before, cut, steady, Rules::ALL).await);
            }
            let how = if steady {
                "writing through the cut"
            } else {
                "1 MiB into the cut, then idle"
            };
            eprintln!("{how}: {waits:?}");
            assert!(
                waits.iter().all(|w| *w < Duration::from_millis(500)),
                "{how}: bytes moved {waits:?} after the heal"
            );
        }
    });
}

/// The same without the receiver's probe, by hand
/// (`cargo test -p exon --test timed two_way -- --ignored --nocapture`): the sender's
/// capped backoff alone.
#[test]
#[ignore = "measured by hand"]
fn a_stream_resumes_after_a_two_way_outage_without_the_probe() {
    serially(async {
        let mut rules = Rules::ALL;
        rules.probe_prompts_resend = false;
        for steady in [true, false] {
            let mut waits = Vec::new();
            for _ in 0..3 {
                let cut = Duration::from_secs(3);
                let before = Duration::from_millis(500);
                waits.push(resume_after(before, cut, steady, rules).await);
            }
            eprintln!("probe_prompts_resend off, steady {steady}: {waits:?}");
        }
    });
}
