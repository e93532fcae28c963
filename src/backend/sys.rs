//! The socket options roce-emu needs that neither socket2 nor nix wraps. The only module
//! with `unsafe`: each call is a `setsockopt` on a descriptor the caller owns, with a
//! value that lives for the call.

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
