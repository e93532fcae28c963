//! Address resolution for the connection manager (`Cm::poll_resolve`, contract §2): is a
//! destination reachable from this port, and from which of its addresses. The kernel's
//! `rdma_resolve_ip` asks the routing table and then the neighbour; here:
//!
//! - a UDP port (the kernel owns L2 and routes): the route the kernel picks for `dst` (a UDP
//!   socket `connect()`ed to it, then `getsockname`) must leave from the port's address, or
//!   `dst` is one of the port's own addresses (loopback, as the kernel resolves a local
//!   address). A loopback destination (127/8, ::1) from a loopback port is reachable too:
//!   the kernel's route to 127.0.0.2 names 127.0.0.1 as its source, but a UDP port bound to
//!   127.0.0.2 reaches 127.0.0.1 all the same.
//! - a frame port (TAP, AF_PACKET: its own L2): `dst` in the subnet of one of its addresses
//!   (the neighbour is found by ARP/ND when the first MAD leaves), or one of its addresses.
//!
//! Anything else is ENETUNREACH, as `rdma_resolve_addr` reports an address with no route
//! (ADDR_ERROR, status -ENETUNREACH). The hop limit is the route's (64, Linux's default TTL
//! and hop limit; `ip4_dst_hoplimit`).

use super::super::port::{Cidr, PortSpec};
use crate::cm::Resolved;
use nix::errno::Errno;
use std::net::{IpAddr, SocketAddr, UdpSocket};

/// Hop limit of a route with no TTL of its own (Linux's `ip_default_ttl`, `hop_limit`).
const DEFAULT_HOP_LIMIT: u8 = 64;

#[derive(Debug, Clone)]
pub(in crate::daemon) enum Resolver {
    /// The kernel routes; the port's addresses.
    Udp(Vec<IpAddr>),
    /// The port's own L2; its addresses with their prefixes.
    Frame(Vec<Cidr>),
}

impl Resolver {
    /// The resolver of a port: `addrs` as the port serves them (`PortInfo::addrs`).
    pub(in crate::daemon) fn new(spec: &PortSpec, addrs: &[IpAddr]) -> Resolver {
        match spec {
            PortSpec::Udp(_) => Resolver::Udp(addrs.to_vec()),
            PortSpec::Tap { v4, v6, .. } => Resolver::Frame(
                v4.map(|(a, p)| Cidr {
                    addr: a.into(),
                    prefix: p,
                })
                .into_iter()
                .chain(v6.map(|(a, p)| Cidr {
                    addr: a.into(),
                    prefix: p,
                }))
                .collect(),
            ),
            PortSpec::AfPacket { iface, .. } => {
                // The interface's prefixes for the port's addresses (as `open` chose them).
                let known = crate::backend::ifaddrs::interface(iface);
                let prefix_of = |ip: IpAddr| {
                    known
                        .as_ref()
                        .and_then(|i| i.addrs.iter().find(|a| a.ip == ip))
                        .and_then(|a| a.prefix)
                        .unwrap_or(if ip.is_ipv4() { 24 } else { 64 })
                };
                Resolver::Frame(
                    addrs
                        .iter()
                        .map(|&addr| Cidr {
                            addr,
                            prefix: prefix_of(addr),
                        })
                        .collect(),
                )
            }
        }
    }

    fn addrs(&self) -> Vec<IpAddr> {
        match self {
            Resolver::Udp(a) => a.clone(),
            Resolver::Frame(c) => c.iter().map(|c| c.addr).collect(),
        }
    }

    /// Resolves `dst` (from `src` if the id is bound to one): the source address and hop
    /// limit, or an errno.
    pub(in crate::daemon) fn resolve(
        &self,
        src: Option<IpAddr>,
        dst: IpAddr,
    ) -> Result<Resolved, i32> {
        let ours = self.addrs();
        let src = src.filter(|s| !s.is_unspecified());
        if let Some(s) = src {
            if !ours.contains(&s) {
                return Err(Errno::EADDRNOTAVAIL as i32);
            }
            if s.is_ipv4() != dst.is_ipv4() {
                return Err(Errno::EAFNOSUPPORT as i32);
            }
        }
        if dst.is_unspecified() || dst.is_multicast() {
            return Err(Errno::EINVAL as i32);
        }
        let ok = |s: IpAddr| {
            Ok(Resolved {
                src: src.unwrap_or(s),
                hop_limit: DEFAULT_HOP_LIMIT,
            })
        };
        if ours.contains(&dst) {
            return ok(dst);
        }
        match self {
            Resolver::Udp(addrs) => {
                let route = kernel_route_source(dst)?;
                if addrs.contains(&route) {
                    return ok(route);
                }
                if dst.is_loopback() {
                    if let Some(&a) = addrs
                        .iter()
                        .find(|a| a.is_loopback() && a.is_ipv4() == dst.is_ipv4())
                    {
                        return ok(a);
                    }
                }
                Err(Errno::ENETUNREACH as i32)
            }
            Resolver::Frame(nets) => match nets.iter().find(|c| in_subnet(c, dst)) {
                Some(c) => ok(c.addr),
                None => Err(Errno::ENETUNREACH as i32),
            },
        }
    }
}

/// The source address of the kernel's route to `dst` (a UDP socket connected to it: no
/// packet is sent).
fn kernel_route_source(dst: IpAddr) -> Result<IpAddr, i32> {
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(Errno::ENETUNREACH as i32);
    let s = UdpSocket::bind(any).map_err(errno)?;
    s.connect(SocketAddr::new(dst, crate::wire::ROCE_UDP_PORT))
        .map_err(errno)?;
    Ok(s.local_addr().map_err(errno)?.ip())
}

/// Whether `ip` is in `net`'s subnet (same family).
fn in_subnet(net: &Cidr, ip: IpAddr) -> bool {
    match (net.addr, ip) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = u32::MAX
                .checked_shl(32 - u32::from(net.prefix))
                .unwrap_or(0);
            u32::from(a) & m == u32::from(b) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = u128::MAX
                .checked_shl(128 - u32::from(net.prefix))
                .unwrap_or(0);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_frame_port_reaches_its_subnets_only() {
        let r = Resolver::Frame(vec![
            "10.9.0.1/24".parse().unwrap(),
            "fd00::1/64".parse().unwrap(),
        ]);
        let got = r.resolve(None, ip("10.9.0.7")).unwrap();
        assert_eq!((got.src, got.hop_limit), (ip("10.9.0.1"), 64));
        assert_eq!(r.resolve(None, ip("fd00::9")).unwrap().src, ip("fd00::1"));
        assert_eq!(r.resolve(None, ip("10.9.0.1")).unwrap().src, ip("10.9.0.1"));
        let unreach = Errno::ENETUNREACH as i32;
        assert_eq!(r.resolve(None, ip("10.9.1.7")).err(), Some(unreach));
        assert_eq!(r.resolve(None, ip("fd01::9")).err(), Some(unreach));
        assert_eq!(
            r.resolve(Some(ip("10.1.1.1")), ip("10.9.0.7")).err(),
            Some(Errno::EADDRNOTAVAIL as i32)
        );
    }

    #[test]
    fn a_udp_port_follows_the_kernels_route() {
        let r = Resolver::Udp(vec![ip("127.0.0.1")]);
        assert_eq!(
            r.resolve(None, ip("127.0.0.1")).unwrap().src,
            ip("127.0.0.1")
        );
        // Through lo: the kernel's route leaves from 127.0.0.1.
        assert_eq!(
            r.resolve(None, ip("127.0.0.9")).unwrap().src,
            ip("127.0.0.1")
        );
        // A loopback port of another loopback address reaches it too.
        let r2 = Resolver::Udp(vec![ip("127.0.0.2")]);
        assert_eq!(
            r2.resolve(None, ip("127.0.0.1")).unwrap().src,
            ip("127.0.0.2")
        );
        // 192.0.2.0/24 (TEST-NET-1): no route from lo, or one from another address.
        assert!(r.resolve(None, ip("192.0.2.1")).is_err());
    }
}
