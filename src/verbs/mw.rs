//! Memory windows, re-registration and CQ resizing on a context (`ibv_alloc_mw`,
//! `ibv_dealloc_mw`, `ibv_rereg_mr`, `ibv_resize_cq`). Binding is a send work request
//! (`SendOp::BindMw`, for type 1 too: rxe's provider turns `ibv_bind_mw` into one).

use super::{Context, Error};
use crate::mem::{Lkey, MemoryRegion, MemoryWindow, MwType, Pd, Rereg};
use std::sync::Arc;

impl Context {
    /// `ibv_alloc_mw`: a window of `kind` in `pd`.
    pub fn alloc_mw(&self, pd: Pd, kind: MwType) -> Result<Arc<MemoryWindow>, Error> {
        Ok(self.mem.alloc_mw(pd, kind)?)
    }

    /// `ibv_dealloc_mw`. Under the NIC's lock, as `dereg_mr`: no engine operation is
    /// using the window's region through it when this returns.
    pub fn dealloc_mw(&self, mw: &Arc<MemoryWindow>) -> Result<(), Error> {
        let _nic = self.shared.lock();
        Ok(self.mem.dealloc_mw(mw)?)
    }

    /// `ibv_rereg_mr` ([`MrTable::rereg_mr`](crate::mem::MrTable::rereg_mr)): the region
    /// now in the table, with the same L_Key. Under the NIC's lock, as `dereg_mr`: the
    /// old bytes are no longer in use by the engine when this returns.
    pub fn rereg_mr(&self, lkey: Lkey, r: Rereg) -> Result<Arc<MemoryRegion>, Error> {
        let _nic = self.shared.lock();
        Ok(self.mem.rereg_mr(lkey, r)?)
    }

    /// `ibv_resize_cq`: room for `depth` completions, keeping those it holds; `outside`
    /// is what the caller took from the CQ and still counts as held.
    pub fn resize_cq(&self, cq: u32, depth: usize, outside: usize) -> Result<(), Error> {
        let mut nic = self.shared.lock();
        Ok(nic.driver.engine.resize_cq(cq, depth, outside)?)
    }
}
