//! A TAP device as a frame link: the kernel sees an Ethernet interface (give it an address,
//! route through it, bridge it), and every frame it sends there comes to us whole.
//!
//! Cost per frame: one `read(2)` per received frame (plus one that finds nothing and ends a
//! call which did not fill its batch) and one `write(2)` per sent frame. The TUN/TAP
//! character device has no batching call (no recvmmsg/sendmmsg on a character device, and
//! one read or write is exactly one frame); batching would need vhost-net or io_uring.
//!
//! The device is made with the tun-tap crate (`TUNSETIFF`, `IFF_TAP | IFF_NO_PI`); it is
//! brought up with `SIOCSIFFLAGS` (an ioctl in `sys`, no child `ip` process, no netlink).

use std::fs::File;
use std::io::{self, IoSliceMut, Write};
use std::os::fd::{AsFd, BorrowedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};

use super::link::{self, FrameLink, FrameRx, LinkStats, TxFailure};
use super::{sys, BackendError};

/// Bytes read past a slot's end, to tell a frame that fits exactly from a longer one (a
/// read of a TAP fills what it is given and drops the rest of a longer frame silently).
const OVERRUN: usize = 64;

/// A TAP interface of ours: frames in and out through its file descriptor.
pub struct TapLink {
    file: File,
    name: String,
    mac: [u8; 6],
    mtu: usize,
    stats: LinkStats,
    overrun: [u8; OVERRUN],
}

impl TapLink {
    /// Creates TAP interface `name` (non-persistent: it disappears when this link is
    /// dropped, as the kernel removes a TAP when its last file descriptor closes) and
    /// brings it up. Needs CAP_NET_ADMIN. Fails if an interface of that name exists
    /// (TUNSETIFF would attach to a TAP of that name instead of creating one).
    pub fn create(name: &str) -> Result<TapLink, BackendError> {
        if nix::net::if_::if_nametoindex(name).is_ok() {
            let e = io::Error::new(io::ErrorKind::AlreadyExists, "interface exists");
            return Err(BackendError::link("create TAP", name, e));
        }
        TapLink::open(name, "create TAP")
    }

    /// Attaches to the existing persistent TAP `name` (made with `ip tuntap add dev NAME
    /// mode tap`) and brings it up; it stays when this link is dropped.
    pub fn attach(name: &str) -> Result<TapLink, BackendError> {
        if nix::net::if_::if_nametoindex(name).is_err() {
            let e = io::Error::new(io::ErrorKind::NotFound, "no such interface");
            return Err(BackendError::link("attach to TAP", name, e));
        }
        TapLink::open(name, "attach to TAP")
    }

    fn open(name: &str, op: &'static str) -> Result<TapLink, BackendError> {
        let err = |e| BackendError::link(op, name, e);
        // tun-tap cuts a longer name to IFNAMSIZ - 1 bytes: we would make or take another
        // interface than the one asked for.
        if name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "interface name too long");
            return Err(err(e));
        }
        let iface = tun_tap::Iface::without_packet_info(name, tun_tap::Mode::Tap).map_err(err)?;
        let name = iface.name().to_owned();
        let file = File::from(sys::own_fd(iface));
        // A NIC polls: reads must say "nothing" (EAGAIN), never wait.
        let flags = fcntl(&file, FcntlArg::F_GETFL).map_err(|e| err(e.into()))?;
        let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
        fcntl(&file, FcntlArg::F_SETFL(flags)).map_err(|e| err(e.into()))?;
        let s = link::control_socket().map_err(err)?;
        sys::set_if_up(s.as_fd(), &name).map_err(err)?;
        let (mtu, kernel_mac) = link::if_mtu_mac(&name).map_err(err)?;
        // Our MAC is the NIC's, behind the interface; the kernel's side has its own.
        let mac = loop {
            let m = link::random_local_mac();
            if m != kernel_mac {
                break m;
            }
        };
        Ok(TapLink {
            file,
            name,
            mac,
            mtu,
            stats: LinkStats::default(),
            overrun: [0; OVERRUN],
        })
    }

    /// The interface's name (the kernel's choice when `name` had a `%d`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Uses `mac` as the NIC's MAC instead of the random one (a unicast address other
    /// than the kernel side's, or the kernel answers its own frames).
    pub fn set_mac(&mut self, mac: [u8; 6]) {
        self.mac = mac;
    }
}

impl FrameLink for TapLink {
    fn recv_frames(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [FrameRx],
    ) -> Result<usize, BackendError> {
        let n = out.len().min(pool.len().checked_div(slot).unwrap_or(0));
        let mut got = 0;
        // Truncated frames reuse their slot; the bound keeps a flood of them from holding
        // the caller here.
        for _ in 0..2 * n {
            if got == n {
                break;
            }
            let buf = &mut pool[got * slot..(got + 1) * slot];
            let mut iov = [IoSliceMut::new(buf), IoSliceMut::new(&mut self.overrun)];
            self.stats.rx_syscalls += 1;
            match nix::sys::uio::readv(&self.file, &mut iov) {
                Ok(len) if len > slot => self.stats.rx_truncated += 1,
                Ok(len) => {
                    out[got] = FrameRx {
                        offset: got * slot,
                        len,
                    };
                    got += 1;
                    self.stats.rx_frames += 1;
                    self.stats.rx_bytes += len as u64;
                }
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(BackendError::link("receive on", &self.name, e.into())),
            }
        }
        Ok(got)
    }

    fn send_frames(&mut self, frames: &[&[u8]]) -> Result<usize, BackendError> {
        let mut sent = 0;
        for (i, f) in frames.iter().enumerate() {
            self.stats.tx_syscalls += 1;
            match (&self.file).write(f) {
                // One write is one frame: a TAP takes it whole or refuses it.
                Ok(n) if n < f.len() => self.stats.tx_errors += 1,
                Ok(_) => {
                    sent += 1;
                    self.stats.tx_frames += 1;
                    self.stats.tx_bytes += f.len() as u64;
                }
                Err(e) => match link::tx_failure(&e) {
                    TxFailure::QueueFull => {
                        self.stats.tx_dropped += (frames.len() - i) as u64;
                        break;
                    }
                    TxFailure::Frame => self.stats.tx_errors += 1,
                    TxFailure::Link => return Err(BackendError::link("send on", &self.name, e)),
                },
            }
        }
        Ok(sent)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_kernel_would_cut_is_refused_before_any_system_call() {
        for name in ["roce-emu-tap-0123", "nul\0name"] {
            let e = TapLink::create(name).err().expect("refused");
            assert!(e.to_string().contains("too long"), "{e}");
        }
    }
}
