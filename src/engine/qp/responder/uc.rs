//! The UC responder (IBA 9.8; rxe_resp.c, the IB_QPT_UC branches of `check_psn`,
//! `check_op_seq`, `check_op_valid` and the error states): no ACK or NAK ever goes back,
//! and nothing is retried, so a lost or refused packet costs its whole message. The
//! message in progress is dropped, and every later packet with it, until a FIRST or ONLY
//! starts a new one at whatever PSN it carries (the responder resynchronises on it).
//!
//! - PSN gap, or a MIDDLE/LAST with no message in progress: the packet and the rest of
//!   its message are dropped (`drop_msg`), counted in `uc_drop_out_of_seq`.
//! - A FIRST/ONLY while a message is in progress: that message lost its end; it is given
//!   up and the new one starts. rxe's `check_op_seq` sends this case to
//!   `do_class_d1e_error`, which resets the WQE and also drops the new FIRST/ONLY (and so
//!   the whole next message, whose later packets then fail `check_psn`), although its
//!   comment says the packet "may be the start of a new message and could be valid";
//!   here the new message is delivered: a FIRST/ONLY is a valid start whatever came
//!   before it, and the responder resumes with it. Against rxe, the message after a
//!   lost MIDDLE or LAST arrives here and not there (conformance scripts see one more).
//! - No receive WQE for a SEND (or WRITE with immediate): the message is dropped, no RNR
//!   NAK (rxe RESPST_ERR_RNR, "UD/UC - class D").
//! - Anything RC would NAK (QP rights, R_Key, range, length) drops the message and keeps
//!   the QP (rxe RESPST_ERR_RKEY_VIOLATION / RESPST_ERR_LENGTH on UC without an SRQ:
//!   `drop_msg`, no completion); a receive WQE whose own memory fails still completes in
//!   error and moves the QP to ERR, as for every QP type (rxe RESPST_ERR_MALFORMED_WQE,
//!   class A), only without a NAK.
//!
//! A SEND's receive WQE stays at the head of the receive queue until a message completes
//! into it: one dropped partway is written over by the next message from offset 0 (rxe
//! `do_class_d1e_error` resets the WQE's DMA state the same way); it is never completed
//! for the dropped message (a UC message is delivered whole or not at all). Data a
//! dropped WRITE already placed stays where it was written, as on any NIC.

use super::{Fail, InMsg};
use crate::engine::qp::{Ctx, Qp};
use crate::engine::stats::Counter;
use crate::wire::opcode::{Flags, OpcodeInfo};
use crate::wire::RoceRepr;

impl Qp {
    /// A UC request packet: sequence rules first, then the checks and execution RC uses
    /// (their failures come back through `uc_fail` and `uc_drop`).
    pub(super) fn on_uc_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        r: &RoceRepr,
        info: &OpcodeInfo,
        payload: &[u8],
    ) {
        let psn = r.bth.psn;
        let in_msg = !matches!(self.resp.cur, InMsg::None);
        if info.is(Flags::START) {
            // A new message, at whatever PSN it carries (rxe `check_psn`: a START
            // packet clears `drop_msg` and goes on). One in progress lost its end.
            if in_msg {
                self.uc_abandon(ctx);
            }
            self.resp.drop_msg = false;
            self.resp.epsn = psn;
        } else {
            let continues = match self.resp.cur {
                InMsg::None => false,
                InMsg::Send { .. } => info.is(Flags::SEND),
                InMsg::Write { .. } => info.is(Flags::WRITE),
            };
            if self.resp.drop_msg || psn != self.resp.epsn || !continues {
                ctx.stats.inc(Counter::UcDropOutOfSeq);
                if !self.resp.drop_msg {
                    // Once per message lost (`ROCE_EMU_LOG=debug`): UC's only trace of it.
                    tracing::debug!(
                        "QP {:#x}: UC {} PSN {} dropped (expected PSN {}{}): its message                          is lost, the responder waits for the next FIRST or ONLY",
                        self.qpn,
                        r.bth.opcode,
                        psn.value(),
                        self.resp.epsn.value(),
                        if in_msg { "" } else { ", no message in progress" },
                    );
                }
                if in_msg {
                    self.uc_abandon(ctx);
                }
                self.resp.drop_msg = true;
                return;
            }
        }
        self.check_and_execute(ctx, r, info, payload);
    }

    /// Drops the message this packet belongs to (and the rest of it), counted in `why`.
    pub(super) fn uc_drop(&mut self, ctx: &mut Ctx<'_>, why: Counter) {
        ctx.stats.inc(why);
        tracing::debug!(
            "QP {:#x}: UC message dropped ({}; UC sends no NAK)",
            self.qpn,
            why.name()
        );
        if !matches!(self.resp.cur, InMsg::None) {
            self.uc_abandon(ctx);
        }
        self.resp.drop_msg = true;
    }

    /// What RC answers with a NAK, UC answers with silence: an invalid request or a
    /// remote access error drops the message; a receive WQE that cannot be written
    /// (its completion already reported by the caller) moves the QP to ERR.
    pub(super) fn uc_fail(&mut self, ctx: &mut Ctx<'_>, why: Fail) {
        match why {
            Fail::InvalidRequest | Fail::RemoteAccess => self.uc_drop(ctx, Counter::UcDropInvalid),
            Fail::RemoteOperational => {
                self.resp.cur = InMsg::None;
                ctx.events
                    .push_back(crate::engine::event::AsyncEvent::QpFatal { qpn: self.qpn });
                self.enter_error(ctx, false);
            }
        }
    }

    /// Gives up the message in progress: nothing completes for it; a SEND's receive WQE
    /// stays at the head of the queue for the next message.
    fn uc_abandon(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.inc(Counter::UcMsgAbandoned);
        self.resp.cur = InMsg::None;
    }
}
