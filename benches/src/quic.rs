//! QUIC (quinn) on loopback: endpoints, the one-way receiver and sender, the RPC server.

use std::net::SocketAddr;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::harness::{Cmd, Progress, LOCALHOST};
use crate::message::{payload, seq_of, Seen};
use crate::systems::OneWayKind;
use crate::tcp::{read_frames, write_frames};

/// Room for 1024 concurrent streams each way.
pub fn quic_transport() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(1024u32.into())
        .max_concurrent_uni_streams(1024u32.into());
    Arc::new(t)
}

/// A QUIC server endpoint at `bind` with a fresh self-signed certificate for "localhost",
/// and the certificate for the client to trust.
pub fn quic_server(
    bind: SocketAddr,
) -> (quinn::Endpoint, rustls::pki_types::CertificateDer<'static>) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der());
    let mut cfg = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.into()).unwrap();
    cfg.transport_config(quic_transport());
    let ep = quinn::Endpoint::server(cfg, bind).unwrap();
    (ep, cert)
}

/// A QUIC client endpoint at `bind` connected to `addr`, trusting only `cert`.
pub async fn quic_connect(
    bind: SocketAddr,
    addr: SocketAddr,
    cert: rustls::pki_types::CertificateDer<'static>,
) -> (quinn::Endpoint, quinn::Connection) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut cfg = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).unwrap();
    cfg.transport_config(quic_transport());
    let mut ep = quinn::Endpoint::client(bind).unwrap();
    ep.set_default_client_config(cfg);
    let conn = ep.connect(addr, "localhost").unwrap().await.unwrap();
    (ep, conn)
}

/// The server's certificate, handed to the client thread (runners are set up one at a
/// time: the server publishes it before its address).
static QUIC_CERT: Mutex<Option<rustls::pki_types::CertificateDer<'static>>> = Mutex::new(None);

/// A loopback QUIC server whose certificate [`connect_local`] trusts.
pub fn serve_local() -> quinn::Endpoint {
    let (ep, cert) = quic_server(LOCALHOST.parse().unwrap());
    *QUIC_CERT.lock().unwrap() = Some(cert);
    ep
}

/// A loopback QUIC client connected to the [`serve_local`] server at `addr`.
pub async fn connect_local(addr: SocketAddr) -> (quinn::Endpoint, quinn::Connection) {
    let cert = QUIC_CERT
        .lock()
        .unwrap()
        .clone()
        .expect("server certificate");
    quic_connect(LOCALHOST.parse().unwrap(), addr, cert).await
}

/// The one-way receiver: one long stream of frames ([`OneWayKind::QuicStream`]) or a
/// stream per message, verified into `progress` until `stop`.
pub async fn quic_oneway_receiver(
    kind: OneWayKind,
    size: usize,
    addr_tx: std_mpsc::Sender<SocketAddr>,
    mut stop: oneshot::Receiver<()>,
    progress: Arc<Progress>,
) {
    let ep = serve_local();
    addr_tx.send(ep.local_addr().unwrap()).unwrap();
    let conn = ep.accept().await.unwrap().await.unwrap();
    if kind == OneWayKind::QuicStream {
        let s = conn.accept_uni().await.unwrap();
        read_frames(s, size, stop, progress).await;
    } else {
        let mut seen = Seen::default();
        loop {
            tokio::select! {
                s = conn.accept_uni() => {
                    let Ok(mut s) = s else { break };
                    let p = s.read_to_end(size).await.unwrap();
                    seen.record(seq_of(&p, size));
                    progress.verified(seen.count());
                }
                _ = &mut stop => break,
            }
        }
    }
    conn.close(0u32.into(), b"done");
    ep.wait_idle().await;
}

/// The one-way sender to the receiver at `addr`, as `cmds` say.
pub async fn quic_oneway_sender(
    kind: OneWayKind,
    size: usize,
    addr: SocketAddr,
    mut cmds: mpsc::UnboundedReceiver<Cmd>,
) {
    let (ep, conn) = connect_local(addr).await;
    if kind == OneWayKind::QuicStream {
        let s = conn.open_uni().await.unwrap();
        write_frames(s, size, cmds).await;
    } else {
        while let Some(cmd) = cmds.recv().await {
            if let Cmd::Send { start, n } = cmd {
                for seq in start..start + n {
                    let mut s = conn.open_uni().await.unwrap();
                    s.write_all(&payload(seq, size)).await.unwrap();
                    s.finish().unwrap();
                }
            }
        }
    }
    conn.close(0u32.into(), b"done");
    ep.wait_idle().await;
}

/// Answers every `size`-byte request on a QUIC connection (one bidirectional stream each)
/// with an echo until `stop` or the connection's end. Returns the requests served (each
/// verified exactly once).
pub async fn serve_quic(
    conn: &quinn::Connection,
    mut stop: oneshot::Receiver<()>,
    size: usize,
) -> u64 {
    let seen = Arc::new(Mutex::new(Seen::default()));
    loop {
        tokio::select! {
            s = conn.accept_bi() => {
                let Ok((mut send, mut recv)) = s else { break };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let req = recv.read_to_end(size).await.unwrap();
                    seen.lock().unwrap().record(seq_of(&req, size));
                    send.write_all(&req).await.unwrap();
                    send.finish().unwrap();
                });
            }
            _ = &mut stop => break,
        }
    }
    let n = seen.lock().unwrap().count();
    n
}
