//! Contexts: `ibv_open_device` gives a `verbs_context` (whose last field is the
//! `ibv_context` programs hold) at the front of our `Ctx`, over one `verbs::Context`: an
//! engine, a port, a progress thread. The ops tables are filled here; what is absent (
//! MW, XRC, flows, DM, ...) stays NULL, and rdma-core's inline wrappers then fail with
//! EOPNOTSUPP/ENOSYS as they do for a provider without it.

use crate::ctx::{watch_forks, Ctx};
use crate::dev::Dev;
use crate::errno::set_errno;
use crate::ffi;
use crate::qp::wr;
use crate::{cq, device, qp};
use libc::c_int;
use roce_emu::verbs::{self, AsyncEvent, Event};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context::abi_compat` of a context with a
/// `verbs_context` in front.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// After `ibv_close_device`, how long the NIC keeps answering (the peer may still need the
/// ACK of the last message it sent): until quiet this long, at most `LINGER_MAX`.
const LINGER_QUIET: Duration = Duration::from_millis(50);
const LINGER_MAX: Duration = Duration::from_secs(1);

/// The program's congestion-control settings for device `name`: `ROCE_EMU_CC`, then
/// `ROCE_EMU_CC_<name>` (later keys win), in `engine::CcConfig`'s key=value syntax
/// (`ROCE_EMU_CC=rp_enable=0`). A bad one fails `ibv_open_device` with EINVAL and says why.
fn cc_settings(name: &str) -> Option<String> {
    let all = std::env::var("ROCE_EMU_CC").ok();
    let own = std::env::var(format!("ROCE_EMU_CC_{name}")).ok();
    match (all, own) {
        (None, None) => None,
        (a, o) => Some(format!(
            "{},{}",
            a.unwrap_or_default(),
            o.unwrap_or_default()
        )),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(d: *mut ffi::ibv_device) -> *mut ffi::ibv_context {
    crate::guard::null("ibv_open_device", move || {
        // SAFETY: a device from our list (or NULL).
        let Some(dev) = (unsafe { crate::dev::dev(d) }) else {
            set_errno(libc::ENODEV);
            return std::ptr::null_mut();
        };
        // SAFETY: `dev` came from our list, which lives as long as the process.
        let dev: &'static Dev = unsafe { &*(dev as *const Dev) };
        watch_forks();
        let mut device = verbs::Device::new(dev.port.ip);
        // UD sends and receives are bounded by the port's active MTU (rxe `get_mtu`).
        device.engine.port_mtu = dev.port.mtu.bytes();
        // A daemon's port (`NAME=daemon:SOCKET`): attach to it instead of opening the address.
        device.daemon.clone_from(&dev.port.daemon);
        device.gids = Some(std::sync::Arc::clone(&dev.gids));
        device.pcap = crate::pcap::path(&dev.port.name);
        device.pcap_report = Some(crate::pcap::report);
        device.cc = cc_settings(&dev.port.name);
        let nic = match device.open() {
            Ok(n) => n,
            Err(e) => {
                eprintln!(
                    "roce-emu: cannot open {} on {}: {e}",
                    dev.port.name, dev.port.ip
                );
                set_errno(crate::errno::of(&e));
                return std::ptr::null_mut();
            }
        };
        // SAFETY: plain C data (function pointers as Option, pointers, ints, a pthread mutex
        // whose all-zero value is PTHREAD_MUTEX_INITIALIZER in glibc).
        let mut v: ffi::verbs_context = unsafe { std::mem::zeroed() };
        v.query_port = Some(device::query_port);
        v.query_device_ex = Some(device::query_device_ex);
        v.query_rt_values = Some(crate::clock::query_rt_values);
        v.create_cq_ex = Some(cq::create_cq_ex);
        v.create_qp_ex = Some(qp::create_qp_ex);
        v.create_srq_ex = Some(crate::srq::create_srq_ex);
        v.sz = std::mem::size_of::<ffi::verbs_context>();
        let c = &mut v.context;
        c.device = d;
        // No kernel command channel here, but programs take `cmd_fd` as a real fd (pyverbs'
        // shared-PD test dups it before ibv_import_device, which then fails EOPNOTSUPP): a
        // /dev/null of our own, closed with the context.
        // SAFETY: open(2) of a constant NUL-terminated path.
        c.cmd_fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        c.async_fd = nic.async_fd().as_raw_fd();
        c.num_comp_vectors = 1;
        c.abi_compat = VERBS_ABI_IS_EXTENDED as *mut _;
        let ops = &mut c.ops;
        ops.poll_cq = Some(cq::poll_cq);
        ops.req_notify_cq = Some(cq::req_notify_cq);
        ops.post_send = Some(wr::post_send);
        ops.post_recv = Some(wr::post_recv);
        ops.post_srq_recv = Some(crate::srq::post_srq_recv);
        ops.alloc_mw = Some(crate::mw::alloc_mw);
        ops.bind_mw = Some(crate::mw::bind_mw);
        ops.dealloc_mw = Some(crate::mw::dealloc_mw);
        ops._compat_query_port = Some(device::ibv_query_port);
        let ctx = Box::new(Ctx::new(v, nic, dev));
        tracing::debug!("opened {} on {}", dev.port.name, dev.port.ip);
        let ctx = Box::leak(ctx);
        crate::exit::opened(ctx.own_nic());
        ctx.ibv()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(c: *mut ffi::ibv_context) -> c_int {
    crate::guard::errno("ibv_close_device", move || {
        if c.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a context we opened with Box::leak; the program stops using it now.
        let ctx = unsafe { Box::from_raw(Ctx::of(c) as *const Ctx as *mut Ctx) };
        if ctx.v.context.cmd_fd >= 0 {
            // SAFETY: the /dev/null fd opened for this context (the child's own copy of
            // it after a fork), closed once.
            unsafe { libc::close(ctx.v.context.cmd_fd) };
        }
        if ctx.inherited() {
            // A forked child: dropping the NIC would join a progress thread the child does
            // not have and lock what a vanished thread may hold, and its linger would
            // read the parent's packets off the shared socket. Left as it is; the
            // child's exit closes its copies of the fds.
            tracing::debug!("ibv_close_device in a forked child: the parent's NIC is left alone");
            // (Nor is it taken off the exit list: the list is the parent's, its lock may
            // be held by a thread the child does not have, and the exit handler leaves
            // contexts of another pid alone; the leaked context stays valid.)
            std::mem::forget(ctx);
            return 0;
        }
        crate::exit::closing(ctx.own_nic());
        ctx.own_nic().linger(LINGER_QUIET, LINGER_MAX);
        drop(ctx);
        0
    })
}

/// Fills an `ibv_async_event` from ours; `None` when its object is already gone.
fn to_ibv(ctx: &Ctx, ev: &Event) -> Option<ffi::ibv_async_event> {
    use ffi::ibv_event_type as t;
    // SAFETY: plain C data.
    let mut out: ffi::ibv_async_event = unsafe { std::mem::zeroed() };
    let qp = |qpn: u32| ctx.qps.lock().unwrap().get(&qpn).copied();
    match *ev {
        Event::Engine(AsyncEvent::QpFatal { qpn }) => {
            out.element.qp = qp(qpn)? as *mut _;
            out.event_type = t::IBV_EVENT_QP_FATAL;
        }
        Event::Engine(AsyncEvent::QpRequestError { qpn }) => {
            out.element.qp = qp(qpn)? as *mut _;
            out.event_type = t::IBV_EVENT_QP_REQ_ERR;
        }
        Event::Engine(AsyncEvent::QpAccessError { qpn }) => {
            out.element.qp = qp(qpn)? as *mut _;
            out.event_type = t::IBV_EVENT_QP_ACCESS_ERR;
        }
        Event::Engine(AsyncEvent::SqDrained { qpn }) => {
            out.element.qp = qp(qpn)? as *mut _;
            out.event_type = t::IBV_EVENT_SQ_DRAINED;
        }
        Event::Engine(AsyncEvent::SrqLimitReached { srq }) => {
            out.element.srq = *ctx.srqs.lock().unwrap().get(&srq)? as *mut _;
            out.event_type = t::IBV_EVENT_SRQ_LIMIT_REACHED;
        }
        Event::Engine(AsyncEvent::QpLastWqeReached { qpn }) => {
            out.element.qp = qp(qpn)? as *mut _;
            out.event_type = t::IBV_EVENT_QP_LAST_WQE_REACHED;
        }
        Event::Engine(AsyncEvent::CqError { cq, .. }) => {
            out.element.cq = *ctx.cqs.lock().unwrap().get(&cq)? as *mut _;
            out.event_type = t::IBV_EVENT_CQ_ERR;
        }
        Event::PortError(_) => {
            out.element.port_num = 1;
            out.event_type = t::IBV_EVENT_PORT_ERR;
        }
        // An address of the interface went or came (`verbs::gids`): the kernel's GID
        // cache dispatches IBV_EVENT_GID_CHANGE on the port (`dispatch_gid_change_event`).
        Event::GidChange => {
            out.element.port_num = 1;
            out.event_type = t::IBV_EVENT_GID_CHANGE;
        }
    }
    Some(out)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    c: *mut ffi::ibv_context,
    event: *mut ffi::ibv_async_event,
) -> c_int {
    crate::guard::minus_one("ibv_get_async_event", move || {
        // SAFETY: a context we opened; `event` is the program's out-parameter.
        let ctx = unsafe { Ctx::of(c) };
        let nic = match ctx.nic() {
            Ok(n) => n,
            Err(e) => {
                set_errno(crate::errno::refused("ibv_get_async_event", &e));
                return -1;
            }
        };
        loop {
            // A read of `async_fd`, as rdma-core's: EAGAIN when the program made it
            // O_NONBLOCK, EINTR when a signal handler without SA_RESTART ran.
            let ev = match nic.wait_async_event() {
                Ok(ev) => ev,
                Err(e) => {
                    set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                    return -1;
                }
            };
            if let Some(out) = to_ibv(ctx, &ev) {
                // SAFETY: the program's out-parameter.
                unsafe { event.write(out) };
                return 0;
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ffi::ibv_async_event) {
    crate::guard::value("ibv_ack_async_event", move || {
        // Nothing waits on acknowledgements here: a destroy never blocks on unacknowledged
        // events (rdma-core's would wait; ours has nothing to wait for).
    })
}
