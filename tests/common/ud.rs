//! NICs in the simulator with one UD QP each (or the GSI QP), registered buffers, and
//! helpers that post datagrams and read completions, counters and memory.
#![allow(dead_code)]

use roce_emu::engine::*;
use roce_emu::mem::MrTable;
use roce_emu::mem::{Access, Sge};
use roce_emu::sim::direct::ud_ready;
pub use roce_emu::sim::direct::RcEnd as End;
use roce_emu::sim::{Net, Node};
use roce_emu::wire::Psn;
use std::net::IpAddr;
use std::sync::Arc;

pub const BUF: u64 = 1024 * 1024;
/// UCX's Q_Key (`UCT_IB_KEY`): any non-privileged value would do.
pub const QKEY: u32 = 0x1ee7_a330;

/// Node `node`'s UD QP (the GSI QP if `gsi`), in RTS with Q_Key `qkey`.
pub fn ud_end(e: &mut Engine, node: usize, gsi: bool, qkey: u32) -> End {
    let mem = e.mem().clone();
    let pd = mem.alloc_pd();
    let iova = 0x1000_0000 * (node as u64 + 1);
    let mr = mem.reg_mr(pd, iova, BUF, Access::ALL).unwrap();
    let cq = e.create_cq(4096).unwrap();
    let cap = QpCap {
        max_send_wr: 512,
        max_recv_wr: 512,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let init = QpInit {
        qp_type: QpType::Ud,
        ..QpInit::rc(pd, cq, cap)
    };
    let qpn = if gsi {
        e.create_gsi_qp(&init).unwrap()
    } else {
        e.create_qp(&init).unwrap()
    };
    ud_ready(e, qpn, qkey, Psn::new(0x100 * (node as u32 + 1))).unwrap();
    End { pd, cq, qpn, mr }
}

pub struct Ud {
    pub net: Net,
    pub ends: Vec<End>,
}

impl Ud {
    /// `n` IPv4 NICs (the simulator's addresses), each with a UD QP.
    pub fn new(n: usize) -> Ud {
        Ud::on(Net::new(n), false)
    }

    /// `n` NICs with the port MTU `mtu`.
    pub fn with_mtu(n: usize, mtu: Mtu) -> Ud {
        Ud::on(Net::with_config(n, |c| c.port_mtu = mtu.bytes()), false)
    }

    /// `n` IPv6 NICs (fd00::1, ::2, ...).
    pub fn v6(n: usize) -> Ud {
        let nodes = (0..n)
            .map(|i| {
                let ip: IpAddr = format!("fd00::{}", i + 1).parse().unwrap();
                Node {
                    engine: Engine::new(EngineConfig::new(ip), Arc::new(MrTable::new())),
                    ip,
                }
            })
            .collect();
        Ud::on(Net::with_nodes(nodes), false)
    }

    /// `n` NICs, each with the GSI QP (QPN 1).
    pub fn gsi(n: usize) -> Ud {
        Ud::on(Net::new(n), true)
    }

    fn on(mut net: Net, gsi: bool) -> Ud {
        let qkey = if gsi { GSI_QKEY } else { QKEY };
        let ends = (0..net.nodes.len())
            .map(|i| ud_end(&mut net.nodes[i].engine, i, gsi, qkey))
            .collect();
        net.trace = Some(Vec::new());
        Ud { net, ends }
    }

    pub fn engine(&mut self, i: usize) -> &mut Engine {
        &mut self.net.nodes[i].engine
    }

    pub fn ip(&self, i: usize) -> IpAddr {
        self.net.nodes[i].ip
    }

    pub fn sge(&self, i: usize, off: u64, len: u32) -> Sge {
        self.ends[i].sge(off, len)
    }

    /// Where node `to`'s QP is, with Q_Key `qkey`.
    pub fn dest(&self, to: usize, qkey: u32) -> UdDest {
        UdDest {
            dest_ip: self.ip(to),
            remote_qpn: self.ends[to].qpn,
            remote_qkey: qkey,
        }
    }

    /// Posts a signaled datagram of `len` bytes at `off` of `from`'s buffer to `dest`.
    pub fn send_to(
        &mut self,
        from: usize,
        wr_id: u64,
        op: SendOp,
        off: u64,
        len: u32,
        dest: &UdDest,
    ) -> Result<(), VerbsError> {
        let sge = self.sge(from, off, len);
        let wr = SendWr {
            wr_id,
            op,
            local: Local::Sges(&[sge]),
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
        };
        let (qpn, now) = (self.ends[from].qpn, self.net.now);
        self.engine(from).post_send_ud(now, qpn, &wr, dest)
    }

    /// A signaled SEND from `from` to `to`'s QP with the right Q_Key.
    pub fn send(&mut self, from: usize, wr_id: u64, to: usize, off: u64, len: u32) {
        let qkey = self.net.nodes[to]
            .engine
            .qp(self.ends[to].qpn)
            .unwrap()
            .expected_qkey();
        let d = self.dest(to, qkey);
        self.send_to(from, wr_id, SendOp::Send, off, len, &d)
            .unwrap();
    }

    pub fn post_recv(&mut self, i: usize, wr_id: u64, off: u64, len: u32) {
        let sge = self.sge(i, off, len);
        let (qpn, now) = (self.ends[i].qpn, self.net.now);
        self.engine(i)
            .post_recv(
                now,
                qpn,
                &RecvWr {
                    wr_id,
                    sges: &[sge],
                },
            )
            .unwrap();
    }

    pub fn completions(&mut self, i: usize) -> Vec<Completion> {
        let cq = self.ends[i].cq;
        let mut out = Vec::new();
        let mut buf = [Completion::default(); 64];
        loop {
            let n = self.engine(i).poll_cq(cq, &mut buf).unwrap();
            out.extend_from_slice(&buf[..n]);
            if n < buf.len() {
                return out;
            }
        }
    }

    pub fn settle(&mut self) {
        self.net.run_idle(100_000).expect("simulation settles");
    }

    pub fn write_mem(&self, i: usize, off: u64, data: &[u8]) {
        let s = &self.ends[i];
        s.mr.write(s.iova() + off, data).unwrap();
    }

    pub fn read_mem(&self, i: usize, off: u64, len: usize) -> Vec<u8> {
        let s = &self.ends[i];
        let mut v = vec![0; len];
        s.mr.read(s.iova() + off, &mut v).unwrap();
        v
    }

    pub fn counter(&self, i: usize, c: Counter) -> u64 {
        self.net.nodes[i].engine.counters().get(c)
    }

    /// Packets that left node `from` (dropped by the network or not).
    pub fn sent(&self, from: usize) -> usize {
        self.net
            .trace
            .as_ref()
            .map_or(0, |t| t.iter().filter(|p| p.from == from).count())
    }
}
