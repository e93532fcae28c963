//! GSO trains: several RoCE packets in one UDP datagram.
//!
//! A sender using UDP GSO (roce-emu's UDP backend, for trains of equal-length packets)
//! hands the kernel one datagram holding N packets; the kernel cuts it into N datagrams
//! only on the way out of a real interface. Captured on `lo` (or before segmentation),
//! the capture shows the whole train as one UDP datagram: its "ICRC" is the last
//! packet's, computed over that packet alone, so decoded as one packet it looks bad.
//!
//! Here a datagram whose ICRC is bad is tried as a train: cut as the kernel cuts it, into
//! N >= 2 pieces of the GSO size, the last one possibly shorter (a WRITE FIRST with its
//! RETH, then the MIDDLE packets 16 bytes shorter, say), each piece checked with the IP
//! and UDP headers its own datagram has after segmentation (lengths for that piece; IPv4
//! identification counting up from the train's, as the kernel numbers segments). A train
//! whose every piece verifies is split; one whose pieces carry BTHs of one QP with
//! consecutive PSNs, but whose ICRCs do not verify, is still named as a train (and counts
//! as bad ICRC). Sizes that do not divide the datagram are tried only where the second
//! piece starts with the next PSN of the first's QP, so the search stays cheap.

use crate::wire::icrc::{self, Ipv4IdSolver};
use crate::wire::pretty::RoceDecode;
use crate::wire::{bth, BthRepr, ICRC_LEN};

/// The smallest RoCE packet: a BTH and an ICRC.
const MIN_PACKET: usize = bth::HEADER_LEN + ICRC_LEN;
/// IPv4 header bytes 2-3 (total length) and 4-5 (identification); IPv6 bytes 4-5
/// (payload length); UDP bytes 4-5 (length).
const IPV4_TOTAL: usize = 2;
const IPV4_ID: usize = 4;
const IPV6_PAYLOAD: usize = 4;
const UDP_LEN_AT: usize = 4;
const UDP_HDR: usize = 8;

/// A datagram found to hold several RoCE packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Train {
    /// Packets in the train.
    pub count: usize,
    /// Bytes of each (BTH through ICRC): the GSO size.
    pub segment_len: usize,
    /// Bytes of the last one (at most `segment_len`).
    pub last_len: usize,
    /// When every piece's ICRC verifies: each piece as its own IP datagram (IP and UDP
    /// headers as after segmentation, then the packet), to decode with `Link::Ip`.
    pub segments: Option<Vec<Vec<u8>>>,
}

impl Train {
    pub fn split(&self) -> bool {
        self.segments.is_some()
    }
}

/// The IP and UDP headers of piece `k` of `len` bytes: lengths for one piece, and (IPv4)
/// the identification `id`.
fn headers(ip: &[u8], udp: &[u8], len: usize, id: Option<u16>) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut ip = ip.to_vec();
    let mut udp = udp.to_vec();
    let udp_len = u16::try_from(UDP_HDR + len).ok()?;
    match ip.first()? >> 4 {
        4 => {
            let total = u16::try_from(ip.len()).ok()?.checked_add(udp_len)?;
            ip.get_mut(IPV4_TOTAL..IPV4_TOTAL + 2)?
                .copy_from_slice(&total.to_be_bytes());
            if let Some(id) = id {
                ip.get_mut(IPV4_ID..IPV4_ID + 2)?
                    .copy_from_slice(&id.to_be_bytes());
            }
        }
        6 => ip
            .get_mut(IPV6_PAYLOAD..IPV6_PAYLOAD + 2)?
            .copy_from_slice(&udp_len.to_be_bytes()),
        _ => return None,
    }
    udp.get_mut(UDP_LEN_AT..UDP_LEN_AT + 2)?
        .copy_from_slice(&udp_len.to_be_bytes());
    Some((ip, udp))
}

/// The BTHs of the pieces belong to one QP and their PSNs count up by one (stops at the
/// first piece that does not follow).
fn bths_in_sequence(pieces: &[&[u8]]) -> bool {
    let bth = |p: &[u8]| BthRepr::parse(&bth::Packet::new_unchecked(p)).ok();
    let Some(mut prev) = pieces.first().and_then(|p| bth(p)) else {
        return false;
    };
    for p in &pieces[1..] {
        let Some(b) = bth(p) else { return false };
        if b.dqpn != prev.dqpn
            || b.tver != 0
            || b.psn.value() != (prev.psn.value() + 1) & 0x00ff_ffff
        {
            return false;
        }
        prev = b;
    }
    true
}

/// Checks every piece's ICRC; on success, the pieces as datagrams.
/// `solve`: also accept pieces whose IPv4 identifications follow no known numbering.
fn verify_pieces(ip: &[u8], udp: &[u8], pieces: &[&[u8]], solve: bool) -> Option<Vec<Vec<u8>>> {
    let v4 = ip.first()? >> 4 == 4;
    let id0 = v4.then(|| u16::from_be_bytes([ip[IPV4_ID], ip[IPV4_ID + 1]]));
    let check = |k: usize, id: Option<u16>| -> Option<Vec<u8>> {
        let piece = pieces[k];
        let len = piece.len();
        let (ip, udp) = headers(ip, udp, len, id)?;
        let (covered, _) = piece.split_at(len - ICRC_LEN);
        let computed = icrc::compute(&ip, &udp, covered).ok()?;
        let tail = &piece[len - ICRC_LEN..];
        (u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) == computed)
            .then(|| [ip, udp, piece.to_vec()].concat())
    };
    // As the kernel numbers segments: the train's ID, then one more per segment.
    let direct: Option<Vec<Vec<u8>>> = (0..pieces.len())
        .map(|k| check(k, id0.map(|id| id.wrapping_add(k as u16))))
        .collect();
    if direct.is_some() || !v4 || !solve {
        return direct;
    }
    // Some other numbering: solve each piece's ID (a 2^-16 chance of a false fit per
    // piece, so only for pieces whose BTHs are in sequence).
    let mut solver = Ipv4IdSolver::new();
    (0..pieces.len())
        .map(|k| {
            let (ip0, udp) = headers(ip, udp, pieces[k].len(), Some(0))?;
            if ip0.len() != 20 {
                return None;
            }
            let id = solver.solve(&ip0, &udp, pieces[k]).ok()?;
            check(k, Some(id))
        })
        .collect()
}

/// The train a RoCE datagram with a bad ICRC holds, if it is one.
pub fn detect(d: &RoceDecode<'_>) -> Option<Train> {
    if d.icrc.is_none_or(|i| i.ok()) {
        return None;
    }
    let roce = d.frame.roce;
    let (ip, udp) = (d.frame.ip.bytes(), d.frame.udp.slice());
    let total = roce.len();
    let mut named: Option<Train> = None;
    // Every GSO size that cuts the datagram into at least two packets, shortest first
    // (RoCE packets are padded to 4 bytes).
    for len in (MIN_PACKET..total).step_by(4) {
        let count = total.div_ceil(len);
        let last_len = total - (count - 1) * len;
        if last_len < MIN_PACKET {
            continue;
        }
        // Cheap first: a size that leaves a shorter last piece must at least start the
        // second piece with the next PSN of the first's QP.
        if total % len != 0 && !bths_in_sequence(&[&roce[..len], &roce[len..]]) {
            continue;
        }
        let pieces: Vec<&[u8]> = roce.chunks(len).collect();
        let in_sequence = bths_in_sequence(&pieces);
        if let Some(segments) = verify_pieces(ip, udp, &pieces, in_sequence) {
            return Some(Train {
                count,
                segment_len: len,
                last_len,
                segments: Some(segments),
            });
        }
        if in_sequence && named.is_none() {
            named = Some(Train {
                count,
                segment_len: len,
                last_len,
                segments: None,
            });
        }
    }
    named
}
