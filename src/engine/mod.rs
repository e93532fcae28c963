//! The sans-IO protocol core: one [`Engine`] is one NIC.
//!
//! It performs no I/O and reads no clock (quinn-proto's shape). The caller:
//!
//! - **commands** it: `create_cq`, `create_qp`, `modify_qp(now, ..)`, `post_send(now, ..)`,
//!   `post_recv(now, ..)`, `destroy_*`, `req_notify_cq`, and reads `poll_cq` and
//!   `poll_cq_event`; every command whose work can complete or flush a WR takes `now`
//!   (a WR posted to a QP in ERR completes at once; a CQ overrun moves QPs to ERR);
//! - **feeds** it: `handle_datagram(now, ..)` for every received RoCEv2 datagram and
//!   `handle_timeout(now)` when `poll_timeout()` has passed;
//! - **drains** it: `poll_transmit(now, buf)` until it returns `None` after every input
//!   and command, sends each packet, then sleeps until `poll_timeout()` or the next datagram;
//!   `poll_event()` for asynchronous errors.
//!
//! `now` must never go backwards. Same inputs, same outputs: nothing here is random.
//! Network input never returns an error: every problem is a counted drop
//! ([`stats::Counter`]) or the NAK the IBA demands. `Result` is for API misuse
//! ([`VerbsError`]).

pub mod cc;
pub mod config;
pub mod cq;
pub mod error;
pub mod event;
mod ids;
pub mod qp;
pub mod srq;
pub mod state;
pub mod stats;
#[cfg(test)]
mod tests;
pub mod time;
pub mod wr;

pub use cc::{CcConfig, CcConfigError};
pub use config::EngineConfig;
pub use error::{Queue, VerbsError};
pub use event::{AsyncEvent, Datagram, Transmit};
pub use qp::ud::{UdDest, GRH_LEN, GSI_QKEY, GSI_QPN};
pub use qp::{AddressVector, Mtu, QpAttr, QpCap, QpInit, QpState, QpType};
pub use qp::{
    DEFAULT_MIN_RNR_TIMER, DEFAULT_PKEY, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE,
};
pub use srq::{SrqAttr, SrqInit};
pub use stats::{Counter, Counters};
pub use time::{Instant, MAX_ACK_TIMEOUT, MAX_RNR_TIMER};
pub use wr::{
    Completion, Local, NetworkHdr, RecvWr, Remote, SendFlags, SendOp, SendWr, WcOpcode, WcStatus,
};

use crate::mem::MrTable;
use crate::wire::icrc::{self, PseudoHeaders};
use crate::wire::opcode::{Flags, Transport};
use crate::wire::{RocePacket, RoceRepr, ICRC_LEN, ROCE_UDP_PORT};
use cq::Cq;
use ids::Ids;
use qp::wqe::{LocalData, RecvWqe, SendWqe, SgeList};
use qp::{Ctx, Qp};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

/// The first QPN handed out (0 and 1 are the special QPs; rxe starts at 0x11 too).
pub const FIRST_QPN: u32 = 0x11;
/// Largest message (IBA 9.4.1 / ibverbs max_msg_sz for RC).
pub const MAX_MSG: u64 = 1 << 31;

/// A QP and the engine's bookkeeping for it.
struct Slot {
    qp: Qp,
    /// Whether the QPN is in `Engine::ready`.
    ready: bool,
    /// The deadline and generation of the QP's one live entry in `Engine::timers`.
    timer: Option<(Instant, u64)>,
    /// What happened on this QP (the engine's totals add every QP's).
    stats: Counters,
    /// Congestion control: the NP's pacing, DCQCN and its pacer (`cc`).
    cc: cc::QpCc,
}

/// One NIC: QPs, CQs and counters over a registered-memory table.
///
/// Per-packet work does not grow with the number of QPs: `ready` lists the QPs that may
/// transmit, `timers` orders the deadlines, `cq_qps` finds the QPs of an overrun CQ.
/// Every call that runs a QP's code ends with `touch` on it, which brings these up to date.
pub struct Engine {
    cfg: EngineConfig,
    mem: Arc<MrTable>,
    qps: FxHashMap<u32, Slot>,
    cqs: FxHashMap<u32, Cq>,
    /// Shared receive queues (`srq.rs`), by handle.
    srqs: FxHashMap<u32, srq::Srq>,
    srq_ids: Ids,
    /// The QPs using each CQ (send or receive side), by QPN: an overrun moves them to ERR
    /// in QPN order.
    cq_qps: FxHashMap<u32, BTreeSet<u32>>,
    qpns: Ids,
    cq_ids: Ids,
    /// Counted outside any QP (drops before the QP lookup), plus the counters of the QPs
    /// destroyed so far: with the live QPs' own, the NIC's totals.
    stats: Counters,
    events: VecDeque<AsyncEvent>,
    overrun: Vec<u32>,
    /// CQs whose completion event fired, oldest first (`poll_cq_event`).
    notified: VecDeque<u32>,
    notified_now: Vec<u32>,
    /// QPs whose `may_transmit` holds, less those parked because their requester is
    /// stalled with no response queued. Ordered by QPN: the round robin visits QPs in
    /// QPN order from `tx_cursor`, as a walk over all QPs did.
    ready: BTreeSet<u32>,
    /// Where the round-robin over QPs resumes in `poll_transmit`.
    tx_cursor: u32,
    /// (deadline, QPN, generation), earliest first. An entry is live while its generation
    /// is the one in the QP's `Slot::timer`; the others are dropped when they surface, and
    /// the top is always live, so `poll_timeout` only peeks.
    timers: BinaryHeap<Reverse<(Instant, u32, u64)>>,
    timer_gen: u64,
    /// Scratch list of due QPs for `handle_timeout` (kept to spare an allocation per call).
    due: Vec<u32>,
    /// Finds the IPv4 ID of packets received without it (see `check_icrc`).
    id_solver: icrc::Ipv4IdSolver,
    /// CNPs the notification point queued, oldest first; sent before anything else.
    cnps: VecDeque<cc::np::PendingCnp>,
}

macro_rules! ctx {
    ($self:ident, $now:expr, $stats:expr) => {
        Ctx {
            now: $now,
            cfg: &$self.cfg,
            mem: &$self.mem,
            stats: $stats,
            cqs: &mut $self.cqs,
            srqs: &mut $self.srqs,
            events: &mut $self.events,
            overrun: &mut $self.overrun,
            notified: &mut $self.notified_now,
            solicited: false,
        }
    };
}

// After `ctx!`: macros are in scope only below their definition.
mod ingress;
mod post;

impl Engine {
    pub fn new(cfg: EngineConfig, mem: Arc<MrTable>) -> Engine {
        // 0 and 1 name the special QPs (SMI, GSI); rxe starts at 0x11 too.
        let lo = cfg.qpn_lo.max(2);
        let hi = cfg.qpn_hi.min(crate::wire::bth::QPN_MASK).max(lo);
        let first = if (lo..=hi).contains(&FIRST_QPN) {
            FIRST_QPN
        } else {
            lo
        };
        Engine {
            cfg,
            mem,
            qps: FxHashMap::default(),
            cqs: FxHashMap::default(),
            cq_qps: FxHashMap::default(),
            srqs: FxHashMap::default(),
            srq_ids: Ids {
                next: 1,
                lo: 1,
                hi: u32::MAX,
            },
            qpns: Ids {
                next: first,
                lo,
                hi,
            },
            // 0 was never a CQ handle; keep it unused.
            cq_ids: Ids {
                next: 1,
                lo: 1,
                hi: u32::MAX,
            },
            stats: Counters::default(),
            events: VecDeque::new(),
            overrun: Vec::new(),
            notified: VecDeque::new(),
            notified_now: Vec::new(),
            ready: BTreeSet::new(),
            tx_cursor: 0,
            timers: BinaryHeap::new(),
            timer_gen: 0,
            due: Vec::new(),
            id_solver: icrc::Ipv4IdSolver::new(),
            cnps: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The registered-memory table this NIC serves.
    pub fn mem(&self) -> &Arc<MrTable> {
        &self.mem
    }

    /// The NIC's counters: those of no QP, of the QPs destroyed, and of every live QP.
    /// Adds up every QP: for reports, not for a per-packet path.
    pub fn counters(&self) -> Counters {
        let mut c = self.stats.clone();
        for s in self.qps.values() {
            c.merge(&s.stats);
        }
        c
    }

    /// Every live QP's counters (rxe's names, as the NIC's), in no particular order.
    pub fn qp_counters(&self) -> impl Iterator<Item = (u32, &Counters)> + '_ {
        self.qps.iter().map(|(&qpn, s)| (qpn, &s.stats))
    }

    // ---- commands -------------------------------------------------------------------

    pub fn create_cq(&mut self, depth: usize) -> Result<u32, VerbsError> {
        if depth == 0 || depth > self.cfg.max_queue_depth {
            return Err(VerbsError::CapTooLarge {
                what: "cq depth",
                asked: depth,
                max: self.cfg.max_queue_depth,
            });
        }
        let cqs = &self.cqs;
        let id = self
            .cq_ids
            .alloc(cqs.len(), |n| cqs.contains_key(&n))
            .ok_or(VerbsError::NoFreeCq)?;
        self.cqs.insert(id, Cq::new(depth));
        Ok(id)
    }

    pub fn destroy_cq(&mut self, cq: u32) -> Result<(), VerbsError> {
        if let Some(&qpn) = self.cq_qps.get(&cq).and_then(BTreeSet::first) {
            return Err(VerbsError::CqInUse { cq, qpn });
        }
        self.cqs
            .remove(&cq)
            .map(|_| ())
            .ok_or(VerbsError::NoSuchCq(cq))
    }

    /// `ibv_resize_cq` ([`Cq::resize`]): 1 to `max_queue_depth` entries, no fewer than
    /// the CQ holds plus `outside` (taken out by the caller, still counted as held).
    pub fn resize_cq(&mut self, cq: u32, depth: usize, outside: usize) -> Result<(), VerbsError> {
        if depth == 0 || depth > self.cfg.max_queue_depth {
            return Err(VerbsError::CapTooLarge {
                what: "cq depth",
                asked: depth,
                max: self.cfg.max_queue_depth,
            });
        }
        let q = self.cqs.get_mut(&cq).ok_or(VerbsError::NoSuchCq(cq))?;
        q.resize(depth, outside)
            .map_err(|held| VerbsError::CqResize {
                cq,
                asked: depth,
                held,
            })
    }

    /// Takes up to `out.len()` completions from a CQ, oldest first.
    pub fn poll_cq(&mut self, cq: u32, out: &mut [Completion]) -> Result<usize, VerbsError> {
        let q = self.cqs.get_mut(&cq).ok_or(VerbsError::NoSuchCq(cq))?;
        let mut n = 0;
        while n < out.len() {
            match q.pop() {
                Some(c) => {
                    out[n] = c;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    /// `ibv_req_notify_cq`: the next completion (`solicited_only`: the next solicited or
    /// failed one) added to `cq` raises one event, read with `poll_cq_event`. One-shot.
    /// Completions already in the CQ raise nothing (IBA C11-22): a caller re-arms, then
    /// polls the CQ once more, as every verbs program does.
    pub fn req_notify_cq(&mut self, cq: u32, solicited_only: bool) -> Result<(), VerbsError> {
        let q = self.cqs.get_mut(&cq).ok_or(VerbsError::NoSuchCq(cq))?;
        q.arm(if solicited_only {
            cq::Notify::Solicited
        } else {
            cq::Notify::Next
        });
        Ok(())
    }

    /// The next CQ whose completion event fired (the completion channel's event).
    pub fn poll_cq_event(&mut self) -> Option<u32> {
        self.notified.pop_front()
    }

    pub fn create_qp(&mut self, init: &QpInit) -> Result<u32, VerbsError> {
        self.create_qp_numbered(init, None)
    }

    /// Creates QP1, the General Services Interface QP (IBA 13.4.5): a UD QP numbered 1
    /// whose datagrams carry the GSI Q_Key ([`GSI_QKEY`]), for management datagrams
    /// (the connection manager's). `init.qp_type` must be UD.
    pub fn create_gsi_qp(&mut self, init: &QpInit) -> Result<u32, VerbsError> {
        if init.qp_type != QpType::Ud {
            return Err(VerbsError::UnsupportedQpType("GSI other than UD"));
        }
        if self.qps.contains_key(&GSI_QPN) {
            return Err(VerbsError::GsiExists);
        }
        self.create_qp_numbered(init, Some(GSI_QPN))
    }

    fn create_qp_numbered(&mut self, init: &QpInit, qpn: Option<u32>) -> Result<u32, VerbsError> {
        // A QP on an SRQ has no receive queue: its receive capacities are ignored, as
        // the kernel ignores them (`ib_create_qp` with `srq`: rxe sizes no RQ).
        let mut init = *init;
        if init.srq.is_some() {
            init.cap.max_recv_wr = 0;
            init.cap.max_recv_sge = 0;
        }
        let init = &init;
        for cq in [init.send_cq, init.recv_cq] {
            if !self.cqs.contains_key(&cq) {
                return Err(VerbsError::NoSuchCq(cq));
            }
        }
        if let Some(srq) = init.srq {
            if !self.srqs.contains_key(&srq) {
                return Err(VerbsError::NoSuchSrq(srq));
            }
        }
        let c = &init.cap;
        let limits = [
            ("max_send_wr", c.max_send_wr, self.cfg.max_queue_depth),
            ("max_recv_wr", c.max_recv_wr, self.cfg.max_queue_depth),
            (
                "max_send_sge",
                c.max_send_sge,
                self.cfg.max_sge.min(config::MAX_SGE),
            ),
            (
                "max_recv_sge",
                c.max_recv_sge,
                self.cfg.max_sge.min(config::MAX_SGE),
            ),
            (
                "max_inline_data",
                c.max_inline_data,
                self.cfg.max_inline_data.min(config::MAX_INLINE),
            ),
        ];
        for (what, asked, max) in limits {
            if asked > max {
                return Err(VerbsError::CapTooLarge { what, asked, max });
            }
        }
        self.mem.check_pd(init.pd)?;
        let qps = &self.qps;
        let qpn = match qpn {
            Some(n) => n,
            None => self
                .qpns
                .alloc(qps.len(), |n| qps.contains_key(&n))
                .ok_or(VerbsError::NoFreeQpn)?,
        };
        let mut qp = Qp::new(qpn, init);
        if init.qp_type == QpType::Ud {
            // rxe picks a UD QP's port once, from its QPN (`rxe_qp_init_req`).
            qp.src_port = qp::ud::ud_sport(qpn);
            if qp.is_gsi() {
                qp.attrs.qkey = GSI_QKEY;
            }
        }
        if let Some(port) = self.cfg.udp_src_port {
            qp.src_port = port;
        }
        let slot = Slot {
            qp,
            ready: false,
            timer: None,
            stats: Counters::default(),
            cc: cc::QpCc::default(),
        };
        self.qps.insert(qpn, slot);
        for cq in [init.send_cq, init.recv_cq] {
            self.cq_qps.entry(cq).or_default().insert(qpn);
        }
        if let Some(srq) = init.srq.and_then(|n| self.srqs.get_mut(&n)) {
            srq.qps.insert(qpn);
        }
        Ok(qpn)
    }

    /// Destroys a QP at once, whatever its state: it leaves the round robin and its timers
    /// with it, and its QPN may be handed out again.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let mut s = self.qps.remove(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        s.qp.leave_srq(&mut self.srqs);
        // The NIC's totals keep what it counted.
        self.stats.merge(&s.stats);
        if s.ready {
            self.ready.remove(&qpn);
        }
        for cq in [s.qp.send_cq, s.qp.recv_cq] {
            if let Some(set) = self.cq_qps.get_mut(&cq) {
                set.remove(&qpn);
                if set.is_empty() {
                    self.cq_qps.remove(&cq);
                }
            }
        }
        // Its heap entry, if any, is dead now (no slot); the top must stay live.
        self.prune_timers();
        // Type 2 windows bound to it go free: a later QP given the same QPN must not
        // find them usable.
        self.mem.release_qp_windows(s.qp.pd, qpn);
        Ok(())
    }

    /// A QP of the protection domain `pd`, if any (`ibv_dealloc_pd` refuses then).
    pub fn qp_of_pd(&self, pd: crate::mem::Pd) -> Option<u32> {
        self.qps.values().find(|q| q.qp.pd == pd).map(|q| q.qp.qpn)
    }

    /// How many QPs exist.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    pub fn qp(&self, qpn: u32) -> Result<&Qp, VerbsError> {
        self.qps
            .get(&qpn)
            .map(|s| &s.qp)
            .ok_or(VerbsError::NoSuchQp(qpn))
    }

    pub fn modify_qp(&mut self, now: Instant, qpn: u32, attr: &QpAttr) -> Result<(), VerbsError> {
        let s = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let qp = &mut s.qp;
        let mut ctx = ctx!(self, now, &mut s.stats);
        let was_reset = qp.state == QpState::Reset;
        let r = qp.modify(attr, &mut ctx);
        if !was_reset && qp.state == QpState::Reset {
            // The QP's completions not yet polled go with its queues, as mlx4/mlx5 do
            // (`mlx5_ib_cq_clean` on the move to RESET): a QP brought back up must not
            // find its old flush completions first (pyverbs' rereg tests restate QPs so).
            for cq in [qp.send_cq, qp.recv_cq] {
                if let Some(q) = self.cqs.get_mut(&cq) {
                    q.remove_qp(qpn);
                }
            }
        }
        self.touch(qpn);
        self.after_call(now);
        r
    }

    /// Runs every timer that has expired by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due);
        while let Some(&Reverse((at, qpn, gen))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if let Some(s) = self.qps.get_mut(&qpn) {
                if s.timer.is_some_and(|(_, g)| g == gen) {
                    // Consumed: `touch` files the QP's next deadline, if it has one.
                    s.timer = None;
                    due.push(qpn);
                }
            }
        }
        // In QPN order, as a walk over every QP ran them (their completions may share
        // a CQ, their events one queue).
        due.sort_unstable();
        for &qpn in &due {
            let s = self.qps.get_mut(&qpn).expect("live timer");
            let qp = &mut s.qp;
            if qp.next_timeout().is_some_and(|t| t <= now) {
                let mut ctx = ctx!(self, now, &mut s.stats);
                qp.handle_timeout(&mut ctx);
            }
            // The pacer's release and DCQCN's increase timer share the QP's heap entry.
            s.cc.on_timeout(now, &self.cfg.cc, &mut s.stats);
            self.touch(qpn);
        }
        due.clear();
        self.due = due;
        self.after_call(now);
        // The walk above stopped at the first entry not due, which may be dead.
        self.prune_timers();
    }

    // ---- outputs --------------------------------------------------------------------

    /// Whether `poll_transmit` may have a packet: some QP has a response queued or a
    /// request it may send. False means it has none until the next command, datagram or
    /// timeout, whatever the time; a caller that polls an idle NIC in a loop skips reading
    /// the clock.
    pub fn may_transmit(&self) -> bool {
        !self.ready.is_empty() || !self.cnps.is_empty()
    }

    /// Writes the next packet to send into `buf` (which should hold at least path MTU +
    /// 64 bytes), ICRC included. CNPs go first, then responses before new requests, QPs
    /// take turns; a QP held by its DCQCN pacer sends only responses.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.next_cnp(buf) {
            return Some(t);
        }
        let mut found = None;
        // Round robin over the ready QPs in QPN order: from the cursor on, then those
        // before it; each once.
        let cursor = self.tx_cursor;
        let mut from = cursor;
        let mut wrapped = false;
        loop {
            let next = if wrapped {
                self.ready.range(from..cursor).next()
            } else {
                self.ready.range(from..).next()
            };
            let Some(&qpn) = next else {
                if wrapped {
                    break;
                }
                wrapped = true;
                from = 0;
                continue;
            };
            from = qpn + 1;
            let s = self.qps.get_mut(&qpn).expect("ready QPs are live");
            let qp = &mut s.qp;
            if !qp.resp.has_pending() && qp.request_stalled(&self.cfg) {
                // Nothing to send until a call on this QP changes that; `touch` brings
                // it back then. Asking again would find the same nothing.
                s.ready = false;
                self.ready.remove(&qpn);
                continue;
            }
            let mut ctx = ctx!(self, now, &mut s.stats);
            // (length, whether it is a request): requests are paced and ECT(0).
            let next = if s.cc.held() {
                qp.next_response(&mut ctx, buf).map(|n| (n, false))
            } else if qp.resp.only_ack_pending() {
                qp.next_request(&mut ctx, buf)
                    .map(|n| (n, true))
                    .or_else(|| qp.next_response(&mut ctx, buf).map(|n| (n, false)))
            } else {
                qp.next_response(&mut ctx, buf)
                    .map(|n| (n, false))
                    .or_else(|| qp.next_request(&mut ctx, buf).map(|n| (n, true)))
            };
            if let Some((len, true)) = next {
                s.cc.on_request_sent(now, len, &self.cfg.cc, &mut s.stats);
            }
            // One that found nothing anyway stays ready while `may_transmit` holds: a fence,
            // the initiator depth or a short `buf` held it back, and as no call on this QP
            // need say when that clears, the next poll asks again.
            self.touch(qpn);
            if let Some(n) = next {
                found = Some((qpn, n));
                break;
            }
        }
        self.after_call(now);
        let (qpn, (len, is_request)) = found?;
        self.tx_cursor = qpn.wrapping_add(1);
        let s = self.qps.get_mut(&qpn)?;
        // A datagram goes where its WR said; a connected QP's packets to its peer.
        let dest_ip = match s.qp.ud_tx_dst.take() {
            Some(ip) => ip,
            None => s.qp.attrs.av?.dest_ip,
        };
        let src = SocketAddr::new(self.cfg.local_ip, s.qp.src_port);
        let dst = SocketAddr::new(dest_ip, ROCE_UDP_PORT);
        let ph = PseudoHeaders::new(src, dst, self.cfg.tx_ipv4_id, len);
        icrc::fill(ph.ip(), ph.udp(), &mut buf[..len]).ok()?;
        s.stats.inc(Counter::SentPkts);
        s.stats.add(Counter::SentBytes, len as u64);
        // Requests are ECN-capable while the reaction point can react to marks.
        let ecn = if is_request && self.cfg.cc.rp_enable {
            crate::wire::Ecn::Ect0
        } else {
            crate::wire::Ecn::NotEct
        };
        Some(Transmit { src, dst, len, ecn })
    }

    /// When `handle_timeout` should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|&Reverse((at, _, _))| at)
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// CQ overruns found during a call move every QP on the CQ to ERR.
    fn after_call(&mut self, now: Instant) {
        if !self.notified_now.is_empty() {
            self.notified.extend(self.notified_now.drain(..));
        }
        while let Some(cq) = self.overrun.pop() {
            let qpns: Vec<u32> = self
                .cq_qps
                .get(&cq)
                .map(|set| set.iter().copied().collect())
                .unwrap_or_default();
            for qpn in qpns {
                let s = self.qps.get_mut(&qpn).expect("listed");
                let qp = &mut s.qp;
                let mut ctx = ctx!(self, now, &mut s.stats);
                qp.enter_error(&mut ctx, true);
                self.touch(qpn);
            }
        }
    }

    /// Brings the engine's view of a QP up to date after its code ran: whether it is in
    /// the round robin, and its deadline in the timer heap.
    fn touch(&mut self, qpn: u32) {
        let Some(s) = self.qps.get_mut(&qpn) else {
            return;
        };
        // A QP the pacer holds is ready only for its responses.
        let ready = if s.cc.held() {
            s.qp.resp.has_pending()
        } else {
            s.qp.may_transmit()
        };
        if ready != s.ready {
            s.ready = ready;
            if ready {
                self.ready.insert(qpn);
            } else {
                self.ready.remove(&qpn);
            }
        }
        let deadline = match (s.qp.next_timeout(), s.cc.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if deadline != s.timer.map(|(at, _)| at) {
            s.timer = deadline.map(|at| {
                self.timer_gen += 1;
                self.timers.push(Reverse((at, qpn, self.timer_gen)));
                (at, self.timer_gen)
            });
            self.prune_timers();
        }
    }

    /// Drops dead entries from the top of the timer heap, so that the top is live; and
    /// rebuilds the heap when dead entries buried deeper outnumber the live ones (behind
    /// one QP's early deadline, another's moving deadlines never reach the top).
    fn prune_timers(&mut self) {
        let qps = &self.qps;
        let live = |&Reverse((_, qpn, gen)): &Reverse<(Instant, u32, u64)>| {
            qps.get(&qpn)
                .is_some_and(|s| s.timer.is_some_and(|(_, g)| g == gen))
        };
        while self.timers.peek().is_some_and(|e| !live(e)) {
            self.timers.pop();
        }
        if self.timers.len() > 2 * qps.len() + 64 {
            self.timers.retain(live);
        }
    }
}
