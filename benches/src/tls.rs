//! TCP with TLS 1.3 on loopback (rustls through tokio-rustls, AES-128-GCM only): the fair
//! anchor for sealed exon, one connection as for plain TCP.

use std::sync::{Arc, Mutex};

use rustls::crypto::ring as provider;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

/// rustls's ring provider restricted to TLS 1.3 with AES-128-GCM (what sealed exon uses).
fn aes128_gcm_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: vec![provider::cipher_suite::TLS13_AES_128_GCM_SHA256],
        ..provider::default_provider()
    })
}

/// The server's certificate, handed to the client thread (runners are set up one at a
/// time: the server publishes it before its address).
static TLS_CERT: Mutex<Option<CertificateDer<'static>>> = Mutex::new(None);

/// A TLS server with a fresh self-signed certificate for "localhost", published for
/// [`tls_connect`]: made by the server side before it hands out its address.
pub fn tls_publish() -> TlsServer {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = ck.cert.der().clone();
    *TLS_CERT.lock().unwrap() = Some(cert.clone());
    let key = PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der());
    let cfg = rustls::ServerConfig::builder_with_provider(aes128_gcm_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key.into())
        .unwrap();
    TlsServer(TlsAcceptor::from(Arc::new(cfg)))
}

/// A TLS server whose certificate was published for [`tls_connect`].
pub struct TlsServer(TlsAcceptor);

impl TlsServer {
    /// Completes the handshake on an accepted connection.
    pub async fn accept(&self, s: TcpStream) -> server::TlsStream<TcpStream> {
        self.0.accept(s).await.unwrap()
    }
}

/// Completes the TLS 1.3 handshake to the [`tls_publish`] server, trusting only its
/// certificate.
pub async fn tls_connect(s: TcpStream) -> client::TlsStream<TcpStream> {
    let cert = TLS_CERT
        .lock()
        .unwrap()
        .clone()
        .expect("server certificate");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(aes128_gcm_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    TlsConnector::from(Arc::new(cfg))
        .connect(name, s)
        .await
        .unwrap()
}
