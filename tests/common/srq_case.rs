//! Random traffic for the SRQ properties (tests/props_srq.rs, tests/props_srq_err.rs): 2
//! to 4 RC QP pairs, SENDs and WRITEs with immediate of 0 to 3 path MTUs on random QPs, a
//! random MTU, loss, duplication and reordering both ways, and how the SRQ is filled;
//! a link cut toward one QP, and a UD QP pair on the SRQ (tests/props_srq_err.rs).
#![allow(dead_code)]

use super::rc::{parse_pkt, pattern};
use super::srq::{SrqNet, A, B, UD_QKEY};
use proptest::prelude::*;
use roce_emu::engine::*;
use roce_emu::sim::rule::{Random, Rule, Verdict};
use roce_emu::wire::opcode::op;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub const SLOT: u64 = 12 * 1024; // 3 x 4096
pub const RECV: u64 = 0; // B: one slot per WQE
pub const MAX_MSGS: usize = 40;

#[derive(Debug, Clone)]
pub struct Msg {
    pub qp: usize,
    pub len: u32,
    /// WRITE with immediate (into B's buffer past the receive slots) instead of SEND.
    pub write: bool,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub qps: usize,
    pub mtu: Mtu,
    pub msgs: Vec<Msg>,
    /// WQEs posted before any message, then the size of each refill of an empty SRQ.
    pub first: usize,
    pub refill: usize,
    pub fwd: (f64, f64, f64),
    pub back: (f64, f64, f64),
    pub seed: u64,
}

pub fn case() -> impl Strategy<Value = Case> {
    let mtu = prop_oneof![Just(Mtu::M256), Just(Mtu::M1024), Just(Mtu::M4096)];
    let fault = (0.0..0.3f64, 0.0..0.1f64, 0.0..0.2f64);
    (2usize..=4, mtu, fault.clone(), fault, any::<u64>()).prop_flat_map(
        |(qps, mtu, fwd, back, seed)| {
            let m = mtu.bytes();
            let msg = (0..qps, 0..=3 * m, any::<bool>()).prop_map(|(qp, len, write)| Msg {
                qp,
                len,
                write,
            });
            (
                proptest::collection::vec(msg, 1..=MAX_MSGS),
                0usize..=MAX_MSGS,
                1usize..=8,
            )
                .prop_map(move |(msgs, first, refill)| Case {
                    qps,
                    mtu,
                    first: first.min(msgs.len()),
                    msgs,
                    refill,
                    fwd,
                    back,
                    seed,
                })
        },
    )
}

pub fn rule((drop, duplicate, reorder): (f64, f64, f64), seed: u64) -> Random {
    let mut r = Random::new(seed);
    r.drop = drop;
    r.duplicate = duplicate;
    r.reorder = reorder;
    r
}

/// Drops every packet to one QP from the `from`-th on, and says when it started.
pub struct CutLink {
    pub dqpn: u32,
    /// Count only RC SEND_MIDDLE and SEND_LAST_WITH_IMMEDIATE packets toward `from`
    /// (the cut then falls inside a SEND).
    pub tail: bool,
    pub from: u64,
    pub seen: u64,
    pub cut: Arc<AtomicBool>,
}

impl Rule for CutLink {
    fn on_packet(&mut self, _now: Instant, pkt: &[u8]) -> Verdict {
        let bth = parse_pkt(pkt).bth;
        if bth.dqpn != self.dqpn {
            return Verdict::Pass;
        }
        let tail = [op::RC_SEND_MIDDLE, op::RC_SEND_LAST_WITH_IMMEDIATE].contains(&bth.opcode);
        if !self.tail || tail || self.seen >= self.from {
            self.seen += 1;
        }
        if self.seen < self.from {
            return Verdict::Pass;
        }
        self.cut.store(true, Ordering::Relaxed);
        Verdict::Drop
    }
}

// ---- a UD QP on the SRQ (tests/props_srq_err.rs) ---------------------------------------

/// UD datagrams: wr_ids, immediate data, A's source slots (past the RC ones, 16 KiB each).
pub const UD_WR: u64 = 200_000;
pub const UD_IMM: u32 = 0x8000_0000;
pub const UD_SRC: u64 = 16 * 1024 * (MAX_MSGS as u64 + 4);

/// A rule from a closure.
pub struct FnRule<F>(pub F);

impl<F: FnMut(Instant, &[u8]) -> Verdict + Send> Rule for FnRule<F> {
    fn on_packet(&mut self, now: Instant, pkt: &[u8]) -> Verdict {
        (self.0)(now, pkt)
    }
}

/// UD datagram `j`: wr_id UD_WR + j, immediate UD_IMM + j, from A's UD QP to B's.
pub fn post_dgram(s: &mut SrqNet, ua: u32, ub: u32, j: usize, len: u32) {
    let src = UD_SRC + 4096 * j as u64;
    s.write_mem(A, src, &pattern(j as u8 ^ 0xa5, len as usize));
    let sge = [s.sge(A, src, len)];
    let wr = SendWr {
        wr_id: UD_WR + j as u64,
        op: SendOp::SendWithImm {
            imm: UD_IMM + j as u32,
        },
        local: Local::Sges(&sge),
        flags: SendFlags {
            signaled: true,
            ..Default::default()
        },
    };
    let dest = UdDest {
        dest_ip: s.net.nodes[B].ip,
        remote_qpn: ub,
        remote_qkey: UD_QKEY,
    };
    let now = s.net.now;
    s.engine(A).post_send_ud(now, ua, &wr, &dest).unwrap();
}

/// The UD QP on the SRQ (tests/props_srq_err.rs): every datagram sent completes once, successfully, at the
/// sender; every one received is one sent, byte for byte, received once (the link never
/// duplicates UD); with the receiver never in ERR, each is received, lost on the link or
/// dropped for want of a WQE (counted), nothing else; Last WQE Reached once if it went to
/// ERR.
pub fn check_ud(
    s: &mut SrqNet,
    (ua, ub): (u32, u32),
    (dgrams, m, killed, lost): (&[(u32, u32)], u32, bool, u64),
    ca: &[Completion],
    cb: &[Completion],
    events: &[AsyncEvent],
) -> Result<(usize, u64), TestCaseError> {
    // Returns (datagrams received, dropped for want of a WQE).
    let sends: Vec<u64> = ca.iter().filter(|x| x.qpn == ua).map(|x| x.wr_id).collect();
    // In the order posted: by step, then by number.
    let mut want: Vec<(u32, u64)> = (0..dgrams.len())
        .map(|j| (dgrams[j].1, UD_WR + j as u64))
        .collect();
    want.sort();
    let want: Vec<u64> = want.into_iter().map(|x| x.1).collect();
    prop_assert_eq!(sends, want, "UD sends in the order posted");
    prop_assert!(ca
        .iter()
        .all(|x| x.qpn != ua || x.status == WcStatus::Success));
    let mut got = BTreeMap::new();
    for r in cb.iter().filter(|x| x.qpn == ub) {
        prop_assert_eq!(r.status, WcStatus::Success, "UD receive {:?}", r);
        let j = r
            .imm
            .and_then(|i| i.checked_sub(UD_IMM))
            .unwrap_or(u32::MAX) as usize;
        prop_assert!(j < dgrams.len(), "UD receive {:?}", r);
        prop_assert!(got.insert(j, r.wr_id).is_none(), "datagram {} twice", j);
        let len = dgrams[j].0 % (m + 1);
        prop_assert_eq!(r.byte_len, 40 + len, "datagram {}", j);
        let slot = RECV + SLOT * (r.wr_id - 1000) + 40;
        prop_assert!(
            s.read_mem(B, slot, len as usize) == pattern(j as u8 ^ 0xa5, len as usize),
            "datagram {} bytes",
            j
        );
    }
    let no_wqe = s.counter(B, Counter::UdDropNoRecvWqe);
    let sum = got.len() as u64 + no_wqe + lost;
    let n = dgrams.len() as u64;
    prop_assert!(
        sum == n || killed && sum <= n,
        "UD: {} sent, {} received, {} without a WQE, {} lost",
        n,
        got.len(),
        no_wqe,
        lost
    );
    let lwr = events
        .iter()
        .filter(|v| **v == AsyncEvent::QpLastWqeReached { qpn: ub })
        .count();
    prop_assert_eq!(lwr, usize::from(killed), "UD: Last WQE Reached");
    let state = s.net.nodes[B].engine.qp(ub).unwrap().state;
    prop_assert_eq!(state == QpState::Err, killed);
    Ok((got.len(), no_wqe))
}
