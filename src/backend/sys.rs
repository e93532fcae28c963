//! The socket calls roce-emu needs that neither socket2 nor nix offers as it needs them:
//! three socket options, and `recvmmsg` with control messages (`RecvMmsg`). The only
//! module with `unsafe`: each block says why it holds.

use std::io;
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
}

/// `recvmmsg` with the `UDP_GRO` control message. nix's `recvmmsg` leaves each header's
/// control length as the kernel wrote it back, so once a datagram arrives without a
/// control message no later one can carry one; here every header is reset before every
/// call. All buffers are allocated once.
pub struct RecvMmsg {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    addrs: Box<[libc::sockaddr_storage]>,
    /// One control buffer per header, in u64s for alignment.
    cmsgs: Box<[[u64; CMSG_WORDS]]>,
    /// The pool, slot size and slot count the headers point into (set again when any
    /// changes).
    base: Option<(*mut u8, usize, usize)>,
    /// Headers the last call may have written back into.
    dirty: usize,
}

/// Room for one `int` control message (CMSG_SPACE(4) is 24 on 64-bit Linux), in u64s.
const CMSG_WORDS: usize = 4;

impl RecvMmsg {
    pub fn new(n: usize) -> RecvMmsg {
        // SAFETY: these are plain C structs for which all-zero bytes is a valid value.
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        RecvMmsg {
            hdrs: vec![zero_hdr; n].into_boxed_slice(),
            iovs: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0
                };
                n
            ]
            .into_boxed_slice(),
            addrs: vec![zero_addr; n].into_boxed_slice(),
            cmsgs: vec![[0u64; CMSG_WORDS]; n].into_boxed_slice(),
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
        let n = out.len().min(self.hdrs.len()).min(pool.len() / slot.max(1));
        if n == 0 {
            return Ok(0);
        }
        // Pointers are set once for a pool: every slot it has room for.
        let base = pool.as_mut_ptr();
        let cap = self.hdrs.len().min(pool.len() / slot);
        if self.base != Some((base, slot, cap)) {
            self.base = Some((base, slot, cap));
            for i in 0..cap {
                self.iovs[i] = libc::iovec {
                    iov_base: pool[i * slot..].as_mut_ptr().cast(),
                    iov_len: slot,
                };
                let h = &mut self.hdrs[i].msg_hdr;
                h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
                h.msg_iov = &mut self.iovs[i];
                h.msg_iovlen = 1;
                h.msg_control = self.cmsgs[i].as_mut_ptr().cast();
            }
            self.dirty = cap;
        }
        // What the kernel writes back, in the headers the last call may have written (an
        // idle NIC polls in a loop: resetting all 32 each time showed in profiles).
        for h in &mut self.hdrs[..self.dirty.min(cap)] {
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            h.msg_hdr.msg_controllen = std::mem::size_of::<[u64; CMSG_WORDS]>() as _;
            h.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points at live buffers owned by `self` (boxed, so they do
        // not move) or into `pool`, borrowed mutably for this call, at the address and
        // slot size it has now; with their true lengths; the kernel writes within those
        // lengths only.
        let got = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
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
            let h = &self.hdrs[i];
            *meta = RecvMeta {
                len: h.msg_len as usize,
                src: sockaddr(&self.addrs[i], h.msg_hdr.msg_namelen),
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                gro_segment: gro_segment(&h.msg_hdr),
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
