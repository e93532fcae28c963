//! The error path through a shared receive queue, as a property (the sibling of
//! tests/props_rc.rs's error property): the traffic of tests/props_srq.rs (2 to 4 RC QP
//! pairs whose receivers share one SRQ; SENDs and WRITEs with immediate of 0 to 3 path
//! MTUs on random QPs; up to 30% loss, duplication and reordering both ways; the SRQ
//! refilled in random batches when it runs empty, the limit re-armed at random), where
//! some QPs fail mid-stream while at least one goes on. A faulty QP gets one of: a WRITE
//! with immediate with a bad R_Key (REM_ACCESS_ERR), a SEND longer than the receive
//! buffers (LOC_LEN_ERR at the receiver, REM_INV_REQ_ERR at the sender), the program
//! moving its responder to ERR or RESET at a random step, or a link cut from a random
//! packet on (often inside a SEND, so that the responder holds that SEND's WQE), with or
//! without the program then moving the responder to ERR or RESET. Its requester retries 6
//! times, then gives up. A UD QP pair may join, its receiver on the SRQ too (datagrams
//! posted at random steps, the receiver sometimes moved to ERR). At the end each faulty
//! QP's responder is moved to ERR, reset, destroyed, or reset and connected again with
//! its requester, and what is left in the SRQ is drained over a clean link through a
//! healthy QP and the reconnected ones, so that every WQE can be named.
//!
//! What the engine promises (`engine/qp/recv.rs`): a WQE is taken out of the SRQ when a
//! message starts and is then held by that one QP; it ends as that message's completion
//! (success or error), as a WR_FLUSH_ERR when the QP goes to ERR (`flush_recv`), or back
//! at the SRQ's front when the QP is reset or destroyed (`give_back_srq_wqe`: no
//! completion is owed then, IBA 10.3.1). A QP on an SRQ that enters ERR raises Last WQE
//! Reached once (IBA o11-5.2.5). The limit event fires once per arming, at the first take
//! that leaves fewer WQEs than the limit (rxe `get_srq_wqe`).
//!
//! Checked, per case:
//! - conservation: every WQE posted ends exactly once, as a successful receive on one
//!   QP, as the error completion of the WQE a QP held (at most one per QP, only if it went
//!   to ERR: LOC_LEN_ERR for the long SEND, WR_FLUSH_ERR otherwise), or still in the SRQ
//!   at the end (its count, then each named by the drain); none lost, none twice; the
//!   program polls before each RESET, which discards a QP's unpolled completions as
//!   mlx5 does (`Engine::modify_qp`);
//! - Last WQE Reached once for each QP that entered ERR, never for one only reset;
//!   the access/request error event once for a responder the fault reached;
//! - a faulty QP's receiver got exactly its messages before the faulty one (all of them
//!   if the fault reached it), in order, byte for byte; its requester: successes, then
//!   the faulty WR's own status (or RETRY_EXC_ERR at or before it, when a NAK or ACK was
//!   lost and the responder in ERR no longer answers), then WR_FLUSH_ERR for the rest;
//! - every other QP delivers all its messages once, in order, byte for byte, completes
//!   every WR successfully and stays in RTS at both ends;
//! - UD: every datagram received once, byte for byte, or lost on the link or dropped for
//!   want of a WQE (counted), nothing else while the receiver stays in RTS;
//! - the limit event never fires unarmed, at most once per arming, and never fails to
//!   fire when a take leaves fewer WQEs than the armed limit.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256, about a second in debug).

mod common;

use common::rc::{parse_pkt, pattern};
use common::srq::{SrqNet, SrqOpts, A, B};
use common::srq_case::{
    case, check_ud, post_dgram, rule, Case, CutLink, FnRule, Msg, MAX_MSGS, RECV, SLOT,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use roce_emu::engine::*;
use roce_emu::sim::direct::{self, RcParams};
use roce_emu::sim::rule::{Rule, Verdict};
use roce_emu::wire::opcode::op;
use roce_emu::wire::Psn;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How a faulty QP fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// One of its messages becomes a WRITE with immediate (of at least one byte: a
    /// zero-length one checks no key, C9-88) with a bad R_Key.
    BadRkey,
    /// One of its messages becomes a SEND longer than the receive buffers.
    LongSend,
    /// The program moves its responder QP to ERR at this step of the run.
    UserErr(u32),
    /// ... to RESET.
    UserReset(u32),
    /// The link to its responder QP is cut from its n-th packet on (the requester gives
    /// up; the responder may be left holding a WQE for a message half received) and, if
    /// given, the program moves the responder to this state as soon as a packet was cut.
    /// With `tail`, only SEND_MIDDLE and SEND_LAST packets count toward n, so that the cut
    /// falls inside a SEND and its WQE is held.
    Cut {
        n: u64,
        tail: bool,
        kill: Option<QpState>,
    },
}

/// What the program does at the end with a faulty QP's responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    Err,
    Reset,
    Destroy,
    /// Both ends reset and connected again: the QP then carries part of the drain.
    Reconnect,
}

/// UD datagrams (length, step posted) and the step the receiver is moved to ERR.
type UdPlan = (Vec<(u32, u32)>, Option<u32>);

#[derive(Debug, Clone)]
struct ErrCase {
    c: Case,
    /// Per QP: its fault, which of its messages is faulty (mod their count; a QP with
    /// none gets one), how its responder is closed at the end.
    faults: Vec<Option<(Fault, usize, Close)>>,
    /// WQEs posted beyond one per message.
    extra: usize,
    /// The limit armed at creation, then at each refill (0: not armed).
    limits: Vec<u32>,
    /// A UD QP pair too, its receiver on the SRQ: its datagrams (length, mod the path
    /// MTU plus one; the step at which each is posted) and the step at which the program
    /// moves the receiver to ERR, if any.
    ud: Option<UdPlan>,
}

const BAD_RKEY: u32 = 0x00ba_d000;
/// A's source slots: room for a SEND one path MTU longer than the receive buffers.
const ASLOT: u64 = 16 * 1024;
/// B: where WRITEs go, past the receive slots.
const TARGET: u64 = 768 * 1024;
/// Immediate data of the drain messages.
const DRAIN: u32 = 0xd000_0000;

fn err_case() -> impl Strategy<Value = ErrCase> {
    // A cut link is what leaves a WQE held for a message half received: weighted up.
    let fault = prop_oneof![
        2 => Just(Fault::BadRkey),
        2 => Just(Fault::LongSend),
        1 => (0u32..600).prop_map(Fault::UserErr),
        1 => (0u32..600).prop_map(Fault::UserReset),
        6 => (
            1u64..=16,
            prop::bool::weighted(0.75),
            prop_oneof![
                Just(None),
                Just(Some(QpState::Err)),
                Just(Some(QpState::Reset))
            ]
        )
            .prop_map(|(n, tail, kill)| Fault::Cut {
                n: if tail { 1 + n % 4 } else { n },
                tail,
                kill
            }),
    ];
    let close = prop_oneof![
        Just(Close::Err),
        Just(Close::Reset),
        Just(Close::Destroy),
        Just(Close::Reconnect)
    ];
    let per_qp = prop::option::weighted(0.8, (fault, any::<usize>(), close));
    (
        case(),
        prop::collection::vec(per_qp, 4),
        0usize..4,
        0usize..=8,
        prop::collection::vec(0u32..=4, 1..=8),
        prop::option::of((
            prop::collection::vec((any::<u32>(), 0u32..400), 0..=12),
            prop::option::weighted(0.3, 0u32..600),
        )),
    )
        .prop_map(|(mut c, mut faults, healthy, extra, limits, ud)| {
            faults.truncate(c.qps);
            faults[healthy % c.qps] = None;
            let m = c.mtu.bytes();
            for (q, f) in faults.iter_mut().enumerate() {
                let Some((kind, pos, _)) = f else { continue };
                if !matches!(kind, Fault::BadRkey | Fault::LongSend) {
                    continue;
                }
                let mine: Vec<usize> = (0..c.msgs.len()).filter(|&i| c.msgs[i].qp == q).collect();
                let i = if mine.is_empty() {
                    c.msgs.push(Msg {
                        qp: q,
                        len: 0,
                        write: false,
                    });
                    c.msgs.len() - 1
                } else {
                    mine[*pos % mine.len()]
                };
                *pos = c.msgs[..i].iter().filter(|x| x.qp == q).count();
                let msg = &mut c.msgs[i];
                if *kind == Fault::BadRkey {
                    msg.write = true;
                    msg.len = msg.len.max(1);
                } else {
                    msg.write = false;
                    msg.len = 3 * m + 1 + msg.len % m;
                }
            }
            ErrCase {
                c,
                faults,
                extra,
                limits,
                ud,
            }
        })
}

/// What one error-path case saw, for the report.
#[derive(Default, Clone, Copy)]
struct Seen {
    msgs: usize,
    faulted: usize,
    right_status: usize,
    retry_exc: usize,
    flushed_held: usize,
    given_back: usize,
    limit_events: usize,
    ud_received: usize,
    ud_no_wqe: usize,
}

/// Takes node 1's events after a run during which the SRQ held `before` WQEs before
/// (only takes shrink it then): the limit event once per arming, and as soon as a take
/// leaves fewer than the limit; the other events into `events`.
fn limit_events(
    s: &mut SrqNet,
    before: usize,
    armed: &mut Option<u32>,
    events: &mut Vec<AsyncEvent>,
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    let (srq, after) = (s.srq, s.srq_len());
    for ev in s.events(B) {
        if ev == (AsyncEvent::SrqLimitReached { srq }) {
            prop_assert!(armed.take().is_some(), "limit event without an arming");
            prop_assert_eq!(s.net.nodes[B].engine.query_srq(srq).unwrap().limit, 0);
            seen.limit_events += 1;
        } else {
            events.push(ev);
        }
    }
    if let Some(l) = *armed {
        prop_assert!(
            after >= before || after >= l as usize,
            "took down to {} under the armed limit {} without the event",
            after,
            l
        );
    }
    Ok(())
}

fn to_state(s: &mut SrqNet, qpn: u32, state: QpState) {
    let now = s.net.now;
    let attr = QpAttr {
        state: Some(state),
        ..QpAttr::default()
    };
    s.engine(B).modify_qp(now, qpn, &attr).unwrap();
}

fn check_errors(e: ErrCase) -> Result<Seen, TestCaseError> {
    let c = &e.c;
    let n = c.msgs.len();
    let m = c.mtu.bytes();
    let rlen = 3 * m;
    let dgrams = e.ud.as_ref().map_or(&[][..], |u| &u.0[..]);
    let nud = dgrams.len();
    let total = n + nud + e.extra;
    // Messages (one more per faulty QP that had none), datagrams, extra WQEs.
    let depth = MAX_MSGS + 4 + 12 + 8;
    let finite = (0..c.qps)
        .filter(|&q| e.faults[q].is_some())
        .fold(0u32, |b, q| b | 1 << q);
    let mut s = SrqNet::new(SrqOpts {
        qps: c.qps,
        srq_depth: depth,
        srq_limit: e.limits[0],
        mtu: c.mtu,
        retry7_forever: true,
        finite_retry: finite,
        ..SrqOpts::default()
    });
    let srq = s.srq;
    let mut seen = Seen {
        msgs: n,
        ..Seen::default()
    };
    // WQE k: slot k, wr_id 1000 + k, 3 path MTUs.
    let mut posted = 0usize;
    let post = |s: &mut SrqNet, k: usize, posted: &mut usize| {
        for _ in 0..k.min(total - *posted) {
            let i = *posted as u64;
            s.post_srq_recv(1000 + i, RECV + SLOT * i, rlen).unwrap();
            *posted += 1;
        }
    };
    post(&mut s, c.first, &mut posted);
    let target = s.b.mr.iova() + TARGET;
    for (i, msg) in c.msgs.iter().enumerate() {
        let src = ASLOT * i as u64;
        s.write_mem(A, src, &pattern(i as u8 ^ 0x5a, msg.len as usize));
        let sge = [s.sge(A, src, msg.len)];
        let bad = matches!(e.faults[msg.qp], Some((Fault::BadRkey, _, _)));
        let k = c.msgs[..i].iter().filter(|x| x.qp == msg.qp).count();
        let faulty = bad && e.faults[msg.qp].is_some_and(|f| f.1 == k);
        let imm = i as u32;
        let op = if msg.write {
            let rkey = if faulty { BAD_RKEY } else { s.b.mr.rkey().0 };
            SendOp::WriteWithImm {
                remote: Remote { va: target, rkey },
                imm,
            }
        } else {
            SendOp::SendWithImm { imm }
        };
        let wr = SendWr {
            wr_id: i as u64,
            op,
            local: Local::Sges(&sge),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        };
        let (qpn, now) = (s.a.qps[msg.qp], s.net.now);
        s.engine(A).post_send(now, qpn, &wr).unwrap();
    }
    // Cut links first: they see every packet to their QP.
    let mut cuts = Vec::new();
    for (q, f) in e.faults.iter().enumerate() {
        if let Some((Fault::Cut { n, tail, kill }, ..)) = f {
            let cut = Arc::new(AtomicBool::new(false));
            let dqpn = s.b.qps[q];
            let seen = 0;
            let rule = CutLink {
                dqpn,
                tail: *tail,
                from: *n,
                seen,
                cut: cut.clone(),
            };
            s.net.add_rule(A, B, rule);
            cuts.push((q, cut, *kill));
        }
    }
    // UD: the loss and reordering of the link, no duplication (UD has none to undo, IBA
    // 9.8.2: a duplicated datagram would be received twice and take a second WQE).
    let ud = e.ud.as_ref().map(|u| (s.add_ud(), u.1));
    let lost = Arc::new(AtomicU64::new(0));
    if ud.is_some() {
        let mut inner = rule((c.fwd.0, 0.0, c.fwd.2), c.seed ^ 0x0d);
        let lost = lost.clone();
        let f = move |now: Instant, pkt: &[u8]| {
            let o = parse_pkt(pkt).bth.opcode;
            if o != op::UD_SEND_ONLY && o != op::UD_SEND_ONLY_WITH_IMMEDIATE {
                return Verdict::Pass;
            }
            match inner.on_packet(now, pkt) {
                Verdict::Drop => {
                    lost.fetch_add(1, Ordering::Relaxed);
                    Verdict::Drop
                }
                Verdict::Pass => Verdict::Delay(Duration::ZERO),
                v => v,
            }
        };
        s.net.add_rule(A, B, FnRule(f));
    }
    s.net.add_rule(A, B, rule(c.fwd, c.seed));
    s.net.add_rule(B, A, rule(c.back, c.seed ^ 0xdead_beef));

    let (mut ca, mut cb, mut events) = (Vec::new(), Vec::new(), Vec::new());
    // The limit as the program armed it (None once it fired), and how many refills so far.
    let mut armed = (e.limits[0] > 0).then_some(e.limits[0]);
    let mut refills = 0usize;
    let mut done = false;
    let mut ud_killed = false;
    for step in 0..2_000_000u32 {
        for (q, f) in e.faults.iter().enumerate() {
            let qpn = s.b.qps[q];
            match f {
                Some((Fault::UserErr(at), ..)) if *at == step => {
                    to_state(&mut s, qpn, QpState::Err)
                }
                Some((Fault::UserReset(at), ..)) if *at == step => {
                    cb.extend(s.completions(B));
                    let len = s.srq_len();
                    to_state(&mut s, qpn, QpState::Reset);
                    seen.given_back += s.srq_len() - len;
                }
                _ => {}
            }
        }
        for (q, cut, kill) in &mut cuts {
            if let Some(st) = kill.filter(|_| cut.load(Ordering::Relaxed)) {
                cb.extend(s.completions(B));
                let (qpn, len) = (s.b.qps[*q], s.srq_len());
                to_state(&mut s, qpn, st);
                seen.given_back += s.srq_len() - len;
                *kill = None;
            }
        }
        if let Some(((ua, ub), kill)) = ud {
            for (j, &(len, at)) in dgrams.iter().enumerate() {
                if at == step {
                    post_dgram(&mut s, ua, ub, j, len % (m + 1));
                }
            }
            if kill == Some(step) {
                to_state(&mut s, ub, QpState::Err);
                ud_killed = true;
            }
        }
        if s.srq_len() == 0 && posted < total {
            post(&mut s, c.refill, &mut posted);
            refills += 1;
            let l = e.limits[refills % e.limits.len()];
            if l > 0 {
                s.engine(B).modify_srq(srq, None, Some(l)).unwrap();
                armed = Some(l);
            }
        }
        ca.extend(s.completions(A));
        cb.extend(s.completions(B));
        if ca.len() >= n + nud {
            done = true;
            break;
        }
        let before = s.srq_len();
        // Idle with datagrams still to post: go on counting steps.
        if !s.net.step() && dgrams.iter().all(|d| d.1 < step) {
            break;
        }
        // The limit event: once per arming, and as soon as a take leaves fewer than the
        // limit (only takes shrink the SRQ during a step).
        limit_events(&mut s, before, &mut armed, &mut events, &mut seen)?;
    }
    prop_assert!(done, "stalled: {} of {n} sends", ca.len());
    let before = s.srq_len();
    s.net
        .run_idle(1_000_000)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    limit_events(&mut s, before, &mut armed, &mut events, &mut seen)?;
    ca.extend(s.completions(A));
    cb.extend(s.completions(B));
    prop_assert_eq!(ca.len(), n + nud, "sends: {:?}", ca);

    // Close the failed QPs (their completions polled first: RESET discards unpolled ones).
    let states: Vec<QpState> = (0..c.qps)
        .map(|q| s.net.nodes[B].engine.qp(s.b.qps[q]).unwrap().state)
        .collect();
    let before_close = s.srq_len();
    let mut entered_err = vec![false; c.qps];
    // The QPs the drain goes through: a healthy one and those reconnected.
    let mut drains = vec![(0..c.qps).find(|&q| e.faults[q].is_none()).unwrap()];
    for (q, f) in e.faults.iter().enumerate() {
        entered_err[q] = states[q] == QpState::Err;
        let Some((_, _, close)) = f else { continue };
        let qpn = s.b.qps[q];
        match close {
            Close::Err => {
                to_state(&mut s, qpn, QpState::Err);
                entered_err[q] = true;
            }
            Close::Reset => to_state(&mut s, qpn, QpState::Reset),
            Close::Destroy => s.engine(B).destroy_qp(qpn).unwrap(),
            Close::Reconnect => {
                to_state(&mut s, qpn, QpState::Reset);
                let (qa, now) = (s.a.qps[q], s.net.now);
                let reset = QpAttr {
                    state: Some(QpState::Reset),
                    ..QpAttr::default()
                };
                s.engine(A).modify_qp(now, qa, &reset).unwrap();
                let p = RcParams {
                    mtu: c.mtu,
                    min_rnr_timer: 1,
                    ..RcParams::default()
                };
                let (ia, ib) = (s.net.nodes[A].ip, s.net.nodes[B].ip);
                let (pa, pb) = (Psn::new(0x40_0000 + q as u32), Psn::new(0x80_0000));
                direct::connect(s.engine(A), qa, ib, qpn, pa, pb, &p).unwrap();
                direct::connect(s.engine(B), qpn, ia, qa, pb, pa, &p).unwrap();
                drains.push(q);
            }
        }
    }
    cb.extend(s.completions(B));
    seen.given_back += s.srq_len() - before_close;
    for ev in s.events(B) {
        let limit = matches!(ev, AsyncEvent::SrqLimitReached { .. });
        prop_assert!(!limit, "limit event on close");
        events.push(ev);
    }

    // Drain what is left through a healthy QP over a clean link: each WQE named once.
    let left = s.srq_len();
    prop_assert!(
        left <= posted,
        "{} WQEs in the SRQ, {} posted",
        left,
        posted
    );
    s.net.clear_rules();
    for j in 0..left {
        let sge = [s.sge(A, 0, 0)];
        let wr = SendWr {
            wr_id: 100_000 + j as u64,
            op: SendOp::SendWithImm {
                imm: DRAIN + j as u32,
            },
            local: Local::Sges(&sge),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        };
        let (qpn, now) = (s.a.qps[drains[j % drains.len()]], s.net.now);
        s.engine(A).post_send(now, qpn, &wr).unwrap();
    }
    s.net
        .run_idle(1_000_000)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let drained_sends = s.completions(A);
    prop_assert_eq!(drained_sends.len(), left);
    prop_assert!(drained_sends.iter().all(|c| c.status == WcStatus::Success));
    cb.extend(s.completions(B));
    prop_assert_eq!(s.srq_len(), 0);

    // Conservation: every WQE posted ends exactly once.
    let mut ends: BTreeMap<u64, &Completion> = BTreeMap::new();
    for r in &cb {
        prop_assert!(
            ends.insert(r.wr_id, r).is_none(),
            "WQE {} ended twice: {:?}",
            r.wr_id,
            cb
        );
    }
    let want: Vec<u64> = (0..posted as u64).map(|i| 1000 + i).collect();
    prop_assert_eq!(
        ends.keys().copied().collect::<Vec<_>>(),
        want,
        "WQEs that ended"
    );
    let drained: Vec<&Completion> = cb
        .iter()
        .filter(|r| r.imm.is_some_and(|i| i >= DRAIN))
        .collect();
    prop_assert_eq!(drained.len(), left);
    for r in &drained {
        let j = (r.imm.unwrap() - DRAIN) as usize;
        let qb = s.b.qps[drains[j % drains.len()]];
        prop_assert!(
            r.qpn == qb && r.status == WcStatus::Success,
            "drain {:?}",
            r
        );
    }

    // Per QP: requester statuses, receiver completions, events.
    for q in 0..c.qps {
        let (qa, qb) = (s.a.qps[q], s.b.qps[q]);
        let mine: Vec<usize> = (0..n).filter(|&i| c.msgs[i].qp == q).collect();
        let fault = e.faults[q];
        // k: the faulty message's place among the QP's messages (their count if none).
        let k = match fault {
            Some((Fault::BadRkey | Fault::LongSend, pos, _)) => pos,
            _ => mine.len(),
        };
        let sends: Vec<&Completion> = ca.iter().filter(|x| x.qpn == qa).collect();
        let ids: Vec<u64> = sends.iter().map(|x| x.wr_id).collect();
        let want: Vec<u64> = mine.iter().map(|&i| i as u64).collect();
        prop_assert_eq!(ids, want, "QP {}: send completions out of order", q);
        let ok = sends
            .iter()
            .take_while(|x| x.status == WcStatus::Success)
            .count();
        let access_ev = AsyncEvent::QpAccessError { qpn: qb };
        let request_ev = AsyncEvent::QpRequestError { qpn: qb };
        let faulted = events.iter().any(|v| *v == access_ev || *v == request_ev);
        if let Some(first) = sends.get(ok) {
            let right = match fault {
                Some((Fault::BadRkey, ..)) => Some(WcStatus::RemAccessErr),
                Some((Fault::LongSend, ..)) => Some(WcStatus::RemInvReqErr),
                _ => None,
            };
            if first.status == WcStatus::RetryExcErr {
                prop_assert!(fault.is_some() && ok <= k, "QP {}: {:?}", q, sends);
                seen.retry_exc += 1;
            } else {
                seen.right_status += 1;
                prop_assert!(
                    Some(first.status) == right && ok == k && faulted,
                    "QP {}: WR {} failed {:?}, fault {:?} at {}",
                    q,
                    first.wr_id,
                    first.status,
                    fault,
                    k
                );
            }
            prop_assert!(
                sends[ok + 1..]
                    .iter()
                    .all(|x| x.status == WcStatus::WrFlushErr),
                "QP {}: after the failure: {:?}",
                q,
                sends
            );
        } else {
            prop_assert!(k == mine.len(), "QP {}: faulty WR {} succeeded", q, k);
        }
        // The receiver: a prefix of the QP's messages, in order, exact.
        let recvs: Vec<&Completion> = cb
            .iter()
            .filter(|x| x.qpn == qb && x.imm.is_none_or(|i| i < DRAIN))
            .collect();
        let good: Vec<&&Completion> = recvs
            .iter()
            .filter(|x| x.status == WcStatus::Success)
            .collect();
        let errs: Vec<WcStatus> = recvs
            .iter()
            .filter(|x| x.status != WcStatus::Success)
            .map(|x| x.status)
            .collect();
        let d = good.len();
        prop_assert!(
            d <= k && ok <= d,
            "QP {}: {} received, {} acked, fault at {}",
            q,
            d,
            ok,
            k
        );
        for (j, r) in good.iter().enumerate() {
            let i = mine[j];
            let msg = &c.msgs[i];
            prop_assert_eq!(r.imm, Some(i as u32), "QP {}: receive {}", q, j);
            prop_assert_eq!(r.byte_len, msg.len);
            if !msg.write {
                let slot = RECV + SLOT * (r.wr_id - 1000);
                prop_assert!(
                    s.read_mem(B, slot, msg.len as usize)
                        == pattern(i as u8 ^ 0x5a, msg.len as usize),
                    "message {} bytes",
                    i
                );
            }
        }
        let lwr = events
            .iter()
            .filter(|v| **v == AsyncEvent::QpLastWqeReached { qpn: qb })
            .count();
        prop_assert_eq!(
            lwr,
            usize::from(entered_err[q]),
            "QP {}: Last WQE Reached",
            q
        );
        // Only the fault can move a responder with a faulty message to ERR.
        if matches!(fault, Some((Fault::BadRkey | Fault::LongSend, ..))) {
            prop_assert_eq!(
                states[q] == QpState::Err,
                faulted,
                "QP {}: ERR without its event",
                q
            );
        }
        if faulted {
            seen.faulted += 1;
            prop_assert_eq!(d, k, "QP {}: the responder failed at message {}", q, k);
            let i = mine[k];
            let want = match fault {
                Some((Fault::LongSend, ..)) => vec![WcStatus::LocLenErr],
                // A WRITE with immediate takes its WQE at its last packet, checked first
                // (rxe `check_resource` before `check_rkey`): a single-packet one holds it
                // when the R_Key fails, and it is flushed.
                _ if c.msgs[i].len <= m => vec![WcStatus::WrFlushErr],
                _ => vec![],
            };
            prop_assert_eq!(&errs, &want, "QP {}: receive errors", q);
            let evs = events
                .iter()
                .filter(|v| **v == access_ev || **v == request_ev)
                .count();
            prop_assert_eq!(evs, 1);
        } else {
            prop_assert!(
                errs.is_empty() || (entered_err[q] && errs == [WcStatus::WrFlushErr]),
                "QP {}: receive errors {:?} (entered ERR: {})",
                q,
                errs,
                entered_err[q]
            );
            seen.flushed_held += errs.len();
        }
        if fault.is_none() {
            prop_assert_eq!(ok, mine.len(), "healthy QP {}: {:?}", q, sends);
            prop_assert_eq!(d, mine.len());
            prop_assert_eq!(states[q], QpState::Rts);
            let sa = s.net.nodes[A].engine.qp(qa).unwrap().state;
            prop_assert_eq!(sa, QpState::Rts);
        }
    }
    if let Some(((ua, ub), _)) = ud {
        let plan = (dgrams, m, ud_killed, lost.load(Ordering::Relaxed));
        let (got, no_wqe) = check_ud(&mut s, (ua, ub), plan, &ca, &cb, &events)?;
        seen.ud_received += got;
        seen.ud_no_wqe += no_wqe as usize;
    }
    // No other event.
    for v in &events {
        prop_assert!(
            matches!(
                v,
                AsyncEvent::QpLastWqeReached { .. }
                    | AsyncEvent::QpAccessError { .. }
                    | AsyncEvent::QpRequestError { .. }
            ),
            "unexpected event {:?}",
            v
        );
    }
    Ok(seen)
}

#[test]
fn with_failing_qps_every_srq_wqe_ends_exactly_once() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let config = ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/props_srq_err.txt",
        ))),
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let total = std::sync::Mutex::new(Seen::default());
    let t0 = std::time::Instant::now();
    let result = runner.run(&err_case(), |c| {
        let x = check_errors(c)?;
        let mut t = total.lock().unwrap();
        t.msgs += x.msgs;
        t.faulted += x.faulted;
        t.right_status += x.right_status;
        t.retry_exc += x.retry_exc;
        t.flushed_held += x.flushed_held;
        t.given_back += x.given_back;
        t.limit_events += x.limit_events;
        t.ud_received += x.ud_received;
        t.ud_no_wqe += x.ud_no_wqe;
        Ok(())
    });
    let t = *total.lock().unwrap();
    eprintln!(
        "props_srq errors: {cases} cases in {:.1?}, {} messages; {} responders failed by a \
         fault, {} faulty WRs failed with their own status, {} requesters gave up \
         (RETRY_EXC_ERR), {} held WQEs flushed by a move to ERR, \
         {} given back by RESET/destroy, {} limit events; UD: {} received, {} dropped \
         for want of a WQE",
        t0.elapsed(),
        t.msgs,
        t.faulted,
        t.right_status,
        t.retry_exc,
        t.flushed_held,
        t.given_back,
        t.limit_events,
        t.ud_received,
        t.ud_no_wqe
    );
    if let Err(e) = result {
        panic!("props_srq errors: {e}");
    }
}
