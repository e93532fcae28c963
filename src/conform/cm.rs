//! The connection manager's MADs in a script (`role cm_passive`): `send mad REQ ...` builds
//! one with the wire layer's Reprs (`wire::cm`), filling what the script does not say the
//! way Linux's rdma_cm does on its active side (the REQ of rxe's rping in
//! tests/data/cm/rping_cm_s64.pcap), and the comm IDs and TIDs from the exchange so far;
//! `expect mad REP ...` checks the fields it names. Fields go by their `wire::cm` names.

use super::packet::Got;
use crate::wire::cm::{
    cma, drep, dreq, mra, rej, req, rtu, service_id, sidr_req, CmMad, Message, RejReason,
};
use crate::wire::mad;
use crate::wire::opcode::op;
use crate::wire::{BthRepr, DethRepr, Psn, RoceRepr};
use std::net::IpAddr;

/// QP1 (IBA 13.4.5) and its Q_Key.
pub const GSI_QPN: u32 = 1;
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The peer's node GUID in its REQs (any EUI-64; this one says "conform").
pub const PEER_GUID: u64 = 0x0200_00ff_fec0_0f00;
/// The high half of the peer's TIDs (the kernel puts its MAD agent's there).
const TID_HI: u64 = 0xc0f0_0000;
/// The peer's comm IDs: 0x5cNNNN00 for the run's `n`th script (a late MAD addressed to
/// another script's is set aside, as packets for an earlier script's QPN are).
const COMM_BASE: u32 = 0x5c00_0000;
const COMM_MASK: u32 = 0xff00_0000;

/// The messages a script names, and their attribute IDs.
pub const NAMES: &[(&str, u16)] = &[
    ("REQ", mad::attr::REQ),
    ("MRA", mad::attr::MRA),
    ("REJ", mad::attr::REJ),
    ("REP", mad::attr::REP),
    ("RTU", mad::attr::RTU),
    ("DREQ", mad::attr::DREQ),
    ("DREP", mad::attr::DREP),
    ("SIDR_REQ", mad::attr::SIDR_REQ),
    ("SIDR_REP", mad::attr::SIDR_REP),
];

/// Fields every message takes: the MAD header's TID, and for REQ and SIDR_REQ the service
/// ID as rdma_cm's port space and port, and the cma_hdr (rdma_cm's private data header).
const COMMON: &[&str] = &["tid"];
const CMA: &[&str] = &[
    "ps",
    "port",
    "ip_version",
    "cma_version",
    "cma_src",
    "cma_dst",
    "cma_port",
];

/// The fields a script may name for message `attr` (besides [`COMMON`]).
pub fn fields(attr: u16) -> &'static [&'static str] {
    match attr {
        mad::attr::REQ => &[
            "local_comm_id",
            "service_id",
            "local_ca_guid",
            "local_qkey",
            "local_qpn",
            "responder_resources",
            "initiator_depth",
            "remote_cm_response_timeout",
            "transport_service_type",
            "starting_psn",
            "local_cm_response_timeout",
            "retry_count",
            "pkey",
            "path_mtu",
            "rnr_retry_count",
            "max_cm_retries",
            "srq",
            "local_ack_timeout",
        ],
        mad::attr::REP => &[
            "local_comm_id",
            "remote_comm_id",
            "local_qkey",
            "local_qpn",
            "starting_psn",
            "responder_resources",
            "initiator_depth",
            "target_ack_delay",
            "failover_accepted",
            "e2e_flow_control",
            "rnr_retry_count",
            "srq",
            "local_ca_guid",
        ],
        mad::attr::RTU | mad::attr::DREP => &["local_comm_id", "remote_comm_id"],
        mad::attr::DREQ => &["local_comm_id", "remote_comm_id", "remote_qpn"],
        mad::attr::MRA => &[
            "local_comm_id",
            "remote_comm_id",
            "message_mraed",
            "service_timeout",
        ],
        mad::attr::REJ => &[
            "local_comm_id",
            "remote_comm_id",
            "message_rejected",
            "reject_info_length",
            "reason",
        ],
        mad::attr::SIDR_REQ => &["request_id", "pkey", "service_id"],
        mad::attr::SIDR_REP => &["request_id", "status", "qpn", "service_id", "qkey"],
        _ => &[],
    }
}

/// Whether `key` is a field of `attr` a script may name.
pub fn known(attr: u16, key: &str) -> bool {
    COMMON.contains(&key)
        || fields(attr).contains(&key)
        || (matches!(attr, mad::attr::REQ | mad::attr::SIDR_REQ) && CMA.contains(&key))
}

/// The attribute ID of a message name.
pub fn attr_by_name(name: &str) -> Option<(&'static str, u16)> {
    NAMES.iter().find(|(n, _)| *n == name).copied()
}

/// What the exchange has taught the runner so far: the names a script's values may use.
#[derive(Debug, Clone, Copy, Default)]
pub struct CmCtx {
    /// `ours`: the peer's comm ID (REQ local comm ID, SIDR request ID).
    pub ours: u32,
    /// `theirs`: the target's comm ID, from the last MAD it sent that carries one.
    pub theirs: u32,
    /// `sent`: the TID of the peer's last request (REQ, DREQ, SIDR_REQ).
    pub sent_tid: u64,
    /// The TID of the last MAD the target sent (a reply the peer makes echoes it).
    pub got_tid: u64,
    /// `target_qpn`, `target_rq_psn`: the target's QP and the PSN it expects first, as
    /// its accept reported them.
    pub target_qpn: u32,
    pub target_psn: u32,
    /// `peer_qpn`: the runner's QPN for this script.
    pub peer_qpn: u32,
    /// TIDs handed out so far.
    tids: u32,
}

impl CmCtx {
    pub fn new(n: u32, peer_qpn: u32) -> CmCtx {
        CmCtx {
            ours: COMM_BASE | ((n & 0xffff) << 8),
            peer_qpn,
            ..Default::default()
        }
    }

    /// A value as a script writes it: a number, or one of the names above.
    pub fn value(&self, v: &str) -> Result<u64, String> {
        Ok(match v {
            "ours" => self.ours.into(),
            "theirs" => self.theirs.into(),
            "sent" => self.sent_tid,
            "got" => self.got_tid,
            "target_qpn" => self.target_qpn.into(),
            "target_rq_psn" => self.target_psn.into(),
            "peer_qpn" => self.peer_qpn.into(),
            _ => {
                super::value::Num::parse(v)
                    .map_err(|_| {
                        format!(
                            "{v:?}: a number, or ours theirs sent got target_qpn target_rq_psn \
                             peer_qpn"
                        )
                    })?
                    .0
            }
        })
    }

    fn new_tid(&mut self) -> u64 {
        self.tids += 1;
        let tid = (TID_HI << 32) | u64::from(self.ours | self.tids);
        self.sent_tid = tid;
        tid
    }

    /// Whether a MAD addressed to comm ID `c` belongs to another script of the run.
    pub fn foreign(&self, c: u32) -> bool {
        c & COMM_MASK == COMM_BASE && c & !0xff != self.ours
    }
}

fn ip_of(v: &str) -> Result<IpAddr, String> {
    v.parse().map_err(|_| format!("{v:?}: an IP address"))
}

fn gid(ip: IpAddr) -> [u8; 16] {
    crate::cm::ucma::ip_gid(ip)
}

/// Builds the peer's MAD `attr` with `kv` (script fields, values not yet resolved), and
/// the packet that carries it (BTH through a zero ICRC) from QP1 to QP1.
pub fn build(
    attr: u16,
    kv: &[(String, String)],
    ctx: &mut CmCtx,
    peer: IpAddr,
    target: IpAddr,
) -> Result<Vec<u8>, String> {
    let get = |k: &str| kv.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
    let num = |k: &str, d: u64| -> Result<u64, String> {
        match get(k) {
            Some(v) => ctx.value(v),
            None => Ok(d),
        }
    };
    let sid = |ps_default: u16| -> Result<u64, String> {
        if let Some(v) = get("service_id") {
            return ctx.value(v);
        }
        let ps = match get("ps").unwrap_or(if ps_default == service_id::PS_TCP {
            "tcp"
        } else {
            "udp"
        }) {
            "tcp" => service_id::PS_TCP,
            "udp" => service_id::PS_UDP,
            "ib" => service_id::PS_IB,
            o => return Err(format!("ps={o}: tcp, udp or ib")),
        };
        let port = num("port", 0)?;
        Ok(service_id::new(ps, port as u16))
    };
    // rdma_cm's header (cma_hdr): version 0, IPv4, the active side's port and addresses.
    let cma_hdr = |len: usize| -> Result<Vec<u8>, String> {
        let src = match get("cma_src") {
            Some(v) => ip_of(v)?,
            None => peer,
        };
        let dst = match get("cma_dst") {
            Some(v) => ip_of(v)?,
            None => target,
        };
        let addrs = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => cma::Addrs::V4 { src: s, dst: d },
            (s, d) => cma::Addrs::V6 {
                src: match s {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                },
                dst: match d {
                    IpAddr::V4(a) => a.to_ipv6_mapped(),
                    IpAddr::V6(a) => a,
                },
            },
        };
        let mut b = vec![0u8; len];
        let r = cma::Repr {
            src_port: num("cma_port", 0x8104)? as u16,
            addrs,
        };
        r.emit(&mut cma::Packet::new_unchecked(&mut b[..cma::HEADER_LEN]));
        // Raw overrides: a header rdma_cm would refuse.
        if let Some(v) = get("cma_version") {
            b[0] = ctx.value(v)? as u8;
        }
        if let Some(v) = get("ip_version") {
            b[1] = (ctx.value(v)? as u8) << 4;
        }
        Ok(b)
    };
    let ours = ctx.ours;
    let theirs = ctx.theirs;
    let reply_tid = ctx.got_tid;
    let (msg, tid) = match attr {
        mad::attr::REQ => {
            let mut pd = [0u8; req::PRIVATE_DATA_LEN];
            pd.copy_from_slice(&cma_hdr(req::PRIVATE_DATA_LEN)?);
            let r = req::Repr {
                local_comm_id: num("local_comm_id", ours.into())? as u32,
                vendor_id: 0,
                service_id: sid(service_id::PS_TCP)?,
                local_ca_guid: num("local_ca_guid", PEER_GUID)?,
                local_qkey: num("local_qkey", 0)? as u32,
                local_qpn: num("local_qpn", ctx.peer_qpn.into())? as u32,
                responder_resources: num("responder_resources", 1)? as u8,
                local_eecn: 0,
                initiator_depth: num("initiator_depth", 1)? as u8,
                remote_eecn: 0,
                remote_cm_response_timeout: num("remote_cm_response_timeout", 20)? as u8,
                transport_service_type: num("transport_service_type", 0)? as u8,
                e2e_flow_control: false,
                starting_psn: num("starting_psn", 0x100)? as u32,
                local_cm_response_timeout: num("local_cm_response_timeout", 20)? as u8,
                retry_count: num("retry_count", 7)? as u8,
                pkey: num("pkey", 0xffff)? as u16,
                path_mtu: num("path_mtu", 3)? as u8,
                rdc_exists: false,
                rnr_retry_count: num("rnr_retry_count", 7)? as u8,
                max_cm_retries: num("max_cm_retries", 15)? as u8,
                srq: num("srq", 0)? != 0,
                extended_transport_type: 0,
                primary_path: req::Path {
                    local_lid: 0xffff,
                    remote_lid: 0xffff,
                    local_gid: gid(peer),
                    remote_gid: gid(target),
                    flow_label: 0,
                    packet_rate: 0,
                    traffic_class: 0,
                    hop_limit: 64,
                    sl: 0,
                    subnet_local: false,
                    local_ack_timeout: num("local_ack_timeout", 19)? as u8,
                },
                alternate_path: req::Path::default(),
                sap_supported: false,
                private_data: pd,
            };
            let tid = match get("tid") {
                Some(v) => ctx.value(v)?,
                None => ctx.new_tid(),
            };
            (Message::Req(r), tid)
        }
        mad::attr::SIDR_REQ => {
            let mut pd = [0u8; sidr_req::PRIVATE_DATA_LEN];
            pd.copy_from_slice(&cma_hdr(sidr_req::PRIVATE_DATA_LEN)?);
            let r = sidr_req::Repr {
                request_id: num("request_id", ours.into())? as u32,
                pkey: num("pkey", 0xffff)? as u16,
                service_id: sid(service_id::PS_UDP)?,
                private_data: pd,
            };
            let tid = match get("tid") {
                Some(v) => ctx.value(v)?,
                None => ctx.new_tid(),
            };
            (Message::SidrReq(r), tid)
        }
        mad::attr::DREQ => {
            let r = dreq::Repr {
                local_comm_id: num("local_comm_id", ours.into())? as u32,
                remote_comm_id: num("remote_comm_id", theirs.into())? as u32,
                remote_qpn: num("remote_qpn", ctx.target_qpn.into())? as u32,
                private_data: [0; dreq::PRIVATE_DATA_LEN],
            };
            let tid = match get("tid") {
                Some(v) => ctx.value(v)?,
                None => ctx.new_tid(),
            };
            (Message::Dreq(r), tid)
        }
        // Replies echo the TID of what they answer (the target's last MAD).
        mad::attr::RTU => (
            Message::Rtu(rtu::Repr {
                local_comm_id: num("local_comm_id", ours.into())? as u32,
                remote_comm_id: num("remote_comm_id", theirs.into())? as u32,
                private_data: [0; rtu::PRIVATE_DATA_LEN],
            }),
            num("tid", reply_tid)?,
        ),
        mad::attr::DREP => (
            Message::Drep(drep::Repr {
                local_comm_id: num("local_comm_id", ours.into())? as u32,
                remote_comm_id: num("remote_comm_id", theirs.into())? as u32,
                private_data: [0; drep::PRIVATE_DATA_LEN],
            }),
            num("tid", reply_tid)?,
        ),
        mad::attr::MRA => (
            Message::Mra(mra::Repr {
                local_comm_id: num("local_comm_id", ours.into())? as u32,
                remote_comm_id: num("remote_comm_id", theirs.into())? as u32,
                message_mraed: num("message_mraed", mra::MRAED_REP.into())? as u8,
                service_timeout: num("service_timeout", 24)? as u8,
                private_data: [0; mra::PRIVATE_DATA_LEN],
            }),
            num("tid", reply_tid)?,
        ),
        mad::attr::REJ => (
            Message::Rej(rej::Repr {
                local_comm_id: num("local_comm_id", ours.into())? as u32,
                remote_comm_id: num("remote_comm_id", theirs.into())? as u32,
                message_rejected: num("message_rejected", rej::REJECTED_REP.into())? as u8,
                reject_info_length: 0,
                reason: RejReason::from_code(num("reason", 28)? as u16),
                ari: [0; rej::ARI_LEN],
                private_data: [0; rej::PRIVATE_DATA_LEN],
            }),
            num("tid", reply_tid)?,
        ),
        _ => return Err("the peer sends REQ, SIDR_REQ, DREQ, RTU, DREP, MRA or REJ".into()),
    };
    let m = CmMad::new(tid, 0, msg);
    let mut mad_bytes = [0u8; mad::MAD_LEN];
    m.emit(&mut mad_bytes);
    let repr = RoceRepr {
        deth: Some(DethRepr {
            qkey: GSI_QKEY,
            src_qpn: GSI_QPN,
        }),
        payload_len: mad::MAD_LEN,
        ..RoceRepr::new(BthRepr {
            opcode: op::UD_SEND_ONLY,
            solicited: false,
            migreq: false,
            pad: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dqpn: GSI_QPN,
            ack_req: false,
            psn: Psn::new(ctx.tids),
        })
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut b, &mad_bytes)
        .map_err(|e| format!("cannot build the MAD's packet: {e}"))?;
    Ok(b)
}

/// A CM MAD the target sent: the packet's MAD, if it is one (UD SEND ONLY to QP1).
pub fn mad_of(g: &Got) -> Option<CmMad> {
    let r = g.repr().ok()?;
    if r.bth.opcode != op::UD_SEND_ONLY || r.bth.dqpn != GSI_QPN {
        return None;
    }
    CmMad::parse(g.payload()).ok()
}

/// The comm ID a MAD is addressed to (its remote comm ID; a SIDR_REP's request ID).
pub fn addressed_to(m: &CmMad) -> Option<u32> {
    Some(match m.msg {
        Message::Rep(r) => r.remote_comm_id,
        Message::Rej(r) => r.remote_comm_id,
        Message::Mra(r) => r.remote_comm_id,
        Message::Rtu(r) => r.remote_comm_id,
        Message::Dreq(r) => r.remote_comm_id,
        Message::Drep(r) => r.remote_comm_id,
        Message::SidrRep(r) => r.request_id,
        _ => return None,
    })
}

/// The value of field `key` in `m`, as a number.
pub fn get(m: &CmMad, key: &str) -> Option<u64> {
    if key == "tid" {
        return Some(m.header.tid);
    }
    macro_rules! pick {
        ($r:expr, $($f:ident),*) => {
            match key {
                $(stringify!($f) => Some(u64::from($r.$f)),)*
                _ => None,
            }
        };
    }
    match m.msg {
        Message::Rep(r) => pick!(
            r,
            local_comm_id,
            remote_comm_id,
            local_qkey,
            local_qpn,
            starting_psn,
            responder_resources,
            initiator_depth,
            target_ack_delay,
            failover_accepted,
            e2e_flow_control,
            rnr_retry_count,
            srq,
            local_ca_guid
        ),
        Message::Rtu(r) => pick!(r, local_comm_id, remote_comm_id),
        Message::Drep(r) => pick!(r, local_comm_id, remote_comm_id),
        Message::Dreq(r) => pick!(r, local_comm_id, remote_comm_id, remote_qpn),
        Message::Mra(r) => pick!(
            r,
            local_comm_id,
            remote_comm_id,
            message_mraed,
            service_timeout
        ),
        Message::Rej(r) => match key {
            "reason" => Some(u64::from(r.reason.code())),
            _ => pick!(
                r,
                local_comm_id,
                remote_comm_id,
                message_rejected,
                reject_info_length
            ),
        },
        Message::SidrRep(r) => pick!(r, request_id, status, qpn, service_id, qkey),
        Message::Req(r) => pick!(r, local_comm_id, service_id, local_qpn, starting_psn),
        Message::SidrReq(r) => pick!(r, request_id, pkey, service_id),
        _ => None,
    }
}

/// The name of a MAD's message.
pub fn name(m: &CmMad) -> &'static str {
    NAMES
        .iter()
        .find(|(_, a)| *a == m.header.attr_id)
        .map_or("?", |(n, _)| n)
}

/// Checks `m` against the expectation: message `attr`, and each named field.
pub fn check(attr: u16, kv: &[(String, String)], m: &CmMad, ctx: &CmCtx) -> Result<(), String> {
    if m.header.attr_id != attr {
        let want = NAMES
            .iter()
            .find(|(_, a)| *a == attr)
            .map_or("?", |(n, _)| n);
        return Err(format!("message: expected {want}, got {}", name(m)));
    }
    for (k, v) in kv {
        let want = ctx.value(v)?;
        let have = get(m, k).ok_or_else(|| format!("{k}: not a field of {}", name(m)))?;
        if have != want {
            return Err(format!("{k}: expected {want:#x}, got {have:#x}"));
        }
    }
    Ok(())
}

/// Learns from a MAD the target sent: its comm ID (`theirs`) and TID (`got`).
pub fn learn(m: &CmMad, ctx: &mut CmCtx) {
    ctx.got_tid = m.header.tid;
    let local = match m.msg {
        Message::Rep(r) => Some(r.local_comm_id),
        Message::Rej(r) => Some(r.local_comm_id),
        Message::Mra(r) => Some(r.local_comm_id),
        Message::Dreq(r) => Some(r.local_comm_id),
        Message::Drep(r) => Some(r.local_comm_id),
        _ => None,
    };
    if let Some(c) = local.filter(|&c| c != 0) {
        ctx.theirs = c;
    }
}
