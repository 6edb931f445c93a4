//! The RPC roles: an echoing server and a client of concurrent callers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use exon::proto::NodeId;

use super::{
    local_a, quic_cert, quic_server, say, tcp_connect, tcp_listen, wait_for, Control, RoleArgs,
    System,
};
use crate::calls::{call, Caller};
use crate::endpoint::{exon_caller, exon_endpoint, serve_exon_wire};
use crate::message::seq_of;
use crate::quic::{quic_connect, serve_quic};
use crate::stats::Latencies;
use crate::tcp::{serve_tcp, tcp_caller};

/// RPC server: echoes every request (verified exactly once) until the end of input;
/// exon's also reports what its node sent (`server_datagrams_out`, `server_bytes_out`,
/// `server_tokens_out`, `server_acks_out`).
pub(super) async fn server(a: &RoleArgs, ctl: Control) {
    let mut wire = None;
    let served = match a.system {
        System::Exon => {
            let ep = exon_endpoint(a.addr, 1, a.exon.config());
            say("READY", &[]);
            let (served, w) = serve_exon_wire(ep, ctl.eof_signal(), a.size).await;
            wire = w;
            served
        }
        System::TcpCubic | System::TcpBbr => {
            let (r, w) = tcp_listen(a).await.into_split();
            serve_tcp(r, w, ctl.eof_signal(), a.size).await
        }
        System::ExonStream => panic!("exon_stream is one-way only"),
        System::Quic => {
            let ep = quic_server(a);
            let conn = ep.accept().await.unwrap().await.unwrap();
            let n = serve_quic(&conn, ctl.eof_signal(), a.size).await;
            conn.close(0u32.into(), b"done");
            n
        }
    };
    let mut pairs = vec![("served", served.to_string())];
    if let Some([datagrams, bytes, tokens, acks]) = wire {
        pairs.extend([
            ("server_datagrams_out", datagrams.to_string()),
            ("server_bytes_out", bytes.to_string()),
            ("server_tokens_out", tokens.to_string()),
            ("server_acks_out", acks.to_string()),
        ]);
    }
    say("DONE", &pairs);
}

/// Exon's caller: where its datagrams and bytes went (frames of each kind it sent), as
/// notes of the report; nothing for the other systems.
async fn caller_wire(caller: &Caller) -> Vec<(&'static str, String)> {
    let Caller::Exon(h) = caller else {
        return Vec::new();
    };
    let Some(s) = h.stats().await else {
        return Vec::new();
    };
    let (n, f) = (&s.node, &s.node.frames_out);
    vec![
        ("datagrams_out", n.datagrams_out.to_string()),
        ("bytes_out", n.bytes_out.to_string()),
        ("tokens_out", f.token.to_string()),
        ("acks_out", f.ack.to_string()),
        ("reqslots_out", f.reqslots.to_string()),
        ("slots_out", f.slots.to_string()),
        ("retransmissions", n.retransmissions.to_string()),
        ("acks_held", n.acks_held_for_tokens.to_string()),
    ]
}

/// What the callers share: requests issued, answers counted in the window, latencies.
#[derive(Default)]
struct Calls {
    next: AtomicU64,
    measuring: AtomicBool,
    stopped: AtomicBool,
    outstanding: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
}

/// RPC client: `callers` concurrent callers in a loop; measures requests answered and their
/// latency over `secs` after `warmup`, then lets outstanding calls finish (up to `drain`).
pub(super) async fn client(a: &RoleArgs, ctl: Control) {
    let mut tasks = Vec::new();
    let mut quic_ep = None;
    let caller = match a.system {
        System::Exon => {
            let ep = exon_endpoint(local_a(), 2, a.exon.config());
            ep.add_peer(NodeId::from_const(1), a.addr);
            exon_caller(ep, &mut tasks)
        }
        System::TcpCubic | System::TcpBbr => {
            let (r, w) = tcp_connect(a).await.into_split();
            tcp_caller(r, w, &mut tasks, a.size)
        }
        System::ExonStream => panic!("exon_stream is one-way only"),
        System::Quic => {
            let (ep, conn) = quic_connect(local_a(), a.addr, quic_cert(a)).await;
            quic_ep = Some(ep);
            Caller::Quic(conn)
        }
    };
    let caller = Arc::new(caller);
    let calls = Arc::new(Calls::default());
    let size = a.size;
    for _ in 0..a.callers {
        let (caller, calls) = (caller.clone(), calls.clone());
        tokio::spawn(async move {
            while !calls.stopped.load(Ordering::Relaxed) {
                let seq = calls.next.fetch_add(1, Ordering::Relaxed);
                calls.outstanding.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let server = NodeId::from_const(1);
                let reply = call(&caller, server, seq, size).await;
                assert_eq!(seq_of(&reply, size), seq, "reply to another request");
                if calls.measuring.load(Ordering::Relaxed) {
                    calls.latencies.lock().unwrap().push(t.elapsed());
                }
                calls.outstanding.fetch_sub(1, Ordering::Relaxed);
            }
        });
    }
    tokio::time::sleep(a.warmup).await;
    calls.measuring.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    tokio::time::sleep(a.secs).await;
    calls.measuring.store(false, Ordering::SeqCst);
    let elapsed = t0.elapsed();
    calls.stopped.store(true, Ordering::SeqCst);
    let lat: Latencies = std::mem::take(&mut *calls.latencies.lock().unwrap())
        .into_iter()
        .collect();
    let drained = wait_for(Instant::now() + a.drain, || {
        calls.outstanding.load(Ordering::Relaxed) == 0
    })
    .await;
    let rate = lat.len() as f64 / elapsed.as_secs_f64();
    let wire = caller_wire(&caller).await;
    say(
        "DONE",
        &[
            ("rate", format!("{rate:.1}")),
            ("answered", lat.len().to_string()),
            ("p50_us", format!("{:.0}", lat.quantile_us(0.5))),
            ("p99_us", format!("{:.0}", lat.quantile_us(0.99))),
            ("issued", calls.next.load(Ordering::Relaxed).to_string()),
            (
                "unanswered",
                calls.outstanding.load(Ordering::Relaxed).to_string(),
            ),
            ("drained", drained.to_string()),
        ]
        .into_iter()
        .chain(wire)
        .collect::<Vec<_>>(),
    );
    if let Caller::Quic(conn) = &*caller {
        conn.close(0u32.into(), b"done");
    }
    if let Some(ep) = quic_ep {
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
    }
    for t in tasks {
        t.abort();
    }
    drop(ctl);
}
