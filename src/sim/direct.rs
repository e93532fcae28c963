//! Two engines wired back to back through one reusable buffer: no queue, no loss, no
//! allocation per packet. For benchmarks, allocation tests and the in-memory demo; plus
//! the few calls that make a connected RC QP on an engine.

use crate::engine::{Datagram, Engine, Instant, Mtu, QpAttr, QpCap, QpInit, QpType, VerbsError};
use crate::mem::{Access, MemoryRegion, Pd};
use crate::wire::{Psn, ROCE_UDP_PORT};
use std::net::SocketAddr;
use std::sync::Arc;

/// A QP with its PD, CQ and one registered buffer.
#[derive(Debug, Clone)]
pub struct RcEnd {
    pub pd: Pd,
    pub cq: u32,
    pub qpn: u32,
    pub mr: Arc<MemoryRegion>,
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
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            mtu: Mtu::M4096,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
        }
    }
}

/// Creates a PD, a buffer of `len` bytes at `iova` with every right, a CQ and an RC QP.
pub fn rc_end(e: &mut Engine, iova: u64, len: u64, cap: QpCap) -> Result<RcEnd, VerbsError> {
    let mem = e.mem().clone();
    let pd = mem.alloc_pd();
    let mr = mem.reg_mr(pd, iova, len, Access::ALL)?;
    let cq = e.create_cq((cap.max_send_wr + cap.max_recv_wr).max(1))?;
    let qpn = e.create_qp(&QpInit {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        cap,
        sq_sig_all: false,
    })?;
    Ok(RcEnd { pd, cq, qpn, mr })
}

/// RESET -> INIT -> RTR -> RTS toward a peer QP.
pub fn connect(
    e: &mut Engine,
    qpn: u32,
    peer: std::net::IpAddr,
    peer_qpn: u32,
    my_psn: Psn,
    peer_psn: Psn,
    p: &RcParams,
) -> Result<(), VerbsError> {
    e.modify_qp(
        qpn,
        &QpAttr::init(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC),
    )?;
    e.modify_qp(
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
        qpn,
        &QpAttr::rts(my_psn, p.timeout, p.retry_cnt, p.rnr_retry, p.max_rd_atomic),
    )
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
                    data: &buf[..t.len],
                },
            );
            n += 1;
        }
        n
    }
}
