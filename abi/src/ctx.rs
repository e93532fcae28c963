//! The context object (`Ctx`: a `verbs_context` in front of our NIC) that every verbs
//! call reaches through its `ibv_context`, and the fork fence: a leaf below the modules of
//! the objects (cq, qp, mr, ...) and `context`, which fills the ops tables with them.

use crate::dev::Dev;
use crate::ffi;
use roce_emu::verbs;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};

/// Forks this process has been the child of: a `pthread_atfork` child handler counts them,
/// so a context knows it was inherited with one atomic load (no getpid(2) per post).
static FORKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn count_fork_in_child() {
    // Async-signal-safe: one atomic add, nothing else (the child may have one thread
    // only, and the parent's locks may be held by threads it no longer has).
    FORKS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only does an atomic add; no prepare or parent
        // handler. A failure (ENOMEM) leaves forks uncounted: logged, the old behaviour.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
        if rc != 0 {
            tracing::warn!("pthread_atfork failed ({rc}): a forked child's calls are not fenced");
        }
    });
}

#[repr(C)]
pub struct Ctx {
    pub v: ffi::verbs_context,
    /// The NIC: reach it through [`Ctx::nic`], which refuses it in a forked child.
    nic: verbs::Context,
    /// `FORKS` when the context was opened: another value means this is a forked child
    /// with a copy of its parent's context (see [`Ctx::inherited`]).
    born: u32,
    pub dev: &'static Dev,
    /// Our objects by engine handle, for events that name a handle (async events).
    pub qps: Mutex<HashMap<u32, usize>>,
    pub cqs: Mutex<HashMap<u32, usize>>,
    pub srqs: Mutex<HashMap<u32, usize>>,
}

impl Ctx {
    /// Ours, from a context we opened.
    /// # Safety
    /// `c` is a context we opened and have not closed.
    pub unsafe fn of<'a>(c: *mut ffi::ibv_context) -> &'a Ctx {
        let off = std::mem::offset_of!(ffi::verbs_context, context);
        // SAFETY: every ibv_context we hand out is `Ctx::v.context`; `v` is the first field
        // of the #[repr(C)] Ctx, so the Ctx starts `off` bytes before it.
        unsafe { &*((c as *mut u8).sub(off) as *const Ctx) }
    }

    /// Whether this process is a fork of the one that opened the context. The child has
    /// a copy of the parent's NIC but none of its threads (the progress thread, whoever
    /// held the NIC's lock at the fork), and its sockets are the parent's: using the NIC
    /// would steal the parent's packets or wait forever on a lock nobody will release. So
    /// a child's calls on what it inherited never reach the NIC: destroy, dealloc,
    /// dereg and close free our user-space objects quietly (the NIC's own state is left
    /// to the child's exit), and every other call fails with EIO ([`Ctx::nic`]). A
    /// child opens its own device, as with rdma-core.
    pub fn inherited(&self) -> bool {
        FORKS.load(Ordering::Relaxed) != self.born
    }

    /// The NIC, or `PortDown` (EIO) in a forked child (see [`Ctx::inherited`]).
    pub fn nic(&self) -> Result<&verbs::Context, verbs::Error> {
        if self.inherited() {
            Err(verbs::Error::PortDown(
                "a context inherited across fork(2) cannot be used: open the device again".into(),
            ))
        } else {
            Ok(&self.nic)
        }
    }

    /// A context over `nic` for device `dev`, born in this process (not a fork's copy).
    pub(crate) fn new(v: ffi::verbs_context, nic: verbs::Context, dev: &'static Dev) -> Ctx {
        Ctx {
            v,
            nic,
            born: FORKS.load(Ordering::Relaxed),
            dev,
            qps: Mutex::new(HashMap::new()),
            cqs: Mutex::new(HashMap::new()),
            srqs: Mutex::new(HashMap::new()),
        }
    }

    /// The NIC even in a forked child: for the open, close and exit paths, which decide
    /// with [`Ctx::inherited`] themselves what to do with it.
    pub(crate) fn own_nic(&self) -> &verbs::Context {
        &self.nic
    }

    pub fn ibv(&self) -> *mut ffi::ibv_context {
        &self.v.context as *const _ as *mut _
    }
}
