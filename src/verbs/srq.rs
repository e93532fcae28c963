//! Shared receive queues (`ibv_create_srq` and friends): the engine's SRQs
//! (`engine/srq.rs`) under the NIC's lock. A QP is put on an SRQ at creation
//! (`QpInit::srq`); its receives then complete on its own receive CQ.

use super::{Context, Error, RecvWr, SrqAttr, SrqInit};

impl Context {
    /// `ibv_create_srq`.
    pub fn create_srq(&self, init: &SrqInit) -> Result<u32, Error> {
        Ok(self.shared.lock().driver.engine.create_srq(init)?)
    }

    /// `ibv_destroy_srq`: refused while a QP uses it (EBUSY in the drop-in).
    pub fn destroy_srq(&self, srq: u32) -> Result<(), Error> {
        Ok(self.shared.lock().driver.engine.destroy_srq(srq)?)
    }

    /// `ibv_modify_srq`: resize (`max_wr`) and/or arm the limit event (`limit`, 0
    /// disarms).
    pub fn modify_srq(
        &self,
        srq: u32,
        max_wr: Option<usize>,
        limit: Option<u32>,
    ) -> Result<(), Error> {
        Ok(self
            .shared
            .lock()
            .driver
            .engine
            .modify_srq(srq, max_wr, limit)?)
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: u32) -> Result<SrqAttr, Error> {
        Ok(self.shared.lock().driver.engine.query_srq(srq)?)
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&self, srq: u32, wr: &RecvWr<'_>) -> Result<(), Error> {
        Ok(self.shared.lock().driver.engine.post_srq_recv(srq, wr)?)
    }
}
