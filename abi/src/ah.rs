//! Address handles (UD destinations): `ibv_create_ah`, `ibv_destroy_ah`, and the reply
//! path `ibv_init_ah_from_wc` / `ibv_create_ah_from_wc`, which read the 40-byte network
//! header a UD receive leaves at the head of its buffer.
//!
//! On RoCE an address handle is the peer's GID, i.e. its IP address: `ibv_create_ah`
//! without a GRH is EINVAL, as the kernel's `rdma_check_ah_attr` makes it for rxe. The
//! reply path follows libibverbs (`verbs.c`, `ibv_init_ah_from_wc`): the header's version
//! (IPv6 at byte 0, or an IPv4 header at byte 20 with IHL 5 and a valid checksum:
//! `get_grh_header_version`), the peer's address as the destination GID, and our GID
//! the packet was sent to as the source GID index.

use crate::ctx::Ctx;
use crate::errno::set_errno;
use crate::ffi;
use crate::mr::PdObj;
use libc::c_int;
use roce_emu::verbs::AddressVector;
use std::net::{IpAddr, Ipv6Addr};
use std::ptr::null_mut;

/// One address handle: rdma-core's `ibv_ah` first (the program's pointer), then what a
/// send needs and what it was created from.
#[repr(C)]
pub struct Ah {
    pub ah: ffi::ibv_ah,
    /// The destination: the GID's IP address.
    pub dest_ip: IpAddr,
    pub attr: ffi::ibv_ah_attr,
}

impl Ah {
    /// Ours, from an address handle pointer.
    ///
    /// # Safety
    /// `ah` is an address handle we created and have not destroyed.
    pub unsafe fn of<'a>(ah: *mut ffi::ibv_ah) -> &'a Ah {
        // SAFETY: every ibv_ah we hand out is the first field of a #[repr(C)] Ah.
        unsafe { &*(ah as *const Ah) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_ah_attr,
) -> *mut ffi::ibv_ah {
    crate::guard::null("ibv_create_ah", move || {
        if pd.is_null() || attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: a PD we allocated; the program's attributes.
        let (p, a) = unsafe { (PdObj::of(pd), &*attr) };
        let c = p.pd.context;
        // SAFETY: the PD's context, ours.
        let ctx = unsafe { Ctx::of(c) };
        if a.port_num != 1 {
            tracing::debug!("ibv_create_ah: port {}: the device has port 1", a.port_num);
            set_errno(libc::EINVAL);
            return null_mut();
        }
        let av = match av_of(ctx, a) {
            Ok(av) => av,
            Err(why) => {
                // The kernel's rdma_check_ah_attr: a RoCE port needs the GRH.
                tracing::debug!("ibv_create_ah: {why}");
                set_errno(libc::EINVAL);
                return null_mut();
            }
        };
        let obj = Box::new(Ah {
            ah: ffi::ibv_ah {
                context: c,
                pd,
                handle: 0,
            },
            dest_ip: av.dest_ip,
            attr: *a,
        });
        Box::into_raw(obj) as *mut ffi::ibv_ah
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ffi::ibv_ah) -> c_int {
    crate::guard::errno("ibv_destroy_ah", move || {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: allocated by Box in ibv_create_ah; the program stops using it.
        drop(unsafe { Box::from_raw(ah as *mut Ah) });
        0
    })
}

/// The IPv4 header checksum as libibverbs recomputes it (`ipv4_calc_hdr_csum`).
fn ipv4_header_ok(h: &[u8]) -> bool {
    let mut sum = 0u32;
    for w in h[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// The header's IP version, as `get_grh_header_version`: 6 at byte 0, unless byte 20
/// starts an IPv4 header (IHL 5) whose checksum is valid; 4 when byte 0 is not 6 and
/// byte 20 is an IPv4 version nibble; else none (EPROTONOSUPPORT).
pub fn header_version(g: &[u8; 40]) -> Option<u8> {
    let v4 = &g[20..40];
    if g[0] >> 4 != 6 {
        return (v4[0] >> 4 == 4).then_some(4);
    }
    if v4[0] & 0xf != 5 {
        return Some(6);
    }
    Some(if ipv4_header_ok(v4) { 4 } else { 6 })
}

/// The index of `gid` in port 1's GID table (all RoCE v2), through `ibv_query_gid`. The
/// search ends at the first index that fails, as libibverbs' `ibv_find_gid_index` does.
fn gid_index(c: *mut ffi::ibv_context, gid: [u8; 16]) -> Option<u8> {
    for i in 0..=255u8 {
        // SAFETY: plain C data.
        let mut g: ffi::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: a context we opened; `g` is ours.
        if unsafe { crate::device::ibv_query_gid(c, 1, c_int::from(i), &mut g) } != 0 {
            return None;
        }
        // SAFETY: a GID is 16 raw bytes.
        if unsafe { g.raw } == gid {
            return Some(i);
        }
    }
    None
}

/// `ibv_init_ah_from_wc` for a header `g`, without the C pointers.
fn init_from(
    c: *mut ffi::ibv_context,
    port: u8,
    wc: &ffi::ibv_wc,
    g: &[u8; 40],
    a: &mut ffi::ibv_ah_attr,
) -> Result<(), c_int> {
    // SAFETY: plain C data.
    *a = unsafe { std::mem::zeroed() };
    let flow = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
    a.grh.flow_label = flow & 0xfffff;
    a.dlid = wc.slid;
    a.sl = wc.sl;
    a.src_path_bits = wc.dlid_path_bits;
    a.port_num = port;
    if wc.wc_flags & ffi::ibv_wc_flags::IBV_WC_GRH == 0 {
        return Ok(());
    }
    a.is_global = 1;
    match header_version(g) {
        Some(4) => {
            let ip = &g[20..40];
            let saddr = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let daddr = std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            if daddr.is_multicast() {
                return Err(libc::EINVAL);
            }
            let idx = gid_index(c, daddr.to_ipv6_mapped().octets()).ok_or(libc::ENOENT)?;
            a.grh.dgid.raw = saddr.to_ipv6_mapped().octets();
            a.grh.sgid_index = idx;
            a.grh.hop_limit = ip[8];
            a.grh.traffic_class = ip[1];
        }
        Some(_) => {
            let dgid: [u8; 16] = g[24..40].try_into().expect("16 bytes");
            if dgid[0] == 0xff {
                return Err(libc::EINVAL);
            }
            // Next header UDP: RoCE v2, the only GID type here.
            if g[6] != libc::IPPROTO_UDP as u8 {
                return Err(libc::EPROTONOSUPPORT);
            }
            let idx = gid_index(c, dgid).ok_or(libc::ENOENT)?;
            a.grh.dgid.raw = g[8..24].try_into().expect("16 bytes");
            a.grh.sgid_index = idx;
            a.grh.hop_limit = g[7];
            a.grh.traffic_class = (flow >> 20) as u8;
        }
        None => return Err(libc::EPROTONOSUPPORT),
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut ffi::ibv_context,
    port: u8,
    wc: *mut ffi::ibv_wc,
    grh: *mut ffi::ibv_grh,
    attr: *mut ffi::ibv_ah_attr,
) -> c_int {
    crate::guard::minus_one("ibv_init_ah_from_wc", move || {
        if c.is_null() || wc.is_null() || grh.is_null() || attr.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the program's completion, the 40 bytes at the head of its receive
        // buffer, and its out-parameter (the verbs contract of this call).
        let (w, g, a) = unsafe { (&*wc, *(grh as *const [u8; 40]), &mut *attr) };
        match init_from(c, port, w, &g, a) {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ffi::ibv_pd,
    wc: *mut ffi::ibv_wc,
    grh: *mut ffi::ibv_grh,
    port: u8,
) -> *mut ffi::ibv_ah {
    crate::guard::null("ibv_create_ah_from_wc", move || {
        if pd.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: a PD we allocated.
        let c = unsafe { PdObj::of(pd) }.pd.context;
        // SAFETY: plain C data.
        let mut a: ffi::ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the program's pointers, passed on as it gave them.
        if unsafe { ibv_init_ah_from_wc(c, port, wc, grh, &mut a) } != 0 {
            return null_mut();
        }
        // SAFETY: our PD; `a` is ours.
        unsafe { ibv_create_ah(pd, &mut a) }
    })
}

/// The address vector of `ah`: RoCE needs the GRH (the destination GID is the peer's IP
/// address); the source GID index must be the device's own address (`GidTable::source`:
/// its port sends from no other) and of the destination's IP family.
pub(crate) fn av_of(ctx: &Ctx, ah: &ffi::ibv_ah_attr) -> Result<AddressVector, &'static str> {
    if ah.is_global == 0 {
        return Err("RoCE needs a GRH (ah_attr.is_global = 1 and the peer's GID)");
    }
    if let Err(why) = ctx.dev.gids.source(u32::from(ah.grh.sgid_index)) {
        tracing::debug!("{why}");
        // The likeliest mistake of a first hour: `-g 0` from an rxe tutorial, where index
        // 0 is the link-local GID rxe can send from and this device cannot. The program
        // itself says only "Failed to modify QP to RTR", so say why once, even unasked.
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if std::env::var_os("ROCE_EMU_LOG").is_none()
            && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            eprintln!("roce-emu: {why}");
        }
        return Err("sgid_index: not a GID the device sends from (ROCE_EMU_LOG=debug lists them)");
    }
    // SAFETY: a GID is 16 raw bytes, whichever union member was written.
    let raw = unsafe { ah.grh.dgid.raw };
    let v6 = Ipv6Addr::from(raw);
    let dest_ip = match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    };
    if dest_ip.is_ipv4() != ctx.dev.port.ip.is_ipv4() {
        return Err("the destination GID's IP family differs from the source GID's");
    }
    Ok(AddressVector { dest_ip })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn versions_as_libibverbs_reads_them() {
        let mut g = [0u8; 40];
        // IPv4: 20 zero bytes, then a header with a valid checksum.
        let mut ip = [
            0x45u8, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let mut sum = 0u32;
        for w in ip.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        g[20..].copy_from_slice(&ip);
        assert_eq!(header_version(&g), Some(4));
        g[0] = 0x60;
        assert_eq!(header_version(&g), Some(4), "checksum valid: IPv4");
        g[30] ^= 1;
        assert_eq!(header_version(&g), Some(6), "checksum broken: IPv6");
        g[0] = 0;
        g[20] = 0;
        assert_eq!(header_version(&g), None);
    }
}
