//! Completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, `ibv_wc_read_completion_ts`)
//! and the clock they are read against (`ibv_query_rt_values_ex`, `hca_core_clock`).
//!
//! The engine has no clock (it is sans-IO), so the stamp is taken here, in the library, when
//! a completion leaves the engine for the extended polling API: the moment the program's
//! poll found it, which for a program polling its CQ is within a poll of when the NIC made
//! it (a completion left waiting in the CQ is stamped when it is polled). The clock is
//! CLOCK_MONOTONIC in nanoseconds: `hca_core_clock` is 1 GHz (1 000 000 kHz), and
//! `ibv_query_rt_values_ex` gives the same clock, so a program converting ticks to time
//! with either gets nanoseconds.

use crate::ffi;
use libc::c_int;

/// `hca_core_clock` in kHz: one tick per nanosecond.
pub const CORE_CLOCK_KHZ: u64 = 1_000_000;

fn monotonic() -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer; CLOCK_MONOTONIC exists
    // on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t
}

/// Now, in ticks (nanoseconds of CLOCK_MONOTONIC).
pub fn ticks() -> u64 {
    let t = monotonic();
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// `verbs_context::query_rt_values` (`ibv_query_rt_values_ex`): the raw clock, the one
/// completion timestamps count.
pub unsafe extern "C" fn query_rt_values(
    _c: *mut ffi::ibv_context,
    values: *mut ffi::ibv_values_ex,
) -> c_int {
    crate::guard::errno("query_rt_values", move || {
        if values.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the program's out-parameter (ibv_values_ex).
        let v = unsafe { &mut *values };
        let raw = ffi::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK;
        if v.comp_mask & !raw != 0 {
            return libc::EINVAL;
        }
        if v.comp_mask & raw != 0 {
            let t = monotonic();
            v.raw_clock.tv_sec = t.tv_sec;
            v.raw_clock.tv_nsec = t.tv_nsec;
        }
        0
    })
}
