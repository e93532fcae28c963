//! Reading the records of a pcap or pcapng file held in memory: each frame with its link
//! type, its time stamp and, where the file says it, its direction.
//!
//! A capture that is still being written (tcpdump or a daemon's `--pcap` running) usually
//! ends in the middle of a record: tshark reads such a file up to the last whole record,
//! and so does this reader (it says so in [`Records::incomplete`]).

use super::PcapError;
use crate::wire::pretty::Link;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Which way a frame went, seen from the capturing interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    In,
    Out,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::In => "in",
            Dir::Out => "out",
        }
    }
}

/// One record of a capture.
pub struct Record<'a> {
    /// 1-based, as tshark numbers frames.
    pub n: usize,
    /// `None`: a link type this tool does not decode.
    pub link: Option<Link>,
    pub data: &'a [u8],
    /// Nanoseconds since the epoch, as the file gives them.
    pub time_ns: i128,
    /// From the file itself: pcapng `epb_flags`, or a Linux cooked header's packet type.
    pub dir: Option<Dir>,
    /// The capturing interface's own addresses (pcapng `if_IPv4addr`, `if_IPv6addr`).
    pub own: &'a [IpAddr],
}

/// What reading found besides the records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Records {
    pub frames: usize,
    /// The file ends inside a record or block: a capture still being written.
    pub incomplete: bool,
}

pub fn link_of(dl: DataLink) -> Option<Link> {
    match dl {
        DataLink::ETHERNET => Some(Link::Ethernet),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Some(Link::Ip),
        DataLink::LINUX_SLL => Some(Link::LinuxSll),
        DataLink::LINUX_SLL2 => Some(Link::LinuxSll2),
        _ => None,
    }
}

/// A pcapng interface as far as frames need it.
#[derive(Debug, Clone)]
struct Iface {
    link: Option<Link>,
    /// `if_tsresol`: time stamp units (bit 7 clear: 10^-v s; set: 2^-v s). Default 10^-6.
    tsresol: u8,
    own: Vec<IpAddr>,
}

impl Iface {
    fn of(i: &InterfaceDescriptionBlock<'_>) -> Iface {
        let mut f = Iface {
            link: link_of(i.linktype),
            tsresol: 6,
            own: Vec::new(),
        };
        for o in &i.options {
            match o {
                InterfaceDescriptionOption::IfTsResol(r) => f.tsresol = *r,
                InterfaceDescriptionOption::IfIpv4Addr(a) if a.len() >= 4 => f
                    .own
                    .push(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))),
                InterfaceDescriptionOption::IfIpv6Addr(a) if a.len() >= 16 => {
                    let b: [u8; 16] = a[..16].try_into().unwrap_or([0; 16]);
                    f.own.push(IpAddr::V6(Ipv6Addr::from(b)));
                }
                _ => {}
            }
        }
        f
    }

    /// A raw pcapng time stamp in nanoseconds. (pcap-file hands the raw 64-bit count
    /// over as nanoseconds whatever `if_tsresol` says; the units are applied here.)
    fn ns(&self, raw: u128) -> i128 {
        let r = u32::from(self.tsresol & 0x7f);
        let ns = if self.tsresol & 0x80 != 0 {
            raw.saturating_mul(1_000_000_000) >> r.min(127)
        } else if r <= 9 {
            raw.saturating_mul(10u128.pow(9 - r))
        } else {
            raw / 10u128.pow((r - 9).min(38))
        };
        i128::try_from(ns).unwrap_or(i128::MAX)
    }
}

/// The direction a Linux cooked header states: packet type 4 is outgoing, 0-3 (to us,
/// broadcast, multicast, to another host) were received.
fn sll_dir(link: Option<Link>, data: &[u8]) -> Option<Dir> {
    let t = match link? {
        Link::LinuxSll => u16::from_be_bytes([*data.first()?, *data.get(1)?]),
        Link::LinuxSll2 => u16::from(*data.get(10)?),
        _ => return None,
    };
    match t {
        0..=3 => Some(Dir::In),
        4 => Some(Dir::Out),
        _ => None,
    }
}

/// `epb_flags` bits 0-1: 1 inbound, 2 outbound (pcapng spec, 4.3.1).
fn epb_dir(options: &[EnhancedPacketOption<'_>]) -> Option<Dir> {
    options.iter().find_map(|o| match o {
        EnhancedPacketOption::Flags(f) => match f & 3 {
            1 => Some(Dir::In),
            2 => Some(Dir::Out),
            _ => None,
        },
        _ => None,
    })
}

/// The end of what there is so far: the reader ran out of bytes inside a record.
fn is_eof(e: &pcap_file::PcapError) -> bool {
    match e {
        pcap_file::PcapError::IncompleteBuffer => true,
        pcap_file::PcapError::IoError(e) => e.kind() == std::io::ErrorKind::UnexpectedEof,
        _ => false,
    }
}

/// Calls `each` for every record of a pcap or pcapng file held in memory.
pub fn for_each_record(
    bytes: &[u8],
    mut each: impl FnMut(Record<'_>),
) -> Result<Records, PcapError> {
    let magic: [u8; 4] = match bytes.get(..4).and_then(|m| m.try_into().ok()) {
        Some(m) => m,
        None if bytes.is_empty() => return Err(PcapError::Empty),
        None => return Err(PcapError::Short(bytes.len())),
    };
    let mut st = Records::default();
    let fmt_err = |after, source| PcapError::Format { after, source };
    if magic == PCAPNG_MAGIC {
        let mut r = PcapNgReader::new(bytes).map_err(|e| fmt_err(0, e))?;
        // Interfaces by id, per section (the reader's own list is borrowed while a block
        // is alive).
        let mut ifaces: Vec<Iface> = r.interfaces().iter().map(Iface::of).collect();
        let none = Iface {
            link: None,
            tsresol: 6,
            own: Vec::new(),
        };
        while let Some(block) = r.next_block() {
            let block = match block {
                Ok(b) => b,
                Err(e) if is_eof(&e) => {
                    st.incomplete = true;
                    break;
                }
                Err(e) => return Err(fmt_err(st.frames, e)),
            };
            let (id, raw_ts, data, flags): (u32, u128, &[u8], Option<Dir>) = match &block {
                Block::SectionHeader(_) => {
                    ifaces.clear();
                    continue;
                }
                Block::InterfaceDescription(i) => {
                    ifaces.push(Iface::of(i));
                    continue;
                }
                Block::EnhancedPacket(p) => (
                    p.interface_id,
                    p.timestamp.as_nanos(),
                    &p.data,
                    epb_dir(&p.options),
                ),
                Block::SimplePacket(p) => (0, 0, &p.data, None),
                Block::Packet(p) => (
                    u32::from(p.interface_id),
                    u128::from(p.timestamp),
                    &p.data,
                    None,
                ),
                _ => continue,
            };
            let iface = ifaces.get(id as usize).unwrap_or(&none);
            st.frames += 1;
            each(Record {
                n: st.frames,
                link: iface.link,
                data,
                time_ns: iface.ns(raw_ts),
                dir: flags.or_else(|| sll_dir(iface.link, data)),
                own: &iface.own,
            });
        }
    } else {
        let mut r = PcapReader::new(bytes).map_err(|e| match e {
            pcap_file::PcapError::InvalidField(_) => PcapError::NotPcap(magic),
            e => fmt_err(0, e),
        })?;
        let h = r.header();
        let link = link_of(h.datalink);
        let frac_ns: i128 = match h.ts_resolution {
            TsResolution::MicroSecond => 1_000,
            TsResolution::NanoSecond => 1,
        };
        // Raw records: pcap-file 2.0's checked `next_packet` refuses a frame whose original
        // length exceeds the snap length, which is what every truncated (`-s N`) capture
        // holds. The one check that matters, what is stored fits the snap length, is here.
        while let Some(p) = r.next_raw_packet() {
            let p = match p {
                Ok(p) => p,
                Err(e) if is_eof(&e) => {
                    st.incomplete = true;
                    break;
                }
                Err(e) => return Err(fmt_err(st.frames, e)),
            };
            if p.incl_len > h.snaplen.max(p.orig_len) {
                return Err(fmt_err(
                    st.frames,
                    pcap_file::PcapError::InvalidField("PacketHeader incl_len > snap_len"),
                ));
            }
            st.frames += 1;
            each(Record {
                n: st.frames,
                link,
                data: &p.data,
                time_ns: i128::from(p.ts_sec) * 1_000_000_000 + i128::from(p.ts_frac) * frac_ns,
                dir: sll_dir(link, &p.data),
                own: &[],
            });
        }
    }
    Ok(st)
}
