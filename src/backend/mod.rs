//! I/O adapters: bytes in and out of the machine. They hold file descriptors, never
//! protocol state, and turn I/O failures into [`BackendError`]s naming the address.
//!
//! [`Backend`] is what the driver is generic over: batches of RoCEv2 datagrams (BTH
//! through ICRC) in and out, and a file descriptor to sleep on. The backends: [`udp`] (a
//! UDP socket on port 4791, batched, GSO/GRO), [`shared`] (several NICs of one user on one
//! address without a daemon: one receives for all and forwards by QPN), [`l2::L2Backend`]
//! (a port that owns its frames, `iface`'s L2 over a [`link::FrameLink`]: [`tap`] or
//! [`afpacket`]), and the daemon's rings (`daemon::client`). [`fault`] and [`capture`]
//! wrap any backend, so no fault or capture code lives in the driver; [`pcapng`] writes the
//! daemon's captures. Unsafe system calls no crate wraps are in `sys` alone.

pub mod afpacket;
pub mod capture;
pub mod daemon_path;
#[cfg(test)]
mod fake;
pub mod fault;
mod held;
pub mod ifaddrs;
pub mod l2;
pub mod link;
pub mod pcapng;
pub mod queue;
#[allow(unsafe_code)]
mod sys;
pub use sys::{
    adopt_received_fd, close_in_forked_children, keep_in_forked_children, new_session_on_exec,
};
pub mod tap;
pub mod udp;

pub use afpacket::PacketLink;
pub use link::{FrameLink, FrameRx, LinkStats};
pub use tap::TapLink;

use crate::wire::Ecn;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

/// One datagram of a transmit batch, in slot `i` of the caller's pool.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub len: usize,
    /// The ECN codepoint of the IP header (ECT(0) from a QP with congestion control on,
    /// CE once a congestion point marked it).
    pub ecn: Ecn,
}

/// Counters of what a backend (and its wrappers) dropped or chose. Each backend fills the
/// fields that mean something for it and leaves the rest 0.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PortStats {
    /// Datagrams cut short because they were larger than a receive slot (dropped).
    pub truncated: u64,
    /// Datagrams received from an address that is neither IPv4 nor IPv6 (dropped).
    pub no_source: u64,
    /// GSO sends (each carries two or more datagrams) and the datagrams they carried.
    pub gso_sends: u64,
    pub gso_segments: u64,
    /// Sending sockets on which the kernel refused GSO (no checksum offload on the
    /// device, say): they send one datagram per packet from then on.
    pub gso_fallbacks: u64,
    /// Received datagrams the kernel had coalesced (GRO), and the datagrams inside.
    pub gro_datagrams: u64,
    pub gro_segments: u64,
    /// Datagrams dropped because their socket stayed unwritable too long: a NIC whose
    /// queue is full drops too, and the transport retransmits.
    pub tx_stalled: u64,
    /// Datagrams larger than the port's MTU (a TAP or AF_PACKET link's): dropped, never
    /// sent (a QP's path MTU larger than the link's; logged at warn, rate-limited).
    pub tx_over_mtu: u64,
    /// Datagrams a fault rule ([`fault::Lossy`]) dropped on transmit.
    pub fault_dropped: u64,
    /// Packets written to a capture ([`capture::Capture`]), and captures that failed
    /// (the file could not be written: the capture stops, the traffic does not).
    pub captured: u64,
    pub capture_errors: u64,
    /// Attached to a daemon (`daemon::client`, the port shared by the programs of an
    /// address): packets the daemon handed over through the receive ring, and ring
    /// entries that did not parse (dropped).
    pub share_received: u64,
    pub share_malformed: u64,
}

impl PortStats {
    /// Adds `o`'s counts (totals over several ports).
    pub fn add(&mut self, o: &PortStats) {
        let PortStats {
            truncated,
            no_source,
            gso_sends,
            gso_segments,
            gso_fallbacks,
            gro_datagrams,
            gro_segments,
            tx_stalled,
            tx_over_mtu,
            fault_dropped,
            captured,
            capture_errors,
            share_received,
            share_malformed,
        } = *o;
        self.truncated += truncated;
        self.no_source += no_source;
        self.gso_sends += gso_sends;
        self.gso_segments += gso_segments;
        self.gso_fallbacks += gso_fallbacks;
        self.gro_datagrams += gro_datagrams;
        self.gro_segments += gro_segments;
        self.tx_stalled += tx_stalled;
        self.tx_over_mtu += tx_over_mtu;
        self.fault_dropped += fault_dropped;
        self.captured += captured;
        self.capture_errors += capture_errors;
        self.share_received += share_received;
        self.share_malformed += share_malformed;
    }
}

/// A link that moves RoCEv2 datagrams (BTH through ICRC) in batches.
///
/// `recv_batch` fills `pool` slot by slot (`Received::offset` says where) and never
/// blocks; `send_batch` sends datagram `i` from `pool[i * slot..][..out[i].len]` and may
/// rewrite those bytes (the UDP backend rewrites IPv4 ICRCs for the IDs the kernel gives
/// GSO segments). `rx_fd` becomes readable when `recv_batch` has something.
pub trait Backend: Send {
    /// The address the port receives on (IP and UDP port 4791).
    fn local(&self) -> SocketAddr;
    /// Receives what is waiting, at most `out.len()` datagrams; 0 when nothing is.
    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError>;
    /// Sends a batch (at most [`udp::TX_BATCH`] datagrams).
    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError>;
    /// How many datagrams of up to `largest` bytes `send_batch` takes now without
    /// dropping one for want of room on the way out. A NIC never drops its own packets
    /// because its host queue is full; it stops taking work until there is room, so a
    /// caller sends no more than this and keeps the rest in the engine. Unbounded for a
    /// port that never refuses (a socket's send waits for room: `udp`).
    fn send_room(&mut self, _largest: usize) -> usize {
        usize::MAX
    }
    /// What to sleep on until `recv_batch` has something.
    fn rx_fd(&self) -> BorrowedFd<'_>;
    /// The caller is about to sleep on `rx_fd` (and calls this before every such sleep).
    /// A port whose fd only becomes readable when asked (a daemon's ring, whose producer
    /// rings the doorbell only for a consumer that said it sleeps) asks here, so a polling
    /// caller costs no system call per packet. `true`: packets already wait, do not sleep.
    fn prepare_sleep(&mut self) -> bool {
        false
    }
    /// The backend's counters, wrappers' included.
    fn stats(&self) -> PortStats;
    /// The NIC made its first QP: a port shared with other NICs (a daemon's, the shared
    /// address's) quarantines this NIC's QPN block when it leaves, since peers may now
    /// know its QPNs; a block never used comes back at once. Called before the QPN can
    /// leave the process.
    fn mark_used(&mut self) {}
    /// A packet the port's owner handed from one of its NICs to another without the wire
    /// (the daemon's hairpin between two of its processes): a port that records what it
    /// carries (a capture) records it too, once, as sent. Nothing is sent.
    fn observe_hairpin(&mut self, _src: SocketAddr, _dst: SocketAddr, _ecn: Ecn, _packet: &[u8]) {}
    /// The counters of the L2 in front of a port that owns its frames (ARP, ND, echo,
    /// drops by reason: `iface::IfaceStats`); None for a port without one (UDP).
    fn l2_stats(&self) -> Option<crate::iface::IfaceStats> {
        None
    }
    /// Hands on what the port holds for others before the NIC goes (its program may be
    /// exiting, with no destructor to come): a capture's buffered frames go to the file,
    /// and the capture ends.
    fn flush_held(&mut self) {}
}

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn local(&self) -> SocketAddr {
        (**self).local()
    }
    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        (**self).recv_batch(pool, out)
    }
    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        (**self).send_batch(pool, slot, out)
    }
    fn send_room(&mut self, largest: usize) -> usize {
        (**self).send_room(largest)
    }
    fn rx_fd(&self) -> BorrowedFd<'_> {
        (**self).rx_fd()
    }
    fn prepare_sleep(&mut self) -> bool {
        (**self).prepare_sleep()
    }
    fn stats(&self) -> PortStats {
        (**self).stats()
    }
    fn l2_stats(&self) -> Option<crate::iface::IfaceStats> {
        (**self).l2_stats()
    }
    fn observe_hairpin(&mut self, src: SocketAddr, dst: SocketAddr, ecn: Ecn, packet: &[u8]) {
        (**self).observe_hairpin(src, dst, ecn, packet)
    }
    fn mark_used(&mut self) {
        (**self).mark_used()
    }
    fn flush_held(&mut self) {
        (**self).flush_held()
    }
}

/// Why a backend could not do its job.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Binding failed (address in use, address not on this machine, no permission).
    #[error("cannot bind UDP {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
        hint: &'static str,
    },
    /// Sending failed.
    #[error("cannot send to {dst} from {src}: {source}")]
    Send {
        src: SocketAddr,
        dst: SocketAddr,
        source: std::io::Error,
    },
    /// Receiving failed.
    #[error("cannot receive on {addr}: {source}")]
    Recv {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A frame link ([`link::FrameLink`]) failed: it has an interface, not an address.
    #[error("cannot {op} interface {link}: {source}")]
    Link {
        op: &'static str,
        link: String,
        source: std::io::Error,
    },
}

/// A received datagram's metadata; the bytes are in the caller's buffer at
/// `offset..offset + len`.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub offset: usize,
    pub len: usize,
    /// Several datagrams of this length that the kernel coalesced (GRO); the last may be
    /// shorter.
    pub segment: Option<usize>,
    /// The IPv4 identification, when the backend saw the IP header.
    pub ipv4_id: Option<u16>,
    /// The ECN codepoint of the IP header (from the header, or the UDP socket's
    /// IP_RECVTOS / IPV6_RECVTCLASS control message).
    pub ecn: Ecn,
}
