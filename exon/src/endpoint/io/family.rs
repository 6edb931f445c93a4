//! IP families: the one canonical form of a peer address, which peer addresses a socket can
//! send to (and in what form the socket takes them), and the UDP payload a link carries in
//! each family.
//!
//! A dual-stack IPv6 socket (IPV6_V6ONLY off) reports an IPv4 peer as the IPv4-mapped
//! address `::ffff:a.b.c.d`; the same peer reached through an IPv4 socket, or configured by
//! the application, is `a.b.c.d`. The driver turns every address that comes in (received
//! datagrams, [`Handle::add_peer`](crate::endpoint::Handle::add_peer)) into its [`canonical`] form
//! before anything looks at it, so that the address book, the cookies and the path
//! challenges see one address per peer; and turns it back into what the socket takes
//! ([`Reach::on_wire`]) only when it sends.

use std::fmt;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};

/// Bytes of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// The smallest MTU of any IPv6 link (RFC 8200): what every IPv6 path carries.
pub const IPV6_MIN_MTU: usize = 1280;

/// An IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4 (and IPv4-mapped IPv6 addresses, which are IPv4 peers).
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// The family of `addr`, an IPv4-mapped IPv6 address counting as IPv4.
    pub fn of(addr: SocketAddr) -> IpFamily {
        match canonical(addr) {
            SocketAddr::V4(_) => IpFamily::V4,
            SocketAddr::V6(_) => IpFamily::V6,
        }
    }

    /// Bytes of the IP header without options or extension headers: 20 for IPv4, 40 for
    /// IPv6.
    pub const fn ip_header_len(self) -> usize {
        match self {
            IpFamily::V4 => 20,
            IpFamily::V6 => 40,
        }
    }

    /// The UDP payload of the largest datagram a link of MTU `link_mtu` carries unfragmented
    /// (no IP options or extension headers): a 1500-byte Ethernet link carries 1472 bytes
    /// over IPv4 and 1452 over IPv6. A value for
    /// [`MtuConfig::max_datagram_size`](crate::proto::MtuConfig::max_datagram_size) when
    /// path MTU discovery is off and every path's MTU is known.
    pub const fn udp_payload(self, link_mtu: usize) -> usize {
        link_mtu.saturating_sub(self.ip_header_len() + UDP_HEADER_LEN)
    }

    /// The largest UDP payload of one datagram: 65507 bytes over IPv4 (the 16-bit total
    /// length less both headers), 65527 over IPv6 (the 16-bit payload length less the UDP
    /// header; jumbograms aside).
    pub const fn max_udp_payload(self) -> usize {
        match self {
            IpFamily::V4 => u16::MAX as usize - 20 - UDP_HEADER_LEN,
            IpFamily::V6 => u16::MAX as usize - UDP_HEADER_LEN,
        }
    }
}

/// The canonical form of a peer address: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as
/// a dual-stack socket reports an IPv4 peer) becomes the IPv4 address, and an IPv6 address
/// loses its flow label (which names a flow, not the peer; the scope id stays). Every
/// other address is unchanged.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => addr,
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => SocketAddr::V6(SocketAddrV6::new(*a.ip(), a.port(), 0, a.scope_id())),
        },
    }
}

/// Which peer addresses a socket can send to, by IP family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reach {
    /// An IPv4 socket: IPv4 peers only.
    V4,
    /// An IPv6 socket with IPV6_V6ONLY on (or bound to one IPv6 address): IPv6 peers only.
    V6Only,
    /// An IPv6 socket with IPV6_V6ONLY off: IPv6 peers, and IPv4 peers as IPv4-mapped
    /// addresses.
    DualStack,
}

impl Reach {
    /// The reach of a socket bound to `local`, with IPV6_V6ONLY as `only_v6` says (ignored
    /// for an IPv4 socket).
    pub fn of_socket(local: SocketAddr, only_v6: bool) -> Reach {
        match (local, only_v6) {
            (SocketAddr::V4(_), _) => Reach::V4,
            (SocketAddr::V6(_), true) => Reach::V6Only,
            (SocketAddr::V6(_), false) => Reach::DualStack,
        }
    }

    /// Whether the socket can send to `peer` (in any form).
    pub fn reaches(self, peer: SocketAddr) -> bool {
        match (self, IpFamily::of(peer)) {
            (Reach::DualStack, _) | (Reach::V4, IpFamily::V4) | (Reach::V6Only, IpFamily::V6) => {
                true
            }
            (Reach::V4, IpFamily::V6) | (Reach::V6Only, IpFamily::V4) => false,
        }
    }

    /// `peer` in the form the socket takes, if it [`reaches`](Self::reaches) it: an IPv4
    /// peer as `::ffff:a.b.c.d` on a dual-stack socket, its canonical form otherwise.
    pub fn on_wire(self, peer: SocketAddr) -> Option<SocketAddr> {
        if !self.reaches(peer) {
            return None;
        }
        Some(match (self, canonical(peer)) {
            (Reach::DualStack, SocketAddr::V4(a)) => {
                SocketAddr::new(IpAddr::V6(a.ip().to_ipv6_mapped()), a.port())
            }
            (_, peer) => peer,
        })
    }
}

impl fmt::Display for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reach::V4 => "IPv4",
            Reach::V6Only => "IPv6-only",
            Reach::DualStack => "dual-stack IPv6",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_mapped_address_is_the_ipv4_address() {
        assert_eq!(canonical(a("[::ffff:127.0.0.1]:4000")), a("127.0.0.1:4000"));
        assert_eq!(canonical(a("[::ffff:10.1.2.3]:9")), a("10.1.2.3:9"));
        assert_eq!(IpFamily::of(a("[::ffff:10.1.2.3]:9")), IpFamily::V4);
        // Not mapped: IPv6 stays IPv6, including the deprecated IPv4-compatible form
        // (`::1` is the loopback, not 0.0.0.1).
        for v6 in ["[::1]:4000", "[2001:db8::1]:4000", "[::]:1", "[::7f00:1]:2"] {
            assert_eq!(canonical(a(v6)), a(v6));
            assert_eq!(IpFamily::of(a(v6)), IpFamily::V6);
        }
        assert_eq!(canonical(a("127.0.0.1:4000")), a("127.0.0.1:4000"));
        // The flow label is dropped, the scope id kept.
        let flow = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 5, 77, 3));
        let bare = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 5, 0, 3));
        assert_eq!(canonical(flow), bare);
    }

    #[test]
    fn each_socket_reaches_its_families_in_its_own_form() {
        let (v4, mapped, v6) = (a("127.0.0.1:7"), a("[::ffff:127.0.0.1]:7"), a("[::1]:7"));
        let dual = Reach::of_socket(a("[::]:1"), false);
        assert_eq!(dual, Reach::DualStack);
        assert_eq!(dual.on_wire(v4), Some(mapped));
        assert_eq!(dual.on_wire(mapped), Some(mapped));
        assert_eq!(dual.on_wire(v6), Some(v6));
        let only4 = Reach::of_socket(a("0.0.0.0:1"), true);
        assert_eq!(only4, Reach::V4);
        assert_eq!(only4.on_wire(v4), Some(v4));
        assert_eq!(only4.on_wire(mapped), Some(v4));
        assert_eq!(only4.on_wire(v6), None);
        let only6 = Reach::of_socket(a("[::1]:1"), true);
        assert_eq!(only6.on_wire(v6), Some(v6));
        assert_eq!(only6.on_wire(v4), None);
        assert_eq!(only6.on_wire(mapped), None);
    }

    #[test]
    fn a_link_carries_less_payload_over_ipv6() {
        assert_eq!(IpFamily::V4.udp_payload(1500), 1472);
        assert_eq!(IpFamily::V6.udp_payload(1500), 1452);
        assert_eq!(IpFamily::V6.udp_payload(IPV6_MIN_MTU), 1232);
        assert_eq!(IpFamily::V4.udp_payload(10), 0);
        assert_eq!(
            IpFamily::V4.max_udp_payload(),
            crate::proto::MAX_DATAGRAM_SIZE
        );
        assert_eq!(IpFamily::V6.max_udp_payload(), 65527);
        // The base datagram size of path MTU discovery gets through every IPv6 path.
        let every_v6_path = IpFamily::V6.udp_payload(IPV6_MIN_MTU);
        assert!(crate::proto::BASE_DATAGRAM_SIZE <= every_v6_path);
    }
}
