//! Memory windows in the table: allocation, binding (rxe `rxe_bind_mw`), invalidation
//! (rxe `rxe_invalidate_mw`) and deallocation. Lookups through a window's R_Key are in
//! the parent's `lookup_at`.
//!
//! Lock order, as the parent's: the `alloc` mutex, then a window's lock, then at most
//! one shard for the time of an `Arc` clone. Binds take the `alloc` mutex so that a
//! region cannot be deregistered between a bind's check of it and its count of windows.

use super::MrTable;
use crate::mem::key::{is_window_key, Key, Lkey, Rkey, MW_INDEX_BASE};
use crate::mem::mw::{check_bind, MemoryWindow, MwBind, MwState, MwType, OnQp};
use crate::mem::{Access, MemError, MemoryRegion, Pd};
use std::sync::Arc;

impl MrTable {
    /// Allocated memory windows.
    pub fn windows_len(&self) -> usize {
        self.mws.len()
    }

    pub(super) fn window(&self, index: u32) -> Option<Arc<MemoryWindow>> {
        self.mws.get(&index).map(|r| Arc::clone(r.value()))
    }

    /// The window a key names, if any (whatever its key byte).
    pub fn window_of(&self, rkey: Rkey) -> Option<Arc<MemoryWindow>> {
        if is_window_key(rkey.0) {
            self.window(rkey.index())
        } else {
            None
        }
    }

    /// `ibv_alloc_mw`: a window of `kind` in `pd`, with a fresh R_Key (rxe: index and a
    /// random key byte). A type 1 window starts valid and empty, a type 2 free. Refused:
    /// an unknown PD, a full window table.
    pub fn alloc_mw(&self, pd: Pd, kind: MwType) -> Result<Arc<MemoryWindow>, MemError> {
        match self.pds.get_mut(&pd.0) {
            Some(mut n) => *n += 1,
            None => return Err(MemError::NoSuchPd { pd }),
        }
        let max = self.cfg.max_mws;
        let mut a = self.alloc();
        if self.mws.len() >= max as usize {
            drop(a);
            self.uncount(pd);
            return Err(MemError::TableFull { max });
        }
        let mut n = a.next_mw;
        while self.mws.contains_key(&(MW_INDEX_BASE + n)) {
            n = if n >= max { 1 } else { n + 1 };
        }
        a.next_mw = if n >= max { 1 } else { n + 1 };
        let slot = n as usize;
        let previous = a.mw_last_key.get(slot).copied();
        let key = a.keys.next_key(previous);
        if a.mw_last_key.len() <= slot {
            a.mw_last_key.resize(slot + 1, 0);
        }
        a.mw_last_key[slot] = key;
        let index = MW_INDEX_BASE + n;
        let mw = Arc::new(MemoryWindow::new(pd, kind, Rkey::new(index, key)));
        self.mws.insert(index, Arc::clone(&mw));
        Ok(mw)
    }

    /// `ibv_dealloc_mw`: the window's key stops working at once and its region is free
    /// of it (rxe `rxe_mw_cleanup`). A window already deallocated is
    /// [`MemError::NoSuchMr`].
    pub fn dealloc_mw(&self, mw: &Arc<MemoryWindow>) -> Result<(), MemError> {
        let _a = self.alloc();
        let rkey = mw.rkey();
        let removed = self
            .mws
            .remove_if(&rkey.index(), |_, w| Arc::ptr_eq(w, mw))
            .is_some();
        if !removed {
            return Err(MemError::NoSuchMr {
                key: Key::Remote(rkey),
            });
        }
        mw.lock().clear(MwState::Invalid);
        self.uncount(mw.pd());
        Ok(())
    }

    /// Binds the window whose current R_Key is `mw_rkey` (rxe `rxe_bind_mw`) on a QP of
    /// `who.pd` (`who.qpn`: the QP a type 2 window becomes bound to), giving it key byte
    /// `new_key` (`ibv_inc_rkey`'s). Type 1 with `bind.length == 0` unbinds it. Returns the
    /// window's new R_Key. Every refusal is [`MemError::BindRefused`], naming the rule:
    /// the work request completes with IBV_WC_MW_BIND_ERR.
    pub fn bind_mw(
        &self,
        who: OnQp,
        mw_rkey: Rkey,
        new_key: u8,
        bind: &MwBind,
    ) -> Result<Rkey, MemError> {
        let refuse = |why| MemError::BindRefused { rkey: mw_rkey, why };
        let mw = self
            .window_of(mw_rkey)
            .ok_or(refuse("the key names no memory window"))?;
        let _a = self.alloc();
        let mut b = mw.lock();
        if b.rkey != mw_rkey {
            return Err(refuse(
                "the window's R_Key has another key byte (stale key)",
            ));
        }
        let mr = if bind.length != 0 {
            Some(
                self.region(bind.mr_lkey)
                    .ok_or(refuse("the L_Key names no memory region"))?,
            )
        } else {
            None
        };
        if !Access::REMOTE
            .union(Access::LOCAL_WRITE)
            .contains(bind.access)
        {
            return Err(refuse(
                "a window's rights are remote read, write and atomic",
            ));
        }
        if mw.kind() == MwType::Type2 && who.qpn.is_none() {
            return Err(refuse("a type 2 window is bound by a work request on a QP"));
        }
        check_bind(&mw, &b, who, mr.as_deref(), bind).map_err(refuse)?;
        // rxe_do_bind_mw.
        let rkey = Rkey::new(mw_rkey.index(), new_key);
        if let Some(old) = b.mr.take() {
            old.window_unbound();
        }
        b.rkey = rkey;
        b.access = bind.access;
        b.state = MwState::Valid;
        b.va = bind.va;
        b.length = bind.length;
        b.zero_based = bind.zero_based;
        if let Some(mr) = mr {
            mr.window_bound();
            b.mr = Some(mr);
        }
        if mw.kind() == MwType::Type2 {
            b.qpn = who.qpn;
        }
        Ok(rkey)
    }

    /// The region `lkey` names exactly (index and key byte), if registered.
    fn region(&self, lkey: Lkey) -> Option<Arc<MemoryRegion>> {
        self.get(Key::Local(lkey)).filter(|mr| mr.lkey() == lkey)
    }

    /// Invalidates the type 2 window `rkey` names (LOCAL_INV on QP `who.qpn`, or a peer's
    /// SEND with Invalidate arriving there): it becomes free, its key stops working and
    /// its region is free of it (rxe `rxe_invalidate_mw`). Refused, changing nothing: a
    /// key naming no window or with another key byte, another PD, a type 1 window
    /// (o10-37.2.26), a window not bound, or bound to another QP (type 2B windows belong
    /// to their QP; rxe has dropped that check, IBA keeps it).
    pub fn invalidate_mw(&self, who: OnQp, rkey: Rkey) -> Result<(), MemError> {
        let key = Key::Remote(rkey);
        let mw = self.window_of(rkey).ok_or(MemError::NoSuchMr { key })?;
        let mut b = mw.lock();
        if b.rkey != rkey {
            return Err(MemError::KeyMismatch {
                asked: key,
                found: Key::Remote(b.rkey),
            });
        }
        if mw.pd() != who.pd {
            return Err(MemError::PdMismatch {
                key,
                asked: who.pd,
                found: mw.pd(),
            });
        }
        if mw.kind() == MwType::Type1 {
            return Err(MemError::NotInvalidatable { key });
        }
        if b.state != MwState::Valid {
            return Err(MemError::MrInvalid { key });
        }
        if b.qpn != who.qpn {
            return Err(MemError::QpMismatch {
                key,
                asked: who.qpn,
                found: b.qpn,
            });
        }
        b.clear(MwState::Free);
        Ok(())
    }

    /// QP `qpn` of `pd` is destroyed: the type 2 windows bound to it become free (their
    /// keys stop working), so that a QP later given the same QPN cannot use them. Goes
    /// through every window: QP destruction is rare.
    pub fn release_qp_windows(&self, pd: Pd, qpn: u32) {
        let bound: Vec<Arc<MemoryWindow>> = self
            .mws
            .iter()
            .filter(|w| w.pd() == pd && w.kind() == MwType::Type2)
            .map(|w| Arc::clone(w.value()))
            .collect();
        for mw in bound {
            let mut b = mw.lock();
            if b.qpn == Some(qpn) && b.state == MwState::Valid {
                b.clear(MwState::Free);
            }
        }
    }
}
