//! Packet capture around any backend: every RoCE packet sent and received, one per pcap
//! frame (`--pcap FILE`).
//!
//! Why our own capture rather than tcpdump on the interface: on loopback tcpdump sees GSO
//! trains before segmentation and GRO-coalesced datagrams, so one frame holds many RoCE
//! packets and its ICRC looks wrong. Here each packet gets a frame of its own, with
//! synthesised Ethernet/IP/UDP headers carrying the addresses, ports and IPv4
//! identification actually used, so every ICRC verifies in tshark and `roce-emu pcap`.

use super::pcapng::{PcapngFile, Way};
use super::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::wire::icrc::{Ipv4IdSolver, PseudoHeaders};
use crate::wire::Ecn;
use pcap_file::pcap::PcapHeader;
use pcap_file::DataLink;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

const ETH_LEN: usize = 14;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
/// The TTL / hop limit written into synthesised headers (masked from the ICRC).
const HOP_LIMIT: u8 = 64;
/// Largest frame written: the UDP backend's largest datagram plus headers.
const SNAPLEN: u32 = 65_535 + 128;

/// Where the frames go: a classic pcap (a NIC's `--pcap`) or a pcapng file with an
/// interface block (the daemon's `--pcap`, [`super::pcapng`]). The classic file's records
/// are written here (big-endian, as its header says, microseconds) rather than through
/// `pcap_file`'s writer, which cannot flush its buffer without being consumed: a program
/// that exits with no destructor (the drop-in's) flushes the file and carries on.
enum Sink {
    Pcap(Option<BufWriter<File>>),
    Pcapng(PcapngFile),
}

/// Writes every packet `inner` sends and receives to a pcap (or pcapng) file.
pub struct Capture<B> {
    inner: B,
    out: Sink,
    /// Recovers the IPv4 ID of packets whose backend did not report it (UDP sockets).
    solver: Ipv4IdSolver,
    frame: Vec<u8>,
    captured: u64,
    errors: u64,
}

/// A capture file could not be created.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the capture {path}: {source}")]
pub struct CaptureError {
    pub path: String,
    #[source]
    pub source: pcap_file::PcapError,
}

impl<B: Backend> Capture<B> {
    /// Creates (or truncates) `path` and captures into it from now on.
    pub fn create(inner: B, path: &Path) -> Result<Capture<B>, CaptureError> {
        let err = |source| CaptureError {
            path: path.display().to_string(),
            source,
        };
        let file = File::create(path).map_err(|e| err(pcap_file::PcapError::IoError(e)))?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            snaplen: SNAPLEN,
            ..PcapHeader::default()
        };
        let mut out = BufWriter::new(file);
        header.write_to(&mut out).map_err(err)?;
        Ok(Capture::with_sink(inner, Sink::Pcap(Some(out))))
    }

    /// Captures into a pcapng file (made with [`PcapngFile::create`]) instead.
    pub fn pcapng(inner: B, file: PcapngFile) -> Capture<B> {
        Capture::with_sink(inner, Sink::Pcapng(file))
    }

    fn with_sink(inner: B, out: Sink) -> Capture<B> {
        Capture {
            inner,
            out,
            solver: Ipv4IdSolver::new(),
            frame: Vec::with_capacity(SNAPLEN as usize),
            captured: 0,
            errors: 0,
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Writes one packet (BTH through ICRC) with headers for `src` -> `dst`.
    fn record(
        &mut self,
        way: Way,
        (src, dst): (SocketAddr, SocketAddr),
        id: Option<u16>,
        ecn: Ecn,
        roce: &[u8],
    ) {
        if matches!(self.out, Sink::Pcap(None)) {
            return;
        }
        let id = match (id, src.ip(), dst.ip()) {
            (Some(id), ..) => id,
            (None, IpAddr::V4(_), IpAddr::V4(_)) => {
                let ph = PseudoHeaders::new(src, dst, 0, roce.len());
                // No ID fits only if the packet is damaged: it is written as it came.
                self.solver.solve(ph.ip(), ph.udp(), roce).unwrap_or(0)
            }
            _ => 0,
        };
        self.frame.clear();
        frame(&mut self.frame, src, dst, id, ecn, roce);
        let out = match &mut self.out {
            Sink::Pcap(Some(out)) => out,
            Sink::Pcap(None) => return,
            Sink::Pcapng(f) => {
                f.write(way, &self.frame);
                self.captured += 1;
                return;
            }
        };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let len = self.frame.len() as u32;
        let mut record = [0u8; 16];
        let fields = [ts.as_secs() as u32, ts.subsec_micros(), len, len];
        for (i, f) in fields.iter().enumerate() {
            record[i * 4..i * 4 + 4].copy_from_slice(&f.to_be_bytes());
        }
        if out
            .write_all(&record)
            .and_then(|()| out.write_all(&self.frame))
            .is_err()
        {
            // A full disk stops the capture, not the NIC.
            self.errors += 1;
            self.out = Sink::Pcap(None);
            return;
        }
        self.captured += 1;
    }
}

/// A locally administered MAC made of the address's last four bytes, so frames of one
/// host share one MAC (tshark's conversations stay readable).
fn mac(ip: IpAddr) -> [u8; 6] {
    let o = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let b = a.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

/// Ethernet, IP and UDP headers for a RoCE packet, then the packet. The IP header carries
/// `ecn` (the ICRC masks those bits: IBA A17.4.1).
pub(crate) fn frame(
    buf: &mut Vec<u8>,
    src: SocketAddr,
    dst: SocketAddr,
    id: u16,
    ecn: Ecn,
    roce: &[u8],
) {
    let ph = PseudoHeaders::new(src, dst, id, roce.len());
    buf.extend_from_slice(&mac(dst.ip()));
    buf.extend_from_slice(&mac(src.ip()));
    let ip_at = buf.len() + 2;
    let v4 = ph.ip().len() == etherparse::Ipv4Header::MIN_LEN;
    buf.extend_from_slice(if v4 { &ETHERTYPE_IPV4 } else { &ETHERTYPE_IPV6 });
    buf.extend_from_slice(ph.ip());
    let ip = &mut buf[ip_at..];
    if v4 {
        ip[1] = ecn.in_tos(ip[1]);
        ip[8] = HOP_LIMIT;
        let sum = etherparse::checksum::Sum16BitWords::new()
            .add_slice(&ip[..etherparse::Ipv4Header::MIN_LEN])
            .ones_complement();
        // The sum is of native-order words: its native bytes are the wire's (etherparse's
        // own `calc_header_checksum` is `ones_complement().to_be()`, written big-endian).
        ip[10..12].copy_from_slice(&sum.to_ne_bytes());
    } else {
        // The traffic class straddles bytes 0 and 1; its ECN bits are byte 1's 0x30.
        ip[1] = (ip[1] & !0x30) | ecn.bits() << 4;
        ip[7] = HOP_LIMIT;
    }
    buf.extend_from_slice(ph.udp());
    buf.extend_from_slice(roce);
    debug_assert_eq!(ip_at, ETH_LEN);
}

impl<B: Backend> Backend for Capture<B> {
    fn local(&self) -> SocketAddr {
        self.inner.local()
    }
    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        let n = self.inner.recv_batch(pool, out)?;
        for r in &out[..n] {
            // A GRO datagram is several packets: one frame each, as the engine sees them.
            let seg = r.segment.unwrap_or(r.len).max(1);
            for data in pool[r.offset..r.offset + r.len].chunks(seg) {
                self.record(Way::In, (r.src, r.dst), r.ipv4_id, r.ecn, data);
            }
        }
        Ok(n)
    }
    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        // After the send: the backend may have rewritten ICRCs for the IDs it used.
        let r = self.inner.send_batch(pool, slot, out);
        for (i, o) in out.iter().enumerate() {
            self.record(
                Way::Out,
                (o.src, o.dst),
                None,
                o.ecn,
                &pool[i * slot..i * slot + o.len],
            );
        }
        r
    }
    fn send_room(&mut self, largest: usize) -> usize {
        self.inner.send_room(largest)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        self.inner.rx_fd()
    }
    fn prepare_sleep(&mut self) -> bool {
        // Going idle: the frames buffered so far reach the file (a live reader follows it).
        match &mut self.out {
            Sink::Pcap(Some(w)) => {
                if !w.buffer().is_empty() && w.flush().is_err() {
                    self.errors += 1;
                }
            }
            Sink::Pcap(None) => {}
            Sink::Pcapng(f) => f.flush_if_dirty(),
        }
        self.inner.prepare_sleep()
    }
    fn stats(&self) -> PortStats {
        PortStats {
            captured: self.captured,
            capture_errors: self.errors,
            ..self.inner.stats()
        }
    }
    fn l2_stats(&self) -> Option<crate::iface::IfaceStats> {
        self.inner.l2_stats()
    }
    fn mark_used(&mut self) {
        self.inner.mark_used()
    }
    fn observe_hairpin(&mut self, src: SocketAddr, dst: SocketAddr, ecn: Ecn, packet: &[u8]) {
        // On a UDP port a hairpin is a datagram the kernel would have carried on the
        // loopback: recorded as sent, with IPv4 ID 0 (what the receiver is handed).
        self.record(Way::Out, (src, dst), Some(0), ecn, packet);
        self.inner.observe_hairpin(src, dst, ecn, packet);
    }
    fn flush_held(&mut self) {
        self.inner.flush_held();
        match &mut self.out {
            Sink::Pcap(Some(w)) => {
                if w.flush().is_err() {
                    self.errors += 1;
                }
                // The capture ends here: the program may be exiting, and a frame written
                // after this flush could be cut short in the file.
                self.out = Sink::Pcap(None);
            }
            Sink::Pcap(None) => {}
            Sink::Pcapng(f) => f.flush(),
        }
    }
}

impl<B> Drop for Capture<B> {
    fn drop(&mut self) {
        // A pcapng file flushes itself when dropped.
        if let Sink::Pcap(out) = &mut self.out {
            if let Some(mut w) = out.take() {
                let _ = w.flush();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::Fake;
    use crate::wire::RoceFrame;

    /// The RoCE packets (with addresses and ports) of a real rxe capture, whose IPv4 IDs
    /// are rxe's counter values, not 0.
    fn rxe_packets() -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/write_bw_s4096.pcap"
        );
        let file = std::fs::File::open(path).unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
        let mut v = Vec::new();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let Ok(f) = RoceFrame::parse_ethernet(&p.data) else {
                continue;
            };
            let src = SocketAddr::new(f.ip.src(), f.udp.source_port());
            let dst = SocketAddr::new(f.ip.dst(), f.udp.destination_port());
            v.push((src, dst, f.roce.to_vec()));
        }
        assert!(v.len() > 10);
        v
    }

    /// Packets received and sent without their IPv4 ID (as a UDP socket has them) come out
    /// as frames whose headers carry the ID under which the ICRC verifies: one frame per
    /// packet, every ICRC valid, bytes unchanged. (Writing ID 0 instead fails it: rxe's
    /// IDs are a counter.)
    #[test]
    fn every_captured_frame_verifies() {
        let pkts = rxe_packets();
        let path =
            std::env::temp_dir().join(format!("roce-emu-capture-{}.pcap", std::process::id()));
        let fake = Fake {
            rx: pkts.iter().cloned().collect(),
            ipv4_id: None,
            ..Fake::new()
        };
        let mut c = Capture::create(fake, &path).unwrap();
        let mut pool = vec![0u8; 1 << 20];
        let mut got = [Received {
            src: c.local(),
            dst: c.local(),
            offset: 0,
            len: 0,
            segment: None,
            ipv4_id: None,
            ecn: Ecn::NotEct,
        }; 512];
        let n = c.recv_batch(&mut pool, &mut got).unwrap();
        assert_eq!(n, pkts.len());
        // The same packets sent: one slot each.
        const SLOT: usize = 8192;
        let mut out = Vec::new();
        let mut tx = vec![0u8; SLOT * pkts.len()];
        for (i, (s, d, b)) in pkts.iter().enumerate() {
            tx[i * SLOT..i * SLOT + b.len()].copy_from_slice(b);
            out.push(Outgoing {
                src: *s,
                dst: *d,
                len: b.len(),
                ecn: Ecn::NotEct,
            });
        }
        c.send_batch(&mut tx, SLOT, &out).unwrap();
        assert_eq!(c.stats().captured, 2 * pkts.len() as u64);
        drop(c);

        let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut k = 0;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let f = RoceFrame::parse_ethernet(&p.data).expect("a RoCE frame");
            f.verify_icrc().unwrap_or_else(|e| panic!("frame {k}: {e}"));
            assert_eq!(f.roce, &pkts[k % pkts.len()].2[..], "frame {k}");
            k += 1;
        }
        assert_eq!(k, 2 * pkts.len());
        let _ = std::fs::remove_file(path);
    }

    /// A captured frame carries the packet's ECN codepoint in its IP header (IPv4 TOS,
    /// with the header checksum over it; IPv6 traffic class).
    #[test]
    fn captured_frames_carry_the_ecn_codepoint() {
        let (src, dst, roce) = rxe_packets().swap_remove(0);
        let v6 = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v) => SocketAddr::new(IpAddr::V6(v.to_ipv6_mapped()), a.port()),
            IpAddr::V6(_) => a,
        };
        for ecn in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            let mut b = Vec::new();
            frame(&mut b, src, dst, 0, ecn, &roce);
            let f = RoceFrame::parse_ethernet(&b).expect("IPv4 frame");
            assert_eq!(f.ip.ecn(), ecn);
            let (h, _) = etherparse::Ipv4Header::from_slice(&b[14..]).unwrap();
            assert_eq!(h.calc_header_checksum(), h.header_checksum, "{ecn:?}");
            let mut b6 = Vec::new();
            frame(&mut b6, v6(src), v6(dst), 0, ecn, &roce);
            let f6 = RoceFrame::parse_ethernet(&b6).expect("IPv6 frame");
            assert_eq!(f6.ip.ecn(), ecn);
            assert_eq!(b6[14] >> 4, 6, "still version 6");
        }
    }
}
