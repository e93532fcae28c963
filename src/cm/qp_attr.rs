//! INIT_QP_ATTR (`rdma_init_qp_attr` over `cm_init_qp_init_attr`/`_rtr_`/`_rts_` of the
//! kernel's `cm.c`): the attributes librdmacm hands to `ibv_modify_qp` for each state.

use super::cmd::EINVAL;
use super::id::CmState;
use super::timers::RDMA_UDP_QKEY;
use super::ucma::{IdNum, QpAttrs, QpState, QpType};
use super::Cm;

/// `enum ibv_qp_attr_mask` bits.
pub mod mask {
    pub const STATE: u32 = 1 << 0;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const QKEY: u32 = 1 << 6;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `enum ibv_access_flags` bits.
pub mod access {
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
}

impl Cm {
    pub(super) fn init_qp_attr(
        &mut self,
        id: IdNum,
        st: QpState,
    ) -> Result<QpAttrs, (i32, String)> {
        let i = self.ids.get_mut(&id).expect("checked");
        if !i.has_device {
            return Err((EINVAL, "init_qp_attr: the id has no device yet".into()));
        }
        let mut a = QpAttrs {
            qp_state: match st {
                QpState::Init => 1,
                QpState::Rtr => 2,
                QpState::Rts => 3,
            },
            port_num: 1,
            ..QpAttrs::default()
        };
        match i.conn.as_ref().filter(|_| i.qp_type != QpType::Ud) {
            None => {
                // cma_ib_init_qp_attr: no IB CM id yet, or UD.
                a.mask = mask::STATE | mask::PKEY_INDEX | mask::PORT;
                if i.qp_type == QpType::Ud {
                    a.qkey = *i.qkey.get_or_insert(RDMA_UDP_QKEY);
                    a.mask |= mask::QKEY;
                } else {
                    a.mask |= mask::ACCESS_FLAGS;
                }
            }
            Some(c) => {
                use CmState::*;
                let live = matches!(
                    c.state,
                    ReqRcvd
                        | MraReqSent
                        | RepRcvd
                        | MraRepSent
                        | RepSent
                        | MraRepRcvd
                        | Established
                );
                match st {
                    QpState::Init if live || matches!(c.state, ReqSent | MraReqRcvd) => {
                        a.mask = mask::STATE | mask::ACCESS_FLAGS | mask::PKEY_INDEX | mask::PORT;
                        a.qp_access_flags = access::REMOTE_WRITE;
                        if c.responder_resources > 0 {
                            a.qp_access_flags |= access::REMOTE_READ | access::REMOTE_ATOMIC;
                        }
                    }
                    QpState::Rtr if live => {
                        a.mask =
                            mask::STATE | mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN;
                        a.ah = Some(c.av);
                        a.path_mtu = u32::from(c.path_mtu);
                        a.dest_qp_num = c.remote_qpn;
                        a.rq_psn = c.rq_psn;
                        if c.qp_type == QpType::Rc {
                            a.mask |= mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
                            a.max_dest_rd_atomic = c.responder_resources;
                            a.min_rnr_timer = 0;
                        }
                    }
                    QpState::Rts if live => {
                        a.mask = mask::STATE | mask::SQ_PSN;
                        a.sq_psn = c.sq_psn;
                        if c.qp_type == QpType::Rc {
                            a.mask |= mask::RETRY_CNT
                                | mask::RNR_RETRY
                                | mask::MAX_QP_RD_ATOMIC
                                | mask::TIMEOUT;
                            a.retry_cnt = c.retry_count;
                            a.rnr_retry = c.rnr_retry_count;
                            a.max_rd_atomic = c.initiator_depth;
                            a.timeout = c.av_timeout;
                        }
                    }
                    _ => {
                        return Err((
                            EINVAL,
                            format!(
                                "init_qp_attr: {st:?} not available in CM state {:?}",
                                c.state
                            ),
                        ))
                    }
                }
            }
        }
        if st == QpState::Rtr {
            // rdma_init_qp_attr: the receive PSN is the id's, as its REQ/REP said.
            a.rq_psn = i.seq_num;
        }
        if a.mask & mask::TIMEOUT != 0 {
            if let Some(t) = i.ack_timeout {
                a.timeout = t;
            }
        }
        Ok(a)
    }
}
