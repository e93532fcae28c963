//! An AF_PACKET socket on an existing interface as a frame link: the NIC shares the
//! interface (and its MAC) with the kernel, sees every frame that arrives on it and sends
//! frames out of it. The L2 layer above decides which frames are the NIC's.
//!
//! Cost per frame: one `recvmmsg` receives up to [`BATCH`] frames and one `sendmmsg` sends
//! up to [`BATCH`] (the batch machinery of `sys`, as for UDP), plus the `recvmmsg` that
//! finds nothing. A PACKET_MMAP ring (TPACKET_V3) would save the copies and most calls, at
//! the price of a mapped ring shared with the kernel (more `unsafe`); this is the simple,
//! robust step first. pnet's datalink channel was not used: it hides the socket, so there
//! is nothing to poll on and no way to set PACKET_IGNORE_OUTGOING.
//!
//! Own frames: the socket sets PACKET_IGNORE_OUTGOING (Linux 4.20+), so nothing sent on
//! the interface (by us or by the kernel) comes back as input. Frames to any MAC arrive
//! (a packet socket sees what the interface accepts: its own MAC, broadcast, multicast it
//! joined); the NIC uses the interface's MAC, so promiscuous mode is not needed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use socket2::{Domain, Socket, Type};

use super::link::{self, FrameLink, FrameRx, LinkStats, TxFailure};
use super::sys::{self, RecvMeta, RecvMmsg, SendMmsg};
use super::BackendError;

/// Frames per `recvmmsg` or `sendmmsg`.
pub const BATCH: usize = 64;

/// An AF_PACKET socket bound to one interface.
pub struct PacketLink {
    sock: Socket,
    name: String,
    mac: [u8; 6],
    mtu: usize,
    rx: RecvMmsg,
    meta: Vec<RecvMeta>,
    tx: SendMmsg,
    stats: LinkStats,
}

/// The receive buffer a packet socket asks for.
const RCVBUF: usize = 8 << 20;

impl PacketLink {
    /// Opens a packet socket on interface `name` (which must exist; needs CAP_NET_RAW).
    pub fn open(name: &str) -> Result<PacketLink, BackendError> {
        let err = |e| BackendError::link("open AF_PACKET on", name, e);
        let ifindex = nix::net::if_::if_nametoindex(name).map_err(|e| err(e.into()))?;
        // Protocol 0: no frame is queued before the bind below names the interface (a
        // socket made with ETH_P_ALL would take every interface's frames until then).
        let sock = Socket::new(Domain::PACKET, Type::RAW, None).map_err(err)?;
        sys::set_packet_ignore_outgoing(sock.as_fd()).map_err(err)?;
        sock.set_nonblocking(true).map_err(err)?;
        // A peer's burst (rxe sends a 64 KiB WRITE as sixteen 4 KiB frames back to back,
        // several WRITEs deep) overflows the default socket buffer (208 KiB; the lab saw
        // hundreds of frames dropped by the socket and sequence NAKs): ask for 8 MiB, past
        // net.core.rmem_max where we may (CAP_NET_ADMIN), else as much as it allows.
        let want = RCVBUF;
        if nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::RcvBufForce, &want)
            .is_err()
        {
            let _ = sock.set_recv_buffer_size(want);
        }
        sys::bind_packet(sock.as_fd(), ifindex).map_err(err)?;
        let (mtu, mac) = link::if_mtu_mac(name).map_err(err)?;
        Ok(PacketLink {
            sock,
            name: name.to_owned(),
            mac,
            mtu,
            rx: RecvMmsg::new(BATCH),
            meta: vec![RecvMeta::default(); BATCH],
            tx: SendMmsg::new(BATCH, BATCH),
            stats: LinkStats::default(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn recv_err(&self, e: io::Error) -> BackendError {
        BackendError::link("receive on", &self.name, e)
    }
}

impl FrameLink for PacketLink {
    fn recv_frames(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [FrameRx],
    ) -> Result<usize, BackendError> {
        let n = out.len().min(BATCH);
        if slot == 0 || n == 0 {
            return Ok(0);
        }
        self.stats.rx_syscalls += 1;
        let got = match self
            .rx
            .recv(self.sock.as_fd(), pool, slot, &mut self.meta[..n])
        {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(self.recv_err(e)),
        };
        let mut kept = 0;
        for (i, m) in self.meta[..got].iter().enumerate() {
            if m.truncated {
                self.stats.rx_truncated += 1;
                continue;
            }
            out[kept] = FrameRx {
                offset: i * slot,
                len: m.len,
            };
            kept += 1;
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += m.len as u64;
        }
        Ok(kept)
    }

    fn send_frames(&mut self, frames: &[&[u8]]) -> Result<usize, BackendError> {
        let mut sent = 0;
        for (c, chunk) in frames.chunks(BATCH).enumerate() {
            let mut batch = self.tx.batch();
            for f in chunk {
                // Room for BATCH one-part messages: never full here.
                let staged = batch.push_connected(std::iter::once(*f));
                debug_assert!(staged);
            }
            let mut from = 0;
            while from < chunk.len() {
                self.stats.tx_syscalls += 1;
                match batch.send(self.sock.as_fd(), from) {
                    Ok(k) => {
                        for f in &chunk[from..from + k] {
                            self.stats.tx_bytes += f.len() as u64;
                        }
                        self.stats.tx_frames += k as u64;
                        sent += k;
                        from += k;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => match link::tx_failure(&e) {
                        TxFailure::QueueFull => {
                            // The rest of this call is dropped, later chunks included.
                            self.stats.tx_dropped += (frames.len() - c * BATCH - from) as u64;
                            return Ok(sent);
                        }
                        TxFailure::Frame => {
                            self.stats.tx_errors += 1;
                            from += 1;
                        }
                        TxFailure::Link => {
                            return Err(BackendError::link("send on", &self.name, e))
                        }
                    },
                }
            }
        }
        Ok(sent)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn stats(&self) -> LinkStats {
        self.stats
    }
}
