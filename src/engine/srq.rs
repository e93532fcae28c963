//! Shared receive queues (IBA 10.2.9, 11.2.3; rxe `rxe_srq.c`): one queue of receive WQEs
//! that several QPs draw from. A QP on an SRQ has no receive queue of its own; its
//! responder takes a WQE from the SRQ when a message that needs one starts
//! ([`crate::engine::qp::Qp::recv_wqe`]), so every WQE is consumed by exactly one message
//! of one QP.
//!
//! The limit ("low watermark") is one-shot: armed by `modify_srq(limit)`, it fires
//! `AsyncEvent::SrqLimitReached` the first time a WQE is taken and fewer than `limit` are
//! left, and disarms itself (limit back to 0) until the program arms it again (rxe
//! `get_srq_wqe`; IBA 11.2.3.4, C11-10).
//!
//! The commands live here as a second `impl Engine`, so that `engine/mod.rs` only gains
//! the table of SRQs.

use super::error::VerbsError;
use super::qp::wqe::{RecvWqe, SgeList};
use super::wr::RecvWr;
use super::{config, Engine};
use crate::mem::Pd;
use std::collections::{BTreeSet, VecDeque};

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

/// `ibv_query_srq`'s answer, and what `modify_srq` may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    pub max_wr: usize,
    pub max_sge: usize,
    /// 0 when the limit is not (or no longer) armed.
    pub limit: u32,
}

/// One shared receive queue.
#[derive(Debug)]
pub struct Srq {
    pub pd: Pd,
    ring: VecDeque<RecvWqe>,
    max_wr: usize,
    max_sge: usize,
    limit: u32,
    /// The QPs created on this SRQ, by QPN: destroy is refused while there is one.
    pub(crate) qps: BTreeSet<u32>,
}

/// The event a `take` raised, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitReached;

impl Srq {
    /// WQEs waiting.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            limit: self.limit,
        }
    }

    /// Takes the oldest WQE. After it, if the limit is armed and fewer than `limit` WQEs
    /// are left, the limit disarms and `LimitReached` says to raise the event once (rxe
    /// `get_srq_wqe`: `if (srq->limit && count < srq->limit) { srq->limit = 0; event }`).
    pub(crate) fn take(&mut self) -> Option<(RecvWqe, Option<LimitReached>)> {
        let w = self.ring.pop_front()?;
        let ev = if self.limit != 0 && (self.ring.len() as u64) < u64::from(self.limit) {
            self.limit = 0;
            Some(LimitReached)
        } else {
            None
        };
        Some((w, ev))
    }

    /// Gives back a WQE a QP took for a message it will never finish because it was reset
    /// or destroyed (no completion is owed then, IBA 10.3.1): at the front, so it is the
    /// next one used and no WQE is lost. rxe drops it (`RESPST_RESET` clears
    /// `resp.wqe`), which loses the buffer for good; giving it back is never worse. The
    /// SRQ may hold one more than `max_wr` for a while.
    pub(crate) fn give_back(&mut self, w: RecvWqe) {
        self.ring.push_front(w);
    }
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
        // rxe_srq_chk_init: a limit the SRQ can never go below is refused.
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
        self.srqs.insert(
            id,
            Srq {
                pd: init.pd,
                ring: VecDeque::with_capacity(init.max_wr),
                // rxe rounds up to at least one SGE (RXE_MIN_SRQ_SGE).
                max_wr: init.max_wr,
                max_sge: init.max_sge.max(1),
                limit: init.limit,
                qps: BTreeSet::new(),
            },
        );
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
        let new_wr = max_wr.unwrap_or(s.max_wr);
        if let Some(w) = max_wr {
            if w > depth {
                return Err(VerbsError::CapTooLarge {
                    what: "srq max_wr",
                    asked: w,
                    max: depth,
                });
            }
            if w == 0 || w < s.ring.len() {
                return Err(VerbsError::InvalidAttr {
                    attr: "srq max_wr",
                    value: w as u64,
                    why: "smaller than the WQEs posted (or 0)",
                });
            }
            if limit.is_none() && (w as u64) < u64::from(s.limit) {
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
        s.max_wr = new_wr;
        if let Some(l) = limit {
            s.limit = l;
        }
        Ok(())
    }

    /// `ibv_post_srq_recv`. A full SRQ is ENOMEM (rxe's `post_one_recv`: `queue_full`),
    /// too many SGEs EINVAL. Posting never raises the limit event: only a WQE taken does.
    pub fn post_srq_recv(&mut self, srq: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let s = self.srqs.get_mut(&srq).ok_or(VerbsError::NoSuchSrq(srq))?;
        if s.ring.len() >= s.max_wr {
            return Err(VerbsError::SrqFull {
                srq,
                depth: s.max_wr,
            });
        }
        if wr.sges.len() > s.max_sge {
            return Err(VerbsError::TooManySge {
                n: wr.sges.len(),
                max: s.max_sge,
            });
        }
        let sges = SgeList::new(wr.sges);
        let len = sges.total().ok_or(VerbsError::MessageTooLong {
            len: wr.sges.iter().map(|s| u64::from(s.length)).sum(),
        })?;
        s.ring.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges,
            len,
        });
        Ok(())
    }
}
