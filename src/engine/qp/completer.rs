//! The completer (IBA 9.7.5-9.7.6, rxe_comp.c): ACKs, NAKs, READ responses and atomic
//! ACKs come in; completions, retries and errors go out.
//!
//! Rules:
//! - An ACK with PSN p acknowledges every request up to p (IBA 9.7.5.1: coalesced ACKs);
//!   READ responses and atomic ACKs also acknowledge everything before them.
//! - WQEs complete strictly in order; a READ or atomic completes only with its data.
//! - A sequence NAK, a missing READ response or the local ACK timeout start a go-back-N
//!   retry from the oldest unacknowledged PSN; each costs one retry unless progress was
//!   made since (retry_cnt, IBA 9.7.6.1.3); an RNR NAK waits its timer first and costs one
//!   RNR retry (7 = forever, IBA 9.7.5.2.8).
//! - Fatal NAKs complete the WQE with the matching error; the QP goes to ERR and the rest
//!   is flushed.

use super::timers::QpTimer;
use super::wqe::SendWqe;
use super::{Attrs, Ctx, Qp, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use crate::engine::stats::Counter;
use crate::engine::time::{ack_timeout, rnr_timer};
use crate::engine::wr::{SendOp, WcStatus};
use crate::wire::opcode::{op, Flags};
use crate::wire::{NakCode, Psn, RoceRepr, Syndrome};

#[derive(Debug, Default)]
pub struct Completer {
    /// The oldest PSN not yet acknowledged (the next response PSN expected).
    pub psn: Psn,
    pub retry_left: u8,
    pub rnr_left: u8,
    /// READ and atomic WQEs started and not complete.
    pub outstanding_rd_atomic: u8,
    /// The PSN of the last go-back-N, until progress is made. A packet-driven retry to
    /// the same PSN is the same loss seen again (later packets of the same flight): it
    /// neither costs a retry nor resends the window a second time (rxe: `started_retry`).
    pub retrying_from: Option<Psn>,
}

impl Completer {
    pub fn reset(&mut self, psn: Psn, a: &Attrs) {
        self.psn = psn;
        self.outstanding_rd_atomic = 0;
        self.reset_retries(a);
    }
    pub fn reset_retries(&mut self, a: &Attrs) {
        self.retry_left = a.retry_cnt;
        self.rnr_left = a.rnr_retry;
        self.retrying_from = None;
    }
}

/// What started a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The local ACK timeout expired.
    Timeout,
    /// A packet showed a loss.
    Packet,
}

impl Qp {
    pub(crate) fn arm_retransmit(&mut self, ctx: &mut Ctx<'_>) {
        match ack_timeout(self.attrs.timeout) {
            Some(d) => self
                .timers
                .set(QpTimer::Retransmit, ctx.now.saturating_add(d)),
            None => self.timers.stop(QpTimer::Retransmit),
        }
    }

    /// Whether any sent request awaits its acknowledgement or data.
    fn outstanding(&self) -> bool {
        self.sq.front().is_some_and(|w| w.started)
    }

    /// Retires the front WQE with `status`, then the local WQEs (BIND_MW, LOCAL_INV)
    /// already executed behind it, which were waiting only for it.
    pub(crate) fn complete_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.retire_front(ctx, status);
        while self.local_done_at_front() {
            self.retire_front(ctx, WcStatus::Success);
        }
        // A WQE that failed locally while those before it were in flight is next: it
        // completes with its error now and the QP goes to ERR (see `next_request`).
        if self.sq.front().is_some_and(|w| w.error.is_some()) {
            self.enter_error(ctx, true);
        }
    }

    fn retire_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        if w.op.is_read_or_atomic() {
            self.comp.outstanding_rd_atomic = self.comp.outstanding_rd_atomic.saturating_sub(1);
        }
        if self.req.sq_idx > 0 {
            self.req.sq_idx -= 1;
        } else {
            // The requester was (re)sending this WQE: move it on to the next.
            self.req.offset = 0;
        }
        if w.flags.signaled || status != WcStatus::Success {
            let c = self.completion(w.wr_id, status, w.op.wc_opcode(), w.len);
            ctx.complete(self.send_cq, c);
        }
    }

    /// Completes SEND and WRITE WQEs wholly before `upto` (exclusive). Returns whether a
    /// READ/atomic before `upto` still lacks its response (its response was lost).
    fn ack_before(&mut self, ctx: &mut Ctx<'_>, upto: Psn) -> (bool, bool) {
        let mut progress = false;
        while let Some(w) = self.sq.front() {
            if !w.started || w.last_psn.diff(upto) >= 0 {
                break;
            }
            if w.op.is_read_or_atomic() {
                return (progress, true);
            }
            let next = w.last_psn.add(1);
            if next.diff(self.comp.psn) > 0 {
                self.comp.psn = next;
            }
            self.complete_front(ctx, WcStatus::Success);
            progress = true;
        }
        (progress, false)
    }

    /// The response PSN an unfinished READ or atomic at the head still waits for: an
    /// ACK or NAK beyond it says the responder executed the request, not that the
    /// requester has its result, so the oldest unacknowledged PSN stops there.
    fn head_wait(&self) -> Option<Psn> {
        let w = self
            .sq
            .front()
            .filter(|w| w.started && w.op.is_read_or_atomic())?;
        Some(match w.op {
            SendOp::Read { .. } => w.first_psn.add(w.read_done / self.mtu()),
            _ => w.first_psn,
        })
    }

    /// Records that everything before `psn` is acknowledged (up to the head's wait).
    fn advance(&mut self, ctx: &mut Ctx<'_>, psn: Psn, progress: bool) {
        let psn = match self.head_wait() {
            Some(h) if h.diff(psn) < 0 => h,
            _ => psn,
        };
        // Progress is the oldest unacknowledged PSN moving forward, not only a WQE
        // completing: a sequence NAK inside a long message acknowledges its first part.
        let moved = psn.diff(self.comp.psn) > 0;
        if moved {
            self.comp.psn = psn;
        }
        let progress = progress || moved;
        if progress {
            self.comp.reset_retries(&self.attrs);
        }
        // The requester may have rewound behind what is now acknowledged.
        if self.req.psn.diff(self.comp.psn) < 0 {
            self.seek(self.comp.psn);
        }
        if self.outstanding() {
            if progress {
                self.arm_retransmit(ctx);
            }
        } else {
            self.timers.stop(QpTimer::Retransmit);
            self.check_drained(ctx);
        }
    }

    /// The PSN a retry starts from: the oldest unacknowledged one, which for an
    /// unfinished READ or atomic at the head is the response it waits for.
    fn retry_point(&self) -> Psn {
        self.head_wait().unwrap_or(self.comp.psn)
    }

    /// Go-back-N from the oldest unacknowledged PSN, if retries remain. `Trigger::Packet`
    /// retries (sequence NAK, missing READ response, ACK past an unanswered READ) toward
    /// the PSN already being retried are ignored; the timer always counts.
    pub(crate) fn retry(&mut self, ctx: &mut Ctx<'_>, trigger: Trigger) {
        if !self.outstanding() {
            return;
        }
        let p = self.retry_point();
        if trigger == Trigger::Packet && self.comp.retrying_from == Some(p) {
            return;
        }
        if self.comp.retry_left == 0 {
            ctx.stats.inc(Counter::RetryExceededErr);
            self.fail_front(ctx, WcStatus::RetryExcErr);
            return;
        }
        if !(ctx.cfg.retry_cnt_7_infinite && self.attrs.retry_cnt == MAX_RETRY_CNT) {
            self.comp.retry_left -= 1;
        }
        self.comp.retrying_from = Some(p);
        ctx.stats.inc(Counter::CompleterRetryErr);
        self.comp.psn = p;
        self.seek(p);
        self.arm_retransmit(ctx);
    }

    pub(crate) fn on_retransmit_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.outstanding() && self.sends() {
            ctx.stats.inc(Counter::RetransmitTimeouts);
            self.retry(ctx, Trigger::Timeout);
        }
    }

    pub(crate) fn on_rnr_wait_over(&mut self, ctx: &mut Ctx<'_>) {
        // The requester was pointed at the NAKed PSN; now it may send again.
        if self.outstanding() {
            self.arm_retransmit(ctx);
        }
    }

    /// Handles a response packet (ACK, atomic ACK, READ response) for this QP.
    pub(crate) fn on_response(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr, payload: &[u8]) {
        let psn = r.bth.psn;
        // A response to a PSN never sent is bogus (or from an old incarnation).
        if psn.diff(self.req.psn_high) >= 0 || !self.outstanding() {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
            return;
        }
        let info = r.bth.opcode.info().expect("parsed");
        if info.is(Flags::READ) {
            return self.on_read_response(ctx, r, payload);
        }
        let Some(aeth) = r.aeth else {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
            return;
        };
        if r.bth.opcode == op::RC_ATOMIC_ACKNOWLEDGE {
            let orig = r.atomic_ack_eth.map(|a| a.orig).unwrap_or_default();
            return self.on_atomic_ack(ctx, psn, orig);
        }
        match aeth.syndrome {
            Syndrome::Ack { .. } => self.on_ack(ctx, psn),
            Syndrome::Nak(NakCode::PsnSequenceError) => self.on_seq_nak(ctx, psn),
            Syndrome::RnrNak { timer } => self.on_rnr_nak(ctx, psn, timer),
            Syndrome::Nak(code) => self.on_fatal_nak(ctx, psn, code),
        }
    }

    fn on_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        if psn.diff(self.comp.psn) < 0 {
            // Older than what is already acknowledged: a duplicate or reordered ACK.
            ctx.stats.inc(Counter::DropUnexpectedResponse);
            return;
        }
        let (progress, lost) = self.ack_before(ctx, psn.add(1));
        if lost {
            // An ACK beyond a READ/atomic whose response never came (rxe: ERROR_RETRY).
            self.advance(ctx, self.retry_point(), progress);
            self.retry(ctx, Trigger::Packet);
            return;
        }
        self.advance(ctx, psn.add(1), progress);
    }

    /// The WQE at the head completes with error `status` and the QP goes to ERR on its
    /// own (an asynchronous event): flushing the rest (IBA 10.8.3.1, completion errors).
    fn fail_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.complete_front(ctx, status);
        self.enter_error(ctx, true);
    }

    /// What every NAK does first: it acknowledges everything before its PSN (IBA
    /// 9.7.5.1.3). False, and counted, if it is older than what is already acknowledged
    /// (a duplicate or reordered NAK), which then does nothing more.
    fn nak_acks_before(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> bool {
        if psn.diff(self.comp.psn) < 0 {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
            return false;
        }
        let (progress, _) = self.ack_before(ctx, psn);
        self.advance(ctx, psn, progress);
        true
    }

    fn on_seq_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn) {
        ctx.stats.inc(Counter::RcvdSeqErr);
        if self.nak_acks_before(ctx, psn) {
            self.retry(ctx, Trigger::Packet);
        }
    }

    fn on_rnr_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, timer: u8) {
        ctx.stats.inc(Counter::RcvdRnrErr);
        if !self.nak_acks_before(ctx, psn) {
            return;
        }
        if self.comp.rnr_left == 0 {
            ctx.stats.inc(Counter::RetryRnrExceededErr);
            self.fail_front(ctx, WcStatus::RnrRetryExcErr);
            return;
        }
        if self.comp.rnr_left != RNR_RETRY_INFINITE {
            self.comp.rnr_left -= 1;
        }
        self.comp.psn = psn;
        self.seek(psn);
        self.timers.stop(QpTimer::Retransmit);
        self.timers
            .set(QpTimer::RnrWait, ctx.now.saturating_add(rnr_timer(timer)));
    }

    fn on_fatal_nak(&mut self, ctx: &mut Ctx<'_>, psn: Psn, code: NakCode) {
        if !self.nak_acks_before(ctx, psn) {
            return;
        }
        // The NAK fails only the WQE whose PSN it names. A READ or atomic still at the
        // head with PSNs before the NAK's was executed by the responder (responses leave
        // in PSN order) and its response was lost: retry it, never fail it with the
        // later request's error (rxe `check_psn`: a response past the head WQE's last
        // PSN with a READ/atomic at the head -> COMPST_ERROR_RETRY).
        let Some(w) = self.sq.front() else {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
            return;
        };
        if !w.contains(psn) {
            if w.started && w.op.is_read_or_atomic() && psn.diff(w.last_psn) > 0 {
                self.retry(ctx, Trigger::Packet);
            } else {
                ctx.stats.inc(Counter::DropUnexpectedResponse);
            }
            return;
        }
        let status = match code {
            NakCode::InvalidRequest | NakCode::InvalidRdRequest => WcStatus::RemInvReqErr,
            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
            NakCode::PsnSequenceError => unreachable!("handled as a retry"),
        };
        self.complete_front(ctx, status);
        self.enter_error(ctx, true);
    }

    /// What a READ response or an atomic ACK does first: a stale one is dropped; a current
    /// one acknowledges every request before it and is for the WQE then at the head of the
    /// send queue, returned (none: unexpected, dropped).
    fn response_head(&mut self, ctx: &mut Ctx<'_>, psn: Psn) -> Option<SendWqe> {
        if psn.diff(self.comp.psn) < 0 {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
            return None;
        }
        let (progress, _) = self.ack_before(ctx, psn);
        if progress {
            self.advance(ctx, self.comp.psn, true);
        }
        let head = self.sq.front().copied();
        if head.is_none() {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
        }
        head
    }

    /// A response that does not answer the head WQE `w`: past a started READ/atomic, the
    /// head's own responses were lost (go back to it); anything else is unexpected.
    fn not_for_head(&mut self, ctx: &mut Ctx<'_>, w: &SendWqe, psn: Psn) {
        if w.started && w.op.is_read_or_atomic() && psn.diff(w.last_psn) > 0 {
            self.retry(ctx, Trigger::Packet);
        } else {
            ctx.stats.inc(Counter::DropUnexpectedResponse);
        }
    }

    fn on_read_response(&mut self, ctx: &mut Ctx<'_>, r: &RoceRepr, payload: &[u8]) {
        let psn = r.bth.psn;
        let mtu = self.mtu();
        let Some(w) = self.response_head(ctx, psn) else {
            return;
        };
        if !matches!(w.op, SendOp::Read { .. }) || !w.contains(psn) {
            self.not_for_head(ctx, &w, psn);
            return;
        }
        let expected = w.first_psn.add(w.read_done / mtu);
        match psn.diff(expected) {
            d if d < 0 => {
                ctx.stats.inc(Counter::DropUnexpectedResponse); // duplicate
                return;
            }
            d if d > 0 => {
                // A response is missing (IBA 9.7.5.1.5): go back to it.
                self.comp.psn = expected;
                self.retry(ctx, Trigger::Packet);
                return;
            }
            _ => {}
        }
        // The packet at this PSN carries the bytes at this offset whichever stream it
        // belongs to: the original one, or the one answering a READ re-issued for the
        // remaining bytes (which starts again with FIRST/ONLY). So only its END-ness and
        // length are checked, not whether it starts a stream.
        let rest = w.len - w.read_done;
        let info = r.bth.opcode.info().expect("parsed");
        let want_last = rest <= mtu;
        let len_ok = if want_last {
            payload.len() as u32 == rest
        } else {
            payload.len() as u32 == mtu
        };
        if info.is(Flags::END) != want_last || !len_ok {
            self.fail_front(ctx, WcStatus::BadRespErr);
            return;
        }
        if !payload.is_empty() && {
            let r = w
                .local
                .scatter(ctx.mem, self.pd, u64::from(w.read_done), payload);
            ctx.stats.note_mem(&r);
            r.is_err()
        } {
            self.fail_front(ctx, WcStatus::LocProtErr);
            return;
        }
        self.sq[0].read_done += payload.len() as u32;
        if want_last {
            self.complete_front(ctx, WcStatus::Success);
        }
        self.advance(ctx, psn.add(1), true);
    }

    fn on_atomic_ack(&mut self, ctx: &mut Ctx<'_>, psn: Psn, orig: u64) {
        let Some(w) = self.response_head(ctx, psn) else {
            return;
        };
        if !w.op.is_atomic() || w.first_psn != psn || !w.started {
            self.not_for_head(ctx, &w, psn);
            return;
        }
        // The original value, as the 8 bytes of a u64 in host order (x86: little-endian).
        let r = w.local.scatter(ctx.mem, self.pd, 0, &orig.to_ne_bytes());
        ctx.stats.note_mem(&r);
        if r.is_err() {
            self.fail_front(ctx, WcStatus::LocProtErr);
            return;
        }
        self.complete_front(ctx, WcStatus::Success);
        self.advance(ctx, psn.add(1), true);
    }
}
