//! libibverbs, as Debian's librdmacm uses it: through its C symbols (NEEDED
//! libibverbs.so.1, ours), so `id->verbs` is the program's own `ibv_context` for the
//! device, and one context and one PD per device are shared by every id (`cma_device`).

use crate::ffi::*;
use libc::{c_char, c_int, c_void};
use roce_emu::verbs::cm::{self, CmDevice, CmError};
use std::ffi::CStr;
use std::sync::{Mutex, OnceLock};

extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char;
    pub fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
}

/// One device: the connection manager's view and the shared verbs objects.
pub struct Dev {
    pub cm: CmDevice,
    /// `ibv_device*` of the program's device list.
    ibv: usize,
    /// `ibv_context*` and `ibv_pd*`, opened at first use (0 until then).
    opened: Mutex<Option<(usize, usize, u8, u8)>>,
}

/// The devices with a connection manager, in device-list order (`ucma_init`).
pub struct Devs {
    pub list: Vec<Dev>,
}

static DEVS: OnceLock<Result<Devs, String>> = OnceLock::new();

/// The device list, made once (`ucma_init`/`sync_devices_list`): libibverbs' devices
/// matched by name to roce-emu's configuration. No device: ENODEV, as librdmacm.
pub fn devs() -> Result<&'static Devs, CmError> {
    let r = DEVS.get_or_init(|| {
        let cms = cm::devices().map_err(|e| e.to_string())?;
        let mut n: c_int = 0;
        // SAFETY: ibv_get_device_list writes the count and returns a NULL-terminated
        // array (kept for the process, as librdmacm keeps it).
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err("no RDMA device (ibv_get_device_list)".into());
        }
        let mut out = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n entries of the list libibverbs returned.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device of the list; its name is a NUL-terminated string it owns.
            let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if let Some(c) = cms.iter().find(|c| c.name == name) {
                out.push(Dev {
                    cm: c.clone(),
                    ibv: dev as usize,
                    opened: Mutex::new(None),
                });
            }
        }
        if out.is_empty() {
            return Err("no roce-emu device (ROCE_EMU_DEVICES)".into());
        }
        Ok(Devs { list: out })
    });
    r.as_ref().map_err(|why| CmError::NoDaemon {
        device: "(any)".into(),
        why: why.clone(),
    })
}

/// What a device's shared objects are.
#[derive(Clone, Copy)]
pub struct Opened {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub max_initiator_depth: u8,
    pub max_responder_resources: u8,
}

impl Dev {
    /// The device's context and PD (`ucma_init_device` + `ucma_get_device`): opened once.
    pub fn open(&self) -> Result<Opened, i32> {
        let mut o = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if o.is_none() {
            // SAFETY: a device of the list libibverbs gave.
            let ctx = unsafe { ibv_open_device(self.ibv as *mut ibv_device) };
            if ctx.is_null() {
                return Err(errno().max(libc::ENODEV));
            }
            // SAFETY: the context just opened.
            let pd = unsafe { ibv_alloc_pd(ctx) };
            if pd.is_null() {
                return Err(errno().max(libc::ENOMEM));
            }
            // SAFETY: ibv_device_attr is plain data; all-zero is valid.
            let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
            // SAFETY: ctx is open; attr is ours.
            let (init, resp) = if unsafe { ibv_query_device(ctx, &mut attr) } == 0 {
                (
                    attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
                    attr.max_qp_rd_atom.clamp(0, 255) as u8,
                )
            } else {
                (16, 16)
            };
            *o = Some((ctx as usize, pd as usize, init, resp));
        }
        let (ctx, pd, init, resp) = o.expect("set above");
        Ok(Opened {
            ctx: ctx as *mut ibv_context,
            pd: pd as *mut ibv_pd,
            max_initiator_depth: init,
            max_responder_resources: resp,
        })
    }
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `ibv_create_qp_ex` (an inline of verbs.h): the plain call when only the PD is given,
/// else the extended context's `create_qp_ex`.
///
/// # Safety
/// `ctx` is an open context, `attr` a valid `ibv_qp_init_attr_ex`.
pub unsafe fn create_qp_ex(ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    // SAFETY: the caller's promise.
    let mask = unsafe { (*attr).comp_mask };
    if mask == ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD {
        // SAFETY: ibv_qp_init_attr is the prefix of ibv_qp_init_attr_ex (verbs.h casts).
        return unsafe { ibv_create_qp((*attr).pd, attr as *mut ibv_qp_init_attr) };
    }
    // verbs_get_ctx: an extended context says so in abi_compat (__VERBS_ABI_IS_EXTENDED).
    // SAFETY: ctx is an open context (the caller's promise).
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        crate::errno::set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: an extended context is the `context` member of a verbs_context.
    let vctx = unsafe { &*((ctx as *mut u8).sub(off) as *const verbs_context) };
    let need =
        std::mem::size_of::<verbs_context>() - std::mem::offset_of!(verbs_context, create_qp_ex);
    match vctx.create_qp_ex {
        // SAFETY: the library's own entry point for this context, with the caller's attr.
        Some(f) if vctx.sz >= need => unsafe { f(ctx, attr) },
        _ => {
            crate::errno::set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    }
}

/// What the program's NICs hold back while it polls (the ACK of its last message) leaves
/// now: before each request to the connection manager and before a wait for a CM event,
/// so the peer sees that ACK before the next connection step, as from a real NIC
/// (perftest `-R`'s server waits for its last exchange SEND to complete before it listens
/// again; the ACK held back lost it the race against the client's next REQ). Our
/// libibverbs.so.1's `roce_emu_send_held`, found once with dlsym: with another
/// libibverbs there is nothing to do.
pub fn send_held() {
    static SEND_HELD: OnceLock<Option<extern "C" fn()>> = OnceLock::new();
    let f = SEND_HELD.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the global scope holds the
        // libibverbs.so.1 this library was linked against (NEEDED).
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"roce_emu_send_held".as_ptr()) };
        if p.is_null() {
            None
        } else {
            // SAFETY: abi/src/exit.rs defines it as `extern "C" fn()`.
            Some(unsafe { std::mem::transmute::<*mut c_void, extern "C" fn()>(p) })
        }
    });
    if let Some(f) = f {
        f();
    }
}
