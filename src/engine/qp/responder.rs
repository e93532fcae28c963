//! The responder (IBA 9.7.3-9.7.5, rxe_resp.c): request packets in; memory operations,
//! receive completions and ACK/NAK/READ responses/atomic ACKs out.
//!
//! Checks in rxe's order: PSN (duplicate -> re-ACK or replay; ahead -> one sequence NAK per
//! gap, as rxe's `sent_psn_nak`), opcode sequence, QP access rights, packet length,
//! receive WQE (RNR NAK if none), R_Key/PD/rights/range, then execute.
//!
//! Responses leave in PSN order through one queue. Consecutive ACKs coalesce into the
//! last one (an ACK acknowledges everything before it, IBA 9.7.5.1). READ responses are
//! generated from memory when transmitted, one packet per poll; READ and atomic requests
//! are remembered in a replay ring of max_dest_rd_atomic entries so that a duplicate is
//! answered again, never executed again (IBA 9.7.5.1.2: atomics exactly once).

use super::{Ctx, Qp, QpType};
use crate::engine::event::AsyncEvent;
use crate::engine::stats::Counter;
use crate::engine::wr::{Completion, WcOpcode, WcStatus};
use crate::mem::{Access, Rkey};
use crate::wire::aeth::CREDITS_INVALID;
use crate::wire::opcode::{op, Flags, Headers, OpcodeInfo};
use crate::wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, NakCode, Psn, RethRepr, RoceRepr, Syndrome,
};
use std::collections::VecDeque;

mod duplicate;
mod refusal;
mod uc;

/// MSNs are 24 bits.
const MSN_MASK: u32 = 0x00ff_ffff;

/// A message being received.
#[derive(Debug, Clone, Copy, Default)]
enum InMsg {
    #[default]
    None,
    /// A SEND into the receive WQE at the front of the RQ, `offset` bytes in.
    Send { offset: u32 },
    /// An RDMA WRITE: where the next byte goes and how many the RETH still allows.
    Write {
        va: u64,
        rkey: u32,
        resid: u32,
        total: u32,
    },
}

/// A response waiting to be sent, in PSN order.
#[derive(Debug, Clone, Copy)]
enum Response {
    /// ACK, RNR NAK or NAK.
    Ack {
        psn: Psn,
        msn: u32,
        syndrome: Syndrome,
    },
    /// READ responses still to send: the next one has PSN `psn` and reads `va`.
    Read {
        slot: usize,
        psn: Psn,
        va: u64,
        rkey: u32,
        left: u32,
        first: bool,
        msn: u32,
    },
    Atomic {
        psn: Psn,
        msn: u32,
        orig: u64,
    },
}

/// A READ or atomic the responder executed, kept for duplicates.
#[derive(Debug, Clone, Copy)]
enum Replay {
    Read {
        first: Psn,
        last: Psn,
        va: u64,
        rkey: u32,
        len: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

#[derive(Debug, Default)]
pub struct Responder {
    /// The PSN expected next.
    pub epsn: Psn,
    /// Message sequence number: completed messages, 24 bits.
    pub msn: u32,
    /// A sequence NAK went out for the current gap (one per gap).
    nak_sent: bool,
    /// UC: the message in progress is being dropped, until the next FIRST or ONLY.
    drop_msg: bool,
    cur: InMsg,
    queue: VecDeque<Response>,
    replay: Vec<Option<Replay>>,
    replay_next: usize,
}

impl Responder {
    pub fn reset(&mut self, psn: Psn, ring: usize) {
        let ring = ring.max(1);
        *self = Responder {
            epsn: psn,
            queue: VecDeque::with_capacity(2 * ring + 4),
            replay: vec![None; ring],
            ..Responder::default()
        };
    }

    /// A new max_dest_rd_atomic after the responder started (SQD -> SQD, IBA 11.2.4.2):
    /// the replay ring takes the new size. Entries are kept, newest first, as many as fit,
    /// so that duplicates of requests already executed can still be answered (rxe
    /// reallocates and forgets them; keeping them is never worse). Queued READ streams
    /// follow their entry to its new slot.
    pub fn resize(&mut self, ring: usize) {
        let ring = ring.max(1);
        let old = self.replay.len();
        if ring == old {
            return;
        }
        // Oldest first: the slot about to be reused is the oldest.
        let order: Vec<usize> = (0..old).map(|i| (self.replay_next + i) % old).collect();
        let keep = &order[old.saturating_sub(ring)..];
        let mut replay = vec![None; ring];
        let mut moved = vec![usize::MAX; old];
        for (new, &o) in keep.iter().enumerate() {
            replay[new] = self.replay[o];
            moved[o] = new;
        }
        for q in self.queue.iter_mut() {
            if let Response::Read { slot, .. } = q {
                *slot = moved.get(*slot).copied().unwrap_or(usize::MAX);
            }
        }
        self.replay_next = keep.len() % ring;
        self.replay = replay;
    }

    pub fn drop_current_message(&mut self) {
        self.cur = InMsg::None;
    }

    pub fn has_pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether all that waits is one positive ACK. It can yield to the QP's own
    /// requests: it is cumulative and covers nothing they depend on, and behind a
    /// request of the same length or longer it rides in the same GSO send (the kernel
    /// lets only a train's last segment be shorter).
    pub fn only_ack_pending(&self) -> bool {
        self.queue.len() == 1
            && matches!(
                self.queue.front(),
                Some(Response::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                })
            )
    }

    /// Queues an ACK, coalescing with an ACK already waiting at the back.
    fn push_ack(&mut self, psn: Psn, msn: u32, stats: &mut crate::engine::stats::Counters) {
        if let Some(Response::Ack {
            psn: p,
            msn: m,
            syndrome: Syndrome::Ack { .. },
        }) = self.queue.back_mut()
        {
            if psn.diff(*p) >= 0 {
                *p = psn;
                *m = msn;
                stats.inc(Counter::AcksCoalesced);
                return;
            }
        }
        self.queue.push_back(Response::Ack {
            psn,
            msn,
            syndrome: Syndrome::Ack {
                credits: CREDITS_INVALID,
            },
        });
    }

    /// Queues a NAK (it acknowledges everything before it, so a waiting ACK is replaced).
    fn push_nak(&mut self, psn: Psn, msn: u32, syndrome: Syndrome) {
        if let Some(Response::Ack {
            syndrome: Syndrome::Ack { .. },
            ..
        }) = self.queue.back()
        {
            self.queue.pop_back();
        }
        self.queue.push_back(Response::Ack { psn, msn, syndrome });
    }

    /// The replay entries with their slots, newest first. PSNs repeat every 2^24: an
    /// entry left from 2^24 PSNs earlier can carry the PSN of a newer one, and a
    /// duplicate must be answered by the newest (a conforming requester only repeats
    /// PSNs it sent within the last 2^23, and the ring forgets oldest first, so the
    /// newest match is the request being repeated).
    fn newest_first(&self) -> impl Iterator<Item = (usize, &Option<Replay>)> {
        let n = self.replay.len();
        (1..=n).map(move |i| {
            let slot = (self.replay_next + n - i) % n;
            (slot, &self.replay[slot])
        })
    }

    fn remember(&mut self, r: Replay) -> usize {
        let slot = self.replay_next;
        self.replay[slot] = Some(r);
        self.replay_next = (slot + 1) % self.replay.len();
        // A READ stream still queued for the slot being reused is left to finish: it
        // carries its own parameters.
        slot
    }
}

/// Why a request failed, as the NAK and the QP error it causes (IBA 9.9.2, responder
/// error classes; rxe `do_class_ac_error`).
#[derive(Debug, Clone, Copy)]
enum Fail {
    InvalidRequest,
    RemoteAccess,
    RemoteOperational,
}

impl Qp {
    /// Handles a request packet with its payload.
    pub(crate) fn on_request(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr, payload: &[u8]) {
        let info = r.bth.opcode.info().expect("parsed");
        if self.qp_type == QpType::Uc {
            return self.on_uc_request(ctx, r, info, payload);
        }
        let psn = r.bth.psn;
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            return self.out_of_sequence(ctx);
        }
        if d < 0 {
            ctx.stats.inc(Counter::DuplicateRequest);
            return self.on_duplicate(ctx, r, info);
        }
        self.resp.nak_sent = false;

        // Opcode sequence (rxe check_op_seq): a message's packets follow
        // its FIRST; nothing else may interleave.
        let seq_ok = match self.resp.cur {
            InMsg::None => info.is(Flags::START),
            InMsg::Send { .. } => info.is(Flags::SEND) && !info.is(Flags::START),
            InMsg::Write { .. } => info.is(Flags::WRITE) && !info.is(Flags::START),
        };
        if !seq_ok {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        self.check_and_execute(ctx, r, info, payload)
    }

    /// A request in sequence: rights, resources, length, receive WQE, then execute.
    fn check_and_execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        r: &RoceRepr,
        info: &OpcodeInfo,
        payload: &[u8],
    ) {
        let psn = r.bth.psn;
        // The QP must allow the operation (IBA 10.2.4: QP access rights).
        let need = if info.is(Flags::WRITE) {
            Some(Access::REMOTE_WRITE)
        } else if info.is(Flags::READ) {
            Some(Access::REMOTE_READ)
        } else if info.is(Flags::ATOMIC) {
            Some(Access::REMOTE_ATOMIC)
        } else {
            None
        };
        if need.is_some_and(|n| !self.attrs.access.contains(n)) {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        // max_dest_rd_atomic = 0: the responder takes no READ or atomic at all (IBA
        // 9.7.5.2.x responder resources; rxe `check_resource`:
        // RESPST_ERR_TOO_MANY_RDMA_ATM_REQ -> NAK Invalid Request).
        if (info.is(Flags::READ) || info.is(Flags::ATOMIC)) && self.attrs.max_dest_rd_atomic == 0 {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        // Packet length against the path MTU (rxe check_length).
        let mtu = self.mtu() as usize;
        let len = payload.len();
        let len_ok = if !info.is(Flags::PAYLOAD) {
            true
        } else if info.is(Flags::START) && info.is(Flags::END) {
            len <= mtu
        } else if info.is(Flags::START) || info.is(Flags::MIDDLE) {
            len == mtu
        } else {
            len >= 1 && len <= mtu
        };
        if !len_ok {
            refusal::length(self.qpn, psn, len, mtu as u32);
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        // A RETH may not announce more than a message can hold (IBA 9.4.1: 2^31 bytes;
        // rxe `check_length`: dmalen > 1 << 31 -> length error, Invalid Request), checked
        // before the R_Key as rxe does; larger values also broke PSN arithmetic (a READ
        // of 2^32 - 1 bytes at MTU 256 spans the whole PSN space).
        if r.reth
            .is_some_and(|x| u64::from(x.dma_len) > crate::engine::MAX_MSG)
        {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        // A packet that consumes a receive WQE needs one (IBA 9.7.5.2.8: RNR NAK): from
        // the QP's RQ or, on an SRQ, taken from it now (`recv.rs`; rxe `check_resource`).
        let needs_wqe = info.is(Flags::RWR)
            && (info.is(Flags::START) || info.is(Flags::IMM) && info.is(Flags::WRITE));
        if needs_wqe && self.recv_wqe(ctx).is_none() {
            if self.qp_type == QpType::Uc {
                return self.uc_drop(ctx, Counter::UcDropNoRecvWqe);
            }
            ctx.stats.inc(Counter::SendRnrErr);
            let (m, t) = (self.resp.msn, self.attrs.min_rnr_timer);
            self.resp.push_nak(psn, m, Syndrome::RnrNak { timer: t });
            return;
        }

        if info.is(Flags::SEND) {
            self.exec_send(ctx, r, info, payload)
        } else if info.is(Flags::WRITE) {
            self.exec_write(ctx, r, info, payload)
        } else if info.is(Flags::READ) {
            self.exec_read(ctx, r)
        } else {
            self.exec_atomic(ctx, r)
        }
    }

    /// A request ahead of the expected PSN: a packet was lost. One sequence NAK per gap
    /// (IBA 9.7.5.2.1).
    fn out_of_sequence(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.inc(Counter::OutOfSeqRequest);
        if !self.resp.nak_sent {
            self.resp.nak_sent = true;
            ctx.stats.inc(Counter::NaksSent);
            let (e, m) = (self.resp.epsn, self.resp.msn);
            self.resp
                .push_nak(e, m, Syndrome::Nak(NakCode::PsnSequenceError));
        }
    }

    /// A request with a reserved or unimplemented opcode (its headers unknown, so only
    /// its PSN is used): out of sequence as any request; a duplicate is dropped (it can
    /// never have been executed); at the expected PSN it is an invalid request (IBA 9.9,
    /// responder class C: NAK Invalid Request, QP to ERR).
    pub(crate) fn on_unsupported_request(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            return self.out_of_sequence(ctx);
        }
        if d < 0 {
            ctx.stats.inc(Counter::DuplicateRequest);
            return;
        }
        self.resp.nak_sent = false;
        self.responder_fail(ctx, psn, Fail::InvalidRequest);
    }

    /// After a SEND or WRITE packet: next PSN, and an ACK if asked for.
    fn accept_packet(&mut self, ctx: &mut Ctx<'_>, bth: &BthRepr) {
        self.resp.epsn = bth.psn.add(1);
        if bth.ack_req && self.qp_type == QpType::Rc {
            let m = self.resp.msn;
            self.resp.push_ack(bth.psn, m, ctx.stats);
        }
    }

    fn end_message(&mut self) {
        self.resp.msn = (self.resp.msn + 1) & MSN_MASK;
        self.resp.cur = InMsg::None;
    }

    fn exec_send(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr, info: &OpcodeInfo, payload: &[u8]) {
        let psn = r.bth.psn;
        let offset = match self.resp.cur {
            InMsg::Send { offset } => offset,
            _ => 0,
        };
        let wqe = self
            .current_recv_wqe()
            .expect("checked: a receive WQE is posted");
        let end = u64::from(offset) + payload.len() as u64;
        if end > u64::from(wqe.len) {
            // The message does not fit the receive buffers (local length error at
            // the receiver, Invalid Request NAK to the sender; UC drops it, below).
            if self.qp_type == QpType::Uc {
                return self.uc_drop(ctx, Counter::UcDropInvalid);
            }
            self.complete_recv(ctx, WcStatus::LocLenErr, WcOpcode::Recv, offset, None, None);
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        if !payload.is_empty() && {
            let r = crate::mem::scatter(
                ctx.mem,
                self.pd,
                wqe.sges.as_slice(),
                u64::from(offset),
                payload,
            );
            ctx.stats.note_mem(&r);
            r.is_err()
        } {
            self.complete_recv(
                ctx,
                WcStatus::LocProtErr,
                WcOpcode::Recv,
                offset,
                None,
                None,
            );
            return self.responder_fail(ctx, psn, Fail::RemoteOperational);
        }
        let offset = end as u32;
        if info.is(Flags::END) {
            let mut inv = None;
            if let Some(ieth) = r.ieth {
                // SEND with invalidate (IBA 10.6.7.2.5): only a type 2 window bound on
                // this QP may be invalidated by the peer (there is no fast registration);
                // any other key (unknown, other PD or QP, a registered region, a type 1
                // window) is an R_Key violation (`MrTable::invalidate_remote`): NAK
                // Remote Access Error and the QP goes to ERR. rxe fails the same way
                // (`invalidate_rkey` -> RESPST_ERR_INVALIDATE_RKEY, "Class J") and
                // completes the receive WQE with REM_INV_REQ_ERR, as here; it then sends
                // a positive ACK (its aeth_syndrome is left at ACK), which would tell the
                // sender its message was fine, so the NAK is ours.
                let who = self.who();
                if ctx.mem.invalidate_remote(who, Rkey(ieth.rkey)).is_err() {
                    self.complete_recv(
                        ctx,
                        WcStatus::RemInvReqErr,
                        WcOpcode::Recv,
                        offset,
                        None,
                        None,
                    );
                    return self.responder_fail(ctx, psn, Fail::RemoteAccess);
                }
                inv = Some(ieth.rkey);
            }
            let imm = r.immdt.map(|i| i.imm);
            self.complete_recv(ctx, WcStatus::Success, WcOpcode::Recv, offset, imm, inv);
            ctx.stats.inc(Counter::RdmaRecvs);
            self.end_message();
        } else {
            self.resp.cur = InMsg::Send { offset };
        }
        self.accept_packet(ctx, &r.bth);
    }

    fn exec_write(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr, info: &OpcodeInfo, payload: &[u8]) {
        let psn = r.bth.psn;
        let (va, rkey, resid, total) = match (self.resp.cur, r.reth) {
            (
                InMsg::Write {
                    va,
                    rkey,
                    resid,
                    total,
                },
                _,
            ) => (va, rkey, resid, total),
            (_, Some(reth)) => {
                // Check the whole target once, at the start.
                if !self.reth_allowed(ctx, psn, &reth, Access::REMOTE_WRITE) {
                    return self.responder_fail(ctx, psn, Fail::RemoteAccess);
                }
                (reth.va, reth.rkey, reth.dma_len, reth.dma_len)
            }
            _ => return self.responder_fail(ctx, psn, Fail::InvalidRequest),
        };
        let len = payload.len() as u32;
        if len > resid || (info.is(Flags::END) && len != resid) {
            // More than the RETH announced, or less by the last packet.
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        // Payload and pad fill whole 4-byte words (IBA 9.2.3): pad 0 before the last
        // packet, -resid & 3 on it (rxe `check_rkey`: a length error, Invalid Request).
        // A zero-length WRITE skips the check as in rxe (C9-88: nothing to validate).
        if total != 0 && (payload.len() + usize::from(r.bth.pad)) % 4 != 0 {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        }
        if !payload.is_empty() {
            let r = ctx.mem.write_remote(self.who(), Rkey(rkey), va, payload);
            ctx.stats.note_mem(&r);
            if let Err(e) = r {
                let len = payload.len() as u64;
                refusal::access(self.qpn, "WRITE", psn, rkey, va, len, &e);
                return self.responder_fail(ctx, psn, Fail::RemoteAccess);
            }
        }
        if info.is(Flags::END) {
            if let Some(imm) = r.immdt {
                self.complete_recv(
                    ctx,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    total,
                    Some(imm.imm),
                    None,
                );
            }
            self.end_message();
        } else {
            self.resp.cur = InMsg::Write {
                va: va.wrapping_add(u64::from(len)),
                rkey,
                resid: resid - len,
                total,
            };
        }
        self.accept_packet(ctx, &r.bth);
    }

    /// Whether the RETH's R_Key, PD, rights and whole range allow the access. A
    /// zero-length transfer needs no valid address or key (C9-88, as rxe cites it).
    fn reth_allowed(&self, ctx: &Ctx<'_>, psn: Psn, reth: &RethRepr, need: Access) -> bool {
        let (rkey, va, len) = (reth.rkey, reth.va, u64::from(reth.dma_len));
        if len == 0 {
            return true;
        }
        let r = ctx.mem.lookup_remote(self.who(), Rkey(rkey), va, len, need);
        if let Err(e) = &r {
            refusal::access(self.qpn, refusal::op_of(need), psn, rkey, va, len, e);
        }
        r.is_ok()
    }

    fn exec_read(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr) {
        let psn = r.bth.psn;
        let Some(reth) = r.reth else {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        };
        if !self.reth_allowed(ctx, psn, &reth, Access::REMOTE_READ) {
            return self.responder_fail(ctx, psn, Fail::RemoteAccess);
        }
        let n = super::wqe::SendWqe::npkts(reth.dma_len, self.mtu());
        let slot = self.resp.remember(Replay::Read {
            first: psn,
            last: psn.add(n - 1),
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
        });
        self.end_message();
        let msn = self.resp.msn;
        self.resp.queue.push_back(Response::Read {
            slot,
            psn,
            va: reth.va,
            rkey: reth.rkey,
            left: reth.dma_len,
            first: true,
            msn,
        });
        self.resp.epsn = psn.add(n);
    }

    fn exec_atomic(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr) {
        let psn = r.bth.psn;
        let Some(a) = r.atomic_eth else {
            return self.responder_fail(ctx, psn, Fail::InvalidRequest);
        };
        let res = if r.bth.opcode == op::RC_COMPARE_SWAP {
            ctx.mem
                .compare_swap(self.who(), Rkey(a.rkey), a.va, a.compare, a.swap_add)
        } else {
            let who = self.who();
            ctx.mem.fetch_add(who, Rkey(a.rkey), a.va, a.swap_add)
        };
        ctx.stats.note_mem(&res);
        // The R_Key, PD, rights and range are checked before the alignment (rxe
        // `check_rkey` then `atomic_reply`; MrTable::compare_swap's documented order): a
        // bad key is a Remote Access Error whatever the address. A misaligned address
        // with a good key is an Invalid Request (IBA 9.4.5: atomics act on naturally
        // aligned 8-byte words; rxe RESPST_ERR_MISALIGNED_ATOMIC).
        let orig = match res {
            Ok(orig) => orig,
            Err(crate::mem::MemError::MisalignedAtomic { .. }) => {
                return self.responder_fail(ctx, psn, Fail::InvalidRequest)
            }
            Err(e) => {
                refusal::access(self.qpn, "atomic", psn, a.rkey, a.va, 8, &e);
                return self.responder_fail(ctx, psn, Fail::RemoteAccess);
            }
        };
        self.resp.remember(Replay::Atomic { psn, orig });
        self.end_message();
        let msn = self.resp.msn;
        self.resp
            .queue
            .push_back(Response::Atomic { psn, msn, orig });
        self.resp.epsn = psn.add(1);
    }

    /// A receive completion for the WQE of the message (the RQ's head, or the one taken
    /// from the SRQ).
    fn complete_recv(
        &mut self,
        ctx: &mut Ctx<'_>,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        invalidated_rkey: Option<u32>,
    ) {
        let Some(w) = self.consume_recv_wqe() else {
            return;
        };
        let c = Completion {
            imm,
            invalidated_rkey,
            ..self.completion(w.wr_id, status, opcode, byte_len)
        };
        ctx.complete(self.recv_cq, c);
    }

    /// NAK the request and move the QP to ERR (the NAK still goes out).
    fn responder_fail(&mut self, ctx: &mut Ctx<'_>, psn: Psn, why: Fail) {
        if self.qp_type == QpType::Uc {
            return self.uc_fail(ctx, why);
        }
        let (code, ev) = match why {
            Fail::InvalidRequest => (
                NakCode::InvalidRequest,
                AsyncEvent::QpRequestError { qpn: self.qpn },
            ),
            Fail::RemoteAccess => (
                NakCode::RemoteAccessError,
                AsyncEvent::QpAccessError { qpn: self.qpn },
            ),
            Fail::RemoteOperational => (
                NakCode::RemoteOperationalError,
                AsyncEvent::QpFatal { qpn: self.qpn },
            ),
        };
        ctx.stats.inc(Counter::NaksSent);
        let m = self.resp.msn;
        self.resp.push_nak(psn, m, Syndrome::Nak(code));
        ctx.events.push_back(ev);
        self.enter_error(ctx, false);
    }

    /// Writes the next response packet into `buf`; returns its length.
    pub(crate) fn next_response(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        let front = *self.resp.queue.front()?;
        let aeth = |msn: u32| AethRepr {
            syndrome: Syndrome::Ack {
                credits: CREDITS_INVALID,
            },
            msn,
        };
        match front {
            Response::Ack { psn, msn, syndrome } => {
                self.resp.queue.pop_front();
                let r = RoceRepr {
                    aeth: Some(AethRepr { syndrome, msn }),
                    ..RoceRepr::new(self.bth(op::RC_ACKNOWLEDGE, psn, false, false, 0))
                };
                if matches!(syndrome, Syndrome::Ack { .. }) {
                    ctx.stats.inc(Counter::AcksSent);
                }
                r.emit(buf, &[]).ok()
            }
            Response::Atomic { psn, msn, orig } => {
                self.resp.queue.pop_front();
                let r = RoceRepr {
                    aeth: Some(aeth(msn)),
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
                    ..RoceRepr::new(self.bth(op::RC_ATOMIC_ACKNOWLEDGE, psn, false, false, 0))
                };
                r.emit(buf, &[]).ok()
            }
            Response::Read {
                slot,
                psn,
                va,
                rkey,
                left,
                first,
                msn,
            } => {
                let mtu = self.mtu();
                let len = left.min(mtu);
                let last = left <= mtu;
                let opcode = match (first, last) {
                    (true, true) => op::RC_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => op::RC_RDMA_READ_RESPONSE_FIRST,
                    (false, false) => op::RC_RDMA_READ_RESPONSE_MIDDLE,
                    (false, true) => op::RC_RDMA_READ_RESPONSE_LAST,
                };
                let has_aeth = opcode.info().is_some_and(|i| i.has(Headers::AETH));
                let r = RoceRepr {
                    aeth: has_aeth.then(|| aeth(msn)),
                    payload_len: len as usize,
                    ..RoceRepr::new(self.bth(
                        opcode,
                        psn,
                        false,
                        false,
                        RoceRepr::pad_for(len as usize),
                    ))
                };
                let mut read = Ok(());
                let n = r
                    .emit_with(buf, |dst| {
                        if !dst.is_empty() {
                            read = ctx.mem.read_remote(self.who(), Rkey(rkey), va, dst);
                        }
                    })
                    .ok()?;
                ctx.stats.note_mem(&read);
                if let Err(e) = &read {
                    refusal::access(self.qpn, "READ response", psn, rkey, va, len.into(), e);
                    // The memory went away under a READ in progress.
                    self.resp.queue.pop_front();
                    return self.responder_fail_and_send(ctx, psn, buf);
                }
                if last {
                    self.resp.queue.pop_front();
                } else if let Some(Response::Read {
                    psn: p,
                    va: v,
                    left: l,
                    first: f,
                    ..
                }) = self.resp.queue.front_mut()
                {
                    *p = p.add(1);
                    *v = v.wrapping_add(u64::from(len));
                    *l -= len;
                    *f = false;
                }
                let _ = slot;
                Some(n)
            }
        }
    }

    fn responder_fail_and_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        psn: Psn,
        buf: &mut [u8],
    ) -> Option<usize> {
        self.responder_fail(ctx, psn, Fail::RemoteAccess);
        self.next_response(ctx, buf)
    }
}

#[cfg(test)]
mod tests;
