//! One queue pair: its attributes and state (`attr.rs`), work queues (`wqe.rs`), and the
//! three roles of IBA chapter 9 operating on it — requester (`requester.rs`: send queue to
//! packets), completer (`completer.rs`: ACKs and responses to completions, retries) and
//! responder (`responder.rs`: requests to memory operations, ACK/NAK/responses).
//!
//! One owner, no flags between roles: each role returns what happens next (a packet, a
//! completion, a rewind of the requester, a state change) to code that runs in the same
//! call (after rxe's role split, without its cross-task flags).

pub mod attr;
mod completer;
mod local_ops;
pub(crate) mod recv;
mod requester;
mod responder;
pub mod timers;
pub mod uc;
pub mod ud;
pub mod wqe;

pub use attr::{
    AddressVector, Attr, Attrs, Mtu, QpAttr, QpState, DEFAULT_MIN_RNR_TIMER, DEFAULT_PKEY,
    DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE,
};

use super::cq::Cq;
use super::error::VerbsError;
use super::event::AsyncEvent;
use super::stats::{Counter, Counters};
use super::time::Instant;
use super::wr::{Completion, WcOpcode, WcStatus};
use super::EngineConfig;
use crate::mem::{MrTable, Pd};
use crate::wire::Psn;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use timers::{QpTimer, TimerTable};
use wqe::{RecvWqe, SendWqe};

/// QP transport type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

/// Queue sizes asked for at creation (ibv_qp_cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    pub max_send_wr: usize,
    pub max_recv_wr: usize,
    pub max_send_sge: usize,
    pub max_recv_sge: usize,
    pub max_inline_data: usize,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// What `create_qp` needs (ibv_qp_init_attr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInit {
    pub qp_type: QpType,
    pub pd: Pd,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub cap: QpCap,
    /// Every send WR generates a completion, whatever its `signaled` flag.
    pub sq_sig_all: bool,
    /// The shared receive queue the QP takes its receive WQEs from (`ibv_qp_init_attr.srq`);
    /// the QP then has no receive queue of its own.
    pub srq: Option<u32>,
}

impl QpInit {
    /// An RC QP whose send and receive queues complete on the same CQ, and whose send
    /// WRs complete only when signaled (`sq_sig_all` false): the usual connected QP.
    pub fn rc(pd: Pd, cq: u32, cap: QpCap) -> QpInit {
        QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            cap,
            sq_sig_all: false,
            srq: None,
        }
    }
}

/// Everything a role needs from the engine for one call.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub cfg: &'a EngineConfig,
    pub mem: &'a MrTable,
    pub stats: &'a mut Counters,
    pub cqs: &'a mut FxHashMap<u32, Cq>,
    /// The SRQs a QP may take its receive WQEs from (`recv.rs`).
    pub srqs: &'a mut FxHashMap<u32, recv::Srq>,
    pub events: &'a mut VecDeque<AsyncEvent>,
    /// CQs that overran during this call; the engine moves their QPs to ERR afterwards.
    pub overrun: &'a mut Vec<u32>,
    /// CQs whose armed completion event fired (`Engine::poll_cq_event`).
    pub notified: &'a mut Vec<u32>,
    /// The request being handled had the Solicited Event bit (BTH SE): a receive
    /// completion it causes is a solicited one.
    pub solicited: bool,
}

impl Ctx<'_> {
    /// Delivers a completion to `cq`, reporting an overrun (never a silent loss).
    pub fn complete(&mut self, cq: u32, c: Completion) {
        let Some(q) = self.cqs.get_mut(&cq) else {
            return;
        };
        let was_in_error = q.in_error;
        let receive = matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm);
        let solicited = c.status != WcStatus::Success || (receive && self.solicited);
        if q.push(c) {
            if q.fire(solicited) {
                self.notified.push(cq);
            }
        } else {
            self.stats.inc(Counter::CqOverrun);
            if !was_in_error {
                self.events
                    .push_back(AsyncEvent::CqError { cq, lost: q.lost });
                self.overrun.push(cq);
            }
        }
    }
}

#[derive(Debug)]
pub struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    pub pd: Pd,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub cap: QpCap,
    pub sq_sig_all: bool,
    /// The SRQ the QP receives from (no `rq` then).
    pub srq: Option<u32>,
    pub state: QpState,
    pub attrs: Attrs,
    /// UDP source port of every packet this QP sends (fixed per QP, as rxe does).
    pub src_port: u16,
    pub(crate) sq: VecDeque<SendWqe>,
    pub(crate) rq: VecDeque<RecvWqe>,
    /// On an SRQ: the WQE taken for the message being received (`recv.rs`).
    pub(crate) srq_wqe: Option<RecvWqe>,
    pub(crate) req: requester::Requester,
    pub(crate) comp: completer::Completer,
    pub(crate) resp: responder::Responder,
    pub(crate) timers: TimerTable,
    /// UD: the destination of the packet `next_request` just wrote (`poll_transmit`
    /// addresses it there; a connected QP's peer is `attrs.av`).
    pub(crate) ud_tx_dst: Option<std::net::IpAddr>,
}

impl Qp {
    pub fn new(qpn: u32, init: &QpInit) -> Qp {
        Qp {
            qpn,
            qp_type: init.qp_type,
            pd: init.pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            srq: init.srq,
            state: QpState::Reset,
            attrs: Attrs::default(),
            src_port: udp_sport(qpn, 0),
            sq: VecDeque::with_capacity(init.cap.max_send_wr),
            rq: VecDeque::with_capacity(init.cap.max_recv_wr),
            srq_wqe: None,
            req: requester::Requester::default(),
            comp: completer::Completer::default(),
            resp: responder::Responder::default(),
            timers: TimerTable::default(),
            ud_tx_dst: None,
        }
    }

    /// `ibv_modify_qp`: checks the transition and its attributes, then applies them.
    pub(crate) fn modify(&mut self, a: &QpAttr, ctx: &mut Ctx<'_>) -> Result<(), VerbsError> {
        let from = self.state;
        let to = a.state.unwrap_or(from);
        let qpn = self.qpn;
        let rules = match self.qp_type {
            QpType::Ud => ud::ud_rules,
            QpType::Uc => uc::uc_rules,
            _ => attr::rc_rules,
        };
        let (required, optional) =
            rules(from, to).ok_or(VerbsError::InvalidTransition { qpn, from, to })?;
        for &r in required {
            if !a.given().any(|g| g == r) {
                return Err(VerbsError::MissingAttr {
                    qpn,
                    from,
                    to,
                    attr: r.name(),
                });
            }
        }
        if let Some(bad) = a
            .given()
            .find(|g| !required.contains(g) && !optional.contains(g))
        {
            return Err(VerbsError::UnexpectedAttr {
                qpn,
                from,
                to,
                attr: bad.name(),
            });
        }
        a.validate(ctx.cfg)?;

        // Apply: the values kept, then what they set in motion.
        self.attrs.apply(a);
        if let Some(v) = a.dest_qpn {
            // rxe: rdma_get_udp_sport(0, qpn, dest_qpn), chosen when the peer is known;
            // a NIC attached to a daemon has its port for all (`EngineConfig`).
            self.src_port = ctx.cfg.udp_src_port.unwrap_or_else(|| udp_sport(qpn, v));
        }
        if let Some(psn) = a.rq_psn {
            self.resp
                .reset(psn, usize::from(self.attrs.max_dest_rd_atomic));
        } else if let Some(v) = a.max_dest_rd_atomic {
            // Changed without a new PSN (SQD -> SQD): the replay ring follows.
            self.resp.resize(usize::from(v));
        }
        if let Some(psn) = a.sq_psn {
            self.req.reset(psn);
            self.comp.reset(psn, &self.attrs);
        }
        if a.retry_cnt.is_some() || a.rnr_retry.is_some() {
            self.comp.reset_retries(&self.attrs);
        }

        match to {
            QpState::Reset => {
                self.give_back_srq_wqe(ctx.srqs);
                self.reset()
            }
            QpState::Err if from != QpState::Err => self.enter_error(ctx, false),
            QpState::Sqd if from == QpState::Rts => {
                self.state = QpState::Sqd;
                self.check_drained(ctx);
            }
            _ => self.state = to,
        }
        Ok(())
    }

    /// Back to RESET: queues emptied without completions (IBA 10.3.1: RESET discards).
    fn reset(&mut self) {
        self.state = QpState::Reset;
        self.sq.clear();
        self.rq.clear();
        self.req = requester::Requester::default();
        self.comp = completer::Completer::default();
        self.resp = responder::Responder::default();
        self.timers = TimerTable::default();
    }

    /// Moves the QP to ERR: every outstanding work request completes with WR_FLUSH_ERR
    /// (IBA 10.3.1, Error state), timers stop, and every response already queued still
    /// goes out. `fatal` says the QP went there on its own (an asynchronous event is
    /// raised).
    ///
    /// The queue holds, in PSN order, only responses to requests the responder executed
    /// before the error (and the NAK of the one that caused it): ACKs of delivered SENDs
    /// and WRITEs, READ responses, atomic ACKs with their original values. They are owed
    /// (IBA 9.7.5.1, C9-28: every executed request is acknowledged, in order): dropping
    /// them made the requester complete an applied atomic with the error of a later
    /// request, or time out on a SEND that was delivered. rxe sends each response while
    /// it processes the request, before it looks at the next one, so none is ever lost.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>, fatal: bool) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        self.timers = TimerTable::default();
        if fatal {
            ctx.events.push_back(AsyncEvent::QpFatal { qpn: self.qpn });
        }
        self.flush(ctx);
        self.last_wqe_reached(ctx);
    }

    /// A completion of this QP (immediate and invalidated key added by the caller).
    pub(crate) fn completion(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            qpn: self.qpn,
            byte_len,
            imm: None,
            invalidated_rkey: None,
            src_qp: self.attrs.dest_qpn,
            network_hdr: None,
            sl: 0,
        }
    }

    /// In ERR, work requests posted later are flushed at once.
    pub(crate) fn flush_now(&mut self, ctx: &mut Ctx<'_>) {
        self.flush(ctx);
    }

    /// Completes everything left on both queues: WR_FLUSH_ERR, or the error a WQE already
    /// carries (a local protection error found while sending it).
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(w) = self.sq.pop_front() {
            let status = w.error.unwrap_or(WcStatus::WrFlushErr);
            let c = self.completion(w.wr_id, status, w.op.wc_opcode(), 0);
            ctx.complete(self.send_cq, c);
        }
        self.req.sq_idx = 0;
        self.req.offset = 0;
        self.comp.outstanding_rd_atomic = 0;
        self.resp.drop_current_message();
        self.flush_recv(ctx);
    }

    /// In SQD with nothing in flight: raise `SqDrained` if asked for. Drained means every
    /// message already started has completed (IBA 10.3.1, SQ Drain); WRs posted and not
    /// started wait for the return to RTS and do not count.
    pub(crate) fn check_drained(&mut self, ctx: &mut Ctx<'_>) {
        let in_flight = self.sq.front().is_some_and(|w| w.started);
        if self.state == QpState::Sqd && self.attrs.sq_draining_notify && !in_flight {
            self.attrs.sq_draining_notify = false;
            ctx.events
                .push_back(AsyncEvent::SqDrained { qpn: self.qpn });
        }
    }

    /// Earliest timer deadline.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Runs expired timers.
    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        for t in QpTimer::VALUES {
            if self.timers.expired(t, ctx.now) {
                self.timers.stop(t);
                match t {
                    QpTimer::Retransmit => self.on_retransmit_timeout(ctx),
                    QpTimer::RnrWait => self.on_rnr_wait_over(ctx),
                }
            }
        }
    }

    /// The MTU in bytes.
    pub fn mtu(&self) -> u32 {
        self.attrs.path_mtu.bytes()
    }

    /// Whether the requester side runs.
    pub fn sends(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Sqd)
    }

    /// A response queued, or a request not yet sent (the requester may still be held
    /// back by its window, a fence or an RNR wait).
    pub fn may_transmit(&self) -> bool {
        self.resp.has_pending() || self.sends() && self.req.sq_idx < self.sq.len()
    }

    /// Whether the responder side runs (IBA 10.3.1: from RTR on).
    pub fn receives(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }

    /// The PSN the requester will send next.
    pub fn sq_psn(&self) -> Psn {
        self.req.psn
    }

    /// The PSN the responder expects next.
    pub fn rq_psn(&self) -> Psn {
        self.resp.epsn
    }
}

/// Whether a packet's P_Key matches the QP's (IBA 10.9, partitioning; rxe `pkey_match`):
/// the low 15 bits (the partition) are equal and not 0, and at least one of the two is a
/// full member (bit 15). A limited member (0x7fff) may talk to a full member (0xffff),
/// two limited members may not.
pub fn pkey_match(a: u16, b: u16) -> bool {
    let (pa, pb) = (a & 0x7fff, b & 0x7fff);
    pa != 0 && pa == pb && (a | b) & 0x8000 != 0
}

/// rxe's UDP source port for an RC QP: `rdma_get_udp_sport(0, qpn, dest_qpn)` (kernel
/// `ib_verbs.h`): a flow label from both QPNs folded into 14 bits, above 0xC000. Matches
/// the captures: QPN 0x11 to 0x11 -> 49441.
pub fn udp_sport(qpn: u32, dest_qpn: u32) -> u16 {
    const FLOW_LABEL_MASK: u64 = 0xfffff;
    let mut v = u64::from(qpn) * u64::from(dest_qpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & FLOW_LABEL_MASK) as u32;
    let low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
    0xc000 | low as u16
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn pkey_match_is_rxes() {
        assert!(pkey_match(0xffff, 0xffff));
        assert!(pkey_match(0x7fff, 0xffff));
        assert!(pkey_match(0xffff, 0x7fff));
        assert!(!pkey_match(0x7fff, 0x7fff), "two limited members");
        assert!(!pkey_match(0x8000, 0xffff), "partition 0 is invalid");
        assert!(!pkey_match(0xfffe, 0xffff));
    }

    #[test]
    fn source_ports_match_rxe_captures() {
        assert_eq!(udp_sport(0x11, 0x11), 49441);
        assert_eq!(udp_sport(0x12, 0x12), 49476);
        assert_eq!(udp_sport(0x11, 0), 0xc000);
    }
}
