//! The invariant CRC (IBA Annex A17.4.1, "ICRC for RoCEv2"; rxe's `rxe_icrc.c`).
//!
//! CRC-32 (the Ethernet/zlib polynomial, as `crc32fast` computes it) over:
//! 8 bytes of 0xff standing for the masked LRH of native InfiniBand, the IP header with
//! its variant fields set to all ones (IPv4: TOS, TTL, header checksum; IPv6: traffic
//! class, flow label, hop limit), the UDP header with its checksum set to all ones, the
//! BTH with byte 4 (FECN, BECN, reserved) set to all ones, and everything after the BTH up
//! to and including the pad bytes. The result is appended least significant byte first.
//!
//! Cost: one CRC pass over the packet. The masked copies are of the headers only (at most
//! 60 + 8 + 12 bytes, on the stack); the payload is read in place.

use super::{bth, Header, Result, WireError};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Stands for the LRH of native IB, masked (A17.4.1): 8 bytes of ones.
const MASKED_LRH: [u8; 8] = [0xff; 8];
const IPV4_MIN_LEN: usize = 20;
const IPV4_MAX_LEN: usize = 60;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;

/// Masks the variant fields of an IP header copy in place; the version nibble says which.
fn mask_ip(h: &mut [u8]) {
    if h[0] >> 4 == 4 {
        h[1] = 0xff; // TOS (DSCP + ECN)
        h[8] = 0xff; // TTL
        h[10] = 0xff; // header checksum
        h[11] = 0xff;
    } else {
        h[0] |= 0x0f; // traffic class, high nibble
        h[1] = 0xff; // traffic class, low nibble, and flow label
        h[2] = 0xff;
        h[3] = 0xff;
        h[7] = 0xff; // hop limit
    }
}

/// Checks that `ip` is a whole IPv4 or IPv6 header.
fn check_ip(ip: &[u8]) -> Result<()> {
    let bad = |header, reason| Err(WireError::Malformed { header, reason });
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if ihl < IPV4_MIN_LEN || ip.len() != ihl {
                return bad(Header::Ipv4, "header length does not match IHL");
            }
        }
        Some(6) => {
            if ip.len() != IPV6_LEN {
                return bad(Header::Ipv6, "header is not 40 bytes");
            }
        }
        _ => return Err(WireError::NotRoce("IP version is neither 4 nor 6")),
    }
    Ok(())
}

/// The ICRC of a packet whose IP header is `ip` (IPv4 with options, or IPv6 without
/// extension headers), UDP header `udp`, and `covered` = BTH through the last pad byte.
pub fn compute(ip: &[u8], udp: &[u8], covered: &[u8]) -> Result<u32> {
    check_ip(ip)?;
    if udp.len() != UDP_LEN {
        return Err(WireError::Malformed {
            header: Header::Udp,
            reason: "header is not 8 bytes",
        });
    }
    if covered.len() < bth::HEADER_LEN {
        return Err(super::error::truncated(
            Header::Bth,
            bth::HEADER_LEN,
            covered.len(),
        ));
    }
    // The masked LRH, IP, UDP and BTH in one contiguous stack buffer: one CRC update for
    // all headers, one for the rest of the packet read in place. Fixed-size copies for the
    // common IP header sizes let the compiler inline them.
    let mut hdr = [0xffu8; MASKED_LRH.len() + IPV4_MAX_LEN + UDP_LEN + bth::HEADER_LEN];
    let lrh = MASKED_LRH.len();
    let ip_end = lrh + ip.len();
    match ip.len() {
        IPV4_MIN_LEN => hdr[lrh..lrh + IPV4_MIN_LEN].copy_from_slice(&ip[..IPV4_MIN_LEN]),
        IPV6_LEN => hdr[lrh..lrh + IPV6_LEN].copy_from_slice(&ip[..IPV6_LEN]),
        _ => hdr[lrh..ip_end].copy_from_slice(ip),
    }
    mask_ip(&mut hdr[lrh..ip_end]);
    let udp_end = ip_end + UDP_LEN;
    let bth_end = udp_end + bth::HEADER_LEN;
    // UDP without its checksum (bytes 6-7 stay all ones).
    hdr[ip_end..ip_end + 6].copy_from_slice(&udp[..6]);
    hdr[udp_end..bth_end].copy_from_slice(&covered[..bth::HEADER_LEN]);
    hdr[udp_end + bth::field::FECN_BECN] = 0xff;

    let mut h = crc32fast::Hasher::new();
    h.update(&hdr[..bth_end]);
    h.update(&covered[bth::HEADER_LEN..]);
    Ok(h.finalize())
}

/// Verifies the ICRC at the end of `roce` (BTH through ICRC).
pub fn verify(ip: &[u8], udp: &[u8], roce: &[u8]) -> Result<()> {
    if roce.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(super::error::truncated(
            Header::Icrc,
            bth::HEADER_LEN + ICRC_LEN,
            roce.len(),
        ));
    }
    let (covered, tail) = roce.split_at(roce.len() - ICRC_LEN);
    let found = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let computed = compute(ip, udp, covered)?;
    if found == computed {
        Ok(())
    } else {
        Err(WireError::BadIcrc { found, computed })
    }
}

/// Computes and stores the ICRC in the last four bytes of `roce`.
pub fn fill(ip: &[u8], udp: &[u8], roce: &mut [u8]) -> Result<u32> {
    if roce.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(super::error::truncated(
            Header::Icrc,
            bth::HEADER_LEN + ICRC_LEN,
            roce.len(),
        ));
    }
    let n = roce.len() - ICRC_LEN;
    let crc = compute(ip, udp, &roce[..n])?;
    roce[n..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

/// The IP and UDP headers under the ICRC, rebuilt from what a UDP socket knows: addresses,
/// ports, length and (IPv4) the identification the sender used. The masked fields are
/// irrelevant; IPv4 is taken to carry DF and no options, as rxe and roce-emu send it.
#[derive(Debug, Clone, Copy)]
pub struct PseudoHeaders {
    buf: [u8; IPV6_LEN + UDP_LEN],
    ip_len: usize,
}

/// IPv4 flags/fragment field with DF set.
const IPV4_DF: [u8; 2] = [0x40, 0x00];
const IPPROTO_UDP: u8 = 17;

impl PseudoHeaders {
    /// Headers for a RoCE packet of `roce_len` bytes (BTH through ICRC) from `src` to `dst`.
    /// Mixed address families are a caller bug: the IPv6 form is used when either side is
    /// IPv6 and the other is mapped.
    pub fn new(
        src: std::net::SocketAddr,
        dst: std::net::SocketAddr,
        ipv4_id: u16,
        roce_len: usize,
    ) -> PseudoHeaders {
        use std::net::IpAddr;
        let mut buf = [0u8; IPV6_LEN + UDP_LEN];
        let udp_len = (UDP_LEN + roce_len) as u16;
        let ip_len = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let h = &mut buf[..IPV4_MIN_LEN];
                h[0] = 0x45;
                h[2..4].copy_from_slice(&(IPV4_MIN_LEN as u16 + udp_len).to_be_bytes());
                h[4..6].copy_from_slice(&ipv4_id.to_be_bytes());
                h[6..8].copy_from_slice(&IPV4_DF);
                h[9] = IPPROTO_UDP;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                IPV4_MIN_LEN
            }
            (s, d) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                };
                let h = &mut buf[..IPV6_LEN];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&udp_len.to_be_bytes());
                h[6] = IPPROTO_UDP;
                h[8..24].copy_from_slice(&v6(s).octets());
                h[24..40].copy_from_slice(&v6(d).octets());
                IPV6_LEN
            }
        };
        let u = &mut buf[ip_len..ip_len + UDP_LEN];
        u[0..2].copy_from_slice(&src.port().to_be_bytes());
        u[2..4].copy_from_slice(&dst.port().to_be_bytes());
        u[4..6].copy_from_slice(&udp_len.to_be_bytes());
        PseudoHeaders { buf, ip_len }
    }

    pub fn ip(&self) -> &[u8] {
        &self.buf[..self.ip_len]
    }

    pub fn udp(&self) -> &[u8] {
        &self.buf[self.ip_len..self.ip_len + UDP_LEN]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// The first RoCE frame rxe sent in rc_pingpong_s64.pcap: pseudo headers built from
    /// its addresses, ports, length and IP ID rebuild exactly the bytes under its ICRC.
    #[test]
    fn pseudo_headers_match_a_real_frame() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/rc_pingpong_s64.pcap"
        );
        let bytes = std::fs::read(path).unwrap();
        // Find the first RoCE frame by hand: classic pcap, 24-byte file header, 16-byte
        // record headers, Ethernet.
        let mut off = 24;
        loop {
            let caplen = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
            let f = &bytes[off + 16..off + 16 + caplen];
            off += 16 + caplen;
            let frame = match crate::wire::RoceFrame::parse_ethernet(f) {
                Ok(fr) => fr,
                Err(_) => continue,
            };
            let crate::wire::frame::IpSlice::V4(ip) = &frame.ip else {
                panic!("IPv4 capture")
            };
            let src = std::net::SocketAddr::new(frame.ip.src(), frame.udp.source_port());
            let dst = std::net::SocketAddr::new(frame.ip.dst(), frame.udp.destination_port());
            let ph = PseudoHeaders::new(src, dst, ip.identification(), frame.roce.len());
            verify(ph.ip(), ph.udp(), frame.roce).unwrap();
            // A different ID breaks it: the ID is covered.
            let ph = PseudoHeaders::new(src, dst, ip.identification() ^ 1, frame.roce.len());
            assert!(verify(ph.ip(), ph.udp(), frame.roce).is_err());
            break;
        }
    }
}
