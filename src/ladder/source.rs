//! Sources of [`Observed`] packets: a captured frame (every link type `roce-emu pcap`
//! reads) and the simulator's trace. No file reading here (the `ladder` layer does no
//! I/O): the tool's loop reads the file and hands each frame to [`from_frame`].

use super::model::{Fate, Observed};
use crate::sim::rule::Verdict;
use crate::sim::Traced;
use crate::wire::frame::{IpSlice, ROCE_UDP_PORT};
use crate::wire::pretty::{self, FrameDecode, Link};
use std::net::{IpAddr, SocketAddr};

/// One captured frame as a packet, or `None` when it is not RoCEv2 (another protocol, or
/// Ethernet/IP/UDP that could not be read: counted by the caller). A RoCEv2 frame whose
/// BTH or extension headers are bad is still a packet: the builder counts it malformed.
/// The ICRC is checked here, where the IP and UDP headers it covers are at hand.
pub fn from_frame<'a>(
    frame: usize,
    t_ns: i128,
    link: Link,
    data: &'a [u8],
) -> Option<Observed<'a>> {
    let FrameDecode::Roce(d) = pretty::decode(link, data) else {
        return None;
    };
    let f = &d.frame;
    let ecn = match &f.ip {
        IpSlice::V4(h) => h.ecn().value(),
        IpSlice::V6(h) => h.ecn().value(),
    };
    Some(Observed {
        frame,
        t_ns,
        src: SocketAddr::new(f.ip.src(), f.udp.source_port()),
        dst: SocketAddr::new(f.ip.dst(), f.udp.destination_port()),
        ecn,
        roce: f.roce,
        fate: Fate::Delivered,
        icrc_ok: d.icrc.map(|s| s.ok()),
    })
}

/// A packet that owns its bytes (the simulator's trace is given as these).
#[derive(Debug, Clone)]
pub struct ObservedBuf {
    pub frame: usize,
    pub t_ns: i128,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub ecn: u8,
    pub fate: Fate,
    pub icrc_ok: Option<bool>,
    pub bytes: Vec<u8>,
}

impl ObservedBuf {
    pub fn as_observed(&self) -> Observed<'_> {
        Observed {
            frame: self.frame,
            t_ns: self.t_ns,
            src: self.src,
            dst: self.dst,
            ecn: self.ecn,
            roce: &self.bytes,
            fate: self.fate,
            icrc_ok: self.icrc_ok,
        }
    }
}

/// The simulator's trace (`Net::trace`, dropped packets included) as packets: node `i` is
/// at `addrs[i]` (`Net::nodes[i].ip`); a packet from or to a node without an address is
/// left out. Times are from the first traced packet. The trace holds neither UDP ports
/// nor the IPv4 header the ICRC covers: both ports read 4791 and `icrc_ok` is `None`.
/// A rule's `Corrupt` verdict flips a byte after the trace took its copy, so the packet
/// is shown as sent; `Delay` and `Duplicate` are delivered packets.
pub fn from_trace(trace: &[Traced], addrs: &[IpAddr]) -> Vec<ObservedBuf> {
    let t0 = trace.first().map_or(0, |t| i128::from(t.at.as_nanos()));
    trace
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let src = *addrs.get(t.from)?;
            let dst = *addrs.get(t.to)?;
            Some(ObservedBuf {
                frame: i + 1,
                t_ns: i128::from(t.at.as_nanos()) - t0,
                src: SocketAddr::new(src, ROCE_UDP_PORT),
                dst: SocketAddr::new(dst, ROCE_UDP_PORT),
                // As delivered: CE after the simulator's switch marked it.
                ecn: t.ecn.bits(),
                fate: if t.verdict == Verdict::Drop {
                    Fate::Dropped
                } else {
                    Fate::Delivered
                },
                icrc_ok: None,
                bytes: t.bytes.clone(),
            })
        })
        .collect()
}
