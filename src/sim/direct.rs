//! Two engines wired back to back through one reusable buffer: no queue, no loss, no
//! allocation per packet. For benchmarks, allocation tests and the in-memory demo; plus
//! the few calls that make a connected RC QP on an engine ([`rc_end`], [`connect`]): the
//! one bring-up of the simulator and the tests on it.

use crate::engine::qp::{
    DEFAULT_MIN_RNR_TIMER, DEFAULT_TIMEOUT, MAX_RETRY_CNT, RNR_RETRY_INFINITE,
};
use crate::engine::{
    AddressVector, Datagram, Engine, Instant, Mtu, QpAttr, QpCap, QpInit, QpState, QpType, Remote,
    VerbsError,
};
use crate::mem::{Access, Lkey, MemoryRegion, Pd, Rkey, Sge};
use crate::wire::{Psn, ROCE_UDP_PORT};
use std::net::SocketAddr;
use std::sync::Arc;

/// One end of an RC connection: a NIC's QP with its PD, CQ and one registered buffer.
/// The one name the simulator and its tests give "a NIC with a QP".
#[derive(Debug, Clone)]
pub struct RcEnd {
    pub pd: Pd,
    pub cq: u32,
    pub qpn: u32,
    pub mr: Arc<MemoryRegion>,
}

impl RcEnd {
    /// Where the buffer starts.
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
    /// The buffer at `off`, as the peer names it in a RETH or AtomicETH.
    pub fn remote(&self, off: u64) -> Remote {
        Remote {
            va: self.iova() + off,
            rkey: self.rkey().0,
        }
    }
}

/// What [`rc_end_with`] creates: the buffer, the QP's queues and its CQ.
#[derive(Debug, Clone, Copy)]
pub struct RcEndOpts {
    pub iova: u64,
    pub len: u64,
    /// Rights of the registered buffer.
    pub mr_access: Access,
    pub cap: QpCap,
    /// Depth of the one CQ both queues complete on.
    pub cq_depth: usize,
    /// Every send WR completes, signaled or not.
    pub sq_sig_all: bool,
    /// RC, or UC ([`uc_connect`] brings it up).
    pub qp_type: QpType,
}

impl RcEndOpts {
    /// A buffer with every right, and a CQ deep enough for both queues full.
    pub fn new(iova: u64, len: u64, cap: QpCap) -> RcEndOpts {
        RcEndOpts {
            iova,
            len,
            mr_access: Access::ALL,
            cap,
            cq_depth: (cap.max_send_wr + cap.max_recv_wr).max(1),
            sq_sig_all: false,
            qp_type: QpType::Rc,
        }
    }
}

/// Connection parameters for both directions.
#[derive(Debug, Clone, Copy)]
pub struct RcParams {
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    /// Remote operations the QP's responder allows (`QpAttr::init`).
    pub access: Access,
}

impl Default for RcParams {
    /// ibv_rc_pingpong's timers and retries, with every remote right.
    fn default() -> Self {
        RcParams {
            mtu: Mtu::M4096,
            timeout: DEFAULT_TIMEOUT,
            retry_cnt: MAX_RETRY_CNT,
            rnr_retry: RNR_RETRY_INFINITE,
            min_rnr_timer: DEFAULT_MIN_RNR_TIMER,
            max_rd_atomic: 16,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        }
    }
}

/// Creates a PD, a buffer of `len` bytes at `iova` with every right, a CQ and an RC QP.
pub fn rc_end(e: &mut Engine, iova: u64, len: u64, cap: QpCap) -> Result<RcEnd, VerbsError> {
    rc_end_with(e, &RcEndOpts::new(iova, len, cap))
}

/// Creates a PD, a buffer, a CQ and an RC QP as `o` says.
pub fn rc_end_with(e: &mut Engine, o: &RcEndOpts) -> Result<RcEnd, VerbsError> {
    let mem = e.mem().clone();
    let pd = mem.alloc_pd();
    let mr = mem.reg_mr(pd, o.iova, o.len, o.mr_access)?;
    let cq = e.create_cq(o.cq_depth)?;
    let qpn = e.create_qp(&QpInit {
        sq_sig_all: o.sq_sig_all,
        qp_type: o.qp_type,
        srq: None,
        ..QpInit::rc(pd, cq, o.cap)
    })?;
    Ok(RcEnd { pd, cq, qpn, mr })
}

/// RESET -> INIT -> RTR -> RTS toward a peer QP, at engine time zero: a set-up step before
/// any traffic (nothing it does depends on the time).
pub fn connect(
    e: &mut Engine,
    qpn: u32,
    peer: std::net::IpAddr,
    peer_qpn: u32,
    my_psn: Psn,
    peer_psn: Psn,
    p: &RcParams,
) -> Result<(), VerbsError> {
    e.modify_qp(Instant::ZERO, qpn, &QpAttr::init(p.access))?;
    e.modify_qp(
        Instant::ZERO,
        qpn,
        &QpAttr::rtr(
            peer,
            p.mtu,
            peer_qpn,
            peer_psn,
            p.max_rd_atomic,
            p.min_rnr_timer,
        ),
    )?;
    e.modify_qp(
        Instant::ZERO,
        qpn,
        &QpAttr::rts(my_psn, p.timeout, p.retry_cnt, p.rnr_retry, p.max_rd_atomic),
    )
}

/// A UC QP's RESET -> INIT -> RTR -> RTS toward a peer QP, at engine time zero, with
/// exactly the attributes UC takes (ibv_uc_pingpong's masks): the path, the peer's QPN and
/// both PSNs; no timers, retries or READ/atomic resources.
pub fn uc_connect(
    e: &mut Engine,
    qpn: u32,
    peer: std::net::IpAddr,
    peer_qpn: u32,
    (my_psn, peer_psn): (Psn, Psn),
    mtu: Mtu,
    access: Access,
) -> Result<(), VerbsError> {
    e.modify_qp(Instant::ZERO, qpn, &QpAttr::init(access))?;
    let rtr = QpAttr {
        state: Some(QpState::Rtr),
        av: Some(AddressVector { dest_ip: peer }),
        path_mtu: Some(mtu),
        dest_qpn: Some(peer_qpn),
        rq_psn: Some(peer_psn),
        ..Default::default()
    };
    e.modify_qp(Instant::ZERO, qpn, &rtr)?;
    let rts = QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(my_psn),
        ..Default::default()
    };
    e.modify_qp(Instant::ZERO, qpn, &rts)
}

/// A UD QP's RESET -> INIT -> RTR -> RTS at engine time zero with Q_Key `qkey`: the
/// attributes UD takes (ibv_ud_pingpong's masks: P_Key index, port and Q_Key; nothing for
/// RTR; the send PSN for RTS). QP1 takes the GSI Q_Key whatever `qkey` says.
pub fn ud_ready(e: &mut Engine, qpn: u32, qkey: u32, sq_psn: Psn) -> Result<(), VerbsError> {
    let init = QpAttr {
        state: Some(QpState::Init),
        pkey_index: Some(0),
        port: Some(1),
        qkey: Some(qkey),
        ..Default::default()
    };
    e.modify_qp(Instant::ZERO, qpn, &init)?;
    let rtr = QpAttr {
        state: Some(QpState::Rtr),
        ..Default::default()
    };
    e.modify_qp(Instant::ZERO, qpn, &rtr)?;
    let rts = QpAttr {
        state: Some(QpState::Rts),
        sq_psn: Some(sq_psn),
        ..Default::default()
    };
    e.modify_qp(Instant::ZERO, qpn, &rts)
}

/// Two engines back to back.
pub struct Direct {
    pub a: Engine,
    pub b: Engine,
    buf: Vec<u8>,
}

impl Direct {
    pub fn new(a: Engine, b: Engine) -> Direct {
        Direct {
            a,
            b,
            buf: vec![0; super::MAX_PACKET],
        }
    }

    /// Moves packets both ways until neither engine has anything to send; returns how
    /// many. Every packet carries the IPv4 ID the sender used, so ICRCs are checked.
    pub fn pump(&mut self, now: Instant) -> usize {
        let mut n = 0;
        loop {
            let before = n;
            n += Self::one_way(&mut self.a, &mut self.b, &mut self.buf, now);
            n += Self::one_way(&mut self.b, &mut self.a, &mut self.buf, now);
            if n == before {
                return n;
            }
        }
    }

    fn one_way(from: &mut Engine, to: &mut Engine, buf: &mut [u8], now: Instant) -> usize {
        let mut n = 0;
        let id = from.config().tx_ipv4_id;
        let dst = SocketAddr::new(to.config().local_ip, ROCE_UDP_PORT);
        while let Some(t) = from.poll_transmit(now, buf) {
            to.handle_datagram(
                now,
                Datagram {
                    src: t.src,
                    dst,
                    ipv4_id: Some(id),
                    ecn: t.ecn,
                    data: &buf[..t.len],
                },
            );
            n += 1;
        }
        n
    }
}
