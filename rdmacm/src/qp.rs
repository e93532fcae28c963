//! rdma_create_qp(_ex), rdma_destroy_qp, rdma_create_srq(_ex), rdma_destroy_srq and the
//! endpoint calls (rdma_create_ep, rdma_destroy_ep, rdma_get_request), as `cma.c`: a QP
//! made on the id's device with the id's PD and CQs (made for it when missing), moved to
//! INIT (UD: to RTS) with the manager's attributes.

use crate::errno::err;
use crate::evt::ack;
use crate::ffi::*;
use crate::guard;
use crate::ibv;
use crate::id::{self, CmId};
use crate::lifecycle::{create_id2, id_or_einval, resolve_addr};
use crate::qpstate::init_qp_attr;
use crate::teardown::destroy;
use libc::{c_int, c_void};
use roce_emu::cm::ucma::QpState;

/// `ucma_destroy_cqs`.
fn destroy_cqs(c: &mut rdma_cm_id) {
    // SAFETY: CQs and channels the library made for the id (ucma_create_cqs).
    unsafe {
        if !c.recv_cq.is_null() {
            ibv::ibv_destroy_cq(c.recv_cq);
            if !c.send_cq.is_null() && c.send_cq != c.recv_cq {
                ibv::ibv_destroy_cq(c.send_cq);
            }
        }
        c.send_cq = std::ptr::null_mut();
        c.recv_cq = std::ptr::null_mut();
        if !c.recv_cq_channel.is_null() {
            ibv::ibv_destroy_comp_channel(c.recv_cq_channel);
            if !c.send_cq_channel.is_null() && c.send_cq_channel != c.recv_cq_channel {
                ibv::ibv_destroy_comp_channel(c.send_cq_channel);
            }
        }
        c.send_cq_channel = std::ptr::null_mut();
        c.recv_cq_channel = std::ptr::null_mut();
    }
}

/// `ucma_create_cqs`: a CQ (on a completion channel of its own) per side that needs one.
fn create_cqs(c: &mut rdma_cm_id, send: u32, recv: u32) -> Result<(), ()> {
    let ctx = c.verbs;
    let idp = c as *mut rdma_cm_id as *mut c_void;
    // SAFETY: the id's open context; the CQ's context is the id, as librdmacm's.
    unsafe {
        if recv > 0 {
            c.recv_cq_channel = ibv::ibv_create_comp_channel(ctx);
            if !c.recv_cq_channel.is_null() {
                c.recv_cq = ibv::ibv_create_cq(ctx, recv as c_int, idp, c.recv_cq_channel, 0);
            }
            if c.recv_cq.is_null() {
                destroy_cqs(c);
                return Err(());
            }
        }
        if send > 0 {
            c.send_cq_channel = ibv::ibv_create_comp_channel(ctx);
            if !c.send_cq_channel.is_null() {
                c.send_cq = ibv::ibv_create_cq(ctx, send as c_int, idp, c.send_cq_channel, 0);
            }
            if c.send_cq.is_null() {
                destroy_cqs(c);
                return Err(());
            }
        }
    }
    Ok(())
}

/// Moves a new QP as the id's type needs (`ucma_init_conn_qp` / `ucma_init_ud_qp`).
fn init_qp(id: &CmId, qp: *mut ibv_qp) -> Result<(), i32> {
    // SAFETY: ibv_qp_attr is plain data.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mask = init_qp_attr(id, QpState::Init, &mut a)?;
    let modify = |a: &mut ibv_qp_attr, m: u32| -> Result<(), i32> {
        // SAFETY: the QP just made, our attribute struct.
        match unsafe { ibv::ibv_modify_qp(qp, a, m as c_int) } {
            0 => Ok(()),
            e => Err(e),
        }
    };
    modify(&mut a, mask as u32)?;
    if !id.is_ud() {
        return Ok(());
    }
    a.qp_state = ibv_qp_state::IBV_QPS_RTR;
    modify(&mut a, ibv_qp_attr_mask::IBV_QP_STATE)?;
    a.qp_state = ibv_qp_state::IBV_QPS_RTS;
    a.sq_psn = 0;
    modify(
        &mut a,
        ibv_qp_attr_mask::IBV_QP_STATE | ibv_qp_attr_mask::IBV_QP_SQ_PSN,
    )
}

/// `rdma_create_qp_ex`.
///
/// # Safety
/// `id` live; `attr` a valid `ibv_qp_init_attr_ex`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard::minus_one("rdma_create_qp_ex", || {
        let cid = id_or_einval!(id);
        if attr.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promises (the id's C struct, the attributes).
        let (c, a) = unsafe { (&mut *cid.c(), &mut *attr) };
        if !c.qp.is_null() || c.verbs.is_null() {
            return err(libc::EINVAL);
        }
        if a.comp_mask & ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
            a.comp_mask |= ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD;
            a.pd = c.pd;
        // SAFETY: the program's PD.
        } else if c.verbs != unsafe { (*a.pd).context } {
            return err(libc::EINVAL);
        }
        if (!c.recv_cq.is_null() && !a.recv_cq.is_null() && c.recv_cq != a.recv_cq)
            || (!c.send_cq.is_null() && !a.send_cq.is_null() && c.send_cq != a.send_cq)
        {
            return err(libc::EINVAL);
        }
        let send = if !a.send_cq.is_null() || !c.send_cq.is_null() {
            0
        } else {
            a.cap.max_send_wr
        };
        let recv = if !a.recv_cq.is_null() || !c.recv_cq.is_null() {
            0
        } else {
            a.cap.max_recv_wr
        };
        if create_cqs(c, send, recv).is_err() {
            return -1;
        }
        if a.send_cq.is_null() {
            a.send_cq = c.send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = c.recv_cq;
        }
        if !c.srq.is_null() && a.srq.is_null() {
            a.srq = c.srq;
        }
        // SAFETY: the id's open context and the program's attributes.
        let qp = unsafe { ibv::create_qp_ex(c.verbs, a) };
        if qp.is_null() {
            destroy_cqs(c);
            return -1;
        }
        if let Err(e) = init_qp(cid, qp) {
            // SAFETY: the QP just made.
            unsafe { ibv::ibv_destroy_qp(qp) };
            destroy_cqs(c);
            return err(e);
        }
        // SAFETY: the QP just made.
        c.pd = unsafe { (*qp).pd };
        c.qp = qp;
        0
    })
}

/// # Safety
/// `id` live; `pd` NULL or the program's PD; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard::minus_one("rdma_create_qp", || {
        let cid = id_or_einval!(id);
        if attr.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: ibv_qp_init_attr_ex is plain data whose prefix is ibv_qp_init_attr.
        let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: the caller's attributes, copied into the prefix (as cma.c's memcpy).
        unsafe {
            std::ptr::copy_nonoverlapping(
                attr as *const u8,
                &mut ex as *mut _ as *mut u8,
                std::mem::size_of::<ibv_qp_init_attr>(),
            )
        };
        ex.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD;
        // SAFETY: the id's own C struct.
        ex.pd = if pd.is_null() {
            unsafe { (*cid.c()).pd }
        } else {
            pd
        };
        // SAFETY: the id and our attributes.
        let r = unsafe { rdma_create_qp_ex(id, &mut ex) };
        // SAFETY: back into the caller's struct (the CQs chosen, the caps granted).
        unsafe {
            std::ptr::copy_nonoverlapping(
                &ex as *const _ as *const u8,
                attr as *mut u8,
                std::mem::size_of::<ibv_qp_init_attr>(),
            )
        };
        r
    })
}

/// # Safety
/// `id` live with a QP.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard::value("rdma_destroy_qp", || {
        if id.is_null() {
            return;
        }
        // SAFETY: the caller's promise.
        let c = unsafe { &mut *id };
        if !c.qp.is_null() {
            // SAFETY: the id's QP.
            unsafe { ibv::ibv_destroy_qp(c.qp) };
        }
        c.qp = std::ptr::null_mut();
        destroy_cqs(c);
    })
}

/// # Safety
/// `id` live; `pd` NULL or the program's; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    guard::minus_one("rdma_create_srq", || {
        if id.is_null() || attr.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        let c = unsafe { &mut *id };
        let pd = if pd.is_null() { c.pd } else { pd };
        if pd.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the program's PD and attributes.
        let srq = unsafe { ibv::ibv_create_srq(pd, attr) };
        if srq.is_null() {
            return -1;
        }
        c.srq = srq;
        c.pd = pd;
        0
    })
}

/// XRC SRQs (the only reason for the _ex form in librdmacm) are not supported.
///
/// # Safety
/// Any arguments (untouched).
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(_id: *mut rdma_cm_id, _attr: *mut c_void) -> c_int {
    guard::minus_one("rdma_create_srq_ex", || err(libc::EOPNOTSUPP))
}

/// # Safety
/// `id` live.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    guard::value("rdma_destroy_srq", || {
        if id.is_null() {
            return;
        }
        // SAFETY: the caller's promise.
        let c = unsafe { &mut *id };
        if !c.srq.is_null() {
            // SAFETY: the id's SRQ.
            unsafe { ibv::ibv_destroy_srq(c.srq) };
        }
        c.srq = std::ptr::null_mut();
        destroy_cqs(c);
    })
}

/// `rdma_create_ep`: a synchronous id, bound (passive) or resolved to address and route,
/// with a QP when `qp_init_attr` is given (passive: kept for `rdma_get_request`).
///
/// # Safety
/// `out` writable; `res` a valid `rdma_addrinfo`; `pd`, `qp_init_attr` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard::minus_one("rdma_create_ep", || {
        if out.is_null() || res.is_null() {
            return err(libc::EINVAL);
        }
        // SAFETY: the caller's promise.
        let r = unsafe { &*res };
        let mut p: *mut rdma_cm_id = std::ptr::null_mut();
        // SAFETY: p is ours to write.
        let ret = unsafe {
            create_id2(
                std::ptr::null_mut(),
                &mut p,
                std::ptr::null_mut(),
                r.ai_port_space as u32,
                r.ai_qp_type as u32,
            )
        };
        if ret != 0 {
            return ret;
        }
        // SAFETY: just made.
        let cid = unsafe { &*(p as *const CmId) };
        let fail = |ret: c_int| {
            let e = crate::ibv::errno();
            // SAFETY: the id just made, not handed out.
            unsafe { rdma_destroy_ep(p) };
            crate::errno::set_errno(e);
            ret
        };
        // SAFETY: the addrinfo's addresses (ai_src_len/ai_dst_len bytes).
        let (src, dst) = unsafe {
            (
                crate::addr::read(r.ai_src_addr as *const libc::sockaddr),
                crate::addr::read(r.ai_dst_addr as *const libc::sockaddr),
            )
        };
        if r.ai_flags as u32 & RAI_PASSIVE != 0 {
            let Some(src) = src else {
                return fail(err(libc::EINVAL));
            };
            let ret = id::bind(cid, src);
            if ret != 0 {
                return fail(ret);
            }
            // SAFETY: the id's own C struct.
            let c = unsafe { &mut *cid.c() };
            if !pd.is_null() {
                c.pd = pd;
            }
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes.
                let mut a = unsafe { *qp_init_attr };
                a.qp_type = r.ai_qp_type as u32;
                cid.lock().qp_init_attr = Some(a);
            }
            // SAFETY: the caller's promise.
            unsafe { *out = p };
            return 0;
        }
        let Some(dst) = dst else {
            return fail(err(libc::EINVAL));
        };
        let ret = resolve_addr(cid, src, dst, 2000);
        if ret != 0 {
            return fail(ret);
        }
        // SAFETY: the id just made.
        let ret = unsafe { crate::lifecycle::rdma_resolve_route(p, 2000) };
        if ret != 0 {
            return fail(ret);
        }
        if !qp_init_attr.is_null() {
            // SAFETY: the caller's attributes.
            unsafe { (*qp_init_attr).qp_type = r.ai_qp_type as u32 };
            // SAFETY: the id and the caller's attributes.
            let ret = unsafe { rdma_create_qp(p, pd, qp_init_attr) };
            if ret != 0 {
                return fail(ret);
            }
        }
        // SAFETY: the caller's promise.
        unsafe { *out = p };
        0
    })
}

/// # Safety
/// `id` from `rdma_create_ep` (or any live id), not used after.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard::value("rdma_destroy_ep", || {
        if id.is_null() {
            return;
        }
        // SAFETY: the caller's promise.
        let c = unsafe { &*id };
        if !c.qp.is_null() {
            // SAFETY: as above.
            unsafe { rdma_destroy_qp(id) };
        }
        if !c.srq.is_null() {
            // SAFETY: as above.
            unsafe { rdma_destroy_srq(id) };
        }
        destroy(id as *mut CmId);
    })
}

/// `rdma_get_request`: a synchronous listener's next connect request as a new id (with
/// a QP when the listener was made with `qp_init_attr`); the event stays on it
/// (`id->event`) until its next call.
///
/// # Safety
/// `listen` a live synchronous listener; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    guard::minus_one("rdma_get_request", || {
        let l = id_or_einval!(listen);
        if out.is_null() || !l.lock().sync {
            return err(libc::EINVAL);
        }
        let lc = l.c();
        // SAFETY: the listener's own C struct.
        let prev = unsafe { (*lc).event };
        if !prev.is_null() {
            ack(prev);
            // SAFETY: as above.
            unsafe { (*lc).event = std::ptr::null_mut() };
        }
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the listener's channel; ev ours.
        let ret = unsafe { crate::event::rdma_get_cm_event((*lc).channel, &mut ev) };
        if ret != 0 {
            return ret;
        }
        // SAFETY: the event just taken.
        let e = unsafe { &*ev };
        let bad = if e.event == rdma_cm_event_type::RDMA_CM_EVENT_REJECTED {
            Some(libc::ECONNREFUSED)
        } else if e.status != 0 {
            Some(e.status.abs())
        } else if e.event != rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
            Some(libc::EINVAL)
        } else {
            None
        };
        if let Some(x) = bad {
            // SAFETY: as above.
            unsafe { (*lc).event = ev };
            return err(x);
        }
        let qia = l.lock().qp_init_attr;
        if let Some(mut a) = qia {
            // SAFETY: the listener's own C struct.
            let pd = unsafe { (*lc).pd };
            // SAFETY: the new id and our copy of the attributes.
            let ret = unsafe { rdma_create_qp(e.id, pd, &mut a) };
            if ret != 0 {
                // SAFETY: as above.
                unsafe { (*lc).event = ev };
                return ret;
            }
        }
        // SAFETY: the new id (live), the caller's out.
        unsafe {
            *out = e.id;
            (*e.id).event = ev;
        }
        0
    })
}
