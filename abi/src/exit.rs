//! The program's exit. A user-space NIC sends nothing once its process is gone, and most
//! programs exit without `ibv_close_device` (rc_pingpong returns from `main` on an error
//! completion): what a NIC still held then (the NAK of the request that failed, which the
//! peer needs to report the right error instead of a retry timeout; a capture's buffered
//! frames) was lost. An `atexit`
//! handler, registered at the first `ibv_open_device`, hands it on for every context still
//! open (`verbs::Context::flush_at_exit`).
//!
//! Open contexts are listed here by address with the pid that opened them: a forked
//! child's copy of its parent's context is the parent's to flush (its engine state is a
//! stale copy, and sending it would duplicate the parent's packets).

use roce_emu::verbs;
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

/// Longest the handler waits for one NIC (a thread of the program may be inside a verbs
/// call on it).
const EXIT_WAIT: Duration = Duration::from_millis(100);

/// (address of the context's `verbs::Context`, pid that opened it).
static OPEN: Mutex<Vec<(usize, u32)>> = Mutex::new(Vec::new());

fn open() -> MutexGuard<'static, Vec<(usize, u32)>> {
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// A context was opened; `nic` stays at this address until [`closing`].
pub fn opened(nic: &verbs::Context) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C" fn()` with the C library; it runs once,
        // at exit(3) or the return from main.
        if unsafe { libc::atexit(at_exit) } != 0 {
            tracing::warn!("atexit failed: what a NIC holds at exit may be lost");
        }
    });
    open().push((nic as *const _ as usize, std::process::id()));
}

/// A context is about to be freed: the handler must not touch it any more. Holds the
/// list's lock while it removes it, so a handler running on another thread is done with
/// it when this returns.
pub fn closing(nic: &verbs::Context) {
    let at = nic as *const _ as usize;
    open().retain(|&(a, _)| a != at);
}

// No panic may unwind into the C library: the guard turns one into nothing.
extern "C" fn at_exit() {
    crate::guard::value("atexit handler", || {
        let pid = std::process::id();
        let list = open();
        for &(at, by) in list.iter() {
            if by != pid {
                continue;
            }
            // SAFETY: listed by `opened` and not yet removed by `closing`, which runs
            // before the context is freed and waits for this lock: the context is alive.
            let nic = unsafe { &*(at as *const verbs::Context) };
            nic.flush_at_exit(EXIT_WAIT);
        }
    })
}

/// `roce_emu_send_held`: what every NIC this process opened holds back while its program
/// polls leaves now (`verbs::Context::send_held`). Not a verbs call: our librdmacm.so.1
/// calls it (found with dlsym, so nothing else depends on it) before each request to the
/// connection manager and before it sleeps for a CM event, so that the ACK of a
/// program's last message precedes its next connection step, as on a real NIC.
#[no_mangle]
pub extern "C" fn roce_emu_send_held() {
    crate::guard::value("roce_emu_send_held", || {
        let pid = std::process::id();
        let list = open();
        for &(at, by) in list.iter() {
            if by != pid {
                continue;
            }
            // SAFETY: as in `at_exit`: listed and not yet removed by `closing`, which
            // waits for this lock before the context is freed.
            let nic = unsafe { &*(at as *const verbs::Context) };
            if let Err(e) = nic.send_held() {
                tracing::debug!("roce_emu_send_held: {e}");
            }
        }
    })
}
