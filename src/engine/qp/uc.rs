//! Unreliable Connected (IBA 9.8, rxe's UC paths): RC's requester without ACKs, retries,
//! READs or atomics, and a responder that drops the message in progress on a lost packet
//! (`responder/uc.rs`). What differs from RC on the sending side lives here: the
//! modify-QP rules, the operations a UC QP may post, the opcodes, and the completion of
//! a send WR as soon as its last packet is handed out.

use super::attr::{Attr, QpState};
use super::{Ctx, Qp};
use crate::engine::wr::{SendOp, WcStatus};
use crate::wire::opcode::Opcode;

/// Required and optional attributes of a UC transition, or `None` if it does not exist:
/// the UC rows of the kernel's `qp_state_table` (drivers/infiniband/core/verbs.c, checked
/// by `ib_modify_qp_is_ok`). UC has no responder resources, RNR timer, ACK timeout or
/// retry counts (the kernel table lists them for RC alone): INIT -> RTR needs the path,
/// the peer's QPN and the receive PSN; RTR -> RTS needs only the send PSN.
pub fn uc_rules(from: QpState, to: QpState) -> Option<(&'static [Attr], &'static [Attr])> {
    use Attr::*;
    use QpState::*;
    const NONE: &[Attr] = &[];
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (NONE, NONE),
        (Reset, Init) => (&[PkeyIndex, Port, AccessFlags], NONE),
        (Init, Init) => (NONE, &[PkeyIndex, Port, AccessFlags]),
        (Init, Rtr) => (&[Av, PathMtu, DestQpn, RqPsn], &[AccessFlags, PkeyIndex]),
        (Rtr, Rts) => (&[SqPsn], &[AccessFlags]),
        (Rts, Rts) => (NONE, &[AccessFlags]),
        (Rts, Sqd) => (NONE, &[EnSqdAsyncNotify]),
        (Sqd, Rts) => (NONE, &[AccessFlags]),
        (Sqd, Sqd) => (NONE, &[PkeyIndex, Av, AccessFlags]),
        _ => return None,
    })
}

/// The name of an operation UC cannot carry (IBA 9.8 and the opcode table in `wire::opcode`: UC has SEND and
/// RDMA WRITE, with or without immediate, and nothing else; rxe's `next_opcode_uc` has
/// no opcode for the others). `None` when the operation is allowed.
pub fn refused_on_uc(op: &SendOp) -> Option<&'static str> {
    match op {
        SendOp::Send
        | SendOp::SendWithImm { .. }
        | SendOp::Write { .. }
        | SendOp::WriteWithImm { .. } => None,
        // Executed locally, no packet (IBA 10.6.7.2: type 2 windows bind on UC too).
        op if op.is_local() => None,
        _ => Some(op.name()),
    }
}

/// The UC opcode of a SEND or WRITE packet from its RC opcode: the same operation bits
/// (the low five) under transport 001 (0x00-0x0B -> 0x20-0x2B, `wire::opcode`).
pub fn uc_opcode(rc: Opcode) -> Opcode {
    debug_assert!(rc.0 <= 0x0b, "only SEND and WRITE exist on UC");
    Opcode(0x20 | rc.0)
}

impl Qp {
    /// The last packet of the WQE at the front of the send queue was handed out: on UC it
    /// completes now, successfully (IBA 9.8, UC: no acknowledgement, the requester does not
    /// know whether the message arrived; rxe: `update_wqe_state` in rxe_req.c leaves a
    /// non-RC WQE out of the pending state, and `rxe_xmit_packet` in rxe_net.c marks it
    /// done once its END packet is sent and runs the completer, which completes it
    /// without an ACK). Nothing is left outstanding, so the completer's oldest
    /// unacknowledged PSN follows the requester.
    pub(crate) fn uc_message_sent(&mut self, ctx: &mut Ctx<'_>) {
        self.comp.psn = self.req.psn;
        self.complete_front(ctx, WcStatus::Success);
        self.check_drained(ctx);
    }
}
