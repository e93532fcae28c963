//! Memory windows: `ibv_alloc_mw`, `ibv_dealloc_mw` and `ibv_bind_mw` (inline in verbs.h,
//! through `ibv_context_ops`); the bind work request's conversion, which `ibv_bind_mw`,
//! `ibv_post_send`'s IBV_WR_BIND_MW and `ibv_wr_bind_mw` share, is `qp::wr::bind_op`.
//!
//! As rxe's provider: `ibv_bind_mw` (type 1) posts a BIND_MW work request on the QP with
//! the window's next key (`ibv_inc_rkey`) and sets `mw->rkey` to it at once (the program
//! undoes it if the completion fails); a type 2 bind posted by the program leaves
//! `mw->rkey` alone, the program tracks the key it chose.

use crate::ctx::Ctx;
use crate::errno::{refused, set_errno};
use crate::ffi;
use crate::mr::PdObj;
use crate::qp::wr::bind_op;
use crate::qp::Qp;
use libc::c_int;
use roce_emu::verbs::{Local, MemoryWindow, MwType, SendFlags, SendWr};
use std::ptr::null_mut;
use std::sync::Arc;

#[repr(C)]
pub struct MwObj {
    pub mw: ffi::ibv_mw,
    pub window: Arc<MemoryWindow>,
}

/// `ibv_context_ops::alloc_mw`.
pub unsafe extern "C" fn alloc_mw(
    pd: *mut ffi::ibv_pd,
    ty: ffi::ibv_mw_type::Type,
) -> *mut ffi::ibv_mw {
    crate::guard::null("alloc_mw", move || {
        let kind = match ty {
            ffi::ibv_mw_type::IBV_MW_TYPE_1 => MwType::Type1,
            ffi::ibv_mw_type::IBV_MW_TYPE_2 => MwType::Type2,
            _ => {
                set_errno(libc::EINVAL);
                return null_mut();
            }
        };
        // SAFETY: a PD we allocated (the verbs contract).
        let obj = unsafe { PdObj::of(pd) };
        let ctx = unsafe { Ctx::of(obj.pd.context) };
        match ctx.nic().and_then(|nic| nic.alloc_mw(obj.id, kind)) {
            Ok(window) => {
                let rkey = window.rkey().0;
                let mw = ffi::ibv_mw {
                    context: obj.pd.context,
                    pd,
                    rkey,
                    handle: rkey >> 8,
                    type_: ty,
                };
                Box::into_raw(Box::new(MwObj { mw, window })) as *mut ffi::ibv_mw
            }
            Err(e) => {
                set_errno(refused("ibv_alloc_mw", &e));
                null_mut()
            }
        }
    })
}

/// `ibv_context_ops::dealloc_mw`.
pub unsafe extern "C" fn dealloc_mw(mw: *mut ffi::ibv_mw) -> c_int {
    crate::guard::errno("dealloc_mw", move || {
        // SAFETY: a window we allocated.
        let obj = unsafe { &*(mw as *const MwObj) };
        let ctx = unsafe { Ctx::of(obj.mw.context) };
        if ctx.inherited() {
            // A forked child (see `Ctx::inherited`): our object goes, the NIC is left.
            // SAFETY: allocated by Box in alloc_mw; the program stops using it.
            drop(unsafe { Box::from_raw(mw as *mut MwObj) });
            return 0;
        }
        match ctx.nic().and_then(|nic| nic.dealloc_mw(&obj.window)) {
            Ok(()) => {
                // SAFETY: allocated by Box in alloc_mw; the program stops using it.
                drop(unsafe { Box::from_raw(mw as *mut MwObj) });
                0
            }
            Err(e) => refused("ibv_dealloc_mw", &e),
        }
    })
}

/// `ibv_inc_rkey` (verbs.h): the next key byte, same index.
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_context_ops::bind_mw`: type 1 windows (verbs.h's `ibv_bind_mw` checked the type,
/// the region's context and PD). As rxe's provider (`rxe_bind_mw`): zero-based is
/// EINVAL, the bind is a work request on `qp`, and `mw->rkey` takes the new key now.
pub unsafe extern "C" fn bind_mw(
    qp: *mut ffi::ibv_qp,
    mw: *mut ffi::ibv_mw,
    bind: *mut ffi::ibv_mw_bind,
) -> c_int {
    crate::guard::errno("bind_mw", move || {
        if qp.is_null() || mw.is_null() || bind.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the program's bind request; its window and QP are ours.
        let b = unsafe { &*bind };
        if b.bind_info.mw_access_flags & ffi::ibv_access_flags::IBV_ACCESS_ZERO_BASED != 0 {
            return libc::EINVAL;
        }
        // SAFETY: as above.
        let rkey = inc_rkey(unsafe { (*mw).rkey });
        let op = match unsafe { bind_op(mw, rkey, &b.bind_info) } {
            Ok(op) => op,
            Err(e) => return e,
        };
        let f = b.send_flags;
        use ffi::ibv_send_flags as s;
        let wr = SendWr {
            wr_id: b.wr_id,
            op,
            local: Local::Sges(&[]),
            flags: SendFlags {
                signaled: f & s::IBV_SEND_SIGNALED != 0,
                fence: f & s::IBV_SEND_FENCE != 0,
                solicited: false,
            },
        };
        // SAFETY: a QP we created.
        let q = unsafe { Qp::of(qp) };
        let _held = q.send.lock();
        match q.ctx().nic().and_then(|nic| nic.post_send(q.qpn, &wr)) {
            Ok(()) => {
                // SAFETY: the program's window (ours), as rxe's provider updates it.
                unsafe { (*mw).rkey = rkey };
                0
            }
            Err(e) => refused("ibv_bind_mw", &e),
        }
    })
}
