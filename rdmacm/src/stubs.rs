//! What this library does not do: the rsocket API (`r*`: sockets over RDMA; -1 with
//! errno ENOSYS, except `rpoll`/`rselect`, which on ordinary descriptors are `poll` and
//! `select`, as rsocket's own are for non-rsockets: rping and ucmatose poll the event
//! channel's fd with `rpoll`), multicast (EOPNOTSUPP) and ECE (none negotiated: a
//! remote ECE of zeros, a local one accepted and not sent).

use crate::errno::{err, set_errno};
use crate::guard;
use libc::{c_int, c_void};

/// int-returning rsocket calls: -1, ENOSYS.
macro_rules! enosys_int {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            guard::minus_one(stringify!($name), || err(libc::ENOSYS))
        }
    )*};
}

/// ssize_t-returning rsocket calls (the whole register: -1, not 0xffffffff).
macro_rules! enosys_ssize {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> isize {
            guard::or(stringify!($name), -1, || {
                set_errno(libc::ENOSYS);
                -1
            })
        }
    )*};
}

enosys_int!(
    rsocket,
    rbind,
    rlisten,
    raccept,
    rconnect,
    rshutdown,
    rclose,
    rgetpeername,
    rgetsockname,
    rsetsockopt,
    rgetsockopt,
    rfcntl,
    riounmap,
);
enosys_ssize!(rrecv, rrecvfrom, rrecvmsg, rsend, rsendto, rsendmsg, rread, rreadv, rwrite, rwritev);

/// `riomap` returns an `off_t` offset: -1.
#[no_mangle]
pub extern "C" fn riomap() -> i64 {
    guard::or("riomap", -1, || {
        set_errno(libc::ENOSYS);
        -1
    })
}

/// `riowrite` returns a `size_t` count, -1 on failure.
#[no_mangle]
pub extern "C" fn riowrite() -> usize {
    guard::or("riowrite", usize::MAX, || {
        set_errno(libc::ENOSYS);
        usize::MAX
    })
}

/// `rpoll` on ordinary descriptors: `poll`.
///
/// # Safety
/// `fds` points at `nfds` pollfd entries (poll(2)'s contract).
#[no_mangle]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    guard::minus_one("rpoll", || {
        // SAFETY: the caller's promise, as poll(2)'s.
        unsafe { libc::poll(fds, nfds, timeout) }
    })
}

/// `rselect` on ordinary descriptors: `select`.
///
/// # Safety
/// select(2)'s contract.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    guard::minus_one("rselect", || {
        // SAFETY: the caller's promise, as select(2)'s.
        unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
    })
}

/// Multicast (rdma_join_multicast, _ex, rdma_leave_multicast): not supported yet.
#[no_mangle]
pub extern "C" fn rdma_join_multicast() -> c_int {
    guard::minus_one("rdma_join_multicast", || err(libc::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn rdma_join_multicast_ex() -> c_int {
    guard::minus_one("rdma_join_multicast_ex", || err(libc::EOPNOTSUPP))
}

#[no_mangle]
pub extern "C" fn rdma_leave_multicast() -> c_int {
    guard::minus_one("rdma_leave_multicast", || err(libc::EOPNOTSUPP))
}

/// `struct ibv_ece` (vendor_id, options, comp_mask: three u32).
#[repr(C)]
pub struct Ece {
    vendor_id: u32,
    options: u32,
    comp_mask: u32,
}

/// No ECE is negotiated: the peer's reads as zeros.
///
/// # Safety
/// `id` live; `ece` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut c_void, ece: *mut Ece) -> c_int {
    guard::minus_one("rdma_get_remote_ece", || {
        if id.is_null() || ece.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        unsafe {
            *ece = Ece {
                vendor_id: 0,
                options: 0,
                comp_mask: 0,
            }
        };
        0
    })
}

/// Taken and not sent (no ECE on this NIC).
///
/// # Safety
/// Pointers checked for NULL only.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut c_void, ece: *mut Ece) -> c_int {
    guard::minus_one("rdma_set_local_ece", || {
        if id.is_null() || ece.is_null() {
            return err(libc::EINVAL);
        }
        0
    })
}
