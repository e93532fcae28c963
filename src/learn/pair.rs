//! The lessons' two NICs: node 0 (A, the requester) and node 1 (B, the responder) in the
//! simulator, one connected RC QP each made by the simulator's own bring-up
//! (`sim::direct`), tracing on, virtual time from zero. Nothing here is random but the
//! memory keys, which come from the memory table's fixed seed: every run is the same.

use super::LessonError;
use crate::engine::{
    Completion, Counter, Local, Mtu, QpCap, RecvWr, SendFlags, SendOp, SendWr, WcStatus,
};
use crate::mem::Access;
use crate::sim::direct::{self, RcEnd, RcEndOpts, RcParams};
use crate::sim::rule::Rule;
use crate::sim::{Net, Traced};
use crate::wire::Psn;
use std::net::IpAddr;

/// The requester's node and the responder's.
pub const A: usize = 0;
pub const B: usize = 1;

/// Each side's registered buffer.
const BUF: u64 = 64 * 1024;
/// Steps any one lesson may take (each is a few dozen packets and timers).
const MAX_STEPS: usize = 10_000;

/// What a lesson sets differently from ibv_rc_pingpong's connection.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    pub mtu: Mtu,
    /// Local ACK timeout code (4.096 us * 2^code, IBA 9.7.6.1.3).
    pub timeout: u8,
    /// The RNR NAK timer code B sends (IBA Table 45).
    pub min_rnr_timer: u8,
    /// First PSN of A's requests.
    pub psn_a: u32,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            mtu: Mtu::M1024,
            timeout: 8, // 4.096 us * 256: about 1.05 ms
            min_rnr_timer: 12,
            psn_a: 100,
        }
    }
}

pub struct Pair {
    pub net: Net,
    pub a: RcEnd,
    pub b: RcEnd,
}

fn err(what: &str, e: impl std::fmt::Display) -> LessonError {
    LessonError(format!("{what}: {e}"))
}

impl Pair {
    pub fn new(k: &Knobs) -> Result<Pair, LessonError> {
        let mut net = Net::new(2);
        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut ends = Vec::new();
        for (i, n) in net.nodes.iter_mut().enumerate() {
            let o = RcEndOpts {
                mr_access: Access::ALL,
                ..RcEndOpts::new(0x1000_0000 * (i as u64 + 1), BUF, cap)
            };
            ends.push(direct::rc_end_with(&mut n.engine, &o).map_err(|e| err("set-up", e))?);
        }
        let (b, a) = (ends.pop().expect("two"), ends.pop().expect("two"));
        let p = RcParams {
            mtu: k.mtu,
            timeout: k.timeout,
            min_rnr_timer: k.min_rnr_timer,
            max_rd_atomic: 4,
            ..RcParams::default()
        };
        let (ip_a, ip_b) = (net.nodes[A].ip, net.nodes[B].ip);
        // B's requests (none in the lessons) would start far from A's, so the two never
        // look alike.
        let (pa, pb) = (Psn::new(k.psn_a), Psn::new(k.psn_a + 0x1000));
        direct::connect(&mut net.nodes[A].engine, a.qpn, ip_b, b.qpn, pa, pb, &p)
            .map_err(|e| err("connect A", e))?;
        direct::connect(&mut net.nodes[B].engine, b.qpn, ip_a, a.qpn, pb, pa, &p)
            .map_err(|e| err("connect B", e))?;
        net.trace = Some(Vec::new());
        Ok(Pair { net, a, b })
    }

    pub fn end(&self, node: usize) -> &RcEnd {
        if node == A {
            &self.a
        } else {
            &self.b
        }
    }

    /// A fault rule on the packets from `from` to the other node.
    pub fn rule(&mut self, from: usize, r: impl Rule + 'static) {
        self.net.add_rule(from, 1 - from, r);
    }

    /// A signaled work request from A over `len` bytes of A's buffer at `off`.
    pub fn post(&mut self, wr_id: u64, op: SendOp, off: u64, len: u32) -> Result<(), LessonError> {
        let sge = [self.a.sge(off, len)];
        let wr = SendWr {
            wr_id,
            op,
            local: Local::Sges(&sge),
            flags: SendFlags {
                signaled: true,
                ..SendFlags::default()
            },
        };
        let (now, qpn) = (self.net.now, self.a.qpn);
        self.net.nodes[A]
            .engine
            .post_send(now, qpn, &wr)
            .map_err(|e| err("post_send", e))
    }

    /// A receive on B over `len` bytes of B's buffer at `off`.
    pub fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) -> Result<(), LessonError> {
        let sge = [self.b.sge(off, len)];
        let (now, qpn) = (self.net.now, self.b.qpn);
        self.net.nodes[B]
            .engine
            .post_recv(now, qpn, &RecvWr { wr_id, sges: &sge })
            .map_err(|e| err("post_recv", e))
    }

    /// Runs until nothing is in flight and no timer is armed.
    pub fn settle(&mut self) -> Result<(), LessonError> {
        self.net
            .run_idle(MAX_STEPS)
            .map(|_| ())
            .map_err(|e| err("run", e))
    }

    /// Runs until `done` holds (or the network is idle).
    pub fn run_until(&mut self, done: impl FnMut(&mut Net) -> bool) -> Result<(), LessonError> {
        self.net
            .run_until(MAX_STEPS, done)
            .map(|_| ())
            .map_err(|e| err("run", e))
    }

    /// Every completion on `node`'s CQ now.
    pub fn completions(&mut self, node: usize) -> Vec<Completion> {
        let cq = self.end(node).cq;
        let mut out = Vec::new();
        let mut buf = [Completion::default(); 16];
        // Bounded: the lessons post a handful of WRs.
        for _ in 0..64 {
            let n = self.net.nodes[node]
                .engine
                .poll_cq(cq, &mut buf)
                .unwrap_or(0);
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                break;
            }
        }
        out
    }

    /// The one completion A's WR `wr_id` must have had: success, or the lesson failed.
    pub fn expect_success(&mut self, wr_ids: &[u64]) -> Result<(), LessonError> {
        let got: Vec<(u64, WcStatus)> = self
            .completions(A)
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
        let want: Vec<(u64, WcStatus)> = wr_ids.iter().map(|&w| (w, WcStatus::Success)).collect();
        if got == want {
            Ok(())
        } else {
            Err(LessonError(format!(
                "A's completions were {got:?}, not {want:?}"
            )))
        }
    }

    pub fn write_mem(&self, node: usize, off: u64, data: &[u8]) -> Result<(), LessonError> {
        let s = self.end(node);
        s.mr.write(s.iova() + off, data)
            .map_err(|e| err("write", e))
    }

    pub fn read_mem(&self, node: usize, off: u64, len: usize) -> Result<Vec<u8>, LessonError> {
        let s = self.end(node);
        let mut v = vec![0; len];
        s.mr.read(s.iova() + off, &mut v)
            .map_err(|e| err("read", e))?;
        Ok(v)
    }

    pub fn counter(&self, node: usize, c: Counter) -> u64 {
        self.net.nodes[node].engine.counters().get(c)
    }

    pub fn addrs(&self) -> Vec<IpAddr> {
        self.net.nodes.iter().map(|n| n.ip).collect()
    }

    /// The trace so far (every packet, the dropped ones included).
    pub fn take_trace(&mut self) -> Vec<Traced> {
        self.net.trace.take().unwrap_or_default()
    }
}

/// A byte pattern that differs per byte and per seed (so a misplaced byte shows).
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}
