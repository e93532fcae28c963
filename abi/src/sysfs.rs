//! `ibv_get_sysfs_path` and `ibv_read_sysfs_file`: programs read device facts from sysfs
//! (ibv_devinfo reads `board_id`; rdma-core's helpers read GIDs, P_Keys, node GUIDs).
//! Our devices have no kernel objects, so their files are virtual: served from the device
//! as rxe's would read. Any other path is read from the real file system.

use crate::dev::{self, Dev};
use crate::device;
use libc::{c_char, c_int};
use roce_emu::verbs::gids;
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

/// A virtual file of one of our devices (`rel` is the path below its ibdev directory), or
/// the errno reading it fails with (ENOENT: no such file).
fn virtual_file(d: &Dev, rel: &str) -> Result<String, c_int> {
    let p = &d.port;
    Ok(match rel {
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
        "ports/1/pkeys/0" => "0xffff".into(),
        _ => return gid_file(d, rel).ok_or(libc::ENOENT)?,
    })
}

/// `ports/1/gids/N`, `ports/1/gid_attrs/types/N` and `ports/1/gid_attrs/ndevs/N` for N
/// below the table's length, as the kernel's (`drivers/infiniband/core/sysfs.c`): an
/// empty slot's GID reads as zeros, its type and netdev fail (EINVAL), which scripts
/// (`read -r t < types/$i || continue`) and UCX take as "no GID here".
fn gid_file(d: &Dev, rel: &str) -> Option<Result<String, c_int>> {
    let (kind, n) = rel.strip_prefix("ports/1/")?.rsplit_once('/')?;
    let n: u32 = n.parse().ok().filter(|&n| n < device::GID_TBL_LEN)?;
    let ip = d.gids.get(n);
    Some(match (kind, ip) {
        ("gids", ip) => Ok(gid_str(ip.map(gids::gid_of).unwrap_or_default())),
        ("gid_attrs/types", Some(_)) => Ok("RoCE v2".into()),
        // No interface (an address configured on none): the kernel's ndev is NULL, EINVAL.
        ("gid_attrs/ndevs", Some(_)) => d.gids.ifname().map(String::from).ok_or(libc::EINVAL),
        ("gid_attrs/types" | "gid_attrs/ndevs", None) => Err(libc::EINVAL),
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
        let ours = dev::devices().ok().and_then(|devs| {
            devs.iter().find_map(|d| {
                let base = format!("/sys/class/infiniband/{}", d.port.name);
                let path = format!("{dir}/{file}");
                let rel = path.strip_prefix(&base)?.strip_prefix('/')?.to_string();
                Some(virtual_file(d, &rel))
            })
        });
        let text = match ours {
            Some(Ok(t)) => t,
            // One of our devices, but a file it does not have (board_id: rxe has none), or
            // an empty GID slot's type (EINVAL).
            Some(Err(e)) => {
                crate::set_errno(e);
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
