//! Lax whole-frame decoding for tools (the pcap decoder, conformance traces).
//!
//! The engine parses strictly and drops on the first problem; a person reading a capture
//! wants to see as much as can be read and where decoding stopped (etherparse's
//! `LaxSlicedPacket` idea). [`decode`] never panics and never fails: every outcome,
//! including "not RoCEv2", is a [`FrameDecode`].

use super::cm::CmMad;
use super::frame::RoceFrame;
use super::opcode::op;
use super::{bth, icrc, mad, BthRepr, RocePacket, RoceRepr, WireError, ICRC_LEN};
use core::fmt;

/// How a captured frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Ethernet,
    /// Raw IPv4 or IPv6, no link header.
    Ip,
    /// Linux cooked capture v1 (`tcpdump -i any`, 16-byte header).
    LinuxSll,
    /// Linux cooked capture v2 (20-byte header).
    LinuxSll2,
}

/// The ICRC as found and as computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcrcStatus {
    /// The CRC value stored in the packet (bytes least significant first).
    pub found: u32,
    pub computed: u32,
}

impl IcrcStatus {
    pub fn ok(&self) -> bool {
        self.found == self.computed
    }
    /// The four ICRC bytes read big-endian, as Wireshark shows them.
    pub fn wire_be(&self) -> u32 {
        self.found.swap_bytes()
    }
}

/// What could be read of a RoCEv2 frame.
#[derive(Debug, Clone)]
pub struct RoceDecode<'a> {
    pub frame: RoceFrame<'a>,
    /// The BTH, whenever 12 bytes of it are present (even if the rest is malformed).
    pub bth: Option<BthRepr>,
    /// The whole packet, or why it could not be read. Error offsets are from the start
    /// of the frame.
    pub repr: Result<RoceRepr, WireError>,
    /// Present whenever there are bytes for a BTH and an ICRC.
    pub icrc: Option<IcrcStatus>,
}

impl RoceDecode<'_> {
    /// The payload bytes, when the packet parsed.
    pub fn payload(&self) -> Option<&[u8]> {
        let r = self.repr.as_ref().ok()?;
        let start = r.info().ok()?.header_len();
        self.frame.roce.get(start..start + r.payload_len)
    }

    /// The MAD a packet to QP1 (the GSI, IBA chapter 13: a UD SEND ONLY) carries, read as far
    /// as it goes; `None` for any other packet.
    pub fn mad(&self) -> Option<MadDecode> {
        let r = self.repr.as_ref().ok()?;
        if r.bth.opcode != op::UD_SEND_ONLY || r.bth.dqpn != GSI_QPN {
            return None;
        }
        Some(MadDecode::read(self.payload()?))
    }
}

/// QP1, the General Services Interface: where the CM (and every class but the SM's) sends.
pub const GSI_QPN: u32 = 1;

/// What could be read of a MAD sent to QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MadDecode {
    /// A communication manager MAD (class 0x07) whose message reads (boxed: a REQ's
    /// Repr is ~270 bytes, the other variants a few dozen).
    Cm(Box<CmMad>),
    /// A CM MAD whose attribute is not one of the CM's, or too short for its message.
    CmBad(mad::Repr, WireError),
    /// Another management class: only its common header is read.
    Other(mad::Repr),
    /// Fewer bytes than a MAD (256); the count.
    Short(usize),
}

impl MadDecode {
    /// Reads the payload of a UD SEND ONLY to QP1.
    pub fn read(payload: &[u8]) -> MadDecode {
        if payload.len() < mad::MAD_LEN {
            return MadDecode::Short(payload.len());
        }
        let Ok(header) = mad::Repr::parse(&mad::Packet::new_unchecked(payload)) else {
            return MadDecode::Short(payload.len());
        };
        if header.mgmt_class != mad::CLASS_CM {
            return MadDecode::Other(header);
        }
        match CmMad::parse(payload) {
            Ok(m) => MadDecode::Cm(Box::new(m)),
            Err(e) => MadDecode::CmBad(header, e),
        }
    }
}

impl fmt::Display for MadDecode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MadDecode::Cm(m) => write!(f, "{m}"),
            MadDecode::CmBad(h, e) => write!(f, "{h} [CM message unreadable: {e}]"),
            MadDecode::Other(h) => write!(f, "{h}"),
            MadDecode::Short(n) => write!(f, "MAD truncated: {n} of {} bytes", mad::MAD_LEN),
        }
    }
}

/// The outcome of decoding one captured frame.
#[derive(Debug, Clone)]
pub enum FrameDecode<'a> {
    /// Well formed, but not RoCEv2 (ARP, TCP, another UDP port, ...).
    NotRoce(&'static str),
    /// Ethernet, VLAN, IP or UDP could not be read; offsets are from the frame start.
    BadFrame(WireError),
    Roce(Box<RoceDecode<'a>>),
}

const SLL_LEN: usize = 16;
const SLL2_LEN: usize = 20;

/// Decodes one captured frame as far as it goes.
pub fn decode(link: Link, data: &[u8]) -> FrameDecode<'_> {
    let frame = match link {
        Link::Ethernet => RoceFrame::parse_ethernet(data),
        Link::Ip => RoceFrame::parse_ip(data),
        Link::LinuxSll | Link::LinuxSll2 => {
            let (hl, proto_at) = if link == Link::LinuxSll {
                (SLL_LEN, 14)
            } else {
                (SLL2_LEN, 0)
            };
            if data.len() < hl {
                return FrameDecode::BadFrame(WireError::Malformed {
                    header: super::Header::Ethernet,
                    reason: "Linux cooked capture header truncated",
                });
            }
            match u16::from_be_bytes([data[proto_at], data[proto_at + 1]]) {
                0x0800 | 0x86dd => RoceFrame::parse_ip(&data[hl..]).map_err(|e| e.add_offset(hl)),
                _ => Err(WireError::NotRoce("protocol is neither IPv4 nor IPv6")),
            }
        }
    };
    let frame = match frame {
        Ok(f) => f,
        Err(WireError::NotRoce(why)) => return FrameDecode::NotRoce(why),
        Err(e) => return FrameDecode::BadFrame(e),
    };
    let roce = frame.roce;
    let bth = (roce.len() >= bth::HEADER_LEN)
        .then(|| BthRepr::parse(&bth::Packet::new_unchecked(roce)).ok())
        .flatten();
    let icrc = (roce.len() >= bth::HEADER_LEN + ICRC_LEN)
        .then(|| {
            let (covered, tail) = roce.split_at(roce.len() - ICRC_LEN);
            let computed = icrc::compute(frame.ip.bytes(), frame.udp.slice(), covered).ok()?;
            Some(IcrcStatus {
                found: u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]),
                computed,
            })
        })
        .flatten();
    let repr = RocePacket::new_checked(roce)
        .and_then(|p| RoceRepr::parse(&p))
        .map_err(|e| e.add_offset(frame.roce_offset));
    FrameDecode::Roce(Box::new(RoceDecode {
        frame,
        bth,
        repr,
        icrc,
    }))
}

impl fmt::Display for FrameDecode<'_> {
    /// One line: addresses, headers, payload length, ICRC; or why the frame is not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameDecode::NotRoce(why) => write!(f, "skipped: not RoCEv2 ({why})"),
            FrameDecode::BadFrame(e) => write!(f, "malformed frame: {e}"),
            FrameDecode::Roce(d) => {
                write!(
                    f,
                    "{}:{} -> {}:{} ",
                    d.frame.ip.src(),
                    d.frame.udp.source_port(),
                    d.frame.ip.dst(),
                    d.frame.udp.destination_port()
                )?;
                match (&d.repr, &d.bth) {
                    (Ok(r), _) => {
                        write!(f, "{r}")?;
                        // A MAD to QP1: what it says, before the ICRC.
                        if let Some(m) = d.mad() {
                            write!(f, " {m}")?;
                        }
                    }
                    (Err(e), Some(b)) => write!(f, "{b} [malformed: {e}]")?,
                    (Err(e), None) => write!(f, "[malformed: {e}]")?,
                }
                // The IP header's congestion mark, when the packet is ECN-capable
                // (Wireshark's `ip.dsfield.ecn`); most RoCE traffic is Not-ECT.
                let ecn = d.frame.ip.ecn();
                if ecn.capable() {
                    write!(f, " ECN={}", ecn.name())?;
                }
                match &d.icrc {
                    Some(s) if s.ok() => write!(f, " ICRC={:#010x} ok", s.wire_be()),
                    Some(s) => write!(
                        f,
                        " ICRC={:#010x} BAD (expected {:#010x})",
                        s.wire_be(),
                        s.computed.swap_bytes()
                    ),
                    None => f.write_str(" ICRC missing"),
                }
            }
        }
    }
}
