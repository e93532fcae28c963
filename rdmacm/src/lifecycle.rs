//! rdma_create_id, rdma_destroy_id, rdma_bind_addr, rdma_resolve_addr,
//! rdma_resolve_route, rdma_listen, rdma_migrate_id, rdma_set_option and the small
//! readers (ports, device list): `cma.c`'s semantics over roce-emu's manager.

use crate::addr;
use crate::errno::{cm as cm_err, err};
use crate::event::complete;
use crate::ffi::*;
use crate::guard;
use crate::ibv;
use crate::id::{self, CmId};
use crate::teardown::{destroy, migrate};
use libc::{c_int, c_void};
use roce_emu::cm::ucma::{CmOption, Command};
use std::net::SocketAddr;

/// Reads a program's id pointer (EINVAL for NULL).
macro_rules! id_or_einval {
    ($p:expr) => {
        // SAFETY: the program passes an id this library made (rdma_cma.h's contract).
        match unsafe { $crate::id::from_c($p) } {
            Some(i) => i,
            None => return err(libc::EINVAL),
        }
    };
}
pub(crate) use id_or_einval;

/// # Safety
/// `id` is writable; `channel` NULL or a live channel of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    guard::minus_one("rdma_create_id", || {
        let qp_type = if ps == rdma_port_space::RDMA_PS_IPOIB || ps == rdma_port_space::RDMA_PS_UDP
        {
            ibv_qp_type::IBV_QPT_UD
        } else {
            ibv_qp_type::IBV_QPT_RC
        };
        // SAFETY: the caller's promise.
        unsafe { create_id2(channel, id, context, ps, qp_type) }
    })
}

/// `rdma_create_id2`: also `rdma_create_ep`'s.
///
/// # Safety
/// As [`rdma_create_id`].
pub unsafe fn create_id2(
    channel: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> c_int {
    crate::init_logging();
    if out.is_null() {
        return err(libc::EINVAL);
    }
    if roce_emu::cm::ucma::PortSpace::from_raw(ps).is_none() {
        tracing::debug!("rdma_create_id: port space {ps:#x} unknown");
        return err(libc::EINVAL);
    }
    if let Err(e) = ibv::devs() {
        return cm_err("rdma_create_id", &e);
    }
    match id::alloc(channel, context, ps, qp_type) {
        Ok(p) => {
            // SAFETY: the caller's promise; p was just made.
            unsafe { *out = (*p).c() };
            0
        }
        Err(e) => err(e),
    }
}

/// # Safety
/// `id` is a live id of this library, not used after.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard::minus_one("rdma_destroy_id", || {
        // NULL, or an id already destroyed (perftest destroys its id twice after a
        // failed connect): EINVAL, not a second free.
        // SAFETY: from_c reads nothing of a pointer it does not know.
        if unsafe { crate::id::from_c(id) }.is_none() {
            return err(libc::EINVAL);
        }
        destroy(id as *mut CmId)
    })
}

/// # Safety
/// `id` live, `addr` a socket address.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, a: *mut libc::sockaddr) -> c_int {
    guard::minus_one("rdma_bind_addr", || {
        let id = id_or_einval!(id);
        // SAFETY: the caller's promise.
        match unsafe { addr::read(a) } {
            Some(a) => id::bind(id, a),
            None => err(libc::EINVAL),
        }
    })
}

/// # Safety
/// `id` live; `src` NULL or a socket address; `dst` a socket address.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    guard::minus_one("rdma_resolve_addr", || {
        let id = id_or_einval!(id);
        // SAFETY: the caller's promise.
        let (src, dst) = unsafe { (addr::read(src), addr::read(dst)) };
        let Some(dst) = dst else {
            return err(libc::EINVAL);
        };
        resolve_addr(id, src, dst, timeout_ms)
    })
}

pub fn resolve_addr(
    id: &CmId,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout_ms: c_int,
) -> c_int {
    let (src, dst) = (src.map(id::unloop), id::unloop(dst));
    let h = match id::settle(id, src, dst) {
        Ok(h) => h,
        Err(e) => return cm_err("rdma_resolve_addr", &e),
    };
    let cmd = Command::ResolveAddr {
        id: h.num,
        src,
        dst,
        timeout_ms: timeout_ms.max(0) as u32,
    };
    if let Err(e) = h.command(cmd) {
        return cm_err("rdma_resolve_addr", &e);
    }
    // SAFETY: the id's own C struct.
    unsafe { addr::write_to(&mut (*id.c()).route.addr.__bindgen_anon_2, Some(dst)) };
    complete(id)
}

/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    guard::minus_one("rdma_resolve_route", || {
        let id = id_or_einval!(id);
        let h = match id.handle() {
            Ok(h) => h,
            Err(e) => return err(e),
        };
        let cmd = Command::ResolveRoute {
            id: h.num,
            timeout_ms: timeout_ms.max(0) as u32,
        };
        if let Err(e) = h.command(cmd) {
            return cm_err("rdma_resolve_route", &e);
        }
        complete(id)
    })
}

/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard::minus_one("rdma_listen", || {
        let id = id_or_einval!(id);
        // An unbound id listens on every address (the kernel's cma_bind_any).
        if id.lock().handles.is_empty() {
            let any: SocketAddr = "0.0.0.0:0".parse().expect("literal");
            let r = id::bind(id, any);
            if r != 0 {
                return r;
            }
        }
        for h in id.handles() {
            let cmd = Command::Listen {
                id: h.num,
                backlog: backlog.max(0) as u32,
            };
            if let Err(e) = h.command(cmd) {
                return cm_err("rdma_listen", &e);
            }
        }
        0
    })
}

/// # Safety
/// `id` live; `channel` NULL or a live channel of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    guard::minus_one("rdma_migrate_id", || {
        let id = id_or_einval!(id);
        match migrate(id, channel) {
            Ok(()) => 0,
            Err(e) => err(e),
        }
    })
}

/// # Safety
/// `id` live; `optval` `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    guard::minus_one("rdma_set_option", || {
        let id = id_or_einval!(id);
        if optval.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promise: optlen readable bytes.
        let val = unsafe { std::slice::from_raw_parts(optval as *const u8, optlen) };
        let int = || -> Option<i32> { Some(i32::from_ne_bytes(val.get(..4)?.try_into().ok()?)) };
        let byte = || val.first().copied();
        let option = match (level as u32, optname as u32) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => byte().map(CmOption::Tos),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                int().map(|v| CmOption::ReuseAddr(v != 0))
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => int().map(|v| CmOption::AfOnly(v != 0)),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => byte().map(CmOption::AckTimeout),
            // An explicit IB path record: RoCE resolves its own route.
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => return err(libc::EOPNOTSUPP),
            _ => return err(libc::ENOSYS),
        };
        let Some(option) = option else {
            return err(libc::EINVAL);
        };
        let hs = id.handles();
        if hs.is_empty() {
            id.lock().options.push(option);
        }
        for h in hs {
            if let Err(e) = h.command(Command::SetOption { id: h.num, option }) {
                return cm_err("rdma_set_option", &e);
            }
        }
        0
    })
}

/// The port of a `sockaddr_storage` union, in network order (`ucma_get_port`).
fn port_of<T>(u: *const T) -> u16 {
    // SAFETY: the union is a 128-byte storage of the id.
    match unsafe { addr::read(u as *const libc::sockaddr) } {
        Some(a) => a.port().to_be(),
        None => 0,
    }
}

/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard::value("rdma_get_src_port", || {
        if id.is_null() {
            return 0;
        }
        // SAFETY: the caller's promise.
        port_of(unsafe { &(*id).route.addr.__bindgen_anon_1 })
    })
}

/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard::value("rdma_get_dst_port", || {
        if id.is_null() {
            return 0;
        }
        // SAFETY: the caller's promise.
        port_of(unsafe { &(*id).route.addr.__bindgen_anon_2 })
    })
}

/// Every device's context (opened), NULL-terminated, malloc'd (`rdma_get_devices`).
///
/// # Safety
/// `num` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    guard::null("rdma_get_devices", || {
        crate::init_logging();
        let ctxs: Vec<*mut ibv_context> = match ibv::devs() {
            Ok(d) => d
                .list
                .iter()
                .filter_map(|d| d.open().ok())
                .map(|o| o.ctx)
                .collect(),
            Err(_) => Vec::new(),
        };
        let n = ctxs.len();
        // SAFETY: malloc of n+1 pointers; freed by rdma_free_devices with free().
        let out = unsafe { libc::malloc((n + 1) * std::mem::size_of::<usize>()) }
            as *mut *mut ibv_context;
        if out.is_null() {
            if !num.is_null() {
                // SAFETY: the caller's promise.
                unsafe { *num = 0 };
            }
            err(libc::ENOMEM);
            return out;
        }
        for (i, c) in ctxs.iter().enumerate() {
            // SAFETY: i < n + 1 slots.
            unsafe { *out.add(i) = *c };
        }
        // SAFETY: the last slot.
        unsafe { *out.add(n) = std::ptr::null_mut() };
        if !num.is_null() {
            // SAFETY: the caller's promise.
            unsafe { *num = n as c_int };
        }
        out
    })
}

/// # Safety
/// `list` came from `rdma_get_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    guard::value("rdma_free_devices", || {
        // SAFETY: malloc'd by rdma_get_devices (the contexts stay open, as librdmacm's).
        unsafe { libc::free(list as *mut c_void) }
    })
}
