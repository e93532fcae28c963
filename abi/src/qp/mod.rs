//! Queue pairs: create (plain and extended), modify, query, destroy. Every QP is an
//! `ibv_qp_ex` whose `ibv_wr_*` pointers are ours (wr/ex.rs), so `ibv_qp_to_qp_ex` works for
//! any QP. RC, UC and UD, each on its own receive queue or an SRQ (srq.rs): XRC and raw
//! packet are EOPNOTSUPP.

pub mod wr;

use crate::ah::av_of;
use crate::cq::Cq;
use crate::ctx::Ctx;
use crate::errno::{refused, set_errno};
use crate::ffi;
use crate::mr::PdObj;
use libc::c_int;
use roce_emu::verbs::{Access, Mtu, Psn, QpAttr, QpCap, QpInit, QpState, QpType};
use std::cell::UnsafeCell;
use std::net::IpAddr;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, Ordering};
use wr::SendSide;

/// The largest inline payload a QP can be given (the engine's limit).
const MAX_INLINE: u32 = 256;
/// Inline room every QP gets, as rxe sizes it: a send WQE holds `max_send_sge` SGEs of 16
/// bytes, and that room can carry inline data instead (`rxe_qp_init_req`). ibv_rc_pingpong
/// sends inline when the granted room fits its message.
const SGE_BYTES: u32 = 16;

/// One QP. Several threads may use a QP at once (libibverbs allows it: one posts sends
/// while another posts receives, or two post sends), so the program's pointer only ever
/// becomes a shared `&Qp`, never `&mut`: what changes after creation is either the C part
/// (`ex`, in an `UnsafeCell`: the program writes `wr_id`/`wr_flags` there itself, and
/// the state is stored atomically) or the send side's batch, behind its own lock
/// ([`SendSide`]), as rdma-core's providers lock a QP's send queue.
#[repr(C)]
pub struct Qp {
    /// The `ibv_qp_ex` the program holds (first: our pointer is its pointer).
    /// `UnsafeCell<T>` has `T`'s layout.
    ex: UnsafeCell<ffi::ibv_qp_ex>,
    pub qpn: u32,
    pub max_inline: usize,
    pub max_send_sge: usize,
    /// A UD QP: each send names its destination (`wr.ud`).
    pub ud: bool,
    /// The send queue's lock and what `ibv_wr_*` calls built since `ibv_wr_start`.
    pub send: SendSide,
}

impl Qp {
    /// Ours, from a QP pointer: a shared reference (see [`Qp`]).
    ///
    /// # Safety
    /// `qp` is a QP we created and have not destroyed.
    pub unsafe fn of<'a>(qp: *mut ffi::ibv_qp) -> &'a Qp {
        // SAFETY: every QP we hand out is the first field of a #[repr(C)] Qp (ibv_qp is the
        // first field of ibv_qp_ex); only shared references are made, and what another
        // thread may change is behind an UnsafeCell or a lock.
        unsafe { &*(qp as *const Qp) }
    }

    /// The C part, which the program reads and writes: used only through this pointer.
    pub fn c(&self) -> *mut ffi::ibv_qp_ex {
        self.ex.get()
    }

    pub fn ctx(&self) -> &Ctx {
        // SAFETY: `context` is written once, at creation; the context outlives its QPs.
        unsafe { Ctx::of((*self.c()).qp_base.context) }
    }

    /// Records the QP's state in `ibv_qp::state` (which programs read), atomically: two
    /// threads may modify or query one QP at once.
    fn set_state(&self, s: ffi::ibv_qp_state::Type) {
        // SAFETY: `state` is an aligned u32 inside our live QP; every write of ours to it is
        // this atomic store (the program only reads it).
        unsafe { AtomicU32::from_ptr(&raw mut (*self.c()).qp_base.state) }
            .store(s, Ordering::Relaxed);
    }
}

fn state_of(s: ffi::ibv_qp_state::Type) -> Option<QpState> {
    use ffi::ibv_qp_state as t;
    Some(match s {
        t::IBV_QPS_RESET => QpState::Reset,
        t::IBV_QPS_INIT => QpState::Init,
        t::IBV_QPS_RTR => QpState::Rtr,
        t::IBV_QPS_RTS => QpState::Rts,
        t::IBV_QPS_SQD => QpState::Sqd,
        t::IBV_QPS_SQE => QpState::Sqe,
        t::IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

fn state_to(s: QpState) -> ffi::ibv_qp_state::Type {
    use ffi::ibv_qp_state as t;
    match s {
        QpState::Reset => t::IBV_QPS_RESET,
        QpState::Init => t::IBV_QPS_INIT,
        QpState::Rtr => t::IBV_QPS_RTR,
        QpState::Rts => t::IBV_QPS_RTS,
        QpState::Sqd => t::IBV_QPS_SQD,
        QpState::Sqe => t::IBV_QPS_SQE,
        QpState::Err => t::IBV_QPS_ERR,
    }
}

/// Creates an RC or UC QP on context `c` from `a` (its caps are updated to those granted).
///
/// # Safety
/// `c` is a context we opened; `pd` and the CQs in `a` are ours.
unsafe fn create(
    c: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    a: &mut ffi::ibv_qp_init_attr_ex,
) -> Result<*mut ffi::ibv_qp, c_int> {
    // SAFETY: a context we opened.
    let ctx = unsafe { Ctx::of(c) };
    let qp_type = match a.qp_type {
        ffi::ibv_qp_type::IBV_QPT_RC => QpType::Rc,
        ffi::ibv_qp_type::IBV_QPT_UC => QpType::Uc,
        ffi::ibv_qp_type::IBV_QPT_UD => QpType::Ud,
        t => {
            tracing::debug!("ibv_create_qp: QP type {t} is not supported (RC, UC, UD)");
            return Err(libc::EOPNOTSUPP);
        }
    };
    if pd.is_null() || a.send_cq.is_null() || a.recv_cq.is_null() {
        return Err(libc::EINVAL);
    }
    if a.cap.max_inline_data > MAX_INLINE {
        return Err(libc::EINVAL);
    }
    // SAFETY: objects we created.
    let (pd_obj, scq, rcq) = unsafe { (PdObj::of(pd), Cq::of(a.send_cq), Cq::of(a.recv_cq)) };
    let inline = a
        .cap
        .max_inline_data
        .max(a.cap.max_send_sge * SGE_BYTES)
        .min(MAX_INLINE);
    let cap = QpCap {
        max_send_wr: a.cap.max_send_wr as usize,
        max_recv_wr: a.cap.max_recv_wr as usize,
        max_send_sge: a.cap.max_send_sge as usize,
        max_recv_sge: a.cap.max_recv_sge as usize,
        max_inline_data: inline as usize,
    };
    let init = QpInit {
        qp_type,
        pd: pd_obj.id,
        send_cq: scq.id,
        recv_cq: rcq.id,
        cap,
        sq_sig_all: a.sq_sig_all != 0,
        // SAFETY: an SRQ we created (the program's `init_attr.srq`), or NULL.
        srq: (!a.srq.is_null()).then(|| unsafe { crate::srq::Srq::of(a.srq) }.id),
    };
    let qpn = ctx
        .nic()
        .and_then(|nic| nic.create_qp(&init))
        .map_err(|e| refused("ibv_create_qp", &e))?;
    a.cap.max_inline_data = inline;
    // SAFETY: plain C data (pthread objects zero-initialised as glibc's initialisers).
    let mut ex: ffi::ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut ex.qp_base;
    b.context = c;
    b.qp_context = a.qp_context;
    b.pd = pd;
    b.send_cq = a.send_cq;
    b.recv_cq = a.recv_cq;
    b.srq = a.srq;
    b.handle = qpn;
    b.qp_num = qpn;
    b.state = ffi::ibv_qp_state::IBV_QPS_RESET;
    b.qp_type = a.qp_type;
    wr::fill_ops(&mut ex);
    let obj = Box::into_raw(Box::new(Qp {
        ex: UnsafeCell::new(ex),
        qpn,
        max_inline: inline as usize,
        max_send_sge: a.cap.max_send_sge as usize,
        ud: qp_type == QpType::Ud,
        send: SendSide::default(),
    }));
    ctx.qps.lock().unwrap().insert(qpn, obj as usize);
    Ok(obj as *mut ffi::ibv_qp)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ffi::ibv_pd,
    attr: *mut ffi::ibv_qp_init_attr,
) -> *mut ffi::ibv_qp {
    crate::guard::null("ibv_create_qp", move || {
        // SAFETY: a PD we allocated; `attr` is the program's (its `cap` is written back).
        let c = unsafe { PdObj::of(pd) }.pd.context;
        let a = unsafe { &mut *attr };
        let mut ex = ffi::ibv_qp_init_attr_ex {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
            comp_mask: ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD,
            pd,
            // SAFETY: the rest is plain C data; zero is "not given".
            ..unsafe { std::mem::zeroed() }
        };
        match unsafe { create(c, pd, &mut ex) } {
            Ok(qp) => {
                a.cap = ex.cap;
                qp
            }
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

/// `verbs_context::create_qp_ex`: the send operations asked for (`send_ops_flags`) must be
/// ones this NIC has; create flags, TSO, RSS and XRC are not supported yet.
pub unsafe extern "C" fn create_qp_ex(
    c: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_qp_init_attr_ex,
) -> *mut ffi::ibv_qp {
    crate::guard::null("create_qp_ex", move || {
        use ffi::ibv_qp_create_send_ops_flags as s;
        use ffi::ibv_qp_init_attr_mask as m;
        // SAFETY: the program's attributes.
        let a = unsafe { &mut *attr };
        let known = m::IBV_QP_INIT_ATTR_PD
            | m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
            | m::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        let supported_ops = u64::from(
            s::IBV_QP_EX_WITH_RDMA_WRITE
                | s::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | s::IBV_QP_EX_WITH_SEND
                | s::IBV_QP_EX_WITH_SEND_WITH_IMM
                | s::IBV_QP_EX_WITH_RDMA_READ
                | s::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | s::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | s::IBV_QP_EX_WITH_SEND_WITH_INV
                | s::IBV_QP_EX_WITH_BIND_MW
                | s::IBV_QP_EX_WITH_LOCAL_INV,
        );
        let bad = a.comp_mask & !known != 0
            || a.comp_mask & m::IBV_QP_INIT_ATTR_PD == 0
            || (a.comp_mask & m::IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
            || (a.comp_mask & m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0
                && a.send_ops_flags & !supported_ops != 0);
        if bad {
            set_errno(if a.comp_mask & m::IBV_QP_INIT_ATTR_PD == 0 {
                libc::EINVAL
            } else {
                libc::EOPNOTSUPP
            });
            return null_mut();
        }
        // SAFETY: the context the program passed; the PD and CQs in its attributes.
        match unsafe { create(c, a.pd, a) } {
            Ok(qp) => qp,
            Err(e) => {
                set_errno(e);
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ffi::ibv_qp) -> *mut ffi::ibv_qp_ex {
    crate::guard::null("ibv_qp_to_qp_ex", move || qp as *mut ffi::ibv_qp_ex)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ffi::ibv_qp) -> c_int {
    crate::guard::errno("ibv_destroy_qp", move || {
        // SAFETY: a QP we created.
        let obj = unsafe { Qp::of(qp) };
        let ctx = obj.ctx();
        if ctx.inherited() {
            // A forked child (see `Ctx::inherited`): our object goes, the NIC and the
            // map are left.
            // SAFETY: allocated by Box in create; the program stops using it.
            drop(unsafe { Box::from_raw(qp as *mut Qp) });
            return 0;
        }
        if let Err(e) = ctx.nic().and_then(|nic| nic.destroy_qp(obj.qpn)) {
            return refused("ibv_destroy_qp", &e);
        }
        ctx.qps.lock().unwrap().remove(&obj.qpn);
        // SAFETY: allocated by Box in create; the program stops using it.
        drop(unsafe { Box::from_raw(obj as *const Qp as *mut Qp) });
        0
    })
}

fn attr_of(ctx: &Ctx, a: &ffi::ibv_qp_attr, mask: c_int) -> Result<QpAttr, &'static str> {
    use ffi::ibv_qp_attr_mask as m;
    let mask = mask as u32;
    let has = |bit: u32| mask & bit != 0;
    let unsupported =
        m::IBV_QP_ALT_PATH | m::IBV_QP_PATH_MIG_STATE | m::IBV_QP_CAP | m::IBV_QP_RATE_LIMIT;
    if has(unsupported) {
        return Err("alternate paths, migration, resizing and rate limits do not apply");
    }
    let mut q = QpAttr::default();
    if has(m::IBV_QP_STATE) {
        q.state = Some(state_of(a.qp_state).ok_or("qp_state out of range")?);
    }
    if has(m::IBV_QP_ACCESS_FLAGS) {
        q.access =
            Some(Access::from_bits(a.qp_access_flags).ok_or("qp_access_flags: unknown bits")?);
    }
    if has(m::IBV_QP_PKEY_INDEX) {
        q.pkey_index = Some(a.pkey_index);
    }
    if has(m::IBV_QP_PORT) {
        q.port = Some(a.port_num);
    }
    if has(m::IBV_QP_AV) {
        q.av = Some(av_of(ctx, &a.ah_attr)?);
    }
    if has(m::IBV_QP_PATH_MTU) {
        q.path_mtu = Some(Mtu::from_ibv(a.path_mtu as u8).ok_or("path_mtu out of range")?);
    }
    if has(m::IBV_QP_TIMEOUT) {
        q.timeout = Some(a.timeout);
    }
    if has(m::IBV_QP_RETRY_CNT) {
        q.retry_cnt = Some(a.retry_cnt);
    }
    if has(m::IBV_QP_RNR_RETRY) {
        q.rnr_retry = Some(a.rnr_retry);
    }
    if has(m::IBV_QP_RQ_PSN) {
        q.rq_psn = Some(Psn::new(a.rq_psn));
    }
    if has(m::IBV_QP_SQ_PSN) {
        q.sq_psn = Some(Psn::new(a.sq_psn));
    }
    if has(m::IBV_QP_MAX_QP_RD_ATOMIC) {
        q.max_rd_atomic = Some(a.max_rd_atomic);
    }
    if has(m::IBV_QP_MAX_DEST_RD_ATOMIC) {
        q.max_dest_rd_atomic = Some(a.max_dest_rd_atomic);
    }
    if has(m::IBV_QP_MIN_RNR_TIMER) {
        q.min_rnr_timer = Some(a.min_rnr_timer);
    }
    if has(m::IBV_QP_DEST_QPN) {
        q.dest_qpn = Some(a.dest_qp_num);
    }
    if has(m::IBV_QP_QKEY) {
        q.qkey = Some(a.qkey);
    }
    if has(m::IBV_QP_EN_SQD_ASYNC_NOTIFY) {
        q.sq_draining_notify = Some(a.en_sqd_async_notify != 0);
    }
    Ok(q)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ffi::ibv_qp,
    attr: *mut ffi::ibv_qp_attr,
    mask: c_int,
) -> c_int {
    crate::guard::errno("ibv_modify_qp", move || {
        // SAFETY: a QP we created; the program's attributes.
        let obj = unsafe { Qp::of(qp) };
        let a = unsafe { &*attr };
        let ctx = obj.ctx();
        // Q_Keys with the MSB set are privileged (IBA 10.2.4; the kernel's
        // `modify_qp` refuses them to user space with EPERM since Linux 6.4, unless the
        // netlink privileged_qkey mode is on).
        if mask as u32 & ffi::ibv_qp_attr_mask::IBV_QP_QKEY != 0 && a.qkey & 0x8000_0000 != 0 {
            tracing::debug!(
                "ibv_modify_qp {:#x}: Q_Key {:#x} is privileged",
                obj.qpn,
                a.qkey
            );
            return libc::EPERM;
        }
        let q = match attr_of(ctx, a, mask) {
            Ok(q) => q,
            Err(why) => {
                tracing::debug!("ibv_modify_qp {:#x}: {why}", obj.qpn);
                return libc::EINVAL;
            }
        };
        match ctx.nic().and_then(|nic| nic.modify_qp(obj.qpn, &q)) {
            Ok(()) => {
                if let Some(s) = q.state {
                    obj.set_state(state_to(s));
                }
                0
            }
            Err(e) => refused("ibv_modify_qp", &e),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ffi::ibv_qp,
    attr: *mut ffi::ibv_qp_attr,
    _mask: c_int,
    init: *mut ffi::ibv_qp_init_attr,
) -> c_int {
    crate::guard::errno("ibv_query_qp", move || {
        // SAFETY: a QP we created; `attr` and `init` are the program's out-parameters.
        let obj = unsafe { Qp::of(qp) };
        let ctx = obj.ctx();
        let info = match ctx.nic().and_then(|nic| nic.query_qp(obj.qpn)) {
            Ok(i) => i,
            Err(e) => return refused("ibv_query_qp", &e),
        };
        let cap = ffi::ibv_qp_cap {
            max_send_wr: info.cap.max_send_wr as u32,
            max_recv_wr: info.cap.max_recv_wr as u32,
            max_send_sge: info.cap.max_send_sge as u32,
            max_recv_sge: info.cap.max_recv_sge as u32,
            max_inline_data: info.cap.max_inline_data as u32,
        };
        // SAFETY: plain C data.
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        let at = &info.attrs;
        a.qp_state = state_to(info.state);
        a.cur_qp_state = a.qp_state;
        a.path_mtu = at.path_mtu as u32;
        a.rq_psn = info.rq_psn;
        a.sq_psn = info.sq_psn;
        a.dest_qp_num = at.dest_qpn;
        a.qp_access_flags = at.access.bits();
        a.cap = cap;
        if let Some(av) = at.av {
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.hop_limit = 64;
            // The source GID: the device sends from its own address alone (modify_qp
            // refuses any other index), so that address's index is the one the program
            // set; pyverbs' test_mr re-applies the queried attributes after a reset.
            a.ah_attr.grh.sgid_index = ctx.dev.gids.own_index().unwrap_or(0) as u8;
            a.ah_attr.grh.dgid.raw = match av.dest_ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
        }
        a.pkey_index = at.pkey_index;
        a.qkey = at.qkey;
        a.en_sqd_async_notify = at.sq_draining_notify as u8;
        a.sq_draining = (info.state == QpState::Sqd) as u8;
        a.max_rd_atomic = at.max_rd_atomic;
        a.max_dest_rd_atomic = at.max_dest_rd_atomic;
        a.min_rnr_timer = at.min_rnr_timer;
        a.port_num = at.port;
        a.timeout = at.timeout;
        a.retry_cnt = at.retry_cnt;
        a.rnr_retry = at.rnr_retry;
        // Read field by field through the raw pointer (no reference to the C part, whose
        // `state` another thread may be storing); these fields are written at creation.
        let b = obj.c();
        // SAFETY: the program's out-parameters (`init` may be NULL); `b` is our live QP.
        unsafe {
            attr.write(a);
            if !init.is_null() {
                init.write(ffi::ibv_qp_init_attr {
                    qp_context: (*b).qp_base.qp_context,
                    send_cq: (*b).qp_base.send_cq,
                    recv_cq: (*b).qp_base.recv_cq,
                    srq: (*b).qp_base.srq,
                    cap,
                    qp_type: (*b).qp_base.qp_type,
                    sq_sig_all: info.sq_sig_all as c_int,
                });
            }
        }
        obj.set_state(a.qp_state);
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ffi::ibv_qp,
    _op: ffi::ibv_wr_opcode::Type,
    _flags: u32,
) -> c_int {
    crate::guard::errno("ibv_query_qp_data_in_order", move || {
        // Whether data lands in order for this operation: not promised (0), as rxe says.
        0
    })
}
