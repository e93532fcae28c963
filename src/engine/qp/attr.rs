//! QP states and attributes, and which attributes each transition requires or accepts
//! (IBA 10.3.1 and 11.2.5.2 "Modify QP"; the RC rows of the kernel's `qp_state_table` that
//! `ibv_modify_qp` is checked against).

pub use crate::engine::state::QpState;
use crate::mem::Access;
use crate::wire::Psn;
use std::net::IpAddr;

/// Path MTU (ibv_mtu): the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    M256 = 1,
    M512 = 2,
    M1024 = 3,
    M2048 = 4,
    M4096 = 5,
}

impl Mtu {
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
    /// From the ibv_mtu enum value (1..=5), as perftest exchanges it.
    pub const fn from_ibv(v: u8) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }
    /// From a byte count (256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(v: u32) -> Option<Mtu> {
        Some(match v {
            256 => Mtu::M256,
            512 => Mtu::M512,
            1024 => Mtu::M1024,
            2048 => Mtu::M2048,
            4096 => Mtu::M4096,
            _ => return None,
        })
    }
}

/// Where the connected peer is (the RoCEv2 part of an address handle: the destination
/// GID as an IP address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressVector {
    pub dest_ip: IpAddr,
}

/// Attributes for `modify_qp`. `None` = not given. `state: None` keeps the current state
/// (e.g. RTS -> RTS to change the RNR timer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    pub state: Option<QpState>,
    /// Remote operations the responder allows: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC.
    pub access: Option<Access>,
    pub pkey_index: Option<u16>,
    pub port: Option<u8>,
    pub path_mtu: Option<Mtu>,
    pub av: Option<AddressVector>,
    pub dest_qpn: Option<u32>,
    /// Expected PSN of the first request the responder receives.
    pub rq_psn: Option<Psn>,
    /// PSN of the first request the requester sends.
    pub sq_psn: Option<Psn>,
    /// Incoming READ/atomic requests the responder keeps in flight (its replay ring).
    pub max_dest_rd_atomic: Option<u8>,
    /// Outgoing READ/atomic requests the requester keeps in flight.
    pub max_rd_atomic: Option<u8>,
    /// 5-bit RNR NAK timer code the responder sends (IBA Table 45).
    pub min_rnr_timer: Option<u8>,
    /// Local ACK timeout code: 4.096 µs * 2^timeout, 0 = infinite.
    pub timeout: Option<u8>,
    /// Transport retries, 0..=7.
    pub retry_cnt: Option<u8>,
    /// RNR retries, 0..=7; 7 means retry forever (IBA 9.7.5.2.8).
    pub rnr_retry: Option<u8>,
    /// Raise `SqDrained` when SQD is reached with the send queue empty.
    pub sq_draining_notify: Option<bool>,
}

/// Attribute names, as ibverbs' IBV_QP_* mask bits call them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    AccessFlags,
    PkeyIndex,
    Port,
    PathMtu,
    Av,
    DestQpn,
    RqPsn,
    SqPsn,
    MaxDestRdAtomic,
    MaxQpRdAtomic,
    MinRnrTimer,
    Timeout,
    RetryCnt,
    RnrRetry,
    EnSqdAsyncNotify,
}

impl Attr {
    pub const fn name(self) -> &'static str {
        match self {
            Attr::AccessFlags => "IBV_QP_ACCESS_FLAGS",
            Attr::PkeyIndex => "IBV_QP_PKEY_INDEX",
            Attr::Port => "IBV_QP_PORT",
            Attr::PathMtu => "IBV_QP_PATH_MTU",
            Attr::Av => "IBV_QP_AV",
            Attr::DestQpn => "IBV_QP_DEST_QPN",
            Attr::RqPsn => "IBV_QP_RQ_PSN",
            Attr::SqPsn => "IBV_QP_SQ_PSN",
            Attr::MaxDestRdAtomic => "IBV_QP_MAX_DEST_RD_ATOMIC",
            Attr::MaxQpRdAtomic => "IBV_QP_MAX_QP_RD_ATOMIC",
            Attr::MinRnrTimer => "IBV_QP_MIN_RNR_TIMER",
            Attr::Timeout => "IBV_QP_TIMEOUT",
            Attr::RetryCnt => "IBV_QP_RETRY_CNT",
            Attr::RnrRetry => "IBV_QP_RNR_RETRY",
            Attr::EnSqdAsyncNotify => "IBV_QP_EN_SQD_ASYNC_NOTIFY",
        }
    }
}

impl QpAttr {
    /// RESET -> INIT: P_Key index 0 on port 1, with the remote rights the responder allows.
    pub fn init(access: Access) -> QpAttr {
        QpAttr {
            state: Some(QpState::Init),
            pkey_index: Some(0),
            port: Some(1),
            access: Some(access),
            ..Default::default()
        }
    }

    /// INIT -> RTR toward the peer QP `dest_qpn` at `peer`, whose first request will carry
    /// `rq_psn`: the attributes an RC QP must be given (IBA 11.2.5.2).
    pub fn rtr(
        peer: IpAddr,
        path_mtu: Mtu,
        dest_qpn: u32,
        rq_psn: Psn,
        max_dest_rd_atomic: u8,
        min_rnr_timer: u8,
    ) -> QpAttr {
        QpAttr {
            state: Some(QpState::Rtr),
            av: Some(AddressVector { dest_ip: peer }),
            path_mtu: Some(path_mtu),
            dest_qpn: Some(dest_qpn),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(max_dest_rd_atomic),
            min_rnr_timer: Some(min_rnr_timer),
            ..Default::default()
        }
    }

    /// RTR -> RTS: our first PSN and the requester's timers and limits.
    pub fn rts(
        sq_psn: Psn,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        max_rd_atomic: u8,
    ) -> QpAttr {
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(timeout),
            retry_cnt: Some(retry_cnt),
            rnr_retry: Some(rnr_retry),
            max_rd_atomic: Some(max_rd_atomic),
            ..Default::default()
        }
    }

    /// The attributes given, in a fixed order.
    pub fn given(&self) -> impl Iterator<Item = Attr> + '_ {
        [
            (self.access.is_some(), Attr::AccessFlags),
            (self.pkey_index.is_some(), Attr::PkeyIndex),
            (self.port.is_some(), Attr::Port),
            (self.path_mtu.is_some(), Attr::PathMtu),
            (self.av.is_some(), Attr::Av),
            (self.dest_qpn.is_some(), Attr::DestQpn),
            (self.rq_psn.is_some(), Attr::RqPsn),
            (self.sq_psn.is_some(), Attr::SqPsn),
            (self.max_dest_rd_atomic.is_some(), Attr::MaxDestRdAtomic),
            (self.max_rd_atomic.is_some(), Attr::MaxQpRdAtomic),
            (self.min_rnr_timer.is_some(), Attr::MinRnrTimer),
            (self.timeout.is_some(), Attr::Timeout),
            (self.retry_cnt.is_some(), Attr::RetryCnt),
            (self.rnr_retry.is_some(), Attr::RnrRetry),
            (self.sq_draining_notify.is_some(), Attr::EnSqdAsyncNotify),
        ]
        .into_iter()
        .filter_map(|(on, a)| on.then_some(a))
    }
}

/// Required and optional attributes of an RC transition, or `None` if the transition does
/// not exist. Any state may go to RESET or ERR with no attributes.
pub fn rc_rules(from: QpState, to: QpState) -> Option<(&'static [Attr], &'static [Attr])> {
    use Attr::*;
    use QpState::*;
    const NONE: &[Attr] = &[];
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (NONE, NONE),
        (Reset, Init) => (&[PkeyIndex, Port, AccessFlags], NONE),
        (Init, Init) => (NONE, &[PkeyIndex, Port, AccessFlags]),
        (Init, Rtr) => (
            &[Av, PathMtu, DestQpn, RqPsn, MaxDestRdAtomic, MinRnrTimer],
            &[AccessFlags, PkeyIndex],
        ),
        (Rtr, Rts) => (
            &[Timeout, RetryCnt, RnrRetry, SqPsn, MaxQpRdAtomic],
            &[AccessFlags, MinRnrTimer],
        ),
        (Rts, Rts) => (NONE, &[AccessFlags, MinRnrTimer]),
        (Rts, Sqd) => (NONE, &[EnSqdAsyncNotify]),
        (Sqd, Rts) => (NONE, &[AccessFlags, MinRnrTimer]),
        (Sqd, Sqd) => (
            NONE,
            &[
                PkeyIndex,
                Av,
                Timeout,
                RetryCnt,
                RnrRetry,
                MaxQpRdAtomic,
                MaxDestRdAtomic,
                AccessFlags,
                MinRnrTimer,
            ],
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn mtu_encodings() {
        assert_eq!(Mtu::M1024.bytes(), 1024);
        assert_eq!(Mtu::M4096.bytes(), 4096);
        assert_eq!(Mtu::from_ibv(3), Some(Mtu::M1024));
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::M2048));
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu::from_ibv(6), None);
    }

    #[test]
    fn transition_table() {
        use QpState::*;
        assert!(rc_rules(Reset, Rts).is_none());
        assert!(rc_rules(Init, Rts).is_none());
        assert!(rc_rules(Err, Rts).is_none());
        assert!(rc_rules(Rts, Rtr).is_none());
        assert_eq!(rc_rules(Rts, Err), Some((&[][..], &[][..])));
        let (req, _) = rc_rules(Init, Rtr).unwrap();
        assert!(req.contains(&Attr::RqPsn) && req.contains(&Attr::DestQpn));
        let a = QpAttr {
            sq_psn: Some(Psn::new(1)),
            timeout: Some(14),
            ..Default::default()
        };
        assert_eq!(
            a.given().collect::<Vec<_>>(),
            vec![Attr::SqPsn, Attr::Timeout]
        );
    }
}
