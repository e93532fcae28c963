//! fork(2). Nothing here is pinned memory, so fork needs no preparation
//! (`IBV_FORK_UNNEEDED`, as rdma-core says on kernels with copy-on-fork pinning). A child
//! inherits its parent's contexts but not their progress threads: it should open its own
//! devices, as with any RDMA library.

use libc::{c_int, c_void};

/// `IBV_FORK_UNNEEDED` of `enum ibv_fork_status`.
const IBV_FORK_UNNEEDED: c_int = 2;

#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    IBV_FORK_UNNEEDED
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
