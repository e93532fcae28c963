//! The errno values the manager answers commands with (Linux's, as the kernel's ucma
//! gives them to librdmacm), and the error form every command step returns. A leaf: every
//! other module of `cm` may use it.

pub const ENOENT: i32 = 2;
pub const EINVAL: i32 = 22;
pub const EADDRINUSE: i32 = 98;
pub const EADDRNOTAVAIL: i32 = 99;
pub const ETIMEDOUT: i32 = 110;

/// A failed command step: the errno and why, for the log line.
pub(super) fn err<T>(errno: i32, what: impl Into<String>) -> Result<T, (i32, String)> {
    Err((errno, what.into()))
}
