//! No panic crosses the C ABI (as abi/src/guard.rs for libibverbs): a panic unwinding out
//! of an `extern "C"` function aborts the program, so every entry point of this crate runs
//! its body under one of these guards, which log the panic and give the call's own error
//! return (-1 with errno EIO, NULL with errno EIO, or a neutral value). tests/
//! rdmacm_exports.rs checks that every `extern "C"` fn starts with `guard::`.

use crate::errno::set_errno;
use libc::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body`; on a panic logs it and returns `on_panic()`.
fn run<T>(call: &str, on_panic: impl FnOnce() -> T, body: impl FnOnce() -> T) -> T {
    // Each call's duration at trace level (`ROCE_EMU_LOG=roce_emu_rdmacm=trace`): where a
    // program's connection set-up spends its time.
    let start = tracing::enabled!(tracing::Level::TRACE).then(std::time::Instant::now);
    let r = catch_unwind(AssertUnwindSafe(body));
    if let Some(s) = start {
        tracing::trace!(took = ?s.elapsed(), "{call}");
    }
    match r {
        Ok(v) => v,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| p.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            tracing::error!("{call}: internal error (panic: {what}); the call fails with EIO");
            on_panic()
        }
    }
}

/// A call returning a pointer: NULL with errno EIO on a panic.
pub fn null<T>(call: &str, body: impl FnOnce() -> *mut T) -> *mut T {
    run(
        call,
        || {
            set_errno(libc::EIO);
            std::ptr::null_mut()
        },
        body,
    )
}

/// A call returning a `const` pointer: NULL with errno EIO on a panic.
pub fn null_const<T>(call: &str, body: impl FnOnce() -> *const T) -> *const T {
    run(
        call,
        || {
            set_errno(libc::EIO);
            std::ptr::null()
        },
        body,
    )
}

/// A call returning -1 (or a negative value) with errno on failure: -1, errno EIO.
pub fn minus_one(call: &str, body: impl FnOnce() -> c_int) -> c_int {
    run(
        call,
        || {
            set_errno(libc::EIO);
            -1
        },
        body,
    )
}

/// A call whose error return is `on_panic` (e.g. a negative errno as an `isize`).
pub fn or<T>(call: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    run(
        call,
        || {
            set_errno(libc::EIO);
            on_panic
        },
        body,
    )
}

/// A call with no error return (void, or a value read back such as `ibv_wc_read_*`):
/// the type's default (nothing, 0) on a panic.
pub fn value<T: Default>(call: &str, body: impl FnOnce() -> T) -> T {
    run(call, T::default, body)
}
