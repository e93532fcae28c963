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
    let mut iph = [0u8; IPV4_MAX_LEN];
    let iph = &mut iph[..ip.len()];
    iph.copy_from_slice(ip);
    mask_ip(iph);
    let mut udph = [0u8; UDP_LEN];
    udph.copy_from_slice(udp);
    udph[6] = 0xff; // UDP checksum
    udph[7] = 0xff;
    let mut bthh = [0u8; bth::HEADER_LEN];
    bthh.copy_from_slice(&covered[..bth::HEADER_LEN]);
    bthh[bth::field::FECN_BECN] = 0xff;

    let mut h = crc32fast::Hasher::new();
    h.update(&MASKED_LRH);
    h.update(iph);
    h.update(&udph);
    h.update(&bthh);
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
