//! Shared receive queues: `ibv_create_srq`, `ibv_create_srq_ex` (through
//! `verbs_context::create_srq_ex`; rdma-core's inline wrapper calls `ibv_create_srq` itself
//! for a basic SRQ), `ibv_modify_srq`, `ibv_query_srq`, `ibv_destroy_srq` and
//! `ibv_post_srq_recv` (inline, through `ibv_context::ops`), over the verbs layer's SRQs.
//! A QP is put on one with `ibv_qp_init_attr.srq` (qp.rs). The limit and Last WQE
//! Reached events reach the program through `ibv_get_async_event` (context.rs), naming
//! the SRQ (`element.srq`) or the QP (`element.qp`).
//!
//! XRC SRQs (`IBV_SRQT_XRC`, with an XRC domain) and tag matching are EOPNOTSUPP: there
//! is no XRC domain here (`ibv_open_xrcd` is EOPNOTSUPP).

use crate::ctx::Ctx;
use crate::errno::{refused, set_errno};
use crate::ffi;
use crate::mr::PdObj;
use crate::sge::{sges, MAX_SGE};
use libc::c_int;
use roce_emu::verbs::{RecvWr, Sge, SrqInit};
use std::ptr::null_mut;

/// One SRQ: the `ibv_srq` the program holds, first, then our handle.
#[repr(C)]
pub struct Srq {
    pub srq: ffi::ibv_srq,
    pub id: u32,
}

impl Srq {
    /// # Safety
    /// `srq` is an SRQ we created and have not destroyed.
    pub unsafe fn of<'a>(srq: *mut ffi::ibv_srq) -> &'a Srq {
        // SAFETY: every ibv_srq we hand out is the first field of a #[repr(C)] Srq; only
        // shared references are made (nothing of ours in it changes after creation).
        unsafe { &*(srq as *const Srq) }
    }

    fn ctx(&self) -> &Ctx {
        // SAFETY: `context` is written once, at creation; the context outlives its SRQs.
        unsafe { Ctx::of(self.srq.context) }
    }
}

/// Creates a basic SRQ on `pd`; `attr`'s sizes are updated to those granted.
///
/// # Safety
/// `pd` is a PD we allocated.
unsafe fn create(
    pd: *mut ffi::ibv_pd,
    srq_context: *mut libc::c_void,
    attr: &mut ffi::ibv_srq_attr,
) -> Result<*mut ffi::ibv_srq, c_int> {
    if pd.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a PD we allocated (its context is ours).
    let pd_obj = unsafe { PdObj::of(pd) };
    let c = pd_obj.pd.context;
    // SAFETY: a context we opened.
    let ctx = unsafe { Ctx::of(c) };
    // The drop-in's receive WRs carry at most MAX_SGE SGEs (sge.rs): more is EINVAL, as
    // rxe's max_srq_sge (`rxe_srq_chk_init`).
    if attr.max_sge as usize > MAX_SGE {
        return Err(libc::EINVAL);
    }
    let init = SrqInit {
        pd: pd_obj.id,
        max_wr: attr.max_wr as usize,
        max_sge: attr.max_sge as usize,
        limit: attr.srq_limit,
    };
    let id = ctx
        .nic()
        .and_then(|nic| nic.create_srq(&init))
        .map_err(|e| refused("ibv_create_srq", &e))?;
    let granted = ctx
        .nic()
        .and_then(|nic| nic.query_srq(id))
        .map_err(|e| refused("ibv_create_srq", &e))?;
    attr.max_wr = granted.max_wr as u32;
    attr.max_sge = granted.max_sge as u32;
    // SAFETY: plain C data (pthread objects zero-initialised as glibc's initialisers).
    let mut s: ffi::ibv_srq = unsafe { std::mem::zeroed() };
    s.context = c;
    s.srq_context = srq_context;
    s.pd = pd;
    s.handle = id;
    let obj = Box::into_raw(Box::new(Srq { srq: s, id }));
    ctx.srqs.lock().unwrap().insert(id, obj as usize);
    Ok(obj as *mut ffi::ibv_srq)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_srq_init_attr,
) -> *mut ffi::ibv_srq {
    crate::guard::null("ibv_create_srq", move || {
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the program's attributes (their sizes are written back); a PD of ours.
        let a = unsafe { &mut *attr };
        match unsafe { create(pd, a.srq_context, &mut a.attr) } {
            Ok(s) => s,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

/// `verbs_context::create_srq_ex`: a basic SRQ (the inline `ibv_create_srq_ex` gets here
/// only when the mask names more than a PD and a type, e.g. a CQ or an XRC domain).
pub unsafe extern "C" fn create_srq_ex(
    _c: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_srq_init_attr_ex,
) -> *mut ffi::ibv_srq {
    crate::guard::null("create_srq_ex", move || {
        use ffi::ibv_srq_init_attr_mask as m;
        if attr.is_null() {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        // SAFETY: the program's attributes.
        let a = unsafe { &mut *attr };
        let known = m::IBV_SRQ_INIT_ATTR_PD | m::IBV_SRQ_INIT_ATTR_TYPE | m::IBV_SRQ_INIT_ATTR_CQ;
        let basic = a.comp_mask & m::IBV_SRQ_INIT_ATTR_TYPE == 0
            || a.srq_type == ffi::ibv_srq_type::IBV_SRQT_BASIC;
        if a.comp_mask & m::IBV_SRQ_INIT_ATTR_PD == 0 {
            set_errno(libc::EINVAL);
            return null_mut();
        }
        if a.comp_mask & !known != 0 || !basic {
            tracing::debug!(
                "ibv_create_srq_ex: only basic SRQs (type {} asked, mask {:#x}); XRC and tag \
                 matching are not supported",
                a.srq_type,
                a.comp_mask
            );
            set_errno(libc::EOPNOTSUPP);
            return null_mut();
        }
        // A CQ is used by XRC SRQs only; a basic SRQ ignores it, as rdma-core's providers.
        // SAFETY: a PD of ours.
        match unsafe { create(a.pd, a.srq_context, &mut a.attr) } {
            Ok(s) => s,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ffi::ibv_srq) -> c_int {
    crate::guard::errno("ibv_destroy_srq", move || {
        if srq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: an SRQ we created.
        let obj = unsafe { Srq::of(srq) };
        let ctx = obj.ctx();
        if ctx.inherited() {
            // A forked child (see `Ctx::inherited`): our object goes, the NIC is left.
            // SAFETY: allocated by Box in create; the program stops using it.
            drop(unsafe { Box::from_raw(srq as *mut Srq) });
            return 0;
        }
        // EBUSY while a QP uses it (the kernel's `ib_destroy_srq_user`).
        if let Err(e) = ctx.nic().and_then(|nic| nic.destroy_srq(obj.id)) {
            return refused("ibv_destroy_srq", &e);
        }
        ctx.srqs.lock().unwrap().remove(&obj.id);
        // SAFETY: allocated by Box in create; the program stops using it.
        drop(unsafe { Box::from_raw(srq as *mut Srq) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ffi::ibv_srq,
    attr: *mut ffi::ibv_srq_attr,
    mask: c_int,
) -> c_int {
    crate::guard::errno("ibv_modify_srq", move || {
        use ffi::ibv_srq_attr_mask as m;
        if srq.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: an SRQ we created; the program's attributes.
        let (obj, a) = unsafe { (Srq::of(srq), &*attr) };
        let mask = mask as u32;
        if mask & !(m::IBV_SRQ_MAX_WR | m::IBV_SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        let max_wr = (mask & m::IBV_SRQ_MAX_WR != 0).then_some(a.max_wr as usize);
        let limit = (mask & m::IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
        match obj
            .ctx()
            .nic()
            .and_then(|nic| nic.modify_srq(obj.id, max_wr, limit))
        {
            Ok(()) => 0,
            Err(e) => refused("ibv_modify_srq", &e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(
    srq: *mut ffi::ibv_srq,
    attr: *mut ffi::ibv_srq_attr,
) -> c_int {
    crate::guard::errno("ibv_query_srq", move || {
        if srq.is_null() || attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: an SRQ we created.
        let obj = unsafe { Srq::of(srq) };
        match obj.ctx().nic().and_then(|nic| nic.query_srq(obj.id)) {
            Ok(q) => {
                // SAFETY: the program's out-parameter.
                unsafe {
                    attr.write(ffi::ibv_srq_attr {
                        max_wr: q.max_wr as u32,
                        max_sge: q.max_sge as u32,
                        srq_limit: q.limit,
                    })
                };
                0
            }
            Err(e) => refused("ibv_query_srq", &e),
        }
    })
}

/// `ibv_context_ops::post_srq_recv`: a full SRQ is ENOMEM, too many SGEs EINVAL (rxe's
/// `post_one_recv`); `*bad` names the first WR not posted.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut ffi::ibv_srq,
    wr: *mut ffi::ibv_recv_wr,
    bad: *mut *mut ffi::ibv_recv_wr,
) -> c_int {
    crate::guard::errno("post_srq_recv", move || {
        // SAFETY: an SRQ we created; `wr` is the program's list.
        let obj = unsafe { Srq::of(srq) };
        let mut cur = wr;
        while !cur.is_null() {
            let w = unsafe { &*cur };
            let mut list = [Sge::default(); MAX_SGE];
            // SAFETY: the program's work request, its list `num_sge` long.
            let r = unsafe { sges(w.sg_list, w.num_sge, &mut list) }.and_then(|n| {
                let rw = RecvWr {
                    wr_id: w.wr_id,
                    sges: &list[..n],
                };
                obj.ctx()
                    .nic()
                    .and_then(|nic| nic.post_srq_recv(obj.id, &rw))
                    .map_err(|e| refused("ibv_post_srq_recv", &e))
            });
            if let Err(e) = r {
                if !bad.is_null() {
                    // SAFETY: the program's out-parameter.
                    unsafe { *bad = cur };
                }
                return e;
            }
            cur = w.next;
        }
        0
    })
}
