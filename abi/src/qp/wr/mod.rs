//! Posting work: `ibv_post_send`/`ibv_post_recv` (inline through `ibv_context::ops`) and
//! the extended post API (`ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`, ...,
//! `ibv_wr_complete`, inline through `ibv_qp_ex`), which perftest uses by default: `ex.rs`.

use crate::ffi;
use crate::qp::Qp;
use libc::{c_int, c_uint};
use roce_emu::verbs::{
    Access, Lkey, Local, MwBind, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest,
};

mod ex;
pub use ex::{fill_ops, SendSide};

use crate::sge::{sges, MAX_SGE};
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
            o::IBV_WR_LOCAL_INV => SendOp::LocalInv {
                rkey: w.__bindgen_anon_1.invalidate_rkey,
            },
            o::IBV_WR_BIND_MW => {
                let b = &w.__bindgen_anon_2.bind_mw;
                bind_op(b.mw, b.rkey, &b.bind_info)?
            }
            // TSO, ATOMIC_WRITE, FLUSH: not on this NIC yet.
            _ => return Err(libc::EOPNOTSUPP),
        })
    }
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
    // Local operations (BIND_MW, LOCAL_INV) carry no data: their SGE fields are not read.
    let n = if op.is_local() {
        0
    } else {
        // SAFETY: `w` is the program's work request, its list `num_sge` long.
        unsafe { sges(w.sg_list, w.num_sge, &mut list) }?
    };
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
    let ud = if qp.ud {
        // SAFETY: a UD QP's work request fills `wr.ud` (the verbs contract).
        let u = unsafe { w.wr.ud };
        Some(ud_dest(u.ah, u.remote_qpn, u.remote_qkey)?)
    } else {
        None
    };
    post(qp, &wr, ud.as_ref(), "ibv_post_send")
}

/// Where a UD send goes: the address handle's address, the remote QPN and Q_Key.
fn ud_dest(ah: *mut ffi::ibv_ah, remote_qpn: u32, remote_qkey: u32) -> Result<UdDest, c_int> {
    if ah.is_null() {
        tracing::debug!("ibv_post_send: a UD send without an address handle");
        return Err(libc::EINVAL);
    }
    // SAFETY: an address handle the program created with ibv_create_ah (ours).
    let ah = unsafe { crate::ah::Ah::of(ah) };
    Ok(UdDest {
        dest_ip: ah.dest_ip,
        remote_qpn: remote_qpn & 0xff_ffff,
        remote_qkey,
    })
}

/// Hands one work request to the NIC (a UD one with its destination).
fn post(qp: &Qp, wr: &SendWr<'_>, ud: Option<&UdDest>, call: &str) -> Result<(), c_int> {
    qp.ctx()
        .nic()
        .and_then(|nic| match ud {
            Some(d) => nic.post_send_ud(qp.qpn, wr, d),
            None => nic.post_send(qp.qpn, wr),
        })
        .map_err(|e| crate::errno::refused(call, &e))
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
        // The whole list under the send lock, as the providers post it: another thread's
        // list or ibv_wr_* batch goes before or after it, not into it.
        let _held = obj.send.lock();
        post_list(obj, wr, bad)
    })
}

/// Posts the list at `wr`; 0, or the errno of the first refused request (then `*bad`).
fn post_list(obj: &Qp, wr: *mut ffi::ibv_send_wr, bad: *mut *mut ffi::ibv_send_wr) -> c_int {
    {
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: the program's list, each `next` NULL or its next request.
            let w = unsafe { &*cur };
            // SAFETY: the program's work request (its SGE list and inline data).
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
    }
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

/// The BIND_MW operation binding `mw` (its current key `(*mw).rkey`) as `info` says, with
/// new key `rkey`. EINVAL for access bits no window has.
///
/// # Safety
/// `mw` is a window of ours; `info.mr` is NULL or a region of ours.
pub unsafe fn bind_op(
    mw: *const ffi::ibv_mw,
    rkey: u32,
    info: &ffi::ibv_mw_bind_info,
) -> Result<SendOp, c_int> {
    use ffi::ibv_access_flags as f;
    if mw.is_null() {
        return Err(libc::EINVAL);
    }
    let flags = info.mw_access_flags;
    let rights = f::IBV_ACCESS_LOCAL_WRITE
        | f::IBV_ACCESS_REMOTE_WRITE
        | f::IBV_ACCESS_REMOTE_READ
        | f::IBV_ACCESS_REMOTE_ATOMIC;
    if flags & !(rights | f::IBV_ACCESS_ZERO_BASED) != 0 {
        return Err(libc::EINVAL);
    }
    let access = Access::from_bits(flags & rights).ok_or(libc::EINVAL)?;
    let mr_lkey = if info.mr.is_null() {
        0
    } else {
        // SAFETY: a region of ours (the caller's promise).
        unsafe { (*info.mr).lkey }
    };
    Ok(SendOp::BindMw {
        // SAFETY: a window of ours (the caller's promise).
        mw_rkey: unsafe { (*mw).rkey },
        new_rkey: rkey,
        bind: MwBind {
            mr_lkey: Lkey(mr_lkey),
            va: info.addr,
            length: info.length,
            access,
            zero_based: flags & f::IBV_ACCESS_ZERO_BASED != 0,
        },
    })
}
