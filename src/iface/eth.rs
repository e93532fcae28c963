//! Ethernet II framing with at most one IEEE 802.1Q tag, and the link-layer addresses
//! IPv6 derives from a MAC (RFC 4291 §2.5.6 and appendix A, RFC 2464 §7).
//!
//! Written by hand rather than with etherparse: the interface needs the tag's VID and the
//! destination address before anything else, and writes headers into the caller's buffer
//! at an offset; both are a few byte moves.

use std::net::Ipv6Addr;

pub type Mac = [u8; 6];

pub const BROADCAST: Mac = [0xff; 6];
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// IEEE 802.1Q customer tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// IEEE 802.1ad service tag and the pre-standard QinQ tag: stacked VLANs, not supported.
const ETHERTYPE_QINQ: [u16; 2] = [0x88a8, 0x9100];
/// EtherType values below this are an IEEE 802.3 length field (LLC frames), not a type.
const ETHERTYPE_MIN: u16 = 0x0600;

pub const ETH_LEN: usize = 14;
pub const VLAN_LEN: usize = 4;
/// Shortest Ethernet frame without its FCS (IEEE 802.3 §3.2.8: 64 bytes with it; a tagged
/// frame has the same minimum). Shorter frames are padded with zeros after the IP
/// datagram, whose own length says where it ends.
pub const ETH_MIN_FRAME: usize = 60;

/// The link layer of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L2 {
    pub dst: Mac,
    pub src: Mac,
    /// The 802.1Q VLAN identifier, if the frame carried a tag (0: priority-tagged only).
    pub vid: Option<u16>,
    pub ethertype: u16,
    /// Where the payload (ARP, IPv4 or IPv6) starts in the frame.
    pub payload: usize,
}

/// Why a frame's link layer could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Error {
    /// Shorter than its headers.
    Short,
    /// Stacked tags (802.1ad / QinQ): not a configuration this interface has.
    Stacked,
    /// An 802.3 length field where the EtherType should be (LLC, STP, ...).
    NotEthernet2,
}

pub fn parse(frame: &[u8]) -> Result<L2, L2Error> {
    if frame.len() < ETH_LEN {
        return Err(L2Error::Short);
    }
    let dst = mac_at(frame, 0);
    let src = mac_at(frame, 6);
    let mut ethertype = be16(frame, 12);
    let mut payload = ETH_LEN;
    let mut vid = None;
    if ETHERTYPE_QINQ.contains(&ethertype) {
        return Err(L2Error::Stacked);
    }
    if ethertype == ETHERTYPE_VLAN {
        if frame.len() < ETH_LEN + VLAN_LEN {
            return Err(L2Error::Short);
        }
        // TCI: 3 bits priority, 1 bit drop eligible, 12 bits VID (802.1Q §9.6).
        vid = Some(be16(frame, 14) & 0x0fff);
        ethertype = be16(frame, 16);
        payload += VLAN_LEN;
        if ethertype == ETHERTYPE_VLAN || ETHERTYPE_QINQ.contains(&ethertype) {
            return Err(L2Error::Stacked);
        }
    }
    if ethertype < ETHERTYPE_MIN {
        return Err(L2Error::NotEthernet2);
    }
    Ok(L2 {
        dst,
        src,
        vid,
        ethertype,
        payload,
    })
}

/// Bytes of link-layer header `emit` writes.
pub fn header_len(vlan: Option<u16>) -> usize {
    ETH_LEN + vlan.map_or(0, |_| VLAN_LEN)
}

/// Writes the Ethernet header (and tag, priority 0) at the start of `out`; returns its
/// length. `out` must hold `header_len(vlan)` bytes.
pub fn emit(out: &mut [u8], dst: Mac, src: Mac, vlan: Option<u16>, ethertype: u16) -> usize {
    out[0..6].copy_from_slice(&dst);
    out[6..12].copy_from_slice(&src);
    match vlan {
        Some(vid) => {
            out[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            out[14..16].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
            out[16..18].copy_from_slice(&ethertype.to_be_bytes());
            ETH_LEN + VLAN_LEN
        }
        None => {
            out[12..14].copy_from_slice(&ethertype.to_be_bytes());
            ETH_LEN
        }
    }
}

/// Zero-pads a frame of `len` bytes to the Ethernet minimum; returns the new length.
/// `out` must hold `ETH_MIN_FRAME` bytes when `len` is shorter.
pub fn pad(out: &mut [u8], len: usize) -> usize {
    if len >= ETH_MIN_FRAME {
        return len;
    }
    out[len..ETH_MIN_FRAME].fill(0);
    ETH_MIN_FRAME
}

/// A group (multicast or broadcast) address: the I/G bit, the first one sent.
pub fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 != 0
}

/// The Ethernet address of an IPv6 multicast group: 33:33 and the group's last 32 bits
/// (RFC 2464 §7).
pub fn ipv6_multicast_mac(group: &Ipv6Addr) -> Mac {
    let o = group.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// The solicited-node multicast group of `addr`: ff02::1:ff00:0/104 and its low 24 bits
/// (RFC 4291 §2.7.1). Neighbour Solicitations for `addr` go there (RFC 4861 §7.2.2).
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15],
    ])
}

/// The all-nodes link-local multicast group (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The link-local address fe80::/64 with the modified EUI-64 interface identifier of
/// `mac`: ff:fe in the middle and the universal/local bit inverted (RFC 4291 appendix A,
/// RFC 4862 §5.3).
pub fn link_local(mac: &Mac) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

pub fn mac_at(b: &[u8], at: usize) -> Mac {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}

pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
