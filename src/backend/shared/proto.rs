//! The shared port's two message formats, each message one Unix `SOCK_SEQPACKET` record:
//!
//! - **control** (member and hub): `Join` (a member asks for a QPN block, or claims the
//!   one it had under a hub that went away), `Lease` (the hub grants it), `Refused`. Eight
//!   bytes each: tag, version, two argument bytes, four spare.
//! - **forward** (hub to member): the packets of one receive batch whose DestQP lies in the
//!   member's block. A 4-byte header (`P`, version, two spare) and then entries back to
//!   back: a 48-byte header with the addresses the member's engine needs (the ICRC covers
//!   the IP and UDP headers, and the engine answers the source) and the packet bytes. An
//!   entry may be a run of equal-length packets from one source (a GRO train, or ACKs),
//!   as the UDP receive path gives them (`Received::segment`), so one entry costs the
//!   member one receive slot however many packets it holds.
//!
//! Integers are little-endian: both ends are processes on one machine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

pub const VERSION: u8 = 1;
/// A member's lease: 2^16 QPNs, the top byte of the 24-bit QPN.
pub const BLOCK_SHIFT: u32 = 16;
/// The block the first hub keeps (QPNs from `FIRST_QPN`, as a NIC alone would).
pub const FIRST_HUB_BLOCK: u8 = 0;
/// How long a block stays ungranted after its member left, unless that member claims it
/// back (a take-over): a late packet for one of the old QPs (a retransmission, a READ
/// response in flight) must not reach a QP of the next NIC, which could have the same QPN.
/// The daemon's quarantine (`daemon::lease::DEFAULT_QUARANTINE`), for the same reason.
pub const QUARANTINE: std::time::Duration = std::time::Duration::from_secs(60);
/// Most entries in one forward message: a member asks `recvmmsg` for as many messages as
/// its caller's receive slots hold entries of this count.
pub const MAX_ENTRIES: usize = 8;
/// Largest forward message: one receive slot (`udp::RX_SLOT`).
pub const MAX_MSG: usize = super::super::udp::RX_SLOT;
pub const MSG_HEADER: usize = 4;
pub const ENTRY_HEADER: usize = 48;
/// Largest packet (or run) one entry carries.
pub const MAX_ENTRY_DATA: usize = MAX_MSG - MSG_HEADER - ENTRY_HEADER;

/// The QPNs of block `b` (the engine keeps 0 and 1 out of block 0 itself).
pub fn block_range(b: u8) -> (u32, u32) {
    let lo = u32::from(b) << BLOCK_SHIFT;
    (lo, lo | ((1 << BLOCK_SHIFT) - 1))
}

/// The block of a RoCEv2 packet's BTH DestQP (byte 5, the QPN's top byte), or `None` for
/// a datagram too short to hold a BTH (the hub's own engine counts it as malformed).
pub fn dest_block(packet: &[u8]) -> Option<u8> {
    if packet.len() < 12 {
        return None;
    }
    Some(packet[5])
}

/// A control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// A member asks for a block: any free one, or the one it had (after a hub died).
    Join {
        claim: Option<u8>,
    },
    Lease {
        block: u8,
    },
    /// A member made its first QP: its block's QPNs may now be known to peers, so the
    /// hub quarantines the block when the member leaves (one that made none comes back at
    /// once: a program that only opened the device).
    Using,
    Refused {
        why: Refusal,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The claimed block is someone else's.
    Taken = 1,
    /// All 256 blocks are leased.
    Full = 2,
    /// The other side speaks another version.
    Version = 3,
    /// The joining NIC runs as another user than the hub: a hub forwards a user's packets
    /// only to that user's own NICs.
    User = 4,
}

pub const CONTROL_LEN: usize = 8;

impl Control {
    pub fn encode(self) -> [u8; CONTROL_LEN] {
        let (tag, a, b) = match self {
            Control::Join { claim } => (b'J', u8::from(claim.is_some()), claim.unwrap_or(0)),
            Control::Lease { block } => (b'L', block, 0),
            Control::Using => (b'U', 0, 0),
            Control::Refused { why } => (b'N', why as u8, 0),
        };
        [tag, VERSION, a, b, 0, 0, 0, 0]
    }

    /// `Err` holds what to answer (another version) or nothing (not a control message).
    pub fn decode(m: &[u8]) -> Result<Control, Option<Refusal>> {
        if m.len() != CONTROL_LEN {
            return Err(None);
        }
        if m[1] != VERSION {
            return Err(Some(Refusal::Version));
        }
        match m[0] {
            b'J' => Ok(Control::Join {
                claim: (m[2] != 0).then_some(m[3]),
            }),
            b'L' => Ok(Control::Lease { block: m[2] }),
            b'U' => Ok(Control::Using),
            b'N' => Ok(Control::Refused {
                why: match m[2] {
                    1 => Refusal::Taken,
                    2 => Refusal::Full,
                    4 => Refusal::User,
                    _ => Refusal::Version,
                },
            }),
            _ => Err(None),
        }
    }
}

/// What the member's engine needs to know of a packet besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwdMeta {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ipv4_id: Option<u16>,
}

fn put_ip(out: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            out[4..16].fill(0);
        }
        IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
    }
}

fn get_ip(v6: bool, b: &[u8]) -> IpAddr {
    if v6 {
        let mut o = [0u8; 16];
        o.copy_from_slice(&b[..16]);
        IpAddr::V6(Ipv6Addr::from(o))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Entry header: 0..4 data length, 4..6 segment size (each packet of the run but the last
/// is this long), 6 family (4 or 6), 7 flags (bit 0: IPv4 ID known), 8..10 source port,
/// 10..12 IPv4 ID, 12..14 destination port, 14..16 spare, 16..32 source IP, 32..48
/// destination IP (IPv4 in the first four bytes).
fn write_entry(out: &mut [u8], meta: &FwdMeta, len: usize, seg: usize) {
    out[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    out[4..6].copy_from_slice(&(seg as u16).to_le_bytes());
    out[6] = if meta.src.is_ipv6() { 6 } else { 4 };
    out[7] = u8::from(meta.ipv4_id.is_some());
    out[8..10].copy_from_slice(&meta.src.port().to_le_bytes());
    out[10..12].copy_from_slice(&meta.ipv4_id.unwrap_or(0).to_le_bytes());
    out[12..14].copy_from_slice(&meta.dst.port().to_le_bytes());
    out[14..16].fill(0);
    put_ip(&mut out[16..32], meta.src.ip());
    put_ip(&mut out[32..48], meta.dst.ip());
}

/// The run an entry holds, to extend it with a packet of the same run.
#[derive(Debug, Clone, Copy)]
struct Open {
    /// Where its header is in the buffer.
    at: usize,
    meta: FwdMeta,
    seg: usize,
    len: usize,
}

/// Forward messages for one member, built over a receive batch and sent with one
/// `sendmmsg`. Allocated once and reused.
#[derive(Debug, Default)]
pub struct FwdWriter {
    buf: Vec<u8>,
    /// Where each message starts; the last one is open while `entries > 0`.
    starts: Vec<usize>,
    entries: usize,
    last: Option<Open>,
    /// Packets staged since the last `clear`.
    pub packets: u64,
}

impl FwdWriter {
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.starts.clear();
        self.entries = 0;
        self.last = None;
        self.packets = 0;
    }

    /// Stages one packet. A packet from the same addresses as the last entry, no longer
    /// than its segment size, joins that entry while every packet in it is full-size (the
    /// rule of GRO and GSO); otherwise it starts an entry, and a message when the open one
    /// is full. False for a packet too large for any message (never for RoCE packets).
    pub fn push(&mut self, meta: FwdMeta, data: &[u8]) -> bool {
        if data.len() > MAX_ENTRY_DATA {
            return false;
        }
        let open_len = self.starts.last().map_or(0, |s| self.buf.len() - s);
        if let Some(o) = &mut self.last {
            let joins = o.meta == meta
                && o.len > 0
                && o.len % o.seg == 0
                && data.len() <= o.seg
                && !data.is_empty()
                && open_len + data.len() <= MAX_MSG;
            if joins {
                o.len += data.len();
                let (at, len) = (o.at, o.len);
                self.buf[at..at + 4].copy_from_slice(&(len as u32).to_le_bytes());
                self.buf.extend_from_slice(data);
                self.packets += 1;
                return true;
            }
        }
        let fits = self.entries < MAX_ENTRIES && open_len + ENTRY_HEADER + data.len() <= MAX_MSG;
        if self.starts.is_empty() || !fits {
            self.starts.push(self.buf.len());
            self.buf.extend_from_slice(&[b'P', VERSION, 0, 0]);
            self.entries = 0;
        }
        let at = self.buf.len();
        self.buf.resize(at + ENTRY_HEADER, 0);
        // A zero-length packet stays alone (segment size 0 would divide by zero).
        let seg = data.len().max(1);
        write_entry(&mut self.buf[at..], &meta, data.len(), seg);
        self.buf.extend_from_slice(data);
        self.entries += 1;
        self.last = Some(Open {
            at,
            meta,
            seg,
            len: data.len(),
        });
        self.packets += 1;
        true
    }

    /// The staged messages.
    pub fn messages(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.starts.len()).map(|i| {
            let end = self.starts.get(i + 1).copied().unwrap_or(self.buf.len());
            &self.buf[self.starts[i]..end]
        })
    }

    /// Packets in messages `from..` (those not sent, to count as dropped).
    pub fn packets_from(&self, from: usize) -> u64 {
        self.messages()
            .skip(from)
            .map(|m| {
                let mut n = 0;
                let _ = parse(m, |_, r, seg| {
                    n += r.len().div_ceil(seg.max(1)).max(1) as u64
                });
                n
            })
            .sum()
    }
}

/// A forward message that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// Walks a forward message: `f(meta, bytes, segment size)` per entry, the bytes as a range
/// of `m`. Stops at the first malformed entry (the entries before it were given).
pub fn parse(
    m: &[u8],
    mut f: impl FnMut(FwdMeta, Range<usize>, usize),
) -> Result<usize, Malformed> {
    if m.len() < MSG_HEADER || m[0] != b'P' || m[1] != VERSION {
        return Err(Malformed);
    }
    let mut at = MSG_HEADER;
    let mut n = 0;
    while at < m.len() {
        let Some(h) = m.get(at..at + ENTRY_HEADER) else {
            return Err(Malformed);
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let seg = usize::from(u16_at(h, 4));
        let v6 = match h[6] {
            4 => false,
            6 => true,
            _ => return Err(Malformed),
        };
        let data = at + ENTRY_HEADER..at + ENTRY_HEADER + len;
        if data.end > m.len() || seg == 0 {
            return Err(Malformed);
        }
        let meta = FwdMeta {
            src: SocketAddr::new(get_ip(v6, &h[16..32]), u16_at(h, 8)),
            dst: SocketAddr::new(get_ip(v6, &h[32..48]), u16_at(h, 12)),
            ipv4_id: (h[7] & 1 != 0).then(|| u16_at(h, 10)),
        };
        at = data.end;
        f(meta, data, seg);
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(src: &str) -> FwdMeta {
        let src: SocketAddr = src.parse().unwrap();
        let dst = if src.is_ipv6() {
            "[::1]:4791"
        } else {
            "127.0.15.1:4791"
        };
        FwdMeta {
            src,
            dst: dst.parse().unwrap(),
            ipv4_id: None,
        }
    }

    fn entries(w: &FwdWriter) -> Vec<(FwdMeta, Vec<u8>, usize)> {
        let mut out = Vec::new();
        for m in w.messages() {
            assert!(m.len() <= MAX_MSG);
            let n = parse(m, |meta, r, seg| out.push((meta, m[r].to_vec(), seg))).unwrap();
            assert!(n <= MAX_ENTRIES);
        }
        out
    }

    #[test]
    fn control_messages_round_trip_and_refuse_other_versions() {
        for c in [
            Control::Join { claim: None },
            Control::Join { claim: Some(0) },
            Control::Join { claim: Some(7) },
            Control::Lease { block: 255 },
            Control::Refused {
                why: Refusal::Taken,
            },
            Control::Refused { why: Refusal::Full },
        ] {
            assert_eq!(Control::decode(&c.encode()), Ok(c));
        }
        let mut m = Control::Join { claim: None }.encode();
        m[1] = VERSION + 1;
        assert_eq!(Control::decode(&m), Err(Some(Refusal::Version)));
        assert_eq!(Control::decode(b"P\x01\0\0"), Err(None));
    }

    #[test]
    fn runs_of_equal_packets_share_an_entry_and_the_rest_do_not() {
        let mut w = FwdWriter::default();
        let a = meta("127.0.15.2:40000");
        let b = meta("[::1]:40001");
        // A train of three full packets and a short last one, then another source.
        for d in [&[1u8; 100][..], &[2; 100], &[3; 100], &[4; 40], &[5; 100]] {
            assert!(w.push(a, d));
        }
        assert!(w.push(b, &[6; 20]));
        assert!(
            w.push(b, &[7; 30]),
            "longer than the run's segment: a new entry"
        );
        assert!(w.push(a, &[]));
        let e = entries(&w);
        assert_eq!(w.packets, 8);
        assert_eq!(e.len(), 5);
        assert_eq!(e[0].0, a);
        assert_eq!((e[0].1.len(), e[0].2), (340, 100));
        assert_eq!(&e[0].1[300..], &[4; 40]);
        assert_eq!(
            e[1].1,
            vec![5; 100],
            "after a short packet the run is closed"
        );
        assert_eq!((e[2].0, e[2].1.len()), (b, 20));
        assert_eq!(e[2].0.src.to_string(), "[::1]:40001");
        assert_eq!(e[3].1, vec![7; 30]);
        assert_eq!(e[4].1, Vec::<u8>::new());
        assert_eq!(w.packets_from(0), 8);
    }

    #[test]
    fn messages_stay_within_a_slot_and_the_entry_limit() {
        let mut w = FwdWriter::default();
        // Different sources: one entry each, MAX_ENTRIES to a message.
        for i in 0..(MAX_ENTRIES as u16 * 2 + 1) {
            let m = meta(&format!("127.0.15.2:{}", 40000 + i));
            assert!(w.push(m, &[i as u8; 64]));
        }
        assert_eq!(w.messages().len(), 3);
        assert_eq!(entries(&w).len(), MAX_ENTRIES * 2 + 1);
        assert_eq!(w.packets_from(2), 1);
        // One long run: cut where a message is full.
        w.clear();
        let m = meta("127.0.15.2:40000");
        for _ in 0..40 {
            assert!(w.push(m, &[9; 4096]));
        }
        let e = entries(&w);
        assert_eq!(e.iter().map(|x| x.1.len()).sum::<usize>(), 40 * 4096);
        assert!(w.messages().len() >= 3);
        assert!(!w.push(m, &vec![0; MAX_ENTRY_DATA + 1]));
    }

    #[test]
    fn truncated_or_foreign_messages_are_malformed() {
        let mut w = FwdWriter::default();
        w.push(meta("127.0.15.2:40000"), &[1; 64]);
        let m: Vec<u8> = w.messages().next().unwrap().to_vec();
        let mut seen = 0;
        assert_eq!(
            parse(&m[..m.len() - 1], |_, _, _| seen += 1),
            Err(Malformed)
        );
        assert_eq!(parse(&m[..10], |_, _, _| seen += 1), Err(Malformed));
        assert_eq!(parse(&m[1..], |_, _, _| seen += 1), Err(Malformed));
        assert_eq!(seen, 0);
        assert_eq!(parse(&m, |_, _, _| seen += 1), Ok(1));
    }

    #[test]
    fn the_dest_block_is_the_top_byte_of_the_dest_qpn() {
        let mut bth = [0u8; 12];
        bth[5..8].copy_from_slice(&[0x03, 0x00, 0x11]);
        assert_eq!(dest_block(&bth), Some(3));
        assert_eq!(dest_block(&bth[..11]), None);
        assert_eq!(block_range(3), (0x3_0000, 0x3_ffff));
    }
}
