//! errno values as rdma-core and rxe return them.

use roce_emu::verbs::{Error, MemError, VerbsError};

pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// The errno for a verbs error, as rxe's kernel paths return it: bad arguments EINVAL,
/// exhausted resources ENOMEM, objects in use EBUSY, a dead port EIO.
pub fn of(e: &Error) -> i32 {
    match e {
        Error::Verbs(v) => of_verbs(v),
        Error::Mem(m) => of_mem(m),
        Error::PdInUse { .. } => libc::EBUSY,
        Error::PortDown(_) | Error::Port(_) => libc::EIO,
        Error::Capture(_) => libc::EIO,
        Error::EventFd(io) => io.raw_os_error().unwrap_or(libc::EMFILE),
        Error::BadLoss(_) | Error::Cc { .. } => libc::EINVAL,
        // No daemon to attach to: the device cannot open, as a port that is down.
        Error::Attach(_) | Error::Daemon(_) => libc::EIO,
    }
}

fn of_verbs(e: &VerbsError) -> i32 {
    match e {
        // rxe's post_send on a full queue (`queue_full` in rxe_post_send_kernel/user).
        VerbsError::QueueFull { .. }
        | VerbsError::NoFreeQpn
        | VerbsError::NoFreeCq
        | VerbsError::NoFreeSrq
        | VerbsError::SrqFull { .. } => libc::ENOMEM,
        VerbsError::CqInUse { .. } | VerbsError::SrqInUse { .. } => libc::EBUSY,
        VerbsError::UnsupportedQpType(_) => libc::EOPNOTSUPP,
        VerbsError::Mem(m) => of_mem(m),
        _ => libc::EINVAL,
    }
}

fn of_mem(e: &MemError) -> i32 {
    match e {
        MemError::PdInUse { .. } => libc::EBUSY,
        MemError::OutOfMemory { .. } | MemError::TableFull { .. } => libc::ENOMEM,
        MemError::NullAddress | MemError::Fault { .. } => libc::EFAULT,
        _ => libc::EINVAL,
    }
}

/// Logs a refused call (the program sees only the errno) and gives the errno.
pub fn refused(call: &str, e: &Error) -> i32 {
    tracing::debug!("{call}: {e}");
    of(e)
}
