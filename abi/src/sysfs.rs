//! `ibv_get_sysfs_path` and `ibv_read_sysfs_file`: programs read device facts from sysfs
//! (ibv_devinfo reads `board_id`; rdma-core's helpers read GIDs, P_Keys, node GUIDs).
//! Our devices have no kernel objects, so their files are virtual: served from the device
//! as rxe's would read. Any other path is read from the real file system.

use crate::device::{self, Dev};
use libc::{c_char, c_int};
use std::ffi::CStr;

#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    crate::guard::null_const("ibv_get_sysfs_path", move || c"/sys".as_ptr())
}

fn guid_str(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

fn gid_str(g: [u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// A virtual file of one of our devices (`rel` is the path below its ibdev directory).
fn virtual_file(d: &Dev, rel: &str) -> Option<String> {
    let p = &d.port;
    Some(match rel {
        "node_type" => "1: CA".into(),
        "node_guid" | "sys_image_guid" => guid_str(p.node_guid()),
        "fw_ver" => env!("CARGO_PKG_VERSION").into(),
        "node_desc" => format!("roce-emu {}", p.name),
        "hca_type" => "roce-emu".into(),
        "ports/1/state" => "4: ACTIVE".into(),
        "ports/1/phys_state" => "5: LinkUp".into(),
        "ports/1/link_layer" => "Ethernet".into(),
        "ports/1/rate" => "2.5 Gb/sec (1X SDR)".into(),
        "ports/1/lid" | "ports/1/sm_lid" => "0x0".into(),
        "ports/1/lid_mask_count" | "ports/1/sm_sl" => "0".into(),
        "ports/1/cap_mask" => "0x04010000".into(),
        "ports/1/gids/0" => gid_str(p.gid()),
        "ports/1/gid_attrs/types/0" => "RoCE v2".into(),
        "ports/1/gid_attrs/ndevs/0" => p.ifname.clone()?,
        "ports/1/pkeys/0" => "0xffff".into(),
        _ => return None,
    })
}

/// Reads `dir/file` into `buf` (NUL-terminated, one trailing new line dropped); its length,
/// or -1 when there is no such file.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    crate::guard::minus_one("ibv_read_sysfs_file", move || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return -1;
        }
        // SAFETY: NUL-terminated strings from the program.
        let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let (Ok(dir), Ok(file)) = (dir.to_str(), file.to_str()) else {
            return -1;
        };
        let ours = device::devices().ok().and_then(|devs| {
            devs.iter().find_map(|d| {
                let base = format!("/sys/class/infiniband/{}", d.port.name);
                let path = format!("{dir}/{file}");
                let rel = path.strip_prefix(&base)?.strip_prefix('/')?.to_string();
                Some(virtual_file(d, &rel))
            })
        });
        let text = match ours {
            Some(Some(t)) => t,
            // One of our devices, but a file it does not have (board_id: rxe has none).
            Some(None) => {
                crate::set_errno(libc::ENOENT);
                return -1;
            }
            None => match std::fs::read_to_string(format!("{dir}/{file}")) {
                Ok(t) => t.strip_suffix('\n').unwrap_or(&t).to_string(),
                Err(e) => {
                    crate::set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                    return -1;
                }
            },
        };
        let n = text.len().min(size - 1);
        // SAFETY: `buf` has `size` writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        n as c_int
    })
}
