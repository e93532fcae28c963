//! The UDP backend (default; works on loopback): one socket bound to the NIC's address on
//! port 4791 receives; packets leave from a socket bound to the QP's UDP source port
//! (the ICRC covers it), created on first use.
//!
//! What it can check: a UDP socket never sees the IP header of what it receives. For
//! IPv6 every field under the ICRC is derivable (traffic class, flow label and hop limit
//! are masked), so the engine checks the ICRC in full. For IPv4 the identification is
//! covered and unknown: the engine solves for it from the ICRC (`wire::icrc::Ipv4IdSolver`,
//! counted as `icrc_id_solved`; a damaged packet passes with probability 2^-16), or drops
//! such packets when `EngineConfig::accept_unverified_icrc` is off. The TAP and AF_PACKET
//! backends see whole frames and check everything.
//!
//! What it sends: every socket sets `IP_PMTUDISC_DO` (`backend::sys`), so IPv4 packets
//! carry DF and, from unconnected sockets, IP identification 0, which is what the engine's
//! ICRC assumes (`EngineConfig::tx_ipv4_id`). Linux's default (`IP_PMTUDISC_WANT`) would
//! pick a hashed ID and every IPv4 ICRC would be wrong for the receiver. IPv6 sockets accept
//! UDP checksum 0 (`UDP_NO_CHECK6_RX`), which rxe sends. Our UDP checksums are computed by
//! the kernel (rxe sends 0; receivers accept both).

use super::{BackendError, Received};
use crate::wire::ROCE_UDP_PORT;
use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Socket buffer size asked for (the kernel caps it at net.core.*mem_max).
const SOCKET_BUFFER: usize = 4 << 20;
/// Most datagrams one `recvmmsg` call returns.
pub const RX_BATCH: usize = 32;
/// Most datagrams one `sendmmsg` call sends.
pub const TX_BATCH: usize = 32;

/// One datagram of a transmit batch, in slot `i` of the caller's pool.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub len: usize,
}

pub struct UdpBackend {
    local: SocketAddr,
    rx: UdpSocket,
    /// Sending sockets by source port.
    tx: HashMap<u16, UdpSocket>,
    /// recvmmsg and sendmmsg headers, allocated once.
    rx_headers: MultiHeaders<SockaddrStorage>,
    tx_headers: MultiHeaders<SockaddrStorage>,
    /// Datagrams cut short because they were larger than a receive slot.
    pub truncated: u64,
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
        super::sys::set_ipv6_dont_fragment(s.as_fd()).map_err(err)?;
        super::sys::set_udp6_accept_zero_checksum(s.as_fd()).map_err(err)?;
    } else {
        super::sys::set_ipv4_dont_fragment(s.as_fd()).map_err(err)?;
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
            rx_headers: MultiHeaders::preallocate(RX_BATCH, None),
            tx_headers: MultiHeaders::preallocate(TX_BATCH, None),
            truncated: 0,
        })
    }

    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The socket that sends from `src` (created and bound on first use).
    fn tx_socket(&mut self, src: SocketAddr) -> Result<&UdpSocket, BackendError> {
        if !self.tx.contains_key(&src.port()) {
            let s = if src.port() == ROCE_UDP_PORT {
                self.rx.try_clone().map_err(|source| BackendError::Bind {
                    addr: src,
                    source,
                    hint: "",
                })?
            } else {
                bind(src)?
            };
            self.tx.insert(src.port(), s);
        }
        Ok(&self.tx[&src.port()])
    }

    /// Sends `items`, datagram `i` from `pool[i * slot..][..len]`, with one `sendmmsg` per
    /// run of datagrams from the same source port. No allocation.
    pub fn send_batch(
        &mut self,
        pool: &[u8],
        slot: usize,
        items: &[Outgoing],
    ) -> Result<(), BackendError> {
        let mut i = 0;
        while i < items.len() {
            let src = items[i].src;
            let mut j = i + 1;
            while j < items.len() && j - i < TX_BATCH && items[j].src == src {
                j += 1;
            }
            let fd = self.tx_socket(src)?.as_raw_fd();
            let mut done = i;
            while done < j {
                let n = j - done;
                let iovs: [[IoSlice<'_>; 1]; TX_BATCH] = core::array::from_fn(|k| {
                    let it = items.get(done + k).filter(|_| k < n);
                    [IoSlice::new(it.map_or(&[][..], |it| {
                        &pool[(done + k) * slot..(done + k) * slot + it.len]
                    }))]
                });
                let addrs: [Option<SockaddrStorage>; TX_BATCH] = core::array::from_fn(|k| {
                    (k < n).then(|| SockaddrStorage::from(items[done + k].dst))
                });
                let sent = sendmmsg(
                    fd,
                    &mut self.tx_headers,
                    iovs[..n].iter(),
                    &addrs[..n],
                    [],
                    MsgFlags::empty(),
                );
                match sent {
                    Ok(r) => done += r.count().max(1),
                    Err(nix::errno::Errno::EAGAIN) => wait_writable(&self.tx[&src.port()]),
                    Err(nix::errno::Errno::EINTR) => {}
                    // ICMP port unreachable from an earlier datagram: this one went.
                    Err(nix::errno::Errno::ECONNREFUSED) => done += 1,
                    Err(e) => {
                        return Err(BackendError::Send {
                            src,
                            dst: items[done].dst,
                            source: std::io::Error::from(e),
                        })
                    }
                }
            }
            i = j;
        }
        Ok(())
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

    /// Receives up to `out.len()` (at most `RX_BATCH`) waiting datagrams with one
    /// `recvmmsg`, datagram `i` into `pool[i * slot..][..slot]`. Returns how many; no
    /// allocation. Datagrams longer than `slot` are dropped and counted (`truncated`).
    pub fn recv_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &mut [Received],
    ) -> Result<usize, BackendError> {
        let n = out.len().min(RX_BATCH).min(pool.len() / slot.max(1));
        if n == 0 {
            return Ok(0);
        }
        // (source, length, truncated) of each datagram, read before the buffers are
        // touched again (recvmmsg borrows them all).
        let mut got = [(None::<SocketAddr>, 0usize, false); RX_BATCH];
        let count = {
            let mut chunks = pool.chunks_exact_mut(slot);
            let mut iovs: [[IoSliceMut<'_>; 1]; RX_BATCH] =
                core::array::from_fn(|_| [IoSliceMut::new(chunks.next().unwrap_or(&mut []))]);
            let res = match recvmmsg(
                self.rx.as_raw_fd(),
                &mut self.rx_headers,
                iovs[..n].iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(r) => r,
                // Nothing waiting, a signal, or a late ICMP port unreachable for an
                // earlier send: nothing received this time.
                Err(
                    nix::errno::Errno::EAGAIN
                    | nix::errno::Errno::EINTR
                    | nix::errno::Errno::ECONNREFUSED,
                ) => return Ok(0),
                Err(e) => {
                    return Err(BackendError::Recv {
                        addr: self.local,
                        source: std::io::Error::from(e),
                    })
                }
            };
            let mut c = 0;
            for m in res {
                got[c] = (
                    m.address.as_ref().and_then(to_socket_addr),
                    m.bytes,
                    m.flags.contains(MsgFlags::MSG_TRUNC),
                );
                c += 1;
            }
            c
        };
        let mut k = 0;
        let mut truncated = 0;
        for (i, &(src, len, trunc)) in got[..count].iter().enumerate() {
            if trunc {
                truncated += 1;
                continue;
            }
            let Some(src) = src else { continue };
            // Datagram i sits in slot i; keep the kept ones in slots 0..k.
            if k != i {
                pool.copy_within(i * slot..i * slot + len, k * slot);
            }
            out[k] = Received {
                src,
                dst: self.local,
                len,
                ipv4_id: None,
            };
            k += 1;
        }
        self.truncated += truncated;
        Ok(k)
    }

    /// The receiving socket, for waiting on several backends at once.
    pub fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.rx.as_fd()
    }
}

fn to_socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from((v4.ip(), v4.port())));
    }
    a.as_sockaddr_in6()
        .map(|v6| SocketAddr::from((v6.ip(), v6.port())))
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

/// The MTU of the network interface that holds `ip` (the one with that address, else the
/// one whose subnet contains it, as 127.0.0.0/8 on `lo`), as `/sys/class/net/IF/mtu`
/// gives it: what a NIC on that interface can send in one frame (rxe derives its port
/// MTU from it).
pub fn link_mtu(ip: IpAddr) -> Option<u32> {
    let mut subnet = None;
    for a in nix::ifaddrs::getifaddrs().ok()? {
        let (Some(addr), mask) = (a.address, a.netmask) else {
            continue;
        };
        let (exact, within) = match ip {
            IpAddr::V4(v4) => {
                let Some(have) = addr.as_sockaddr_in().map(|s| u32::from(s.ip())) else {
                    continue;
                };
                let m = mask
                    .and_then(|m| m.as_sockaddr_in().map(|s| u32::from(s.ip())))
                    .unwrap_or(u32::MAX);
                (have == u32::from(v4), have & m == u32::from(v4) & m)
            }
            IpAddr::V6(v6) => {
                let Some(have) = addr.as_sockaddr_in6().map(|s| u128::from(s.ip())) else {
                    continue;
                };
                let m = mask
                    .and_then(|m| m.as_sockaddr_in6().map(|s| u128::from(s.ip())))
                    .unwrap_or(u128::MAX);
                (have == u128::from(v6), have & m == u128::from(v6) & m)
            }
        };
        if exact {
            return read_mtu(&a.interface_name);
        }
        if within && subnet.is_none() {
            subnet = Some(a.interface_name);
        }
    }
    read_mtu(&subnet?)
}

fn read_mtu(interface: &str) -> Option<u32> {
    let path = format!("/sys/class/net/{interface}/mtu");
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}
