//! The `mad` and `cm` objects of a frame's JSON: the MAD a packet to QP1 carries (common
//! header) and, for the communication manager's class, its message. Keys are the field
//! names of the wire `Repr`s (`wire::cm`); 64-bit values (TID, service ID, GUIDs) are
//! `"0x..."` strings as elsewhere in this JSON; GIDs and `cma_hdr` addresses are
//! addresses (an IPv4-mapped GID as `::ffff:a.b.c.d`, as tshark's `FT_IPv6` fields).

use super::json::u64_json;
use crate::wire::cm::{self, cma, service_id, Message};
use crate::wire::mad;
use crate::wire::pretty::MadDecode;
use serde_json::{json, Map, Value};
use std::net::Ipv6Addr;

/// Adds `mad` (and `cm`, or `mad_error`) to a frame's object.
pub(super) fn mad_fields(o: &mut Map<String, Value>, d: &MadDecode) {
    match d {
        MadDecode::Short(n) => {
            o.insert(
                "mad_error".into(),
                json!(format!("MAD truncated: {n} of {} bytes", mad::MAD_LEN)),
            );
        }
        MadDecode::Other(h) => {
            o.insert("mad".into(), header(h));
        }
        MadDecode::CmBad(h, e) => {
            o.insert("mad".into(), header(h));
            o.insert("cm".into(), json!({ "error": e.to_string() }));
        }
        MadDecode::Cm(m) => {
            o.insert("mad".into(), header(&m.header));
            o.insert("cm".into(), message(&m.msg));
        }
    }
}

fn header(h: &mad::Repr) -> Value {
    json!({
        "base_version": h.base_version,
        "mgmt_class": h.mgmt_class,
        "class_version": h.class_version,
        "method": h.method,
        "status": h.status,
        "class_specific": h.class_specific,
        "tid": u64_json(h.tid),
        "attr_id": h.attr_id,
        "attr_mod": h.attr_mod,
    })
}

fn gid(g: [u8; 16]) -> Value {
    json!(Ipv6Addr::from(g).to_string())
}

/// `service_id`, and `port_space` / `port` when it is an rdma_cm one.
fn sid(o: &mut Map<String, Value>, sid: u64) {
    o.insert("service_id".into(), u64_json(sid));
    if let Some((ps, port)) = service_id::rdma_cm(sid) {
        o.insert("port_space".into(), json!(ps));
        o.insert("port".into(), json!(port));
    }
}

fn cma_hdr(o: &mut Map<String, Value>, h: Option<cma::Repr>) {
    if let Some(h) = h {
        let (src, dst) = match h.addrs {
            cma::Addrs::V4 { src, dst } => (src.to_string(), dst.to_string()),
            cma::Addrs::V6 { src, dst } => (src.to_string(), dst.to_string()),
        };
        o.insert(
            "cma_hdr".into(),
            json!({ "src": src, "dst": dst, "src_port": h.src_port }),
        );
    }
}

fn path(p: &cm::req::Path) -> Value {
    json!({
        "local_lid": p.local_lid,
        "remote_lid": p.remote_lid,
        "local_gid": gid(p.local_gid),
        "remote_gid": gid(p.remote_gid),
        "flow_label": p.flow_label,
        "packet_rate": p.packet_rate,
        "traffic_class": p.traffic_class,
        "hop_limit": p.hop_limit,
        "sl": p.sl,
        "subnet_local": p.subnet_local,
        "local_ack_timeout": p.local_ack_timeout,
    })
}

/// Inserts `"key": value` pairs into a map.
macro_rules! put {
    ($o:expr, $($k:literal: $v:expr),+ $(,)?) => {
        {
            $($o.insert($k.into(), json!($v));)+
        }
    };
}

fn message(m: &Message) -> Value {
    let mut o = Map::new();
    put!(o, "msg": m.name());
    let (l, r) = m.comm_ids();
    if let Some(l) = l {
        let key = if matches!(m, Message::SidrReq(_) | Message::SidrRep(_)) {
            "request_id"
        } else {
            "local_comm_id"
        };
        o.insert(key.into(), json!(l));
    }
    if let Some(r) = r {
        put!(o, "remote_comm_id": r);
    }
    match m {
        Message::Req(r) => {
            sid(&mut o, r.service_id);
            put!(o,
                "local_ca_guid": u64_json(r.local_ca_guid),
                "local_qkey": r.local_qkey,
                "local_qpn": r.local_qpn,
                "responder_resources": r.responder_resources,
                "initiator_depth": r.initiator_depth,
                "remote_cm_response_timeout": r.remote_cm_response_timeout,
                "transport_service_type": r.transport_service_type,
                "e2e_flow_control": r.e2e_flow_control,
                "starting_psn": r.starting_psn,
                "local_cm_response_timeout": r.local_cm_response_timeout,
                "retry_count": r.retry_count,
                "pkey": r.pkey,
                "path_mtu": r.path_mtu,
                "rnr_retry_count": r.rnr_retry_count,
                "max_cm_retries": r.max_cm_retries,
                "srq": r.srq,
                "extended_transport_type": r.extended_transport_type,
                "primary_path": path(&r.primary_path),
                "alternate_path": path(&r.alternate_path),
            );
            cma_hdr(&mut o, r.cma_hdr());
        }
        Message::Rep(r) => {
            put!(o,
                "local_qkey": r.local_qkey,
                "local_qpn": r.local_qpn,
                "local_eecn": r.local_eecn,
                "starting_psn": r.starting_psn,
                "responder_resources": r.responder_resources,
                "initiator_depth": r.initiator_depth,
                "target_ack_delay": r.target_ack_delay,
                "failover_accepted": r.failover_accepted,
                "e2e_flow_control": r.e2e_flow_control,
                "rnr_retry_count": r.rnr_retry_count,
                "srq": r.srq,
                "local_ca_guid": u64_json(r.local_ca_guid),
                "vendor_id": r.vendor_id(),
            );
        }
        Message::Rtu(_) | Message::Drep(_) => {}
        Message::Dreq(r) => {
            put!(o, "remote_qpn": r.remote_qpn);
        }
        Message::Mra(r) => {
            put!(o,
                "message_mraed": r.message_mraed,
                "message_mraed_name": cm::show::mraed_name(r.message_mraed),
                "service_timeout": r.service_timeout,
            );
        }
        Message::Rej(r) => {
            put!(o,
                "message_rejected": r.message_rejected,
                "message_rejected_name": cm::show::which_message(r.message_rejected),
                "reject_info_length": r.reject_info_length,
                "reason": r.reason.code(),
                "reason_name": r.reason.name(),
            );
        }
        Message::SidrReq(r) => {
            put!(o, "pkey": r.pkey);
            sid(&mut o, r.service_id);
            cma_hdr(&mut o, r.cma_hdr());
        }
        Message::SidrRep(r) => {
            put!(o,
                "status": r.status,
                "status_name": cm::show::sidr_status_name(r.status),
                "qpn": r.qpn,
                "qkey": r.qkey,
            );
            sid(&mut o, r.service_id);
        }
        Message::Lap(r) => {
            put!(o,
                "remote_qpn": r.remote_qpn,
                "remote_cm_response_timeout": r.remote_cm_response_timeout,
                "alt_local_lid": r.alt_local_lid,
                "alt_remote_lid": r.alt_remote_lid,
                "alt_local_gid": gid(r.alt_local_gid),
                "alt_remote_gid": gid(r.alt_remote_gid),
                "alt_flow_label": r.alt_flow_label,
                "alt_traffic_class": r.alt_traffic_class,
                "alt_hop_limit": r.alt_hop_limit,
                "alt_packet_rate": r.alt_packet_rate,
                "alt_sl": r.alt_sl,
                "alt_subnet_local": r.alt_subnet_local,
                "alt_local_ack_timeout": r.alt_local_ack_timeout,
            );
        }
        Message::Apr(r) => {
            put!(o,
                "additional_info_length": r.additional_info_length,
                "ap_status": r.ap_status,
                "ap_status_name": cm::apr::Status(r.ap_status).name(),
            );
        }
        Message::ClassPortInfo(r) => {
            put!(o,
                "base_version": r.base_version,
                "class_version": r.class_version,
                "capability_mask": r.capability_mask,
                "capability_mask2": r.capability_mask2,
                "resp_time_value": r.resp_time_value,
                "redirect_gid": gid(r.redirect_gid),
                "redirect_lid": r.redirect_lid,
                "redirect_pkey": r.redirect_pkey,
                "redirect_qp": r.redirect_qp,
                "redirect_qkey": r.redirect_qkey,
                "trap_gid": gid(r.trap_gid),
                "trap_lid": r.trap_lid,
                "trap_pkey": r.trap_pkey,
                "trap_qp": r.trap_qp,
                "trap_qkey": r.trap_qkey,
            );
        }
    }
    Value::Object(o)
}
