//! The host's route to a peer: the largest UDP payload it carries, as the operating system
//! knows it (Linux: `IP_MTU` of a socket connected to the peer, which sends nothing).

use std::net::SocketAddr;

use crate::endpoint::io::family::{canonical, IpFamily};

/// The largest UDP payload the host's route from `local` to `peer` carries: the route's MTU
/// (the interface's, or a smaller path MTU the kernel learnt) less the IP and UDP headers,
/// at most the largest UDP payload. `None` where the operating system does not say. Opens,
/// connects and closes one socket (a route lookup; nothing is sent): for a peer's address
/// set or changed, never per datagram.
pub(crate) fn route_payload(local: SocketAddr, peer: SocketAddr) -> Option<usize> {
    let peer = canonical(peer);
    let family = IpFamily::of(peer);
    let mtu = route_mtu(local, peer, family)?;
    Some(family.udp_payload(mtu).min(family.max_udp_payload()))
}

#[cfg(target_os = "linux")]
fn route_mtu(local: SocketAddr, peer: SocketAddr, family: IpFamily) -> Option<usize> {
    use std::os::fd::AsRawFd;

    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(peer), Type::DGRAM, Some(Protocol::UDP)).ok()?;
    // From the endpoint's own address where it is bound to one: routes may depend on the
    // source.
    let local = canonical(local);
    if !local.ip().is_unspecified() && IpFamily::of(local) == family {
        s.bind(&SocketAddr::new(local.ip(), 0).into()).ok()?;
    }
    s.connect(&peer.into()).ok()?;
    let (level, name) = match family {
        IpFamily::V4 => (libc::IPPROTO_IP, libc::IP_MTU),
        IpFamily::V6 => (libc::IPPROTO_IPV6, libc::IPV6_MTU),
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `mtu` and `len` are live locals of the sizes given; the kernel writes at most
    // `len` bytes into `mtu`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    usize::try_from(mtu).ok().filter(|m| *m > 0)
}

#[cfg(not(target_os = "linux"))]
fn route_mtu(_local: SocketAddr, _peer: SocketAddr, _family: IpFamily) -> Option<usize> {
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn loopback_routes_carry_the_largest_datagrams() {
        let any4: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let lo4: SocketAddr = "127.0.0.1:9".parse().unwrap();
        // The loopback interface's MTU is 65536: every payload up to the largest fits.
        assert_eq!(route_payload(any4, lo4), Some(65507));
        assert_eq!(
            route_payload("127.0.0.1:0".parse().unwrap(), lo4),
            Some(65507)
        );
        // An IPv4 peer written as IPv4-mapped IPv6 (a dual-stack socket's view) is IPv4.
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:9".parse().unwrap();
        assert_eq!(
            route_payload("[::]:0".parse().unwrap(), mapped),
            Some(65507)
        );
        // IPv6 loopback, where the host has it: the same 65 536-byte MTU less a 40-byte
        // header and UDP's 8 (below the largest IPv6 UDP payload, 65 527).
        if std::net::UdpSocket::bind("[::1]:0").is_ok() {
            let lo6: SocketAddr = "[::1]:9".parse().unwrap();
            assert_eq!(route_payload("[::]:0".parse().unwrap(), lo6), Some(65488));
        }
    }
}
