//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers as a host reads and writes them, UDP
//! (RFC 768), and the Internet checksum (RFC 1071) with its pseudo-headers.
//!
//! Receive checks what a host must before trusting the addresses and lengths: version,
//! IHL, total length within the frame (Ethernet pads short frames, so the frame may be
//! longer), header checksum. Fragments and IPv6 extension headers are reported, not
//! reassembled or walked: RoCEv2 never uses them (IBA A17.4: the packet sits directly in
//! UDP, and rxe sends with DF) and ND/echo do not need them.

use super::DropReason;
use crate::wire::Ecn;
use std::net::{Ipv4Addr, Ipv6Addr};

pub const PROTO_ICMP: u8 = 1;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;

/// TTL / hop limit of what we originate (RFC 1700's default, Linux's `ip_default_ttl`).
pub const DEFAULT_TTL: u8 = 64;

/// IPv6 next-header values that are extension headers (RFC 8200 §4, and the IANA list
/// RFC 7045 refers to): hop-by-hop, routing, fragment, ESP, AH, destination options,
/// mobility, HIP, shim6, and the two experimental values.
const IPV6_EXTENSION_HEADERS: [u8; 11] = [0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254];

/// One's-complement sum of `data` as big-endian 16-bit words (odd tail padded with a
/// zero byte), added to `acc` (RFC 1071 §4.1). Not folded: call `finish`.
pub fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds the carries back in and complements: the checksum to store, or 0 when verifying
/// data that includes its own checksum.
pub fn finish(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The IPv4 pseudo-header's sum (RFC 768 for UDP).
pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u64 {
    let acc = sum(&src.octets(), 0);
    let acc = sum(&dst.octets(), acc);
    acc + u64::from(proto) + len as u64
}

/// The IPv6 pseudo-header's sum (RFC 8200 §8.1; ICMPv6 uses it too, RFC 4443 §2.3).
pub fn pseudo_v6(src: &Ipv6Addr, dst: &Ipv6Addr, next: u8, len: usize) -> u64 {
    let acc = sum(&src.octets(), 0);
    let acc = sum(&dst.octets(), acc);
    acc + u64::from(next) + len as u64
}

/// A checked IPv4 header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4 {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub id: u16,
    /// The TOS byte: DSCP and ECN.
    pub tos: u8,
    pub header_len: usize,
    /// Header and payload, at most the bytes the frame had.
    pub total_len: usize,
    pub fragment: bool,
}

/// Reads an IPv4 header at the start of `b` (the frame from the IP header on).
pub fn parse_v4(b: &[u8]) -> Result<Ipv4, DropReason> {
    if b.len() < IPV4_LEN || b[0] >> 4 != 4 {
        return Err(DropReason::Malformed);
    }
    let header_len = usize::from(b[0] & 0x0f) * 4;
    let total_len = usize::from(u16::from_be_bytes([b[2], b[3]]));
    if header_len < IPV4_LEN || total_len < header_len || total_len > b.len() {
        return Err(DropReason::Malformed);
    }
    if finish(sum(&b[..header_len], 0)) != 0 {
        return Err(DropReason::BadChecksum);
    }
    let flags_frag = u16::from_be_bytes([b[6], b[7]]);
    // MF set, or a non-zero offset: a piece of a larger datagram (RFC 791 §3.2).
    let fragment = flags_frag & 0x2000 != 0 || flags_frag & 0x1fff != 0;
    // TTL is not checked: RFC 1122 §3.2.1.7, a host MUST NOT discard a datagram because
    // its TTL is below 2 (only routers decrement it).
    Ok(Ipv4 {
        src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
        dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
        proto: b[9],
        id: u16::from_be_bytes([b[4], b[5]]),
        tos: b[1],
        header_len,
        total_len,
        fragment,
    })
}

/// Writes a 20-byte IPv4 header with DF set and TTL 64 (RFC 6864 §4.1: with DF the ID
/// only has to be unique enough for the ICRC and captures, so a counter does), DSCP 0
/// (best effort) and the ECN codepoint `ecn`.
pub fn emit_v4(
    out: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    id: u16,
    ecn: Ecn,
    payload: usize,
) {
    let total = (IPV4_LEN + payload) as u16;
    out[0] = 0x45;
    out[1] = ecn.bits();
    out[2..4].copy_from_slice(&total.to_be_bytes());
    out[4..6].copy_from_slice(&id.to_be_bytes());
    out[6..8].copy_from_slice(&[0x40, 0x00]);
    out[8] = DEFAULT_TTL;
    out[9] = proto;
    out[10..12].fill(0);
    out[12..16].copy_from_slice(&src.octets());
    out[16..20].copy_from_slice(&dst.octets());
    let c = finish(sum(&out[..IPV4_LEN], 0));
    out[10..12].copy_from_slice(&c.to_be_bytes());
}

/// A checked IPv6 header.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next: u8,
    pub hop_limit: u8,
    /// The traffic class: DSCP and ECN.
    pub tclass: u8,
    /// Header and payload, at most the bytes the frame had.
    pub total_len: usize,
}

pub fn parse_v6(b: &[u8]) -> Result<Ipv6, DropReason> {
    if b.len() < IPV6_LEN || b[0] >> 4 != 6 {
        return Err(DropReason::Malformed);
    }
    let total_len = IPV6_LEN + usize::from(u16::from_be_bytes([b[4], b[5]]));
    // A payload length of 0 with a hop-by-hop option is a jumbogram (RFC 2675); it is
    // caught as an extension header below, since the frame is never longer than 64 KiB.
    if total_len > b.len() {
        return Err(DropReason::Malformed);
    }
    let next = b[6];
    if IPV6_EXTENSION_HEADERS.contains(&next) {
        return Err(DropReason::Ipv6ExtensionHeader);
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&b[8..24]);
    dst.copy_from_slice(&b[24..40]);
    Ok(Ipv6 {
        src: src.into(),
        dst: dst.into(),
        next,
        hop_limit: b[7],
        tclass: (b[0] << 4) | (b[1] >> 4),
        total_len,
    })
}

/// Writes a 40-byte IPv6 header: traffic class 0 but for the ECN codepoint `ecn`, flow
/// label 0.
pub fn emit_v6(
    out: &mut [u8],
    src: &Ipv6Addr,
    dst: &Ipv6Addr,
    next: u8,
    hop: u8,
    ecn: Ecn,
    payload: usize,
) {
    // Version 6, then the traffic class across the nibble boundary (RFC 8200 §3).
    out[0..4].copy_from_slice(&[0x60, ecn.bits() << 4, 0, 0]);
    out[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    out[6] = next;
    out[7] = hop;
    out[8..24].copy_from_slice(&src.octets());
    out[24..40].copy_from_slice(&dst.octets());
}

/// A checked UDP header: ports, and the length cut from the datagram (RFC 768).
#[derive(Debug, Clone, Copy)]
pub struct Udp {
    pub src_port: u16,
    pub dst_port: u16,
    pub checksum: u16,
    /// Header and payload.
    pub len: usize,
}

/// Reads the UDP header at the start of `l4` (the IP payload).
pub fn parse_udp(l4: &[u8]) -> Result<Udp, DropReason> {
    if l4.len() < UDP_LEN {
        return Err(DropReason::Malformed);
    }
    let len = usize::from(u16::from_be_bytes([l4[4], l4[5]]));
    if len < UDP_LEN || len > l4.len() {
        return Err(DropReason::Malformed);
    }
    Ok(Udp {
        src_port: u16::from_be_bytes([l4[0], l4[1]]),
        dst_port: u16::from_be_bytes([l4[2], l4[3]]),
        checksum: u16::from_be_bytes([l4[6], l4[7]]),
        len,
    })
}

/// Writes a UDP header with checksum 0, as rxe does: RoCEv2 relies on its ICRC (IBA
/// A17.4.2 lets the UDP checksum be zero; over IPv6, RFC 6935/6936 allow a zero checksum
/// for tunnel-like protocols, which is what rxe and RoCE NICs send).
pub fn emit_udp(out: &mut [u8], src_port: u16, dst_port: u16, payload: usize) {
    out[0..2].copy_from_slice(&src_port.to_be_bytes());
    out[2..4].copy_from_slice(&dst_port.to_be_bytes());
    out[4..6].copy_from_slice(&((UDP_LEN + payload) as u16).to_be_bytes());
    out[6..8].fill(0);
}

/// Whether `a` may be the source of a datagram we accept and answer (RFC 1122
/// §3.2.1.3: discard datagrams from broadcast, multicast or "this host" sources).
pub fn v4_source_ok(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback())
}

/// The IPv6 version (RFC 4291 §2.5.2, §2.7: neither unspecified nor multicast; loopback
/// never appears on a link, RFC 4291 §2.5.3).
pub fn v6_source_ok(a: &Ipv6Addr) -> bool {
    !(a.is_unspecified() || a.is_multicast() || a.is_loopback())
}

/// Whether `a` is within `prefix` bits of `net`.
pub fn v4_in_prefix(a: Ipv4Addr, net: Ipv4Addr, prefix: u8) -> bool {
    let p = u32::from(prefix.min(32));
    let mask = u32::MAX.checked_shl(32 - p).unwrap_or(0);
    u32::from(a) & mask == u32::from(net) & mask
}

pub fn v6_in_prefix(a: &Ipv6Addr, net: &Ipv6Addr, prefix: u8) -> bool {
    let p = u32::from(prefix.min(128));
    let mask = u128::MAX.checked_shl(128 - p).unwrap_or(0);
    u128::from(*a) & mask == u128::from(*net) & mask
}
