//! pcapng captures of a port (the daemon's `--pcap FILE`): one Interface Description Block
//! for the port (its name, MAC, Ethernet link type, nanosecond timestamps), then one
//! Enhanced Packet Block per frame, marked inbound or outbound (`epb_flags`), stamped with
//! the real time it went through.
//!
//! [`CaptureLink`] records the frames of a [`FrameLink`] (TAP, AF_PACKET) as they are:
//! ARP, ND and ICMP included. A UDP port has no frames; [`super::capture::Capture`]
//! synthesises them into a [`PcapngFile`] the same way it does for pcap.

use super::link::{FrameLink, FrameRx, LinkStats};
use super::BackendError;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use super::capture::CaptureError;

/// Largest frame written (a 64 KiB datagram plus headers).
pub const SNAPLEN: u32 = 65_535 + 128;
/// `epb_flags` direction bits (pcapng spec, section 4.3.1).
const INBOUND: u32 = 1;
const OUTBOUND: u32 = 2;
/// Buffered frames reach the file at least this often, so a killed daemon loses little.
const FLUSH_EVERY: Duration = Duration::from_millis(200);

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    In,
    Out,
}

/// What a capture wrote, readable while it runs (the daemon's counters).
#[derive(Debug, Default)]
pub struct CaptureStats {
    pub frames: AtomicU64,
    /// Write failures: the first one stops the capture (not the port).
    pub errors: AtomicU64,
}

/// An open pcapng file with one interface.
pub struct PcapngFile {
    out: Option<PcapNgWriter<BufWriter<File>>>,
    stats: Arc<CaptureStats>,
    flushed: Instant,
    /// Frames written since the last flush.
    dirty: bool,
}

impl PcapngFile {
    /// Creates (or truncates) `path` with an interface block for port `name` (its MAC
    /// when it has one).
    pub fn create(
        path: &Path,
        name: &str,
        mac: Option<[u8; 6]>,
    ) -> Result<PcapngFile, CaptureError> {
        let err = |source| CaptureError {
            path: path.display().to_string(),
            source,
        };
        let file = File::create(path).map_err(|e| err(pcap_file::PcapError::IoError(e)))?;
        let mut w = PcapNgWriter::new(BufWriter::new(file)).map_err(err)?;
        let mut options = vec![
            InterfaceDescriptionOption::IfName(Cow::Owned(name.to_owned())),
            // Timestamps in nanoseconds (the writer writes them so).
            InterfaceDescriptionOption::IfTsResol(9),
        ];
        if let Some(m) = mac {
            options.push(InterfaceDescriptionOption::IfMacAddr(Cow::Owned(
                m.to_vec(),
            )));
        }
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: SNAPLEN,
            options,
        };
        w.write_pcapng_block(idb).map_err(err)?;
        Ok(PcapngFile {
            out: Some(w),
            stats: Arc::new(CaptureStats::default()),
            flushed: Instant::now(),
            dirty: false,
        })
    }

    /// The counters, to share.
    pub fn stats(&self) -> Arc<CaptureStats> {
        Arc::clone(&self.stats)
    }

    /// Writes one frame, stamped now.
    pub fn write(&mut self, way: Way, frame: &[u8]) {
        let Some(out) = self.out.as_mut() else { return };
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let len = frame.len().min(SNAPLEN as usize);
        let epb = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: ts,
            original_len: frame.len() as u32,
            data: Cow::Borrowed(&frame[..len]),
            options: vec![EnhancedPacketOption::Flags(match way {
                Way::In => INBOUND,
                Way::Out => OUTBOUND,
            })],
        };
        let mut ok = out.write_pcapng_block(epb).is_ok();
        self.dirty = true;
        if ok && self.flushed.elapsed() >= FLUSH_EVERY {
            ok = out.get_mut().flush().is_ok();
            self.flushed = Instant::now();
            self.dirty = false;
        }
        if ok {
            self.stats.frames.fetch_add(1, Ordering::Relaxed);
        } else {
            // A full disk stops the capture, not the port.
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            self.out = None;
        }
    }
}

impl PcapngFile {
    /// The port is going idle: what is buffered goes to the file, so a reader following
    /// it (`roce-emu ladder --live`) sees the last frames of a burst now, not with the next
    /// burst. One write when there is something; nothing otherwise.
    pub fn flush_if_dirty(&mut self) {
        if self.dirty {
            self.flush();
        }
    }

    /// Writes what is buffered to the file now (the program may be exiting).
    pub fn flush(&mut self) {
        self.dirty = false;
        self.flushed = Instant::now();
        if let Some(w) = &mut self.out {
            if w.get_mut().flush().is_err() {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                self.out = None;
            }
        }
    }
}

impl Drop for PcapngFile {
    fn drop(&mut self) {
        if let Some(mut w) = self.out.take() {
            let _ = w.get_mut().flush();
        }
    }
}

/// A frame link whose every frame, in and out, is written to a pcapng file.
pub struct CaptureLink<L> {
    inner: L,
    file: PcapngFile,
}

impl<L: FrameLink> CaptureLink<L> {
    pub fn new(inner: L, file: PcapngFile) -> CaptureLink<L> {
        CaptureLink { inner, file }
    }
}

impl<L: FrameLink> FrameLink for CaptureLink<L> {
    fn recv_frames(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [FrameRx],
    ) -> Result<usize, BackendError> {
        let n = self.inner.recv_frames(pool, slot, out)?;
        for f in &out[..n] {
            self.file.write(Way::In, &pool[f.offset..f.offset + f.len]);
        }
        Ok(n)
    }

    /// Every frame given to the link is written, the ones a full queue then dropped too
    /// (the link does not say which): the capture matches what the port sent.
    fn send_frames(&mut self, frames: &[&[u8]]) -> Result<usize, BackendError> {
        for f in frames {
            self.file.write(Way::Out, f);
        }
        self.inner.send_frames(frames)
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.fd()
    }
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn stats(&self) -> LinkStats {
        self.inner.stats()
    }
    fn prepare_sleep(&mut self) {
        self.file.flush_if_dirty();
        self.inner.prepare_sleep();
    }
    fn observe(&mut self, frame: &[u8]) {
        self.file.write(Way::Out, frame);
    }
}
