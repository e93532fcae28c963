//! Two NICs in the simulator with one connected RC QP each, registered buffers, and
//! helpers that post work and read completions and the packet trace.
#![allow(dead_code)]

use roce_emu::engine::*;
use roce_emu::mem::{Access, Lkey, MemoryRegion, Pd, Rkey, Sge};
use roce_emu::sim::Net;
use roce_emu::wire::{Psn, RocePacket, RoceRepr};
use std::sync::Arc;

pub const BUF: u64 = 256 * 1024;

/// One side: its node, QP and a registered buffer.
pub struct Side {
    pub node: usize,
    pub pd: Pd,
    pub cq: u32,
    pub qpn: u32,
    pub mr: Arc<MemoryRegion>,
}

impl Side {
    pub fn iova(&self) -> u64 {
        self.mr.iova()
    }
    pub fn lkey(&self) -> Lkey {
        self.mr.lkey()
    }
    pub fn rkey(&self) -> Rkey {
        self.mr.rkey()
    }
    /// One SGE over `len` bytes at `off` in the buffer.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.iova() + off,
            length: len,
            lkey: self.lkey(),
        }
    }
    pub fn remote(&self, off: u64) -> Remote {
        Remote {
            va: self.iova() + off,
            rkey: self.rkey().0,
        }
    }
}

/// Knobs for `Pair::new`.
#[derive(Clone, Copy)]
pub struct Opts {
    pub mtu: Mtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub depth: usize,
    pub cq_depth: usize,
    pub access: Access,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            mtu: Mtu::M1024,
            psn_a: 0x100,
            psn_b: 0x9000,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 4,
            depth: 256,
            cq_depth: 1024,
            access: Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ)
                .union(Access::REMOTE_ATOMIC),
        }
    }
}

pub struct Pair {
    pub net: Net,
    pub a: Side,
    pub b: Side,
}

fn side(net: &mut Net, node: usize, o: &Opts) -> Side {
    let e = &mut net.nodes[node].engine;
    let mem = e.mem().clone();
    let pd = mem.alloc_pd();
    let iova = 0x1000_0000 * (node as u64 + 1);
    let mr = mem
        .reg_mr(pd, iova, BUF, o.access.union(Access::LOCAL_WRITE))
        .unwrap();
    let cq = e.create_cq(o.cq_depth).unwrap();
    let qpn = e
        .create_qp(&QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap {
                max_send_wr: o.depth,
                max_recv_wr: o.depth,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        })
        .unwrap();
    Side {
        node,
        pd,
        cq,
        qpn,
        mr,
    }
}

fn connect(net: &mut Net, me: &Side, peer: &Side, o: &Opts, my_psn: u32, peer_psn: u32) {
    let peer_ip = net.nodes[peer.node].ip;
    let e = &mut net.nodes[me.node].engine;
    let remote_rights = Access::REMOTE_WRITE
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_ATOMIC);
    e.modify_qp(
        me.qpn,
        &QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access: Some(o.access & remote_rights),
            ..Default::default()
        },
    )
    .unwrap();
    e.modify_qp(
        me.qpn,
        &QpAttr {
            state: Some(QpState::Rtr),
            av: Some(AddressVector { dest_ip: peer_ip }),
            path_mtu: Some(o.mtu),
            dest_qpn: Some(peer.qpn),
            rq_psn: Some(Psn::new(peer_psn)),
            max_dest_rd_atomic: Some(o.max_rd_atomic),
            min_rnr_timer: Some(o.min_rnr_timer),
            ..Default::default()
        },
    )
    .unwrap();
    e.modify_qp(
        me.qpn,
        &QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(my_psn)),
            timeout: Some(o.timeout),
            retry_cnt: Some(o.retry_cnt),
            rnr_retry: Some(o.rnr_retry),
            max_rd_atomic: Some(o.max_rd_atomic),
            ..Default::default()
        },
    )
    .unwrap();
}

impl Pair {
    pub fn new(o: Opts) -> Pair {
        let mut net = Net::new(2);
        let a = side(&mut net, 0, &o);
        let b = side(&mut net, 1, &o);
        connect(&mut net, &a, &b, &o, o.psn_a, o.psn_b);
        connect(&mut net, &b, &a, &o, o.psn_b, o.psn_a);
        net.trace = Some(Vec::new());
        Pair { net, a, b }
    }

    pub fn side(&self, which: usize) -> &Side {
        if which == 0 {
            &self.a
        } else {
            &self.b
        }
    }

    pub fn engine(&mut self, which: usize) -> &mut Engine {
        &mut self.net.nodes[which].engine
    }

    pub fn post_send(&mut self, which: usize, wr: &SendWr<'_>) {
        let qpn = self.side(which).qpn;
        self.engine(which).post_send(qpn, wr).unwrap();
    }

    pub fn post_recv(&mut self, which: usize, wr_id: u64, off: u64, len: u32) {
        let s = self.side(which);
        let (qpn, sge) = (s.qpn, s.sge(off, len));
        self.engine(which)
            .post_recv(
                qpn,
                &RecvWr {
                    wr_id,
                    sges: &[sge],
                },
            )
            .unwrap();
    }

    /// A signaled send WR over one SGE of our buffer.
    pub fn wr(
        &self,
        which: usize,
        wr_id: u64,
        op: SendOp,
        off: u64,
        len: u32,
    ) -> (SendOp, Sge, u64) {
        (op, self.side(which).sge(off, len), wr_id)
    }

    pub fn send(&mut self, which: usize, wr_id: u64, op: SendOp, off: u64, len: u32) {
        let sge = self.side(which).sge(off, len);
        self.post_send(
            which,
            &SendWr {
                wr_id,
                op,
                local: Local::Sges(&[sge]),
                flags: SendFlags {
                    signaled: true,
                    ..Default::default()
                },
            },
        );
    }

    /// All completions now on a side's CQ.
    pub fn completions(&mut self, which: usize) -> Vec<Completion> {
        let cq = self.side(which).cq;
        let mut out = Vec::new();
        let mut buf = [Completion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            qpn: 0,
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
            src_qp: 0,
        }; 64];
        loop {
            let n = self.engine(which).poll_cq(cq, &mut buf).unwrap();
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                return out;
            }
        }
    }

    /// Runs until the network is idle (bounded).
    pub fn settle(&mut self) {
        self.net.run_idle(100_000).expect("simulation settles");
    }

    pub fn write_mem(&self, which: usize, off: u64, data: &[u8]) {
        let s = self.side(which);
        s.mr.write(s.iova() + off, data).unwrap();
    }

    pub fn read_mem(&self, which: usize, off: u64, len: usize) -> Vec<u8> {
        let s = self.side(which);
        let mut v = vec![0; len];
        s.mr.read(s.iova() + off, &mut v).unwrap();
        v
    }

    pub fn counter(&self, which: usize, c: Counter) -> u64 {
        self.net.nodes[which].engine.counters().get(c)
    }

    pub fn state(&self, which: usize) -> QpState {
        let s = self.side(which);
        self.net.nodes[which].engine.qp(s.qpn).unwrap().state
    }

    /// The trace as lines: "t_us from->to OPCODE psn=N [AETH ...] [dropped]".
    pub fn trace_lines(&self) -> Vec<String> {
        let tr = self.net.trace.as_ref().expect("tracing on");
        tr.iter()
            .map(|t| {
                let p = RocePacket::new_checked(&t.bytes[..]).unwrap();
                let r = RoceRepr::parse(&p).unwrap();
                let mut s = format!(
                    "{:>8.1} {}->{} {} psn={}",
                    t.at.as_nanos() as f64 / 1000.0,
                    t.from,
                    t.to,
                    r.bth.opcode,
                    r.bth.psn.value()
                );
                if let Some(a) = r.aeth {
                    s += &format!(" {}", a.syndrome);
                }
                if t.verdict != roce_emu::sim::rule::Verdict::Pass {
                    s += &format!(" [{:?}]", t.verdict);
                }
                s
            })
            .collect()
    }

    /// Opcode names of the trace, in order, from `from` (None = both directions).
    pub fn opcodes(&self, from: Option<usize>) -> Vec<String> {
        let tr = self.net.trace.as_ref().expect("tracing on");
        tr.iter()
            .filter(|t| from.is_none_or(|f| f == t.from))
            .map(|t| {
                let p = RocePacket::new_checked(&t.bytes[..]).unwrap();
                p.opcode().name().to_string()
            })
            .collect()
    }

    pub fn print_trace(&self) {
        for l in self.trace_lines() {
            eprintln!("{l}");
        }
    }
}

/// A fill pattern that differs per byte and per seed.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}
