//! errno, as librdmacm sets it (`ERR(e)`: errno = e, return -1).

pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = e }
}

/// librdmacm's `ERR(e)`: sets errno, returns -1.
pub fn err(e: i32) -> libc::c_int {
    set_errno(e);
    -1
}

/// A failed call into the connection manager: its errno, logged (the program sees only the
/// errno; `ROCE_EMU_LOG=debug` says why).
pub fn cm(call: &str, e: &roce_emu::verbs::cm::CmError) -> libc::c_int {
    tracing::debug!("{call}: {e}");
    // A device with no daemon is the one failure a user must act on: say it once.
    if matches!(
        e,
        roce_emu::verbs::cm::CmError::NoDaemon { .. }
            | roce_emu::verbs::cm::CmError::Daemon(_)
            | roce_emu::verbs::cm::CmError::Demand(_)
    ) {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| eprintln!("librdmacm (roce-emu): {e}"));
    }
    err(e.errno())
}
