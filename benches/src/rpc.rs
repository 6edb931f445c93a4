//! Request/reply on loopback between a client and a server thread, any system.

use std::net::SocketAddr;
use std::sync::{mpsc as std_mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use exon::proto::NodeId;
use tokio::sync::{mpsc, oneshot};

use crate::calls::{call, Caller};
use crate::endpoint::{exon_bind, exon_caller, exon_stats_line, serve_exon};
use crate::harness::{spawn_rt, BATCH_DEADLINE};
use crate::message::seq_of;
use crate::quic::{connect_local, serve_local, serve_quic};
use crate::systems::RpcKind;
use crate::tcp::{accept_one, connect, serve_tcp, tcp_caller};
use crate::tls::{tls_connect, tls_publish};

/// A batch for the client thread: `n` requests from `callers` concurrent callers.
struct RpcCmd {
    start: u64,
    n: u64,
    callers: u64,
    reply: std_mpsc::Sender<Vec<Duration>>,
}

/// A request/reply client and server on two threads, set up once and driven in batches.
pub struct Rpc {
    kind: RpcKind,
    cmds: Option<mpsc::UnboundedSender<RpcCmd>>,
    stop: Option<oneshot::Sender<()>>,
    next: u64,
    threads: Vec<JoinHandle<()>>,
}

impl Rpc {
    /// Sets the client and server up for `size`-byte requests and replies (at least
    /// [`MIN_SIZE`](crate::message::MIN_SIZE)).
    pub fn new(kind: RpcKind, exon_datagram: usize, size: usize) -> Rpc {
        let (addr_tx, addr_rx) = std_mpsc::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<RpcCmd>();
        let server = spawn_rt("server", move || async move {
            rpc_server(kind, exon_datagram, size, addr_tx, stop_rx).await
        });
        let addr = addr_rx.recv().expect("server address");
        let client = spawn_rt("client", move || async move {
            rpc_client(kind, exon_datagram, size, addr, cmd_rx).await
        });
        Rpc {
            kind,
            cmds: Some(cmd_tx),
            stop: Some(stop_tx),
            next: 0,
            threads: vec![client, server],
        }
    }

    /// The system.
    pub fn kind(&self) -> RpcKind {
        self.kind
    }

    /// Runs `n` requests (rounded down to a multiple of `callers`) from `callers`
    /// concurrent callers; returns the elapsed time and each request's latency.
    pub fn run(&mut self, n: u64, callers: u64) -> (Duration, Vec<Duration>) {
        let n = (n / callers).max(1) * callers;
        let (tx, rx) = std_mpsc::channel();
        let t = Instant::now();
        self.cmds
            .as_ref()
            .unwrap()
            .send(RpcCmd {
                start: self.next,
                n,
                callers,
                reply: tx,
            })
            .expect("client alive");
        self.next += n;
        let lat = rx
            .recv_timeout(BATCH_DEADLINE)
            .unwrap_or_else(|e| panic!("{}: rpc batch failed ({e})", self.kind.name()));
        assert_eq!(lat.len() as u64, n, "every request answered once");
        (t.elapsed(), lat)
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        self.cmds.take();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

async fn rpc_server(
    kind: RpcKind,
    datagram: usize,
    size: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    stop: oneshot::Receiver<()>,
) {
    match kind {
        RpcKind::Exon | RpcKind::ExonPlain => {
            let ep = exon_bind(1, datagram, kind == RpcKind::ExonPlain);
            addr_tx.send(ep.local_addr()).unwrap();
            serve_exon(ep, stop, size).await;
        }
        RpcKind::Tcp => {
            let (r, w) = accept_one(&addr_tx).await.into_split();
            serve_tcp(r, w, stop, size).await;
        }
        RpcKind::TcpTls => {
            let tls = tls_publish();
            let (r, w) = tokio::io::split(tls.accept(accept_one(&addr_tx).await).await);
            serve_tcp(r, w, stop, size).await;
        }
        RpcKind::Quic => {
            let ep = serve_local();
            addr_tx.send(ep.local_addr().unwrap()).unwrap();
            let conn = ep.accept().await.unwrap().await.unwrap();
            serve_quic(&conn, stop, size).await;
            conn.close(0u32.into(), b"done");
            ep.wait_idle().await;
        }
    }
}

async fn rpc_client(
    kind: RpcKind,
    datagram: usize,
    size: usize,
    addr: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<RpcCmd>,
) {
    let server_id = NodeId::from_const(1);
    let mut tasks = Vec::new();
    let mut quic_ep = None;
    let mut exon_handle = None;
    let caller = match kind {
        RpcKind::Exon | RpcKind::ExonPlain => {
            let ep = exon_bind(2, datagram, kind == RpcKind::ExonPlain);
            ep.add_peer(server_id, addr);
            exon_handle = Some(ep.handle());
            exon_caller(ep, &mut tasks)
        }
        RpcKind::Tcp => {
            let (r, w) = connect(addr).await.into_split();
            tcp_caller(r, w, &mut tasks, size)
        }
        RpcKind::TcpTls => {
            let (r, w) = tokio::io::split(tls_connect(connect(addr).await).await);
            tcp_caller(r, w, &mut tasks, size)
        }
        RpcKind::Quic => {
            let (ep, conn) = connect_local(addr).await;
            quic_ep = Some(ep);
            Caller::Quic(conn)
        }
    };
    let caller = Arc::new(caller);
    while let Some(cmd) = cmds.recv().await {
        let per = cmd.n / cmd.callers;
        let mut joins = Vec::with_capacity(cmd.callers as usize);
        for c in 0..cmd.callers {
            let caller = caller.clone();
            let first = cmd.start + c * per;
            joins.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per as usize);
                for seq in first..first + per {
                    let t = Instant::now();
                    let reply = call(&caller, server_id, seq, size).await;
                    assert_eq!(seq_of(&reply, size), seq, "reply to another request");
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        let mut all = Vec::with_capacity(cmd.n as usize);
        for j in joins {
            all.extend(j.await.expect("caller panicked"));
        }
        let _ = cmd.reply.send(all);
    }
    if let Caller::Quic(conn) = &*caller {
        conn.close(0u32.into(), b"done");
    }
    if let Some(ep) = quic_ep {
        ep.wait_idle().await;
    }
    if let Some(h) = exon_handle {
        if let Some(s) = h.stats().await {
            // Per call: the caller's datagrams, acknowledgements and slot traffic.
            println!("{} caller counters: {}", kind.name(), exon_stats_line(&s));
        }
        h.close(Duration::from_millis(200)).await;
    }
    for t in tasks {
        t.abort();
    }
}
