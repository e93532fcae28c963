//! Protection domains and memory regions. A region is the program's own memory
//! (`Backing::foreign`): a WRITE from the network lands at the program's address, a READ
//! reads there, an atomic is a real 8-byte atomic there.

use crate::ctx::Ctx;
use crate::errno::{refused, set_errno};
use crate::ffi;
use libc::{c_int, c_uint, c_void};
use roce_emu::verbs::{Access, Backing, MemoryRegion, Pd, Rereg};
use std::ptr::null_mut;
use std::sync::Arc;

#[repr(C)]
pub struct PdObj {
    pub pd: ffi::ibv_pd,
    pub id: Pd,
}

impl PdObj {
    /// # Safety
    /// `pd` is a PD we allocated and have not deallocated.
    pub unsafe fn of<'a>(pd: *mut ffi::ibv_pd) -> &'a PdObj {
        // SAFETY: every ibv_pd we hand out is the first field of a #[repr(C)] PdObj.
        unsafe { &*(pd as *const PdObj) }
    }
}

#[repr(C)]
pub struct MrObj {
    pub mr: ffi::ibv_mr,
    pub region: Arc<MemoryRegion>,
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(c: *mut ffi::ibv_context) -> *mut ffi::ibv_pd {
    crate::guard::null("ibv_alloc_pd", move || {
        // SAFETY: a context we opened.
        let ctx = unsafe { Ctx::of(c) };
        let id = match ctx.nic() {
            Ok(nic) => nic.alloc_pd(),
            Err(e) => {
                set_errno(refused("ibv_alloc_pd", &e));
                return null_mut();
            }
        };
        let obj = Box::new(PdObj {
            pd: ffi::ibv_pd {
                context: c,
                handle: id.raw(),
            },
            id,
        });
        Box::into_raw(obj) as *mut ffi::ibv_pd
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ffi::ibv_pd) -> c_int {
    crate::guard::errno("ibv_dealloc_pd", move || {
        // SAFETY: a PD we allocated.
        let obj = unsafe { PdObj::of(pd) };
        let ctx = unsafe { Ctx::of(obj.pd.context) };
        if ctx.inherited() {
            // A forked child (see `Ctx::inherited`): our object goes, the NIC is left.
            // SAFETY: allocated by Box in ibv_alloc_pd; the program stops using it.
            drop(unsafe { Box::from_raw(pd as *mut PdObj) });
            return 0;
        }
        match ctx.nic().and_then(|nic| nic.dealloc_pd(obj.id)) {
            Ok(()) => {
                // SAFETY: allocated by Box in ibv_alloc_pd; the program stops using it.
                drop(unsafe { Box::from_raw(pd as *mut PdObj) });
                0
            }
            Err(e) => refused("ibv_dealloc_pd", &e),
        }
    })
}

/// The access bits the engine knows, or the errno for bits it cannot honour. Optional bits
/// (`IBV_ACCESS_OPTIONAL_RANGE`, e.g. relaxed ordering) may be ignored, as rdma-core says.
fn access_of(access: c_uint) -> Result<Access, c_int> {
    use ffi::ibv_access_flags as f;
    let known = f::IBV_ACCESS_LOCAL_WRITE
        | f::IBV_ACCESS_REMOTE_WRITE
        | f::IBV_ACCESS_REMOTE_READ
        | f::IBV_ACCESS_REMOTE_ATOMIC
        | f::IBV_ACCESS_MW_BIND;
    // IBV_ACCESS_OPTIONAL_RANGE (bits 20..29, verbs.h); relaxed ordering is one.
    let optional = 0x3ff0_0000;
    let ignored = f::IBV_ACCESS_HUGETLB | optional;
    let rest = access & !(known | ignored | f::IBV_ACCESS_ZERO_BASED);
    if rest & f::IBV_ACCESS_ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if rest != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Access::from_bits(access & known).unwrap_or(Access::empty()))
}

/// Whether every byte of `[addr, addr + len)` is mapped readable, and writable if `write`:
/// what the kernel's `ib_umem_get` demands when it pins the pages (with FOLL_WRITE when
/// the access has a write right, so a read-only or PROT_NONE page fails with EFAULT). We
/// cannot pin, but registering memory the NIC could not use would only move the failure
/// to the first packet: refused the same way, at registration, from /proc/self/maps
/// (registration is the slow path).
fn usable(addr: usize, len: usize, write: bool) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        // No procfs (a sandbox): nothing to check against; a fault is caught later.
        return true;
    };
    covered(&maps, addr, end, write)
}

/// Whether the mappings listed in `maps` (the /proc/self/maps format, sorted by address)
/// cover `[at, end)` without a gap, each readable, and writable if `write`.
fn covered(maps: &str, mut at: usize, end: usize, write: bool) -> bool {
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi <= at {
            continue;
        }
        if lo > at {
            return false; // a hole
        }
        let p = perms.as_bytes();
        if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return false;
        }
        at = hi;
        if at >= end {
            return true;
        }
    }
    false
}

/// Registers `[addr, addr + len)` of the program's memory at `iova`.
///
/// # Safety
/// `pd` is ours; the memory is the program's and stays mapped until `ibv_dereg_mr` (the
/// verbs contract; a hole at registration time is EFAULT, checked here).
unsafe fn reg(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ffi::ibv_mr {
    // SAFETY: a PD we allocated.
    let obj = unsafe { PdObj::of(pd) };
    let ctx = unsafe { Ctx::of(obj.pd.context) };
    let acc = match access_of(access) {
        Ok(a) => a,
        Err(e) => {
            set_errno(e);
            return null_mut();
        }
    };
    let iova = if access & ffi::ibv_access_flags::IBV_ACCESS_ZERO_BASED != 0 {
        0
    } else {
        iova
    };
    let write = acc.intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC);
    if len == 0 || addr.is_null() || !usable(addr as usize, len, write) {
        set_errno(if len == 0 { libc::EINVAL } else { libc::EFAULT });
        return null_mut();
    }
    // SAFETY: the program registers memory it owns and keeps mapped until ibv_dereg_mr
    // returns (the verbs contract, Backing::foreign's conditions); dereg_mr runs under the
    // NIC's lock and drops the last engine use before it returns.
    let backing = match unsafe { Backing::foreign(addr as *mut u8, len) } {
        Ok(b) => b,
        Err(e) => {
            set_errno(refused("ibv_reg_mr", &e.into()));
            return null_mut();
        }
    };
    match ctx
        .nic()
        .and_then(|nic| nic.reg_mr_backing(obj.id, iova, backing, acc))
    {
        Ok(region) => {
            let mr = ffi::ibv_mr {
                context: obj.pd.context,
                pd,
                addr,
                length: len,
                handle: region.lkey().0,
                lkey: region.lkey().0,
                rkey: region.rkey().0,
            };
            Box::into_raw(Box::new(MrObj { mr, region })) as *mut ffi::ibv_mr
        }
        Err(e) => {
            set_errno(refused("ibv_reg_mr", &e));
            null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ffi::ibv_mr {
    crate::guard::null("ibv_reg_mr", move || {
        // SAFETY: the program's PD and memory, per the verbs contract.
        unsafe { reg(pd, addr, length, addr as u64, access as c_uint) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ffi::ibv_mr {
    crate::guard::null("ibv_reg_mr_iova", move || {
        // SAFETY: the program's PD and memory, per the verbs contract.
        unsafe { reg(pd, addr, length, iova, access as c_uint) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ffi::ibv_mr {
    crate::guard::null("ibv_reg_mr_iova2", move || {
        // SAFETY: the program's PD and memory, per the verbs contract.
        unsafe { reg(pd, addr, length, iova, access) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ffi::ibv_mr) -> c_int {
    crate::guard::errno("ibv_dereg_mr", move || {
        // SAFETY: a region we registered.
        let obj = unsafe { &*(mr as *const MrObj) };
        let ctx = unsafe { Ctx::of(obj.mr.context) };
        if ctx.inherited() {
            // A forked child (see `Ctx::inherited`): our object goes (the region stays
            // in the parent's copied table, which the child never uses).
            // SAFETY: allocated by Box in reg; the program stops using it.
            drop(unsafe { Box::from_raw(mr as *mut MrObj) });
            return 0;
        }
        match ctx.nic().and_then(|nic| nic.dereg_mr(obj.region.lkey())) {
            Ok(()) => {
                // SAFETY: allocated by Box in reg; the engine holds no use of the region now.
                drop(unsafe { Box::from_raw(mr as *mut MrObj) });
                0
            }
            Err(e) => refused("ibv_dereg_mr", &e),
        }
    })
}

/// `ibv_rereg_mr`: CHANGE_PD, CHANGE_ACCESS and CHANGE_TRANSLATION (new memory at `addr`,
/// its own address as the iova), keeping the L_Key; the R_Key is the L_Key's value with a
/// remote right, else 0 (`mr->lkey`/`mr->rkey` are updated, as `ibv_cmd_rereg_mr` does
/// from the kernel's answer). rxe itself does PD and access only (EOPNOTSUPP for a new
/// translation); real HCAs do all three. Errors as libibverbs and the kernel give them:
/// bad flags, or a translation without address or length, are IBV_REREG_MR_ERR_INPUT
/// (EINVAL); flags 0, bad rights, an unusable new range (EFAULT) or a region with memory
/// windows bound (EINVAL, as rxe's dereg) are IBV_REREG_MR_ERR_CMD.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ffi::ibv_mr,
    flags: c_int,
    pd: *mut ffi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    crate::guard::errno("ibv_rereg_mr", move || {
        use ffi::ibv_rereg_mr_err_code as code;
        use ffi::ibv_rereg_mr_flags as f;
        let input = |e| {
            set_errno(e);
            code::IBV_REREG_MR_ERR_INPUT
        };
        let cmd = |e| {
            set_errno(e);
            code::IBV_REREG_MR_ERR_CMD
        };
        let flags = flags as c_uint;
        if mr.is_null() || flags & !f::IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
            return input(libc::EINVAL);
        }
        let translate = flags & f::IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        if translate && (length == 0 || addr.is_null()) {
            return input(libc::EINVAL);
        }
        if flags == 0 {
            return cmd(libc::EINVAL); // the kernel's ib_uverbs_rereg_mr
        }
        // SAFETY: a region we registered (the verbs contract), not used concurrently by
        // the program while it re-registers it.
        let obj = unsafe { &mut *(mr as *mut MrObj) };
        let ctx = unsafe { Ctx::of(obj.mr.context) };
        let mut r = Rereg::default();
        let mut new_pd = obj.mr.pd;
        if flags & f::IBV_REREG_MR_CHANGE_PD != 0 {
            if pd.is_null() {
                return cmd(libc::EINVAL);
            }
            // SAFETY: a PD of ours (the verbs contract).
            r.pd = Some(unsafe { PdObj::of(pd) }.id);
            new_pd = pd;
        }
        let acc = if flags & f::IBV_REREG_MR_CHANGE_ACCESS != 0 {
            match access_of(access as c_uint) {
                Ok(a) => {
                    r.access = Some(a);
                    a
                }
                Err(e) => return cmd(e),
            }
        } else {
            obj.region.access()
        };
        if translate {
            let write =
                acc.intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC);
            if !usable(addr as usize, length, write) {
                return cmd(libc::EFAULT);
            }
            // SAFETY: as in `reg`: the program's memory, mapped until it deregisters it.
            match unsafe { Backing::foreign(addr as *mut u8, length) } {
                Ok(b) => r.translation = Some((addr as u64, b)),
                Err(e) => return cmd(refused("ibv_rereg_mr", &e.into())),
            }
        }
        match ctx.nic().and_then(|nic| nic.rereg_mr(obj.region.lkey(), r)) {
            Ok(region) => {
                obj.mr.pd = new_pd;
                if translate {
                    obj.mr.addr = addr;
                    obj.mr.length = length;
                }
                obj.mr.lkey = region.lkey().0;
                obj.mr.rkey = region.rkey().0;
                obj.region = region;
                0
            }
            Err(e) => cmd(refused("ibv_rereg_mr", &e)),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ffi::ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ffi::ibv_mr {
    crate::guard::null("ibv_reg_dmabuf_mr", move || {
        set_errno(libc::EOPNOTSUPP);
        null_mut()
    })
}

#[cfg(test)]
mod tests {
    use super::covered;

    const MAPS: &str = "\
1000-3000 rw-p 00000000 00:00 0
3000-4000 r--p 00000000 00:00 0 /lib/x.so
4000-5000 ---p 00000000 00:00 0
6000-7000 rw-s 00000000 00:00 0 [anon]
";

    #[test]
    fn maps_cover_what_the_access_needs() {
        assert!(covered(MAPS, 0x1000, 0x3000, true));
        assert!(covered(MAPS, 0x1800, 0x4000, false));
        assert!(
            !covered(MAPS, 0x1800, 0x4000, true),
            "read-only page, write right"
        );
        assert!(!covered(MAPS, 0x3800, 0x4800, false), "PROT_NONE page");
        assert!(!covered(MAPS, 0x0800, 0x1800, false), "hole before");
        assert!(!covered(MAPS, 0x5800, 0x6800, false), "hole between");
        assert!(covered(MAPS, 0x6000, 0x7000, true));
        assert!(
            !covered(MAPS, 0x6800, 0x7001, false),
            "past the last mapping"
        );
    }
}
