//! Links that move whole Ethernet frames: the NIC owns L2 on them (its own MAC, ARP, ND,
//! ICMP echo, in `iface`). [`super::tap::TapLink`] is a TAP device of our own;
//! [`super::afpacket::PacketLink`] an AF_PACKET socket on an existing interface. Both are
//! plain byte movers: no parsing, no protocol state.

use std::hash::BuildHasher;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::BackendError;

/// Where a received frame is in the caller's pool: `pool[offset..offset + len]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameRx {
    pub offset: usize,
    pub len: usize,
}

/// A link that moves whole Ethernet frames (the NIC owns L2 on it).
pub trait FrameLink: Send {
    /// Receives waiting frames into `pool`, frame `i` into slot `i` (`slot` bytes each), at
    /// most `out.len()` frames; 0 when none. Never blocks. A frame larger than its slot is
    /// dropped and counted (`rx_truncated`): give slots larger than `mtu() + 18`.
    fn recv_frames(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [FrameRx],
    ) -> Result<usize, BackendError>;
    /// Sends frames (each a whole Ethernet frame, FCS excluded), batched where the link
    /// allows; returns how many the kernel took. A frame the kernel refuses is counted
    /// (`tx_errors`) and skipped; a full queue drops the rest of the call (`tx_dropped`),
    /// as a NIC's full ring would: the transport above retransmits.
    fn send_frames(&mut self, frames: &[&[u8]]) -> Result<usize, BackendError>;
    /// What to sleep on until `recv_frames` has something.
    fn fd(&self) -> BorrowedFd<'_>;
    /// The MAC the NIC uses (TAP: our own, not the kernel side's; AF_PACKET: the
    /// interface's).
    fn mac(&self) -> [u8; 6];
    /// The link's MTU (IP bytes per frame).
    fn mtu(&self) -> usize;
    /// The link's counters.
    fn stats(&self) -> LinkStats;
    /// A frame that did not cross the link (the daemon's hairpin between two of its
    /// processes): a link that records what it carries (a capture) records it, as sent.
    fn observe(&mut self, _frame: &[u8]) {}
    /// The port is about to sleep: a link that buffers (a capture's file) writes out now.
    fn prepare_sleep(&mut self) {}
}

impl<L: FrameLink + ?Sized> FrameLink for Box<L> {
    fn recv_frames(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [FrameRx],
    ) -> Result<usize, BackendError> {
        (**self).recv_frames(pool, slot, out)
    }
    fn send_frames(&mut self, frames: &[&[u8]]) -> Result<usize, BackendError> {
        (**self).send_frames(frames)
    }
    fn fd(&self) -> BorrowedFd<'_> {
        (**self).fd()
    }
    fn mac(&self) -> [u8; 6] {
        (**self).mac()
    }
    fn mtu(&self) -> usize {
        (**self).mtu()
    }
    fn stats(&self) -> LinkStats {
        (**self).stats()
    }
    fn observe(&mut self, frame: &[u8]) {
        (**self).observe(frame)
    }
    fn prepare_sleep(&mut self) {
        (**self).prepare_sleep()
    }
}

/// A frame link's counters. The system call counts give the cost per frame
/// (`rx_syscalls / rx_frames`), which differs by link: see each link's notes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames larger than their receive slot (dropped).
    pub rx_truncated: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames the kernel refused (too long or short, interface down): skipped.
    pub tx_errors: u64,
    /// Frames dropped because the link's queue was full.
    pub tx_dropped: u64,
    /// System calls made to receive (including the last one that found nothing) and to
    /// send.
    pub rx_syscalls: u64,
    pub tx_syscalls: u64,
}

impl BackendError {
    /// A frame link's failure: `op` ("create", "receive on", ...) on interface `link`.
    pub(crate) fn link(op: &'static str, link: &str, source: io::Error) -> BackendError {
        BackendError::Link {
            op,
            link: link.to_owned(),
            source,
        }
    }
}

/// A locally administered unicast MAC (first byte `x2`, `x6`, `xA` or `xE`), random: drawn
/// from the OS-seeded keys of std's `RandomState`, so two NICs (two processes, two TAPs)
/// get different ones; the kernel's random TAP MACs are of the same kind.
pub fn random_local_mac() -> [u8; 6] {
    let h = std::hash::RandomState::new().hash_one(std::process::id());
    let b = h.to_le_bytes();
    [(b[0] & 0xfc) | 0x02, b[1], b[2], b[3], b[4], b[5]]
}

/// A socket for interface ioctls, in the calling thread's network namespace.
pub(crate) fn control_socket() -> io::Result<OwnedFd> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    Ok(s.into())
}

/// The MTU and MAC of interface `name`, read with ioctls (which answer in the calling
/// thread's network namespace; /sys/class/net answers in the namespace sysfs was mounted
/// in, which differs for a thread that entered another with setns).
pub(crate) fn if_mtu_mac(name: &str) -> io::Result<(usize, [u8; 6])> {
    let s = control_socket()?;
    Ok((
        super::sys::if_mtu(s.as_fd(), name)?,
        super::sys::if_hwaddr(s.as_fd(), name)?,
    ))
}

/// What a failed send means for the frames of a call.
pub(crate) enum TxFailure {
    /// The queue is full: drop this frame and the rest of the call.
    QueueFull,
    /// The kernel refused this frame (size, interface down): skip it.
    Frame,
    /// The link itself is gone or broken: report it.
    Link,
}

/// Classifies a send error (`write` on a TAP, `sendmmsg` on a packet socket).
pub(crate) fn tx_failure(e: &io::Error) -> TxFailure {
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::ENOBUFS) => TxFailure::QueueFull,
        Some(libc::EBADF | libc::EBADFD | libc::ENODEV | libc::ENXIO) => TxFailure::Link,
        _ => TxFailure::Frame,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_errors_are_classified() {
        let of = |e| tx_failure(&io::Error::from_raw_os_error(e));
        assert!(matches!(of(libc::EAGAIN), TxFailure::QueueFull));
        assert!(matches!(of(libc::ENOBUFS), TxFailure::QueueFull));
        assert!(matches!(of(libc::EINVAL), TxFailure::Frame));
        assert!(matches!(of(libc::EMSGSIZE), TxFailure::Frame));
        assert!(matches!(of(libc::ENXIO), TxFailure::Link));
    }

    #[test]
    fn random_macs_are_local_unicast_and_differ() {
        let a = random_local_mac();
        let b = random_local_mac();
        assert_eq!(a[0] & 0x03, 0x02, "{a:02x?}");
        assert_ne!(a, b);
    }
}
