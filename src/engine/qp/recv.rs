//! Where a QP's receive WQEs come from: its own receive queue, or the shared receive
//! queue it was created on (`engine/srq.rs`). Every transport's responder goes through
//! these few functions, so RC, UC and UD QPs on an SRQ behave alike:
//!
//! - [`Qp::recv_wqe`] at the start of a message that consumes a WQE (a SEND's first
//!   packet, a WRITE with immediate's last): the WQE the message goes into, or `None`
//!   (RC answers RNR NAK; UC and UD drop the message);
//! - [`Qp::current_recv_wqe`] for the packets after the first;
//! - [`Qp::consume_recv_wqe`] when its completion is written (success or error).
//!
//! Own RQ: the WQE stays at the head of the RQ until its completion (rxe's
//! `queue_head`, advanced in `do_complete`). SRQ: the WQE is taken out of the SRQ at the
//! start and held by the QP (rxe `get_srq_wqe` copies it into `qp->resp.srq_wqe` and
//! advances the SRQ's consumer index at once), so another QP can never take it too:
//! every WQE is consumed exactly once, by one message of one QP.
//!
//! The SRQ itself ([`Srq`]) is defined here, beside the code that takes from it; its
//! commands (create, modify, post, destroy) are `engine/srq.rs`.

use super::{Ctx, Qp};
use crate::engine::event::AsyncEvent;
use crate::engine::qp::wqe::RecvWqe;
use crate::engine::wr::{WcOpcode, WcStatus};
use crate::mem::Pd;
use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};

impl Qp {
    /// Takes the next receive WQE for this QP, for a message that starts now (or the one
    /// already taken for the message in progress). On an SRQ, taking a WQE may cross the
    /// armed limit: `SrqLimitReached` is raised once and the limit disarmed (rxe
    /// `get_srq_wqe`).
    pub(crate) fn recv_wqe(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvWqe> {
        let Some(n) = self.srq else {
            return self.rq.front().copied();
        };
        if let Some(w) = self.srq_wqe {
            return Some(w);
        }
        let (w, limit) = ctx.srqs.get_mut(&n)?.take()?;
        if limit.is_some() {
            ctx.events.push_back(AsyncEvent::SrqLimitReached { srq: n });
        }
        self.srq_wqe = Some(w);
        Some(w)
    }

    /// The WQE of the message in progress (taken by `recv_wqe` at its start).
    pub(crate) fn current_recv_wqe(&self) -> Option<RecvWqe> {
        match self.srq {
            Some(_) => self.srq_wqe,
            None => self.rq.front().copied(),
        }
    }

    /// Consumes the WQE of the message in progress: its completion is being written.
    pub(crate) fn consume_recv_wqe(&mut self) -> Option<RecvWqe> {
        match self.srq {
            Some(_) => self.srq_wqe.take(),
            None => self.rq.pop_front(),
        }
    }

    /// The receive side of a flush (ERR): every WQE of the QP's own RQ completes with
    /// WR_FLUSH_ERR. On an SRQ the QP owns only the WQE it took for a message in progress,
    /// which completes with WR_FLUSH_ERR too (rxe's `check_resource` in the error state:
    /// `if (qp->resp.wqe) { status = IB_WC_WR_FLUSH_ERR; return RESPST_COMPLETE; }`); the
    /// SRQ's WQEs stay for its other QPs. (Newer rxe, whose `flush_recv_queue` raises
    /// Last WQE Reached, returns early for an SRQ QP and never completes that WQE; IBA
    /// o11-5.2.5 counts "a CQE generated for the last WQE", so the completion is kept.)
    pub(crate) fn flush_recv(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(w) = self.srq_wqe.take() {
            let c = self.completion(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            ctx.complete(self.recv_cq, c);
        }
        while let Some(w) = self.rq.pop_front() {
            let c = self.completion(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0);
            ctx.complete(self.recv_cq, c);
        }
    }

    /// On entering ERR: a QP on an SRQ raises Last WQE Reached once (IBA o11-5.2.5; rxe
    /// `flush_recv_queue` with `notify`): it will take no more WQEs from the SRQ.
    pub(crate) fn last_wqe_reached(&mut self, ctx: &mut Ctx<'_>) {
        if self.srq.is_some() {
            ctx.events
                .push_back(AsyncEvent::QpLastWqeReached { qpn: self.qpn });
        }
    }

    /// RESET (or destroy) with a WQE taken for a message never finished: no completion is
    /// owed (IBA 10.3.1), so the WQE goes back to the SRQ rather than being lost.
    pub(crate) fn give_back_srq_wqe(&mut self, srqs: &mut FxHashMap<u32, Srq>) {
        let Some(w) = self.srq_wqe.take() else {
            return;
        };
        if let Some(s) = self.srq.and_then(|n| srqs.get_mut(&n)) {
            s.give_back(w);
        }
    }

    /// The QP is destroyed: it no longer holds its SRQ.
    pub(crate) fn leave_srq(&mut self, srqs: &mut FxHashMap<u32, Srq>) {
        self.give_back_srq_wqe(srqs);
        if let Some(s) = self.srq.and_then(|n| srqs.get_mut(&n)) {
            s.qps.remove(&self.qpn);
        }
    }
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
    pub(crate) fn new(pd: Pd, max_wr: usize, max_sge: usize, limit: u32) -> Srq {
        Srq {
            pd,
            ring: VecDeque::with_capacity(max_wr),
            max_wr,
            max_sge,
            limit,
            qps: BTreeSet::new(),
        }
    }

    /// `modify_srq`'s new size and limit (checked by the caller).
    pub(crate) fn set(&mut self, max_wr: usize, limit: u32) {
        self.max_wr = max_wr;
        self.limit = limit;
    }

    /// A posted WQE (room checked by the caller).
    pub(crate) fn push(&mut self, w: RecvWqe) {
        self.ring.push_back(w);
    }

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
