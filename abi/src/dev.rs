//! The device list (`Dev`: rdma-core's `ibv_device` with our port behind it), built once
//! per process from the configuration: a leaf below `device` (the `ibv_*` calls on
//! devices) and `ctx`.

use crate::ffi;
use libc::{c_char, c_int};
use roce_emu::verbs::discover::{self, PortConfig};
use roce_emu::verbs::gids::GidTable;
use std::sync::{Arc, OnceLock};

/// A device: rdma-core's `ibv_device`, then where a `verbs_device` has its ops pointer
/// (NULL: Debian's libmlx5 and libefa decide "not one of ours" from it), then ours.
#[repr(C)]
pub struct Dev {
    pub dev: ffi::ibv_device,
    verbs_device_tail: [usize; 8],
    pub port: PortConfig,
    pub index: c_int,
    pub ifindex: u32,
    /// Its GID table, rxe's for the same interface (`verbs::gids`); its contexts' progress
    /// threads follow the interface's addresses into it.
    pub gids: Arc<GidTable>,
}

// SAFETY: the raw pointers inside `ibv_device` are NULL (`_ops`); the rest is plain data,
// never written after the list is built.
unsafe impl Send for Dev {}
unsafe impl Sync for Dev {}

pub(crate) fn copy_cstr(dst: &mut [c_char], s: &str) {
    let room = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

/// Every device, built once per process (the configuration is read once, as rdma-core
/// reads sysfs once).
pub fn devices() -> Result<&'static [Dev], &'static str> {
    static DEVS: OnceLock<Result<Vec<Dev>, String>> = OnceLock::new();
    DEVS.get_or_init(|| {
        crate::init_logging();
        let ports = discover::devices().map_err(|e| e.to_string())?;
        Ok(ports
            .into_iter()
            .enumerate()
            .map(|(i, port)| {
                // SAFETY: ibv_device is plain C data; all zeroes is its empty value.
                let mut dev: ffi::ibv_device = unsafe { std::mem::zeroed() };
                dev.node_type = ffi::ibv_node_type::IBV_NODE_CA;
                dev.transport_type = ffi::ibv_transport_type::IBV_TRANSPORT_IB;
                copy_cstr(&mut dev.name, &port.name);
                copy_cstr(&mut dev.dev_name, &format!("uverbs{i}"));
                copy_cstr(
                    &mut dev.dev_path,
                    &format!("/sys/class/infiniband_verbs/uverbs{i}"),
                );
                copy_cstr(
                    &mut dev.ibdev_path,
                    &format!("/sys/class/infiniband/{}", port.name),
                );
                let ifindex = port
                    .ifname
                    .as_deref()
                    .and_then(|n| nix::net::if_::if_nametoindex(n).ok())
                    .unwrap_or(0);
                Dev {
                    dev,
                    verbs_device_tail: [0; 8],
                    gids: Arc::new(port.gid_table()),
                    port,
                    index: i as c_int,
                    ifindex,
                }
            })
            .collect())
    })
    .as_ref()
    .map(Vec::as_slice)
    .map_err(String::as_str)
}

/// Ours, from a device pointer we handed out.
///
/// # Safety
/// `d` is NULL or a device from our list.
pub unsafe fn dev<'a>(d: *mut ffi::ibv_device) -> Option<&'a Dev> {
    // SAFETY: `ibv_device` is the first field of the `#[repr(C)]` Dev; the program passes
    // back a pointer from our list (devices live as long as the process).
    unsafe { (d as *const Dev).as_ref() }
}
