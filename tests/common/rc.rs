//! Two NICs in the simulator with one connected RC QP each ([`RcEnd`], made by the
//! simulator's own bring-up), registered buffers, and helpers that post work and read completions and the packet trace.
#![allow(dead_code)]

use roce_emu::engine::*;
use roce_emu::mem::{Access, MemoryRegion, Sge};
pub use roce_emu::sim::direct::RcEnd;
use roce_emu::sim::direct::{self, rc_end_with, RcEndOpts, RcParams};
use roce_emu::sim::Net;
use roce_emu::wire::{icrc, BthRepr, Opcode, Psn, RocePacket, RoceRepr, ROCE_UDP_PORT};
use std::net::SocketAddr;
use std::sync::Arc;

pub const BUF: u64 = 1024 * 1024;

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
    /// rxe's "retry_cnt 7 retries forever" (EngineConfig::retry_cnt_7_infinite).
    pub retry7_forever: bool,
    /// The QP's remote access flags, if not those of `access` (tests/sim_rc.rs).
    pub qp_access: Option<Access>,
    /// RC, or UC (tests/sim_uc.rs, tests/props_uc.rs): then only `mtu`, the PSNs, the
    /// depths and the rights apply.
    pub qp_type: QpType,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            mtu: Mtu::M1024,
            psn_a: 0x100,
            psn_b: 0x9000,
            timeout: DEFAULT_TIMEOUT,
            retry_cnt: MAX_RETRY_CNT,
            rnr_retry: RNR_RETRY_INFINITE,
            min_rnr_timer: DEFAULT_MIN_RNR_TIMER,
            max_rd_atomic: 4,
            depth: 256,
            cq_depth: 1024,
            access: Access::LOCAL_WRITE
                .union(Access::REMOTE_WRITE)
                .union(Access::REMOTE_READ)
                .union(Access::REMOTE_ATOMIC),
            retry7_forever: false,
            qp_access: None,
            qp_type: QpType::Rc,
        }
    }
}

pub struct Pair {
    pub net: Net,
    pub a: RcEnd,
    pub b: RcEnd,
}

/// Node `node`'s end: the simulator's bring-up with the test's queue depths and rights.
fn end(net: &mut Net, node: usize, o: &Opts) -> RcEnd {
    let cap = QpCap {
        max_send_wr: o.depth,
        max_recv_wr: o.depth,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    let eo = RcEndOpts {
        mr_access: o.access.union(Access::LOCAL_WRITE),
        cq_depth: o.cq_depth,
        qp_type: o.qp_type,
        ..RcEndOpts::new(0x1000_0000 * (node as u64 + 1), BUF, cap)
    };
    rc_end_with(&mut net.nodes[node].engine, &eo).unwrap()
}

/// Node `me`'s QP to RTS toward node `peer`'s.
fn connect(net: &mut Net, me: usize, peer: usize, q: (u32, u32), o: &Opts, psns: (u32, u32)) {
    let remote_rights = Access::REMOTE_WRITE
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_ATOMIC);
    let p = RcParams {
        mtu: o.mtu,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        min_rnr_timer: o.min_rnr_timer,
        max_rd_atomic: o.max_rd_atomic,
        access: o.qp_access.unwrap_or(o.access & remote_rights),
    };
    let peer_ip = net.nodes[peer].ip;
    let (my_psn, peer_psn) = (Psn::new(psns.0), Psn::new(psns.1));
    let e = &mut net.nodes[me].engine;
    if o.qp_type == QpType::Uc {
        let (psns, access) = ((my_psn, peer_psn), p.access);
        direct::uc_connect(e, q.0, peer_ip, q.1, psns, o.mtu, access).unwrap();
        return;
    }
    direct::connect(e, q.0, peer_ip, q.1, my_psn, peer_psn, &p).unwrap();
}

impl Pair {
    pub fn new(o: Opts) -> Pair {
        Pair::with_config(o, |_| {})
    }

    /// As `new`, with the engines' configuration changed by `tweak` (tests/sim_cc.rs:
    /// congestion control).
    pub fn with_config(o: Opts, mut tweak: impl FnMut(&mut EngineConfig)) -> Pair {
        let mut net = Net::with_config(2, |c| {
            c.retry_cnt_7_infinite = o.retry7_forever;
            tweak(c)
        });
        let a = end(&mut net, 0, &o);
        let b = end(&mut net, 1, &o);
        connect(&mut net, 0, 1, (a.qpn, b.qpn), &o, (o.psn_a, o.psn_b));
        connect(&mut net, 1, 0, (b.qpn, a.qpn), &o, (o.psn_b, o.psn_a));
        net.trace = Some(Vec::new());
        Pair { net, a, b }
    }

    pub fn end(&self, which: usize) -> &RcEnd {
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
        let qpn = self.end(which).qpn;
        let now = self.net.now;
        self.engine(which).post_send(now, qpn, wr).unwrap();
    }

    pub fn post_recv(&mut self, which: usize, wr_id: u64, off: u64, len: u32) {
        let s = self.end(which);
        let (qpn, sge) = (s.qpn, s.sge(off, len));
        let now = self.net.now;
        self.engine(which)
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

    /// A signaled send WR over one SGE of our buffer.
    pub fn wr(
        &self,
        which: usize,
        wr_id: u64,
        op: SendOp,
        off: u64,
        len: u32,
    ) -> (SendOp, Sge, u64) {
        (op, self.end(which).sge(off, len), wr_id)
    }

    /// A signaled send WR over one SGE of our buffer.
    pub fn send(&mut self, which: usize, wr_id: u64, op: SendOp, off: u64, len: u32) {
        self.send_flags(which, wr_id, op, off, len, signaled());
    }

    /// A signaled send WR over these SGEs (any keys, any addresses).
    pub fn post_sges(&mut self, which: usize, wr_id: u64, op: SendOp, sges: &[Sge]) {
        let wr = SendWr {
            wr_id,
            op,
            local: Local::Sges(sges),
            flags: signaled(),
        };
        self.post_send(which, &wr);
    }

    /// A request from A's QP to B's QP with `opcode` at `psn`, built by hand: the BTH of
    /// a well-behaved requester; the caller adds extension headers and payload length.
    pub fn request(&self, opcode: Opcode, psn: u32, pad: u8) -> RoceRepr {
        RoceRepr::new(BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dqpn: self.b.qpn,
            ack_req: true,
            psn: Psn::new(psn),
        })
    }

    /// Delivers a hand-built packet from A to B's engine now (ICRC filled in), past the
    /// simulated network.
    pub fn inject(&mut self, r: &RoceRepr, payload: &[u8]) {
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, payload).unwrap();
        self.inject_bytes(buf);
    }

    /// Delivers a packet from A to B's engine now as given (BTH onwards, ICRC filled
    /// in), even one no `RoceRepr` can describe (a reserved opcode).
    pub fn inject_bytes(&mut self, mut buf: Vec<u8>) {
        let src = SocketAddr::new(self.net.nodes[0].ip, 49441);
        let dst = SocketAddr::new(self.net.nodes[1].ip, ROCE_UDP_PORT);
        let ph = icrc::PseudoHeaders::new(src, dst, 0, buf.len());
        icrc::fill(ph.ip(), ph.udp(), &mut buf).unwrap();
        let now = self.net.now;
        let d = Datagram {
            src,
            dst,
            ipv4_id: Some(0),
            ecn: roce_emu::wire::Ecn::NotEct,
            data: &buf,
        };
        self.engine(1).handle_datagram(now, d);
    }

    /// The next packet `which`'s engine sends now, parsed, taken off the simulated
    /// network's path.
    pub fn transmit(&mut self, which: usize) -> Option<RoceRepr> {
        let now = self.net.now;
        let mut buf = vec![0u8; roce_emu::sim::MAX_PACKET];
        let t = self.engine(which).poll_transmit(now, &mut buf)?;
        Some(parse_pkt(&buf[..t.len]))
    }

    /// Every packet `which`'s engine sends now, parsed.
    pub fn drain(&mut self, which: usize) -> Vec<RoceRepr> {
        std::iter::from_fn(|| self.transmit(which)).collect()
    }

    /// All completions now on an end's CQ.
    pub fn completions(&mut self, which: usize) -> Vec<Completion> {
        let cq = self.end(which).cq;
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

    /// Runs until the network is idle (bounded).
    pub fn settle(&mut self) {
        self.net.run_idle(100_000).expect("simulation settles");
    }

    pub fn write_mem(&self, which: usize, off: u64, data: &[u8]) {
        let s = self.end(which);
        s.mr.write(s.iova() + off, data).unwrap();
    }

    pub fn read_mem(&self, which: usize, off: u64, len: usize) -> Vec<u8> {
        let s = self.end(which);
        let mut v = vec![0; len];
        s.mr.read(s.iova() + off, &mut v).unwrap();
        v
    }

    pub fn counter(&self, which: usize, c: Counter) -> u64 {
        self.net.nodes[which].engine.counters().get(c)
    }

    pub fn state(&self, which: usize) -> QpState {
        let s = self.end(which);
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

    /// Trace lines as "from->to OPCODE psn [syndrome] [verdict]" without times.
    pub fn untimed_trace(&self) -> Vec<String> {
        self.trace_lines()
            .iter()
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
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

/// (wr_id, status) of each completion, in order.
pub fn statuses(c: &[Completion]) -> Vec<(u64, WcStatus)> {
    c.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// The flags of a WR that completes (`signaled`), nothing else.
pub fn signaled() -> SendFlags {
    SendFlags {
        signaled: true,
        ..Default::default()
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

// ---- scenario helpers (tests/sim_rc.rs) ------------------------------------------------

/// One traced packet, parsed: what a protocol trace shows.
#[derive(Debug, Clone)]
pub struct Pkt {
    /// Virtual time the packet left its sender, in nanoseconds.
    pub at_ns: u64,
    pub from: usize,
    pub to: usize,
    pub opcode: roce_emu::wire::Opcode,
    pub psn: u32,
    pub ack_req: bool,
    pub syndrome: Option<roce_emu::wire::Syndrome>,
    pub msn: Option<u32>,
    pub reth: Option<roce_emu::wire::RethRepr>,
    pub atomic: Option<roce_emu::wire::AtomicEthRepr>,
    /// AtomicAckETH original value.
    pub orig: Option<u64>,
    pub imm: Option<u32>,
    /// IETH R_Key (SEND with invalidate).
    pub ieth: Option<u32>,
    pub payload_len: usize,
    pub verdict: roce_emu::sim::rule::Verdict,
}

impl Pkt {
    pub fn name(&self) -> &'static str {
        self.opcode.name()
    }
    pub fn dropped(&self) -> bool {
        self.verdict == roce_emu::sim::rule::Verdict::Drop
    }
    /// A compact trace line without time: "A>B RC_SEND_ONLY 0x100", with the syndrome of
    /// an RC_ACKNOWLEDGE ("ACK", "NAK seq", "NAK inv", "NAK acc", "NAK op", "RNR t=12")
    /// and a verdict other than Pass ("[Drop]", "[Duplicate]", ...).
    pub fn flow(&self) -> String {
        use roce_emu::wire::{NakCode, Syndrome};
        let dir = if self.from == 0 { "A>B" } else { "B>A" };
        let mut s = format!("{dir} {} {:#x}", self.name(), self.psn);
        if self.opcode == roce_emu::wire::opcode::op::RC_ACKNOWLEDGE {
            match self.syndrome {
                Some(Syndrome::Ack { .. }) => s += " ACK",
                Some(Syndrome::RnrNak { timer }) => s += &format!(" RNR t={timer}"),
                Some(Syndrome::Nak(c)) => {
                    s += match c {
                        NakCode::PsnSequenceError => " NAK seq",
                        NakCode::InvalidRequest => " NAK inv",
                        NakCode::RemoteAccessError => " NAK acc",
                        NakCode::RemoteOperationalError => " NAK op",
                        NakCode::InvalidRdRequest => " NAK inv-rd",
                    }
                }
                None => {}
            }
        }
        if self.verdict != roce_emu::sim::rule::Verdict::Pass {
            s += &format!(" [{:?}]", self.verdict);
        }
        s
    }
    /// `flow()` with time, header details and payload length (for printing).
    pub fn line(&self) -> String {
        let mut s = format!("{:>10.3} {}", self.at_ns as f64 / 1000.0, self.flow());
        if let Some(r) = self.reth {
            s += &format!(" reth(va={:#x} rkey={:#x} len={})", r.va, r.rkey, r.dma_len);
        }
        if let Some(a) = self.atomic {
            s += &format!(
                " atomic(va={:#x} swap_add={} cmp={})",
                a.va, a.swap_add, a.compare
            );
        }
        if let Some(o) = self.orig {
            s += &format!(" orig={o}");
        }
        if let Some(i) = self.imm {
            s += &format!(" imm={i:#x}");
        }
        if let Some(k) = self.ieth {
            s += &format!(" inv_rkey={k:#x}");
        }
        if self.ack_req {
            s += " A";
        }
        if self.payload_len > 0 {
            s += &format!(" +{}B", self.payload_len);
        }
        s
    }
}

/// Parses the BTH..ICRC bytes of a packet.
pub fn parse_pkt(bytes: &[u8]) -> RoceRepr {
    let p = RocePacket::new_checked(bytes).unwrap();
    RoceRepr::parse(&p).unwrap()
}

/// A rule that gives `verdict` to the matching packets whose 1-based index among the
/// matches is listed (`which` empty: every match); other packets pass.
pub struct Pick<F: FnMut(&RoceRepr) -> bool + Send> {
    pub pred: F,
    pub which: Vec<u64>,
    pub seen: u64,
    pub verdict: roce_emu::sim::rule::Verdict,
}

impl<F: FnMut(&RoceRepr) -> bool + Send> roce_emu::sim::rule::Rule for Pick<F> {
    fn on_packet(&mut self, _now: Instant, pkt: &[u8]) -> roce_emu::sim::rule::Verdict {
        let r = parse_pkt(pkt);
        if !(self.pred)(&r) {
            return roce_emu::sim::rule::Verdict::Pass;
        }
        self.seen += 1;
        if self.which.is_empty() || self.which.contains(&self.seen) {
            self.verdict
        } else {
            roce_emu::sim::rule::Verdict::Pass
        }
    }
}

/// `Pick` on one opcode.
pub fn pick(
    opcode: roce_emu::wire::Opcode,
    which: &[u64],
    verdict: roce_emu::sim::rule::Verdict,
) -> Pick<impl FnMut(&RoceRepr) -> bool + Send> {
    Pick {
        pred: move |r: &RoceRepr| r.bth.opcode == opcode,
        which: which.to_vec(),
        seen: 0,
        verdict,
    }
}

impl Pair {
    /// The trace, parsed.
    pub fn packets(&self) -> Vec<Pkt> {
        let tr = self.net.trace.as_ref().expect("tracing on");
        tr.iter()
            .map(|t| {
                let r = parse_pkt(&t.bytes);
                Pkt {
                    at_ns: t.at.as_nanos(),
                    from: t.from,
                    to: t.to,
                    opcode: r.bth.opcode,
                    psn: r.bth.psn.value(),
                    ack_req: r.bth.ack_req,
                    syndrome: r.aeth.map(|a| a.syndrome),
                    msn: r.aeth.map(|a| a.msn),
                    reth: r.reth,
                    atomic: r.atomic_eth,
                    orig: r.atomic_ack_eth.map(|a| a.orig),
                    imm: r.immdt.map(|i| i.imm),
                    ieth: r.ieth.map(|i| i.rkey),
                    payload_len: r.payload_len,
                    verdict: t.verdict,
                }
            })
            .collect()
    }

    /// The trace as `Pkt::flow` lines.
    pub fn flow(&self) -> Vec<String> {
        self.packets().iter().map(Pkt::flow).collect()
    }

    /// Prints the trace with header details and the non-zero counters of both ends.
    pub fn print_packets(&self) {
        for p in self.packets() {
            eprintln!("{}", p.line());
        }
        for (i, n) in self.net.nodes.iter().enumerate() {
            eprintln!("node {i} counters:\n{}", n.engine.counters());
        }
    }

    pub fn try_post_send(&mut self, which: usize, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let qpn = self.end(which).qpn;
        let now = self.net.now;
        self.engine(which).post_send(now, qpn, wr)
    }

    /// One SGE over our buffer, with these flags.
    pub fn try_send_flags(
        &mut self,
        which: usize,
        wr_id: u64,
        op: SendOp,
        off: u64,
        len: u32,
        flags: SendFlags,
    ) -> Result<(), VerbsError> {
        let sge = self.end(which).sge(off, len);
        self.try_post_send(
            which,
            &SendWr {
                wr_id,
                op,
                local: Local::Sges(&[sge]),
                flags,
            },
        )
    }

    pub fn send_flags(
        &mut self,
        which: usize,
        wr_id: u64,
        op: SendOp,
        off: u64,
        len: u32,
        flags: SendFlags,
    ) {
        self.try_send_flags(which, wr_id, op, off, len, flags)
            .unwrap()
    }

    pub fn try_post_recv_sges(
        &mut self,
        which: usize,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result<(), VerbsError> {
        let qpn = self.end(which).qpn;
        let now = self.net.now;
        self.engine(which)
            .post_recv(now, qpn, &RecvWr { wr_id, sges })
    }

    pub fn modify(&mut self, which: usize, attr: &QpAttr) -> Result<(), VerbsError> {
        let qpn = self.end(which).qpn;
        let now = self.net.now;
        self.engine(which).modify_qp(now, qpn, attr)
    }

    /// Every asynchronous event an end has raised since the last call.
    pub fn events(&mut self, which: usize) -> Vec<AsyncEvent> {
        let e = self.engine(which);
        std::iter::from_fn(|| e.poll_event()).collect()
    }

    /// Registers another region in the end's PD.
    pub fn reg_mr(&self, which: usize, iova: u64, len: u64, access: Access) -> Arc<MemoryRegion> {
        self.net.nodes[which]
            .engine
            .mem()
            .reg_mr(self.end(which).pd, iova, len, access)
            .unwrap()
    }

    /// Steps until `done` holds (bounded); panics if the network goes idle first.
    pub fn run_until(&mut self, mut done: impl FnMut(&Pair) -> bool) {
        for _ in 0..100_000 {
            if done(self) {
                return;
            }
            if !self.net.step() {
                assert!(done(self), "network idle before the condition held");
                return;
            }
        }
        panic!("condition not reached");
    }
}
