//! Posting work: `ibv_post_send`/`ibv_post_recv` (inline through `ibv_context::ops`) and
//! the extended post API (`ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`, ...,
//! `ibv_wr_complete`, inline through `ibv_qp_ex`), which perftest uses by default.

use crate::ffi;
use crate::qp::Qp;
use libc::{c_int, c_uint, c_void};
use roce_emu::verbs::{Lkey, Local, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge};
use std::ops::Range;

/// SGEs a work request may carry (the engine's limit; more is EINVAL).
const MAX_SGE: usize = 8;
/// Inline bytes a work request may carry (the engine's limit).
const MAX_INLINE: usize = 256;

fn flags_of(f: c_uint) -> SendFlags {
    use ffi::ibv_send_flags as s;
    SendFlags {
        signaled: f & s::IBV_SEND_SIGNALED != 0,
        fence: f & s::IBV_SEND_FENCE != 0,
        solicited: f & s::IBV_SEND_SOLICITED != 0,
    }
}

/// The operation of a classic work request; `Err` is the errno for one this NIC lacks.
fn op_of(w: &ffi::ibv_send_wr) -> Result<SendOp, c_int> {
    use ffi::ibv_wr_opcode as o;
    // SAFETY: the union member read is the one the opcode says the program filled.
    unsafe {
        let rdma = Remote {
            va: w.wr.rdma.remote_addr,
            rkey: w.wr.rdma.rkey,
        };
        let at = w.wr.atomic;
        let atomic = Remote {
            va: at.remote_addr,
            rkey: at.rkey,
        };
        let imm = u32::from_be(w.__bindgen_anon_1.imm_data);
        Ok(match w.opcode {
            o::IBV_WR_SEND => SendOp::Send,
            o::IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm { imm },
            o::IBV_WR_SEND_WITH_INV => SendOp::SendWithInv {
                rkey: w.__bindgen_anon_1.invalidate_rkey,
            },
            o::IBV_WR_RDMA_WRITE => SendOp::Write { remote: rdma },
            o::IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm { remote: rdma, imm },
            o::IBV_WR_RDMA_READ => SendOp::Read { remote: rdma },
            o::IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
                remote: atomic,
                compare: at.compare_add,
                swap: at.swap,
            },
            o::IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
                remote: atomic,
                add: at.compare_add,
            },
            // LOCAL_INV, BIND_MW, TSO, ATOMIC_WRITE, FLUSH: not on this NIC yet.
            _ => return Err(libc::EOPNOTSUPP),
        })
    }
}

/// Copies the program's SGE list into `out`; the count.
///
/// # Safety
/// `list` points to `n` SGEs (the verbs contract of `sg_list`/`num_sge`).
unsafe fn sges(
    list: *const ffi::ibv_sge,
    n: c_int,
    out: &mut [Sge; MAX_SGE],
) -> Result<usize, c_int> {
    let n = usize::try_from(n).map_err(|_| libc::EINVAL)?;
    if n > MAX_SGE {
        return Err(libc::EINVAL);
    }
    for (i, slot) in out.iter_mut().enumerate().take(n) {
        // SAFETY: the program's list has `n` entries.
        let s = unsafe { &*list.add(i) };
        *slot = Sge {
            addr: s.addr,
            length: s.length,
            lkey: Lkey(s.lkey),
        };
    }
    Ok(n)
}

/// Gathers the bytes an inline send carries from the program's own memory (no key is
/// checked: `IBV_SEND_INLINE` data need not be registered) into `buf`; their length.
///
/// # Safety
/// Each SGE points to `length` readable bytes (the verbs contract of an inline send).
unsafe fn gather(list: &[Sge], buf: &mut [u8; MAX_INLINE], max: usize) -> Result<usize, c_int> {
    let mut n = 0usize;
    for s in list {
        let len = s.length as usize;
        if n + len > max.min(MAX_INLINE) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program points an inline SGE at `length` readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(s.addr as *const u8, buf[n..].as_mut_ptr(), len) };
        n += len;
    }
    Ok(n)
}

/// # Safety
/// `w` is a work request of the program's: its SGE list `num_sge` long, its inline data
/// readable.
unsafe fn post_one(qp: &Qp, w: &ffi::ibv_send_wr) -> Result<(), c_int> {
    let op = op_of(w)?;
    let mut list = [Sge::default(); MAX_SGE];
    // SAFETY: `w` is the program's work request, its list `num_sge` long.
    let n = unsafe { sges(w.sg_list, w.num_sge, &mut list) }?;
    let mut inline = [0u8; MAX_INLINE];
    let inline_send = w.send_flags & ffi::ibv_send_flags::IBV_SEND_INLINE != 0
        && matches!(
            op,
            SendOp::Send
                | SendOp::SendWithImm { .. }
                | SendOp::SendWithInv { .. }
                | SendOp::Write { .. }
                | SendOp::WriteWithImm { .. }
        );
    let local = if inline_send {
        // SAFETY: an inline send's SGEs point at the program's readable bytes.
        let len = unsafe { gather(&list[..n], &mut inline, qp.max_inline) }?;
        Local::Inline(&inline[..len])
    } else {
        Local::Sges(&list[..n])
    };
    let wr = SendWr {
        wr_id: w.wr_id,
        op,
        local,
        flags: flags_of(w.send_flags),
    };
    qp.ctx()
        .nic()
        .and_then(|nic| nic.post_send(qp.qpn, &wr))
        .map_err(|e| crate::errno::refused("ibv_post_send", &e))
}

/// `ibv_context_ops::post_send`.
pub unsafe extern "C" fn post_send(
    qp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_send_wr,
    bad: *mut *mut ffi::ibv_send_wr,
) -> c_int {
    crate::guard::errno("post_send", move || {
        // SAFETY: a QP we created; `wr` is the program's list.
        let obj = unsafe { Qp::of(qp) };
        let mut cur = wr;
        while !cur.is_null() {
            let w = unsafe { &*cur };
            if let Err(e) = unsafe { post_one(obj, w) } {
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

/// `ibv_context_ops::post_recv`.
pub unsafe extern "C" fn post_recv(
    qp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_recv_wr,
    bad: *mut *mut ffi::ibv_recv_wr,
) -> c_int {
    crate::guard::errno("post_recv", move || {
        // SAFETY: a QP we created; `wr` is the program's list.
        let obj = unsafe { Qp::of(qp) };
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
                    .and_then(|nic| nic.post_recv(obj.qpn, &rw))
                    .map_err(|e| crate::errno::refused("ibv_post_recv", &e))
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

/// `ibv_context_ops::post_srq_recv`: no SRQ can exist yet.
pub unsafe extern "C" fn post_srq_recv(
    _srq: *mut ffi::ibv_srq,
    wr: *mut ffi::ibv_recv_wr,
    bad: *mut *mut ffi::ibv_recv_wr,
) -> c_int {
    crate::guard::errno("post_srq_recv", move || {
        if !bad.is_null() {
            // SAFETY: the program's out-parameter.
            unsafe { *bad = wr };
        }
        libc::EOPNOTSUPP
    })
}

// ---- the extended post API --------------------------------------------------------------

/// Where a pending work request's local data is, in the batch's shared buffers.
#[derive(Debug, Clone)]
enum LocalRef {
    Sges(Range<usize>),
    Inline(Range<usize>),
}

#[derive(Debug, Clone)]
struct Pending {
    wr_id: u64,
    flags: SendFlags,
    op: SendOp,
    local: LocalRef,
}

/// The work requests built between `ibv_wr_start` and `ibv_wr_complete`. Buffers are kept
/// from batch to batch: no allocation per work request once they have grown.
#[derive(Debug, Default)]
pub struct Batch {
    wrs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    /// The first error met while building (an unsupported operation, too many SGEs):
    /// `ibv_wr_complete` returns it and posts nothing.
    err: c_int,
}

impl Batch {
    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.err = 0;
    }
}

/// Ours, from the `ibv_qp_ex` an `ibv_wr_*` call names.
///
/// # Safety
/// `qp` must be a QP we created (only ours carry these function pointers), not destroyed,
/// and not used by another thread meanwhile (the ibv_wr_* contract: one thread builds a
/// QP's batch).
unsafe fn qp_of<'a>(qp: *mut ffi::ibv_qp_ex) -> &'a mut Qp {
    // SAFETY: ibv_qp_ex is the first field of our Qp; the rest is the caller's promise.
    unsafe { Qp::of(qp as *mut ffi::ibv_qp) }
}

fn push(q: &mut Qp, op: SendOp) {
    let p = Pending {
        wr_id: q.ex.wr_id,
        flags: flags_of(q.ex.wr_flags),
        op,
        local: LocalRef::Sges(0..0),
    };
    q.batch.wrs.push(p);
}

fn fail(q: &mut Qp, e: c_int) {
    if q.batch.err == 0 {
        q.batch.err = e;
    }
}

// Every `ibv_wr_*` entry below is reached only through the pointers `fill_ops` puts in our
// QPs, so its `qp` is one of ours: that is the SAFETY of each `qp_of` call.

unsafe extern "C" fn wr_start(qp: *mut ffi::ibv_qp_ex) {
    crate::guard::value("wr_start", move || {
        // SAFETY: see above (a QP of ours).
        unsafe { qp_of(qp) }.batch.clear();
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ffi::ibv_qp_ex) -> c_int {
    crate::guard::errno("wr_complete", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        let mut b = std::mem::take(&mut q.batch);
        let mut rc = b.err;
        if rc == 0 {
            for p in &b.wrs {
                let local = match &p.local {
                    LocalRef::Sges(r) => Local::Sges(&b.sges[r.clone()]),
                    LocalRef::Inline(r) => Local::Inline(&b.inline[r.clone()]),
                };
                let wr = SendWr {
                    wr_id: p.wr_id,
                    op: p.op,
                    local,
                    flags: p.flags,
                };
                if let Err(e) = q.ctx().nic().and_then(|nic| nic.post_send(q.qpn, &wr)) {
                    rc = crate::errno::refused("ibv_wr_complete", &e);
                    break;
                }
            }
        }
        b.clear();
        q.batch = b;
        rc
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ffi::ibv_qp_ex) {
    crate::guard::value("wr_abort", move || {
        // SAFETY: see above (a QP of ours).
        unsafe { qp_of(qp) }.batch.clear();
    })
}

unsafe extern "C" fn wr_send(qp: *mut ffi::ibv_qp_ex) {
    crate::guard::value("wr_send", move || {
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, SendOp::Send)
    })
}

unsafe extern "C" fn wr_send_imm(qp: *mut ffi::ibv_qp_ex, imm: u32) {
    crate::guard::value("wr_send_imm", move || {
        let op = SendOp::SendWithImm {
            imm: u32::from_be(imm),
        };
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, op)
    })
}

unsafe extern "C" fn wr_send_inv(qp: *mut ffi::ibv_qp_ex, rkey: u32) {
    crate::guard::value("wr_send_inv", move || {
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, SendOp::SendWithInv { rkey })
    })
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ffi::ibv_qp_ex, rkey: u32, va: u64) {
    crate::guard::value("wr_rdma_write", move || {
        let op = SendOp::Write {
            remote: Remote { va, rkey },
        };
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, op)
    })
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ffi::ibv_qp_ex, rkey: u32, va: u64, imm: u32) {
    crate::guard::value("wr_rdma_write_imm", move || {
        let op = SendOp::WriteWithImm {
            remote: Remote { va, rkey },
            imm: u32::from_be(imm),
        };
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, op)
    })
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ffi::ibv_qp_ex, rkey: u32, va: u64) {
    crate::guard::value("wr_rdma_read", move || {
        let op = SendOp::Read {
            remote: Remote { va, rkey },
        };
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, op)
    })
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    va: u64,
    compare: u64,
    swap: u64,
) {
    crate::guard::value("wr_atomic_cmp_swp", move || {
        let op = SendOp::CompareSwap {
            remote: Remote { va, rkey },
            compare,
            swap,
        };
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, op)
    })
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ffi::ibv_qp_ex, rkey: u32, va: u64, add: u64) {
    crate::guard::value("wr_atomic_fetch_add", move || {
        let op = SendOp::FetchAdd {
            remote: Remote { va, rkey },
            add,
        };
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, op)
    })
}

unsafe extern "C" fn wr_set_sge(qp: *mut ffi::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    crate::guard::value("wr_set_sge", move || {
        let sge = ffi::ibv_sge { addr, length, lkey };
        // SAFETY: a QP of ours; `sge` is one valid entry.
        unsafe { wr_set_sge_list(qp, 1, &sge) }
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ffi::ibv_qp_ex, n: usize, list: *const ffi::ibv_sge) {
    crate::guard::value("wr_set_sge_list", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        if q.batch.wrs.is_empty() || n > q.max_send_sge.min(MAX_SGE) {
            return fail(q, libc::EINVAL);
        }
        let b = &mut q.batch;
        let start = b.sges.len();
        for i in 0..n {
            // SAFETY: the program's list has `n` entries (the verbs contract).
            let s = unsafe { &*list.add(i) };
            b.sges.push(Sge {
                addr: s.addr,
                length: s.length,
                lkey: Lkey(s.lkey),
            });
        }
        let end = b.sges.len();
        if let Some(p) = b.wrs.last_mut() {
            p.local = LocalRef::Sges(start..end);
        }
    })
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ffi::ibv_qp_ex, addr: *mut c_void, length: usize) {
    crate::guard::value("wr_set_inline_data", move || {
        let buf = ffi::ibv_data_buf { addr, length };
        // SAFETY: a QP of ours; `buf` is one buffer the program gave.
        unsafe { wr_set_inline_data_list(qp, 1, &buf) }
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ffi::ibv_qp_ex,
    n: usize,
    list: *const ffi::ibv_data_buf,
) {
    crate::guard::value("wr_set_inline_data_list", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        let max = q.max_inline;
        if q.batch.wrs.is_empty() {
            return fail(q, libc::EINVAL);
        }
        let start = q.batch.inline.len();
        for i in 0..n {
            // SAFETY: the program's list has `n` buffers of `length` readable bytes each, and
            // they are read now, at post time, as IBV_SEND_INLINE data is.
            let d = unsafe { &*list.add(i) };
            if q.batch.inline.len() - start + d.length > max {
                return fail(q, libc::EINVAL);
            }
            // SAFETY: as above: `length` readable bytes at `addr`.
            let bytes = unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.length) };
            q.batch.inline.extend_from_slice(bytes);
        }
        let end = q.batch.inline.len();
        if let Some(p) = q.batch.wrs.last_mut() {
            p.local = LocalRef::Inline(start..end);
        }
    })
}

// The operations this NIC lacks: the batch fails with EOPNOTSUPP at `ibv_wr_complete`
// (a QP asking for them in `send_ops_flags` is refused at creation already).
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ffi::ibv_qp_ex,
    _: *mut ffi::ibv_mw,
    _: u32,
    _: *const ffi::ibv_mw_bind_info,
) {
    crate::guard::value("wr_bind_mw", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}
unsafe extern "C" fn wr_local_inv(qp: *mut ffi::ibv_qp_ex, _: u32) {
    crate::guard::value("wr_local_inv", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}
unsafe extern "C" fn wr_send_tso(qp: *mut ffi::ibv_qp_ex, _: *mut c_void, _: u16, _: u16) {
    crate::guard::value("wr_send_tso", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}
unsafe extern "C" fn wr_set_ud_addr(qp: *mut ffi::ibv_qp_ex, _: *mut ffi::ibv_ah, _: u32, _: u32) {
    crate::guard::value("wr_set_ud_addr", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ffi::ibv_qp_ex, _: u32) {
    crate::guard::value("wr_set_xrc_srqn", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}
unsafe extern "C" fn wr_atomic_write(qp: *mut ffi::ibv_qp_ex, _: u32, _: u64, _: *const c_void) {
    crate::guard::value("wr_atomic_write", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}

/// Fills the `ibv_wr_*` pointers of a new QP.
pub fn fill_ops(ex: &mut ffi::ibv_qp_ex) {
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    ex.wr_bind_mw = Some(wr_bind_mw);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_send_tso = Some(wr_send_tso);
    ex.wr_set_ud_addr = Some(wr_set_ud_addr);
    ex.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    ex.wr_atomic_write = Some(wr_atomic_write);
}
