//! The UDP backend (default; works on loopback): one socket bound to the NIC's address on
//! port 4791 receives; packets leave from a socket bound to the QP's UDP source port
//! (the ICRC covers it), created on first use.
//!
//! What it can check: a UDP socket never sees the IP header of what it receives. For
//! IPv6 every field under the ICRC is derivable (traffic class, flow label and hop limit
//! are masked), so the engine checks the ICRC in full. For IPv4 the identification is
//! covered and unknown, so the engine counts such packets as `icrc_unverified` (or drops
//! them, per `EngineConfig::accept_unverified_icrc`). The TAP and AF_PACKET backends see
//! whole frames and check everything.
//!
//! What it sends: unconnected sockets with Linux's default path-MTU discovery for UDP
//! (`IP_PMTUDISC_WANT`) set DF on packets that fit the path MTU and then write IP ID 0,
//! which is what the engine's ICRC assumes (`EngineConfig::tx_ipv4_id`); UDP checksums
//! are computed by the kernel (rxe sends 0; receivers accept both).

use super::{BackendError, Received};
use crate::wire::ROCE_UDP_PORT;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

/// Socket buffer size asked for (the kernel caps it at net.core.*mem_max).
const SOCKET_BUFFER: usize = 4 << 20;

pub struct UdpBackend {
    local: SocketAddr,
    rx: UdpSocket,
    /// Sending sockets by source port.
    tx: HashMap<u16, UdpSocket>,
}

fn bind(addr: SocketAddr) -> Result<UdpSocket, BackendError> {
    let err = |source: std::io::Error| {
        let hint = match source.kind() {
            ErrorKind::AddrInUse => " (another NIC or rxe already uses this address and port)",
            ErrorKind::AddrNotAvailable => " (the address is not configured on this machine)",
            ErrorKind::PermissionDenied => " (permission denied)",
            _ => "",
        };
        BackendError::Bind { addr, source, hint }
    };
    let s =
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
    if addr.is_ipv6() {
        s.set_only_v6(true).map_err(err)?;
    }
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.bind(&addr.into()).map_err(err)?;
    s.set_nonblocking(true).map_err(err)?;
    Ok(s.into())
}

impl UdpBackend {
    /// Binds `ip`:4791.
    pub fn bind(ip: IpAddr) -> Result<UdpBackend, BackendError> {
        let local = SocketAddr::new(ip, ROCE_UDP_PORT);
        Ok(UdpBackend {
            local,
            rx: bind(local)?,
            tx: HashMap::new(),
        })
    }

    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// Sends one RoCE packet from `src` (our address, the QP's source port) to `dst`.
    pub fn send(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let sock = match self.tx.get(&src.port()) {
            Some(s) => s,
            None => {
                let s = if src.port() == ROCE_UDP_PORT {
                    self.rx.try_clone().map_err(|source| BackendError::Bind {
                        addr: src,
                        source,
                        hint: "",
                    })?
                } else {
                    bind(src)?
                };
                self.tx.entry(src.port()).or_insert(s)
            }
        };
        loop {
            match sock.send_to(data, dst) {
                Ok(_) => return Ok(()),
                // A full socket buffer: wait for room (bounded by the kernel draining).
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    wait_writable(sock);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => return Err(BackendError::Send { src, dst, source }),
            }
        }
    }

    /// Receives one datagram into `buf` if one is waiting.
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<Option<Received>, BackendError> {
        loop {
            match self.rx.recv_from(buf) {
                Ok((len, src)) => {
                    return Ok(Some(Received {
                        src,
                        dst: self.local,
                        len,
                        ipv4_id: None,
                    }))
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // ICMP port unreachable from an earlier send surfaces here on Linux;
                // it says nothing about this socket's ability to receive.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(source) => {
                    return Err(BackendError::Recv {
                        addr: self.local,
                        source,
                    })
                }
            }
        }
    }

    /// The receiving socket, for waiting on several backends at once.
    pub fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.rx.as_fd()
    }
}

fn wait_writable(s: &UdpSocket) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(s.as_fd(), PollFlags::POLLOUT)];
    let _ = poll(&mut fds, PollTimeout::from(10u8));
}

/// Waits until one of `fds` is readable or `timeout` passes.
pub fn wait_readable(fds: &[std::os::fd::BorrowedFd<'_>], timeout: Duration) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p: Vec<PollFd<'_>> = fds
        .iter()
        .map(|f| PollFd::new(*f, PollFlags::POLLIN))
        .collect();
    // Round up: waking early only costs a loop; waking late delays a timer.
    let ms = timeout.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16;
    let _ = poll(&mut p, PollTimeout::from(ms));
}
