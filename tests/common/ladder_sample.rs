//! A hand-built ladder for tests/ladder_html.rs (the builder's output, as the model
//! says it looks): an RC flow with a loss and go-back-N, an RNR NAK and its wait, a gap,
//! a READ with a lost response and the ACK timeout, and a CM flow; labels and fields with
//! markup in them.
#![allow(dead_code)]

use roce_emu::ladder::model::{
    Aeth, Covers, Endpoint, Fate, Field, Flow, FlowKind, Ladder, Packet, Retransmit, Row, Side,
    Stats, WaitKind,
};
use std::net::{IpAddr, Ipv4Addr};

/// A label with markup in it (kept short: a label wider than the space between the
/// columns would cross the screenshot's arrow probe).
pub const NASTY: &str = "SEND_ONLY psn=103 A <&>\"' </text><script>x</script>";

pub fn ep(last: u8, qpn: u32) -> Endpoint {
    Endpoint {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
        qpn: Some(qpn),
    }
}

/// A packet as the builder would give it, with a label and tshark-style fields.
pub struct P {
    pub frame: usize,
    pub from: Side,
    pub name: &'static str,
    pub opcode: u8,
    pub psn: u32,
}

pub fn pkt(p: P) -> Packet {
    let ack_req = p.name.ends_with("LAST") || (p.name.ends_with("ONLY") && p.opcode < 0x0d);
    let payload_len = if p.name.contains("READ_REQUEST") || p.name == "ACKNOWLEDGE" {
        0
    } else {
        1024
    };
    let mut label = format!("{} psn={}", p.name, p.psn);
    if ack_req {
        label.push_str(" A");
    }
    if payload_len > 0 {
        label.push_str(&format!(" len={payload_len}"));
    }
    let destqp = if p.from == Side::Requester {
        0x12
    } else {
        0x11
    };
    let fields = vec![
        f("infiniband.bth.opcode", p.opcode.to_string()),
        f("infiniband.bth.se", "0".into()),
        f("infiniband.bth.m", "0".into()),
        f("infiniband.bth.padcnt", "0".into()),
        f("infiniband.bth.tver", "0".into()),
        f("infiniband.bth.p_key", "0xffff".into()),
        f("infiniband.bth.destqp", format!("0x{destqp:06x}")),
        f("infiniband.bth.a", (ack_req as u8).to_string()),
        f("infiniband.bth.psn", p.psn.to_string()),
        f("infiniband.invariant.crc", "0x1234abcd".into()),
    ];
    Packet {
        frame: p.frame,
        t_ns: p.frame as i128 * 10_000,
        from: p.from,
        fate: Fate::Delivered,
        opcode: p.opcode,
        name: p.name,
        psn: p.psn,
        ack_req,
        solicited: false,
        payload_len,
        ecn: 0,
        becn: false,
        aeth: None,
        reth: None,
        imm: None,
        retransmit: None,
        duplicate: false,
        covers: None,
        cm: None,
        icrc_ok: Some(true),
        label,
        fields,
    }
}

pub fn f(name: &'static str, value: String) -> Field {
    Field { name, value }
}

pub fn ack(frame: usize, psn: u32, aeth: Aeth, covers: Option<(u32, u32)>) -> Packet {
    let mut p = pkt(P {
        frame,
        from: Side::Responder,
        name: "ACKNOWLEDGE",
        opcode: 0x11,
        psn,
    });
    let (syn, kind, msn) = match aeth {
        Aeth::Ack { credits, msn } => (credits as u32, "ACK", msn),
        Aeth::Rnr { timer, msn, .. } => (0x20 | timer as u32, "RNR", msn),
        Aeth::Nak { code, msn } => (0x60 | code as u32, "NAK", msn),
    };
    p.aeth = Some(aeth);
    p.label = format!("ACKNOWLEDGE psn={psn} {kind} msn={msn}");
    p.fields
        .push(f("infiniband.aeth.syndrome", format!("0x{syn:02x}")));
    p.fields.push(f("infiniband.aeth.msn", msn.to_string()));
    p.covers = covers.map(|(first_psn, last_psn)| Covers {
        first_psn,
        last_psn,
        request_frame: None,
    });
    p
}

pub fn req(frame: usize, name: &'static str, opcode: u8, psn: u32) -> Packet {
    pkt(P {
        frame,
        from: Side::Requester,
        name,
        opcode,
        psn,
    })
}

pub fn row(p: Packet) -> Row {
    Row::Packet(Box::new(p))
}

/// An RC flow with a loss and go-back-N, an RNR NAK and its wait, a gap, a READ with a
/// lost response and the ACK timeout; and a CM flow.
pub fn sample() -> Ladder {
    let rows = vec![
        row(req(3, "RDMA_WRITE_FIRST", 0x06, 100)),
        row({
            let mut p = req(4, "RDMA_WRITE_MIDDLE", 0x07, 101);
            p.fate = Fate::Dropped;
            p
        }),
        row(req(5, "RDMA_WRITE_LAST", 0x08, 102)),
        row(ack(6, 101, Aeth::Nak { code: 0, msn: 0 }, None)),
        row({
            let mut p = req(7, "RDMA_WRITE_MIDDLE", 0x07, 101);
            p.retransmit = Some(Retransmit::AfterNak { nak_frame: 6 });
            p
        }),
        row({
            let mut p = req(8, "RDMA_WRITE_LAST", 0x08, 102);
            p.retransmit = Some(Retransmit::AfterNak { nak_frame: 6 });
            p
        }),
        row(ack(
            9,
            102,
            Aeth::Ack {
                credits: 31,
                msn: 1,
            },
            Some((100, 102)),
        )),
        row({
            let mut p = req(10, "SEND_ONLY", 0x04, 103);
            p.label = NASTY.to_string();
            p.fields.push(f("infiniband.immdt", "<&>\"'".into()));
            p
        }),
        row(ack(
            11,
            103,
            Aeth::Rnr {
                timer: 12,
                ms: 0.64,
                msn: 1,
            },
            None,
        )),
        Row::Wait {
            side: Side::Requester,
            kind: WaitKind::Rnr {
                timer: 12,
                ms: 0.64,
            },
            start_ns: 110_000,
            end_ns: 120_000,
        },
        row({
            let mut p = req(12, "SEND_ONLY", 0x04, 103);
            p.retransmit = Some(Retransmit::AfterRnr { rnr_frame: 11 });
            p
        }),
        row(ack(
            13,
            103,
            Aeth::Ack {
                credits: 31,
                msn: 2,
            },
            Some((103, 103)),
        )),
        Row::Gap {
            from: Side::Requester,
            first_psn: 104,
            count: 2,
            t_ns: 135_000,
        },
        row({
            let mut p = req(14, "RDMA_READ_REQUEST", 0x0c, 106);
            p.reth = Some((0x7f00_0000_1000, 0x1234, 2048));
            p.fields
                .push(f("infiniband.reth.va", "0x00007f0000001000".into()));
            p.fields
                .push(f("infiniband.reth.r_key", "0x00001234".into()));
            p.fields.push(f("infiniband.reth.dmalen", "2048".into()));
            p
        }),
        row({
            let mut p = pkt(P {
                frame: 15,
                from: Side::Responder,
                name: "RDMA_READ_RESPONSE_FIRST",
                opcode: 0x0d,
                psn: 106,
            });
            p.covers = Some(Covers {
                first_psn: 106,
                last_psn: 107,
                request_frame: Some(14),
            });
            p
        }),
        row({
            let mut p = pkt(P {
                frame: 16,
                from: Side::Responder,
                name: "RDMA_READ_RESPONSE_LAST",
                opcode: 0x0f,
                psn: 107,
            });
            p.covers = Some(Covers {
                first_psn: 106,
                last_psn: 107,
                request_frame: Some(14),
            });
            p.fate = Fate::Dropped;
            p
        }),
        Row::Wait {
            side: Side::Requester,
            kind: WaitKind::AckTimeout,
            start_ns: 160_000,
            end_ns: 500_000,
        },
        row({
            let mut p = req(17, "RDMA_READ_REQUEST", 0x0c, 107);
            p.retransmit = Some(Retransmit::AfterTimeout);
            p.t_ns = 500_000;
            p
        }),
    ];
    let cm_rows = ["REQ", "REP", "RTU"]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let from = if i == 1 {
                Side::Responder
            } else {
                Side::Requester
            };
            let mut p = pkt(P {
                frame: i + 1,
                from,
                name: "SEND_ONLY",
                opcode: 0x64,
                psn: i as u32,
            });
            p.cm = Some(m_summary(m));
            // The REQ's label is the whole summary, too long for the arrow: cut there.
            p.label = if i == 0 {
                format!(
                    "{} qpn=0x11 psn=0x297dc6 mtu=3 cma_hdr 10.0.0.1:33028",
                    m_summary(m)
                )
            } else {
                format!("{m} lcid=0x1")
            };
            row(p)
        })
        .collect();
    let packets = 18;
    Ladder {
        flows: vec![
            Flow {
                kind: FlowKind::Rc,
                requester: ep(1, 0x11),
                responder: ep(2, 0x12),
                rows,
            },
            Flow {
                kind: FlowKind::Cm,
                requester: ep(1, 1),
                responder: Endpoint {
                    ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                    qpn: None,
                },
                rows: cm_rows,
            },
        ],
        stats: Stats {
            packets,
            malformed: 0,
            bad_icrc: 0,
        },
    }
}

pub fn m_summary(m: &str) -> String {
    format!("{m} lcid=0x1 sid=0x0000000001060000 <x&y>")
}
