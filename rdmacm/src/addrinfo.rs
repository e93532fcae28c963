//! rdma_getaddrinfo / rdma_freeaddrinfo (`addrinfo.c`): getaddrinfo(3) with the hints
//! turned into socket terms (RC: SOCK_STREAM/TCP, UD: SOCK_DGRAM/UDP, RAI_PASSIVE:
//! AI_PASSIVE, RAI_NUMERICHOST: AI_NUMERICHOST), the first answer as one `rdma_addrinfo`:
//! passive, the address to bind (`ai_src_addr`); active, the one to reach (`ai_dst_addr`,
//! with the hints' source). Everything malloc'd, as librdmacm's, so either library's
//! free works on it.

use crate::errno::err;
use crate::ffi::*;
use crate::guard;
use libc::{c_char, c_int};

/// `malloc` + copy.
fn dup(src: *const u8, len: usize) -> *mut libc::c_void {
    // SAFETY: a fresh allocation of len bytes, filled from src (len readable bytes, the
    // callers').
    unsafe {
        let p = libc::malloc(len.max(1));
        if !p.is_null() && len > 0 {
            std::ptr::copy_nonoverlapping(src, p as *mut u8, len);
        }
        p
    }
}

/// # Safety
/// `node`, `service` NULL or C strings; `hints` NULL or valid; `res` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard::minus_one("rdma_getaddrinfo", || {
        crate::init_logging();
        if (node.is_null() && service.is_null() && hints.is_null()) || res.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        let h: rdma_addrinfo = if hints.is_null() {
            // SAFETY: plain C data.
            unsafe { std::mem::zeroed() }
        } else {
            unsafe { *hints }
        };
        let hflags = h.ai_flags as u32;
        // SAFETY: rdma_addrinfo is plain C data, freed by rdma_freeaddrinfo.
        let rai =
            unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
        if rai.is_null() {
            return err(libc::ENOMEM);
        }
        // SAFETY: just allocated, zeroed.
        let r = unsafe { &mut *rai };
        if !node.is_null() || !service.is_null() {
            // SAFETY: addrinfo is plain C data.
            let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
            if hflags & RAI_PASSIVE != 0 {
                ai.ai_flags |= libc::AI_PASSIVE;
            }
            if hflags & RAI_NUMERICHOST != 0 {
                ai.ai_flags |= libc::AI_NUMERICHOST;
            }
            ai.ai_family = h.ai_family;
            match h.ai_qp_type as u32 {
                ibv_qp_type::IBV_QPT_UD => ai.ai_socktype = libc::SOCK_DGRAM,
                ibv_qp_type::IBV_QPT_RC | ibv_qp_type::IBV_QPT_UC => {
                    ai.ai_socktype = libc::SOCK_STREAM
                }
                _ => {}
            }
            match h.ai_port_space as u32 {
                rdma_port_space::RDMA_PS_TCP => ai.ai_protocol = libc::IPPROTO_TCP,
                rdma_port_space::RDMA_PS_UDP | rdma_port_space::RDMA_PS_IPOIB => {
                    ai.ai_protocol = libc::IPPROTO_UDP
                }
                _ => {}
            }
            let mut out: *mut libc::addrinfo = std::ptr::null_mut();
            // SAFETY: C strings (or NULL) from the caller, our hints and out.
            let ret = unsafe { libc::getaddrinfo(node, service, &ai, &mut out) };
            if ret != 0 || out.is_null() {
                // SAFETY: our allocation.
                unsafe { libc::free(rai as *mut _) };
                // librdmacm returns getaddrinfo's code (negative EAI_*), errno as it left it.
                return ret;
            }
            // SAFETY: getaddrinfo's first answer.
            let a = unsafe { &*out };
            r.ai_qp_type = if h.ai_qp_type != 0 {
                h.ai_qp_type
            } else if a.ai_socktype == libc::SOCK_DGRAM {
                ibv_qp_type::IBV_QPT_UD as c_int
            } else {
                ibv_qp_type::IBV_QPT_RC as c_int
            };
            r.ai_port_space = if h.ai_port_space != 0 {
                h.ai_port_space
            } else if a.ai_protocol == libc::IPPROTO_UDP {
                rdma_port_space::RDMA_PS_UDP as c_int
            } else {
                rdma_port_space::RDMA_PS_TCP as c_int
            };
            r.ai_family = a.ai_family;
            let addr = dup(a.ai_addr as *const u8, a.ai_addrlen as usize) as *mut sockaddr;
            if hflags & RAI_PASSIVE != 0 {
                r.ai_flags = RAI_PASSIVE as c_int;
                r.ai_src_addr = addr;
                r.ai_src_len = a.ai_addrlen;
            } else {
                r.ai_dst_addr = addr;
                r.ai_dst_len = a.ai_addrlen;
            }
            // SAFETY: getaddrinfo's list.
            unsafe { libc::freeaddrinfo(out) };
        } else {
            r.ai_flags = h.ai_flags;
            r.ai_family = h.ai_family;
            r.ai_qp_type = h.ai_qp_type;
            r.ai_port_space = h.ai_port_space;
            if h.ai_dst_len > 0 && !h.ai_dst_addr.is_null() {
                r.ai_dst_addr = dup(h.ai_dst_addr as *const u8, h.ai_dst_len as usize) as *mut _;
                r.ai_dst_len = h.ai_dst_len;
            }
        }
        if r.ai_src_len == 0 && h.ai_src_len > 0 && !h.ai_src_addr.is_null() {
            r.ai_src_addr = dup(h.ai_src_addr as *const u8, h.ai_src_len as usize) as *mut _;
            r.ai_src_len = h.ai_src_len;
        }
        // SAFETY: the caller's promise.
        unsafe { *res = rai };
        0
    })
}

/// # Safety
/// `res` NULL or a list from `rdma_getaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard::value("rdma_freeaddrinfo", || {
        let mut p = res;
        // Bounded by the list the program got (one entry from us).
        while !p.is_null() {
            // SAFETY: an entry of the list; every pointer in it malloc'd (or NULL).
            unsafe {
                let next = (*p).ai_next;
                libc::free((*p).ai_connect);
                libc::free((*p).ai_route);
                libc::free((*p).ai_src_canonname as *mut _);
                libc::free((*p).ai_dst_canonname as *mut _);
                libc::free((*p).ai_src_addr as *mut _);
                libc::free((*p).ai_dst_addr as *mut _);
                libc::free(p as *mut _);
                p = next;
            }
        }
    })
}
