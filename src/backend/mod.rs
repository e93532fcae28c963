//! I/O adapters: bytes in and out of the machine. They hold file descriptors, never
//! protocol state, and turn I/O failures into [`BackendError`]s naming the address.
//!
//! [`Backend`] is what the driver is generic over: batches of RoCEv2 datagrams (BTH
//! through ICRC) in and out, and a file descriptor to sleep on. [`udp`] is the one link
//! today (TAP and AF_PACKET come with the daemon); [`fault::Lossy`] and
//! [`capture::Capture`] wrap any backend, so no fault or capture code lives in the driver.

pub mod capture;
pub mod fault;
#[allow(unsafe_code)]
mod sys;
pub mod udp;

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

/// One datagram of a transmit batch, in slot `i` of the caller's pool.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub len: usize,
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
    /// Datagrams a fault rule ([`fault::Lossy`]) dropped on transmit.
    pub fault_dropped: u64,
    /// Packets written to a capture ([`capture::Capture`]), and captures that failed
    /// (the file could not be written: the capture stops, the traffic does not).
    pub captured: u64,
    pub capture_errors: u64,
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
    /// What to sleep on until `recv_batch` has something.
    fn rx_fd(&self) -> BorrowedFd<'_>;
    /// The backend's counters, wrappers' included.
    fn stats(&self) -> PortStats;
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
    fn rx_fd(&self) -> BorrowedFd<'_> {
        (**self).rx_fd()
    }
    fn stats(&self) -> PortStats {
        (**self).stats()
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
}
