//! A tokio UDP socket with batched I/O: UDP GSO sends, and GRO plus `recvmmsg` receives,
//! through `quinn-udp`.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use quinn_udp::{RecvMeta as QuinnMeta, Transmit, UdpSocketState};
use tokio::io::Interest;

use crate::endpoint::io::family::Reach;
use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::io::socket::RecvMeta;

/// Most receive buffers one [`recv_batch`](DatagramSocket::recv_batch) call fills.
const RECV_BATCH: usize = quinn_udp::BATCH_SIZE;

/// A tokio UDP socket that sends and receives datagrams in batches: one system call sends up
/// to [`max_send_segments`](DatagramSocket::max_send_segments) equal-size datagrams to one
/// destination (UDP GSO), and one receives up to 32 buffers (`recvmmsg`), each holding up to
/// [`max_recv_segments`](DatagramSocket::max_recv_segments) datagrams (UDP GRO).
///
/// [`Endpoint::bind`](crate::endpoint::Endpoint::bind) uses it. The system calls and their fallbacks
/// come from the `quinn-udp` crate (the I/O layer of the quinn QUIC stack): it probes for
/// GSO and GRO, turns GSO off on the first send the kernel or the NIC refuses, and uses plain
/// `sendmsg`/`recvmsg` where batching is missing. Like `quinn-udp`, the socket forbids IP
/// fragmentation: datagrams larger than the path MTU are refused, not fragmented (the
/// don't-fragment options of the socket's family are set, and on a dual-stack socket those
/// of IPv4 too).
#[derive(Debug)]
pub struct BatchSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    max_send_segments: usize,
    reach: Reach,
}

impl BatchSocket {
    /// Binds a UDP socket to `addr` (the first of its addresses that binds).
    ///
    /// A socket bound to the unspecified IPv6 address (`[::]:port`) is **dual-stack**:
    /// IPV6_V6ONLY is turned off explicitly, whatever the system's default, so that it
    /// serves IPv4 peers (seen as `::ffff:a.b.c.d`, which the endpoint treats as the IPv4
    /// address) and IPv6 peers at once. A system that refuses dual-stack sockets gets an
    /// IPv6-only one, with a warning; [`reach`](DatagramSocket::reach) then says so, and
    /// IPv4 peers are refused ([`Handle::try_add_peer`](crate::endpoint::Handle::try_add_peer)). A
    /// socket bound to one IPv6 address serves IPv6 peers only.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: a cancelled call leaves no socket open.
    pub async fn bind(addr: impl tokio::net::ToSocketAddrs) -> io::Result<BatchSocket> {
        let mut last = None;
        for at in tokio::net::lookup_host(addr).await? {
            match udp_socket(at, false) {
                Ok(s) => return BatchSocket::new(tokio::net::UdpSocket::from_std(s)?),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(no_address))
    }

    /// Binds `n` UDP sockets to the same address with `SO_REUSEPORT` (Linux), one per shard
    /// of a sharded endpoint, the `i`-th for shard `i`. With port 0, the first socket picks
    /// the port and the others join it. Only sockets of the same user can join such a group.
    ///
    /// A small kernel program (classic BPF, `SO_ATTACH_REUSEPORT_CBPF`) then hands every
    /// datagram to the socket of the shard that owns its source node id, read from the
    /// datagram's clear header, so that no datagram needs passing between shards. Where the
    /// kernel refuses the program, or another socket joins the group, the kernel spreads
    /// datagrams by a hash of the addresses instead and the shards pass on what is not
    /// theirs ([`bind_reuseport_unsteered`](Self::bind_reuseport_unsteered) does only that).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: a cancelled call leaves no socket open.
    pub async fn bind_reuseport(
        addr: impl tokio::net::ToSocketAddrs,
        n: usize,
    ) -> io::Result<Vec<BatchSocket>> {
        let out = Self::bind_reuseport_unsteered(addr, n).await?;
        if out.len() > 1 {
            if let Err(e) = Self::steer_by_node_id(&out) {
                tracing::debug!(error = %e, "no steering program: shards pass datagrams on");
            }
        }
        Ok(out)
    }

    /// Attaches the steering program of [`bind_reuseport`](Self::bind_reuseport) to the
    /// `SO_REUSEPORT` group that `group` forms, for sockets made another way (with other
    /// buffer sizes, say): `group[i]` must be the `i`-th socket bound to the address, and
    /// the sockets are then given to [`Builder::with_sockets`](crate::endpoint::Builder::with_sockets)
    /// in that order. Linux only (elsewhere: `Unsupported`); a kernel that refuses the
    /// program returns its error, and the shards then pass datagrams on as without it.
    pub fn steer_by_node_id(group: &[BatchSocket]) -> io::Result<()> {
        let Some(first) = group.first() else {
            return Ok(());
        };
        #[cfg(target_os = "linux")]
        return crate::endpoint::shards::steering::attach(&first.io, group.len());
        #[cfg(not(target_os = "linux"))]
        {
            let _ = first;
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "steering datagrams to shards needs Linux",
            ))
        }
    }

    /// [`bind_reuseport`](Self::bind_reuseport) without the steering program: the kernel
    /// spreads datagrams over the sockets by a hash of the source and destination
    /// addresses, and a sharded endpoint passes each to the shard that owns its source.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: a cancelled call leaves no socket open.
    pub async fn bind_reuseport_unsteered(
        addr: impl tokio::net::ToSocketAddrs,
        n: usize,
    ) -> io::Result<Vec<BatchSocket>> {
        let mut at = tokio::net::lookup_host(addr)
            .await?
            .next()
            .ok_or_else(no_address)?;
        // In order: the `i`-th socket bound is the group's socket `i`, shard `i`'s.
        let mut out = Vec::with_capacity(n);
        for _ in 0..n.max(1) {
            let s = udp_socket(at, true)?;
            at = s.local_addr()?;
            out.push(BatchSocket::new(tokio::net::UdpSocket::from_std(s)?)?);
        }
        Ok(out)
    }

    /// Takes over a bound tokio socket (set its buffer sizes before, if needed). Enables GRO
    /// on it, and forbids fragmentation with the options of its family: from now on, read
    /// it only through this type. Its [`reach`](DatagramSocket::reach) is read from the
    /// socket (IPV6_V6ONLY) once, here.
    pub fn new(io: tokio::net::UdpSocket) -> io::Result<BatchSocket> {
        let state = UdpSocketState::new((&io).into())?;
        let reach = crate::endpoint::io::socket::reach_of_fd(&io)?;
        Ok(BatchSocket {
            io,
            state,
            max_send_segments: usize::MAX,
            reach,
        })
    }

    /// Asks the kernel for receive and send buffers of `bytes` each (Linux grants at most
    /// `net.core.rmem_max` and `net.core.wmem_max`; asking for more is not an error).
    pub fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        let s = socket2::SockRef::from(&self.io);
        s.set_recv_buffer_size(bytes)?;
        s.set_send_buffer_size(bytes)
    }

    /// The receive buffer the kernel granted, in bytes (as `SO_RCVBUF` reports it: Linux
    /// counts twice what was asked, for its bookkeeping).
    pub fn recv_buffer_size(&self) -> io::Result<usize> {
        socket2::SockRef::from(&self.io).recv_buffer_size()
    }

    /// Caps the datagrams sent per system call; 1 turns segmentation offload off (each
    /// datagram is then one `sendmsg`). Receiving is unchanged.
    pub fn with_max_send_segments(mut self, n: usize) -> BatchSocket {
        self.max_send_segments = n.max(1);
        self
    }

    /// The tokio socket underneath (for socket options; do not read or write through it).
    pub fn get_ref(&self) -> &tokio::net::UdpSocket {
        &self.io
    }
}

impl DatagramSocket for BatchSocket {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        self.send_segments(buf, buf.len(), target).await?;
        Ok(buf.len())
    }

    /// Receives one datagram. With GRO on, datagrams the kernel coalesced behind it in
    /// the same buffer are dropped (as UDP may): the driver uses
    /// [`recv_batch`](DatagramSocket::recv_batch), which keeps them.
    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let mut meta = [RecvMeta::single(self.io.local_addr()?, 0)];
        let mut bufs = [IoSliceMut::new(buf)];
        self.recv_batch(&mut bufs, &mut meta).await?;
        Ok((meta[0].stride.min(meta[0].len), meta[0].addr))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn reach(&self) -> io::Result<Reach> {
        Ok(self.reach)
    }

    fn set_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        BatchSocket::set_buffer_sizes(self, bytes)
    }

    fn route_payload(&self, peer: SocketAddr) -> Option<usize> {
        crate::endpoint::io::route::route_payload(self.io.local_addr().ok()?, peer)
    }

    fn max_send_segments(&self) -> usize {
        self.state.max_gso_segments().min(self.max_send_segments)
    }

    fn max_recv_segments(&self) -> usize {
        self.state.gro_segments()
    }

    async fn send_segments(
        &self,
        buf: &[u8],
        segment: usize,
        target: SocketAddr,
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination: target,
            ecn: None,
            contents: buf,
            segment_size: (segment < buf.len()).then_some(segment),
            src_ip: None,
        };
        self.io
            .async_io(Interest::WRITABLE, || {
                self.state.try_send((&self.io).into(), &transmit)
            })
            .await
    }

    async fn recv_batch(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let max = bufs.len().min(meta.len()).min(RECV_BATCH);
        let mut quinn = [QuinnMeta::default(); RECV_BATCH];
        // The closure runs synchronously once the socket is readable: a dropped future
        // never loses a datagram (cancel safe).
        let n = self
            .io
            .async_io(Interest::READABLE, || {
                self.state
                    .recv((&self.io).into(), &mut bufs[..max], &mut quinn[..max])
            })
            .await?;
        for (m, q) in meta.iter_mut().zip(&quinn[..n]) {
            *m = RecvMeta {
                addr: q.addr,
                len: q.len,
                stride: q.stride,
            };
        }
        Ok(n)
    }
}

fn no_address() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, "no address to bind")
}

/// A non-blocking UDP socket bound to `addr`, with `SO_REUSEPORT` set if `reuse_port`
/// (Linux only). An IPv6 socket gets IPV6_V6ONLY set explicitly: off (dual-stack) on the
/// unspecified address or an IPv4-mapped one, on otherwise.
fn udp_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if let SocketAddr::V6(a) = addr {
        let dual = a.ip().is_unspecified() || a.ip().to_ipv4_mapped().is_some();
        match s.set_only_v6(!dual) {
            Ok(()) => {}
            // One IPv6 address serves IPv6 peers whatever the option says.
            Err(e) if !dual => tracing::debug!(%addr, error = %e, "IPV6_V6ONLY not set"),
            // No dual-stack sockets here (some BSDs): the wildcard serves IPv6 alone.
            Err(e) if a.ip().is_unspecified() => tracing::warn!(
                %addr, error = %e,
                "the system refused a dual-stack socket: IPv6 peers only, IPv4 peers unreachable"
            ),
            // An IPv4-mapped address cannot be bound without dual-stack.
            Err(e) => {
                let what = format!("turning IPV6_V6ONLY off for {addr}: {e}");
                return Err(io::Error::new(e.kind(), what));
            }
        }
    }
    if reuse_port {
        set_reuse_port(&s)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s.into())
}

/// Sets `SO_REUSEPORT` (Linux).
#[cfg(target_os = "linux")]
fn set_reuse_port(s: &socket2::Socket) -> io::Result<()> {
    s.set_reuse_port(true)
}

/// `SO_REUSEPORT` groups are used on Linux only.
#[cfg(not(target_os = "linux"))]
fn set_reuse_port(_s: &socket2::Socket) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "sharded endpoints need SO_REUSEPORT (Linux)",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// An integer socket option of `s`, as the kernel reports it.
    fn option(s: &BatchSocket, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are live locals of the sizes given; the kernel writes at
        // most `len` bytes into `value`.
        let rc = unsafe {
            libc::getsockopt(
                s.get_ref().as_raw_fd(),
                level,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        value
    }

    /// Each socket forbids fragmentation with the options of its family (both on a
    /// dual-stack socket, whose IPv4 peers travel as IPv4), and has IPV6_V6ONLY set as its
    /// address asks: off on `[::]`, on for one IPv6 address.
    #[tokio::test]
    async fn sockets_get_the_options_of_their_family() {
        use libc::{IPPROTO_IP, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_V6ONLY, IP_MTU_DISCOVER};
        let v4 = BatchSocket::bind("127.0.0.1:0").await.unwrap();
        assert_eq!(v4.reach().unwrap(), Reach::V4);
        let no_fragments = libc::IP_PMTUDISC_PROBE;
        assert_eq!(option(&v4, IPPROTO_IP, IP_MTU_DISCOVER), no_fragments);
        if std::net::UdpSocket::bind("[::1]:0").is_err() {
            eprintln!("IPv6 socket options: skipped, no IPv6 loopback");
            return;
        }
        for (addr, only_v6, reach) in [
            ("[::]:0", 0, Reach::DualStack),
            ("[::1]:0", 1, Reach::V6Only),
        ] {
            let s = BatchSocket::bind(addr).await.unwrap();
            assert_eq!(s.reach().unwrap(), reach, "{addr}");
            assert_eq!(option(&s, IPPROTO_IPV6, IPV6_V6ONLY), only_v6, "{addr}");
            let v6_probe = libc::IPV6_PMTUDISC_PROBE;
            assert_eq!(
                option(&s, IPPROTO_IPV6, IPV6_MTU_DISCOVER),
                v6_probe,
                "{addr}"
            );
            assert_eq!(option(&s, IPPROTO_IPV6, libc::IPV6_DONTFRAG), 1, "{addr}");
            assert_eq!(
                option(&s, IPPROTO_IP, IP_MTU_DISCOVER),
                no_fragments,
                "{addr}"
            );
        }
    }
}
