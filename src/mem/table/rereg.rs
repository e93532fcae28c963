//! `ibv_rereg_mr`: a registered region changed in place, keeping its L_Key.

use super::MrTable;
use crate::mem::backing::Backing;
use crate::mem::key::{Key, Lkey, Rkey};
use crate::mem::{Access, MemError, MemoryRegion, Pd};
use std::sync::Arc;

/// What a re-registration changes (`IBV_REREG_MR_CHANGE_*`); `None` keeps it.
#[derive(Debug, Default)]
pub struct Rereg {
    /// CHANGE_PD.
    pub pd: Option<Pd>,
    /// CHANGE_ACCESS.
    pub access: Option<Access>,
    /// CHANGE_TRANSLATION: the new bytes and the iova they are registered at.
    pub translation: Option<(u64, Backing)>,
}

impl MrTable {
    /// Re-registers the region `lkey` names: a new PD, new rights and/or new memory,
    /// the L_Key unchanged (rxe keeps both keys for PD and access changes). The R_Key is
    /// the L_Key's value if the new rights have a remote one, else 0, as at
    /// registration. Operations that looked the old region up finish on it; later
    /// lookups find the new one. Refused, changing nothing: no change asked
    /// ([`MemError::BadRereg`]; the kernel's EINVAL), the checks of `reg_mr` on the new
    /// rights and translation, an unknown PD, an unknown key, and a region with windows
    /// bound ([`MemError::MrHasWindows`]: they would keep the old bytes and rights).
    pub fn rereg_mr(&self, lkey: Lkey, r: Rereg) -> Result<Arc<MemoryRegion>, MemError> {
        if r.pd.is_none() && r.access.is_none() && r.translation.is_none() {
            return Err(MemError::BadRereg {
                why: "no change asked (flags 0)",
            });
        }
        let a = self.alloc();
        let key = Key::Local(lkey);
        let old = self.get(key).ok_or(MemError::NoSuchMr { key })?;
        if old.lkey() != lkey {
            return Err(MemError::KeyMismatch {
                asked: key,
                found: Key::Local(old.lkey()),
            });
        }
        if old.windows() > 0 {
            return Err(MemError::MrHasWindows {
                lkey,
                windows: old.windows(),
            });
        }
        let access = r.access.unwrap_or(old.access());
        let pd = r.pd.unwrap_or(old.pd());
        let (iova, bytes) = match r.translation {
            Some((iova, b)) => (iova, Some(b)),
            None => (old.iova(), None),
        };
        let length = bytes.as_ref().map_or(old.length(), |b| b.len() as u64);
        self.check_reg(iova, length, access)?;
        if pd != old.pd() {
            match self.pds.get_mut(&pd.0) {
                Some(mut n) => *n += 1,
                None => return Err(MemError::NoSuchPd { pd }),
            }
            self.uncount(old.pd());
        }
        // The R_Key stays the lkey's value whatever the new rights (see `reg_mr`).
        let rkey = Rkey(lkey.0);
        let mr = Arc::new(old.rereg(pd, iova, access, rkey, bytes));
        self.mrs.insert(lkey.index(), Arc::clone(&mr));
        drop(a);
        Ok(mr)
    }
}
