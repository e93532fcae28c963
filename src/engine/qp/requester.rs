//! The requester (IBA 9.7.4, rxe_req.c): turns send WQEs into request packets. It picks
//! FIRST/MIDDLE/LAST/ONLY from where the packet falls in the message, assigns PSNs (READ
//! requests take one PSN per expected response packet), asks for ACKs, respects fences,
//! max_rd_atomic and the in-flight window, and after a retry resumes from any PSN.

use super::timers::QpTimer;
use super::wqe::SendWqe;
use super::{uc, Ctx, Qp, QpState, QpType};
use crate::engine::stats::Counter;
use crate::engine::wr::{SendOp, WcStatus};
use crate::engine::EngineConfig;
use crate::wire::opcode::{op, Opcode};
use crate::wire::{AtomicEthRepr, BthRepr, IethRepr, ImmDtRepr, Psn, RethRepr, RoceRepr};

#[derive(Debug, Default)]
pub struct Requester {
    /// PSN of the next request packet.
    pub psn: Psn,
    /// One past the highest PSN ever sent (retries go back, this does not).
    pub psn_high: Psn,
    /// Index in the send queue (from its front) of the WQE being sent.
    pub sq_idx: usize,
    /// Bytes of that WQE already sent (SEND/WRITE).
    pub offset: u32,
    /// Packets sent since the last one with AckReq.
    pub since_ack_req: u32,
}

impl Requester {
    pub fn reset(&mut self, psn: Psn) {
        *self = Requester {
            psn,
            psn_high: psn,
            ..Requester::default()
        };
    }
}

/// The RC opcode of one packet of a SEND or WRITE message.
fn send_write_opcode(o: &SendOp, first: bool, last: bool) -> Opcode {
    use SendOp::*;
    match (o, first, last) {
        (Send, true, true) => op::RC_SEND_ONLY,
        (SendWithImm { .. }, true, true) => op::RC_SEND_ONLY_WITH_IMMEDIATE,
        (SendWithInv { .. }, true, true) => op::RC_SEND_ONLY_WITH_INVALIDATE,
        (Send | SendWithImm { .. } | SendWithInv { .. }, true, false) => op::RC_SEND_FIRST,
        (Send | SendWithImm { .. } | SendWithInv { .. }, false, false) => op::RC_SEND_MIDDLE,
        (Send, false, true) => op::RC_SEND_LAST,
        (SendWithImm { .. }, false, true) => op::RC_SEND_LAST_WITH_IMMEDIATE,
        (SendWithInv { .. }, false, true) => op::RC_SEND_LAST_WITH_INVALIDATE,
        (Write { .. }, true, true) => op::RC_RDMA_WRITE_ONLY,
        (WriteWithImm { .. }, true, true) => op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (Write { .. } | WriteWithImm { .. }, true, false) => op::RC_RDMA_WRITE_FIRST,
        (Write { .. } | WriteWithImm { .. }, false, false) => op::RC_RDMA_WRITE_MIDDLE,
        (Write { .. }, false, true) => op::RC_RDMA_WRITE_LAST,
        (WriteWithImm { .. }, false, true) => op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (Read { .. }, _, _) => op::RC_RDMA_READ_REQUEST,
        (CompareSwap { .. }, _, _) => op::RC_COMPARE_SWAP,
        (FetchAdd { .. }, _, _) => op::RC_FETCH_ADD,
        (BindMw { .. } | LocalInv { .. }, _, _) => unreachable!("local operations send nothing"),
    }
}

impl Qp {
    pub(crate) fn bth(
        &self,
        opcode: Opcode,
        psn: Psn,
        ack_req: bool,
        solicited: bool,
        pad: u8,
    ) -> BthRepr {
        BthRepr {
            opcode,
            solicited,
            migreq: false,
            pad,
            tver: 0,
            pkey: self.attrs.pkey(),
            fecn: false,
            becn: false,
            dqpn: self.attrs.dest_qpn,
            ack_req,
            psn,
        }
    }

    /// Whether the WQE at `idx` may start now (fence, max_rd_atomic, SQ drain).
    fn may_start(&self, idx: usize, w: &SendWqe) -> bool {
        if w.started {
            return true; // a retry of something already counted and allowed
        }
        if self.state == QpState::Sqd {
            return false; // IBA 10.3.1: SQD starts no new message
        }
        if w.flags.fence && self.sq.iter().take(idx).any(|p| p.op.is_read_or_atomic()) {
            return false; // IBA 10.8.3.3: wait for earlier READs and atomics
        }
        // IBA 9.5: initiator depth. 0 means none at all (post_send refuses READs and
        // atomics then; one posted before max_rd_atomic was lowered to 0 in SQD waits).
        if w.op.is_read_or_atomic() && self.comp.outstanding_rd_atomic >= self.attrs.max_rd_atomic {
            return false;
        }
        true
    }

    /// Whether `next_request` has nothing to send, without side effects, for a reason only
    /// a later call on this QP can change (a command, an ACK, a timeout): not sending,
    /// waiting out an RNR NAK, the window full, or every WQE sent. The engine stops asking
    /// such a QP until then, so a QP in a long RNR wait costs nothing per packet.
    pub(crate) fn request_stalled(&self, cfg: &EngineConfig) -> bool {
        if self.qp_type == super::QpType::Ud {
            return self.ud_stalled();
        }
        if !self.sends() || self.timers.is_armed(QpTimer::RnrWait) {
            return true;
        }
        if self.qp_type == QpType::Uc {
            // No acknowledgements, so no window (rxe_requester bounds the unacknowledged
            // PSNs for RC only).
            return self.req.sq_idx >= self.sq.len();
        }
        // Keep the retransmission window well inside the PSN half-space. The distance is
        // taken unsigned: one READ may move the next PSN up to 2^23 past the oldest
        // unacknowledged one, which the signed serial difference reads as -2^23 (behind),
        // and a request sent then would make that READ's own responses look unsent
        // (IBA 9.7.1: PSNs are only ordered within 2^23 of each other). A distance above
        // 2^23 means the requester is behind (it is moved forward on the next ACK).
        let dist = self.req.psn.value().wrapping_sub(self.comp.psn.value()) & Psn::MASK;
        (dist >= cfg.max_inflight_psns && dist <= Psn::HALF) || self.req.sq_idx >= self.sq.len()
    }

    /// Writes the next request packet into `buf`; returns its length.
    pub(crate) fn next_request(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        if self.qp_type == super::QpType::Ud {
            return self.ud_next_request(ctx, buf);
        }
        // Local WQEs (BIND_MW, LOCAL_INV) ahead are executed on the way: they send
        // nothing, and each is taken once (the requester moves past it or the QP fails).
        let (idx, w) = loop {
            if self.request_stalled(ctx.cfg) {
                return None;
            }
            let idx = self.req.sq_idx;
            let w = *self.sq.get(idx)?;
            if w.error.is_some() {
                return None; // failed locally: waits for the WRs before it (below)
            }
            if self.req.offset == 0 && !self.may_start(idx, &w) {
                return None;
            }
            if !w.op.is_local() {
                break (idx, w);
            }
            if w.started {
                // Executed already: a go-back-N retry passes over it (never twice).
                self.req.sq_idx += 1;
                continue;
            }
            self.do_local_op(ctx, idx);
        };
        let mtu = self.mtu();
        let dist = self.req.psn.value().wrapping_sub(self.comp.psn.value()) & Psn::MASK;
        // A READ takes one PSN per response packet at once: it starts only if all of them
        // stay within 2^23 of the oldest unacknowledged PSN (a READ of 2^31 bytes at MTU
        // 256 spans exactly 2^23 and goes alone).
        if !w.started
            && matches!(w.op, SendOp::Read { .. })
            && dist < Psn::HALF
            && dist + SendWqe::npkts(w.len, mtu) > Psn::HALF
        {
            return None;
        }
        let psn = self.req.psn;
        if !w.started {
            let n = match w.op {
                SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
                _ => SendWqe::npkts(w.len, mtu),
            };
            let e = &mut self.sq[idx];
            e.started = true;
            e.first_psn = psn;
            e.last_psn = psn.add(n - 1);
            if w.op.is_read_or_atomic() {
                self.comp.outstanding_rd_atomic += 1;
            }
            if matches!(
                w.op,
                SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. }
            ) {
                ctx.stats.inc(Counter::RdmaSends);
            }
        }

        let (repr, npsn, consumed, done) = match w.op {
            SendOp::Read { remote } => {
                // A retried READ asks only for what has not arrived (IBA 9.7.4.1.4).
                let rest = w.len - w.read_done;
                let reth = RethRepr {
                    va: remote.va.wrapping_add(u64::from(w.read_done)),
                    rkey: remote.rkey,
                    dma_len: rest,
                };
                let r = RoceRepr {
                    reth: Some(reth),
                    ..RoceRepr::new(self.bth(op::RC_RDMA_READ_REQUEST, psn, true, false, 0))
                };
                (r, SendWqe::npkts(rest, mtu), 0, true)
            }
            SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => {
                let (swap_add, compare) = match w.op {
                    SendOp::CompareSwap { compare, swap, .. } => (swap, compare),
                    SendOp::FetchAdd { add, .. } => (add, 0),
                    _ => unreachable!(),
                };
                let opcode = send_write_opcode(&w.op, true, true);
                let r = RoceRepr {
                    atomic_eth: Some(AtomicEthRepr {
                        va: remote.va,
                        rkey: remote.rkey,
                        swap_add,
                        compare,
                    }),
                    ..RoceRepr::new(self.bth(opcode, psn, true, false, 0))
                };
                (r, 1, 0, true)
            }
            _ => {
                let off = self.req.offset;
                let len = (w.len - off).min(mtu);
                let first = off == 0;
                let last = off + len == w.len;
                let uc = self.qp_type == QpType::Uc;
                let opcode = send_write_opcode(&w.op, first, last);
                let opcode = if uc { uc::uc_opcode(opcode) } else { opcode };
                let ack_req = !uc && (last || self.req.since_ack_req + 1 >= ctx.cfg.ack_req_every);
                let solicited = last && w.flags.solicited;
                let mut r = RoceRepr {
                    payload_len: len as usize,
                    ..RoceRepr::new(self.bth(
                        opcode,
                        psn,
                        ack_req,
                        solicited,
                        RoceRepr::pad_for(len as usize),
                    ))
                };
                let info = opcode.info().expect("table has every RC and UC opcode");
                if info.has(crate::wire::opcode::Headers::RETH) {
                    let remote = match w.op {
                        SendOp::Write { remote } | SendOp::WriteWithImm { remote, .. } => remote,
                        _ => unreachable!("only WRITEs carry a RETH"),
                    };
                    r.reth = Some(RethRepr {
                        va: remote.va,
                        rkey: remote.rkey,
                        dma_len: w.len,
                    });
                }
                if info.has(crate::wire::opcode::Headers::IMMDT) {
                    if let SendOp::SendWithImm { imm } | SendOp::WriteWithImm { imm, .. } = w.op {
                        r.immdt = Some(ImmDtRepr { imm });
                    }
                }
                if info.has(crate::wire::opcode::Headers::IETH) {
                    if let SendOp::SendWithInv { rkey } = w.op {
                        r.ieth = Some(IethRepr { rkey });
                    }
                }
                (r, 1, len, last)
            }
        };

        let mut gathered = Ok(());
        let written = repr.emit_with(buf, |dst| {
            if !dst.is_empty() {
                gathered = w
                    .local
                    .gather(ctx.mem, self.pd, u64::from(self.req.offset), dst);
            }
        });
        let len = match written {
            Ok(n) => n,
            Err(_) => return None, // buffer too small: the caller's bug, nothing sent
        };
        ctx.stats.note_mem(&gathered);
        if gathered.is_err() {
            // Local protection error (IBA 10.8.3.1): the WQE fails and the QP goes to
            // ERR, but only once the WQEs before it, already sent and executing at the
            // responder, have completed with their true results (completions are in
            // order; flushing them would report applied WRITEs and atomics as not done).
            // Nothing more is sent meanwhile; the completer fails this WQE when it
            // reaches the head (rxe: `wqe_state_error`, COMPST_ERROR from get_wqe).
            self.sq[idx].error = Some(WcStatus::LocProtErr);
            if idx == 0 {
                self.enter_error(ctx, true);
            }
            return None;
        }

        self.req.psn = psn.add(npsn);
        if self.req.psn.diff(self.req.psn_high) > 0 {
            self.req.psn_high = self.req.psn;
        }
        self.req.since_ack_req = if repr.bth.ack_req {
            0
        } else {
            self.req.since_ack_req + 1
        };
        if done {
            self.req.sq_idx += 1;
            self.req.offset = 0;
        } else {
            self.req.offset += consumed;
        }
        if self.qp_type == QpType::Uc {
            if done {
                self.uc_message_sent(ctx);
            }
            return Some(len);
        }
        if !self.timers.is_armed(QpTimer::Retransmit) {
            self.arm_retransmit(ctx);
        }
        Some(len)
    }

    /// Points the requester at `psn`: the WQE that holds it and the byte offset of that
    /// packet, or the first WQE not yet started.
    pub(crate) fn seek(&mut self, psn: Psn) {
        let mtu = self.mtu();
        let mut idx = 0;
        let mut offset = 0;
        for (i, w) in self.sq.iter().enumerate() {
            idx = i;
            if !w.started {
                break;
            }
            if w.contains(psn) {
                let k = psn.diff(w.first_psn) as u32;
                offset = match w.op {
                    SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 0,
                    _ => k * mtu,
                };
                break;
            }
            idx = i + 1;
        }
        self.req.sq_idx = idx;
        self.req.offset = offset;
        self.req.psn = psn;
        self.req.since_ack_req = 0;
    }
}
