//! Two NICs in the simulator with `n` connected RC QP pairs: node 0 sends, node 1
//! receives every message of its `n` QPs through one shared receive queue (one PD, one
//! CQ, one buffer per node). For tests/sim_srq.rs and tests/props_srq.rs.
#![allow(dead_code)]

use roce_emu::engine::*;
use roce_emu::mem::{Access, MemoryRegion, Pd, Sge};
use roce_emu::sim::direct::{self, RcParams};
use roce_emu::sim::Net;
use roce_emu::wire::Psn;
use std::sync::Arc;

pub const A: usize = 0;
pub const B: usize = 1;
pub const BUF: u64 = 1024 * 1024;
/// The Q_Key of the UD QPs of [`SrqNet::add_ud`].
pub const UD_QKEY: u32 = 0x0005_a00d;

/// One node's objects.
pub struct Side {
    pub pd: Pd,
    pub cq: u32,
    pub mr: Arc<MemoryRegion>,
    pub qps: Vec<u32>,
}

pub struct SrqNet {
    pub net: Net,
    pub a: Side,
    pub b: Side,
    /// Node 1's SRQ: every QP of node 1 is on it.
    pub srq: u32,
}

/// Knobs.
#[derive(Clone, Copy)]
pub struct SrqOpts {
    pub qps: usize,
    pub srq_depth: usize,
    pub srq_limit: u32,
    pub mtu: Mtu,
    pub min_rnr_timer: u8,
    /// rxe's "retry_cnt 7 retries forever" (loss tests).
    pub retry7_forever: bool,
    /// Node 0's QPs (bit i: the i-th) that give up after 6 retries of a short timeout
    /// instead (error-path tests: a requester whose responder went to ERR must end).
    pub finite_retry: u32,
}

impl Default for SrqOpts {
    fn default() -> Self {
        SrqOpts {
            qps: 4,
            srq_depth: 64,
            srq_limit: 0,
            mtu: Mtu::M1024,
            min_rnr_timer: 1,
            retry7_forever: false,
            finite_retry: 0,
        }
    }
}

fn side(net: &mut Net, node: usize) -> (Pd, u32, Arc<MemoryRegion>) {
    let e = &mut net.nodes[node].engine;
    let mem = e.mem().clone();
    let pd = mem.alloc_pd();
    let mr = mem
        .reg_mr(pd, 0x1000_0000 * (node as u64 + 1), BUF, Access::ALL)
        .unwrap();
    let cq = e.create_cq(4096).unwrap();
    (pd, cq, mr)
}

impl SrqNet {
    pub fn new(o: SrqOpts) -> SrqNet {
        let mut net = Net::with_config(2, |c| c.retry_cnt_7_infinite = o.retry7_forever);
        let (pa, ca, ma) = side(&mut net, A);
        let (pb, cb, mb) = side(&mut net, B);
        let srq = net.nodes[B]
            .engine
            .create_srq(&SrqInit {
                pd: pb,
                max_wr: o.srq_depth,
                max_sge: 2,
                limit: o.srq_limit,
            })
            .unwrap();
        let cap = QpCap {
            max_send_wr: 256,
            max_recv_wr: 0,
            max_send_sge: 2,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let mut qa = Vec::new();
        let mut qb = Vec::new();
        for _ in 0..o.qps {
            qa.push(
                net.nodes[A]
                    .engine
                    .create_qp(&QpInit::rc(pa, ca, cap))
                    .unwrap(),
            );
            qb.push(
                net.nodes[B]
                    .engine
                    .create_qp(&QpInit {
                        srq: Some(srq),
                        ..QpInit::rc(pb, cb, cap)
                    })
                    .unwrap(),
            );
        }
        let p = RcParams {
            mtu: o.mtu,
            min_rnr_timer: o.min_rnr_timer,
            ..RcParams::default()
        };
        let (ia, ib) = (net.nodes[A].ip, net.nodes[B].ip);
        for (i, (&x, &y)) in qa.iter().zip(&qb).enumerate() {
            let (px, py) = (Psn::new(0x100 + i as u32), Psn::new(0xff_fff0 - i as u32));
            let pa = if o.finite_retry & (1 << i) != 0 {
                RcParams {
                    retry_cnt: 6,
                    timeout: 10,
                    ..p
                }
            } else {
                p
            };
            direct::connect(&mut net.nodes[A].engine, x, ib, y, px, py, &pa).unwrap();
            direct::connect(&mut net.nodes[B].engine, y, ia, x, py, px, &p).unwrap();
        }
        SrqNet {
            net,
            a: Side {
                pd: pa,
                cq: ca,
                mr: ma,
                qps: qa,
            },
            b: Side {
                pd: pb,
                cq: cb,
                mr: mb,
                qps: qb,
            },
            srq,
        }
    }

    /// A UD QP on node 0 and one on node 1 on the SRQ (Q_Key [`UD_QKEY`]), both in RTS,
    /// with node 0's CQ and node 1's; returns their QPNs.
    pub fn add_ud(&mut self) -> (u32, u32) {
        let cap = QpCap {
            max_send_wr: 256,
            max_recv_wr: 0,
            max_send_sge: 2,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let srq = self.srq;
        let mut qpns = [0; 2];
        for (node, qpn) in qpns.iter_mut().enumerate() {
            let side = self.side(node);
            let init = QpInit {
                qp_type: QpType::Ud,
                srq: (node == B).then_some(srq),
                ..QpInit::rc(side.pd, side.cq, cap)
            };
            let e = self.engine(node);
            *qpn = e.create_qp(&init).unwrap();
            let steps = [
                QpAttr {
                    state: Some(QpState::Init),
                    pkey_index: Some(0),
                    port: Some(1),
                    qkey: Some(UD_QKEY),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rtr),
                    ..QpAttr::default()
                },
                QpAttr {
                    state: Some(QpState::Rts),
                    sq_psn: Some(Psn::new(0x77)),
                    ..QpAttr::default()
                },
            ];
            for a in &steps {
                e.modify_qp(Instant::ZERO, *qpn, a).unwrap();
            }
        }
        (qpns[0], qpns[1])
    }

    pub fn side(&self, which: usize) -> &Side {
        if which == A {
            &self.a
        } else {
            &self.b
        }
    }

    pub fn engine(&mut self, which: usize) -> &mut Engine {
        &mut self.net.nodes[which].engine
    }

    pub fn sge(&self, which: usize, off: u64, len: u32) -> Sge {
        let mr = &self.side(which).mr;
        Sge {
            addr: mr.iova() + off,
            length: len,
            lkey: mr.lkey(),
        }
    }

    /// A receive WQE of `len` bytes at `off` in node 1's buffer, on the SRQ.
    pub fn post_srq_recv(&mut self, wr_id: u64, off: u64, len: u32) -> Result<(), VerbsError> {
        let sge = [self.sge(B, off, len)];
        let srq = self.srq;
        self.engine(B)
            .post_srq_recv(srq, &RecvWr { wr_id, sges: &sge })
    }

    /// A signaled SEND of `len` bytes at `off` in node 0's buffer on its `qp`-th QP.
    pub fn send(&mut self, qp: usize, wr_id: u64, off: u64, len: u32, imm: Option<u32>) {
        let sge = [self.sge(A, off, len)];
        let op = match imm {
            Some(imm) => SendOp::SendWithImm { imm },
            None => SendOp::Send,
        };
        let wr = SendWr {
            wr_id,
            op,
            local: Local::Sges(&sge),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        };
        let (qpn, now) = (self.a.qps[qp], self.net.now);
        self.engine(A).post_send(now, qpn, &wr).unwrap();
    }

    pub fn completions(&mut self, which: usize) -> Vec<Completion> {
        let cq = self.side(which).cq;
        let mut out = Vec::new();
        let mut buf = [Completion::default(); 64];
        loop {
            let n = self.engine(which).poll_cq(cq, &mut buf).unwrap();
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                return out;
            }
        }
    }

    pub fn events(&mut self, which: usize) -> Vec<AsyncEvent> {
        let e = self.engine(which);
        std::iter::from_fn(|| e.poll_event()).collect()
    }

    pub fn srq_len(&self) -> usize {
        self.net.nodes[B].engine.srq(self.srq).unwrap().len()
    }

    pub fn settle(&mut self) {
        self.net.run_idle(1_000_000).expect("simulation settles");
    }

    pub fn write_mem(&self, which: usize, off: u64, data: &[u8]) {
        let mr = &self.side(which).mr;
        mr.write(mr.iova() + off, data).unwrap();
    }

    pub fn read_mem(&self, which: usize, off: u64, len: usize) -> Vec<u8> {
        let mr = &self.side(which).mr;
        let mut v = vec![0; len];
        mr.read(mr.iova() + off, &mut v).unwrap();
        v
    }

    pub fn counter(&self, which: usize, c: Counter) -> u64 {
        self.net.nodes[which].engine.counters().get(c)
    }
}
