//! A work request's scatter/gather list, from the program's `ibv_sge` array: what send
//! (`qp::wr`) and SRQ receive (`srq`) posting share, a leaf below both.

use crate::ffi;
use libc::c_int;
use roce_emu::verbs::{Lkey, Sge};

/// SGEs a work request may carry (the engine's limit; more is EINVAL).
pub(crate) const MAX_SGE: usize = 8;

/// Copies the program's SGE list into `out`; the count.
///
/// # Safety
/// `list` points to `n` SGEs (the verbs contract of `sg_list`/`num_sge`).
pub(crate) unsafe fn sges(
    list: *const ffi::ibv_sge,
    n: c_int,
    out: &mut [Sge; MAX_SGE],
) -> Result<usize, c_int> {
    let n = usize::try_from(n).map_err(|_| libc::EINVAL)?;
    if n > MAX_SGE {
        return Err(libc::EINVAL);
    }
    for (i, slot) in out.iter_mut().enumerate().take(n) {
        // SAFETY: the program's list has `n` entries.
        let s = unsafe { &*list.add(i) };
        *slot = Sge {
            addr: s.addr,
            length: s.length,
            lkey: Lkey(s.lkey),
        };
    }
    Ok(n)
}
