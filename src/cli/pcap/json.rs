//! The JSON object of one frame: the fields Wireshark's `infiniband` dissector shows.

use crate::wire::pretty::{FrameDecode, RoceDecode};
use serde_json::{json, Map, Value};

/// A 64-bit field as a JSON string, `"0x..."`: jq (and JavaScript) read JSON numbers as
/// doubles, which keep 53 bits, so a VA like 0x7f00_0000_0001_2345 or an atomic operand
/// would come out altered. The 32-bit and smaller fields stay numbers.
pub(super) fn u64_json(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

/// The JSON object of one frame. Keys follow the list; numbers are JSON numbers,
/// except the 64-bit fields (`reth.va`, `atomiceth.va`, `.swap_add`, `.compare`,
/// `atomicacketh.orig`), which are `"0x..."` strings (see `u64_json`). A packet to QP1
/// gets `mad` and, for the CM, `cm` (`mad_json.rs`).
pub fn to_json(n: usize, d: &FrameDecode<'_>) -> Value {
    let mut o = Map::new();
    o.insert("frame".into(), json!(n));
    match d {
        FrameDecode::NotRoce(why) => {
            o.insert("skipped".into(), json!(why));
        }
        FrameDecode::BadFrame(e) => {
            error_fields(&mut o, e);
        }
        FrameDecode::Roce(r) => roce_fields(&mut o, r),
    }
    Value::Object(o)
}

fn error_fields(o: &mut Map<String, Value>, e: &crate::wire::WireError) {
    o.insert("error".into(), json!(e.to_string()));
    if let Some(h) = e.header() {
        o.insert("error_header".into(), json!(h.name()));
    }
    if let crate::wire::WireError::Truncated { offset, .. } = e {
        o.insert("error_offset".into(), json!(offset));
    }
}

fn roce_fields(o: &mut Map<String, Value>, r: &RoceDecode<'_>) {
    o.insert("src".into(), json!(r.frame.ip.src().to_string()));
    o.insert("dst".into(), json!(r.frame.ip.dst().to_string()));
    o.insert("udp_sport".into(), json!(r.frame.udp.source_port()));
    o.insert("ecn".into(), json!(r.frame.ip.ecn().name()));
    if let Some(b) = &r.bth {
        o.insert("opcode".into(), json!(b.opcode.0));
        o.insert("opcode_name".into(), json!(b.opcode.name()));
        o.insert("dqpn".into(), json!(b.dqpn));
        o.insert("psn".into(), json!(b.psn.value()));
        o.insert("ack_req".into(), json!(b.ack_req));
        o.insert("se".into(), json!(b.solicited));
        o.insert("migreq".into(), json!(b.migreq));
        o.insert("pad".into(), json!(b.pad));
        o.insert("tver".into(), json!(b.tver));
        o.insert("pkey".into(), json!(b.pkey));
        o.insert("fecn".into(), json!(b.fecn));
        o.insert("becn".into(), json!(b.becn));
    }
    match &r.repr {
        Ok(p) => {
            o.insert("payload_len".into(), json!(p.payload_len));
            if let Some(h) = &p.reth {
                o.insert(
                    "reth".into(),
                    json!({"va": u64_json(h.va), "rkey": h.rkey, "dma_len": h.dma_len}),
                );
            }
            if let Some(h) = &p.aeth {
                o.insert(
                    "aeth".into(),
                    json!({"syndrome": h.syndrome.to_u8(), "msn": h.msn}),
                );
            }
            if let Some(h) = &p.atomic_eth {
                o.insert(
                    "atomiceth".into(),
                    json!({
                        "va": u64_json(h.va),
                        "rkey": h.rkey,
                        "swap_add": u64_json(h.swap_add),
                        "compare": u64_json(h.compare),
                    }),
                );
            }
            if let Some(h) = &p.atomic_ack_eth {
                o.insert("atomicacketh".into(), json!({"orig": u64_json(h.orig)}));
            }
            if let Some(h) = &p.immdt {
                o.insert("immdt".into(), json!({"imm": h.imm}));
            }
            if let Some(h) = &p.ieth {
                o.insert("ieth".into(), json!({"rkey": h.rkey}));
            }
            if let Some(h) = &p.deth {
                o.insert("deth".into(), json!({"qkey": h.qkey, "src_qp": h.src_qpn}));
            }
        }
        Err(e) => error_fields(o, e),
    }
    if let Some(m) = r.mad() {
        super::mad_json::mad_fields(o, &m);
    }
    if let Some(i) = &r.icrc {
        o.insert("icrc".into(), json!(i.wire_be()));
        o.insert("icrc_ok".into(), json!(i.ok()));
    }
}
