//! Shared receive queues (rxe `rxe_srq.c`, `rxe_resp.c`; libibverbs `ibv_create_srq(3)`,
//! `ibv_modify_srq(3)`): one queue of receive WQEs that several QPs draw from. A QP on an
//! SRQ has no receive queue of its own; its responder takes a WQE from the SRQ when a
//! message that needs one starts (`Qp::recv_wqe`, `qp/recv.rs`), so every WQE is consumed
//! by exactly one message of one QP.
//!
//! The limit ("low watermark") is one-shot: armed by `modify_srq(limit)`, it fires
//! `AsyncEvent::SrqLimitReached` the first time a WQE is taken and fewer than `limit` are
//! left, and disarms itself (limit back to 0) until the program arms it again (rxe
//! `get_srq_wqe`; `ibv_query_srq(3)`: a limit of 0 means not, or no longer, armed).
//!
//! The commands live here as a second `impl Engine`, so that `engine/mod.rs` only gains
//! the table of SRQs.

use super::error::VerbsError;
use super::qp::wqe::{RecvWqe, SgeList};
use super::wr::RecvWr;
use super::{config, Engine};
use crate::mem::Pd;

// The queue itself is the receive side's (`qp/recv.rs`): the QPs take from it.
pub use super::qp::recv::{Srq, SrqAttr};

/// What `create_srq` needs (ibv_srq_init_attr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInit {
    pub pd: Pd,
    /// Receive WQEs the SRQ holds at most.
    pub max_wr: usize,
    /// SGEs per receive WQE at most.
    pub max_sge: usize,
    /// The limit armed at creation (0: none), as rxe takes `srq_limit` from the init
    /// attributes (`rxe_srq_from_init`).
    pub limit: u32,
}

impl Engine {
    /// `ibv_create_srq`: an SRQ of `max_wr` WQEs of up to `max_sge` SGEs each.
    pub fn create_srq(&mut self, init: &SrqInit) -> Result<u32, VerbsError> {
        let max_sge = self.cfg.max_sge.min(config::MAX_SGE);
        let limits = [
            ("srq max_wr", init.max_wr, self.cfg.max_queue_depth),
            ("srq max_sge", init.max_sge, max_sge),
        ];
        for (what, asked, max) in limits {
            if asked > max {
                return Err(VerbsError::CapTooLarge { what, asked, max });
            }
        }
        if init.max_wr == 0 {
            return Err(VerbsError::InvalidAttr {
                attr: "srq max_wr",
                value: 0,
                why: "an SRQ holds at least one WQE",
            });
        }
        // A limit above the SRQ's size could never be crossed: refused, as rxe's
        // `rxe_srq_chk_attr` refuses one above the queue's size on modify (rxe takes the
        // limit at creation from the init attributes, `rxe_srq_from_init`).
        if init.limit as usize > init.max_wr {
            return Err(VerbsError::InvalidAttr {
                attr: "srq_limit",
                value: u64::from(init.limit),
                why: "larger than max_wr",
            });
        }
        self.mem.check_pd(init.pd)?;
        let srqs = &self.srqs;
        let id = self
            .srq_ids
            .alloc(srqs.len(), |n| srqs.contains_key(&n))
            .ok_or(VerbsError::NoFreeSrq)?;
        // rxe rounds up to at least one SGE (RXE_MIN_SRQ_SGE).
        let srq = Srq::new(init.pd, init.max_wr, init.max_sge.max(1), init.limit);
        self.srqs.insert(id, srq);
        Ok(id)
    }

    /// `ibv_destroy_srq`: refused while a QP uses the SRQ (EBUSY, as the kernel's
    /// `ib_destroy_srq_user` with a nonzero `usecnt`). The WQEs still in it go with it,
    /// without completions (they belong to no QP).
    pub fn destroy_srq(&mut self, srq: u32) -> Result<(), VerbsError> {
        let s = self.srqs.get(&srq).ok_or(VerbsError::NoSuchSrq(srq))?;
        if let Some(&qpn) = s.qps.first() {
            return Err(VerbsError::SrqInUse { srq, qpn });
        }
        self.srqs.remove(&srq);
        Ok(())
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, srq: u32) -> Result<SrqAttr, VerbsError> {
        Ok(self
            .srqs
            .get(&srq)
            .ok_or(VerbsError::NoSuchSrq(srq))?
            .attr())
    }

    /// The SRQ, for inspection.
    pub fn srq(&self, srq: u32) -> Result<&Srq, VerbsError> {
        self.srqs.get(&srq).ok_or(VerbsError::NoSuchSrq(srq))
    }

    /// `ibv_modify_srq`: `max_wr` resizes (IBV_SRQ_MAX_WR), `limit` arms the limit event
    /// (IBV_SRQ_LIMIT; 0 disarms). rxe's checks (`rxe_srq_chk_attr`): a limit above the
    /// SRQ's size is EINVAL, a size below the armed limit (without a new limit) is EINVAL,
    /// and a resize cannot drop WQEs already posted (`rxe_queue_resize` fails when they do
    /// not fit).
    pub fn modify_srq(
        &mut self,
        srq: u32,
        max_wr: Option<usize>,
        limit: Option<u32>,
    ) -> Result<(), VerbsError> {
        let depth = self.cfg.max_queue_depth;
        let s = self.srqs.get_mut(&srq).ok_or(VerbsError::NoSuchSrq(srq))?;
        let now = s.attr();
        let new_wr = max_wr.unwrap_or(now.max_wr);
        if let Some(w) = max_wr {
            if w > depth {
                return Err(VerbsError::CapTooLarge {
                    what: "srq max_wr",
                    asked: w,
                    max: depth,
                });
            }
            if w == 0 || w < s.len() {
                return Err(VerbsError::InvalidAttr {
                    attr: "srq max_wr",
                    value: w as u64,
                    why: "smaller than the WQEs posted (or 0)",
                });
            }
            if limit.is_none() && (w as u64) < u64::from(now.limit) {
                return Err(VerbsError::InvalidAttr {
                    attr: "srq max_wr",
                    value: w as u64,
                    why: "smaller than the armed srq_limit",
                });
            }
        }
        if let Some(l) = limit {
            if l as usize > new_wr {
                return Err(VerbsError::InvalidAttr {
                    attr: "srq_limit",
                    value: u64::from(l),
                    why: "larger than max_wr",
                });
            }
        }
        s.set(new_wr, limit.unwrap_or(now.limit));
        Ok(())
    }

    /// `ibv_post_srq_recv`. A full SRQ is ENOMEM (rxe's `post_one_recv`: `queue_full`),
    /// too many SGEs EINVAL. Posting never raises the limit event: only a WQE taken does.
    pub fn post_srq_recv(&mut self, srq: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let s = self.srqs.get_mut(&srq).ok_or(VerbsError::NoSuchSrq(srq))?;
        let a = s.attr();
        if s.len() >= a.max_wr {
            return Err(VerbsError::SrqFull {
                srq,
                depth: a.max_wr,
            });
        }
        if wr.sges.len() > a.max_sge {
            return Err(VerbsError::TooManySge {
                n: wr.sges.len(),
                max: a.max_sge,
            });
        }
        let sges = SgeList::new(wr.sges);
        let len = sges.total().ok_or(VerbsError::MessageTooLong {
            len: wr.sges.iter().map(|s| u64::from(s.length)).sum(),
        })?;
        s.push(RecvWqe {
            wr_id: wr.wr_id,
            sges,
            len,
        });
        Ok(())
    }
}
