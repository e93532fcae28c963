//! Socket addresses between C (`struct sockaddr*`, the unions of `struct rdma_addr`) and
//! Rust.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Reads a `sockaddr_in`/`sockaddr_in6` (None for NULL or another family).
///
/// # Safety
/// `p` is NULL or points at a socket address of its family's size, as every rdma_* call
/// taking one requires.
pub unsafe fn read(p: *const libc::sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a socket address (the caller's promise); sa_family is its first field.
    let family = unsafe { (*p).sa_family } as i32;
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in; read unaligned, as a program's
            // buffer may be a byte array.
            let s = unsafe { std::ptr::read_unaligned(p as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let s = unsafe { std::ptr::read_unaligned(p as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// A socket address as a `sockaddr_storage` (128 bytes: the unions of `rdma_addr`) and
/// its length.
pub fn storage(a: Option<SocketAddr>) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain bytes; all-zero is a valid (AF_UNSPEC) value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        None => 0,
        Some(SocketAddr::V4(v4)) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage (16 <= 128 bytes, same
            // alignment or smaller).
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        Some(SocketAddr::V6(v6)) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in a sockaddr_storage (28 <= 128 bytes).
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Writes `a` into a 128-byte address union of `struct rdma_addr` (zeroed when None).
///
/// # Safety
/// `dst` points at 128 writable bytes.
pub unsafe fn write_to<T>(dst: *mut T, a: Option<SocketAddr>) {
    debug_assert!(std::mem::size_of::<T>() >= std::mem::size_of::<libc::sockaddr_storage>());
    let (ss, _) = storage(a);
    // SAFETY: the caller's promise: dst holds a sockaddr_storage.
    unsafe { std::ptr::write_unaligned(dst as *mut libc::sockaddr_storage, ss) };
}

/// Whether an address is the wildcard (`INADDR_ANY`, `in6addr_any`).
pub fn is_any(ip: IpAddr) -> bool {
    ip.is_unspecified()
}
