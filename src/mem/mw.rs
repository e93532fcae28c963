//! Memory windows (IBA 10.6.7): a remote key onto part of a registered region, with its
//! own rights, bound and unbound without re-registering the region.
//!
//! - Type 1 is bound by the Bind Memory Window verb (`ibv_bind_mw`) and unbound by
//!   binding it again (length 0) or deallocating it; any QP of its PD may use its R_Key.
//! - Type 2 (type 2B here, as rxe) is bound by a BIND_MW work request on a QP of its PD
//!   and then belongs to that QP: only requests arriving on that QP may use its R_Key,
//!   and a LOCAL_INV work request or a peer's SEND with Invalidate naming the key frees
//!   it (IBA 10.6.7.2.5).
//!
//! A window's key has its own index (in the table's window range, so a key says by its
//! index alone whether it names a window, as rxe's `rkey_is_mw`) and a key byte the
//! binder picks (`ibv_inc_rkey`). The window's state, binding and QP change under one
//! small lock; a lookup takes it for the time it takes to check and clone the region's
//! `Arc`, and never holds it while bytes move.

use super::key::{Key, Rkey};
use super::mr::{range_within, MemoryRegion};
use super::{Access, MemError, Pd};
use core::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The two kinds of memory window (`IBV_MW_TYPE_1`, `IBV_MW_TYPE_2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound by the verb; usable from any QP of the PD.
    Type1,
    /// Bound by a work request; usable only from the QP that bound it (type 2B).
    Type2,
}

/// A window's state (rxe's `RXE_MW_STATE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwState {
    /// Bound (a type 1 window is also "valid" with length 0, naming no byte).
    Valid,
    /// A type 2 window not bound (new, or invalidated): a bind may use it.
    Free,
    /// Deallocated.
    Invalid,
}

/// What a bind asks for: the region (by its L_Key), the range and the rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The region the window opens onto (it must allow `IBV_ACCESS_MW_BIND`).
    pub mr_lkey: super::Lkey,
    /// First address of the window in the region's iova space.
    pub va: u64,
    /// Bytes in the window; 0 unbinds a type 1 window.
    pub length: u64,
    /// Remote rights of the window (REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC).
    pub access: Access,
    /// `IBV_ACCESS_ZERO_BASED`: the peer addresses the window from 0, not from `va`.
    pub zero_based: bool,
}

/// Who presents a key: the PD of the QP it arrives on and, for type 2 windows, the QP.
/// A bare [`Pd`] converts to one with no QP, which no type 2 window accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OnQp {
    pub pd: Pd,
    pub qpn: Option<u32>,
}

impl OnQp {
    /// A key presented on QP `qpn` of `pd`.
    pub const fn new(pd: Pd, qpn: u32) -> OnQp {
        OnQp { pd, qpn: Some(qpn) }
    }
}

impl From<Pd> for OnQp {
    fn from(pd: Pd) -> OnQp {
        OnQp { pd, qpn: None }
    }
}

#[derive(Debug)]
pub(super) struct Binding {
    pub(super) rkey: Rkey,
    pub(super) state: MwState,
    pub(super) mr: Option<Arc<MemoryRegion>>,
    pub(super) va: u64,
    pub(super) length: u64,
    pub(super) access: Access,
    pub(super) zero_based: bool,
    pub(super) qpn: Option<u32>,
}

impl Binding {
    /// Drops the region and the QP: the window names nothing (rxe `rxe_do_invalidate_mw`).
    pub(super) fn clear(&mut self, state: MwState) {
        if let Some(mr) = self.mr.take() {
            mr.window_unbound();
        }
        self.qpn = None;
        self.va = 0;
        self.length = 0;
        self.access = Access::empty();
        self.zero_based = false;
        self.state = state;
    }
}

/// A memory window, shared as `Arc<MemoryWindow>` by the table and its owner (the
/// ABI's `ibv_mw`).
pub struct MemoryWindow {
    pd: Pd,
    kind: MwType,
    inner: Mutex<Binding>,
}

impl MemoryWindow {
    pub(super) fn new(pd: Pd, kind: MwType, rkey: Rkey) -> MemoryWindow {
        MemoryWindow {
            pd,
            kind,
            inner: Mutex::new(Binding {
                rkey,
                // rxe_alloc_mw: type 2 starts free (bindable), type 1 valid (and empty).
                state: match kind {
                    MwType::Type1 => MwState::Valid,
                    MwType::Type2 => MwState::Free,
                },
                mr: None,
                va: 0,
                length: 0,
                access: Access::empty(),
                zero_based: false,
                qpn: None,
            }),
        }
    }

    // Every update of the binding is one assignment block with no panic in it, so a
    // poisoned lock still holds a consistent binding.
    pub(super) fn lock(&self) -> MutexGuard<'_, Binding> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The protection domain the window was allocated in.
    pub fn pd(&self) -> Pd {
        self.pd
    }

    /// Type 1 or type 2.
    pub fn kind(&self) -> MwType {
        self.kind
    }

    /// The window's current R_Key (its key byte changes with each bind).
    pub fn rkey(&self) -> Rkey {
        self.lock().rkey
    }

    /// The window's state.
    pub fn state(&self) -> MwState {
        self.lock().state
    }

    /// The bound range `(va, length)` (length 0: nothing bound).
    pub fn range(&self) -> (u64, u64) {
        let b = self.lock();
        (b.va, b.length)
    }

    /// The QP a type 2 window is bound to.
    pub fn qpn(&self) -> Option<u32> {
        self.lock().qpn
    }

    /// rxe's `rxe_lookup_mw` checks (key, PD, bound, QP of a type 2, rights), then the
    /// window's own range (which rxe leaves to
    /// the region's: IBA 10.6.7 confines the peer to the window, so do we). Returns the
    /// region and the address in it that `va` names. Any failure is an R_Key violation.
    pub(super) fn resolve(
        &self,
        who: OnQp,
        key: Key,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<(Arc<MemoryRegion>, u64), MemError> {
        let b = self.lock();
        if b.rkey.0 != key.raw() {
            return Err(MemError::KeyMismatch {
                asked: key,
                found: Key::Remote(b.rkey),
            });
        }
        if self.pd != who.pd {
            return Err(MemError::PdMismatch {
                key,
                asked: who.pd,
                found: self.pd,
            });
        }
        let mr = match (&b.mr, b.state) {
            (Some(mr), MwState::Valid) if b.length != 0 => Arc::clone(mr),
            _ => return Err(MemError::MrInvalid { key }),
        };
        if self.kind == MwType::Type2 && b.qpn != who.qpn {
            return Err(MemError::QpMismatch {
                key,
                asked: who.qpn,
                found: b.qpn,
            });
        }
        if !b.access.contains(need) {
            return Err(MemError::AccessDenied {
                key,
                need,
                have: b.access,
            });
        }
        let (lo, at) = if b.zero_based {
            (0, va.checked_add(b.va))
        } else {
            (b.va, Some(va))
        };
        match at {
            Some(at) if range_within(lo, b.length, va, len) => Ok((mr, at)),
            _ => Err(MemError::OutOfRange {
                key,
                va,
                len,
                mr_iova: lo,
                mr_len: b.length,
            }),
        }
    }
}

/// rxe's `rxe_check_bind_mw`, in its order (the IBA rule each check enforces in the
/// message), for binding `mw` (locked as `b`) on a QP of `who.pd`, to `mr` (None when
/// `bind.length` is 0).
pub(super) fn check_bind(
    mw: &MemoryWindow,
    b: &Binding,
    who: OnQp,
    mr: Option<&MemoryRegion>,
    bind: &MwBind,
) -> Result<(), &'static str> {
    match mw.kind {
        MwType::Type1 => {
            if b.state != MwState::Valid {
                return Err("a type 1 window not in the valid state (deallocated)");
            }
            if bind.zero_based {
                return Err("a type 1 window may not be zero-based (o10-36.2.2)");
            }
            if mw.pd != who.pd {
                return Err("the window is in another PD than the QP");
            }
        }
        MwType::Type2 => {
            if b.state != MwState::Free {
                return Err("a type 2 window must be free (invalidated) to be bound (o10-37.2.30)");
            }
            if mw.pd != who.pd {
                return Err("the window is in another PD than the QP (C10-72)");
            }
            if mr.is_none() || bind.length == 0 {
                return Err("a type 2 window cannot be bound to zero length (o10-37.2.40)");
            }
        }
    }
    let Some(mr) = mr else { return Ok(()) };
    if mr.pd() != who.pd {
        return Err("the region is in another PD than the QP");
    }
    if !mr.access().contains(Access::MW_BIND) {
        return Err("the region was not registered with IBV_ACCESS_MW_BIND (C10-73)");
    }
    let writes = Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    if bind.access.intersects(writes) && !mr.access().contains(Access::LOCAL_WRITE) {
        return Err("a writable window on a region without LOCAL_WRITE (C10-74)");
    }
    // A zero-based window is addressed from 0 by the peer but still covers [va, va +
    // length) of the region (rxe checks only its length there, then the region's range
    // at each access; checking the range here as well refuses nothing valid).
    if !range_within(mr.iova(), mr.length(), bind.va, bind.length) {
        return Err("the window's range is not inside the region (C10-75)");
    }
    Ok(())
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.lock();
        f.debug_struct("MemoryWindow")
            .field("pd", &self.pd)
            .field("kind", &self.kind)
            .field("rkey", &format_args!("{}", b.rkey))
            .field("state", &b.state)
            .field("va", &format_args!("{:#x}", b.va))
            .field("length", &b.length)
            .field("access", &b.access)
            .field("qpn", &b.qpn)
            .finish_non_exhaustive()
    }
}
