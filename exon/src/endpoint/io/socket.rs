//! The datagram socket trait the driver runs on, with tokio and turmoil implementations.

use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::endpoint::io::family::Reach;

/// What one receive buffer holds after [`DatagramSocket::recv_batch`]: one datagram, or
/// several from the same source coalesced by the kernel (GRO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// The source address of the datagrams in the buffer.
    pub addr: SocketAddr,
    /// Bytes in the buffer.
    pub len: usize,
    /// Size of each datagram in the buffer: boundaries are every `stride` bytes, and the
    /// last datagram may be shorter. Equal to `len` for a single datagram.
    pub stride: usize,
}

impl RecvMeta {
    /// A buffer holding one datagram of `len` bytes from `addr`.
    pub fn single(addr: SocketAddr, len: usize) -> RecvMeta {
        RecvMeta {
            addr,
            len,
            stride: len,
        }
    }
}

/// A bound datagram socket: the only thing the driver needs from the network.
///
/// Small enough for tokio's `UdpSocket`, turmoil's `UdpSocket` (feature `turmoil`) and
/// in-memory or fault-injecting wrappers such as [`LossySocket`](crate::endpoint::LossySocket).
///
/// `recv_from` must be **cancel safe**: the driver polls it inside `tokio::select!` and may
/// drop the future before it completes; a datagram must then not be lost halfway (tokio's and
/// turmoil's sockets are cancel safe).
///
/// The batch methods ([`send_segments`](Self::send_segments),
/// [`recv_batch`](Self::recv_batch)) have one-datagram-at-a-time defaults built on
/// `send_to` and `recv_from`; [`BatchSocket`](crate::endpoint::BatchSocket) overrides them with UDP
/// GSO, GRO and `recvmmsg` where the kernel has them.
pub trait DatagramSocket: Send + Sync + 'static {
    /// Sends one datagram to `target`; returns the number of bytes sent.
    ///
    /// # Cancel safety
    ///
    /// Need not be cancel safe: the driver always awaits a send to completion.
    fn send_to(
        &self,
        buf: &[u8],
        target: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send;

    /// Receives one datagram into `buf`; returns its length and source address.
    ///
    /// # Cancel safety
    ///
    /// Implementations must be cancel safe: if the future is dropped before it completes, no
    /// datagram has been taken from the socket (the driver polls it in `tokio::select!`).
    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send;

    /// The address this socket is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Which peer addresses this socket can send to: the driver sends to an IPv4 peer as
    /// `::ffff:a.b.c.d` from a dual-stack IPv6 socket, and sends nothing to a peer out of
    /// reach (counted in [`EndpointStats::send_errors`](crate::endpoint::EndpointStats::send_errors));
    /// [`Handle::try_add_peer`](crate::endpoint::Handle::try_add_peer) refuses such an address.
    /// Default: by the family of [`local_addr`](Self::local_addr), an IPv6 socket taken as
    /// dual-stack; a socket with IPV6_V6ONLY on should say [`Reach::V6Only`].
    fn reach(&self) -> io::Result<Reach> {
        Ok(Reach::of_socket(self.local_addr()?, false))
    }

    /// Asks the kernel for receive and send buffers of `bytes` each: the builder does so for
    /// every socket it starts an endpoint on, with
    /// [`EndpointConfig::socket_buffer`](crate::endpoint::EndpointConfig::socket_buffer)
    /// (a receive buffer of the kernel's default, about 200 KiB on Linux, holds three of
    /// the 64 KiB datagrams path MTU discovery reaches on loopback: a fast sender overflows
    /// it). Default: does nothing (a socket with no kernel buffers of its own).
    fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        let _ = bytes;
        Ok(())
    }

    /// The largest UDP payload the host's route to `peer` carries, as the operating system
    /// knows it (the route's MTU less the IP and UDP headers), or `None` when it does not
    /// say. Path MTU discovery to the peer probes that size first and never above it
    /// (`docs/wire.md`, "Path MTU discovery"). The driver asks when a peer's address is set
    /// or changes, never per datagram. Default `None`: discovery searches by its steps, up
    /// to the configured ceiling.
    fn route_payload(&self, peer: SocketAddr) -> Option<usize> {
        let _ = peer;
        None
    }

    /// Most datagrams one [`send_segments`](Self::send_segments) call takes. Default 1 (no
    /// segmentation offload: the driver then hands over one datagram per call).
    fn max_send_segments(&self) -> usize {
        1
    }

    /// Most datagrams the kernel may coalesce into one receive buffer (GRO). Default 1; the
    /// driver sizes its receive buffers with it.
    fn max_recv_segments(&self) -> usize {
        1
    }

    /// Sends `buf` as datagrams of `segment` bytes each (the last may be shorter), all to
    /// `target`. The driver never passes more than
    /// [`max_send_segments`](Self::max_send_segments) datagrams. Default: one `send_to` per
    /// datagram.
    ///
    /// # Cancel safety
    ///
    /// Need not be cancel safe, like [`send_to`](Self::send_to).
    fn send_segments(
        &self,
        buf: &[u8],
        segment: usize,
        target: SocketAddr,
    ) -> impl Future<Output = io::Result<()>> + Send {
        async move {
            for datagram in buf.chunks(segment.max(1)) {
                self.send_to(datagram, target).await?;
            }
            Ok(())
        }
    }

    /// Receives at least one datagram: fills `bufs[..n]` and `meta[..n]` and returns `n`
    /// (at most the shorter of the two slices, which are never empty). Must be **cancel
    /// safe**, like `recv_from`. Default: waits for one `recv_from`, then takes the datagrams
    /// that are already waiting without waiting again.
    ///
    /// # Cancel safety
    ///
    /// Implementations must be cancel safe, like [`recv_from`](Self::recv_from): the default
    /// is, since it completes in the same poll once the first datagram is in.
    fn recv_batch(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> impl Future<Output = io::Result<usize>> + Send {
        async move {
            let max = bufs.len().min(meta.len());
            let (len, addr) = self.recv_from(&mut bufs[0]).await?;
            meta[0] = RecvMeta::single(addr, len);
            let mut n = 1;
            // No await below: once the first datagram is in, the future completes in the same
            // poll, so it stays cancel safe.
            while n < max {
                let mut more = pin!(self.recv_from(&mut bufs[n]));
                match more.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(Ok((len, addr))) => meta[n] = RecvMeta::single(addr, len),
                    Poll::Ready(Err(_)) | Poll::Pending => break,
                }
                n += 1;
            }
            Ok(n)
        }
    }
}

/// Forwards the one-at-a-time methods to a UDP socket type with the same inherent methods
/// (tokio's and turmoil's); the batch methods keep their defaults.
macro_rules! forward_udp_socket {
    ($ty:ty $(, reach: $reach:expr, buffers: $buffers:expr)?) => {
        impl DatagramSocket for $ty {
            async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
                <$ty>::send_to(self, buf, target).await
            }

            async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
                <$ty>::recv_from(self, buf).await
            }

            fn local_addr(&self) -> io::Result<SocketAddr> {
                <$ty>::local_addr(self)
            }

            $(
                fn reach(&self) -> io::Result<Reach> {
                    $reach(self)
                }

                fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
                    $buffers(self, bytes)
                }

                fn route_payload(&self, peer: SocketAddr) -> Option<usize> {
                    let local = <$ty>::local_addr(self).ok()?;
                    crate::endpoint::io::route::route_payload(local, peer)
                }
            )?
        }
    };
}

forward_udp_socket!(tokio::net::UdpSocket, reach: reach_of_fd, buffers: buffers_of_fd);

/// Asks the kernel for receive and send buffers of `bytes` each on a real socket.
pub(crate) fn buffers_of_fd(io: &tokio::net::UdpSocket, bytes: usize) -> io::Result<()> {
    let s = socket2::SockRef::from(io);
    s.set_recv_buffer_size(bytes)?;
    s.set_send_buffer_size(bytes)
}

/// The reach of a real socket, IPV6_V6ONLY read from the kernel (Linux sets it on a socket
/// bound to one IPv6 address, whatever was asked).
pub(crate) fn reach_of_fd(io: &tokio::net::UdpSocket) -> io::Result<Reach> {
    let local = io.local_addr()?;
    let only_v6 = local.is_ipv6() && socket2::SockRef::from(io).only_v6()?;
    Ok(Reach::of_socket(local, only_v6))
}

#[cfg(feature = "turmoil")]
forward_udp_socket!(turmoil::net::UdpSocket);

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

    fn reach(&self) -> io::Result<Reach> {
        (**self).reach()
    }

    fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        (**self).set_buffer_sizes(bytes)
    }

    fn max_send_segments(&self) -> usize {
        (**self).max_send_segments()
    }

    fn max_recv_segments(&self) -> usize {
        (**self).max_recv_segments()
    }

    fn send_segments(
        &self,
        buf: &[u8],
        segment: usize,
        target: SocketAddr,
    ) -> impl Future<Output = io::Result<()>> + Send {
        (**self).send_segments(buf, segment, target)
    }

    fn recv_batch(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> impl Future<Output = io::Result<usize>> + Send {
        (**self).recv_batch(bufs, meta)
    }
}
