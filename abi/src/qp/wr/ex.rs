//! The extended post API: `ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`, ...,
//! `ibv_wr_complete` (inline through `ibv_qp_ex`), which perftest uses by default. Work
//! requests are built into a per-QP batch under the QP's send lock and posted together.

use super::{flags_of, post, ud_dest, MAX_SGE};
use crate::ffi;
use crate::qp::Qp;
use libc::{c_int, c_void};
use roce_emu::verbs::{Lkey, Local, Remote, SendFlags, SendOp, SendWr, Sge, UdDest};
use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
    /// UD: the destination `ibv_wr_set_ud_addr` gave.
    ud: Option<UdDest>,
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

/// A QP's send side: the lock rdma-core's providers take around posting (mlx5's
/// `sq.lock`), held from `ibv_wr_start` to `ibv_wr_complete`/`ibv_wr_abort` and for the
/// whole list of an `ibv_post_send`, and the `ibv_wr_*` batch it guards. So two threads
/// posting to one QP (libibverbs allows it) each post whole batches, and the batch is
/// only ever touched by the thread that holds the lock: no `&mut` to it exists anywhere
/// else.
///
/// The lock is a spin lock owned by a thread token, not a `Mutex`: it is taken in one C
/// call and released in another, as the providers' is. An `ibv_wr_*` call from a thread
/// that did not `ibv_wr_start` (a program bug) is ignored and fails the holder's batch
/// with EINVAL at `ibv_wr_complete`, never touching the batch concurrently.
#[derive(Default)]
pub struct SendSide {
    /// 0: free; else the token of the thread holding it.
    owner: AtomicUsize,
    /// Whether an `ibv_wr_*` call came from a thread not holding the lock.
    stray: AtomicBool,
    batch: UnsafeCell<Batch>,
}

/// This thread's token: the address of a thread-local (non-zero, distinct per live thread).
fn token() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| t as *const u8 as usize)
}

/// Spins before yielding the CPU while another thread holds a send side.
const SPINS: u32 = 64;

impl SendSide {
    /// Takes the lock for this thread; `false` if this thread held it already (nothing to
    /// release then).
    fn acquire(&self) -> bool {
        let me = token();
        let mut spins = 0u32;
        loop {
            match self
                .owner
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(cur) if cur == me => return false,
                Err(_) => {
                    // Another thread posts to this QP: it releases the lock at the end
                    // of its batch or list (the program's calls, as with rdma-core).
                    spins += 1;
                    if spins < SPINS {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }

    fn release(&self) {
        self.owner.store(0, Ordering::Release);
    }

    /// The lock for the length of one call: released when the guard drops (also when
    /// a panic unwinds to the ABI guard), unless this thread held it before.
    pub(crate) fn lock(&self) -> Held<'_> {
        Held(self, self.acquire())
    }

    fn held_here(&self) -> bool {
        self.owner.load(Ordering::Relaxed) == token()
    }

    /// Runs `f` on the batch if this thread holds the lock; else notes a stray call.
    fn with<R>(&self, f: impl FnOnce(&mut Batch) -> R) -> Option<R> {
        if !self.held_here() {
            tracing::debug!("ibv_wr_* outside this thread's ibv_wr_start: ignored");
            self.stray.store(true, Ordering::Relaxed);
            return None;
        }
        // SAFETY: this thread holds the lock (checked), and only the holder makes a
        // reference to the batch, for the length of this call.
        Some(f(unsafe { &mut *self.batch.get() }))
    }
}

/// See [`SendSide::lock`].
pub(crate) struct Held<'a>(&'a SendSide, bool);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.release();
        }
    }
}

// SAFETY: the batch is reached only by the thread holding `owner` (see `with`); the rest
// are atomics.
unsafe impl Sync for SendSide {}

/// Ours, from the `ibv_qp_ex` an `ibv_wr_*` call names.
///
/// # Safety
/// `qp` must be a QP we created (only ours carry these function pointers), not destroyed.
unsafe fn qp_of<'a>(qp: *mut ffi::ibv_qp_ex) -> &'a Qp {
    // SAFETY: ibv_qp_ex is the first field of our Qp; the rest is the caller's promise.
    unsafe { Qp::of(qp as *mut ffi::ibv_qp) }
}

fn push(q: &Qp, op: SendOp) {
    // SAFETY: the program's own fields of its ibv_qp_ex, which it sets before this call on
    // this thread; read through the raw pointer, no reference made.
    let (wr_id, wr_flags) = unsafe { ((*q.c()).wr_id, (*q.c()).wr_flags) };
    let p = Pending {
        wr_id,
        flags: flags_of(wr_flags),
        op,
        local: LocalRef::Sges(0..0),
        ud: None,
    };
    q.send.with(|b| b.wrs.push(p));
}

fn fail(q: &Qp, e: c_int) {
    q.send.with(|b| {
        if b.err == 0 {
            b.err = e;
        }
    });
}

// Every `ibv_wr_*` entry below is reached only through the pointers `fill_ops` puts in our
// QPs, so its `qp` is one of ours: that is the SAFETY of each `qp_of` call.

unsafe extern "C" fn wr_start(qp: *mut ffi::ibv_qp_ex) {
    crate::guard::value("wr_start", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        q.send.acquire();
        q.send.with(Batch::clear);
    })
}

unsafe extern "C" fn wr_complete(qp: *mut ffi::ibv_qp_ex) -> c_int {
    crate::guard::errno("wr_complete", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        if !q.send.held_here() {
            return libc::EINVAL;
        }
        // Released at the end, also if a panic unwinds from here.
        let _held = Held(&q.send, true);
        let stray = q.send.stray.swap(false, Ordering::Relaxed);
        let rc = q
            .send
            .with(|b| {
                let mut rc = if stray { libc::EINVAL } else { b.err };
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
                        if let Err(e) = post(q, &wr, p.ud.as_ref(), "ibv_wr_complete") {
                            rc = e;
                            break;
                        }
                    }
                }
                b.clear();
                rc
            })
            .unwrap_or(libc::EINVAL);
        rc
    })
}

unsafe extern "C" fn wr_abort(qp: *mut ffi::ibv_qp_ex) {
    crate::guard::value("wr_abort", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        if q.send.with(Batch::clear).is_some() {
            q.send.stray.store(false, Ordering::Relaxed);
            q.send.release();
        }
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
        unsafe { set_sges(qp_of(qp), 1, &sge) }
    })
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ffi::ibv_qp_ex, n: usize, list: *const ffi::ibv_sge) {
    crate::guard::value("wr_set_sge_list", move || {
        // SAFETY: a QP of ours; the program's list has `n` entries.
        unsafe { set_sges(qp_of(qp), n, list) }
    })
}

/// # Safety
/// `list` has `n` entries (the verbs contract).
unsafe fn set_sges(q: &Qp, n: usize, list: *const ffi::ibv_sge) {
    let max = q.max_send_sge.min(MAX_SGE);
    q.send.with(|b| {
        if b.wrs.is_empty() || n > max {
            if b.err == 0 {
                b.err = libc::EINVAL;
            }
            return;
        }
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
    });
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ffi::ibv_qp_ex, addr: *mut c_void, length: usize) {
    crate::guard::value("wr_set_inline_data", move || {
        let buf = ffi::ibv_data_buf { addr, length };
        // SAFETY: a QP of ours; `buf` is one buffer the program gave.
        unsafe { set_inline(qp_of(qp), 1, &buf) }
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ffi::ibv_qp_ex,
    n: usize,
    list: *const ffi::ibv_data_buf,
) {
    crate::guard::value("wr_set_inline_data_list", move || {
        // SAFETY: a QP of ours; the program's list has `n` buffers.
        unsafe { set_inline(qp_of(qp), n, list) }
    })
}

/// # Safety
/// `list` has `n` buffers of `length` readable bytes each (the verbs contract).
unsafe fn set_inline(q: &Qp, n: usize, list: *const ffi::ibv_data_buf) {
    let max = q.max_inline;
    q.send.with(|b| {
        let fail = |b: &mut Batch| {
            if b.err == 0 {
                b.err = libc::EINVAL;
            }
        };
        if b.wrs.is_empty() {
            return fail(b);
        }
        let start = b.inline.len();
        for i in 0..n {
            // SAFETY: the program's list has `n` buffers of `length` readable bytes each,
            // and they are read now, at post time, as IBV_SEND_INLINE data is.
            let d = unsafe { &*list.add(i) };
            if b.inline.len() - start + d.length > max {
                return fail(b);
            }
            // SAFETY: as above: `length` readable bytes at `addr`.
            let bytes = unsafe { std::slice::from_raw_parts(d.addr as *const u8, d.length) };
            b.inline.extend_from_slice(bytes);
        }
        let end = b.inline.len();
        if let Some(p) = b.wrs.last_mut() {
            p.local = LocalRef::Inline(start..end);
        }
    });
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ffi::ibv_qp_ex,
    mw: *mut ffi::ibv_mw,
    rkey: u32,
    info: *const ffi::ibv_mw_bind_info,
) {
    crate::guard::value("wr_bind_mw", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        if info.is_null() {
            return fail(q, libc::EINVAL);
        }
        // SAFETY: the program's window and bind information (its region ours).
        match unsafe { super::bind_op(mw, rkey, &*info) } {
            Ok(op) => push(q, op),
            Err(e) => fail(q, e),
        }
    })
}
unsafe extern "C" fn wr_local_inv(qp: *mut ffi::ibv_qp_ex, rkey: u32) {
    crate::guard::value("wr_local_inv", move || {
        // SAFETY: see above (a QP of ours).
        push(unsafe { qp_of(qp) }, SendOp::LocalInv { rkey })
    })
}

// The operations this NIC lacks: the batch fails with EOPNOTSUPP at `ibv_wr_complete`
// (a QP asking for them in `send_ops_flags` is refused at creation already).
unsafe extern "C" fn wr_send_tso(qp: *mut ffi::ibv_qp_ex, _: *mut c_void, _: u16, _: u16) {
    crate::guard::value("wr_send_tso", move || {
        // SAFETY: see above (a QP of ours).
        fail(unsafe { qp_of(qp) }, libc::EOPNOTSUPP)
    })
}
unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ffi::ibv_qp_ex,
    ah: *mut ffi::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    crate::guard::value("wr_set_ud_addr", move || {
        // SAFETY: see above (a QP of ours).
        let q = unsafe { qp_of(qp) };
        match ud_dest(ah, remote_qpn, remote_qkey) {
            Ok(d) => {
                q.send.with(|b| match b.wrs.last_mut() {
                    Some(p) => p.ud = Some(d),
                    None => b.err = libc::EINVAL,
                });
            }
            Err(e) => fail(q, e),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The send lock: one holder at a time, whole batches; another thread's `ibv_wr_*`
    /// call never reaches the batch (it is noted, and fails the holder's batch).
    #[test]
    fn the_batch_belongs_to_the_thread_holding_the_lock() {
        let side = SendSide::default();
        assert!(side.acquire());
        assert!(!side.acquire(), "this thread holds it already");
        side.with(|b| b.err = 7).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(side.with(|b| b.err = 9).is_none(), "not the holder");
                assert!(!side.held_here());
            });
        });
        assert!(side.stray.load(Ordering::Relaxed));
        assert_eq!(
            side.with(|b| b.err),
            Some(7),
            "the stray call changed nothing"
        );
        // A second thread waits for the lock, then has it to itself.
        let got = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _held = side.lock();
                got.store(true, Ordering::SeqCst);
                assert_eq!(side.with(|b| b.err), Some(7));
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(
                !got.load(Ordering::SeqCst),
                "waited while this thread held it"
            );
            side.release();
        });
        assert!(got.load(Ordering::SeqCst));
        assert!(
            side.acquire(),
            "released when the other thread's guard dropped"
        );
        side.release();
    }
}
