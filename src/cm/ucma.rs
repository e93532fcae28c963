//! The rdma_cm commands and events between a program's librdmacm and the connection
//! manager that owns the device's QP1 (in the daemon): a mirror of the kernel's ucma
//! command set (`include/uapi/rdma/rdma_user_cm.h`, rdma-core `librdmacm/rdma_cma_abi.h`),
//! one command per message, so librdmacm's semantics (events, ack, destroy while events
//! are pending, migrate) stay the kernel's.
//!
//! What is not here, and why:
//! - the event channel and `rdma_migrate_id`: a channel is the library's (one process's
//!   queue of events); the manager only knows which process (the owner, one control
//!   connection) an id belongs to, and the library routes each event to the id's channel;
//! - the `uid` of the kernel ABI (the library's pointer): the library keys its ids by the
//!   [`IdNum`] the manager returns;
//! - QP transitions: the library calls `ibv_modify_qp` with [`QpAttrs`] itself, as Debian's
//!   librdmacm does with `INIT_QP_ATTR` (the kernel never touches a user QP).
//!
//! Every value comes from another process: the manager checks each field (a bad one is an
//! [`Errno`] reply, never a panic); JSON on the daemon's control socket, as `daemon::control`.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

/// Protocol version, in the CM hello; a library and a daemon of different versions refuse
/// each other.
pub const VERSION: u32 = 1;

/// The manager's handle for one rdma_cm id (the kernel's `id` of ucma commands). Never
/// reused while the manager runs, so a late event or command names no other id.
pub type IdNum = u32;

/// Most private-data bytes a program may give (ucma's `RDMA_MAX_PRIVATE_DATA`); the CM
/// message bounds it further: REQ 92 - 36 (cma_hdr) = 56 for TCP, REP 196, REJ 148, RTU/DREQ/
/// DREP 224/220/224, SIDR_REQ 216 - 36 = 180, SIDR_REP 136.
pub const MAX_PRIVATE_DATA: usize = 256;

/// rdma_cm port spaces (`enum rdma_port_space`, rdma_cma.h): the service ID's protocol
/// byte (IBA Annex A11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PortSpace {
    /// RDMA_PS_IPOIB 0x0002
    Ipoib,
    /// RDMA_PS_IB 0x013F
    Ib,
    /// RDMA_PS_TCP 0x0106: RC (and UC) connections, IB CM REQ/REP/RTU.
    Tcp,
    /// RDMA_PS_UDP 0x0111: UD, SIDR_REQ/SIDR_REP.
    Udp,
}

impl PortSpace {
    pub const fn raw(self) -> u32 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Ib => 0x013F,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
        }
    }

    pub const fn from_raw(v: u32) -> Option<PortSpace> {
        match v {
            0x0002 => Some(PortSpace::Ipoib),
            0x013F => Some(PortSpace::Ib),
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            _ => None,
        }
    }
}

/// The QP type an id connects (`rdma_create_id`'s `qp_type`, ibv values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

/// `struct rdma_conn_param` (and the ud form's QPN/Q_Key), as a program gives it to
/// connect/accept and as an event carries the peer's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnParam {
    #[serde(default)]
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The program's QP (connect/accept) or the peer's (events).
    pub qp_num: u32,
    /// UD only: the Q_Key (SIDR_REP; rdma_cm's RDMA_UDP_QKEY 0x01234567 for the UDP
    /// port space).
    #[serde(default)]
    pub qkey: u32,
}

/// An address vector as `ibv_ah_attr` with a GRH (RoCE always has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Av {
    /// The peer's GID (an IPv4 peer as `::ffff:a.b.c.d`).
    pub dgid: [u8; 16],
    /// Index in the device's GID table of the address the connection uses.
    pub sgid_index: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub port_num: u8,
}

/// A resolved route (`struct ibv_sa_path_rec`'s fields a RoCE path uses), from
/// `cma_resolve_iboe_route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Path {
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
    /// IB MTU code (1 = 256 ... 5 = 4096).
    pub mtu: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub flow_label: u32,
    /// IB rate code.
    pub rate: u8,
    /// 4.096 µs * 2^packet_life_time (CMA_IBOE_PACKET_LIFETIME).
    pub packet_life_time: u8,
}

/// What QUERY returns: the id's addresses, device and route (librdmacm copies these into
/// `rdma_cm_id.route`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdInfo {
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The device's node GUID (librdmacm matches it to `ibv_get_device_guid`).
    pub node_guid: u64,
    pub port_num: u8,
    pub pkey: u16,
    pub path: Option<Path>,
}

/// QP states INIT_QP_ATTR can be asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QpState {
    Init,
    Rtr,
    Rts,
}

/// INIT_QP_ATTR's answer (`cm_init_qp_init_attr`/`_rtr_`/`_rts_`): `mask` holds the
/// `IBV_QP_*` bits of the fields that are set, as `ibv_modify_qp` takes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpAttrs {
    pub mask: u32,
    /// ibv_qp_state value.
    pub qp_state: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub port_num: u8,
    pub qkey: u32,
    /// ibv_mtu value.
    pub path_mtu: u32,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub max_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub ah: Option<Av>,
}

/// `rdma_set_option` options the manager keeps (levels RDMA_OPTION_ID 0 and
/// RDMA_OPTION_IB 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CmOption {
    /// RDMA_OPTION_ID_TOS 0: the route's traffic class.
    Tos(u8),
    /// RDMA_OPTION_ID_REUSEADDR 1.
    ReuseAddr(bool),
    /// RDMA_OPTION_ID_AFONLY 2.
    AfOnly(bool),
    /// RDMA_OPTION_ID_ACK_TIMEOUT 3: the QP's Local ACK Timeout code.
    AckTimeout(u8),
}

/// One command, as ucma numbers them (the comment names the ucma command).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Command {
    /// CREATE_ID -> [`Reply::Id`].
    CreateId { ps: PortSpace, qp_type: QpType },
    /// DESTROY_ID -> [`Reply::Done`]: the manager ends what the id had going (DREQ for a
    /// connection, REJ(TIMEOUT) for a connect in progress, the listen entry), and sends no
    /// more events for it.
    DestroyId { id: IdNum },
    /// BIND / BIND_IP -> [`Reply::Bound`] (port 0: an ephemeral port chosen).
    Bind { id: IdNum, addr: SocketAddr },
    /// RESOLVE_ADDR / RESOLVE_IP -> [`Reply::Done`], then ADDR_RESOLVED or ADDR_ERROR.
    ResolveAddr {
        id: IdNum,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: u32,
    },
    /// RESOLVE_ROUTE -> [`Reply::Done`], then ROUTE_RESOLVED or ROUTE_ERROR.
    ResolveRoute { id: IdNum, timeout_ms: u32 },
    /// QUERY (ADDR, PATH, GID) / QUERY_ROUTE -> [`Reply::Info`].
    Query { id: IdNum },
    /// LISTEN -> [`Reply::Done`].
    Listen { id: IdNum, backlog: u32 },
    /// CONNECT -> [`Reply::Done`]: REQ (or SIDR_REQ for UD) sent.
    Connect { id: IdNum, param: ConnParam },
    /// ACCEPT on a connect request's id (REP, or SIDR_REP) -> [`Reply::Done`]. On the
    /// active side after CONNECT_RESPONSE, ACCEPT is `rdma_establish`: RTU sent, and no
    /// event follows (as with the kernel: librdmacm turns the CONNECT_RESPONSE into
    /// ESTABLISHED itself after its ACCEPT, `ucma_process_conn_resp`). The passive side's
    /// ESTABLISHED comes with the RTU (or a NOTIFY of COMM_EST); a UD request's accept
    /// (SIDR_REP) gives the passive side no event at all.
    Accept { id: IdNum, param: ConnParam },
    /// REJECT -> [`Reply::Done`]: REJ, reason 28 (consumer defined) unless given.
    Reject {
        id: IdNum,
        #[serde(default)]
        private_data: Vec<u8>,
        reason: Option<u16>,
    },
    /// DISCONNECT -> [`Reply::Done`]: DREQ, or DREP to a DREQ received.
    Disconnect { id: IdNum },
    /// INIT_QP_ATTR -> [`Reply::QpAttrs`].
    InitQpAttr { id: IdNum, state: QpState },
    /// SET_OPTION -> [`Reply::Done`].
    SetOption { id: IdNum, option: CmOption },
    /// NOTIFY (an async QP event the program saw, e.g. COMM_EST) -> [`Reply::Done`].
    Notify { id: IdNum, event: u32 },
}

/// The answer to each command (one per command, in order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Done,
    Id {
        id: IdNum,
    },
    Bound {
        addr: SocketAddr,
    },
    Info(IdInfo),
    QpAttrs(QpAttrs),
    /// The command failed: `errno` is what the library sets (the kernel's for the same
    /// case), `what` says why for a log line.
    Errno {
        errno: i32,
        what: String,
    },
}

/// `enum rdma_cm_event_type`, numbered as rdma_cma.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    RouteError = 3,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    MulticastJoin = 12,
    MulticastError = 13,
    AddrChange = 14,
    /// After DISCONNECTED, when the connection's timewait (2^(av.timeout-8) ms, 2 s on
    /// RoCE) ends, if the id still exists: the kernel's ucma delivers it too.
    TimewaitExit = 15,
}

/// One event for an id (the kernel's `ucma_abi_event_resp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The id the event is for; for CONNECT_REQUEST, the new id the manager made for the
    /// request (the library makes its `rdma_cm_id` for it).
    pub id: IdNum,
    /// CONNECT_REQUEST: the listening id.
    pub listen_id: Option<IdNum>,
    pub kind: EventKind,
    /// 0, a negative errno (ADDR_ERROR, UNREACHABLE: -ETIMEDOUT...), or for REJECTED the
    /// IB REJ reason (28 consumer defined).
    pub status: i32,
    /// CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED, DISCONNECTED: the peer's
    /// parameters and private data (UD: qp_num and qkey). The private data is as long as
    /// the kernel reports it (the whole area of the message: REQ 56 after the cma_hdr, REP
    /// 196, REJ 148, SIDR_REQ 180, SIDR_REP 136; none for ESTABLISHED and DISCONNECTED).
    pub param: Option<ConnParam>,
    /// UD (SIDR_REP received, or a SIDR_REQ's CONNECT_REQUEST): the address vector to
    /// reach the peer.
    pub ah: Option<Av>,
}

/// A message from the library on a CM connection (after the hello).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Echoed in the reply: one connection carries commands of several threads.
    pub seq: u64,
    pub command: Command,
}

/// A message from the manager on a CM connection. Tagged `msg` (as the daemon's other
/// messages): an `Event` has a `kind` field of its own, and a `kind` tag made every event
/// a JSON object with two `kind` keys, which does not parse back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum ToLibrary {
    Reply { seq: u64, reply: Reply },
    Event(Event),
}

/// `SocketAddr`'s IP as the GID rdma_cm uses for it (IPv4 mapped, RoCEv2).
pub fn ip_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}
