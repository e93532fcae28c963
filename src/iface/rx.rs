//! The receive path: link layer, then ARP, IPv4 or IPv6, then ICMP, ICMPv6 or UDP.

use super::eth::{self, L2Error, L2};
use super::ip::{self, Ipv4, Ipv6};
use super::{DropReason, Iface, Rx};
use crate::wire::{bth, Ecn, ICRC_LEN, ROCE_UDP_PORT};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// What the RoCE part of a UDP datagram must at least hold for the engine to look at it.
const ROCE_MIN: usize = bth::HEADER_LEN + ICRC_LEN;

impl Iface {
    pub(super) fn dispatch(&mut self, now: Duration, frame: &[u8]) -> Rx {
        let l2 = match eth::parse(frame) {
            Ok(l2) => l2,
            Err(L2Error::Short) => return Rx::Dropped(DropReason::Malformed),
            Err(L2Error::Stacked) => return Rx::Dropped(DropReason::BadVlan),
            Err(L2Error::NotEthernet2) => return Rx::Dropped(DropReason::Unsupported),
        };
        // IEEE 802.3 §3.2.3: a source address is never a group address.
        if eth::is_group(&l2.src) {
            return Rx::Dropped(DropReason::Malformed);
        }
        // Our own frames seen again (a bridge looping them back, a packet socket that sees
        // outgoing traffic) are nobody's input.
        if l2.src == self.cfg.mac || !self.accepts_mac(&l2.dst) {
            return Rx::Dropped(DropReason::NotForUs);
        }
        let vlan_ok = match (self.cfg.vlan, l2.vid) {
            // VID 0 is a priority tag only: the frame belongs to the untagged network
            // (802.1Q §9.6).
            (None, None | Some(0)) => true,
            (Some(want), Some(got)) => want == got,
            _ => false,
        };
        if !vlan_ok {
            return Rx::Dropped(DropReason::BadVlan);
        }
        let body = &frame[l2.payload..];
        match l2.ethertype {
            eth::ETHERTYPE_ARP => self.process_arp(now, l2.dst == self.cfg.mac, body),
            eth::ETHERTYPE_IPV4 => self.process_ipv4(&l2, body),
            eth::ETHERTYPE_IPV6 => self.process_ipv6(now, &l2, body),
            _ => Rx::Dropped(DropReason::Unsupported),
        }
    }

    /// Our MAC, broadcast, and (with IPv6) all-nodes and the solicited-node groups of
    /// our addresses (RFC 4861 §7.2.1 requires joining those).
    fn accepts_mac(&self, dst: &eth::Mac) -> bool {
        if *dst == self.cfg.mac || *dst == eth::BROADCAST {
            return true;
        }
        if dst[..2] != [0x33, 0x33] {
            return false;
        }
        *dst == eth::ipv6_multicast_mac(&eth::ALL_NODES)
            || self
                .ipv6_addrs()
                .any(|a| *dst == eth::ipv6_multicast_mac(&eth::solicited_node(&a)))
    }

    fn process_ipv4(&mut self, l2: &L2, b: &[u8]) -> Rx {
        let h = match ip::parse_v4(b) {
            Ok(h) => h,
            Err(r) => return Rx::Dropped(r),
        };
        // Only unicast to our address: broadcast echo is not answered (as Linux's
        // icmp_echo_ignore_broadcasts default), and RoCE is unicast.
        if self.cfg.ipv4.is_none_or(|(a, _)| a != h.dst) {
            return Rx::Dropped(DropReason::NotForUs);
        }
        if !ip::v4_source_ok(h.src) || self.is_subnet_broadcast(h.src) {
            return Rx::Dropped(DropReason::BadSource);
        }
        if h.fragment {
            return Rx::Dropped(DropReason::Fragment);
        }
        let l4 = &b[h.header_len..h.total_len];
        let l4_off = l2.payload + h.header_len;
        match h.proto {
            ip::PROTO_ICMP => self.process_icmpv4(l2, &h, l4),
            ip::PROTO_UDP => self.process_udp_v4(&h, l4, l4_off),
            _ => Rx::Dropped(DropReason::Unsupported),
        }
    }

    fn process_udp_v4(&mut self, h: &Ipv4, l4: &[u8], l4_off: usize) -> Rx {
        let u = match ip::parse_udp(l4) {
            Ok(u) => u,
            Err(r) => return Rx::Dropped(r),
        };
        if u.dst_port != ROCE_UDP_PORT {
            return Rx::Dropped(DropReason::NotRocePort);
        }
        let l4 = &l4[..u.len];
        // RFC 768: a zero checksum means none was computed.
        if u.checksum != 0 {
            let acc = ip::pseudo_v4(h.src, h.dst, ip::PROTO_UDP, u.len);
            if ip::finish(ip::sum(l4, acc)) != 0 {
                return Rx::Dropped(DropReason::BadChecksum);
            }
        }
        roce(
            SocketAddr::new(IpAddr::V4(h.src), u.src_port),
            SocketAddr::new(IpAddr::V4(h.dst), u.dst_port),
            Some(h.id),
            Ecn::from_tos(h.tos),
            l4_off,
            u.len,
        )
    }

    fn process_ipv6(&mut self, now: Duration, l2: &L2, b: &[u8]) -> Rx {
        let h = match ip::parse_v6(b) {
            Ok(h) => h,
            Err(r) => return Rx::Dropped(r),
        };
        let unicast = self.is_ours_v6(&h.dst);
        let group =
            h.dst == eth::ALL_NODES || self.ipv6_addrs().any(|a| h.dst == eth::solicited_node(&a));
        if !unicast && !group {
            return Rx::Dropped(DropReason::NotForUs);
        }
        // The unspecified source is legitimate only in a DAD solicitation (RFC 4861
        // §7.1.1), which the ND code checks.
        if h.src.is_multicast() || h.src.is_loopback() {
            return Rx::Dropped(DropReason::BadSource);
        }
        let l4 = &b[ip::IPV6_LEN..h.total_len];
        let l4_off = l2.payload + ip::IPV6_LEN;
        match h.next {
            ip::PROTO_ICMPV6 => self.process_icmpv6(now, l2, &h, l4, unicast),
            ip::PROTO_UDP if !unicast => Rx::Dropped(DropReason::NotForUs),
            ip::PROTO_UDP => self.process_udp_v6(&h, l4, l4_off),
            _ => Rx::Dropped(DropReason::Unsupported),
        }
    }

    fn process_udp_v6(&mut self, h: &Ipv6, l4: &[u8], l4_off: usize) -> Rx {
        if h.src.is_unspecified() {
            return Rx::Dropped(DropReason::BadSource);
        }
        let u = match ip::parse_udp(l4) {
            Ok(u) => u,
            Err(r) => return Rx::Dropped(r),
        };
        if u.dst_port != ROCE_UDP_PORT {
            return Rx::Dropped(DropReason::NotRocePort);
        }
        // Zero over IPv6 is what rxe sends (RFC 6936's exception for tunnels); anything
        // else is checked.
        if u.checksum != 0 {
            let acc = ip::pseudo_v6(&h.src, &h.dst, ip::PROTO_UDP, u.len);
            if ip::finish(ip::sum(&l4[..u.len], acc)) != 0 {
                return Rx::Dropped(DropReason::BadChecksum);
            }
        }
        roce(
            SocketAddr::new(IpAddr::V6(h.src), u.src_port),
            SocketAddr::new(IpAddr::V6(h.dst), u.dst_port),
            None,
            Ecn::from_tos(h.tclass),
            l4_off,
            u.len,
        )
    }
}

/// The `Rx::Roce` for a UDP datagram of `udp_len` bytes at `l4_off` in the frame.
fn roce(
    src: SocketAddr,
    dst: SocketAddr,
    ipv4_id: Option<u16>,
    ecn: Ecn,
    l4_off: usize,
    udp_len: usize,
) -> Rx {
    if udp_len - ip::UDP_LEN < ROCE_MIN {
        return Rx::Dropped(DropReason::Malformed);
    }
    let start = l4_off + ip::UDP_LEN;
    Rx::Roce {
        src,
        dst,
        ipv4_id,
        ecn,
        payload: start..l4_off + udp_len,
    }
}
