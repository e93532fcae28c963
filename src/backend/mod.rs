//! I/O adapters: bytes in and out of the machine. They hold file descriptors, never
//! protocol state, and turn I/O failures into [`BackendError`]s naming the address.

#[allow(unsafe_code)]
mod sys;
pub mod udp;

use std::net::SocketAddr;

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
