//! The socket calls roce-emu needs that neither socket2 nor nix offers as it needs them:
//! interface ioctls and an AF_PACKET bind for the frame links, plus
//! three socket options, `recvmmsg` with control messages (`RecvMmsg`) and `sendmmsg` with
//! a control message per message (`SendMmsg`). The only module with `unsafe`: each block
//! says why it holds.

use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is a valid open socket for the duration of the borrow; `value` is a
    // live c_int and the length passed is its size; setsockopt reads nothing else.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: every IPv4 packet carries DF and, from an
/// unconnected socket, IP identification 0 (Linux `ip_select_ident_segs`). The ICRC covers
/// the identification, so the sender must know it: with the default `IP_PMTUDISC_WANT`
/// the kernel marks packets `ignore_df` and picks a hashed ID instead.
pub fn set_ipv4_dont_fragment(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
}

/// `IP_RECVTOS` (IPv4) or `IPV6_RECVTCLASS` (IPv6): each received datagram comes with
/// its TOS byte or traffic class as a control message, whose ECN bits are a congestion
/// notification (IBA A17.9). A UDP socket sees no other part of the IP header.
pub fn set_recv_tos(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        set_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
    } else {
        set_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    }
}

/// `IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO`: no fragmentation of RoCE packets.
pub fn set_ipv6_dont_fragment(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(
        fd,
        libc::IPPROTO_IPV6,
        libc::IPV6_MTU_DISCOVER,
        libc::IPV6_PMTUDISC_DO,
    )
}

/// `UDP_NO_CHECK6_RX`: accept IPv6 UDP datagrams with checksum 0, which rxe sends
/// (RFC 6936 allows it for tunnels; the ICRC protects the payload).
pub fn set_udp6_accept_zero_checksum(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_UDP, libc::UDP_NO_CHECK6_RX, 1)
}

/// A received datagram, as `RecvMmsg::recv` reports it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecvMeta {
    pub len: usize,
    pub src: Option<std::net::SocketAddr>,
    /// Longer than its buffer: the tail is lost.
    pub truncated: bool,
    /// Several datagrams of this length coalesced by GRO (`UDP_GRO` control message).
    pub gro_segment: Option<usize>,
    /// The TOS byte or traffic class (`IP_TOS` / `IPV6_TCLASS` control message), when
    /// the socket asked for it (`set_recv_tos`). GRO never merges datagrams whose TOS
    /// differs (`inet_gro_receive`), so one value holds for every segment.
    pub tos: Option<u8>,
}

/// `recvmmsg` with the `UDP_GRO` control message. nix's `recvmmsg` leaves each header's
/// control length as the kernel wrote it back, so once a datagram arrives without a
/// control message no later one can carry one; here every header is reset before every
/// call. All buffers are allocated once.
pub struct RecvMmsg {
    b: MmsgBuffers,
    /// The pool, slot size and slot count the headers point into (set again when any
    /// changes).
    base: Option<(*mut u8, usize, usize)>,
    /// Headers the last call may have written back into.
    dirty: usize,
}

// SAFETY: the raw pointers in the headers point into the boxed buffers this value owns
// (which move with it) or into the caller's pool, which every call sets again before the
// kernel reads them; nothing is shared with another thread or tied to the creating one.
// Moving the value to another thread (the verbs layer's progress thread) is therefore sound.
unsafe impl Send for MmsgBuffers {}
// SAFETY: as for `MmsgBuffers`: `base` is only compared with the next call's pool, never
// dereferenced outside a call that is handed that pool.
unsafe impl Send for RecvMmsg {}

/// Room for two `int` control messages (CMSG_SPACE(4) is 24 on 64-bit Linux), in u64s:
/// `UDP_GRO` and the TOS on receive, `UDP_SEGMENT` and the TOS on send.
const CMSG_WORDS: usize = 6;
const CMSG_BYTES: usize = CMSG_WORDS * 8;

/// The C structures of an `mmsg` call, allocated once and zeroed: headers, I/O vectors,
/// socket addresses and control buffers (one per header, in u64s for alignment). Boxed, so
/// pointers into them stay valid while the owner lives.
struct MmsgBuffers {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    addrs: Box<[libc::sockaddr_storage]>,
    cmsgs: Box<[[u64; CMSG_WORDS]]>,
}

impl MmsgBuffers {
    /// `msgs` headers (each with an address and a control buffer) and `iovs` I/O vectors.
    fn new(msgs: usize, iovs: usize) -> MmsgBuffers {
        // SAFETY: these are plain C structs for which all-zero bytes is a valid value.
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        MmsgBuffers {
            hdrs: vec![zero_hdr; msgs].into_boxed_slice(),
            iovs: vec![zero_iov; iovs].into_boxed_slice(),
            addrs: vec![zero_addr; msgs].into_boxed_slice(),
            cmsgs: vec![[0u64; CMSG_WORDS]; msgs].into_boxed_slice(),
        }
    }
}

impl RecvMmsg {
    pub fn new(n: usize) -> RecvMmsg {
        RecvMmsg {
            b: MmsgBuffers::new(n, n),
            base: None,
            dirty: 0,
        }
    }

    /// Receives up to `out.len()` datagrams (at most the `n` given to `new`) without
    /// waiting, datagram `i` into `pool[i * slot..][..slot]`. `Ok(0)`: nothing waiting
    /// (EAGAIN).
    pub fn recv(
        &mut self,
        fd: BorrowedFd<'_>,
        pool: &mut [u8],
        slot: usize,
        out: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let n = out
            .len()
            .min(self.b.hdrs.len())
            .min(pool.len() / slot.max(1));
        if n == 0 {
            return Ok(0);
        }
        // Pointers are set once for a pool: every slot it has room for.
        let base = pool.as_mut_ptr();
        let cap = self.b.hdrs.len().min(pool.len() / slot);
        if self.base != Some((base, slot, cap)) {
            self.base = Some((base, slot, cap));
            for i in 0..cap {
                self.b.iovs[i] = libc::iovec {
                    iov_base: pool[i * slot..].as_mut_ptr().cast(),
                    iov_len: slot,
                };
                let h = &mut self.b.hdrs[i].msg_hdr;
                h.msg_name = (&mut self.b.addrs[i] as *mut libc::sockaddr_storage).cast();
                h.msg_iov = &mut self.b.iovs[i];
                h.msg_iovlen = 1;
                h.msg_control = self.b.cmsgs[i].as_mut_ptr().cast();
            }
            self.dirty = cap;
        }
        // What the kernel writes back, in the headers the last call may have written (an
        // idle NIC polls in a loop: resetting all 32 each time showed in profiles).
        for h in &mut self.b.hdrs[..self.dirty.min(cap)] {
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            h.msg_hdr.msg_controllen = CMSG_BYTES as _;
            h.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points at live buffers owned by `self` (boxed, so they do
        // not move) or into `pool`, borrowed mutably for this call, at the address and
        // slot size it has now; with their true lengths; the kernel writes within those
        // lengths only.
        let got = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.b.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        // The kernel wrote the headers it filled and may have touched the one after.
        self.dirty = usize::try_from(got).map_or(1, |g| g + 1).min(n);
        if got < 0 {
            let e = io::Error::last_os_error();
            // Nothing waiting is the common answer to a polling NIC: no error for it.
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(0),
                _ => Err(e),
            };
        }
        let got = got as usize;
        for (i, meta) in out.iter_mut().enumerate().take(got) {
            let h = &self.b.hdrs[i];
            *meta = RecvMeta {
                len: h.msg_len as usize,
                src: sockaddr(&self.b.addrs[i], h.msg_hdr.msg_namelen),
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                gro_segment: gro_segment(&h.msg_hdr),
                tos: tos(&h.msg_hdr),
            };
        }
        Ok(got)
    }
}

/// The `UDP_GRO` segment size among a received header's control messages.
fn gro_segment(m: &libc::msghdr) -> Option<usize> {
    // SAFETY: `m` is a header the kernel filled: its control pointer and (written back)
    // length describe control messages inside our buffer, which the CMSG macros walk
    // without leaving it; the payload of a SOL_UDP/UDP_GRO message is one int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok().filter(|&s| s > 0);
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    None
}

/// The TOS byte (`IP_TOS`, one byte) or traffic class (`IPV6_TCLASS`, an int) among a
/// received header's control messages.
fn tos(m: &libc::msghdr) -> Option<u8> {
    // SAFETY: as in `gro_segment`: the CMSG macros walk control messages the kernel wrote
    // inside our buffer; IP_TOS carries one byte (`ip_cmsg_recv_tos`), IPV6_TCLASS an int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_IP, libc::IP_TOS) => return Some(*libc::CMSG_DATA(c)),
                (libc::SOL_IPV6, libc::IPV6_TCLASS) => {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    return Some(v as u8);
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    None
}

/// The address the kernel wrote in a `sockaddr_storage`.
fn sockaddr(a: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    let len = len as usize;
    match libc::c_int::from(a.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and storage is
            // large and aligned enough for any address type.
            let s = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::from((
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let s = unsafe { &*(a as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::from((
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
            )))
        }
        _ => None,
    }
}

/// `sendmmsg` whose messages each carry their own `UDP_SEGMENT` (GSO) control message or
/// none, so single datagrams and GSO trains of any segment size leave in one call. nix's
/// `sendmmsg` shares one control message across the call and rebuilds every header, its
/// addresses and its I/O vectors per call: a quarter of a ping-pong's user time on the
/// send path. Here the headers are allocated once and a call fills only what it sends.
pub struct SendMmsg {
    b: MmsgBuffers,
}

/// Messages staged for one `sendmmsg`, borrowing their bytes for `'p`.
pub struct SendBatch<'s, 'p> {
    m: &'s mut SendMmsg,
    msgs: usize,
    iovs: usize,
    _bytes: PhantomData<&'p [u8]>,
}

impl SendMmsg {
    /// Room for `msgs` messages of `iovs` datagrams in all.
    pub fn new(msgs: usize, iovs: usize) -> SendMmsg {
        SendMmsg {
            b: MmsgBuffers::new(msgs, iovs),
        }
    }

    /// An empty batch.
    pub fn batch<'s, 'p>(&'s mut self) -> SendBatch<'s, 'p> {
        SendBatch {
            m: self,
            msgs: 0,
            iovs: 0,
            _bytes: PhantomData,
        }
    }
}

impl<'p> SendBatch<'_, 'p> {
    /// Stages one message to `dst`: the datagram `parts` (a GSO train when `segment` is
    /// set: the kernel cuts it into datagrams of that size), sent with TOS byte (IPv4) or
    /// traffic class (IPv6) `tos` when it is not 0, the socket's own. False, and nothing
    /// staged, when the batch is full.
    pub fn push(
        &mut self,
        dst: SocketAddr,
        parts: impl ExactSizeIterator<Item = &'p [u8]>,
        segment: Option<u16>,
        tos: u8,
    ) -> bool {
        self.push_to(Some(dst), parts, segment, tos)
    }

    /// Stages one message on a connected socket (no address): an AF_PACKET frame.
    pub fn push_connected(&mut self, parts: impl ExactSizeIterator<Item = &'p [u8]>) -> bool {
        self.push_to(None, parts, None, 0)
    }

    fn push_to(
        &mut self,
        dst: Option<SocketAddr>,
        parts: impl ExactSizeIterator<Item = &'p [u8]>,
        segment: Option<u16>,
        tos: u8,
    ) -> bool {
        let (i, first) = (self.msgs, self.iovs);
        if i == self.m.b.hdrs.len() || first + parts.len() > self.m.b.iovs.len() {
            return false;
        }
        for (k, p) in parts.enumerate() {
            // The kernel only reads through these pointers (sendmsg).
            self.m.b.iovs[first + k] = libc::iovec {
                iov_base: p.as_ptr().cast_mut().cast(),
                iov_len: p.len(),
            };
            self.iovs += 1;
        }
        let namelen = dst.map_or(0, |dst| write_sockaddr(&mut self.m.b.addrs[i], dst));
        let mut controllen = 0;
        let buf = self.m.b.cmsgs[i].as_mut_ptr().cast::<u8>();
        if let Some(seg) = segment {
            // SAFETY: the buffer is CMSG_BYTES (48), aligned for cmsghdr; CMSG_SPACE(2)
            // (24) fits at its start; the macros compute offsets inside it.
            unsafe {
                let c = buf.cast::<libc::cmsghdr>();
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
            controllen += cmsg_space(2);
        }
        if tos != 0 {
            let (level, name) = match dst {
                Some(SocketAddr::V6(_)) => (libc::SOL_IPV6, libc::IPV6_TCLASS),
                _ => (libc::SOL_IP, libc::IP_TOS),
            };
            debug_assert!(controllen + cmsg_space(4) <= CMSG_BYTES);
            // SAFETY: CMSG_SPACE(4) (24) more bytes fit after what was written (at most
            // 24 of 48), at an offset aligned for cmsghdr (a multiple of 8); IP_TOS and
            // IPV6_TCLASS take an int (`ip_cmsg_send`, `ip6_datagram_send_ctl`).
            unsafe {
                let c = buf.add(controllen).cast::<libc::cmsghdr>();
                (*c).cmsg_level = level;
                (*c).cmsg_type = name;
                (*c).cmsg_len = libc::CMSG_LEN(4) as _;
                std::ptr::write_unaligned(
                    libc::CMSG_DATA(c).cast::<libc::c_int>(),
                    libc::c_int::from(tos),
                );
            }
            controllen += cmsg_space(4);
        }
        let h = &mut self.m.b.hdrs[i];
        h.msg_len = 0;
        h.msg_hdr.msg_name = if dst.is_some() {
            (&mut self.m.b.addrs[i] as *mut libc::sockaddr_storage).cast()
        } else {
            std::ptr::null_mut()
        };
        h.msg_hdr.msg_namelen = namelen;
        h.msg_hdr.msg_iov = &mut self.m.b.iovs[first];
        h.msg_hdr.msg_iovlen = self.iovs - first;
        h.msg_hdr.msg_control = if controllen > 0 {
            self.m.b.cmsgs[i].as_mut_ptr().cast()
        } else {
            std::ptr::null_mut()
        };
        h.msg_hdr.msg_controllen = controllen;
        h.msg_hdr.msg_flags = 0;
        self.msgs += 1;
        true
    }

    /// Sends staged messages `from..` with one `sendmmsg`; returns how many the kernel
    /// took (at least one, or the error of message `from`).
    pub fn send(&mut self, fd: BorrowedFd<'_>, from: usize) -> io::Result<usize> {
        let n = self.msgs.saturating_sub(from);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: headers `from..msgs` were filled by `push`: they point at addresses and
        // control messages owned by `self.m` (boxed, not moved since) and at bytes borrowed
        // for `'p`, which outlives this batch; the lengths are the true ones. sendmmsg
        // writes only each header's msg_len.
        let rc = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                self.m.b.hdrs[from..].as_mut_ptr(),
                n as libc::c_uint,
                // A connected socket whose peer went must give EPIPE, not kill the process.
                libc::MSG_NOSIGNAL,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

/// `CMSG_SPACE(len)`: a control message's room, header and padding included.
fn cmsg_space(len: u32) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    unsafe { libc::CMSG_SPACE(len) as usize }
}

/// Writes `a` as a C socket address; returns its length.
fn write_sockaddr(out: &mut libc::sockaddr_storage, a: SocketAddr) -> libc::socklen_t {
    let p = out as *mut libc::sockaddr_storage;
    match a {
        SocketAddr::V4(a) => {
            let s = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any address type.
            unsafe { p.cast::<libc::sockaddr_in>().write(s) };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let s = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { p.cast::<libc::sockaddr_in6>().write(s) };
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Takes ownership of a descriptor the kernel installed for us in an `SCM_RIGHTS` message
/// (nix hands them over as raw numbers; the daemon's control channel receives them).
pub fn adopt_received_fd(fd: std::os::fd::RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` was just received with SCM_RIGHTS: a new descriptor in our table, open,
    // and referred to by nothing else; the caller adopts each exactly once.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// Takes ownership of a file descriptor a crate hands out only as a raw one (tun-tap's
/// `Iface::into_raw_fd`), so the rest of the code reads, writes and polls it safely.
pub fn own_fd(f: impl std::os::fd::IntoRawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: `into_raw_fd` gives up the only owner of an open descriptor: nothing else
    // closes it, so the OwnedFd is its sole owner from here on.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(f.into_raw_fd()) }
}

/// An `ifreq` naming `name` (at most IFNAMSIZ - 1 bytes), everything else zero.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    // SAFETY: ifreq is a plain C struct (a name and a union of integers, addresses and a
    // pointer that stays null) for which all-zero bytes is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

/// One interface ioctl (`SIOCGIF*`/`SIOCSIF*`) on any socket of the caller's network
/// namespace; returns the request as the kernel left it.
fn if_ioctl(
    sock: BorrowedFd<'_>,
    req: libc::c_ulong,
    mut r: libc::ifreq,
) -> io::Result<libc::ifreq> {
    // SAFETY: `sock` is open for the borrow; every request used here reads and writes one
    // `struct ifreq`, which `r` is, live and writable for the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), req as _, &mut r as *mut libc::ifreq) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `SIOCGIFFLAGS` then `SIOCSIFFLAGS` with IFF_UP: `ip link set NAME up` without a child
/// process (no netlink crate needed for one flag).
pub fn set_if_up(sock: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    let r = if_ioctl(sock, libc::SIOCGIFFLAGS, ifreq(name)?)?;
    // SAFETY: SIOCGIFFLAGS wrote the flags member of the union.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    let mut w = ifreq(name)?;
    w.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    if_ioctl(sock, libc::SIOCSIFFLAGS, w).map(drop)
}

/// `SIOCGIFMTU`: the interface's MTU (IP bytes per frame, Ethernet header excluded).
pub fn if_mtu(sock: BorrowedFd<'_>, name: &str) -> io::Result<usize> {
    let r = if_ioctl(sock, libc::SIOCGIFMTU, ifreq(name)?)?;
    // SAFETY: SIOCGIFMTU wrote the mtu member of the union.
    let mtu = unsafe { r.ifr_ifru.ifru_mtu };
    Ok(usize::try_from(mtu).unwrap_or(0))
}

/// `SIOCGIFHWADDR`: the interface's own MAC (the kernel side's, for a TAP).
pub fn if_hwaddr(sock: BorrowedFd<'_>, name: &str) -> io::Result<[u8; 6]> {
    let r = if_ioctl(sock, libc::SIOCGIFHWADDR, ifreq(name)?)?;
    // SAFETY: SIOCGIFHWADDR wrote the hwaddr member (a sockaddr whose data starts with
    // the address bytes).
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(sa.sa_data) {
        *m = b as u8;
    }
    Ok(mac)
}

/// Binds an AF_PACKET socket to interface `ifindex` for every protocol (ETH_P_ALL): only
/// that interface's frames come in, and sends without an address leave on it. Neither nix
/// nor socket2 builds a `sockaddr_ll` without unsafe code of their own.
pub fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is a plain C struct; all-zero bytes is a valid value.
    let mut a: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    a.sll_family = libc::AF_PACKET as libc::c_ushort;
    a.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    a.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `fd` is open for the borrow; `a` is a live sockaddr_ll and the length passed
    // is its size; bind only reads it.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&a as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20+): a packet socket does not get the frames sent on
/// its interface, its own included, so the L2 layer above never answers itself.
pub fn set_packet_ignore_outgoing(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
}

// ---- descriptors a forked child must not keep -------------------------------------------

/// Slots of [`close_in_forked_children`]: a fixed array of atomics, so the child handler
/// (which runs between `fork` and the child's return, where only async-signal-safe calls
/// are allowed: no lock, no allocation) can read it.
const FORK_SLOTS: usize = 1024;
static FORK_CLOSE: [std::sync::atomic::AtomicI32; FORK_SLOTS] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; FORK_SLOTS];

extern "C" fn close_fork_slots() {
    for s in &FORK_CLOSE {
        let fd = s.swap(-1, std::sync::atomic::Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: close(2) is async-signal-safe; `fd` was registered by its owner as
            // one a child must not hold, and the child's copy is the child's to close.
            unsafe { libc::close(fd) };
        }
    }
}

/// A descriptor that a child forked from this process (without exec) must not keep: the
/// control socket to the daemon (`daemon::client`). Were a child to keep it, the
/// attachment would outlive this process: the daemon would never see it go (no EOF), and
/// its QPN block would stay leased. The child's copies are closed
/// right after `fork` (a `pthread_atfork` handler); what the child inherited of the NIC is
/// dead there anyway (no threads; the drop-in fails its calls with EIO). `false` if the
/// table is full (then the child keeps it, as before).
pub fn close_in_forked_children(fd: std::os::fd::RawFd) -> bool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` as the child handler; it only reads
        // the static table and calls close(2).
        unsafe { libc::pthread_atfork(None, None, Some(close_fork_slots)) };
    });
    FORK_CLOSE.iter().any(|s| {
        s.compare_exchange(
            -1,
            fd,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        )
        .is_ok()
    })
}

/// `fd` is about to be closed by its owner: a later descriptor with its number is not
/// ours to close in a child.
pub fn keep_in_forked_children(fd: std::os::fd::RawFd) {
    for s in &FORK_CLOSE {
        let _ = s.compare_exchange(
            fd,
            -1,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// Detaches the program `cmd` runs from the one that starts it, between fork and exec:
/// a session leader of its own (`setsid(2)`: no controlling terminal, its own process
/// group, so a ^C or a hang-up of the terminal that started the program, `rping` with the
/// drop-in, reaches neither), and every descriptor above stderr marked close-on-exec
/// (`close_range(2)` with `CLOSE_RANGE_CLOEXEC`, Linux 5.11): a C program's descriptors
/// are rarely close-on-exec, and a daemon that kept one (a listening TCP socket, the
/// write end of a pipe someone waits on for EOF) would hold it for its whole life. Used
/// for the daemon started on demand (`daemon::demand`): a library never forks without
/// exec, and this is the one step between the two.
pub fn new_session_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    /// `CLOSE_RANGE_CLOEXEC` (linux/close_range.h).
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // Neither call's failure stops the exec: setsid fails only if the child already
    // leads a process group (a freshly forked child never does); close_range fails on
    // kernels before 5.11 (ENOSYS, EINVAL), and the descriptors are then inherited as
    // before. Marking (not closing) leaves std's own close-on-exec pipe, which reports a
    // failed exec to the parent, working.
    // SAFETY: the closure runs in the forked child before exec and makes two system
    // calls, setsid(2) and close_range(2) through syscall(2), both async-signal-safe
    // (they allocate nothing and take no lock).
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
}
