//! No panic crosses the C ABI. A Rust panic unwinding out of an `extern "C"` function
//! aborts the whole program (Rust's rule since 1.81), so a bug of ours, or a state we did
//! not foresee (a forked child closing what it inherited), would kill the program instead
//! of failing one call. Every `extern "C"` entry of this crate runs its body under one of
//! the guards below, which catch the panic, log it, and give the call's own error return:
//! NULL with errno EIO, an errno code (EIO), -1 with errno EIO, or a neutral value for
//! calls that have no error return. The panic message itself is printed by Rust's panic
//! hook (stderr) as usual; the program carries on.
//!
//! `tests` below checks that every `extern "C"` function of the crate (except the
//! constant ones in strings.rs, stubs.rs and fork.rs, and the atfork handler, which
//! cannot panic) uses a guard.

use crate::errno::set_errno;
use libc::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `body`; on a panic logs it and returns `on_panic()`.
fn run<T>(call: &str, on_panic: impl FnOnce() -> T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
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

/// A call returning 0 or an errno value (most ibv_* calls): EIO on a panic (errno set
/// too, for programs that look there).
pub fn errno(call: &str, body: impl FnOnce() -> c_int) -> c_int {
    run(
        call,
        || {
            set_errno(libc::EIO);
            libc::EIO
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_calls_error_return() {
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        assert!(null::<u8>("t", || panic!("boom")).is_null());
        assert_eq!(errno("t", || panic!("boom")), libc::EIO);
        assert_eq!(minus_one("t", || panic!("boom")), -1);
        // SAFETY: this thread's errno slot.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EIO);
        assert_eq!(or("t", -5isize, || panic!("{}", 1)), -5);
        assert_eq!(value::<u32>("t", || panic!("boom")), 0);
        std::panic::set_hook(quiet);
        assert_eq!(errno("t", || 7), 7);
    }

    /// Every `extern "C" fn` of the crate runs under a guard: its body's first statement
    /// names `guard::`. The constant tables and stubs (strings.rs, stubs.rs, fork.rs)
    /// cannot panic and are exempt; ffi.rs is bindgen's declarations.
    #[test]
    fn every_extern_c_entry_is_guarded() {
        let dir = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        let mut missing = Vec::new();
        // Every source file, in subfolders too (`qp/wr/ex.rs`).
        let mut files = Vec::new();
        let mut dirs = vec![dir];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    files.push(path);
                }
            }
        }
        assert!(
            files.iter().any(|f| f.ends_with("qp/wr/ex.rs")),
            "{files:?}"
        );
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if ["ffi.rs", "strings.rs", "stubs.rs", "fork.rs", "guard.rs"].contains(&name.as_str())
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("extern \"C\" fn ") {
                let after = &rest[at..];
                let fname: String = after["extern \"C\" fn ".len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                // The body opens at the first "{\n" after the signature.
                let open = after.find("{\n").unwrap();
                let first = after[open + 2..].trim_start();
                // The atfork handler is one atomic add: nothing in it can panic.
                let exempt = fname == "count_fork_in_child";
                if !exempt && !first.starts_with("guard::") && !first.starts_with("crate::guard::")
                {
                    missing.push(format!("{name}: {fname}"));
                }
                rest = &after[open..];
            }
        }
        assert!(
            missing.is_empty(),
            "extern \"C\" fns without a guard: {missing:#?}"
        );
    }
}
