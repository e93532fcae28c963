//! An rdma_cm id (`struct rdma_id_private` of the kernel's `cma.c`) and the IB CM
//! connection it drives (`struct cm_id_private` of `cm.c`): one [`Id`] holds both, since
//! every rdma_cm connection has exactly one IB CM id and the kernel frees the latter with
//! the former.

use super::ucma::{Av, ConnParam, IdNum, Path, PortSpace, QpType};
use super::{MadPeer, Owner};
use crate::engine::Instant;
use std::net::SocketAddr;

/// `enum rdma_cm_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaState {
    Idle,
    AddrQuery,
    AddrResolved,
    RouteResolved,
    Connect,
    Disconnect,
    AddrBound,
    Listen,
}

/// `enum ib_cm_state` (IBA 12.9.6's connection states as the kernel names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmState {
    Idle,
    ReqSent,
    /// Never entered: ucma leaves every accept to the program, so rdma_cm's delayed MRA
    /// takes a received REQ straight on to `MraReqSent`; kept for the kernel's names.
    #[allow(dead_code)]
    ReqRcvd,
    MraReqSent,
    MraReqRcvd,
    RepSent,
    RepRcvd,
    MraRepSent,
    MraRepRcvd,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

/// A MAD the CM retransmits until answered (`cm_id_priv->msg` with the MAD layer's
/// timeout and retries).
#[derive(Debug, Clone)]
pub struct Outstanding {
    pub bytes: [u8; 256],
    pub attr_id: u16,
    /// The state it was sent in (`msg->context[1]`): a timeout in another state is stale.
    pub state: CmState,
    pub timeout_ms: u64,
    pub retries_left: u8,
    pub deadline: Instant,
}

/// The IB CM side of a connection (`struct cm_id_private`).
#[derive(Debug, Clone)]
pub struct Conn {
    pub state: CmState,
    pub local_id: u32,
    pub remote_id: u32,
    pub remote_guid: u64,
    /// The TID of the exchange (the REQ's, then a DREQ's).
    pub tid: u64,
    pub peer: MadPeer,
    pub qp_type: QpType,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub timeout_ms: u64,
    pub max_cm_retries: u8,
    /// IB MTU code.
    pub path_mtu: u8,
    pub pkey: u16,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub service_timeout: u8,
    /// The path to the peer (`cm_id_priv->av.ah_attr`).
    pub av: Av,
    /// `av.timeout`: the QP's Local ACK Timeout and the timewait's length.
    pub av_timeout: u8,
    pub msg: Option<Outstanding>,
    /// Private data of the last RTU/MRA/DREP, for their repetition to a duplicate.
    pub private_data: Vec<u8>,
    pub timewait_until: Option<Instant>,
    /// Listed in the remote-ID table (duplicate REQ/REP detection).
    pub in_remote_table: bool,
}

impl Conn {
    pub fn new(peer: MadPeer, local_id: u32, qp_type: QpType) -> Conn {
        Conn {
            state: CmState::Idle,
            local_id,
            remote_id: 0,
            remote_guid: 0,
            tid: 0,
            peer,
            qp_type,
            local_qpn: 0,
            remote_qpn: 0,
            sq_psn: 0,
            rq_psn: 0,
            timeout_ms: 0,
            max_cm_retries: 0,
            path_mtu: 0,
            pkey: super::timers::DEFAULT_PKEY,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            service_timeout: 0,
            av: Av {
                dgid: [0; 16],
                sgid_index: 0,
                flow_label: 0,
                hop_limit: 0,
                traffic_class: 0,
                sl: 0,
                port_num: 1,
            },
            av_timeout: 0,
            msg: None,
            private_data: Vec::new(),
            timewait_until: None,
            in_remote_table: false,
        }
    }
}

/// One rdma_cm id.
#[derive(Debug, Clone)]
pub struct Id {
    pub num: IdNum,
    pub owner: Owner,
    pub ps: PortSpace,
    pub qp_type: QpType,
    pub state: RdmaState,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// In the port table under `(ps, port)`.
    pub bound: Option<u16>,
    /// Bound to (or resolved onto) this device: QUERY gives its GUID, INIT_QP_ATTR works.
    pub has_device: bool,
    pub reuseaddr: bool,
    pub afonly: bool,
    pub tos: Option<u8>,
    pub ack_timeout: Option<u8>,
    /// From the address resolution (the route's TTL / hop limit).
    pub hop_limit: u8,
    pub path: Option<Path>,
    /// `id_priv->seq_num`: the receive PSN of the id's QP (REQ/REP Starting PSN).
    pub seq_num: u32,
    pub qkey: Option<u32>,
    pub backlog: u32,
    /// A connect request's id, while its listener still counts it against the backlog.
    pub parent: Option<IdNum>,
    pub resolve_deadline: Option<Instant>,
    /// The UD peer's parameters and AV once a SIDR_REP came (INIT_QP_ATTR, QUERY).
    pub ud_peer: Option<(ConnParam, Av)>,
    pub conn: Option<Conn>,
}

impl Id {
    pub fn new(num: IdNum, owner: Owner, ps: PortSpace, qp_type: QpType, seq_num: u32) -> Id {
        Id {
            num,
            owner,
            ps,
            qp_type,
            state: RdmaState::Idle,
            src: None,
            dst: None,
            bound: None,
            has_device: false,
            reuseaddr: false,
            afonly: false,
            tos: None,
            ack_timeout: None,
            hop_limit: 64,
            path: None,
            seq_num,
            qkey: None,
            backlog: 0,
            parent: None,
            resolve_deadline: None,
            ud_peer: None,
            conn: None,
        }
    }

    /// The IB CM state, `Idle` without a connection.
    pub fn cm_state(&self) -> CmState {
        self.conn.as_ref().map_or(CmState::Idle, |c| c.state)
    }
}
