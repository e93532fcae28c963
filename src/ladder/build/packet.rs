//! One parsed RoCE packet as a ladder [`Packet`]: its name, AETH kind, label and
//! Wireshark fields (names from tshark 4.0's `infiniband` dissector, values as
//! `tshark -T fields` prints them: decimal, or `0x` and zero-padded hex for the fields
//! the dissector shows in hex, bare hex for byte fields).

use crate::engine::time::RNR_TIMER_US;
use crate::ladder::model::{Aeth, Field, Observed, Packet, Side};
use crate::wire::aeth::Syndrome;
use crate::wire::pretty::MadDecode;
use crate::wire::{RocePacket, RoceRepr, ICRC_LEN};

/// The RNR NAK timer in milliseconds (IBA Table 45, `engine::time::RNR_TIMER_US`).
pub fn rnr_ms(timer: u8) -> f64 {
    f64::from(RNR_TIMER_US[usize::from(timer & 0x1f)]) / 1000.0
}

/// The opcode's name without its transport prefix (`RC_SEND_ONLY` -> `SEND_ONLY`).
pub fn short_name(full: &'static str) -> &'static str {
    for p in ["RC_", "UC_", "UD_", "RD_"] {
        if let Some(rest) = full.strip_prefix(p) {
            return rest;
        }
    }
    full
}

pub fn aeth_of(r: &RoceRepr) -> Option<Aeth> {
    let a = r.aeth?;
    Some(match a.syndrome {
        Syndrome::Ack { credits } => Aeth::Ack {
            credits,
            msn: a.msn,
        },
        Syndrome::RnrNak { timer } => Aeth::Rnr {
            timer,
            ms: rnr_ms(timer),
            msn: a.msn,
        },
        Syndrome::Nak(code) => Aeth::Nak {
            code: code as u8,
            msn: a.msn,
        },
    })
}

/// The short name of a NAK code (IBA Table 44), for labels.
pub fn nak_name(code: u8) -> &'static str {
    match code {
        0 => "PSN-sequence-error",
        1 => "invalid-request",
        2 => "remote-access-error",
        3 => "remote-operational-error",
        4 => "invalid-RD-request",
        _ => "reserved",
    }
}

fn f(name: &'static str, value: String) -> Field {
    Field { name, value }
}

fn b(v: bool) -> String {
    u8::from(v).to_string()
}

/// Every field tshark shows for the packet, in the dissector's (the wire's) order.
pub fn fields(r: &RoceRepr, roce: &[u8]) -> Vec<Field> {
    let h = &r.bth;
    let mut v = vec![
        f("infiniband.bth.opcode", h.opcode.0.to_string()),
        f("infiniband.bth.se", b(h.solicited)),
        f("infiniband.bth.m", b(h.migreq)),
        f("infiniband.bth.padcnt", h.pad.to_string()),
        f("infiniband.bth.tver", h.tver.to_string()),
        f("infiniband.bth.p_key", h.pkey.to_string()),
        f("infiniband.bth.destqp", format!("{:#08x}", h.dqpn)),
        f("infiniband.bth.a", b(h.ack_req)),
        f("infiniband.bth.psn", h.psn.value().to_string()),
    ];
    if let Some(d) = r.deth {
        v.push(f("infiniband.deth.q_key", format!("{:#018x}", d.qkey)));
        v.push(f("infiniband.deth.srcqp", format!("{:#010x}", d.src_qpn)));
    }
    if let Some(x) = r.reth {
        v.push(f("infiniband.reth.va", format!("{:#018x}", x.va)));
        v.push(f("infiniband.reth.r_key", format!("{:#010x}", x.rkey)));
        v.push(f("infiniband.reth.dmalen", x.dma_len.to_string()));
    }
    if let Some(x) = r.atomic_eth {
        // tshark 4.0 shows the AtomicETH's address and key under the RETH's names.
        v.push(f("infiniband.reth.va", format!("{:#018x}", x.va)));
        v.push(f("infiniband.reth.r_key", format!("{:#010x}", x.rkey)));
        v.push(f("infiniband.atomiceth.swapdt", x.swap_add.to_string()));
        v.push(f("infiniband.atomiceth.cmpdt", x.compare.to_string()));
    }
    if let Some(a) = r.aeth {
        v.push(f(
            "infiniband.aeth.syndrome",
            a.syndrome.to_u8().to_string(),
        ));
        v.push(f("infiniband.aeth.msn", a.msn.to_string()));
    }
    if let Some(x) = r.atomic_ack_eth {
        v.push(f("infiniband.atomicacketh.origremdt", x.orig.to_string()));
    }
    if let Some(x) = r.immdt {
        v.push(f("infiniband.immdt", format!("{:08x}", x.imm)));
    }
    if let Some(x) = r.ieth {
        v.push(f("infiniband.ieth", format!("{:08x}", x.rkey)));
    }
    if let Some(t) = roce.len().checked_sub(ICRC_LEN).and_then(|s| roce.get(s..)) {
        let crc = u32::from_be_bytes([t[0], t[1], t[2], t[3]]);
        v.push(f("infiniband.invariant.crc", format!("{crc:#010x}")));
    }
    v
}

/// A CM MAD's summary (`REQ lcid=0x... sid=0x... tid=0x...`) for a UD SEND ONLY to QP1.
pub fn cm_summary(roce: &[u8]) -> Option<String> {
    let p = RocePacket::new_checked(roce).ok()?;
    let s = MadDecode::read(p.payload()).to_string();
    Some(s.strip_prefix("CM ").map(str::to_owned).unwrap_or(s))
}

/// The arrow's label: `RDMA_WRITE_FIRST psn=12 A len=1024`, an ACK as `ACK psn=7 msn=3
/// credits=31`, an RNR NAK with its timer, a NAK with its code, a CM MAD as its summary.
pub fn label(p: &Packet, r: &RoceRepr) -> String {
    use std::fmt::Write;
    if let Some(cm) = &p.cm {
        return format!("CM {cm}");
    }
    let mut s = String::new();
    let is_ack = r.bth.opcode.0 == crate::wire::opcode::op::RC_ACKNOWLEDGE.0;
    match (is_ack, p.aeth) {
        (true, Some(Aeth::Ack { .. })) => s.push_str("ACK"),
        (true, Some(Aeth::Rnr { .. })) => s.push_str("RNR-NAK"),
        (true, Some(Aeth::Nak { .. })) => s.push_str("NAK"),
        _ => s.push_str(p.name),
    }
    let _ = write!(s, " psn={}", p.psn);
    if p.ack_req {
        s.push_str(" A");
    }
    if p.payload_len > 0 {
        let _ = write!(s, " len={}", p.payload_len);
    }
    if let Some((_, _, len)) = p.reth {
        let _ = write!(s, " dmalen={len}");
    }
    if let Some(imm) = p.imm {
        let _ = write!(s, " imm={imm:#x}");
    }
    if let Some(d) = r.deth {
        let _ = write!(s, " qp={:#x}->{:#x}", d.src_qpn, r.bth.dqpn);
    }
    match p.aeth {
        Some(Aeth::Ack { credits, msn }) => {
            let _ = write!(s, " msn={msn} credits={credits}");
        }
        Some(Aeth::Rnr { timer, ms, msn }) => {
            let _ = write!(s, " timer={timer} ({ms} ms) msn={msn}");
        }
        Some(Aeth::Nak { code, msn }) => {
            let _ = write!(s, " {} msn={msn}", nak_name(code));
        }
        None => {}
    }
    if p.becn {
        s.push_str(" BECN");
    }
    if p.ecn == 3 {
        s.push_str(" CE");
    }
    s
}

/// The packet row for a parsed packet, before the flow's analysis fills `retransmit`,
/// `duplicate` and `covers`.
pub fn packet(o: &Observed<'_>, r: &RoceRepr, from: Side, cm: bool) -> Packet {
    let name = r
        .bth
        .opcode
        .info()
        .map_or("UNKNOWN", |i| short_name(i.name));
    let mut p = Packet {
        frame: o.frame,
        t_ns: o.t_ns,
        from,
        fate: o.fate,
        opcode: r.bth.opcode.0,
        name,
        psn: r.bth.psn.value(),
        ack_req: r.bth.ack_req,
        solicited: r.bth.solicited,
        payload_len: r.payload_len,
        ecn: o.ecn & 3,
        becn: r.bth.becn,
        aeth: aeth_of(r),
        reth: r.reth.map(|x| (x.va, x.rkey, x.dma_len)),
        imm: r.immdt.map(|x| x.imm),
        retransmit: None,
        duplicate: false,
        covers: None,
        cm: if cm { cm_summary(o.roce) } else { None },
        icrc_ok: o.icrc_ok,
        label: String::new(),
        fields: fields(r, o.roce),
    };
    p.label = label(&p, r);
    p
}
