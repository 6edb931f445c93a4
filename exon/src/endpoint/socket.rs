//! The datagram socket trait the driver runs on, with tokio and turmoil implementations.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

/// A bound datagram socket: the only thing the driver needs from the network.
///
/// Small enough for tokio's `UdpSocket`, turmoil's `UdpSocket` (feature `turmoil`) and
/// in-memory or fault-injecting wrappers such as [`LossySocket`](super::LossySocket).
///
/// `recv_from` must be **cancel safe**: the driver polls it inside `tokio::select!` and may
/// drop the future before it completes; a datagram must then not be lost halfway (tokio's and
/// turmoil's sockets are cancel safe).
pub trait DatagramSocket: Send + Sync + 'static {
    /// Sends one datagram to `target`; returns the number of bytes sent.
    fn send_to(
        &self,
        buf: &[u8],
        target: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send;

    /// Receives one datagram into `buf`; returns its length and source address.
    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send;

    /// The address this socket is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl DatagramSocket for tokio::net::UdpSocket {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        tokio::net::UdpSocket::send_to(self, buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        tokio::net::UdpSocket::recv_from(self, buf).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::UdpSocket::local_addr(self)
    }
}

#[cfg(feature = "turmoil")]
impl DatagramSocket for turmoil::net::UdpSocket {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        turmoil::net::UdpSocket::send_to(self, buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        turmoil::net::UdpSocket::recv_from(self, buf).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        turmoil::net::UdpSocket::local_addr(self)
    }
}

impl<S: DatagramSocket> DatagramSocket for std::sync::Arc<S> {
    fn send_to(
        &self,
        buf: &[u8],
        target: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        (**self).send_to(buf, target)
    }

    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send {
        (**self).recv_from(buf)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        (**self).local_addr()
    }
}
