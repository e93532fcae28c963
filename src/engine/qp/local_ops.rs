//! The send queue's local operations, BIND_MW and LOCAL_INV (IBA 10.6.7; rxe
//! `rxe_do_local_ops`): the requester executes each when it reaches it, in send-queue
//! order (after the fence and SQD rules of any WQE), sends no packet, and the WQE then
//! completes in order with the others: at once if it is at the head of the send queue,
//! else when the WQEs before it have completed.
//!
//! An executed local WQE is `started` with an empty PSN range (`last_psn` one before
//! `first_psn`), so retries and ACKs pass over it and it is never executed twice. A
//! refused one carries its error (IBV_WC_MW_BIND_ERR for a bind, LOC_QP_OP_ERR for an
//! invalidation, as rxe) and fails the QP when it reaches the head, as a local
//! protection error does.

use super::{Ctx, Qp};
use crate::engine::wr::{SendOp, WcStatus};
use crate::mem::{OnQp, Rkey};

impl Qp {
    /// Executes the local WQE at the requester's position.
    pub(crate) fn do_local_op(&mut self, ctx: &mut Ctx<'_>, idx: usize) {
        let w = self.sq[idx];
        let who = self.who();
        let r = match w.op {
            SendOp::BindMw {
                mw_rkey,
                new_rkey,
                bind,
            } => ctx
                .mem
                .bind_mw(who, Rkey(mw_rkey), new_rkey as u8, &bind)
                .map(|_| ())
                .map_err(|e| (WcStatus::MwBindErr, e)),
            SendOp::LocalInv { rkey } => ctx
                .mem
                .invalidate_mw(who, Rkey(rkey))
                .map_err(|e| (WcStatus::LocQpOpErr, e)),
            _ => unreachable!("only BIND_MW and LOCAL_INV are local"),
        };
        match r {
            Ok(()) => {
                let psn = self.req.psn;
                let e = &mut self.sq[idx];
                e.started = true;
                e.first_psn = psn;
                e.last_psn = psn.sub(1);
                self.req.sq_idx += 1;
                self.req.offset = 0;
                if idx == 0 {
                    self.complete_front(ctx, WcStatus::Success);
                }
            }
            Err((status, e)) => {
                tracing::debug!(qpn = self.qpn, wr_id = w.wr_id, "{:?} refused: {e}", w.op);
                self.sq[idx].error = Some(status);
                if idx == 0 {
                    self.enter_error(ctx, true);
                }
            }
        }
    }

    /// Who presents an R_Key arriving on this QP (its PD, and itself for type 2
    /// windows).
    pub(crate) fn who(&self) -> OnQp {
        OnQp::new(self.pd, self.qpn)
    }

    /// Whether the head of the send queue is a local WQE already executed (it completes
    /// as soon as it gets there).
    pub(crate) fn local_done_at_front(&self) -> bool {
        self.sq
            .front()
            .is_some_and(|w| w.op.is_local() && w.started && w.error.is_none())
    }
}

#[cfg(test)]
mod tests;
