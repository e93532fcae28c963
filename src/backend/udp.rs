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

use super::sys::{set_recv_tos, RecvMeta, RecvMmsg, SendMmsg};
use super::{Backend, BackendError, Outgoing, PortStats, Received};
use crate::wire::icrc::Ipv4IdRebase;
use crate::wire::{Ecn, ROCE_UDP_PORT};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use rustc_hash::FxHashMap;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::time::Duration;

/// Socket buffer size asked for (the kernel caps it at net.core.*mem_max).
const SOCKET_BUFFER: usize = 4 << 20;
/// Most datagrams one `recvmmsg` call returns.
pub const RX_BATCH: usize = 32;
/// Most datagrams one `sendmmsg` call sends.
pub const TX_BATCH: usize = 32;
/// A receive slot: the largest UDP datagram, which is what GRO can hand over at once.
pub const RX_SLOT: usize = 65536;
/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS`, 64 before Linux 6.9).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most bytes in one GSO send: the UDP length field, less headers, with room to spare.
const GSO_MAX_BYTES: usize = 65_000;

/// A socket that sends from one source port.
struct TxSocket {
    sock: UdpSocket,
    /// Whether UDP GSO works on it; cleared the first time the kernel refuses it.
    gso: bool,
}

/// The UDP backend's counters (the common [`PortStats`]).
pub type UdpStats = PortStats;

/// Waits (of `wait_writable`'s 10 ms) for an unwritable socket before the datagrams at the
/// head of the batch are dropped: a send never blocks the driver for more than a second.
const SEND_STALL_LIMIT: u32 = 100;

pub struct UdpBackend {
    local: SocketAddr,
    rx: UdpSocket,
    /// Sending sockets by source port.
    tx: FxHashMap<u16, TxSocket>,
    /// recvmmsg and sendmmsg headers, allocated once.
    rx_mmsg: RecvMmsg,
    rx_meta: [RecvMeta; RX_BATCH],
    /// How many datagrams the next `recvmmsg` asks for: one after a call found nothing,
    /// `RX_BATCH` after one that found some (see `recv_batch`).
    rx_want: usize,
    tx_mmsg: SendMmsg,
    /// ICRCs of GSO segments moved to the IPv4 IDs the kernel gives them.
    rebase: Ipv4IdRebase,
    pub stats: UdpStats,
    /// Whether new sending sockets try GSO (`--no-gso` clears it).
    gso: bool,
}

fn bind(addr: SocketAddr) -> Result<UdpSocket, BackendError> {
    let err = |source: std::io::Error| {
        // A daemon's port: say to attach to it (the kind stays "in use" for the shared
        // port's election, which reads it).
        let source = match source.kind() {
            ErrorKind::AddrInUse if addr.port() == ROCE_UDP_PORT => {
                super::daemon_path::held_by_daemon(addr.ip()).unwrap_or(source)
            }
            _ => source,
        };
        let daemon = source.get_ref().is_some();
        let hint = match source.kind() {
            _ if daemon => "",
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
    // Past net.core.rmem_max (208 KiB by default) where we may (CAP_NET_ADMIN): a burst of
    // full-MTU packets from a peer that does not pace (rxe) overflows the default.
    if nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBufForce, &SOCKET_BUFFER)
        .is_err()
    {
        let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    }
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.bind(&addr.into()).map_err(err)?;
    s.set_nonblocking(true).map_err(err)?;
    Ok(s.into())
}

/// Datagrams `[start, end)` of a transmit run that go out as one send: one datagram, or
/// a GSO train of equal-length datagrams (the last may be shorter) to one destination.
#[derive(Debug, Clone, Copy, Default)]
struct Train {
    start: usize,
    end: usize,
}

impl Train {
    fn segments(&self) -> usize {
        self.end - self.start
    }
}

/// Errors by which the kernel says it cannot do GSO on this socket or path (no UDP_SEGMENT
/// before Linux 4.18; no checksum offload on the device; a segment over the path MTU):
/// the train is sent again as separate datagrams, and a real problem then shows up as
/// that datagram's own error.
fn gso_refused(e: nix::errno::Errno) -> bool {
    use nix::errno::Errno;
    matches!(
        e,
        Errno::EIO | Errno::EINVAL | Errno::ENOPROTOOPT | Errno::EOPNOTSUPP
    )
}

impl UdpBackend {
    /// Binds `ip`:4791.
    pub fn bind(ip: IpAddr) -> Result<UdpBackend, BackendError> {
        UdpBackend::bind_port(SocketAddr::new(ip, ROCE_UDP_PORT))
    }

    /// Binds `addr`; port 0 takes one the kernel picks (`local` then names it).
    pub fn bind_port(addr: SocketAddr) -> Result<UdpBackend, BackendError> {
        let rx = bind(addr)?;
        let local = rx.local_addr().map_err(|source| BackendError::Bind {
            addr,
            source,
            hint: "",
        })?;
        // GRO: the kernel may hand several datagrams of one flow over as one, with their
        // size (loopback does this for a GSO sender). Without it (before Linux 5.0) every
        // datagram comes alone.
        let _ = setsockopt(&rx, sockopt::UdpGroSegment, &true);
        // Each datagram's ECN bits (congestion notification), from its TOS byte.
        set_recv_tos(rx.as_fd(), local.is_ipv6()).map_err(|source| BackendError::Bind {
            addr: local,
            source,
            hint: "",
        })?;
        Ok(UdpBackend {
            local,
            rx,
            tx: FxHashMap::default(),
            rx_mmsg: RecvMmsg::new(RX_BATCH),
            rx_meta: [RecvMeta::default(); RX_BATCH],
            rx_want: RX_BATCH,
            tx_mmsg: SendMmsg::new(TX_BATCH, TX_BATCH),
            rebase: Ipv4IdRebase::new(),
            stats: UdpStats::default(),
            gso: true,
        })
    }

    /// One datagram per packet from now on (`--no-gso`): for captures on `lo` that show
    /// packets as they are, and to measure what GSO buys.
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
        for s in self.tx.values_mut() {
            s.gso = on;
        }
    }

    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The socket that sends from `src` (created and bound on first use).
    fn tx_socket(&mut self, src: SocketAddr) -> Result<&mut TxSocket, BackendError> {
        if !self.tx.contains_key(&src.port()) {
            let sock = if src.port() == self.local.port() {
                self.rx.try_clone().map_err(|source| BackendError::Bind {
                    addr: src,
                    source,
                    hint: "",
                })?
            } else {
                bind(src)?
            };
            let gso = self.gso;
            self.tx.insert(src.port(), TxSocket { sock, gso });
        }
        Ok(self.tx.get_mut(&src.port()).expect("inserted above"))
    }

    /// Sends `items`, datagram `i` from `pool[i * slot..][..len]`: runs of datagrams
    /// from one source port go to one `sendmmsg`, and within a run, equal-length
    /// datagrams to one destination go as one GSO send (the kernel cuts it up), so a
    /// stream of MTU-sized packets costs one trip through the stack per train rather
    /// than per packet. No allocation. `pool` is mutable because an IPv4 segment's ICRC
    /// is rewritten for the ID the kernel will give it (`Ipv4IdRebase`).
    pub fn send_batch(
        &mut self,
        pool: &mut [u8],
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
            self.send_run(pool, slot, &items[i..j], i)?;
            i = j;
        }
        Ok(())
    }

    /// Cuts a run (one source port, at most `TX_BATCH`) into trains.
    fn trains(items: &[Outgoing], gso: bool, out: &mut [Train; TX_BATCH]) -> usize {
        let mut n = 0;
        for (k, it) in items.iter().enumerate() {
            if n > 0 && gso {
                let t = &mut out[n - 1];
                let first = &items[t.start];
                let last = &items[t.end - 1];
                // Equal lengths, the last may be shorter (UDP_SEGMENT's rule); one
                // destination; within the kernel's limits.
                let joins = it.dst == first.dst
                    && it.ecn == first.ecn
                    && last.len == first.len
                    && it.len <= first.len
                    && t.segments() < GSO_MAX_SEGMENTS
                    && (t.segments() + 1) * first.len <= GSO_MAX_BYTES;
                if joins {
                    t.end = k + 1;
                    continue;
                }
            }
            out[n] = Train {
                start: k,
                end: k + 1,
            };
            n += 1;
        }
        n
    }

    /// Rewrites the ICRCs of an IPv4 train's segments 1.. from ID 0 to their own IDs
    /// (`back`: and back again, for a train that then goes out datagram by datagram).
    fn rebase_train(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        base: usize,
        run: &[Outgoing],
        t: Train,
        back: bool,
    ) {
        if !run[t.start].dst.is_ipv4() {
            return;
        }
        for k in t.start + 1..t.end {
            let at = (base + k) * slot;
            let id = (k - t.start) as u16;
            let (from, to) = if back { (id, 0) } else { (0, id) };
            self.rebase.rebase(&mut pool[at..at + run[k].len], from, to);
        }
    }

    /// Sends one run: datagram `k` of `run` is in slot `base + k`. Single datagrams and
    /// GSO trains go in one `sendmmsg` (more only if the kernel takes part of it).
    fn send_run(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        run: &[Outgoing],
        base: usize,
    ) -> Result<(), BackendError> {
        let src = run[0].src;
        let gso = self.tx_socket(src)?.gso;
        let mut trains = [Train::default(); TX_BATCH];
        let n = Self::trains(run, gso, &mut trains);
        for t in &trains[..n] {
            if t.segments() > 1 {
                self.rebase_train(pool, slot, base, run, *t, false);
            }
        }
        let (done, refused) = {
            let fd = self.tx[&src.port()].sock.as_fd();
            let pool: &[u8] = pool;
            let mut batch = self.tx_mmsg.batch();
            for t in &trains[..n] {
                let parts = (t.start..t.end).map(|k| {
                    let at = (base + k) * slot;
                    &pool[at..at + run[k].len]
                });
                let seg = (t.segments() > 1).then_some(run[t.start].len as u16);
                let first = &run[t.start];
                let staged = batch.push(first.dst, parts, seg, first.ecn.bits());
                debug_assert!(staged, "a run fits one batch");
            }
            let mut done = 0; // trains sent
            let mut refused = false;
            let mut stalls = 0;
            while done < n {
                match batch.send(fd, done) {
                    Ok(r) => {
                        for t in &trains[done..done + r] {
                            if t.segments() > 1 {
                                self.stats.gso_sends += 1;
                                self.stats.gso_segments += t.segments() as u64;
                            }
                        }
                        done += r.max(1);
                        stalls = 0;
                    }
                    Err(e) => match e.raw_os_error().map(Errno::from_raw) {
                        Some(Errno::EAGAIN) if stalls == SEND_STALL_LIMIT => {
                            self.stats.tx_stalled += trains[done].segments() as u64;
                            done += 1;
                            stalls = 0;
                        }
                        Some(Errno::EAGAIN) => {
                            wait_writable(fd);
                            stalls += 1;
                        }
                        Some(Errno::EINTR) => {}
                        Some(e) if trains[done].segments() > 1 && gso_refused(e) => {
                            refused = true;
                            break;
                        }
                        // ICMP port unreachable from an earlier datagram: this one went.
                        Some(Errno::ECONNREFUSED) => done += 1,
                        _ => {
                            return Err(BackendError::Send {
                                src,
                                dst: run[trains[done].start].dst,
                                source: e,
                            })
                        }
                    },
                }
            }
            (done, refused)
        };
        if refused {
            // Undo the ICRC rewrite of what is left and send it datagram by datagram, now
            // and from now on.
            for t in &trains[done..n] {
                if t.segments() > 1 {
                    self.rebase_train(pool, slot, base, run, *t, true);
                }
            }
            self.tx.get_mut(&src.port()).expect("socket").gso = false;
            self.stats.gso_fallbacks += 1;
            let rest = trains[done].start;
            return self.send_run(pool, slot, &run[rest..], base + rest);
        }
        Ok(())
    }

    /// Receives up to `out.len()` (at most `RX_BATCH`) waiting datagrams with one
    /// `recvmmsg`, datagram `i` into `pool[i * RX_SLOT..][..RX_SLOT]`. Returns how many;
    /// no allocation. A datagram the kernel coalesced (GRO) has `segment` set: it holds
    /// datagrams of that length, the last possibly shorter. Datagrams longer than a slot
    /// are dropped and counted (`stats.truncated`).
    ///
    /// After a call that found nothing, the next asks for one datagram: `recvmmsg` tries
    /// the socket again after each datagram it takes, and for a lone datagram (a ping-pong's
    /// message, or its message and ACK coalesced) that second try costs as much as the
    /// first. A batch that fills its request is followed by a full-size one.
    pub fn recv_batch(
        &mut self,
        pool: &mut [u8],
        out: &mut [Received],
    ) -> Result<usize, BackendError> {
        let n = out.len().min(RX_BATCH).min(self.rx_want);
        self.rx_want = RX_BATCH;
        let meta = &mut self.rx_meta;
        let got = match self
            .rx_mmsg
            .recv(self.rx.as_fd(), pool, RX_SLOT, &mut meta[..n])
        {
            Ok(n) => n,
            // Nothing waiting, a signal, or a late ICMP port unreachable for an earlier
            // send: nothing received this time.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::Interrupted | ErrorKind::ConnectionRefused
                ) =>
            {
                0
            }
            Err(source) => {
                return Err(BackendError::Recv {
                    addr: self.local,
                    source,
                })
            }
        };
        if got == 0 {
            self.rx_want = 1;
            return Ok(0);
        }
        let mut k = 0;
        for (i, m) in meta[..got].iter().enumerate() {
            if m.truncated {
                self.stats.truncated += 1;
                continue;
            }
            let Some(src) = m.src else {
                self.stats.no_source += 1;
                continue;
            };
            let segment = m.gro_segment.filter(|&s| s < m.len);
            if let Some(s) = segment {
                self.stats.gro_datagrams += 1;
                self.stats.gro_segments += m.len.div_ceil(s) as u64;
            }
            out[k] = Received {
                src,
                dst: self.local,
                offset: i * RX_SLOT,
                len: m.len,
                segment,
                ipv4_id: None,
                ecn: Ecn::from_tos(m.tos.unwrap_or(0)),
            };
            k += 1;
        }
        Ok(k)
    }

    /// The receiving socket, for waiting on several backends at once.
    pub fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.rx.as_fd()
    }
}

impl Backend for UdpBackend {
    fn local(&self) -> SocketAddr {
        self.local
    }
    fn recv_batch(&mut self, pool: &mut [u8], out: &mut [Received]) -> Result<usize, BackendError> {
        UdpBackend::recv_batch(self, pool, out)
    }
    fn send_batch(
        &mut self,
        pool: &mut [u8],
        slot: usize,
        out: &[Outgoing],
    ) -> Result<(), BackendError> {
        UdpBackend::send_batch(self, pool, slot, out)
    }
    fn rx_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        UdpBackend::rx_fd(self)
    }
    fn stats(&self) -> PortStats {
        self.stats
    }
}

fn wait_writable(fd: std::os::fd::BorrowedFd<'_>) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
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
    let ifs = super::ifaddrs::interfaces();
    let exact = ifs.iter().find(|i| i.has(ip));
    let subnet = || ifs.iter().find(|i| i.addrs.iter().any(|a| a.contains(ip)));
    exact.or_else(subnet)?.mtu()
}
