//! Completion queues and channels. Every CQ is an `ibv_cq_ex` (its first part is the
//! `ibv_cq` layout, so `ibv_create_cq` and `ibv_create_cq_ex` give the same object), with
//! the extended polling functions (`ibv_start_poll`, `ibv_next_poll`, `ibv_wc_read_*`)
//! filled in. A completion channel is the verbs layer's: a real fd, readable while an
//! event waits, honouring O_NONBLOCK set by the program.

use crate::ctx::Ctx;
use crate::errno::{refused, set_errno};
use crate::ffi;
use libc::{c_int, c_uint, c_void};
use roce_emu::verbs::{
    CompChannel, Completion, NetworkHdr, Spin, WcOpcode, WcStatus, DEFAULT_SPIN_US,
};
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Completions taken from the engine at a time by the extended polling API (one engine
/// poll serves up to this many `ibv_next_poll` calls).
const BATCH: usize = 16;

/// How long one `ibv_poll_cq` may sleep on the port once the CQ has been idle for the spin
/// budget (see `idle`).
const IDLE_SLEEP: Duration = Duration::from_millis(1);

/// The spin budget: `ROCE_EMU_SPIN_US` microseconds (default `DEFAULT_SPIN_US`); 0 never
/// sleeps in `ibv_poll_cq` (a pure non-blocking poll, every call a system call).
fn spin_budget() -> Option<Duration> {
    static BUDGET: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| {
        let us = std::env::var("ROCE_EMU_SPIN_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(DEFAULT_SPIN_US);
        (us > 0).then(|| Duration::from_micros(us))
    })
}

#[repr(C)]
pub struct Chan {
    /// The C part (first: our pointer is its pointer), reached through [`Chan::c`]: only
    /// read after creation, but for `refcnt`, which CQ creation and destruction on any
    /// thread update atomically. `UnsafeCell<T>` has `T`'s layout.
    ch: UnsafeCell<ffi::ibv_comp_channel>,
    pub q: CompChannel,
    /// Our CQs on this channel, by engine handle (the event names the handle).
    pub cqs: Mutex<HashMap<u32, usize>>,
}

/// One CQ. Several threads may poll it at once, so the program's pointer only becomes a
/// shared `&Cq`: the C part, which `ibv_start_poll`/`ibv_next_poll` write (`status`,
/// `wr_id`) and the program writes too (`comp_events_completed` via `ibv_ack_cq_events`),
/// is in an `UnsafeCell` and reached through [`Cq::c`]; polling state is behind a lock.
impl Chan {
    /// The C part: used only through this pointer.
    fn c(&self) -> *mut ffi::ibv_comp_channel {
        self.ch.get()
    }

    /// `ibv_comp_channel::refcnt`, the CQs on the channel.
    fn refcnt(&self) -> &AtomicI32 {
        // SAFETY: an aligned i32 inside our live channel; every access of ours to it is
        // atomic (the program only reads it).
        unsafe { AtomicI32::from_ptr(&raw mut (*self.c()).refcnt) }
    }
}

#[repr(C)]
pub struct Cq {
    /// `UnsafeCell<T>` has `T`'s layout.
    ex: UnsafeCell<ffi::ibv_cq_ex>,
    pub id: u32,
    pub chan: *mut Chan,
    /// What polling keeps between calls. Behind a lock: programs may poll one CQ from
    /// several threads (rdma-core's providers lock their CQs too); uncontended, it costs
    /// a few nanoseconds of a poll that makes a system call.
    polled: Mutex<Polled>,
}

/// Completions taken from the engine and not yet handed out (the extended API takes a
/// batch at a time), the one `ibv_wc_read_*` reads, and the idle policy.
struct Polled {
    buf: [Completion; BATCH],
    head: usize,
    len: usize,
    cur: Completion,
    /// When the buffered batch left the engine (`clock::ticks`), and so the stamp of `cur`
    /// (`ibv_wc_read_completion_ts`).
    stamp: u64,
    cur_stamp: u64,
    spin: Option<Spin>,
}

impl Cq {
    /// # Safety
    /// `cq` is a CQ we created and have not destroyed.
    pub unsafe fn of<'a>(cq: *mut ffi::ibv_cq) -> &'a Cq {
        // SAFETY: every CQ we hand out is the first field of a #[repr(C)] Cq.
        unsafe { &*(cq as *const Cq) }
    }

    /// The C part: used only through this pointer.
    pub fn c(&self) -> *mut ffi::ibv_cq_ex {
        self.ex.get()
    }

    fn ctx(&self) -> &Ctx {
        // SAFETY: `context` is written once, at creation; the context outlives its CQs
        // (ibv_close_device after destroying them).
        unsafe { Ctx::of((*self.c()).context) }
    }

    fn polled(&self) -> std::sync::MutexGuard<'_, Polled> {
        self.polled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to `out.len()` completions: what the extended API buffered first, then the engine.
    fn take(&self, p: &mut Polled, out: &mut [Completion]) -> Result<usize, c_int> {
        let mut n = 0;
        while n < out.len() && p.len > 0 {
            out[n] = p.buf[p.head];
            p.head += 1;
            p.len -= 1;
            n += 1;
        }
        if n == out.len() {
            return Ok(n);
        }
        match self
            .ctx()
            .nic()
            .and_then(|nic| nic.poll_cq(self.id, &mut out[n..]))
        {
            Ok(m) => Ok(n + m),
            Err(e) if n > 0 => {
                tracing::debug!("poll_cq: {e}");
                Ok(n)
            }
            Err(e) => Err(refused("ibv_poll_cq", &e)),
        }
    }

    /// The next completion for the extended API, from the buffer or a new engine poll; it
    /// becomes the one `ibv_wc_read_*` reads.
    fn next(&self, p: &mut Polled) -> Result<Option<Completion>, c_int> {
        if p.len == 0 {
            let n = match self
                .ctx()
                .nic()
                .and_then(|nic| nic.poll_cq(self.id, &mut p.buf))
            {
                Ok(n) => n,
                Err(e) => return Err(refused("ibv_start_poll", &e)),
            };
            p.head = 0;
            p.len = n;
            if n > 0 {
                p.stamp = crate::clock::ticks();
            }
        }
        if p.len == 0 {
            return Ok(None);
        }
        let c = p.buf[p.head];
        p.head += 1;
        p.len -= 1;
        p.cur = c;
        p.cur_stamp = p.stamp;
        Ok(Some(c))
    }

    /// A poll found nothing. perftest and ibv_rc_pingpong busy-poll their CQs, and here
    /// every poll runs the NIC, a system call: two such programs on one machine, each
    /// spinning, take the CPU the other needs to answer (measured: ib_write_bw swinging
    /// between 0.3 and 1.0 of `roce-emu perf write`, which sleeps when idle). So, as the
    /// tools do (`driver::Spin`): poll for the spin budget after the CQ goes idle, then
    /// let one poll sleep on the port until a packet arrives (at most `IDLE_SLEEP`) before
    /// it answers. A program sees a poll that took a little longer, never a lost one.
    fn idle(&self, p: &mut Polled) {
        let Some(spin) = p.spin.as_mut() else {
            return;
        };
        if spin.keep_polling() {
            return;
        }
        if let Ok(nic) = self.ctx().nic() {
            let _ = nic.wait(IDLE_SLEEP);
        }
        spin.slept();
    }

    fn busy(p: &mut Polled) {
        if let Some(spin) = p.spin.as_mut() {
            spin.active();
        }
    }
}

pub fn status(s: WcStatus) -> ffi::ibv_wc_status::Type {
    use ffi::ibv_wc_status as t;
    match s {
        WcStatus::Success => t::IBV_WC_SUCCESS,
        WcStatus::LocLenErr => t::IBV_WC_LOC_LEN_ERR,
        WcStatus::LocQpOpErr => t::IBV_WC_LOC_QP_OP_ERR,
        WcStatus::LocProtErr => t::IBV_WC_LOC_PROT_ERR,
        WcStatus::WrFlushErr => t::IBV_WC_WR_FLUSH_ERR,
        WcStatus::BadRespErr => t::IBV_WC_BAD_RESP_ERR,
        WcStatus::RemInvReqErr => t::IBV_WC_REM_INV_REQ_ERR,
        WcStatus::RemAccessErr => t::IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemOpErr => t::IBV_WC_REM_OP_ERR,
        WcStatus::RetryExcErr => t::IBV_WC_RETRY_EXC_ERR,
        WcStatus::RnrRetryExcErr => t::IBV_WC_RNR_RETRY_EXC_ERR,
        WcStatus::MwBindErr => t::IBV_WC_MW_BIND_ERR,
    }
}

fn opcode(o: WcOpcode) -> ffi::ibv_wc_opcode::Type {
    use ffi::ibv_wc_opcode as t;
    match o {
        WcOpcode::Send => t::IBV_WC_SEND,
        WcOpcode::RdmaWrite => t::IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => t::IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => t::IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => t::IBV_WC_FETCH_ADD,
        WcOpcode::Recv => t::IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => t::IBV_WC_RECV_RDMA_WITH_IMM,
        WcOpcode::BindMw => t::IBV_WC_BIND_MW,
        WcOpcode::LocalInv => t::IBV_WC_LOCAL_INV,
    }
}

fn wc_flags(c: &Completion) -> c_uint {
    let mut f = 0;
    if c.imm.is_some() {
        f |= ffi::ibv_wc_flags::IBV_WC_WITH_IMM;
    }
    if c.invalidated_rkey.is_some() {
        f |= ffi::ibv_wc_flags::IBV_WC_WITH_INV;
    }
    if c.network_hdr.is_some() {
        f |= ffi::ibv_wc_flags::IBV_WC_GRH;
    }
    f
}

/// The service level a completion reports. RoCE carries none and rxe reports 0, but
/// UCX 1.13's UD transport reads `wc.sl` as mlx5 fills it: `uct_ud_iface_check_grh`
/// (`src/uct/ib/ud/base/ud_iface.h`) takes `(wc.sl & 7) == 2` to mean "the GRH slot holds
/// an IPv4 header" (mlx5's CQE L3 type) and otherwise compares the 16-byte IPv6 GID at
/// bytes 24..40, so on rxe every IPv4 RoCEv2 datagram fails its DGID check and is dropped
/// (fixed for other devices by UCX PR #10209, 2024). Reporting 2 for IPv4 receives makes
/// UCX's default configuration work, and costs other programs nothing:
/// `ibv_init_ah_from_wc` copies `sl` into the AH, where RoCE ignores it.
fn sl(c: &Completion) -> u8 {
    match c.network_hdr {
        Some(NetworkHdr::Ipv4) => 2,
        _ => c.sl,
    }
}

fn to_wc(c: &Completion) -> ffi::ibv_wc {
    // SAFETY: plain C data.
    let mut wc: ffi::ibv_wc = unsafe { std::mem::zeroed() };
    wc.wr_id = c.wr_id;
    wc.status = status(c.status);
    wc.opcode = opcode(c.opcode);
    wc.byte_len = c.byte_len;
    // The immediate travels in network order, as the bytes on the wire (__be32).
    if let Some(imm) = c.imm {
        wc.__bindgen_anon_1.imm_data = imm.to_be();
    } else if let Some(rkey) = c.invalidated_rkey {
        wc.__bindgen_anon_1.invalidated_rkey = rkey;
    }
    wc.qp_num = c.qpn;
    wc.src_qp = c.src_qp;
    wc.wc_flags = wc_flags(c);
    wc.sl = sl(c);
    wc
}

// ---- completion channels ------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    c: *mut ffi::ibv_context,
) -> *mut ffi::ibv_comp_channel {
    crate::guard::null("ibv_create_comp_channel", move || {
        // SAFETY: a context we opened.
        let ctx = unsafe { Ctx::of(c) };
        match ctx.nic().and_then(|nic| nic.create_comp_channel()) {
            Ok(q) => {
                let ch = ffi::ibv_comp_channel {
                    context: c,
                    fd: q.fd().as_raw_fd(),
                    refcnt: 0,
                };
                let obj = Box::new(Chan {
                    ch: UnsafeCell::new(ch),
                    q,
                    cqs: Mutex::new(HashMap::new()),
                });
                Box::into_raw(obj) as *mut ffi::ibv_comp_channel
            }
            Err(e) => {
                set_errno(refused("ibv_create_comp_channel", &e));
                null_mut()
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ffi::ibv_comp_channel) -> c_int {
    crate::guard::minus_one("ibv_destroy_comp_channel", move || {
        // SAFETY: a channel we created.
        let obj = unsafe { &*(ch as *const Chan) };
        if obj.refcnt().load(Ordering::Acquire) > 0 {
            set_errno(libc::EBUSY);
            return -1;
        }
        // SAFETY: allocated by Box in ibv_create_comp_channel; no CQ uses it.
        drop(unsafe { Box::from_raw(ch as *mut Chan) });
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ffi::ibv_comp_channel,
    cq: *mut *mut ffi::ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    crate::guard::minus_one("ibv_get_cq_event", move || {
        // SAFETY: a channel we created; `cq` and `cq_context` are the program's out-parameters.
        let obj = unsafe { &*(ch as *const Chan) };
        // SAFETY: `context` is written once, at creation.
        let context = unsafe { (*obj.c()).context };
        // SAFETY: the channel's context outlives it.
        let ctx = unsafe { Ctx::of(context) };
        let nic = match ctx.nic() {
            Ok(n) => n,
            Err(e) => {
                set_errno(refused("ibv_get_cq_event", &e));
                return -1;
            }
        };
        loop {
            let id = match obj.q.try_get_event() {
                Some(id) => id,
                None => {
                    // The program sleeps now (here, or in poll(2) on the fd after EAGAIN):
                    // the progress thread takes the NIC at once.
                    let _ = nic.release();
                    // A read of the fd, as rdma-core's: EAGAIN when the program made it
                    // O_NONBLOCK, EINTR when a signal handler without SA_RESTART ran.
                    match obj.q.wait_event() {
                        Ok(id) => id,
                        Err(e) => {
                            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                            return -1;
                        }
                    }
                }
            };
            // An event of a CQ destroyed since is dropped, as the kernel drops it.
            let Some(&p) = obj.cqs.lock().unwrap().get(&id) else {
                continue;
            };
            let ours = p as *mut Cq;
            // SAFETY: the program's out-parameters; `ours` is live (destroy_cq removes it from
            // this map before freeing it).
            unsafe {
                *cq = ours as *mut ffi::ibv_cq;
                *cq_context = (*(*ours).c()).cq_context;
            }
            return 0;
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ffi::ibv_cq, nevents: c_uint) {
    crate::guard::value("ibv_ack_cq_events", move || {
        // SAFETY: a CQ we created; the counter is a u32 the program only reads.
        let counter = unsafe { AtomicU32::from_ptr(&raw mut (*cq).comp_events_completed) };
        counter.fetch_add(nevents, Ordering::AcqRel);
    })
}

// ---- CQs ----------------------------------------------------------------------------

/// # Safety
/// `c` is a context we opened; `channel` NULL or a channel we created on it.
unsafe fn create(
    c: *mut ffi::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ffi::ibv_comp_channel,
    comp_vector: u32,
) -> *mut Cq {
    // SAFETY: a context we opened, a channel we created (or NULL).
    let ctx = unsafe { Ctx::of(c) };
    let chan = channel as *mut Chan;
    // A vector beyond the context's `num_comp_vectors` is EINVAL, as in the kernel's
    // ib_uverbs_create_cq.
    if !(1..=16_384).contains(&cqe) || comp_vector >= ctx.v.context.num_comp_vectors as u32 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: a channel we created, which outlives its CQs (destroy refuses while used).
    let q = (!chan.is_null()).then(|| unsafe { &(*chan).q });
    let id = match ctx.nic().and_then(|nic| nic.create_cq(cqe as usize, q)) {
        Ok(id) => id,
        Err(e) => {
            set_errno(refused("ibv_create_cq", &e));
            return null_mut();
        }
    };
    // SAFETY: plain C data, pthread objects whose zero value is their initialiser (glibc).
    let mut ex: ffi::ibv_cq_ex = unsafe { std::mem::zeroed() };
    ex.context = c;
    ex.channel = channel;
    ex.cq_context = cq_context;
    ex.handle = id;
    ex.cqe = cqe;
    ex.start_poll = Some(start_poll);
    ex.next_poll = Some(next_poll);
    ex.end_poll = Some(end_poll);
    ex.read_opcode = Some(read_opcode);
    ex.read_vendor_err = Some(read_zero_u32);
    ex.read_byte_len = Some(read_byte_len);
    ex.read_imm_data = Some(read_imm_data);
    ex.read_qp_num = Some(read_qp_num);
    ex.read_src_qp = Some(read_src_qp);
    ex.read_wc_flags = Some(read_wc_flags);
    ex.read_slid = Some(read_zero_u32);
    ex.read_sl = Some(read_sl);
    ex.read_dlid_path_bits = Some(read_zero_u8);
    ex.read_completion_ts = Some(read_completion_ts);
    let obj = Box::into_raw(Box::new(Cq {
        ex: UnsafeCell::new(ex),
        id,
        chan,
        polled: Mutex::new(Polled {
            buf: [Completion::default(); BATCH],
            head: 0,
            len: 0,
            cur: Completion::default(),
            stamp: 0,
            cur_stamp: 0,
            spin: spin_budget().map(Spin::new),
        }),
    }));
    ctx.cqs.lock().unwrap().insert(id, obj as usize);
    if !chan.is_null() {
        // SAFETY: as above, a live channel of ours.
        unsafe {
            (*chan).refcnt().fetch_add(1, Ordering::AcqRel);
            (*chan).cqs.lock().unwrap().insert(id, obj as usize);
        }
    }
    obj
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    c: *mut ffi::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ffi::ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ffi::ibv_cq {
    crate::guard::null("ibv_create_cq", move || {
        // A negative vector is as out of range as a too large one.
        let vector = u32::try_from(comp_vector).unwrap_or(u32::MAX);
        // SAFETY: the program's context and channel (or NULL), per the verbs contract.
        unsafe { create(c, cqe, cq_context, channel, vector) as *mut ffi::ibv_cq }
    })
}

/// `verbs_context::create_cq_ex`. Completion timestamps are the library's (`clock`); wall
/// clock timestamps, VLAN, flow tags and tag matching are not reported by this NIC: asking
/// for them is EOPNOTSUPP, as on rxe.
pub unsafe extern "C" fn create_cq_ex(
    c: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_cq_init_attr_ex,
) -> *mut ffi::ibv_cq_ex {
    crate::guard::null("create_cq_ex", move || {
        // SAFETY: the program's attributes.
        let a = unsafe { &*attr };
        let known = u64::from(ffi::IBV_WC_STANDARD_FLAGS)
            | u64::from(ffi::ibv_create_cq_wc_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
        if a.wc_flags & !known != 0 {
            set_errno(libc::EOPNOTSUPP);
            return null_mut();
        }
        // Flags (single-threaded, ignore overrun) and parent domains: not yet.
        if a.comp_mask != 0 {
            set_errno(libc::EOPNOTSUPP);
            return null_mut();
        }
        let cqe = a.cqe.min(i32::MAX as u32) as c_int;
        // SAFETY: the program's context and channel (or NULL), per the verbs contract.
        unsafe { create(c, cqe, a.cq_context, a.channel, a.comp_vector) as *mut ffi::ibv_cq_ex }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ffi::ibv_cq) -> c_int {
    crate::guard::errno("ibv_destroy_cq", move || {
        // SAFETY: a CQ we created.
        let obj = unsafe { Cq::of(cq) };
        let ctx = obj.ctx();
        if ctx.inherited() {
            // A forked child (see `Ctx::inherited`): our object goes, the NIC and the
            // maps (whose locks a parent's thread may have held at the fork) are left;
            // the channel's count drops (an atomic), so it can be destroyed in turn.
            // SAFETY: the CQ's channel outlives it; allocated by Box in create, and the
            // program stops using the CQ.
            unsafe {
                if !obj.chan.is_null() {
                    (*obj.chan).refcnt().fetch_sub(1, Ordering::AcqRel);
                }
                drop(Box::from_raw(cq as *mut Cq));
            }
            return 0;
        }
        if let Err(e) = ctx.nic().and_then(|nic| nic.destroy_cq(obj.id)) {
            return refused("ibv_destroy_cq", &e);
        }
        ctx.cqs.lock().unwrap().remove(&obj.id);
        if !obj.chan.is_null() {
            // SAFETY: the CQ's channel outlives it (destroying it is refused while used).
            unsafe {
                (*obj.chan).cqs.lock().unwrap().remove(&obj.id);
                (*obj.chan).refcnt().fetch_sub(1, Ordering::AcqRel);
            }
        }
        // SAFETY: allocated by Box in create; the program stops using it.
        drop(unsafe { Box::from_raw(cq as *mut Cq) });
        0
    })
}

/// `ibv_resize_cq`: room for `cqe` completions, keeping every one the CQ holds (rxe
/// `rxe_resize_cq`). EINVAL, changing nothing, for `cqe` outside 1..=max_cqe or below
/// the completions held, counting those the extended API has taken from the engine and
/// not handed out yet (rxe `rxe_cq_chk_attr`). `cq->cqe` is the new size, as rxe reports.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ffi::ibv_cq, cqe: c_int) -> c_int {
    crate::guard::errno("ibv_resize_cq", move || {
        // SAFETY: a CQ we created.
        let obj = unsafe { Cq::of(cq) };
        if !(1..=16_384).contains(&cqe) {
            return libc::EINVAL;
        }
        // The polling lock: no poll moves completions between the engine and the buffer
        // meanwhile.
        let p = obj.polled();
        let r = obj
            .ctx()
            .nic()
            .and_then(|nic| nic.resize_cq(obj.id, cqe as usize, p.len));
        if let Err(e) = r {
            return refused("ibv_resize_cq", &e);
        }
        // SAFETY: our CQ's C part; the program reads `cqe` after the call returns.
        unsafe { (*obj.c()).cqe = cqe };
        0
    })
}

/// `ibv_context_ops::poll_cq`.
pub unsafe extern "C" fn poll_cq(cq: *mut ffi::ibv_cq, n: c_int, wc: *mut ffi::ibv_wc) -> c_int {
    crate::guard::minus_one("poll_cq", move || {
        // SAFETY: a CQ we created; `wc` has room for `n` entries.
        let obj = unsafe { Cq::of(cq) };
        let want = n.max(0) as usize;
        let mut got = 0usize;
        let mut buf = [Completion::default(); 32];
        let mut slept = false;
        let mut p = obj.polled();
        while got < want {
            let chunk = (want - got).min(buf.len());
            let m = match obj.take(&mut p, &mut buf[..chunk]) {
                Ok(m) => m,
                Err(e) if got == 0 => return -e,
                Err(_) => break,
            };
            for (i, c) in buf[..m].iter().enumerate() {
                // SAFETY: `wc` has room for `n` entries and `got + i < n`.
                unsafe { wc.add(got + i).write(to_wc(c)) };
            }
            got += m;
            if m == 0 && got == 0 && !slept {
                // Idle: maybe sleep on the port, then look once more.
                obj.idle(&mut p);
                slept = true;
                continue;
            }
            if m < chunk {
                break;
            }
        }
        if got > 0 {
            Cq::busy(&mut p);
        }
        got as c_int
    })
}

/// `ibv_context_ops::req_notify_cq`.
pub unsafe extern "C" fn req_notify_cq(cq: *mut ffi::ibv_cq, solicited_only: c_int) -> c_int {
    crate::guard::errno("req_notify_cq", move || {
        // SAFETY: a CQ we created.
        let obj = unsafe { Cq::of(cq) };
        match obj
            .ctx()
            .nic()
            .and_then(|nic| nic.req_notify_cq(obj.id, solicited_only != 0))
        {
            Ok(()) => 0,
            Err(e) => refused("ibv_req_notify_cq", &e),
        }
    })
}

// ---- extended polling (ibv_cq_ex) -----------------------------------------------------

/// The next completion into the CQ's public fields. Only `ibv_start_poll` may sleep when
/// idle: `ibv_next_poll` finding nothing ends a batch the program is reading.
///
/// # Safety
/// `cq` is a CQ we created.
unsafe fn step(cq: *mut ffi::ibv_cq_ex, may_sleep: bool) -> c_int {
    // SAFETY: a CQ we created (ibv_cq_ex is the first field of Cq).
    let obj = unsafe { Cq::of(cq as *mut ffi::ibv_cq) };
    let mut p = obj.polled();
    let mut next = obj.next(&mut p);
    if matches!(next, Ok(None)) && may_sleep {
        obj.idle(&mut p);
        next = obj.next(&mut p);
    }
    match next {
        Ok(Some(c)) => {
            Cq::busy(&mut p);
            // SAFETY: the CQ's public fields, which the program reads between
            // ibv_start_poll and ibv_end_poll; written under the CQ's lock.
            unsafe {
                (*cq).status = status(c.status);
                (*cq).wr_id = c.wr_id;
            }
            0
        }
        Ok(None) => libc::ENOENT,
        Err(e) => e,
    }
}

unsafe extern "C" fn start_poll(
    cq: *mut ffi::ibv_cq_ex,
    attr: *mut ffi::ibv_poll_cq_attr,
) -> c_int {
    crate::guard::errno("start_poll", move || {
        // SAFETY: the program's attributes (or NULL).
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        // SAFETY: reached only through our CQs' start_poll pointer.
        unsafe { step(cq, true) }
    })
}

unsafe extern "C" fn next_poll(cq: *mut ffi::ibv_cq_ex) -> c_int {
    crate::guard::errno("next_poll", move || {
        // SAFETY: reached only through our CQs' next_poll pointer.
        unsafe { step(cq, false) }
    })
}

unsafe extern "C" fn end_poll(_cq: *mut ffi::ibv_cq_ex) {
    crate::guard::value("end_poll", move || {})
}

/// The completion `ibv_wc_read_*` reads (a copy).
///
/// # Safety
/// `cq` is a CQ we created; every `read_*` below is reached only through our CQs'
/// pointers.
unsafe fn cur(cq: *mut ffi::ibv_cq_ex) -> Completion {
    // SAFETY: a CQ we created.
    unsafe { Cq::of(cq as *mut ffi::ibv_cq) }.polled().cur
}

unsafe extern "C" fn read_opcode(cq: *mut ffi::ibv_cq_ex) -> ffi::ibv_wc_opcode::Type {
    crate::guard::value("read_opcode", move || {
        // SAFETY: see `cur`.
        opcode(unsafe { cur(cq) }.opcode)
    })
}
unsafe extern "C" fn read_byte_len(cq: *mut ffi::ibv_cq_ex) -> u32 {
    crate::guard::value("read_byte_len", move || {
        // SAFETY: see `cur`.
        unsafe { cur(cq) }.byte_len
    })
}
unsafe extern "C" fn read_imm_data(cq: *mut ffi::ibv_cq_ex) -> u32 {
    crate::guard::value("read_imm_data", move || {
        // SAFETY: see `cur`.
        let c = unsafe { cur(cq) };
        c.imm.map(u32::to_be).or(c.invalidated_rkey).unwrap_or(0)
    })
}
unsafe extern "C" fn read_qp_num(cq: *mut ffi::ibv_cq_ex) -> u32 {
    crate::guard::value("read_qp_num", move || {
        // SAFETY: see `cur`.
        unsafe { cur(cq) }.qpn
    })
}
unsafe extern "C" fn read_src_qp(cq: *mut ffi::ibv_cq_ex) -> u32 {
    crate::guard::value("read_src_qp", move || {
        // SAFETY: see `cur`.
        unsafe { cur(cq) }.src_qp
    })
}
unsafe extern "C" fn read_wc_flags(cq: *mut ffi::ibv_cq_ex) -> c_uint {
    crate::guard::value("read_wc_flags", move || {
        // SAFETY: see `cur`.
        wc_flags(&unsafe { cur(cq) })
    })
}
unsafe extern "C" fn read_sl(cq: *mut ffi::ibv_cq_ex) -> u8 {
    crate::guard::value("read_sl", move || {
        // SAFETY: see `cur`.
        sl(&unsafe { cur(cq) })
    })
}
unsafe extern "C" fn read_completion_ts(cq: *mut ffi::ibv_cq_ex) -> u64 {
    crate::guard::value("read_completion_ts", move || {
        // SAFETY: see `cur`.
        unsafe { Cq::of(cq as *mut ffi::ibv_cq) }.polled().cur_stamp
    })
}
unsafe extern "C" fn read_zero_u32(_cq: *mut ffi::ibv_cq_ex) -> u32 {
    crate::guard::value("read_zero_u32", move || 0)
}
unsafe extern "C" fn read_zero_u8(_cq: *mut ffi::ibv_cq_ex) -> u8 {
    crate::guard::value("read_zero_u8", move || 0)
}
