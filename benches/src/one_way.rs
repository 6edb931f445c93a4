//! One-way flows on loopback between two threads, any system, driven in batches.

use std::net::SocketAddr;
use std::sync::{mpsc as std_mpsc, Arc};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::endpoint::{exon_receiver, exon_sender};
use crate::harness::{spawn_rt, Cmd, Crew, Progress, BATCH_DEADLINE};
use crate::quic::{quic_oneway_receiver, quic_oneway_sender};
use crate::systems::OneWayKind;
use crate::tcp::{accept_one, connect, read_frames, write_frames};
use crate::tls::{tls_connect, tls_publish};

/// A one-way flow between two threads, set up once and driven in batches.
pub struct OneWay {
    kind: OneWayKind,
    crew: Crew,
    done: std_mpsc::Receiver<u64>,
    progress: Arc<Progress>,
    next: u64,
}

impl OneWay {
    /// Sets the flow up (connection established, nothing sent yet) for `size`-byte messages
    /// (at least [`MIN_SIZE`](crate::message::MIN_SIZE)).
    pub fn new(kind: OneWayKind, exon_datagram: usize, size: usize) -> OneWay {
        let (progress, done) = Progress::new();
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<Cmd>();
        let p = progress.clone();
        let receiver = spawn_rt("recv", move || async move {
            match kind {
                OneWayKind::Exon | OneWayKind::ExonPlain => {
                    let plain = kind == OneWayKind::ExonPlain;
                    exon_receiver(exon_datagram, plain, size, addr_tx, stop_rx, p).await
                }
                OneWayKind::Tcp => {
                    read_frames(accept_one(&addr_tx).await, size, stop_rx, p).await;
                }
                OneWayKind::TcpTls => {
                    let tls = tls_publish();
                    let s = tls.accept(accept_one(&addr_tx).await).await;
                    read_frames(s, size, stop_rx, p).await;
                }
                OneWayKind::QuicStream | OneWayKind::QuicUni => {
                    quic_oneway_receiver(kind, size, addr_tx, stop_rx, p).await
                }
            }
        });
        let addr = addr_rx.recv().expect("receiver address");
        let sender = spawn_rt("send", move || async move {
            match kind {
                OneWayKind::Exon | OneWayKind::ExonPlain => {
                    let plain = kind == OneWayKind::ExonPlain;
                    exon_sender(exon_datagram, plain, size, addr, cmd_rx).await
                }
                OneWayKind::Tcp => write_frames(connect(addr).await, size, cmd_rx).await,
                OneWayKind::TcpTls => {
                    write_frames(tls_connect(connect(addr).await).await, size, cmd_rx).await
                }
                OneWayKind::QuicStream | OneWayKind::QuicUni => {
                    quic_oneway_sender(kind, size, addr, cmd_rx).await
                }
            }
        });
        let mut crew = Crew::new(receiver, stop_tx);
        crew.add_sender(cmd_tx, sender);
        OneWay {
            kind,
            crew,
            done,
            progress,
            next: 0,
        }
    }

    /// The system.
    pub fn kind(&self) -> OneWayKind {
        self.kind
    }

    /// Sends `n` messages and returns once the receiver verified all of them.
    pub fn run(&mut self, n: u64) -> Duration {
        let start = self.next;
        self.next += n;
        self.progress.expect(self.next);
        let t = Instant::now();
        self.crew.cmds()[0]
            .send(Cmd::Send { start, n })
            .expect("sender alive");
        match self.done.recv_timeout(BATCH_DEADLINE) {
            Ok(c) => assert_eq!(c, self.next),
            Err(e) => panic!(
                "{}: batch of {n} not verified within {BATCH_DEADLINE:?} ({e})",
                self.kind.name()
            ),
        }
        t.elapsed()
    }

    /// Messages verified so far.
    pub fn verified(&self) -> u64 {
        self.next
    }

    /// A line of the sender's counters (exon: datagrams and frames per message).
    pub fn stats(&self) -> Option<String> {
        let (tx, rx) = std_mpsc::channel();
        self.crew.cmds().first()?.send(Cmd::Stats(tx)).ok()?;
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }
}
