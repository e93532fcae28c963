//! Verbs NICs for the integration tests: a context with a PD, one region and one CQ
//! ([`Nic`]), its RC QPs ([`Ep`]), connected to each other with `verbs::connect_rc`
//! ([`connect`]), posting and polling with bounded waits, and SEND, WRITE and READ with
//! every byte checked ([`exchange`]). [`End`] is a NIC with one QP.

use roce_emu::backend::PortStats;
use roce_emu::engine::{
    Completion, Local, Mtu, QpAttr, QpCap, QpInit, RecvWr, Remote, SendFlags, SendOp, SendWr,
    WcOpcode, WcStatus,
};
use roce_emu::mem::{Access, MemoryRegion, Pd, Sge};
use roce_emu::verbs::{self, CompChannel, Context, Device};
use roce_emu::verbs::{DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE};
use roce_emu::wire::Psn;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where each NIC's region starts, and its length.
pub const IOVA: u64 = 0x1000_0000;
pub const LEN: u64 = 1 << 19;
pub const WAIT: Duration = Duration::from_secs(10);
/// Offsets in each NIC's region that [`exchange`] uses.
pub const SEND_SRC: u64 = 0;
pub const RECV_DST: u64 = 0x1000;
pub const WRITE_SRC: u64 = 0x1_0000;
pub const WRITE_DST: u64 = 0x2_0000;
pub const READ_SRC: u64 = 0x3_0000;
pub const READ_DST: u64 = 0x4_0000;
/// Sizes: a SEND of a few packets, and a WRITE and READ long enough to leave as GSO
/// trains and arrive coalesced (GRO) on loopback.
pub const SEND_LEN: u32 = 3000;
pub const WRITE_LEN: u32 = 40_000;
pub const READ_LEN: u32 = 20_000;

/// A context with a PD, a region of `LEN` bytes at `IOVA` (every right) and a CQ.
pub struct Nic {
    pub ctx: Context,
    pub pd: Pd,
    pub mr: Arc<MemoryRegion>,
    pub cq: u32,
    /// The context's address (`Context::local_ip`).
    pub ip: IpAddr,
}

/// One RC QP of a NIC.
#[derive(Clone, Copy)]
pub struct Ep<'a> {
    pub nic: &'a Nic,
    pub qpn: u32,
}

/// What a peer needs to reach a QP (what rc_pingpong exchanges over TCP).
#[derive(Debug, Clone, Copy)]
pub struct Info {
    pub ip: IpAddr,
    pub qpn: u32,
    pub rkey: u32,
}

impl Nic {
    /// `ctx` with its PD, region and CQ; the CQ's events go to `channel` when given.
    pub fn new(ctx: Context, channel: Option<&CompChannel>) -> Nic {
        let pd = ctx.alloc_pd();
        let mr = ctx.reg_mr(pd, IOVA, LEN, Access::ALL).unwrap();
        let cq = ctx.create_cq(256, channel).unwrap();
        let ip = ctx.local_ip();
        Nic {
            ctx,
            pd,
            mr,
            cq,
            ip,
        }
    }

    /// A NIC on a UDP port at `addr` (shared when another context holds the address).
    pub fn open(addr: &str) -> Nic {
        let ip: IpAddr = addr.parse().unwrap();
        Nic::new(Device::new(ip).open().expect("open the NIC"), None)
    }

    /// A new RC QP on the CQ, every send signalled.
    pub fn qp(&self) -> Ep<'_> {
        let cap = QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let qpn = self
            .ctx
            .create_qp(&QpInit {
                sq_sig_all: true,
                srq: None,
                ..QpInit::rc(self.pd, self.cq, cap)
            })
            .unwrap();
        Ep { nic: self, qpn }
    }

    pub fn stats(&self) -> PortStats {
        self.ctx.port_stats()
    }

    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: IOVA + off,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    /// The next completion of the CQ, whatever it is (polling drives the NIC), within
    /// `WAIT`.
    pub fn poll_one(&self) -> Completion {
        let deadline = Instant::now() + WAIT;
        let mut c = [Completion::default()];
        loop {
            if self.ctx.poll_cq(self.cq, &mut c).unwrap() == 1 {
                return c[0];
            }
            assert!(
                Instant::now() < deadline,
                "{}: no completion within {WAIT:?}; port {:?}",
                self.ip,
                self.stats()
            );
            self.ctx.wait(Duration::from_millis(1)).unwrap();
        }
    }

    /// `len` bytes of the region at offset `off`.
    pub fn bytes(&self, off: u64, len: u32) -> Vec<u8> {
        let mut v = vec![0; len as usize];
        self.mr.read(IOVA + off, &mut v).unwrap();
        v
    }
}

impl Ep<'_> {
    pub fn info(&self) -> Info {
        Info {
            ip: self.nic.ip,
            qpn: self.qpn,
            rkey: self.nic.mr.rkey().0,
        }
    }

    /// To RTS toward `peer` (MTU 1024, every remote right), sending from PSN `psn` and
    /// expecting the peer's from `peer_psn`.
    pub fn connect_psn(&self, peer: Info, psn: u32, peer_psn: u32) {
        let remote = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        let rtr = QpAttr::rtr(
            peer.ip,
            Mtu::M1024,
            peer.qpn,
            Psn::new(peer_psn),
            4,
            DEFAULT_MIN_RNR_TIMER,
        );
        let rts = QpAttr::rts(
            Psn::new(psn),
            DEFAULT_TIMEOUT,
            MAX_RETRY_CNT,
            RNR_RETRY_INFINITE,
            4,
        );
        verbs::connect_rc(&self.nic.ctx, self.qpn, remote, &rtr, &rts).unwrap();
    }

    /// To RTS toward `peer`: both sides start at PSN 0x100 (the starting PSN is not
    /// exchanged).
    pub fn connect(&self, peer: Info) {
        self.connect_psn(peer, 0x100, 0x100);
    }

    /// Posts a signalled send of `len` bytes at offset `off` as work request `wr_id`.
    pub fn post_wr(
        &self,
        wr_id: u64,
        op: SendOp,
        off: u64,
        len: u32,
        solicited: bool,
    ) -> Result<(), verbs::Error> {
        let sge = [self.nic.sge(off, len)];
        let wr = SendWr {
            wr_id,
            op,
            local: Local::Sges(&sge),
            flags: SendFlags {
                signaled: true,
                solicited,
                ..Default::default()
            },
        };
        self.nic.ctx.post_send(self.qpn, &wr)
    }

    /// Posts a send whose work request ID is the QPN.
    pub fn post(&self, op: SendOp, off: u64, len: u32) -> Result<(), verbs::Error> {
        self.post_wr(u64::from(self.qpn), op, off, len, false)
    }

    /// Posts a receive of `len` bytes at offset `off` as work request `wr_id`.
    pub fn post_recv_wr(&self, wr_id: u64, off: u64, len: u32) {
        let sge = [self.nic.sge(off, len)];
        let wr = RecvWr { wr_id, sges: &sge };
        self.nic.ctx.post_recv(self.qpn, &wr).unwrap();
    }

    /// Posts a receive into `RECV_DST` whose work request ID is the QPN.
    pub fn post_recv(&self) {
        self.post_recv_wr(u64::from(self.qpn), RECV_DST, 4096);
    }

    /// The next completion of the NIC, which must be a success of this QP's (a work
    /// request `post` or `post_recv` made).
    pub fn poll_one(&self) -> Completion {
        let c = self.nic.poll_one();
        assert_eq!(c.wr_id, u64::from(self.qpn), "QP {:#x}: {c:?}", self.qpn);
        assert_eq!(c.status, WcStatus::Success, "QP {:#x}: {c:?}", self.qpn);
        c
    }

    pub fn bytes(&self, off: u64, len: u32) -> Vec<u8> {
        self.nic.bytes(off, len)
    }

    /// WRITEs `data` from `WRITE_SRC` to the peer's `WRITE_DST`.
    pub fn write(&self, peer: Info, data: &[u8]) {
        self.nic.mr.write(IOVA + WRITE_SRC, data).unwrap();
        let remote = Remote {
            va: IOVA + WRITE_DST,
            rkey: peer.rkey,
        };
        self.post(SendOp::Write { remote }, WRITE_SRC, data.len() as u32)
            .unwrap();
        assert_eq!(self.poll_one().opcode, WcOpcode::RdmaWrite);
    }

    /// READs `len` bytes of the peer's `READ_SRC` and returns them.
    pub fn read(&self, peer: Info, len: u32) -> Vec<u8> {
        let remote = Remote {
            va: IOVA + READ_SRC,
            rkey: peer.rkey,
        };
        self.post(SendOp::Read { remote }, READ_DST, len).unwrap();
        assert_eq!(self.poll_one().opcode, WcOpcode::RdmaRead);
        self.bytes(READ_DST, len)
    }

    /// SENDs `data` from `SEND_SRC`.
    pub fn send(&self, data: &[u8]) {
        self.nic.mr.write(IOVA + SEND_SRC, data).unwrap();
        self.post(SendOp::Send, SEND_SRC, data.len() as u32)
            .unwrap();
        assert_eq!(self.poll_one().opcode, WcOpcode::Send);
    }

    /// Waits for a SEND (a receive posted earlier) and returns its bytes.
    pub fn recv(&self) -> Vec<u8> {
        let c = self.poll_one();
        assert_eq!(c.opcode, WcOpcode::Recv);
        self.bytes(RECV_DST, c.byte_len)
    }
}

/// Bytes of a test message: `seed` makes each different.
pub fn pattern(seed: u8, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 8) as u8)
        .collect()
}

/// Two QPs to RTS toward each other, both starting at PSN 0x100.
pub fn connect(a: Ep<'_>, b: Ep<'_>) {
    a.connect(b.info());
    b.connect(a.info());
}

/// Two QPs to RTS toward each other, `a` sending from PSN `psns.0` and `b` from `psns.1`.
pub fn connect_psns(a: Ep<'_>, b: Ep<'_>, psns: (u32, u32)) {
    a.connect_psn(b.info(), psns.0, psns.1);
    b.connect_psn(a.info(), psns.1, psns.0);
}

/// SEND, WRITE and READ each way between two connected QPs, every byte checked.
pub fn exchange(a: Ep<'_>, b: Ep<'_>, seed: u8) {
    for (x, y, s) in [(a, b, seed), (b, a, seed.wrapping_add(100))] {
        y.post_recv();
        let data = pattern(s, SEND_LEN);
        x.send(&data);
        assert_eq!(y.recv(), data, "SEND {:#x} -> {:#x}", x.qpn, y.qpn);
        let data = pattern(s ^ 0x55, WRITE_LEN);
        x.write(y.info(), &data);
        assert_eq!(y.bytes(WRITE_DST, WRITE_LEN), data, "WRITE {:#x}", x.qpn);
        let data = pattern(s ^ 0xaa, READ_LEN);
        y.nic.mr.write(IOVA + READ_SRC, &data).unwrap();
        assert_eq!(x.read(y.info(), READ_LEN), data, "READ {:#x}", x.qpn);
    }
}

/// A NIC with one RC QP (for tests that need no more); it derefs to its [`Nic`].
pub struct End {
    pub nic: Nic,
    pub qpn: u32,
}

impl End {
    pub fn new(nic: Nic) -> End {
        let qpn = nic.qp().qpn;
        End { nic, qpn }
    }

    pub fn ep(&self) -> Ep<'_> {
        Ep {
            nic: &self.nic,
            qpn: self.qpn,
        }
    }
}

impl std::ops::Deref for End {
    type Target = Nic;

    fn deref(&self) -> &Nic {
        &self.nic
    }
}
